//! The estranged buddy system ([Donahue et al. 2001](crate#references) §2.5–2.7): Knuth's buddy with
//! delayed recombination. A freed block is "estranged" from its buddy and is not merged; per
//! order there are two lists:
//!
//! - **buddy-busy** (`busy[k]`): free blocks whose buddy is not free at the same order;
//! - **buddy-free** (`paired[k]`): pairs of free buddies, listed once by the left one (tag
//!   `Pair(k)` there; the right one's freeness is implied).
//!
//! Allocation of order `k` tries, in this order (the paper's heuristic, counted per request in
//! [`EstrangedStats`]): (1) buddy-busy at `k`; (2) buddy-free at `k`, leaving the other buddy
//! on buddy-busy; (3) a buddy-free pair at `k-1`, glued into one block of order `k`; (4) the
//! smallest block above `k`, split down; (5) glue every buddy-free pair from order 0 up to
//! `k-2`, level by level, then retry (3). Steps 1–3 are O(1); free is O(1) (no merge).
//!
//! Completeness: two free buddies of one order are always a pair, never two buddy-busy
//! entries (every block that becomes free at an order is checked against its buddy there).
//! After step 5 no pair remains below `k-1`, and then, by induction on the order, every free
//! aligned block of order `m <= k` lies inside one list entry of at least `2^m` units; so
//! when all five steps fail, no free aligned block of order `k` exists.

use core::cell::Cell;

use super::lists::{Links, ListHead};
use super::tags::{Tag, Tags};
use super::Entries;
use super::{buddy_of, carve, initial_blocks, Parts};
use crate::table::{Metadata, Table};
use crate::{check_block, Capabilities, Config, Error, SeqBlockAlloc};

/// Which step of the allocation heuristic served a request (§2.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// 1: a block from the buddy-busy list of the order.
    BuddyBusy,
    /// 2: one block of a pair on the buddy-free list of the order.
    BuddyFree,
    /// 3: a pair of half-size buddies from the buddy-free list one order below, glued.
    GlueHalves,
    /// 4: a larger block split down.
    Split,
    /// 5: pairs glued upward from the lowest order, then step 3.
    GlueUp,
}

/// Counters of the estranged buddy: which step served each allocation, and the work done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EstrangedStats {
    /// Requests served by step 1 (buddy-busy list).
    pub buddy_busy: u64,
    /// Requests served by step 2 (buddy-free list).
    pub buddy_free: u64,
    /// Requests served by step 3 (two half-size buddies glued).
    pub glue_halves: u64,
    /// Requests served by step 4 (split from above).
    pub split: u64,
    /// Requests served by step 5 (glued upward from the lowest order).
    pub glue_up: u64,
    /// Requests that failed with `OutOfMemory`.
    pub failed: u64,
    /// Pairs glued into a block of the next order during step 5.
    pub glued_pairs: u64,
}

impl EstrangedStats {
    /// Requests served in all.
    pub fn served(&self) -> u64 {
        self.buddy_busy + self.buddy_free + self.glue_halves + self.split + self.glue_up
    }

    /// Requests served at once, from a list of their own order, with no split or merge: the
    /// paper's "served immediately" (steps 1 and 2).
    pub fn immediate(&self) -> u64 {
        self.buddy_busy + self.buddy_free
    }

    fn count(&mut self, step: Step) {
        *match step {
            Step::BuddyBusy => &mut self.buddy_busy,
            Step::BuddyFree => &mut self.buddy_free,
            Step::GlueHalves => &mut self.glue_halves,
            Step::Split => &mut self.split,
            Step::GlueUp => &mut self.glue_up,
        } += 1;
    }
}

/// The two lists of each order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    Busy = 0,
    Paired = 1,
}

impl List {
    /// The tag of a block start listed here.
    fn tag(self, order: u32) -> Tag {
        match self {
            List::Busy => Tag::free(order),
            List::Paired => Tag::pair(order),
        }
    }
}

/// The estranged buddy allocator (sequential; wrap it in [`crate::Locked`]).
pub struct Estranged {
    links: Links<Cell<usize>>,
    tags: Tags<Cell<u8>>,
    /// The buddy-busy and the buddy-free list of every order, indexed by [`List`].
    heads: [Table<ListHead>; 2],
    /// Bit `k` of `masks[list]` set iff that list of order `k` is non-empty.
    masks: [u64; 2],
    free_units: usize,
    total_units: usize,
    max_order: u32,
    stats: EstrangedStats,
}

