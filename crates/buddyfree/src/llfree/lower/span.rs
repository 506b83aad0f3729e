//! Blocks of whole huge frames beyond a pair: orders 11 and up ("spans"), as many frames as
//! one tree holds (`2^(order - 9)` consecutive frames, aligned to their count).
//!
//! A span lives in the child entries of its frames alone, two to a word ([`ChildPair`]), as
//! orders 6..=8 live in whole bit-field words, and by the same protocol:
//!
//! ```text
//! a live span of order k:  first pair word: (START(k), SPAN)   every other: (SPAN, SPAN)
//! a span being freed:      first pair word: (FREEING, SPAN)    the others cleared one by one
//! ```
//!
//! - A claim reads the pair words first (all `(FREE, FREE)`, else the group is taken), then
//!   sets the others to `(SPAN, SPAN)` one after the other, each by a compare-and-swap from
//!   exactly `(FREE, FREE)`, and last the first one to `(START(k), SPAN)`, which publishes
//!   the block. A frame with a single unit taken (an order-0 allocation takes the child
//!   counter first) or taken whole is not `FREE`, so the claim of a word holding it fails;
//!   then every word this claim set is cleared again and the group counts as taken (as a
//!   multi-word claim does, §4.2.1 of the LLFree paper): success only for a complete claim.
//!   The words a claim set are its own until it publishes or clears them: every other
//!   operation changes a child entry only from `FREE`, from a counter below 512 (a frame with
//!   bits taken), or from a huge entry a free names exactly, and a continuation word is
//!   none of these.
//! - A free of order k turns the first word from exactly `(START(k), SPAN)` into
//!   `(FREEING, SPAN)` in one compare-and-swap, the decision among racing frees: of racing
//!   double frees exactly one wins, and a free of another order (or of a part of the span)
//!   never matches, since only the first frame records the order and every other frame reads
//!   `SPAN`, which no free matches. Then it clears the other words and last the first.
//! - The error of a bad free is read after the fact ([`Lower::wrong_free`]): `OrderMismatch`
//!   at the first unit of a live block of another order (a span start, a huge frame or the
//!   even half of a pair), `NotAllocated` elsewhere (inside a span, at a freeing span).
//!
//! The counters of the upper level are the caller's (`mod.rs` moves `2^order` units as for
//! every order); the child counters of a span's frames are 0, as for orders 9 and 10.
//!
//! Crash recovery (`recover.rs`): a published first word names a span whose other words were
//! all set before it (each written back before the next, where the zone writes back). Frames
//! taken whole that name no live block (a claim or a free cut off) become order-9 blocks
//! nobody holds, as cut-off multi-word operations leave order-0 blocks: recovery never frees
//! a unit, since a cleared frame of a half-freed span may have been reused already.

use super::*;
use crate::llfree::HUGE_ORDER;

/// The largest order a span can have: a tree of 2^31 units or more cannot be counted (its
/// counter has 31 bits), so the largest tree has 2^30 units.
pub(crate) const SPAN_MAX_ORDER: u32 = 30;

/// The pair word of two free frames.
const FREE_PAIR: u64 = ChildPair::new(Child::FREE, Child::FREE).0;
/// The pair word of two frames inside a span.
const SPAN_PAIR: u64 = ChildPair::new(Child::SPAN, Child::SPAN).0;
/// The first pair word of a span being freed.
const FREEING_PAIR: u64 = ChildPair::new(Child::SPAN_FREEING, Child::SPAN).0;

/// The first pair word of a live span of `order`.
const fn start_pair(order: u32) -> u64 {
    ChildPair::new(Child::span_start(order), Child::SPAN).0
}

