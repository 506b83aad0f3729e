//! A core's cache held by one caller ([`Magazine::pin`]): the magazines' [`HeldCore`], whose
//! operations on cached orders take no lock.

use core::marker::PhantomData;

use super::CacheGuard;
use crate::magazine::{Backend, Magazine};
use crate::yield_mutex::{pins, YieldMutex};
use crate::{BlockAlloc, Error, HeldCore};

/// A core's magazine held by one thread, from [`Magazine::pin`]; released when dropped: its
/// operations on orders 0–9 take no lock. Whatever else needs the magazine waits meanwhile;
/// allocations that may need other magazines (an empty backend: it may drain) let it go for
/// their duration, so a pinned magazine is never held while another is taken. It stays on
/// the thread that took it (it is not `Send`), as a lock guard does:
///
/// ```compile_fail
/// use buddyfree::llfree::LLFree;
/// use buddyfree::magazine::Magazine;
/// use buddyfree::Config;
///
/// let config = Config::new(1 << 12, 10);
/// let fast = Magazine::new(config, LLFree::new(config).unwrap()).unwrap();
/// let held = fast.pin(0);
/// std::thread::scope(|s| {
///     s.spawn(move || drop(held));
/// });
/// ```
pub struct PinnedCore<'a, A> {
    magazine: &'a Magazine<A>,
    /// The held cache, whose lock notes the pin on this thread ([`pins::pin`]).
    cache: CacheGuard<'a>,
    core: usize,
    on_this_thread: PhantomData<*const ()>,
}

impl<A: Backend> Magazine<A> {
    /// Holds `core`'s magazine until the handle is dropped (waiting for it if another
    /// thread has it), so that the handle's allocations and frees of orders 0–9 take no
    /// lock: a pair costs the state table's one compare-and-swap (in the free) and a store,
    /// as a kernel's per-CPU lists do with preemption off. Allocations and frees of other
    /// orders go straight to the backend, the magazine still held; allocations the backend
    /// refuses go the shared way and let the magazine go meanwhile (they may drain every
    /// magazine).
    ///
    /// A pin is a held lock. Hold it for a burst of operations, not across waits for other
    /// threads: other threads calling with `core`, and every drain (another thread's
    /// out-of-memory answer, [`BlockAlloc::drain`], an [`BlockAlloc::alloc_at`] over a parked
    /// block) and [`BlockAlloc::free_units`], wait until it is dropped. The same thread
    /// must not call those methods (nor take a second pin of `core`) while it holds the pin:
    /// they would wait for it forever (with `std` they panic instead, naming the cause, once
    /// their wait stops spinning). Behind a `dyn BlockAlloc` (the registry, the C ABI),
    /// [`BlockAlloc::with_core`] holds the magazine the same way for the length of a call.
    ///
    /// ```
    /// use buddyfree::llfree::LLFree;
    /// use buddyfree::magazine::Magazine;
    /// use buddyfree::{BlockAlloc, Config, Error, HeldCore};
    ///
    /// let config = Config::new(1 << 12, 10).with_cores(2);
    /// let fast = Magazine::new(config, LLFree::new(config)?)?;
    /// let mut core1 = fast.pin(1);
    /// let pages: Vec<usize> = (0..8).map(|_| core1.alloc(0)).collect::<Result<_, _>>()?;
    /// for &page in &pages {
    ///     core1.free(page, 0)?;
    /// }
    /// assert_eq!(core1.free(pages[0], 0), Err(Error::NotAllocated));
    /// drop(core1);
    /// fast.drain();
    /// assert_eq!(fast.free_units(), 1 << 12);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn pin(&self, core: usize) -> PinnedCore<'_, A> {
        let pinned = PinnedCore {
            magazine: self,
            cache: self.cache(core).lock(),
            core,
            on_this_thread: PhantomData,
        };
        pins::pin(pinned.lock());
        pinned
    }
}

impl<A> PinnedCore<'_, A> {
    /// The core whose magazine is held.
    pub fn core(&self) -> usize {
        self.core
    }

    /// The held cache's raw lock, to note the pin on.
    fn lock(&self) -> &YieldMutex {
        // SAFETY: only to note and end the pin (`pins::pin`), never to unlock: the
        // guard stays the one owner of the lock.
        unsafe { lock_api::MutexGuard::mutex(&self.cache).raw() }
    }

    /// Runs `f` on the magazines and the pinned core with the pinned cache let go: an
    /// allocation the backend refused (the shared path, which drains every cache, ours
    /// included, before it answers `OutOfMemory`), or the end of a block that another cache
    /// holds, under that cache's lock, so that no two caches are held at once. Out of line,
    /// to keep the pinned hot path small.
    #[cold]
    #[inline(never)]
    fn unpinned<R>(&mut self, f: impl FnOnce(&Magazine<A>, usize) -> R) -> R {
        let (magazine, core) = (self.magazine, self.core);
        pins::unpin(self.lock());
        let answer = CacheGuard::unlocked(&mut self.cache, || f(magazine, core));
        pins::pin(self.lock());
        answer
    }
}

impl<A> Drop for PinnedCore<'_, A> {
    fn drop(&mut self) {
        pins::unpin(self.lock());
    }
}

/// Its allocations and frees ([`HeldCore`], a trait to import) take no lock.
impl<A: Backend> HeldCore for PinnedCore<'_, A> {
    /// See [`BlockAlloc::alloc`].
    #[inline]
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        let magazine = self.magazine;
        // Not `check_order`: its `?` costs this fast path an instruction (callgrind).
        if order > magazine.max_order() {
            return Err(Error::BadOrder);
        }
        // An uncached order goes to the backend with the cache still held, as the shared
        // path sends it there without the cache (every path takes a core's cache before the
        // backend, never after); only a refusal needs the cache let go, to drain it.
        let found = match magazine.policy.slot(order) {
            Some(slot) => magazine.take(&mut self.cache, slot, self.core),
            None => magazine.backend.alloc(order, self.core),
        };
        match found {
            Err(Error::OutOfMemory) => self.unpinned(|magazine, core| magazine.alloc(order, core)),
            other => other,
        }
    }

    /// See [`BlockAlloc::free`]. A block that another cache holds is ended under that
    /// cache's lock, with this cache let go meanwhile, and parked here.
    #[inline]
    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        let (magazine, core) = (self.magazine, self.core);
        let Some(slot) = magazine.cached_slot(index, order, core)? else {
            return Ok(());
        };
        if let Some(owner) = magazine.end_in(index, slot, magazine.cache_index(core))? {
            self.unpinned(|magazine, _| magazine.end_held_elsewhere(index, slot, owner))?;
        }
        magazine.park(&mut self.cache, slot, index, order, core);
        Ok(())
    }
}
