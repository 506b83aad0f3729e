//! The Linux-like buddy: a sequential buddy behind one lock plus per-core lists of free
//! blocks for orders 0–3 and 9, refilled and spilled in batches with a high watermark, as
//! Linux's per-CPU page lists do (LLFree paper §2, "Problem 3").
//!
//! ```text
//!  PerCpu<A, R>
//!  ├── buddy:  Locked<A, R>             one lock, serialises every split and merge
//!  ├── lists:  [CachePadded<Mutex<YieldMutex, Lists>>; cores]
//!  │             per cached order: a stack of free blocks (allocated in the buddy)
//!  └── states: [u8; units]              Free | Live(order) | Listed, per block start
//! ```
//!
//! A block on a list is allocated as far as the buddy knows, so the buddy cannot judge the
//! frees of the cached orders; `states` does: a block handed to a caller is `Live(order)`,
//! and one compare-and-swap from there to `Listed` lets exactly one of racing frees through.
//! Blocks of the other orders are not recorded: the buddy answers their frees. A block on its
//! way between a list and the buddy (a refill, a spill) is `Free` in `states` and allocated in
//! the buddy; a free that finds it so asks the buddy, under its lock, what starts there. Locks
//! are taken in the order list, then buddy, and never two lists at once.
//!
//! Self-contained on purpose: buddyfree's magazines share nothing with it but the public
//! [`BlockAlloc`] of the buddy behind it, so the baseline is Linux's design, not buddyfree's.

use alloc::boxed::Box;
use alloc::vec::Vec;

use buddyfree::locked::YieldMutex;
use buddyfree::magazine::Settings;
use buddyfree::{HeldCore, Locked, MAX_CORES};
use lock_api::{Mutex, MutexGuard, RawMutex};

use crate::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use crate::sync::CachePadded;
use crate::{
    check_block, core_slot, filled, BlockAlloc, Capabilities, Config, ConfigRule, Error,
    SeqBlockAlloc,
};

/// Linux's per-CPU lists: orders 0–3 and the 2 MiB huge frame, order 9 (since 5.13; LLFree
/// paper §2).
const ORDERS: [u32; 5] = [0, 1, 2, 3, 9];
/// Units moved per refill or spill (Linux's per-CPU batch is 63 pages for zones of a
/// gigabyte and more); at least one block.
const BATCH_UNITS: usize = 64;
/// Units a list holds before it spills a batch: 256 per order, at least two blocks (two
/// blocks of order 9, 1024 frames, the size the LLFree paper gives for Linux's order-9
/// per-CPU lists).
const HIGH_UNITS: usize = 256;

/// `states` of a unit where no caller's block of a cached order, and no listed block, starts.
const FREE: u8 = 0;
/// `states` of a listed block (free to callers, allocated in the buddy).
const LISTED: u8 = u8::MAX;

/// `states` of a caller's block of `order`.
fn live(order: u32) -> u8 {
    1 + order as u8
}

/// The list of `order`, if it is cached.
fn slot(order: u32) -> Option<usize> {
    ORDERS.iter().position(|&o| o == order)
}

/// Blocks moved at once at `slot`.
fn batch(slot: usize) -> usize {
    (BATCH_UNITS >> ORDERS[slot]).max(1)
}

/// Blocks a list at `slot` holds before it spills.
fn high(slot: usize) -> usize {
    (HIGH_UNITS >> ORDERS[slot]).max(2)
}

/// One core's lists, one per cached order, newest block last.
struct Lists([Vec<usize>; ORDERS.len()]);

type ListLock = Mutex<YieldMutex, Lists>;