impl<W: WriteBack> Lower<W> {
    /// Allocates the span of `order` (11 and up) that starts at frame `h`, if every one of
    /// its frames is free: see the module documentation.
    #[inline(never)]
    pub(crate) fn take_span(&self, h: HugeId, order: u32) -> bool {
        let frames = 1usize << (order - HUGE_ORDER);
        if !h.0.is_multiple_of(frames) || h.0 + frames > self.huges {
            return false;
        }
        let first = self.huges * WORDS + h.0 / 2;
        let end = first + frames / 2;
        // Read first: a compare-and-swap on a taken group would only write its lines.
        if !(first..end).all(|p| self.word(p).get() == FREE_PAIR) {
            return false;
        }
        // The other words one after the other, then the first, which publishes the span.
        let pairs = (first + 1..end).map(|p| (p, SPAN_PAIR));
        for (i, (p, value)) in pairs.chain([(first, start_pair(order))]).enumerate() {
            if self
                .word(p)
                .try_change(|v| (v == FREE_PAIR).then_some(value))
                .is_err()
            {
                // The words set so far are ours: see the module documentation.
                self.clear_pairs(first + 1..first + 1 + i);
                return false;
            }
            self.persist(|| self.word(p));
        }
        true
    }

    /// Frees the span of `order` (11 and up) at frame `h` (checked for range and alignment):
    /// see the module documentation. False, and nothing changed, if none is there.
    #[inline(never)]
    pub(crate) fn free_span(&self, h: HugeId, order: u32) -> bool {
        let frames = 1usize << (order - HUGE_ORDER);
        let first = self.huges * WORDS + h.0 / 2;
        let start = self.word(first);
        window::pass();
        if start
            .try_change(|v| (v == start_pair(order)).then_some(FREEING_PAIR))
            .is_err()
        {
            return false;
        }
        self.persist(|| start);
        // Ours since the claim of the first word: no other operation changes them.
        self.clear_pairs((first + 1..first + frames / 2).chain([first]));
        true
    }

    /// Makes the pair words `words` free, one after the other, each written back before the
    /// next. `SeqCst`: a write that makes frames free, as the refusal memo's argument needs
    /// them (`refusal.rs`).
    fn clear_pairs(&self, words: impl Iterator<Item = usize>) {
        for p in words {
            self.word(p).store(FREE_PAIR, Ordering::SeqCst);
            self.persist(|| self.word(p));
        }
    }

