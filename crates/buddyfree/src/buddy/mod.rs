//! Buddy systems after Knuth and the real-time buddy paper
//! ([Donahue et al. 2001](crate#references)):
//! Knuth's buddy with eager merging ([`Knuth`]), the estranged buddy with delayed
//! recombination ([`Estranged`]), and on-demand defragmentation for both ([`defrag`](mod@defrag)).
//!
//! Both are sequential ([`crate::SeqBlockAlloc`]); [`crate::Locked`] lifts them into a
//! [`crate::BlockAlloc`].
//!
//! Memory picture shared by all of them: no per-operation heap allocation; every table is
//! indexed by unit and allocated once (defragmentation, which plans on a copy, excepted).
//!
//! ```text
//! unit index   0     1     2     3     4 ...  units-1
//! tags       [F2 ][ -  ][ -  ][ -  ][U0 ] ... : per block start: Free / Used / Pair(order) / none
//! next, prev [ .  ][    ][    ][    ][    ] ... : links of the free list the block start is on
//! heads      [order 0][order 1]...[max_order] : first element and length of each list
//! ```

/// The parts of a sequential buddy over [`Lists`] (in a field `lists`) that do not depend on
/// its free-list policy: the [`SeqBlockAlloc`](crate::SeqBlockAlloc) impl around its inherent
/// `take(order)` (a checked order) and `release(index, order)` (a checked, untagged block), the
/// counters `stats` of type `$stats`, [`Defrag`], and the constructors on caller metadata.
macro_rules! seq_buddy {
    ($buddy:ident, $stats:ident, $lists:literal, $example:literal) => {
        impl $buddy {
            /// The allocator of `new`, its tables made in `meta` at `parts`, its units listed
            /// as the largest aligned blocks that tile them: blocks of `max_order` from unit
            /// 0, then the tail beyond the last whole one cut into ever smaller blocks (the
            /// binary digits of the remainder). Each tail block's buddy would reach past the
            /// units, so none ever merges or pairs.
            fn build(
                config: $crate::Config,
                parts: $crate::buddy::Parts,
                meta: &$crate::table::Metadata,
            ) -> Result<Self, $crate::Error> {
                let mut buddy = $buddy {
                    lists: $crate::buddy::Lists::new(config, parts, meta)?,
                    stats: $stats::default(),
                };
                for (index, order) in $crate::range::aligned_blocks(0, config.units, config.max_order) {
                    buddy.release(index, order);
                }
                Ok(buddy)
            }

            #[doc = concat!("The counters since creation (or the last [`", stringify!($buddy), "::reset_stats`]).")]
            pub fn stats(&self) -> $stats {
                self.stats
            }

            /// Zeroes the counters.
            pub fn reset_stats(&mut self) {
                self.stats = $stats::default();
            }
        }

        impl $crate::SeqBlockAlloc for $buddy {
            fn alloc(&mut self, order: u32) -> Result<usize, $crate::Error> {
                if order > self.lists.max_order {
                    return Err($crate::Error::BadOrder);
                }
                self.take(order)
            }

            fn free(&mut self, index: usize, order: u32) -> Result<(), $crate::Error> {
                self.lists.untag_live(index, order)?;
                self.release(index, order);
                Ok(())
            }

            fn free_units(&self) -> usize {
                self.lists.free_units
            }

            fn total_units(&self) -> usize {
                self.lists.total_units
            }

            fn max_order(&self) -> u32 {
                self.lists.max_order
            }

            fn capabilities(&self) -> $crate::Capabilities {
                $crate::Capabilities::ALLOC_AT.union($crate::Capabilities::BLOCK_OF)
            }

            fn alloc_at(&mut self, index: usize, order: u32) -> Result<(), $crate::Error> {
                $crate::check_block(index, order, self.lists.max_order, self.lists.total_units)?;
                self.lists.claim(index, order)
            }

            fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, $crate::Error> {
                self.lists.block_of(index)
            }
        }

        #[cfg(feature = "alloc")]
        impl $crate::buddy::Defrag for $buddy {
            fn free_entry(&self, index: usize) -> Option<(usize, u32)> {
                self.lists.entry_at(index)
            }
        }

        caller_metadata!(
            $buddy,
            $crate::buddy::plan::<$lists>,
            $buddy::build,
            example: $example, "SeqBlockAlloc", "let mut a", "alloc(3)", "free(block, 3)"
        );
    };
}