/// A sequential buddy `A` behind one lock `R` (by default a test-and-set spinlock), with
/// Linux-like per-core lists. With Knuth's buddy as `A` this is the "Linux" baseline of the
/// NBBS and LLFree papers; Linux's zone lock is a fair queued lock, so a fair `R` (a ticket
/// lock) is the closer model under contention.
///
/// An allocation that the buddy cannot serve gives every list back and tries once more, so
/// it fails only if no free aligned block exists (with no concurrent frees in flight).
pub struct PerCpu<A, R = spin::Mutex<()>> {
    buddy: Locked<A, R>,
    lists: Box<[CachePadded<ListLock>]>,
    states: Box<[AtomicU8]>,
    /// Units on every list: free to callers, allocated in the buddy.
    listed: AtomicUsize,
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> PerCpu<A, R> {
    /// Puts per-core lists for `cores` cores in front of the buddy `inner`, adopting the
    /// blocks it has out (their frees are judged as those of blocks handed out here). Fails
    /// with [`Error::InvalidConfig`] if `cores` is not in `1..=MAX_CORES`, or if `inner` has
    /// blocks out and cannot name them.
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::{BlockAlloc, Config};
    /// use buddyfree_baselines::linux::PerCpu;
    ///
    /// let linux = PerCpu::<_>::new(Knuth::new(Config::new(1 << 12, 9))?, 2)?;
    /// let page = linux.alloc(0, 1)?; // served through core 1's list
    /// linux.free(page, 0, 1)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(inner: A, cores: usize) -> Result<Self, Error> {
        if cores == 0 {
            return Err(ConfigRule::NoCores.into());
        }
        if cores > MAX_CORES {
            return Err(ConfigRule::TooManyCores.into());
        }
        let buddy = Locked::new(inner);
        let units = buddy.total_units();
        let states = filled(units, |_| AtomicU8::new(FREE))?;
        if buddy.free_units() != units {
            adopt(&buddy, &states)?;
        }
        let lists = filled(cores, |_| {
            let lists = core::array::from_fn(|slot| Vec::with_capacity(high(slot) + 1));
            CachePadded::new(ListLock::new(Lists(lists)))
        })?;
        Ok(PerCpu {
            buddy,
            lists,
            states,
            listed: AtomicUsize::new(0),
        })
    }

    /// Builds the buddy with `build` over `config` and puts `config.cores` lists in front.
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::{BlockAlloc, Config};
    /// use buddyfree_baselines::linux::PerCpu;
    ///
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

    /// The same lists: their sizes are Linux's whatever the heap, and every free is decided
    /// by a compare-and-swap on the block's state, so that no free waits for the list that
    /// handed a block out ([`Settings::interrupt_safe_frees`] always holds). Taken so that
    /// the registry builds `linux` as it builds the magazines.
    #[must_use]
    pub fn with_settings(self, settings: Settings) -> Self {
        let _ = settings;
        self
    }

    /// Gives every listed block back to the buddy and returns it; the blocks still
    /// allocated through the lists are allocated in it.
    pub fn into_inner(self) -> A {
        self.drain();
        self.buddy.into_inner()
    }

    /// Units on core `core`'s lists now.
    pub fn listed_units(&self, core: usize) -> usize {
        let lists = self.lists[core_slot(core, self.lists.len())].lock();
        listed_units(&lists)
    }

    /// A block of the cached order at `slot` from `lists`, refilled from the buddy if empty;
    /// the buddy's error if it has none.
    fn take(&self, lists: &mut Lists, slot: usize) -> Result<usize, Error> {
        let order = ORDERS[slot];
        let list = &mut lists.0[slot];
        if list.is_empty() {
            self.buddy.with(|buddy| {
                list.push(buddy.alloc(order)?);
                while list.len() < batch(slot) {
                    let Ok(index) = buddy.alloc(order) else {
                        break;
                    };
                    list.push(index);
                }
                Ok::<(), Error>(())
            })?;
            // Handed out in the order the buddy gave them, as Linux's lists do.
            list.reverse();
            for &index in list.iter() {
                self.states[index].store(LISTED, Ordering::Release);
            }
            self.listed
                .fetch_add(list.len() << order, Ordering::Relaxed);
        }
        let index = list.pop().expect("refilled");
        self.listed.fetch_sub(1 << order, Ordering::Relaxed);
        self.states[index].store(live(order), Ordering::Release);
        Ok(index)
    }

