//! The Linux-like buddy: a sequential buddy behind one spinlock plus per-core caches of free
//! blocks for orders 0–3 and 9, refilled and spilled in batches with a high watermark, as
//! Linux's per-CPU page lists do (LLFree paper §2, "Problem 3").
//!
//! ```text
//!  PerCpu
//!  └── Cached<Locked<A>>
//!      ├── backend: Locked<A>           one spinlock, serialises every split and merge
//!      ├── caches:  [CachePadded<Mutex<YieldMutex, CoreCache>>; cores]
//!      │              per cached order: a list of free blocks (allocated in the buddy),
//!      │              all in one fixed array per core
//!      └── states:  [u8; units]         Free | Live | Owned(core) | Cached per block start
//! ```
//!
//! The caches and the table of block states are the crate's one per-core cache
//! implementation (`cached`), shared with [`Magazine`](crate::magazine::Magazine): a block
//! in a cache is allocated as far as the buddy knows, so the buddy cannot classify frees of
//! the cached orders; `states` does, exactly, and one CAS there decides a raced double free
//! (blocks of the uncached orders are not recorded: the buddy answers their frees). Locks
//! are taken in the order cache, then buddy, and never two caches at once. Refills and
//! spills take the buddy's lock once per batch. [`BlockAlloc::with_core`] holds a core's
//! cache for a closure, as a kernel with preemption off holds its per-CPU lists: its pairs
//! of cached orders then take no lock.

use lock_api::RawMutex;

use crate::cached::{block_alloc_via_cached, Cached, Policy};
use crate::magazine::Settings;
use crate::{BlockAlloc, Config, Error, Locked, SeqBlockAlloc};

/// Linux's per-CPU lists: orders 0–3 and the 2 MiB huge frame, order 9 (since 5.13; LLFree
/// paper §2); a batch of 64 units (Linux's per-CPU batch is 63 pages for zones of a gigabyte
/// and more); a high watermark of 256 units per small order, two blocks of order 9 (1024
/// frames, the size the LLFree paper gives for Linux's order-9 per-CPU caches).
static LINUX: Policy = Policy::new(&[0, 1, 2, 3, 9], 64, 256);

/// A sequential buddy `A` behind one lock `R` (by default a test-and-set spinlock), with
/// Linux-like per-core caches. With Knuth's buddy as `A` this is the "Linux" baseline of the
/// NBBS and LLFree papers; Linux's zone lock is a fair queued lock, so a fair `R` (a ticket
/// lock) is the closer model under contention.
///
/// An allocation that the buddy cannot serve drains every cache and tries once more, so it
/// fails only if no free aligned block exists (with no concurrent frees in flight).
///
/// `alloc_at`, `block_of` and `try_alloc` work as the buddy's do, with cached blocks free: see
/// [`Magazine`](crate::magazine::Magazine), which shares this implementation.
pub struct PerCpu<A, R = spin::Mutex<()>> {
    cached: Cached<Locked<A, R>>,
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> PerCpu<A, R> {
    /// Puts per-core caches for `cores` cores in front of the buddy `inner`, adopting the
    /// blocks it has out as [`Magazine`](crate::magazine::Magazine) does. Fails with
    /// [`Error::InvalidConfig`] if `cores` is not in `1..=MAX_CORES`, or if `inner` has blocks
    /// out and cannot name them.
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::locked::PerCpu;
    /// use buddyfree::{BlockAlloc, Config};
    ///
    /// let linux = PerCpu::<_>::new(Knuth::new(Config::new(1 << 12, 9))?, 2)?;
    /// let page = linux.alloc(0, 1)?; // served through core 1's cache
    /// linux.free(page, 0, 1)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(inner: A, cores: usize) -> Result<Self, Error> {
        Ok(PerCpu {
            cached: Cached::new(Locked::new(inner), cores, &LINUX)?,
        })
    }