#[cfg(feature = "alloc")]
pub mod defrag;
pub mod estranged;
pub mod knuth;
pub(crate) mod tags;

#[cfg(feature = "alloc")]
pub use defrag::{alloc_or_defrag, defrag, Defrag, Move};
pub use estranged::{Estranged, EstrangedStats, Step};
pub use knuth::{Knuth, KnuthStats};

use core::cell::Cell;

use crate::check_block;
use crate::table::{Metadata, Part, Plan, Table};
use crate::{Config, Error};
use tags::Tag;

/// Where the tables of a sequential buddy lie in its metadata: the heads of its free lists,
/// and the links and tag of every unit.
pub(crate) struct Parts {
    heads: Part<ListHead>,
    next: Part<Cell<usize>>,
    prev: Part<Cell<usize>>,
    tags: Part<Cell<Tag>>,
}

/// Lays out the metadata of a sequential buddy of `config` with `N` free lists per order.
/// A `const fn`, as every plan is, for a `const` `metadata_layout`.
pub(crate) const fn plan<const N: usize>(config: Config) -> Result<(Plan, Parts), Error> {
    const_try!(config.validate());
    let mut plan = Plan::new();
    let parts = Parts {
        heads: const_try!(plan.add(N * (config.max_order as usize + 1))),
        next: const_try!(plan.add(config.units)),
        prev: const_try!(plan.add(config.units)),
        tags: const_try!(plan.add(config.units)),
    };
    Ok((plan, parts))
}

/// The list of free blocks, each tagged [`Tag::free`] at its start: Knuth's one list, the
/// estranged buddy's buddy-busy list.
pub(crate) const SINGLES: usize = 0;
/// The estranged buddy's buddy-free list: pairs of free buddies, each tagged [`Tag::pair`] at
/// its left block.
pub(crate) const PAIRS: usize = 1;

/// "No element": the end of a list.
const NIL: usize = usize::MAX;

/// The head of one free list: its first block and its length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListHead {
    first: usize,
    len: usize,
}

impl ListHead {
    const EMPTY: ListHead = ListHead { first: NIL, len: 0 };

    fn first(&self) -> Option<usize> {
        (self.first != NIL).then_some(self.first)
    }
}

/// The free lists, tags and unit counts of a sequential buddy, `N` lists per order
/// ([`SINGLES`], then [`PAIRS`]): the state Knuth's buddy (one list) and the estranged buddy
/// (two) share.
///
/// The lists are Knuth's segregated free lists ([Donahue et al. 2001](crate#references)
/// §2.4), doubly linked through index arrays: `next[i]`/`prev[i]` link the block starting at
/// unit `i` into the one list it is on, so that insertion, removal of a known block and pop
/// are O(1) and no operation allocates. The links are `Cell`s: the tables may lie in caller
/// memory, seen only through `&`.
pub(crate) struct Lists<const N: usize> {
    next: Table<Cell<usize>>,
    prev: Table<Cell<usize>>,
    /// Per unit, what starts there ([`Tag`]).
    tags: Table<Cell<Tag>>,
    /// The head of list `list` of order `k` at `k * N + list`.
    heads: Table<ListHead>,
    /// Bit `k` of `masks[list]` set iff that list of order `k` is non-empty.
    masks: [u64; N],
    free_units: usize,
    total_units: usize,
    max_order: u32,
}