    /// Puts the block `(index, order)`, just ended, on `lists`, spilling the oldest batch to
    /// the buddy above the watermark.
    fn park(&self, lists: &mut Lists, slot: usize, index: usize) {
        let order = ORDERS[slot];
        let list = &mut lists.0[slot];
        list.push(index);
        self.listed.fetch_add(1 << order, Ordering::Relaxed);
        if list.len() > high(slot) {
            self.give_back(list, batch(slot), order);
        }
    }

    /// Gives the `n` oldest blocks of `list` (of `order`) back to the buddy.
    fn give_back(&self, list: &mut Vec<usize>, n: usize, order: u32) {
        self.buddy.with(|buddy| {
            for index in list.drain(..n) {
                self.states[index].store(FREE, Ordering::Release);
                buddy
                    .free(index, order)
                    .expect("the buddy refused a block the per-core lists owned");
            }
        });
        self.listed.fetch_sub(n << order, Ordering::Relaxed);
    }

    /// Gives every block of `lists` back to the buddy.
    fn empty(&self, lists: &mut Lists) {
        for (slot, list) in lists.0.iter_mut().enumerate() {
            let n = list.len();
            if n > 0 {
                self.give_back(list, n, ORDERS[slot]);
            }
        }
    }

    /// Ends the caller's block `(index, order)` of a cached order: one compare-and-swap from
    /// `Live(order)` to `Listed` lets one free through; the others get the exact error.
    fn end(&self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.buddy.max_order(), self.states.len())?;
        match self.states[index].compare_exchange(
            live(order),
            LISTED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()),
            Err(LISTED) => Err(Error::NotAllocated),
            Err(FREE) => Err(self.unrecorded(index, order)),
            Err(_) => Err(Error::OrderMismatch),
        }
    }

    /// The answer to a free of `(index, order)`, a cached order, where no block is recorded:
    /// a caller's block of an uncached order may start there ([`Error::OrderMismatch`]);
    /// anything else (a free unit, a block on its way between a list and the buddy) is not
    /// the caller's.
    fn unrecorded(&self, index: usize, order: u32) -> Error {
        match self.buddy.block_of(index) {
            Ok(Some((start, live))) if start == index && live != order && slot(live).is_none() => {
                Error::OrderMismatch
            }
            _ => Error::NotAllocated,
        }
    }

    /// A free of an order that is never listed: the buddy's, unless a listed block or a
    /// caller's block of a cached order starts at `index` (which the buddy has allocated at
    /// another order).
    fn free_unlisted(&self, index: usize, order: u32, try_only: bool) -> Result<(), Error> {
        check_block(index, order, self.buddy.max_order(), self.states.len())?;
        match self.states[index].load(Ordering::Acquire) {
            LISTED => Err(Error::NotAllocated),
            FREE if try_only => self.buddy.try_free(index, order, 0),
            FREE => self.buddy.free(index, order, 0),
            _ => Err(Error::OrderMismatch),
        }
    }

    /// Records a block the buddy handed out directly (`alloc_at`), if its order is cached.
    fn record(&self, index: usize, order: u32) {
        if slot(order).is_some() {
            self.states[index].store(live(order), Ordering::Release);
        }
    }

    /// `Ok(None)` for a listed block, which is free to callers.
    fn unless_listed(
        &self,
        found: Result<Option<(usize, u32)>, Error>,
    ) -> Result<Option<(usize, u32)>, Error> {
        match found? {
            Some((start, _)) if self.states[start].load(Ordering::Acquire) == LISTED => Ok(None),
            other => Ok(other),
        }
    }
}

/// Records the blocks of cached orders that `buddy` has out as live, by a walk over them.
fn adopt<A: SeqBlockAlloc, R: RawMutex + Send + Sync>(
    buddy: &Locked<A, R>,
    states: &[AtomicU8],
) -> Result<(), Error> {
    let mut from = 0;
    loop {
        match buddy.next_block(from) {
            Ok(Some((start, order))) => {
                if slot(order).is_some() {
                    states[start].store(live(order), Ordering::Relaxed);
                }
                from = start + (1 << order);
            }
            Ok(None) => return Ok(()),
            Err(Error::Unsupported) => return Err(ConfigRule::InnerInUse.into()),
            Err(e) => return Err(e),
        }
    }
}