impl Estranged {
    /// An allocator of `config.units` free units (any number), its metadata on the heap.
    ///
    /// ```
    /// use buddyfree::buddy::Estranged;
    /// use buddyfree::{Config, SeqBlockAlloc};
    ///
    /// let mut buddy = Estranged::new(Config::new(1 << 10, 6))?;
    /// let index = buddy.alloc(0)?;
    /// buddy.free(index, 0)?;
    /// assert_eq!(buddy.free_units(), 1 << 10);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn new(config: Config) -> Result<Self, Error> {
        crate::table::build_on_heap(super::plan(config), |parts, meta| {
            Estranged::build(config, parts, meta)
        })
    }

    /// The allocator of [`Estranged::new`], its tables made in `meta` at `parts`.
    fn build(config: Config, parts: Parts<2>, meta: &Metadata) -> Result<Self, Error> {
        let [busy, paired] = parts.heads;
        let mut estranged = Estranged {
            links: Links::new(meta, parts.links)?,
            tags: Tags::new(meta, parts.tags)?,
            heads: [
                meta.table(busy, |_| ListHead::EMPTY)?,
                meta.table(paired, |_| ListHead::EMPTY)?,
            ],
            masks: [0; 2],
            free_units: config.units,
            total_units: config.units,
            max_order: config.max_order,
            stats: EstrangedStats::default(),
        };
        for (index, order) in initial_blocks(config.units, config.max_order) {
            estranged.insert_free(index, order);
        }
        Ok(estranged)
    }

    /// The step counters since creation (or the last [`Estranged::reset_stats`]).
    pub fn stats(&self) -> EstrangedStats {
        self.stats
    }

    /// Zeroes the step counters.
    pub fn reset_stats(&mut self) {
        self.stats = EstrangedStats::default();
    }

    /// Entries on the buddy-busy and buddy-free lists of `order`.
    pub fn list_lengths(&self, order: u32) -> (usize, usize) {
        let len = |list: List| {
            self.heads[list as usize]
                .get(order as usize)
                .map_or(0, ListHead::len)
        };
        (len(List::Busy), len(List::Paired))
    }

    fn push(&mut self, list: List, index: usize, order: u32) {
        self.links
            .push(&mut self.heads[list as usize][order as usize], index);
        self.masks[list as usize] |= 1 << order;
        self.tags.set(index, list.tag(order));
    }

    fn unlink(&mut self, list: List, index: usize, order: u32) {
        let head = &mut self.heads[list as usize][order as usize];
        self.links.remove(head, index);
        if head.is_empty() {
            self.masks[list as usize] &= !(1 << order);
        }
        self.tags.set(index, Tag::NONE);
    }

    fn first(&self, list: List, order: u32) -> Option<usize> {
        self.heads[list as usize][order as usize].first()
    }

    /// Lists a block that just became free: paired with its buddy if the buddy is free at
    /// the same order (then on buddy-busy), otherwise buddy-busy. No merging (§2.7).
    fn insert_free(&mut self, index: usize, order: u32) {
        let buddy = buddy_of(index, order);
        if order < self.max_order && self.tags.is_free(buddy, order) {
            self.unlink(List::Busy, buddy, order);
            self.push(List::Paired, index.min(buddy), order);
        } else {
            self.push(List::Busy, index, order);
        }
    }

    fn serve(&mut self, index: usize, order: u32, step: Step) -> Result<usize, Error> {
        self.tags.set(index, Tag::used(order));
        self.free_units -= 1 << order;
        self.stats.count(step);
        Ok(index)
    }

    /// Step 3: the pair of order `order - 1` at `index` is the block of `order` at `index`.
    fn glue_halves(&mut self, order: u32, step: Step) -> Option<Result<usize, Error>> {
        let half = order.checked_sub(1)?;
        let index = self.first(List::Paired, half)?;
        self.unlink(List::Paired, index, half);
        Some(self.serve(index, order, step))
    }

    /// Step 4: the smallest listed block above `order`, split down.
    fn split(&mut self, order: u32) -> Option<Result<usize, Error>> {
        let above = (self.masks[0] | self.masks[1])
            .checked_shr(order + 1)
            .unwrap_or(0);
        if above == 0 {
            return None;
        }
        let from = order + 1 + above.trailing_zeros();
        let index = match self.first(List::Busy, from) {
            Some(index) => {
                self.unlink(List::Busy, index, from);
                index
            }
            None => {
                let index = self.first(List::Paired, from)?;
                self.unlink(List::Paired, index, from);
                self.push(List::Busy, index + (1 << from), from);
                index
            }
        };
        carve(index, from, index, order, |piece, k| {
            self.push(List::Busy, piece, k)
        });
        Some(self.serve(index, order, Step::Split))
    }

    /// Step 5: glues every pair below `order - 1` into a block of the next order, lowest
    /// order first, so that pairs formed by gluing are glued in turn.
    fn glue_below(&mut self, order: u32) {
        for k in 0..order.saturating_sub(1) {
            while let Some(index) = self.first(List::Paired, k) {
                self.unlink(List::Paired, index, k);
                self.insert_free(index, k + 1);
                self.stats.glued_pairs += 1;
            }
        }
    }
}