    /// Builds the buddy with `build` over `config` and puts `config.cores` caches in front,
    /// with the default [`Settings`] ([`PerCpu::with_settings`] for others).
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::locked::PerCpu;
    /// use buddyfree::{BlockAlloc, Config};
    ///
    /// // `PerCpu<Knuth>`: the default lock (name another with `PerCpu::<Knuth, MyLock>`).
    /// let linux = PerCpu::<Knuth>::with_config(Config::new(1 << 12, 9).with_cores(4), Knuth::new)?;
    /// assert_eq!(linux.total_units(), 1 << 12);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn with_config(
        config: Config,
        build: impl FnOnce(Config) -> Result<A, Error>,
    ) -> Result<Self, Error> {
        config.validate()?;
        PerCpu::new(build(config)?, config.cores)
    }

    /// The same caches with the frees [`Settings::interrupt_safe_frees`] chooses. Their
    /// lists are Linux's whatever the heap, so [`Settings::parking_limit`], which chooses a
    /// magazine's, changes nothing here.
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::locked::PerCpu;
    /// use buddyfree::magazine::Settings;
    /// use buddyfree::{BlockAlloc, Config};
    ///
    /// let config = Config::new(1 << 12, 9).with_cores(2);
    /// let linux = PerCpu::<Knuth>::with_config(config, Knuth::new)?
    ///     .with_settings(Settings::new().with_interrupt_safe_frees());
    /// let page = linux.alloc(0, 1)?;
    /// // Core 1's cache, which handed the page out, is held (an interrupted call).
    /// linux.with_core(1, &mut |_| assert_eq!(linux.try_free(page, 0, 0), Ok(())));
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.cached.set_holding(!settings.interrupt_safe_frees);
        self
    }

    /// The same caches with every free of a cached order decided by a compare-and-swap on
    /// the block's state byte, as
    /// [`Magazine::with_interrupt_safe_frees`](crate::magazine::Magazine::with_interrupt_safe_frees)
    /// describes.
    #[must_use]
    pub fn with_interrupt_safe_frees(mut self) -> Self {
        self.cached.set_holding(false);
        self
    }

    /// Gives every cached block back to the buddy and returns it; the blocks still
    /// allocated through the caches are allocated in it.
    pub fn into_inner(self) -> A {
        self.cached.into_backend().into_inner()
    }
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> BlockAlloc for PerCpu<A, R> {
    block_alloc_via_cached!(cached);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::model::Model;
    use crate::{ConfigRule, HeldCore};

    fn cached_units(alloc: &PerCpu<Model>, core: usize) -> usize {
        alloc.cached.cached_units(core)
    }

    /// Every list's batch fits the buffer a free's spill takes it into before it lets the
    /// cache go.
    #[test]
    fn every_batch_fits_the_spill_buffer() {
        assert!(LINUX.largest_batch() <= crate::cached::SPILL_BUFFER);
    }

    #[test]
    fn refills_one_batch_and_spills_above_the_watermark() {
        let alloc =
            PerCpu::<Model>::with_config(Config::new(1024, 9).with_cores(2), Model::new).unwrap();
        let first = alloc.alloc(0, 1).unwrap();
        assert_eq!(
            cached_units(&alloc, 1),
            LINUX.batch(LINUX.slot(0).unwrap()) - 1
        );
        assert_eq!(cached_units(&alloc, 0), 0);
        let mut blocks: Vec<usize> = (0..400).map(|_| alloc.alloc(0, 1).unwrap()).collect();
        blocks.push(first);
        for &i in &blocks {
            alloc.free(i, 0, 1).unwrap();
            assert!(cached_units(&alloc, 1) <= 256, "above the watermark");
        }
        assert!(cached_units(&alloc, 1) > 256 - LINUX.batch(LINUX.slot(0).unwrap()));
        assert_eq!(alloc.free_units(), 1024);
        alloc.drain();
        assert_eq!(cached_units(&alloc, 1), 0);
        assert_eq!(alloc.cached.backend().with(|b| b.free_units()), 1024);
    }

    /// A block freed on another core than the one whose cache handed it out is parked in
    /// the freeing core's cache (its holder's lock only decides the free), also from a
    /// pinned core; a second free of it is refused.
    #[test]
    fn a_free_parks_in_the_freeing_cores_cache() {
        let linux =
            PerCpu::<Model>::with_config(Config::new(1024, 9).with_cores(2), Model::new).unwrap();
        let (first, second) = (linux.alloc(0, 0).unwrap(), linux.alloc(0, 0).unwrap());
        let held = cached_units(&linux, 0);
        linux.free(first, 0, 1).unwrap();
        assert_eq!(
            (cached_units(&linux, 0), cached_units(&linux, 1)),
            (held, 1)
        );
        assert_eq!(linux.free(first, 0, 0), Err(Error::NotAllocated));
        let mut pin = linux.cached.pin(1);
        pin.free(second, 0).unwrap();
        assert_eq!(pin.free(second, 0), Err(Error::NotAllocated));
        drop(pin);
        assert_eq!(
            (cached_units(&linux, 0), cached_units(&linux, 1)),
            (held, 2)
        );
        assert_eq!(linux.free_units(), 1024);
    }

    #[test]
    fn adopts_the_blocks_of_a_used_buddy_and_gives_them_back_with_it() {
        let mut used = Model::new(Config::new(64, 4)).unwrap();
        let page = used.alloc(0).unwrap();
        let big = used.alloc(4).unwrap();
        let linux = PerCpu::<Model>::new(used, 2).unwrap();
        assert_eq!(linux.free(page, 1, 0), Err(Error::OrderMismatch));
        linux.free(page, 0, 1).unwrap();
        assert_eq!(linux.free(page, 0, 0), Err(Error::NotAllocated));
        assert!(cached_units(&linux, 1) > 0, "parked");
        let mut buddy = linux.into_inner();
        assert_eq!(buddy.free_units(), 64 - 16);
        buddy.free(big, 4).unwrap();
    }

    /// `try_free` parks a block in the cache that handed it out, whichever core frees it,
    /// and answers `WouldBlock` while that cache is held (the block stays live, freed once
    /// later). A block handed out with no cache held (`alloc_at`) goes straight to the buddy
    /// while the freeing core's cache is held, and answers `WouldBlock` with the buddy's lock
    /// held too.
    #[test]
    fn try_free_would_block_only_where_the_locks_it_needs_are_held() {
        let linux =
            PerCpu::<Model>::with_config(Config::new(1024, 9).with_cores(2), Model::new).unwrap();
        let page = linux.alloc(0, 0).unwrap();
        let other = linux.alloc(0, 0).unwrap();
        let pin = linux.cached.pin(1);
        assert_eq!(linux.try_free(other, 0, 1), Ok(()));
        assert_eq!(
            cached_units(&linux, 0),
            LINUX.batch(0) - 1,
            "parked by its holder"
        );
        drop(pin);
        let pin = linux.cached.pin(0);
        assert_eq!(linux.try_free(page, 0, 1), Err(Error::WouldBlock));
        drop(pin);
        assert_eq!(linux.free(other, 0, 1), Err(Error::NotAllocated));
        assert_eq!(linux.free(page, 0, 1), Ok(()));
        assert_eq!(linux.try_free(page, 0, 1), Err(Error::NotAllocated));

        linux.alloc_at(512, 0, 0).unwrap();
        linux.alloc_at(513, 0, 0).unwrap();
        let pin = linux.cached.pin(1);
        let before = cached_units(&linux, 0);
        assert_eq!(linux.try_free(512, 0, 1), Ok(()));
        assert_eq!(cached_units(&linux, 0), before, "not parked");
        let answer = linux.cached.backend().with(|_| linux.try_free(513, 0, 1));
        assert_eq!(answer, Err(Error::WouldBlock));
        drop(pin);
        assert_eq!(linux.free(512, 0, 1), Err(Error::NotAllocated));
        assert_eq!(linux.free(513, 0, 1), Ok(()));
        linux.drain();
        assert_eq!(linux.free_units(), 1024);
    }

    #[test]
    fn rejects_zero_cores() {
        let fresh = Model::new(Config::new(16, 2)).unwrap();
        assert_eq!(
            PerCpu::<Model>::new(fresh, 0).err(),
            Some(Error::InvalidConfig(ConfigRule::NoCores))
        );
    }
}
