//! The Linux-like buddy: a sequential buddy behind one spinlock plus per-core caches of free
//! blocks for orders 0–3 and 9, refilled and spilled in batches with a high watermark, as
//! Linux's per-CPU page lists do (LLFree paper §2, "Problem 3").
//!
//! ```text
//!  PerCpu
//!  ├── buddy:  Locked<A>              one spinlock, serialises every split and merge
//!  ├── caches: [CachePadded<spin::Mutex<CoreCache>>; cores]
//!  │             per cached order: a list of free blocks (allocated in the buddy)
//!  └── states: [u8; units]            Free | Live(order) | Cached(order) per block start
//! ```
//!
//! A block in a cache is allocated as far as the buddy knows, so the buddy cannot classify
//! frees; `states` does, exactly, and one CAS there decides a raced double free. Locks are
//! taken in the order cache, then buddy, and never two caches at once.

mod cache;
mod states;

use alloc::boxed::Box;

use lock_api::RawMutex;

use crate::sync::CachePadded;
use crate::{check_block, BlockAlloc, Config, ConfigRule, Error, Locked, SeqBlockAlloc};
use cache::CoreCache;
use states::{BlockStates, State};

/// A sequential buddy `A` behind one lock `R` (by default a test-and-set spinlock), with
/// Linux-like per-core caches. With Knuth's buddy as `A` this is the "Linux" baseline of the
/// NBBS and LLFree papers; Linux's zone lock is a fair queued lock, so a fair `R` (a ticket
/// lock) is the closer model under contention.
///
/// An allocation that the buddy cannot serve drains every cache and tries once more, so it
/// fails only if no free aligned block exists (with no concurrent frees in flight).
pub struct PerCpu<A, R = spin::Mutex<()>> {
    buddy: Locked<A, R>,
    caches: Box<[CachePadded<spin::Mutex<CoreCache>>]>,
    states: BlockStates,
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> PerCpu<A, R> {
    /// Puts per-core caches for `cores` cores in front of the (empty) buddy `inner`.
    /// Fails with [`Error::InvalidConfig`] if `cores` is not in `1..=MAX_CORES` or `inner` has
    /// blocks allocated.
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
        crate::config::check_cores(cores)?;
        if inner.free_units() != inner.total_units() {
            return Err(ConfigRule::InnerInUse.into());
        }
        Ok(PerCpu {
            caches: crate::config::filled(cores, |_| CachePadded::default())?,
            states: BlockStates::new(inner.total_units())?,
            buddy: Locked::new(inner),
        })
    }

    /// Builds the buddy with `build` over `config` and puts `config.cores` caches in front.
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

    /// The cache slot of `order`, if this allocator caches it.
    fn slot(&self, order: u32) -> Option<usize> {
        cache::slot(order).filter(|_| order <= self.max_order())
    }

    fn cache(&self, core: usize) -> &spin::Mutex<CoreCache> {
        &self.caches[crate::core_slot(core, self.caches.len())]
    }

    /// Takes a block of the order at `slot` from `core`'s cache, refilling it with one batch
    /// from the buddy if it is empty.
    fn alloc_cached(&self, slot: usize, order: u32, core: usize) -> Result<usize, Error> {
        let mut cache = self.cache(core).lock();
        if let Some(index) = cache.pop(slot) {
            return Ok(index);
        }
        self.buddy.with(|buddy| {
            let first = buddy.alloc(order)?;
            for _ in 1..cache::batch(order) {
                let Ok(index) = buddy.alloc(order) else { break };
                self.states.set(index, State::Cached(order));
                cache.push(slot, index);
            }
            Ok(first)
        })
    }