impl SeqBlockAlloc for Estranged {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        if let Some(index) = self.first(List::Busy, order) {
            self.unlink(List::Busy, index, order);
            return self.serve(index, order, Step::BuddyBusy);
        }
        if let Some(index) = self.first(List::Paired, order) {
            self.unlink(List::Paired, index, order);
            self.push(List::Busy, index + (1 << order), order);
            return self.serve(index, order, Step::BuddyFree);
        }
        if let Some(served) = self.glue_halves(order, Step::GlueHalves) {
            return served;
        }
        if let Some(served) = self.split(order) {
            return served;
        }
        self.glue_below(order);
        if let Some(served) = self.glue_halves(order, Step::GlueUp) {
            return served;
        }
        self.stats.failed += 1;
        Err(Error::OutOfMemory)
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        self.tags.get(index).check_free(order)?;
        self.tags.set(index, Tag::NONE);
        self.free_units += 1 << order;
        self.insert_free(index, order);
        Ok(())
    }

    fn free_units(&self) -> usize {
        self.free_units
    }

    fn total_units(&self) -> usize {
        self.total_units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALLOC_AT.union(Capabilities::BLOCK_OF)
    }

    fn alloc_at(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        super::claim(self, index, order)
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        super::block_of(&self.tags, index, self.max_order, self.total_units)
    }
}

impl Entries for Estranged {
    fn entry_at(&self, index: usize) -> Option<(usize, u32)> {
        (0..=self.max_order).find_map(|k| {
            let start = index & !((1 << k) - 1);
            let tag = self.tags.get(start);
            let pair = k > 0 && tag == Tag::pair(k - 1);
            (tag == Tag::free(k) || pair).then_some((start, k))
        })
    }

    fn unlink_entry(&mut self, start: usize, order: u32) {
        if self.tags.get(start) == Tag::free(order) {
            self.unlink(List::Busy, start, order);
        } else {
            self.unlink(List::Paired, start, order - 1);
        }
    }

    fn push_piece(&mut self, index: usize, order: u32) {
        self.push(List::Busy, index, order);
    }

    fn set_used(&mut self, index: usize, order: u32) {
        self.tags.set(index, Tag::used(order));
        self.free_units -= 1 << order;
    }
}

caller_metadata!(
    Estranged,
    super::plan::<2>,
    Estranged::build,
    example: "buddy::Estranged", "SeqBlockAlloc", "let mut a", "alloc(3)", "free(block, 3)"
);

#[cfg(feature = "alloc")]
defrag_via_entries!(Estranged);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn steps_follow_the_heuristic() {
        let mut e = Estranged::new(Config::new(16, 4)).unwrap();
        assert_eq!(e.alloc(0), Ok(0)); // split
        assert_eq!(e.alloc(0), Ok(1)); // buddy-busy (1's buddy 0 is busy)
        e.free(0, 0).unwrap();
        e.free(1, 0).unwrap(); // 0 and 1 now a pair, not merged
        assert_eq!(e.list_lengths(0), (0, 1));
        assert_eq!(e.alloc(0), Ok(0)); // buddy-free, 1 goes buddy-busy
        e.free(0, 0).unwrap();
        assert_eq!(e.alloc(1), Ok(2)); // buddy-busy at order 1
        assert_eq!(e.alloc(1), Ok(0)); // the pair at order 0 glued
        let s = e.stats();
        assert_eq!(
            (s.split, s.buddy_busy, s.buddy_free, s.glue_halves),
            (1, 2, 1, 1)
        );
    }

    #[test]
    fn claims_a_block_spread_over_several_entries() {
        use crate::buddy::Defrag;
        let mut e = Estranged::new(Config::new(8, 3)).unwrap();
        let units: Vec<_> = (0..4).map(|_| e.alloc(0).unwrap()).collect();
        for &u in &units {
            e.free(u, 0).unwrap();
        }
        assert_eq!(e.list_lengths(0), (0, 2));
        assert_eq!(e.free_entry(3), Some((2, 1)));
        assert_eq!(e.claim(2, 2), Err(Error::Misaligned));
        e.claim(0, 2).unwrap();
        assert_eq!(e.claim(0, 0), Err(Error::Occupied));
        assert_eq!((e.list_lengths(0), e.free_units()), ((0, 0), 4));
        assert_eq!(e.live_at(0), Some(2));
        e.free(0, 2).unwrap();
        assert_eq!(e.alloc(3), Ok(0));
    }

    #[test]
    fn glues_upward_when_nothing_else_serves() {
        let mut e = Estranged::new(Config::new(8, 3)).unwrap();
        let units: Vec<_> = (0..8).map(|_| e.alloc(0).unwrap()).collect();
        for &u in &units {
            e.free(u, 0).unwrap();
        }
        assert_eq!(e.list_lengths(0), (0, 4));
        assert_eq!(e.alloc(3), Ok(0));
        assert_eq!(e.free_units(), 0);
        assert_eq!(e.stats().glue_up, 1);
        assert_eq!(e.stats().glued_pairs, 4 + 2);
    }
}