impl<const N: usize> Lists<N> {
    /// Empty lists for `config`'s units, all counted free (the buddy then lists its initial
    /// blocks), their tables made in `meta` at `parts`.
    fn new(config: Config, parts: Parts, meta: &Metadata) -> Result<Self, Error> {
        Ok(Lists {
            next: meta.table(parts.next, |_| Cell::new(NIL))?,
            prev: meta.table(parts.prev, |_| Cell::new(NIL))?,
            tags: meta.table(parts.tags, |_| Cell::new(Tag::NONE))?,
            heads: meta.table(parts.heads, |_| ListHead::EMPTY)?,
            masks: [0; N],
            free_units: config.units,
            total_units: config.units,
            max_order: config.max_order,
        })
    }

    /// Puts `index`, on no list, at the front of list `list` of `order`, tagged as its entry.
    #[inline(always)]
    fn push(&mut self, list: usize, index: usize, order: u32) {
        let head = &mut self.heads[order as usize * N + list];
        self.prev[index].set(NIL);
        self.next[index].set(head.first);
        if head.first != NIL {
            self.prev[head.first].set(index);
        }
        head.first = index;
        head.len += 1;
        self.masks[list] |= 1 << order;
        let tag = if list == PAIRS { Tag::pair } else { Tag::free };
        self.tags[index].set(tag(order));
    }

    /// Takes `index` off list `list` of `order`, which it must be on, and untags it.
    #[inline(always)]
    fn unlink(&mut self, list: usize, index: usize, order: u32) {
        let head = &mut self.heads[order as usize * N + list];
        let (prev, next) = (self.prev[index].get(), self.next[index].get());
        if prev == NIL {
            head.first = next;
        } else {
            self.next[prev].set(next);
        }
        if next != NIL {
            self.prev[next].set(prev);
        }
        head.len -= 1;
        if head.len == 0 {
            self.masks[list] &= !(1 << order);
        }
        self.tags[index].set(Tag::NONE);
    }

    /// The first block on list `list` of `order`, if that list exists and is not empty.
    #[inline]
    fn first(&self, list: usize, order: u32) -> Option<usize> {
        self.heads
            .get(order as usize * N + list)
            .and_then(ListHead::first)
    }

    /// The length of list `list` of `order`; 0 for an order above `max_order`.
    fn len(&self, list: usize, order: u32) -> usize {
        self.heads
            .get(order as usize * N + list)
            .map_or(0, |head| head.len)
    }

    /// The buddy of the block `(index, order)` if it is free at exactly that order, on a list
    /// (a block of `max_order` has none; a tail block's lies past the units).
    #[inline]
    fn free_buddy(&self, index: usize, order: u32) -> Option<usize> {
        let buddy = buddy_of(index, order);
        let listed = order < self.max_order && buddy < self.total_units;
        (listed && self.tags[buddy].get() == Tag::free(order)).then_some(buddy)
    }

    /// Tags `(index, order)` as held by a caller and counts its units as used.
    #[inline]
    fn set_used(&mut self, index: usize, order: u32) {
        self.tags[index].set(Tag::used(order));
        self.free_units -= 1 << order;
    }

    /// `free`'s checks of `(index, order)`; then counts its units free, untagged.
    #[inline]
    fn untag_live(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        crate::check_live(self.tags[index].get().used_order(), order)?;
        self.tags[index].set(Tag::NONE);
        self.free_units += 1 << order;
        Ok(())
    }

