//! The free lists and tags of the buddy baselines (the per-level buddy, the migrate-type
//! buddy): Knuth's segregated free lists threaded through index arrays and a tag byte per
//! unit, as buddyfree's own buddies keep them, on the heap. buddyfree keeps its copy
//! crate-private; this one adds the atomic cells the per-level buddy needs.
//!
//! Lists: `next[i]`/`prev[i]` link the block starting at unit `i` into the one list it is
//! on, so insertion, removal of a known block and pop are O(1). The link cells are generic:
//! `Cell` for the sequential buddies, relaxed atomics for the per-level buddy, where each
//! list is guarded by its level's lock and a block start moves between lists only through
//! a thread that owns it (the locks order those hand-overs).
//!
//! Tags: `tags[i]` is `Free(k)` iff a free block of order `k` starting at `i` is on a free
//! list, `Used(k)` iff a block of order `k` starting at `i` is held by a caller, and none
//! otherwise (inner units of blocks, and blocks in transit inside one operation).

use crate::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use core::cell::Cell;

use alloc::boxed::Box;
use buddyfree::Error;

use crate::filled;

/// "No element": the end of a list.
pub(crate) const NIL: usize = usize::MAX;

/// A cell read and written through `&self`: `Cell` single-threaded, a relaxed atomic where a
/// lock orders the accesses.
pub(crate) trait Slot<T: Copy> {
    fn new(value: T) -> Self;
    fn get(&self) -> T;
    fn set(&self, value: T);
}

impl<T: Copy> Slot<T> for Cell<T> {
    fn new(value: T) -> Self {
        Cell::new(value)
    }
    #[inline]
    fn get(&self) -> T {
        Cell::get(self)
    }
    #[inline]
    fn set(&self, value: T) {
        Cell::set(self, value)
    }
}

macro_rules! atomic_slot {
    ($atomic:ty, $t:ty) => {
        // Relaxed: every access to a cell happens under the lock of the level whose list holds
        // the block, or by the one thread owning it; the lock's acquire/release orders them.
        impl Slot<$t> for $atomic {
            fn new(value: $t) -> Self {
                <$atomic>::new(value)
            }
            #[inline]
            fn get(&self) -> $t {
                self.load(Ordering::Relaxed)
            }
            #[inline]
            fn set(&self, value: $t) {
                self.store(value, Ordering::Relaxed)
            }
        }
    };
}
atomic_slot!(AtomicUsize, usize);
atomic_slot!(AtomicU8, u8);

/// The head of one free list: its first block and its length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListHead {
    first: usize,
    len: usize,
}

impl ListHead {
    pub(crate) const EMPTY: ListHead = ListHead { first: NIL, len: 0 };

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn first(&self) -> Option<usize> {
        (self.first != NIL).then_some(self.first)
    }
}

/// The `next`/`prev` links of every unit.
pub(crate) struct Links<S> {
    next: Box<[S]>,
    prev: Box<[S]>,
}

impl<S: Slot<usize>> Links<S> {
    /// The links of `units` units, every unit on no list.
    pub(crate) fn new(units: usize) -> Result<Self, Error> {
        Ok(Links {
            next: filled(units, |_| S::new(NIL))?,
            prev: filled(units, |_| S::new(NIL))?,
        })
    }

    /// Puts `index` at the front of `head`'s list. It must be on no list.
    pub(crate) fn push(&self, head: &mut ListHead, index: usize) {
        self.prev[index].set(NIL);
        self.next[index].set(head.first);
        if head.first != NIL {
            self.prev[head.first].set(index);
        }
        head.first = index;
        head.len += 1;
    }

