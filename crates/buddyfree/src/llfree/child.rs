//! The child entry of one huge frame (2 MiB, 512 units), the paper's `cL` and `a`. Two
//! children share one 64-bit word, so the two children of an order-10 block change in one
//! compare-and-swap (§4.2.1).
//!
//! ```text
//!  31   27 26    22  21    20    19   18     10 9          0
//! [unused][ order ][span][pair][huge][ unused ][ free (10 b) ]
//! ```
//! - `free`: free units in the bit field (0..=512); 0 while the frame is handed out whole.
//! - `huge`: the frame is handed out as one order-9 block, or as half of an order-10 block if
//!   `pair` is set too, or as part of a block of order 11 and up if `span` is set too.
//! - `order`: with `span`, the order (11..=30) of the block that starts at this frame, 0 in
//!   the block's other frames, [`SPAN_FREEING`] while a free clears the block
//!   (`lower/span.rs`).

use super::HUGE_UNITS;

/// One child entry, by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Child(pub(crate) u32);

const FREE_MASK: u32 = 0x3FF;
const HUGE: u32 = 1 << 19;
const PAIR: u32 = 1 << 20;
const SPAN: u32 = 1 << 21;
const ORDER_SHIFT: u32 = 22;
#[cfg(not(loom))]
const ORDER_MASK: u32 = 0x1F << ORDER_SHIFT;
/// The order field of a span's first frame while a free clears the span.
const SPAN_FREEING: u32 = 0x1F;

impl Child {
    /// A frame with every unit free.
    pub(crate) const FREE: Child = Child(HUGE_UNITS as u32);
    /// A frame handed out as one order-9 block.
    pub(crate) const HUGE: Child = Child(HUGE);
    /// A frame handed out as half of an order-10 block.
    pub(crate) const PAIR: Child = Child(HUGE | PAIR);
    /// A frame of a block of order 11 and up other than its first (a span's continuation).
    pub(crate) const SPAN: Child = Child(HUGE | SPAN);
    /// The first frame of a block of order 11 and up whose free has claimed it.
    pub(crate) const SPAN_FREEING: Child = Child(HUGE | SPAN | SPAN_FREEING << ORDER_SHIFT);

    /// The first frame of a block of `order` (11..=30).
    #[inline]
    pub(crate) const fn span_start(order: u32) -> Child {
        Child(HUGE | SPAN | order << ORDER_SHIFT)
    }

    /// The entry without its counter and the unused bits below the flags: what recovery
    /// trusts of it (the counter is rebuilt from the bit field).
    #[inline]
    #[cfg(not(loom))]
    pub(crate) const fn flags(self) -> Child {
        Child(self.0 & !(HUGE - 1))
    }

    /// Whether the frame is part of a block of order 11 and up (or of a cut-off claim or
    /// free of one).
    #[inline]
    pub(crate) const fn span(self) -> bool {
        self.0 & SPAN != 0
    }

    /// The order of the block of order 11 and up that starts at this frame, if one does:
    /// exactly [`Child::span_start`], no other bit.
    #[inline]
    #[cfg(not(loom))]
    pub(crate) fn span_order(self) -> Option<u32> {
        let order = (self.0 & ORDER_MASK) >> ORDER_SHIFT;
        (self.0 & !ORDER_MASK == HUGE | SPAN && (11..=30).contains(&order)).then_some(order)
    }

    #[inline]
    /// A frame (not handed out whole) with `free` free units.
    pub(crate) const fn with_free(free: usize) -> Child {
        Child(free as u32)
    }

    #[inline]
    pub(crate) const fn free(self) -> usize {
        (self.0 & FREE_MASK) as usize
    }

    #[inline]
    pub(crate) const fn huge(self) -> bool {
        self.0 & HUGE != 0
    }

    #[inline]
    pub(crate) const fn pair(self) -> bool {
        self.0 & PAIR != 0
    }

    #[inline]
    /// Fig. 14a (2a): reserves `n` units of the bit field for a block of order 0..=8, before
    /// the bits are searched. `None` if too few are free.
    pub(crate) fn take(self, n: usize) -> Option<Child> {
        (!self.huge() && self.free() >= n).then(|| Child(self.0 - n as u32))
    }

    #[inline]
    /// The inverse of [`Child::take`]: a block's units are back in the bit field (Fig. 14b (3)).
    pub(crate) fn give(self, n: usize) -> Child {
        debug_assert!(!self.huge() && self.free() + n <= HUGE_UNITS);
        Child(self.0 + n as u32)
    }
}

/// Two adjacent children (an even one and the next) packed into one 64-bit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChildPair(pub(crate) u64);

impl ChildPair {
    pub(crate) const fn new(even: Child, odd: Child) -> ChildPair {
        ChildPair(even.0 as u64 | (odd.0 as u64) << 32)
    }

    #[inline]
    /// The child `half` (0: even, 1: odd).
    pub(crate) const fn get(self, half: usize) -> Child {
        Child((self.0 >> (32 * half)) as u32)
    }

    #[inline]
    /// What an add to the pair word counts as `units` more free units of child `half`:
    /// `free` is its half's lowest field. Only for units taken from that counter, whose
    /// sum then stays within its 10 bits.
    pub(crate) const fn free_units(half: usize, units: usize) -> u64 {
        (units as u64) << (32 * half)
    }

    #[inline]
    /// The pair with child `half` replaced.
    pub(crate) const fn set(self, half: usize, child: Child) -> ChildPair {
        let shift = 32 * half;
        ChildPair(self.0 & !(0xFFFF_FFFFu64 << shift) | (child.0 as u64) << shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_give_are_inverse_and_keep_the_flags_apart() {
        let c = Child::FREE.take(128).unwrap();
        assert_eq!((c.free(), c.huge()), (384, false));
        assert_eq!(c.take(385), None);
        assert_eq!(c.give(128), Child::FREE);
        assert_eq!(Child::HUGE.take(1), None);
        let p = ChildPair::new(Child::FREE, Child::PAIR);
        assert_eq!(p.get(0), Child::FREE);
        assert!(p.get(1).pair() && p.get(1).huge() && p.get(1).free() == 0);
        assert_eq!(p.set(1, Child::with_free(7)).get(1).free(), 7);
        assert_eq!(p.set(1, Child::with_free(7)).get(0), Child::FREE);
    }
}
