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

#[cfg(feature = "alloc")]
/// Implements [`Defrag`] for a sequential buddy with `tags`, `max_order` and `total_units`
/// fields over its [`Entries`]: one definition for Knuth's and the estranged buddy.
macro_rules! defrag_via_entries {
    ($buddy:ty) => {
        impl $crate::buddy::Defrag for $buddy {
            fn live_at(&self, index: usize) -> Option<u32> {
                (index < self.total_units)
                    .then(|| self.tags.get(index).used_order())
                    .flatten()
            }

            fn free_entry(&self, index: usize) -> Option<(usize, u32)> {
                (index < self.total_units)
                    .then(|| $crate::buddy::Entries::entry_at(self, index))
                    .flatten()
            }

            fn claim(&mut self, index: usize, order: u32) -> Result<(), $crate::Error> {
                $crate::SeqBlockAlloc::alloc_at(self, index, order)
            }
        }
    };
}

#[cfg(feature = "alloc")]
pub mod defrag;
pub mod estranged;
pub mod knuth;
pub(crate) mod lists;
pub(crate) mod tags;

#[cfg(feature = "alloc")]
pub use defrag::{alloc_or_defrag, defrag, Defrag, Move};
pub use estranged::{Estranged, EstrangedStats, Step};
pub use knuth::{Knuth, KnuthStats};

use core::cell::Cell;

use crate::table::{Part, Plan};
use crate::{Config, Error};
use lists::{Links, ListHead};
use tags::Tags;

/// Where the tables of a sequential buddy lie in its metadata: `N` free lists per order, and
/// the links and tag of every unit.
pub(crate) struct Parts<const N: usize> {
    pub(crate) heads: [Part<ListHead>; N],
    pub(crate) links: [Part<Cell<usize>>; 2],
    pub(crate) tags: Part<Cell<u8>>,
}

/// Lays out the metadata of a sequential buddy of `config` with `N` free lists per order.
/// A `const fn` (as every plan is, for a `const` `metadata_layout`): `match` for `?`.
pub(crate) const fn plan<const N: usize>(config: Config) -> Result<(Plan, Parts<N>), Error> {
    if let Err(e) = config.validate() {
        return Err(e);
    }
    let mut plan = Plan::new();
    let heads = match plan.add_each(config.max_order as usize + 1) {
        Ok(heads) => heads,
        Err(e) => return Err(e),
    };
    let links = match Links::plan(&mut plan, config.units) {
        Ok(links) => links,
        Err(e) => return Err(e),
    };
    let tags = match Tags::plan(&mut plan, config.units) {
        Ok(tags) => tags,
        Err(e) => return Err(e),
    };
    Ok((plan, Parts { heads, links, tags }))
}

/// The blocks a region of `units` units starts with: blocks of `max_order` from unit 0, then
/// the tail beyond the last whole one cut into ever smaller aligned blocks (the binary digits
/// of the remainder). Each tail block's buddy would reach past `units`, so none ever merges.
pub(crate) fn initial_blocks(units: usize, max_order: u32) -> impl Iterator<Item = (usize, u32)> {
    let mut index = 0;
    core::iter::from_fn(move || {
        if index >= units {
            return None;
        }
        let fits = (units - index).ilog2();
        let order = fits.min(max_order);
        let block = (index, order);
        index += 1 << order;
        Some(block)
    })
}

// Per-order bit masks are `u64`s, and `Config::validate` keeps `max_order` below `usize::BITS`.
const _: () = assert!(usize::BITS <= u64::BITS);

/// Pushes, through `push`, the pieces of the free block `(start, from)` that lie outside its
/// sub-block `(index, order)`, largest first: the bisection of §2.2, step 3–4, aimed at any
/// sub-block. Each piece's buddy contains `index`, so it is never free when the piece is pushed.
pub(crate) fn carve(
    start: usize,
    from: u32,
    index: usize,
    order: u32,
    mut push: impl FnMut(usize, u32),
) {
    debug_assert!(start <= index && index + (1 << order) <= start + (1 << from));
    for k in (order..from).rev() {
        push(buddy_of(index & !((1 << k) - 1), k), k);
    }
}

/// The free-list entries of a sequential buddy, as the shared [`claim`] sees them.
pub(crate) trait Entries {
    /// The free entry `(start, order)` covering unit `index`, if it is free.
    fn entry_at(&self, index: usize) -> Option<(usize, u32)>;
    /// Takes the entry found by `entry_at` off its list.
    fn unlink_entry(&mut self, start: usize, order: u32);
    /// Lists a piece split off by [`carve`]; its buddy is about to be busy.
    fn push_piece(&mut self, index: usize, order: u32);
    /// Tags `(index, order)` as held by a caller and counts its units as used.
    fn set_used(&mut self, index: usize, order: u32);
}

/// Takes the free units `(index, order)` off the lists and makes them a live block, as if
/// allocated there: removes the entries inside the block and carves it out of an entry that
/// contains it. Fails with [`Error::Occupied`], changing nothing, if a unit is in use.
/// Two walks over the entries (check, then take) rather than a list of them: no heap.
pub(crate) fn claim<A: Entries>(a: &mut A, index: usize, order: u32) -> Result<(), Error> {
    let end = index + (1 << order);
    let mut unit = index;
    while unit < end {
        let (start, from) = a.entry_at(unit).ok_or(Error::Occupied)?;
        unit = start + (1 << from);
    }
    let mut unit = index;
    while unit < end {
        // Pieces carved off lie outside `index..end`, so the walk ahead is unchanged.
        let (start, from) = a.entry_at(unit).expect("checked above");
        unit = start + (1 << from);
        a.unlink_entry(start, from);
        if start < index || start + (1 << from) > end {
            carve(start, from, index, order, |piece, k| a.push_piece(piece, k));
        }
    }
    a.set_used(index, order);
    Ok(())
}

/// The live block containing `index` by the tags of a sequential buddy: the aligned start at
/// or below it tagged as held at that order.
pub(crate) fn block_of<S: lists::Slot<u8>>(
    tags: &tags::Tags<S>,
    index: usize,
    max_order: u32,
    total_units: usize,
) -> Result<Option<(usize, u32)>, Error> {
    if index >= total_units {
        return Err(Error::OutOfRange);
    }
    Ok((0..=max_order)
        .map(|order| (index & !((1 << order) - 1), order))
        .find(|&(start, order)| tags.get(start).used_order() == Some(order)))
}

/// The free block containing `index` by the tags of a buddy whose free blocks carry
/// `Tag::free` at their start (Knuth's, the migrate-type buddy): its start and order.
pub(crate) fn free_entry_at<S: lists::Slot<u8>>(
    tags: &tags::Tags<S>,
    index: usize,
    max_order: u32,
) -> Option<(usize, u32)> {
    (0..=max_order).find_map(|k| {
        let start = index & !((1 << k) - 1);
        (tags.get(start) == tags::Tag::free(k)).then_some((start, k))
    })
}

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
    fn initial_blocks_cover_the_region_aligned() {
        for units in 1..200 {
            for max_order in 0..6 {
                if 1 << max_order > units {
                    continue;
                }
                let blocks: Vec<_> = initial_blocks(units, max_order).collect();
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
