//! A core's cache held by one caller ([`Cached::pin`]): the magazines' [`HeldCore`], whose
//! operations on cached orders take no lock.

use core::marker::PhantomData;

use super::cache::CoreCache;
use super::{Backend, Cached};
use crate::locked::YieldMutex;
use crate::{BlockAlloc, Error, HeldCore};

/// `core`'s cache held by one caller from [`Cached::pin`] until dropped: its operations on
/// cached orders take no lock. Whatever else needs the cache waits meanwhile; allocations
/// that may need other caches (uncached orders, an empty backend: both may drain) let it go
/// for their duration, so a pinned cache is never held while another is taken. It stays on
/// the thread that took it (not `Send`), which has noted the pin ([`YieldMutex::pin`]).
pub(crate) struct Pinned<'a, B> {
    cached: &'a Cached<B>,
    cache: lock_api::MutexGuard<'a, YieldMutex, CoreCache>,
    core: usize,
    on_this_thread: PhantomData<*const ()>,
}

impl<B: Backend> Cached<B> {
    /// Holds `core`'s cache (waiting for it if another caller has it).
    pub(crate) fn pin(&self, core: usize) -> Pinned<'_, B> {
        let pinned = Pinned {
            cached: self,
            cache: self.cache(core).lock(),
            core,
            on_this_thread: PhantomData,
        };
        pinned.lock().pin();
        pinned
    }
}

impl<B> Pinned<'_, B> {
    /// The core whose cache is held.
    pub(crate) fn core(&self) -> usize {
        self.core
    }

    /// The held cache's raw lock, to note the pin on.
    fn lock(&self) -> &YieldMutex {
        // SAFETY: only to note and end the pin (`YieldMutex::pin`), never to unlock: the
        // guard stays the one owner of the lock.
        unsafe { lock_api::MutexGuard::mutex(&self.cache).raw() }
    }
}

impl<B: Backend> Pinned<'_, B> {
    /// An allocation the backend refused: the shared path, with the cache let go meanwhile
    /// (it drains every cache, ours included, before it answers `OutOfMemory`). Out of
    /// line, to keep the pinned hot path small.
    #[cold]
    #[inline(never)]
    fn alloc_shared(&mut self, order: u32) -> Result<usize, Error> {
        self.unpinned(|cached, core| cached.alloc(order, core))
    }

    /// Ends a block that cache `owner` holds under that cache's lock, with this cache let
    /// go meanwhile, so that no two caches are held at once. Out of line, as `alloc_shared`.
    #[cold]
    #[inline(never)]
    fn end_elsewhere(&mut self, index: usize, slot: usize, owner: usize) -> Result<(), Error> {
        self.unpinned(|cached, _| cached.end_held_elsewhere(index, slot, owner))
    }

    /// Runs `f` on the caches and the pinned core with the pinned cache let go.
    fn unpinned<R>(&mut self, f: impl FnOnce(&Cached<B>, usize) -> R) -> R {
        let (cached, core) = (self.cached, self.core);
        self.lock().unpin();
        let answer = lock_api::MutexGuard::unlocked(&mut self.cache, || f(cached, core));
        self.lock().pin();
        answer
    }
}

impl<B> Drop for Pinned<'_, B> {
    fn drop(&mut self) {
        self.lock().unpin();
    }
}

impl<B: Backend> HeldCore for Pinned<'_, B> {
    /// See [`BlockAlloc::alloc`].
    #[inline]
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        let cached = self.cached;
        if order > cached.max_order() {
            return Err(Error::BadOrder);
        }
        let slot = cached.slot(order);
        // An uncached order goes to the backend with the cache still held, as the shared
        // path sends it there without the cache (every path takes a core's cache before the
        // backend, never after); only a refusal needs the cache let go, to drain it.
        let found = match slot {
            Some(slot) => cached.take(&mut self.cache, slot, order, self.core),
            None => cached.backend.shared().alloc(order, self.core),
        };
        match found {
            Err(Error::OutOfMemory) => self.alloc_shared(order),
            other => other,
        }
    }

    /// See [`BlockAlloc::free`]. A block that another cache holds is ended under that
    /// cache's lock, with this cache let go meanwhile, and parked here.
    #[inline]
    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        let (cached, core) = (self.cached, self.core);
        cached.reserved.check_free(index, order)?;
        if let Some(freed) = cached.free_if_direct(index, order, core) {
            return freed;
        }
        let Some(slot) = cached.cached_slot(index, order, core)? else {
            return Ok(());
        };
        if let Some(owner) = cached.end_in(index, slot, cached.cache_index(core))? {
            self.end_elsewhere(index, slot, owner)?;
        }
        cached.park(&mut self.cache, slot, index, order, core);
        Ok(())
    }
}
