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

use super::{Lists, PAIRS, SINGLES as BUSY};
use crate::{Config, Error};

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

/// The estranged buddy allocator (sequential; wrap it in [`crate::Locked`]).
pub struct Estranged {
    /// The buddy-busy ([`BUSY`]) and the buddy-free ([`PAIRS`]) list of every order.
    lists: Lists<2>,
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
        crate::table::build(super::plan::<2>(config), None, |parts, meta| {
            Estranged::build(config, parts, meta)
        })
    }

    /// Entries on the buddy-busy and buddy-free lists of `order`.
    pub fn list_lengths(&self, order: u32) -> (usize, usize) {
        (self.lists.len(BUSY, order), self.lists.len(PAIRS, order))
    }

    /// Lists a block that just became free: paired with its buddy if the buddy is free at
    /// the same order (then on buddy-busy), otherwise buddy-busy. No merging (§2.7).
    fn release(&mut self, index: usize, order: u32) {
        if let Some(buddy) = self.lists.free_buddy(index, order) {
            self.lists.unlink(BUSY, buddy, order);
            self.lists.push(PAIRS, index.min(buddy), order);
        } else {
            self.lists.push(BUSY, index, order);
        }
    }

    /// Steps 1 and 2: a listed block of `order`, buddy-busy if there is one, else one of a
    /// buddy-free pair, whose other block goes buddy-busy; and the step that found it.
    fn pop(&mut self, order: u32) -> Option<(usize, Step)> {
        if let Some(index) = self.lists.first(BUSY, order) {
            self.lists.unlink(BUSY, index, order);
            return Some((index, Step::BuddyBusy));
        }
        let index = self.lists.first(PAIRS, order)?;
        self.lists.unlink(PAIRS, index, order);
        self.lists.push(BUSY, index + (1 << order), order);
        Some((index, Step::BuddyFree))
    }

    /// Step 3: the pair of order `order - 1` at `index`, taken as the block of `order` there.
    fn glue_halves(&mut self, order: u32) -> Option<usize> {
        let half = order.checked_sub(1)?;
        let index = self.lists.first(PAIRS, half)?;
        self.lists.unlink(PAIRS, index, half);
        Some(index)
    }

    /// Step 4: the smallest listed block above `order`, split down to a block of `order`.
    fn split(&mut self, order: u32) -> Option<usize> {
        let above = (self.lists.masks[BUSY] | self.lists.masks[PAIRS])
            .checked_shr(order + 1)
            .filter(|&above| above != 0)?;
        let from = order + 1 + above.trailing_zeros();
        let (index, _) = self.pop(from)?;
        self.lists.carve(index, from, index, order);
        Some(index)
    }

    /// Step 5: glues every pair below `order - 1` into a block of the next order, lowest
    /// order first, so that pairs formed by gluing are glued in turn.
    fn glue_below(&mut self, order: u32) {
        for k in 0..order.saturating_sub(1) {
            while let Some(index) = self.lists.first(PAIRS, k) {
                self.lists.unlink(PAIRS, index, k);
                self.release(index, k + 1);
                self.stats.glued_pairs += 1;
            }
        }
    }

    /// Allocates a block of a checked `order` by the five steps of the heuristic, in turn.
    fn take(&mut self, order: u32) -> Result<usize, Error> {
        let found = self
            .pop(order)
            .or_else(|| Some((self.glue_halves(order)?, Step::GlueHalves)))
            .or_else(|| Some((self.split(order)?, Step::Split)))
            .or_else(|| {
                self.glue_below(order);
                Some((self.glue_halves(order)?, Step::GlueUp))
            });
        let Some((index, step)) = found else {
            self.stats.failed += 1;
            return Err(Error::OutOfMemory);
        };
        self.lists.set_used(index, order);
        self.stats.count(step);
        Ok(index)
    }
}

seq_buddy!(Estranged, EstrangedStats, 2, "buddy::Estranged");

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::SeqBlockAlloc;
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
        assert_eq!(e.alloc_at(2, 2), Err(Error::Misaligned));
        e.alloc_at(0, 2).unwrap();
        assert_eq!(e.alloc_at(0, 0), Err(Error::Occupied));
        assert_eq!((e.list_lengths(0), e.free_units()), ((0, 0), 4));
        assert_eq!(e.block_of(0), Ok(Some((0, 2))));
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
