//! Lock wrappers that lift a sequential allocator into a [`BlockAlloc`].

pub mod per_level;
pub mod yield_mutex;

use lock_api::{Mutex, RawMutex};

pub use per_level::{PerLevel, PerLevelSpin, PerLevelYield};
pub use yield_mutex::YieldMutex;

use crate::{BlockAlloc, Error, SeqBlockAlloc};

mod percpu;
pub use percpu::PerCpu;

/// A sequential allocator behind one global lock: the "spin-locked buddy" of the NBBS paper
/// when `A` is Knuth's buddy and `R` the default spinlock.
pub struct Locked<A, R = spin::Mutex<()>> {
    inner: Mutex<R, A>,
    total_units: usize,
    max_order: u32,
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
        Locked {
            total_units: alloc.total_units(),
            max_order: alloc.max_order(),
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
}

impl<A: SeqBlockAlloc, R: RawMutex + Sync + Send> BlockAlloc for Locked<A, R> {
    fn alloc(&self, order: u32, _core: usize) -> Result<usize, Error> {
        self.inner.lock().alloc(order)
    }

    fn free(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
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
}