    /// The live span that holds frame `h` (whose child entry has the span flag), as
    /// `(first unit, order)`: the first frame at an alignment of some span order at or
    /// before `h` that records that order.
    pub(crate) fn span_of(&self, h: HugeId) -> Option<(usize, u32)> {
        (HUGE_ORDER + 2..=SPAN_MAX_ORDER).find_map(|order| {
            let g = HugeId(h.0 & !((1 << (order - HUGE_ORDER)) - 1));
            (self.child(g) == Child::span_start(order)).then(|| (g.first_unit(), order))
        })
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use std::rc::Rc;
    use std::vec::Vec;

    use super::*;

    /// Spans of orders 11 and 12 among huge frames and a pair: each is one block to
    /// `block_of`, every bad free of it (another order, a part of it, twice) is refused with
    /// its exact error and changes nothing, and its frees are exact.
    #[test]
    fn spans_are_blocks_and_their_bad_frees_are_exact() {
        let lower = Lower::new(32 * HUGE_UNITS);
        assert!(lower.take_span(HugeId(0), 12));
        assert!(lower.take_span(HugeId(8), 11));
        assert!(!lower.take_span(HugeId(8), 11), "twice");
        assert!(!lower.take_span(HugeId(4), 11), "inside a span");
        assert!(!lower.take_span(HugeId(6), 11), "misaligned");
        assert_eq!(lower.alloc(HugeId(12), 0, 0), Some(12 * HUGE_UNITS));
        assert!(!lower.take_span(HugeId(12), 11), "a unit of a frame taken");
        assert!(!lower.take_span(HugeId(28), 13), "past the end");
        assert!(lower.alloc_at(16 * HUGE_UNITS, 10));
        for u in [0, 3 * HUGE_UNITS + 7, 7 * HUGE_UNITS + 511] {
            assert_eq!(lower.block_of(u), Some((0, 12)), "unit {u}");
        }
        assert_eq!(lower.block_of(9 * HUGE_UNITS), Some((8 * HUGE_UNITS, 11)));
        let unit = |h: usize| h * HUGE_UNITS;
        let refused = [
            (0, 11, Error::OrderMismatch),
            (0, 13, Error::OrderMismatch),
            (0, 9, Error::OrderMismatch),
            (0, 10, Error::OrderMismatch),
            (unit(4), 11, Error::NotAllocated),
            (unit(4), 9, Error::NotAllocated),
            (unit(2), 10, Error::NotAllocated),
            (unit(1), 0, Error::NotAllocated),
            (unit(8), 12, Error::OrderMismatch),
            (unit(8), 10, Error::OrderMismatch),
            (unit(10), 10, Error::NotAllocated),
            (unit(16), 11, Error::OrderMismatch),
            (unit(20), 11, Error::NotAllocated),
        ];
        let before = lower.frame_words(HugeId(0));
        let children: Vec<Child> = (0..32).map(|h| lower.child(HugeId(h))).collect();
        for (index, order, want) in refused {
            assert_eq!(
                lower.free(index, order),
                Err(want),
                "free({index}, {order})"
            );
        }
        assert_eq!(lower.frame_words(HugeId(0)), before);
        let after: Vec<Child> = (0..32).map(|h| lower.child(HugeId(h))).collect();
        assert_eq!(children, after, "a bad free changed a child entry");
        lower.assert_consistent();
        assert_eq!(lower.free(0, 12), Ok(()));
        assert_eq!(lower.free(0, 12), Err(Error::NotAllocated));
        assert_eq!(lower.free(unit(8), 11), Ok(()));
        assert_eq!(lower.free(unit(16), 10), Ok(()));
        assert_eq!(lower.free(unit(12), 0), Ok(()));
        assert!((0..32).all(|h| lower.child(HugeId(h)) == Child::FREE));
        // The whole lower level as one span, then nothing else fits.
        assert!(lower.take_span(HugeId(0), 14));
        assert_eq!(lower.alloc(HugeId(31), 0, 0), None);
        assert_eq!(lower.next_block(5, 32 * HUGE_UNITS), Some((0, 14)));
        assert_eq!(lower.free(0, 14), Ok(()));
    }

    /// The window of a free between reading and claiming the first word: in it the owner
    /// frees the span and a span of the next order takes its place. The stale free must
    /// fail, and leave that span whole.
    #[test]
    fn a_stale_span_free_raced_by_a_larger_span_fails() {
        let lower = Rc::new(Lower::new(16 * HUGE_UNITS));
        assert!(lower.take_span(HugeId(0), 11));
        let bigger = Rc::new(core::cell::Cell::new(false));
        {
            let (lower, bigger) = (lower.clone(), bigger.clone());
            window::open_once(move || {
                lower.free(0, 11).unwrap();
                bigger.set(lower.take_span(HugeId(0), 12));
            });
        }
        assert_eq!(lower.free(0, 11), Err(Error::OrderMismatch));
        assert!(bigger.get());
        assert_eq!(lower.block_of(7 * HUGE_UNITS), Some((0, 12)));
        assert_eq!(lower.free(0, 12), Ok(()));
    }

    /// A claim that finds a frame of its group taken in the middle clears the words it set.
    #[test]
    fn a_claim_that_loses_a_frame_gives_back_the_others() {
        let lower = Lower::new(16 * HUGE_UNITS);
        assert!(lower.alloc_at(6 * HUGE_UNITS, 9));
        assert!(!lower.take_span(HugeId(0), 12));
        assert!((0..8)
            .filter(|&h| h != 6)
            .all(|h| lower.child(HugeId(h)) == Child::FREE));
        assert!(lower.take_span(HugeId(8), 12));
        assert_eq!(lower.free(6 * HUGE_UNITS, 9), Ok(()));
        assert!(lower.take_span(HugeId(0), 12));
    }
}