    /// Unlinks `index`, which must be on `head`'s list.
    pub(crate) fn remove(&self, head: &mut ListHead, index: usize) {
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
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tag(u8);

// The kind in the top two bits, the order in the low six.
const FREE: u8 = 0x40;
const USED: u8 = 0x80;
const KIND: u8 = 0xc0;
const ORDER: u8 = 0x3f;

impl Tag {
    pub(crate) const NONE: Tag = Tag(0);

    pub(crate) const fn free(order: u32) -> Tag {
        Tag(FREE | order as u8)
    }

    pub(crate) const fn used(order: u32) -> Tag {
        Tag(USED | order as u8)
    }

    pub(crate) fn free_order(self) -> Option<u32> {
        (self.0 & KIND == FREE).then_some((self.0 & ORDER) as u32)
    }

    pub(crate) fn used_order(self) -> Option<u32> {
        (self.0 & KIND == USED).then_some((self.0 & ORDER) as u32)
    }

    /// Whether a `free(index, order)` of the block tagged `self` is good: the model's rule,
    /// another order at this start is `OrderMismatch`, anything else not live `NotAllocated`.
    pub(crate) fn check_free(self, order: u32) -> Result<(), Error> {
        crate::check_live(self.used_order(), order)
    }
}

/// One tag per unit.
pub(crate) struct Tags<S>(Box<[S]>);

impl<S: Slot<u8>> Tags<S> {
    /// The tags of `units` units, every unit untagged.
    pub(crate) fn new(units: usize) -> Result<Self, Error> {
        filled(units, |_| S::new(Tag::NONE.0)).map(Tags)
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> Tag {
        Tag(self.0[index].get())
    }

    #[inline]
    pub(crate) fn set(&self, index: usize, tag: Tag) {
        self.0[index].set(tag.0)
    }

    /// Whether the block of `2^order` units at `index` (in range or not) is free at exactly
    /// that order.
    #[inline]
    pub(crate) fn is_free(&self, index: usize, order: u32) -> bool {
        index < self.0.len() && self.get(index) == Tag::free(order)
    }
}

impl Tags<AtomicU8> {
    /// Tags a block handed to a caller. Release: a thread that later claims it for `free`
    /// (Acquire) sees the allocator's writes before the hand-out.
    pub(crate) fn mark_used(&self, index: usize, order: u32) {
        self.0[index].store(Tag::used(order).0, Ordering::Release);
    }

    /// Claims the live block `(index, order)` for the one `free` that wins; racing frees of
    /// the same block (double frees) see the tag already cleared and get `NotAllocated`.
    pub(crate) fn claim_used(&self, index: usize, order: u32) -> Result<(), Error> {
        self.0[index]
            .compare_exchange(
                Tag::used(order).0,
                Tag::NONE.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(drop)
            .map_err(|seen| {
                Tag(seen)
                    .check_free(order)
                    .err()
                    .unwrap_or(Error::NotAllocated)
            })
    }
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
        let order = (units - index).ilog2().min(max_order);
        let block = (index, order);
        index += 1 << order;
        Some(block)
    })
}

/// Pushes, through `push`, the pieces of the free block `(start, from)` that lie outside its
/// sub-block `(index, order)`, largest first. Each piece's buddy contains `index`, so it is
/// never free when the piece is pushed.
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

/// The free-list entries of a sequential buddy, as [`claim`] sees them.
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
/// allocated there. Fails with [`Error::Occupied`], changing nothing, if a unit is in use.
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

/// The live block containing `index` by the tags: the aligned start at or below it tagged
/// as held at that order.
pub(crate) fn block_of<S: Slot<u8>>(
    tags: &Tags<S>,
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
/// `Tag::free` at their start: its start and order.
pub(crate) fn free_entry_at<S: Slot<u8>>(
    tags: &Tags<S>,
    index: usize,
    max_order: u32,
) -> Option<(usize, u32)> {
    (0..=max_order).find_map(|k| {
        let start = index & !((1 << k) - 1);
        (tags.get(start) == Tag::free(k)).then_some((start, k))
    })
}

/// The buddy of the block of `2^order` units at `index`.
#[inline]
pub(crate) fn buddy_of(index: usize, order: u32) -> usize {
    index ^ (1 << order)
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    #[test]
    fn push_remove_pop_keep_the_list_consistent() {
        let links = Links::<Cell<usize>>::new(8).unwrap();
        let mut head = ListHead::EMPTY;
        for i in [1, 3, 5, 7] {
            links.push(&mut head, i);
        }
        links.remove(&mut head, 3);
        links.remove(&mut head, 7);
        assert_eq!(head.len(), 2);
        assert_eq!(head.first(), Some(5));
        links.remove(&mut head, 5);
        links.remove(&mut head, 1);
        assert!(head.is_empty());
    }

    #[test]
    fn initial_blocks_cover_the_region_aligned() {
        for units in 1..200 {
            for max_order in 0..6 {
                if 1 << max_order > units {
                    continue;
                }
                let mut next = 0;
                for (i, o) in initial_blocks(units, max_order).collect::<Vec<_>>() {
                    assert_eq!(i, next);
                    assert_eq!(i % (1 << o), 0);
                    next += 1 << o;
                }
                assert_eq!(next, units);
            }
        }
    }
}
