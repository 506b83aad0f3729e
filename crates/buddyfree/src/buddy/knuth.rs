//! Knuth's buddy system ([Donahue et al. 2001](crate#references) §2.2–2.4): segregated doubly linked
//! free lists per order, a tag per block start, eager merging on free.
//!
//! Allocation finds the lowest non-empty list at or above the order in O(1) (a bit mask of
//! non-empty lists), then bisects down, pushing each right half: O(log M) list operations.
//! Free checks the buddy's tag and merges while it is free at the same order: O(log M).
//! With eager merging, an allocation fails only when no aligned free block of the order
//! exists at all.

use super::{Lists, SINGLES};
use crate::{Config, Error};

/// Counters of Knuth's buddy, to compare with [`super::EstrangedStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KnuthStats {
    /// Allocations served from the list of their own order, with no split.
    pub immediate: u64,
    /// Allocations that split a larger block.
    pub split: u64,
    /// Allocations that failed with `OutOfMemory`.
    pub failed: u64,
    /// Buddy merges made by frees.
    pub merges: u64,
}

/// Knuth's sequential buddy allocator. Wrap it in [`crate::Locked`] for the spin-locked buddy.
pub struct Knuth {
    /// One list per order; `lists.masks[0]` has bit `k` set iff the list of order `k` is
    /// non-empty.
    lists: Lists<1>,
    stats: KnuthStats,
}

impl Knuth {
    /// An allocator of `config.units` free units (any number: the tail beyond the last block of
    /// `max_order` is cut into smaller blocks), its metadata on the heap.
    ///
    /// ```
    /// use buddyfree::buddy::Knuth;
    /// use buddyfree::{BlockAlloc, Config, Locked};
    ///
    /// // 100 units: blocks of 64, 32 and 4 units, up to order 6.
    /// let buddy = Locked::<Knuth>::new(Knuth::new(Config::new(100, 6))?);
    /// let index = buddy.alloc(5, 0)?;
    /// buddy.free(index, 5, 0)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn new(config: Config) -> Result<Self, Error> {
        crate::table::build(super::plan::<1>(config), None, |parts, meta| {
            Knuth::build(config, parts, meta)
        })
    }

    /// Free blocks on the list of `order`.
    pub fn free_blocks(&self, order: u32) -> usize {
        self.lists.len(SINGLES, order)
    }

    /// Allocates a block of a checked `order` from the lowest non-empty list at or above it.
    fn take(&mut self, order: u32) -> Result<usize, Error> {
        let from = order + (self.lists.masks[SINGLES] >> order).trailing_zeros();
        let Some(index) = self.lists.first(SINGLES, from) else {
            self.stats.failed += 1;
            return Err(Error::OutOfMemory);
        };
        if from == order {
            self.stats.immediate += 1;
        } else {
            self.stats.split += 1;
        }
        self.lists.unlink(SINGLES, index, from);
        self.lists.carve(index, from, index, order);
        self.lists.set_used(index, order);
        Ok(index)
    }

    /// Returns the block at `index` to the lists, merging it with free buddies (§2.3).
    fn release(&mut self, mut index: usize, mut order: u32) {
        while let Some(buddy) = self.lists.free_buddy(index, order) {
            self.lists.unlink(SINGLES, buddy, order);
            self.stats.merges += 1;
            index = index.min(buddy);
            order += 1;
        }
        self.lists.push(SINGLES, index, order);
    }
}

seq_buddy!(Knuth, KnuthStats, 1, "buddy::Knuth");

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::SeqBlockAlloc;

    #[test]
    fn splits_and_merges_back() {
        let mut k = Knuth::new(Config::new(16, 4)).unwrap();
        assert_eq!(k.alloc(0), Ok(0));
        assert_eq!((0..4).map(|o| k.free_blocks(o)).sum::<usize>(), 4);
        assert_eq!(k.alloc(2), Ok(4));
        assert_eq!(k.free(4, 1), Err(Error::OrderMismatch));
        assert_eq!(k.free(8, 3), Err(Error::NotAllocated));
        assert_eq!(k.free(0, 0), Ok(()));
        assert_eq!(k.free(0, 0), Err(Error::NotAllocated));
        assert_eq!(k.free(4, 2), Ok(()));
        assert_eq!(k.free_blocks(4), 1);
        assert_eq!(k.free_units(), 16);
        let s = k.stats();
        assert_eq!((s.immediate, s.split, s.merges), (1, 1, 4));
    }

    #[test]
    fn defrag_view_rejects_bad_input() {
        use crate::buddy::Defrag;
        let mut k = Knuth::new(Config::new(12, 2)).unwrap();
        assert_eq!(k.block_of(12), Err(Error::OutOfRange));
        assert_eq!(k.free_entry(99), None);
        assert_eq!(k.free_entry(5), Some((4, 2)));
        assert_eq!(k.alloc_at(12, 0), Err(Error::OutOfRange));
        assert_eq!(k.alloc_at(5, 1), Err(Error::Misaligned));
        assert_eq!(k.alloc_at(4, 3), Err(Error::BadOrder));
        k.alloc_at(5, 0).unwrap();
        assert_eq!(k.alloc_at(4, 1), Err(Error::Occupied));
        assert_eq!((k.block_of(5), k.free_units()), (Ok(Some((5, 0))), 11));
        assert_eq!(k.free(5, 0), Ok(()));
        assert_eq!(k.free_blocks(2), 3);
    }

    #[test]
    fn tail_blocks_never_merge_past_the_end() {
        let mut k = Knuth::new(Config::new(13, 3)).unwrap();
        assert_eq!(k.alloc(3), Ok(0));
        assert_eq!(k.alloc(2), Ok(8));
        assert_eq!(k.alloc(0), Ok(12));
        assert_eq!(k.alloc(0), Err(Error::OutOfMemory));
        for (i, o) in [(12, 0), (8, 2), (0, 3)] {
            k.free(i, o).unwrap();
        }
        assert_eq!(k.free_blocks(3), 1);
        assert_eq!(k.free_blocks(2), 1);
        assert_eq!(k.free_blocks(0), 1);
    }
}