    /// Returns a block that left every cache (its state already `Free`) to the buddy.
    fn give_back(buddy: &mut A, index: usize, order: u32) {
        // `states` had the block as cached or live, so the buddy has it allocated.
        buddy
            .free(index, order)
            .expect("the buddy refused a block the per-core caches owned");
    }
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> BlockAlloc for PerCpu<A, R> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        if order > self.max_order() {
            return Err(Error::BadOrder);
        }
        let found = match self.slot(order) {
            Some(slot) => self.alloc_cached(slot, order, core),
            None => self.buddy.with(|buddy| buddy.alloc(order)),
        };
        let index = match found {
            // Free blocks may sit in caches (this core's of other orders, or other cores'):
            // give them back so they merge, then ask once more.
            Err(Error::OutOfMemory) => {
                self.drain();
                self.buddy.with(|buddy| buddy.alloc(order))?
            }
            other => other?,
        };
        self.states.set(index, State::Live(order));
        Ok(index)
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order(), self.total_units())?;
        let Some(slot) = self.slot(order) else {
            self.states.release(index, order, State::Free)?;
            self.buddy
                .with(|buddy| Self::give_back(buddy, index, order));
            return Ok(());
        };
        self.states.release(index, order, State::Cached(order))?;
        let mut cache = self.cache(core).lock();
        cache.push(slot, index);
        let mut spill = cache.spill(slot).peekable();
        if spill.peek().is_some() {
            self.buddy.with(|buddy| {
                for index in spill {
                    self.states.set(index, State::Free);
                    Self::give_back(buddy, index, order);
                }
            });
        }
        Ok(())
    }

    fn free_units(&self) -> usize {
        let cached: usize = self.caches.iter().map(|c| c.lock().units()).sum();
        self.buddy.with(|buddy| buddy.free_units()) + cached
    }

    fn total_units(&self) -> usize {
        // `Locked` keeps both without taking its lock.
        self.buddy.total_units()
    }

    fn max_order(&self) -> u32 {
        self.buddy.max_order()
    }

    fn drain(&self) {
        for cache in self.caches.iter() {
            let mut cache = cache.lock();
            if cache.units() == 0 {
                continue;
            }
            self.buddy.with(|buddy| {
                for (index, order) in cache.take_all() {
                    self.states.set(index, State::Free);
                    Self::give_back(buddy, index, order);
                }
            });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::model::Model;

    fn cached_units(alloc: &PerCpu<Model>, core: usize) -> usize {
        alloc.cache(core).lock().units()
    }

    #[test]
    fn refills_one_batch_and_spills_above_the_watermark() {
        let alloc =
            PerCpu::<Model>::with_config(Config::new(1024, 9).with_cores(2), Model::new).unwrap();
        let first = alloc.alloc(0, 1).unwrap();
        assert_eq!(cached_units(&alloc, 1), cache::batch(0) - 1);
        assert_eq!(cached_units(&alloc, 0), 0);
        let mut blocks: Vec<usize> = (0..400).map(|_| alloc.alloc(0, 1).unwrap()).collect();
        blocks.push(first);
        for &i in &blocks {
            alloc.free(i, 0, 1).unwrap();
            assert!(cached_units(&alloc, 1) <= 256, "above the watermark");
        }
        assert!(cached_units(&alloc, 1) > 256 - cache::batch(0));
        assert_eq!(alloc.free_units(), 1024);
        alloc.drain();
        assert_eq!(cached_units(&alloc, 1), 0);
        assert_eq!(alloc.buddy.with(|b| b.free_units()), 1024);
    }

    #[test]
    fn rejects_a_used_inner_allocator_and_zero_cores() {
        let mut used = Model::new(Config::new(16, 2)).unwrap();
        used.alloc(0).unwrap();
        assert_eq!(
            PerCpu::<Model>::new(used, 1).err(),
            Some(Error::InvalidConfig(ConfigRule::InnerInUse))
        );
        let fresh = Model::new(Config::new(16, 2)).unwrap();
        assert_eq!(
            PerCpu::<Model>::new(fresh, 0).err(),
            Some(Error::InvalidConfig(ConfigRule::NoCores))
        );
    }
}