    /// The live block containing `index`: the aligned start at or below it tagged as held at
    /// that order.
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        crate::live_block_at(index, (self.total_units, self.max_order), |start, order| {
            self.tags[start].get().used_order() == Some(order)
        })
    }

    /// The list entry covering `index`: the first aligned start at or below it, from order 0
    /// up, that starts an entry of order `k`, a free block of order `k` or an estranged pair of
    /// order `k - 1` (Knuth's lists have no pairs); its start and order. None past the
    /// units, where no entry reaches.
    fn entry_at(&self, index: usize) -> Option<(usize, u32)> {
        (0..=self.max_order).find_map(|k| {
            let start = index & !((1 << k) - 1);
            let tag = self.tags.get(start)?.get();
            (tag == Tag::free(k) || (k > 0 && tag == Tag::pair(k - 1))).then_some((start, k))
        })
    }

    /// Allocates the free units `(index, order)`, a checked block: removes the entries inside
    /// the block and carves it out of an entry that contains it, then tags it held. Fails
    /// with [`Error::Occupied`], changing nothing, if a unit is in use. Two walks over the
    /// entries (check, then take) rather than a list of them: no heap.
    fn claim(&mut self, index: usize, order: u32) -> Result<(), Error> {
        let end = index + (1 << order);
        let mut unit = index;
        while unit < end {
            let (start, from) = self.entry_at(unit).ok_or(Error::Occupied)?;
            unit = start + (1 << from);
        }
        let mut unit = index;
        while unit < end {
            // Pieces carved off lie outside `index..end`, so the walk ahead is unchanged.
            let (start, from) = self.entry_at(unit).expect("checked above");
            unit = start + (1 << from);
            if self.tags[start].get() == Tag::free(from) {
                self.unlink(SINGLES, start, from);
            } else {
                self.unlink(PAIRS, start, from - 1);
            }
            if start < index || start + (1 << from) > end {
                self.carve(start, from, index, order);
            }
        }
        self.set_used(index, order);
        Ok(())
    }

    /// Lists the pieces of the free block `(start, from)`, on no list, that lie outside its
    /// sub-block `(index, order)`, largest first, each a single free block ([`SINGLES`]): the
    /// bisection of §2.2, step 3–4, aimed at any sub-block. Each piece's buddy contains
    /// `index`, which is about to be busy, so no piece has a free buddy.
    #[inline]
    fn carve(&mut self, start: usize, from: u32, index: usize, order: u32) {
        debug_assert!(start <= index && index + (1 << order) <= start + (1 << from));
        for k in (order..from).rev() {
            self.push(SINGLES, buddy_of(index & !((1 << k) - 1), k), k);
        }
    }
}

// Per-order bit masks are `u64`s, and `Config::validate` keeps `max_order` below `usize::BITS`.
const _: () = assert!(usize::BITS <= u64::BITS);

/// The buddy of the block of `2^order` units at `index`.
#[inline]
pub(crate) fn buddy_of(index: usize, order: u32) -> usize {
    index ^ (1 << order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn push_unlink_keep_the_list_consistent() {
        let config = Config::new(8, 3);
        let mut lists = crate::table::build(plan::<1>(config), None, |parts, meta| {
            Lists::<1>::new(config, parts, meta)
        })
        .unwrap();
        for i in [1, 3, 5, 7] {
            lists.push(SINGLES, i, 0);
        }
        lists.unlink(SINGLES, 3, 0);
        lists.unlink(SINGLES, 7, 0);
        assert_eq!(lists.len(SINGLES, 0), 2);
        assert_eq!(lists.first(SINGLES, 0), Some(5));
        lists.unlink(SINGLES, 5, 0);
        lists.unlink(SINGLES, 1, 0);
        assert_eq!((lists.len(SINGLES, 0), lists.masks[SINGLES]), (0, 0));
    }

    #[test]
    fn initial_blocks_cover_the_region_aligned() {
        for units in 1..200 {
            for max_order in 0..6 {
                if 1 << max_order > units {
                    continue;
                }
                let blocks: Vec<_> = crate::range::aligned_blocks(0, units, max_order).collect();
                let mut next = 0;
                for &(i, o) in &blocks {
                    assert_eq!(i, next);
                    assert_eq!(i % (1 << o), 0);
                    assert!(o <= max_order);
                    next += 1 << o;
                }
                assert_eq!(next, units);
            }
        }
    }
}
