//! The per-unit tag byte: what, if anything, starts at a unit. It is Knuth's "busy bit"
//! (§2.4) widened to carry the order, so that a buddy's freeness at one order is one lookup
//! and a bad `free` is classified exactly (`OrderMismatch` vs `NotAllocated`) in O(1).
//!
//! Invariant: `tags[i]` is `Free(k)` iff a free block of order `k` starting at `i` is on a free
//! list, `Used(k)` iff a block of order `k` starting at `i` is held by a caller, `Pair(k)`
//! (estranged buddy only) iff the two free buddies of order `k` at `i` and `i + 2^k` are one
//! entry of its buddy-free list, and none otherwise (inner units of blocks, the right half of
//! a pair, and blocks in transit inside one operation).

/// One unit's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tag(u8);

// The kind in the top two bits, the order in the low six.
const FREE: u8 = 0x40;
const USED: u8 = 0x80;
const PAIR: u8 = 0xc0;
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

    pub(crate) const fn pair(order: u32) -> Tag {
        Tag(PAIR | order as u8)
    }

    pub(crate) fn used_order(self) -> Option<u32> {
        (self.0 & KIND == USED).then_some((self.0 & ORDER) as u32)
    }
}
