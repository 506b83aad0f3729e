//! Lock wrappers that lift a sequential allocator into a [`BlockAlloc`].

use lock_api::{Mutex, MutexGuard, RawMutex};

pub use crate::yield_mutex::YieldMutex;

use crate::range;
use crate::reserved::Reserved;
use crate::{BlockAlloc, Capabilities, Class, Error, SeqBlockAlloc};

/// A sequential allocator behind one global lock: the "spin-locked buddy" of the NBBS paper
/// when `A` is Knuth's buddy and `R` the default spinlock.
pub struct Locked<A, R = spin::Mutex<()>> {
    inner: Mutex<R, A>,
    total_units: usize,
    max_order: u32,
    /// What `inner` offers, read once so that asking takes no lock.
    capabilities: Capabilities,
    /// Units of the boot reservation, which frees refuse (`reserved.rs`).
    reserved: Reserved,
}

impl<A: SeqBlockAlloc, R: RawMutex> Locked<A, R> {
    /// Wraps `alloc` in a lock.
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::{BlockAlloc, Config, Locked};
    ///
    /// // Any `SeqBlockAlloc` behind one spinlock becomes a thread-safe `BlockAlloc`.
    /// let shared = Locked::<Knuth>::new(Knuth::new(Config::new(256, 4))?);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| shared.alloc(4, 1).unwrap());
    /// });
    /// assert_eq!(shared.free_units(), 256 - 16);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub fn new(alloc: A) -> Self {
        use Capabilities as C;
        let inner = alloc.capabilities();
        Locked {
            total_units: alloc.total_units(),
            max_order: alloc.max_order(),
            // `try_alloc` and `try_free` by a `try_lock`, `inner`'s `alloc_at` and
            // `block_of`, and `try_block_of` where there is a `block_of` to run under a
            // `try_lock`.
            capabilities: C::TRY_ALLOC
                .union(C::TRY_FREE)
                .union(inner.intersection(C::ALLOC_AT.union(C::BLOCK_OF)))
                .union(match inner.contains(C::BLOCK_OF) {
                    true => C::TRY_BLOCK_OF,
                    false => C::NONE,
                }),
            reserved: Reserved::new(alloc.total_units(), alloc.max_order()),
            inner: Mutex::new(alloc),
        }
    }

    /// Runs `f` on the sequential allocator with the lock held.
    pub fn with<T>(&self, f: impl FnOnce(&mut A) -> T) -> T {
        f(&mut self.inner.lock())
    }

    /// The sequential allocator, once no other thread can reach it.
    pub fn into_inner(self) -> A {
        self.inner.into_inner()
    }

    /// The allocator, if the lock is free now; otherwise [`Error::WouldBlock`].
    #[inline]
    fn try_lock(&self) -> Result<MutexGuard<'_, R, A>, Error> {
        self.inner.try_lock().ok_or(Error::WouldBlock)
    }
}

impl<A: SeqBlockAlloc, R: RawMutex + Sync + Send> crate::magazine::Sealed for Locked<A, R> {}

/// Magazines in front of a locked allocator refill and spill with its defaults: a batch is
/// one lock per block.
impl<A: SeqBlockAlloc, R: RawMutex + Sync + Send> crate::magazine::Backend for Locked<A, R> {}

impl<A: SeqBlockAlloc, R: RawMutex + Sync + Send> BlockAlloc for Locked<A, R> {
    fn alloc(&self, order: u32, _core: usize) -> Result<usize, Error> {
        self.inner.lock().alloc(order)
    }

    fn alloc_class(&self, order: u32, class: Class, _core: usize) -> Result<usize, Error> {
        self.inner.lock().alloc_class(order, class)
    }

    fn free(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
        self.reserved.check_free(index, order, false)?;
        self.inner.lock().free(index, order)
    }

    fn free_units(&self) -> usize {
        self.inner.lock().free_units()
    }

    fn total_units(&self) -> usize {
        self.total_units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// Only if the lock is free at once: a lock holder may be the interrupted code itself.
    fn try_alloc(&self, order: u32, _core: usize) -> Result<usize, Error> {
        self.try_lock()?.alloc(order)
    }

    /// Only if the lock is free at once, as `try_alloc`.
    fn try_free(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
        self.reserved.check_free(index, order, true)?;
        self.try_lock()?.free(index, order)
    }

    fn alloc_at(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
        self.inner.lock().alloc_at(index, order)
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.inner.lock().block_of(index)
    }

    /// `block_of` if the lock is free at once, else [`Error::WouldBlock`].
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.try_lock()?.block_of(index)
    }

    /// The whole walk under one lock.
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        self.inner.lock().next_block(from)
    }

    /// The whole range under one lock: no other operation sees it half done.
    fn free_range(&self, start: usize, len: usize, _core: usize) -> Result<(), Error> {
        range::free_range(&self.reserved, &mut *self.inner.lock(), start, len)
    }

    fn reserve_range(&self, start: usize, len: usize, _core: usize) -> Result<(), Error> {
        range::reserve_range(&self.reserved, &mut *self.inner.lock(), start, len)
    }
}