/// Units on `lists`.
fn listed_units(lists: &Lists) -> usize {
    lists
        .0
        .iter()
        .zip(ORDERS)
        .map(|(list, order)| list.len() << order)
        .sum()
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> BlockAlloc for PerCpu<A, R> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        let lists = &self.lists[core_slot(core, self.lists.len())];
        let attempt = || match slot(order).filter(|_| order <= self.buddy.max_order()) {
            Some(slot) => self.take(&mut lists.lock(), slot),
            None => self.buddy.alloc(order, core),
        };
        // The list's lock goes before the drain, which takes every list's.
        match attempt() {
            Err(Error::OutOfMemory) => {
                self.drain();
                attempt()
            }
            other => other,
        }
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        let Some(slot) = slot(order) else {
            return self.free_unlisted(index, order, false);
        };
        self.end(index, order)?;
        self.park(
            &mut self.lists[core_slot(core, self.lists.len())].lock(),
            slot,
            index,
        );
        Ok(())
    }

    fn free_units(&self) -> usize {
        self.buddy.free_units() + self.listed.load(Ordering::Relaxed)
    }

    fn total_units(&self) -> usize {
        self.buddy.total_units()
    }

    fn max_order(&self) -> u32 {
        self.buddy.max_order()
    }

    fn drain(&self) {
        for lists in self.lists.iter() {
            self.empty(&mut lists.lock());
        }
    }

    fn drain_core(&self, core: usize) {
        self.empty(&mut self.lists[core_slot(core, self.lists.len())].lock());
    }

    fn capabilities(&self) -> Capabilities {
        self.buddy.capabilities()
    }

    /// Never waits: the core's list if its lock is free at once (a single block from the
    /// buddy if it is empty, under a `try_lock`), else a block straight from the buddy; where
    /// the buddy has none, the lists whose locks are free go back first.
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        let Some(slot) = slot(order).filter(|_| order <= self.buddy.max_order()) else {
            return self.buddy.try_alloc(order, core);
        };
        if let Some(mut lists) = self.lists[core_slot(core, self.lists.len())].try_lock() {
            if let Some(index) = lists.0[slot].pop() {
                self.listed.fetch_sub(1 << order, Ordering::Relaxed);
                self.states[index].store(live(order), Ordering::Release);
                return Ok(index);
            }
        }
        let got = match self.buddy.try_alloc(order, core) {
            Err(Error::OutOfMemory) => {
                let mut held = false;
                for lists in self.lists.iter() {
                    match lists.try_lock() {
                        Some(mut lists) => self.try_empty(&mut lists)?,
                        None => held = true,
                    }
                }
                match self.buddy.try_alloc(order, core) {
                    Err(Error::OutOfMemory) if held => Err(Error::WouldBlock),
                    other => other,
                }
            }
            other => other,
        }?;
        self.record(got, order);
        Ok(got)
    }

    /// Never waits: the block goes on the core's list if its lock is free at once and the
    /// list below its watermark, else straight back to the buddy under a `try_lock`
    /// ([`Error::WouldBlock`], nothing changed, if that is held).
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        let Some(slot) = slot(order) else {
            return self.free_unlisted(index, order, true);
        };
        self.end(index, order)?;
        if let Some(mut lists) = self.lists[core_slot(core, self.lists.len())].try_lock() {
            if lists.0[slot].len() < high(slot) {
                lists.0[slot].push(index);
                self.listed.fetch_add(1 << order, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.states[index].store(FREE, Ordering::Release);
        self.buddy.try_free(index, order, core).inspect_err(|_| {
            self.states[index].store(live(order), Ordering::Release);
        })
    }

    /// The buddy's, after every list went back if a listed block is in the way.
    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        match self.buddy.alloc_at(index, order, core) {
            Err(Error::Occupied) if self.listed.load(Ordering::Relaxed) > 0 => {
                self.drain();
                self.buddy.alloc_at(index, order, core)
            }
            other => other,
        }?;
        self.record(index, order);
        Ok(())
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.unless_listed(self.buddy.block_of(index))
    }

    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.unless_listed(self.buddy.try_block_of(index))
    }

    fn next_block(&self, mut from: usize) -> Result<Option<(usize, u32)>, Error> {
        loop {
            match self.buddy.next_block(from)? {
                Some((start, order)) if self.states[start].load(Ordering::Acquire) == LISTED => {
                    from = start + (1 << order);
                }
                other => return Ok(other),
            }
        }
    }

    /// Holds `core`'s lists for `f`, as a kernel with preemption off holds its per-CPU
    /// lists: its allocations and frees of the cached orders take no list lock.
    fn with_core(&self, core: usize, f: &mut dyn FnMut(&mut dyn HeldCore)) {
        let lists = &self.lists[core_slot(core, self.lists.len())];
        f(&mut Held {
            owner: self,
            lock: lists,
            guard: Some(lists.lock()),
        });
    }
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> PerCpu<A, R> {
    /// Gives `lists` back to the buddy under a `try_lock` of it, block by block;
    /// [`Error::WouldBlock`] where it is held, with the blocks not given back still listed.
    fn try_empty(&self, lists: &mut Lists) -> Result<(), Error> {
        for (slot, list) in lists.0.iter_mut().enumerate() {
            let order = ORDERS[slot];
            while let Some(&index) = list.last() {
                self.states[index].store(FREE, Ordering::Release);
                // The block is allocated in the buddy at `order`: its only answers are
                // success and a held lock.
                if let Err(e) = self.buddy.try_free(index, order, 0) {
                    self.states[index].store(LISTED, Ordering::Release);
                    return Err(e);
                }
                list.pop();
                self.listed.fetch_sub(1 << order, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// A core's lists held by [`BlockAlloc::with_core`].
struct Held<'a, A, R> {
    owner: &'a PerCpu<A, R>,
    lock: &'a ListLock,
    /// `None` only while an allocation the buddy refused gives every list back.
    guard: Option<MutexGuard<'a, YieldMutex, Lists>>,
}

impl<A: SeqBlockAlloc, R: RawMutex + Send + Sync> HeldCore for Held<'_, A, R> {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        let owner = self.owner;
        let cached = slot(order).filter(|_| order <= owner.buddy.max_order());
        let guard = self.guard.as_mut().expect("held");
        let attempt = |guard: &mut Lists| match cached {
            Some(slot) => owner.take(guard, slot),
            None => owner.buddy.alloc(order, 0),
        };
        match attempt(guard) {
            Err(Error::OutOfMemory) => {
                // Let the lists go while every list goes back, as an unheld call would.
                self.guard = None;
                owner.drain();
                attempt(self.guard.insert(self.lock.lock()))
            }
            other => other,
        }
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        let Some(slot) = slot(order) else {
            return self.owner.free_unlisted(index, order, false);
        };
        self.owner.end(index, order)?;
        self.owner
            .park(self.guard.as_mut().expect("held"), slot, index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use buddyfree::buddy::Knuth;

    use super::*;

    fn linux(units: usize, max_order: u32) -> PerCpu<Knuth> {
        PerCpu::<Knuth>::with_config(Config::new(units, max_order).with_cores(2), Knuth::new)
            .unwrap()
    }

    #[test]
    fn refills_one_batch_and_spills_above_the_watermark() {
        let alloc = linux(1024, 9);
        let first = alloc.alloc(0, 1).unwrap();
        assert_eq!(alloc.listed_units(1), batch(0) - 1);
        assert_eq!(alloc.listed_units(0), 0);
        let mut blocks: Vec<usize> = (0..400).map(|_| alloc.alloc(0, 1).unwrap()).collect();
        blocks.push(first);
        for &i in &blocks {
            alloc.free(i, 0, 1).unwrap();
            assert!(alloc.listed_units(1) <= 256, "above the watermark");
        }
        assert!(alloc.listed_units(1) > 256 - batch(0));
        assert_eq!(alloc.free_units(), 1024);
        alloc.drain();
        assert_eq!(alloc.listed_units(1), 0);
        assert_eq!(alloc.buddy.free_units(), 1024);
    }

    /// A block freed on another core than the one whose list handed it out goes on the
    /// freeing core's list; a second free of it is refused, also from a held core.
    #[test]
    fn a_free_lists_the_block_on_the_freeing_core() {
        let linux = linux(1024, 9);
        let (first, second) = (linux.alloc(0, 0).unwrap(), linux.alloc(0, 0).unwrap());
        let held = linux.listed_units(0);
        linux.free(first, 0, 1).unwrap();
        assert_eq!((linux.listed_units(0), linux.listed_units(1)), (held, 1));
        assert_eq!(linux.free(first, 0, 0), Err(Error::NotAllocated));
        linux.with_core(1, &mut |core| {
            core.free(second, 0).unwrap();
            assert_eq!(core.free(second, 0), Err(Error::NotAllocated));
        });
        assert_eq!((linux.listed_units(0), linux.listed_units(1)), (held, 2));
        assert_eq!(linux.free_units(), 1024);
    }

    #[test]
    fn adopts_the_blocks_of_a_used_buddy_and_gives_them_back_with_it() {
        let mut used = Knuth::new(Config::new(64, 4)).unwrap();
        let page = used.alloc(0).unwrap();
        let big = used.alloc(4).unwrap();
        let linux = PerCpu::<Knuth>::new(used, 2).unwrap();
        assert_eq!(linux.free(page, 1, 0), Err(Error::OrderMismatch));
        linux.free(page, 0, 1).unwrap();
        assert_eq!(linux.free(page, 0, 0), Err(Error::NotAllocated));
        assert!(linux.listed_units(1) > 0, "listed");
        let mut buddy = linux.into_inner();
        assert_eq!(buddy.free_units(), 64 - 16);
        buddy.free(big, 4).unwrap();
    }

    /// The errors that need a block of an uncached order come from the buddy, corrected
    /// where a listed block starts.
    #[test]
    fn bad_frees_across_listed_and_unlisted_orders_get_exact_errors() {
        let linux = linux(1 << 12, 10);
        let big = linux.alloc(5, 0).unwrap();
        assert_eq!(linux.free(big, 0, 0), Err(Error::OrderMismatch));
        // A page where a block of order 5 could start.
        let mut others = Vec::new();
        let page = loop {
            let page = linux.alloc(0, 0).unwrap();
            if page.is_multiple_of(32) {
                break page;
            }
            others.push(page);
        };
        assert_eq!(linux.free(page, 5, 0), Err(Error::OrderMismatch));
        linux.free(page, 0, 0).unwrap();
        assert_eq!(linux.free(page, 5, 0), Err(Error::NotAllocated));
        assert_eq!(linux.free(page, 0, 0), Err(Error::NotAllocated));
        linux.free(big, 5, 0).unwrap();
        for page in others {
            linux.free(page, 0, 0).unwrap();
        }
        linux.drain();
        assert_eq!(linux.free_units(), 1 << 12);
    }

    /// `try_free` never waits: with the freeing core's lists held it gives the block
    /// straight back to the buddy, and with the buddy's lock held as well it answers
    /// `WouldBlock` and leaves the block live.
    #[test]
    fn try_free_would_block_only_where_every_way_is_held() {
        let linux = linux(1024, 9);
        let page = linux.alloc(0, 0).unwrap();
        let other = linux.alloc(0, 0).unwrap();
        linux.with_core(1, &mut |_| assert_eq!(linux.try_free(other, 0, 1), Ok(())));
        assert_eq!(linux.free(other, 0, 1), Err(Error::NotAllocated));
        linux.with_core(1, &mut |_| {
            let answer = linux.buddy.with(|_| linux.try_free(page, 0, 1));
            assert_eq!(answer, Err(Error::WouldBlock));
        });
        assert_eq!(linux.free(page, 0, 1), Ok(()));
        linux.drain();
        assert_eq!(linux.free_units(), 1024);
    }

    #[test]
    fn rejects_zero_cores() {
        let fresh = Knuth::new(Config::new(16, 2)).unwrap();
        assert_eq!(
            PerCpu::<Knuth>::new(fresh, 0).err(),
            Some(Error::InvalidConfig(ConfigRule::NoCores))
        );
    }
}
