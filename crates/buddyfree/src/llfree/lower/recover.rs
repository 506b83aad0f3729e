//! Recovery of the lower level after a crash (§3.2.3), and the walk over its live blocks.
//!
//! The truth after a crash is what one atomic change of one word commits: the bit fields
//! (orders 0..=8) and the huge and pair flags of the child entries (orders 9 and 10). The
//! child counters are derived and rebuilt. A block of order 1..=8 is live where its slots
//! name it in full (`lower.rs`): `10` and then `11`s, not followed by `11`, inside a word
//! (orders 1..=5); a start word `START(k)` followed by all-`11` continuation words (orders
//! 6..=8). Every other taken slot becomes an order-0 block (`01`).
//!
//! What a crash in the middle of an operation leaves, and what recovery makes of it:
//! - an allocation of order 6..=8 that set some continuation words but not its start word,
//!   or a free of order 6..=8 that turned its start word into `FREEING` but had not cleared
//!   (all) its words: the taken units of those words are order-0 blocks nobody holds
//!   ("orphans", the paper's lost frames). Recovery never frees a unit, because cleared
//!   units of a half-freed block may already have been reused by another core;
//! - an allocation or free of order 0..=5, or of order 9 or 10, is one compare-and-swap:
//!   done or not.
//!
//! The words of one multi-word block share a cache line, so whatever part of a line reaches
//! the medium, a start word there names a block whose continuation words were set before
//! it; one not followed by them (damage only) names nothing, and its units become orphans.
//!
//! - an allocation or free of order 11 and up (a span of whole frames, `span.rs`) cut off
//!   between its pair words: the frames it had taken whole name no block, and become order-9
//!   blocks nobody holds (orphans again; recovery never frees a frame).
//!
//! So every block whose allocation returned and whose free was not called is recovered
//! with its order, and at most the block of each operation in flight is lost, as order-0
//! blocks, or whole frames as order-9 blocks, that [`Lower::next_block`] finds as any
//! other (they can be freed as such).

use super::*;
use crate::llfree::{RecoverError, HUGE_ORDER};

/// What the child entries of a run of frames hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frames {
    /// A frame not taken whole: its bit field holds its blocks.
    Bits,
    /// A block of `order` (9, 10 or a span) taken whole, from this frame on. A frame taken
    /// whole as part of no live block (what a claim or a free of a span cut off by a crash
    /// leaves) is one of order 9 that nobody holds.
    Whole(u32),
}

impl Frames {
    /// The frames this covers.
    fn frames(self) -> usize {
        match self {
            Frames::Whole(order) => 1 << (order - HUGE_ORDER),
            _ => 1,
        }
    }
}

impl<W: WriteBack> Lower<W> {
    /// Rebuilds the child counters, and turns the slots no block names into order-0 blocks
    /// and the frames taken whole that no block names into order-9 blocks, from the bit
    /// fields and huge flags of a zone of `units` units and blocks up to `max_order`.
    /// Returns the units allocated. Runs alone (no operation in flight). Every frame is
    /// checked before any is changed, so a damaged lower level is reported untouched.
    pub(crate) fn recover(&self, units: usize, max_order: u32) -> Result<usize, RecoverError> {
        let mut allocated = 0;
        // Each run of frames [`Lower::frames_at`] tells apart, in address order: checked
        // only in the first pass, rebuilt in the second.
        for rebuild in [false, true] {
            allocated = 0;
            let mut h = HugeId(0);
            while h.0 < self.huges {
                let frames = self
                    .frames_at(h)
                    .map_err(|what| RecoverError::Corrupt { frame: h.0, what })?;
                let taken = self.check_frames(h, frames, units, max_order)?;
                allocated += taken;
                match frames {
                    _ if !rebuild => {}
                    Frames::Bits => {
                        let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
                        self.rebuild_slots(h, real);
                        let _ = self.update_child(h, |_| Some(Child::with_free(real - taken)));
                    }
                    // Frames taken whole get exactly their entries, with no counter or stray
                    // bits below the flags.
                    Frames::Whole(order) => {
                        let (first, rest) = match order {
                            HUGE_ORDER => (Child::HUGE, Child::HUGE),
                            10 => (Child::PAIR, Child::PAIR),
                            _ => (Child::span_start(order), Child::SPAN),
                        };
                        let _ = self.update_child(h, |_| Some(first));
                        for f in h.0 + 1..h.0 + frames.frames() {
                            let _ = self.update_child(HugeId(f), |_| Some(rest));
                        }
                    }
                }
                h = HugeId(h.0 + frames.frames());
            }
        }
        Ok(allocated)
    }

    /// What the child entries from frame `h` on hold (quiescent state only), and the frames
    /// that covers, read from their flags alone (the counters are rebuilt by recovery). A
    /// state no run leaves is `Err` with what is wrong.
    fn frames_at(&self, h: HugeId) -> Result<Frames, &'static str> {
        let flags = |h: usize| self.child(HugeId(h)).flags();
        let child = flags(h.0);
        if !child.huge() {
            return match child.pair() || child.span() {
                true => Err("a pair or span flag without the huge flag"),
                false => Ok(Frames::Bits),
            };
        }
        if child.span() {
            let named = child.span_order().filter(|&order| {
                let frames = 1usize << (order - HUGE_ORDER);
                h.0.is_multiple_of(frames)
                    && h.0 + frames <= self.huges
                    && (h.0 + 1..h.0 + frames).all(|f| flags(f) == Child::SPAN)
            });
            return Ok(Frames::Whole(named.unwrap_or(HUGE_ORDER)));
        }
        if !child.pair() {
            return Ok(Frames::Whole(HUGE_ORDER));
        }
        let whole = h.0.is_multiple_of(2) && h.0 + 1 < self.huges && flags(h.0 + 1).pair();
        match whole {
            true => Ok(Frames::Whole(HUGE_ORDER + 1)),
            false => Err("half of an order-10 block"),
        }
    }

    /// Checks what recovery trusts in the frames from `h` on: the padding past the last unit
    /// is intact (`10` slots), a frame taken whole is whole and has no taken bits, and no
    /// block is above `max_order` (one could never be freed). Returns the units they hold
    /// taken (without padding).
    fn check_frames(
        &self,
        h: HugeId,
        frames: Frames,
        units: usize,
        max_order: u32,
    ) -> Result<usize, RecoverError> {
        let corrupt = |frame, what| RecoverError::Corrupt { frame, what };
        let mut taken = 0;
        let mut largest = None;
        for f in (h.0..h.0 + frames.frames()).map(HugeId) {
            let real = units.saturating_sub(f.first_unit()).min(HUGE_UNITS);
            let words = self.frame_words(f);
            let mut bits = 0;
            for (w, &word) in words.iter().enumerate() {
                let padding = padding(real, w);
                if word & padding != padding & HIGH_BITS {
                    return Err(corrupt(f.0, "a unit past the end is not padding"));
                }
                bits += taken_slots(word & !padding) as usize;
            }
            if frames == Frames::Bits {
                taken += bits;
                // The slots name orders up to 8: only a smaller limit needs them read.
                if max_order < HUGE_ORDER - 1 {
                    frame_blocks(&words, real, |_, order, named| {
                        if named {
                            largest = largest.max(Some(order));
                        }
                    });
                }
            } else if bits != 0 || real != HUGE_UNITS {
                return Err(corrupt(f.0, "a huge frame with taken bits"));
            } else {
                taken += HUGE_UNITS;
            }
        }
        let order = match frames {
            Frames::Whole(order) => Some(order),
            Frames::Bits => largest,
        };
        if order.is_some_and(|o| o > max_order) {
            return Err(corrupt(h.0, "a block above the largest order"));
        }
        Ok(taken)
    }

    /// Makes every taken slot of frame `h` that no block names (cut-off operations) an
    /// order-0 block, keeping the named blocks and the padding past `real` units.
    fn rebuild_slots(&self, h: HugeId, real: usize) {
        let old = self.frame_words(h);
        let mut fixed: [u64; WORDS] = core::array::from_fn(|w| padding(real, w) & HIGH_BITS);
        frame_blocks(&old, real, |unit, order, _| {
            let (w, p) = (unit / SLOTS, unit % SLOTS);
            if order > WORD_ORDER {
                fixed[w] = start_word(order);
                fixed[w + 1..w + (1 << (order - WORD_ORDER))].fill(u64::MAX);
            } else {
                // An orphan is reported as order 0, and so becomes `01`.
                fixed[w] |= slots_of(order) << (2 * p);
            }
        });
        for (w, (old, fixed)) in old.into_iter().zip(fixed).enumerate() {
            if fixed != old {
                self.bits(h, w).store(fixed, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::llfree::MAX_ORDER;

    /// The frame and the message of a refused recovery.
    pub(super) fn frame_and_what(e: RecoverError) -> (usize, &'static str) {
        match e {
            RecoverError::Corrupt { frame, what } => (frame, what),
            e => panic!("not a damaged frame: {e}"),
        }
    }

    /// The frame recovery of `units` units names as damaged.
    fn damaged_frame(lower: &Lower, units: usize) -> usize {
        frame_and_what(lower.recover(units, MAX_ORDER).unwrap_err()).0
    }

    pub(super) fn blocks_of(lower: &Lower, units: usize) -> Vec<(usize, u32)> {
        let next = |at: usize| lower.next_block(at, units);
        core::iter::successors(next(0), |&(i, o)| next(i + (1 << o))).collect()
    }

    /// A frame with live blocks of orders 3 and 7, an order-7 allocation cut off after two
    /// of its continuation words, an order-6 free cut off after its claim (start word
    /// FREEING, its continuation word still set), a start word without its continuation
    /// word and a lone `10` slot (damage): the live blocks keep their orders, every other
    /// taken unit becomes an order-0 block.
    #[test]
    fn recovery_keeps_named_blocks_and_turns_cut_off_operations_into_orphans() {
        let lower = Lower::new(1024);
        let a = lower.alloc(HugeId(0), 3, 0).unwrap();
        let d = lower.alloc(HugeId(0), 7, 0).unwrap();
        assert_eq!((a, d), (0, 128));
        let set = |w: usize, v: u64| lower.bits(HugeId(0), w).store(v, Ordering::Relaxed);
        set(9, u64::MAX);
        set(10, u64::MAX);
        set(12, FREEING);
        set(13, u64::MAX);
        set(14, start_word(6));
        set(1, START_SLOT);
        // The counters are wrong after a crash; recovery must not read them.
        let _ = lower.update_child(HugeId(0), |_| Some(Child::with_free(3)));
        assert_eq!(
            lower.recover(1024, MAX_ORDER),
            Ok(8 + 1 + 128 + 64 + 64 + 32)
        );
        lower.assert_consistent();
        let mut want = alloc::vec![(a, 3), (32, 0), (d, 7)];
        want.extend((9 * 32..11 * 32).map(|i| (i, 0)));
        want.extend((12 * 32..15 * 32).map(|i| (i, 0)));
        assert_eq!(blocks_of(&lower, 1024), want);
        assert_eq!(lower.free(a, 3), Ok(()));
        assert_eq!(lower.free(d, 7), Ok(()));
        assert_eq!(lower.free(32, 0), Ok(()));
        assert_eq!(lower.free(12 * 32 + 5, 0), Ok(()));
        // Recovery of a recovered frame changes nothing.
        let before = lower.frame_words(HugeId(0));
        assert_eq!(lower.recover(1024, MAX_ORDER), Ok(1 + 64 + 64 + 32 - 2));
        assert_eq!(lower.frame_words(HugeId(0)), before);
    }

    /// Blocks of every order 1..=8, blocks against the padding of a partial last frame, and
    /// order-0 blocks all come back as they were.
    #[test]
    fn recovery_keeps_every_live_block() {
        let units = 512 + 40;
        let lower = Lower::new(units);
        let mut want = Vec::new();
        for (at, order) in [(0, 1), (4, 2), (8, 0), (16, 4), (32, 5), (64, 6), (256, 8)] {
            assert!(lower.alloc_at(at, order));
            want.push((at, order));
        }
        for (at, order) in [(128, 7), (512, 5), (544, 3)] {
            assert!(lower.alloc_at(at, order));
            want.push((at, order));
        }
        want.sort();
        assert_eq!(blocks_of(&lower, units), want);
        let taken = want.iter().map(|&(_, o)| 1 << o).sum();
        assert_eq!(lower.recover(units, MAX_ORDER), Ok(taken));
        assert_eq!(blocks_of(&lower, units), want);
        lower.assert_consistent();
        for (at, order) in want {
            assert_eq!(lower.free(at, order), Ok(()));
        }
    }

    #[test]
    fn recovery_rejects_impossible_states() {
        let lower = Lower::new(1000);
        assert_eq!(lower.recover(1000, MAX_ORDER), Ok(0));
        // A padding unit of the partial last frame freed, or made `11`.
        for damage in [0, u64::MAX] {
            let lower = Lower::new(1000);
            lower
                .bits(HugeId(1), WORDS - 1)
                .store(damage, Ordering::Relaxed);
            assert_eq!(damaged_frame(&lower, 1000), 1);
        }
        let lower = Lower::new(2048);
        let _ = lower.update_child(HugeId(2), |_| Some(Child::PAIR));
        assert_eq!(damaged_frame(&lower, 2048), 2);
        let lower = Lower::new(2048);
        assert_eq!(lower.alloc(HugeId(2), 10, 0), Some(1024));
        assert_eq!(lower.alloc(HugeId(0), 9, 0), Some(0));
        assert_eq!(lower.recover(2048, MAX_ORDER), Ok(1536));
        lower.bits(HugeId(0), 3).store(1, Ordering::Relaxed);
        assert_eq!(damaged_frame(&lower, 2048), 0);
    }

    /// A zone whose header says a smaller largest order than its blocks have (damage that
    /// fixed up the header's checksum): those blocks could never be freed.
    #[test]
    fn recovery_rejects_blocks_above_the_largest_order() {
        let refused =
            |lower: &Lower, max_order| lower.recover(2048, max_order).map_err(frame_and_what);
        let above = "a block above the largest order";
        let lower = Lower::new(2048);
        assert_eq!(lower.alloc(HugeId(2), 10, 0), Some(1024));
        assert_eq!(refused(&lower, 9), Err((2, above)));
        let lower = Lower::new(2048);
        assert_eq!(lower.alloc(HugeId(1), 9, 0), Some(512));
        assert_eq!(refused(&lower, 8), Err((1, above)));
        let a = lower.alloc(HugeId(0), 3, 0).unwrap();
        assert_eq!(refused(&lower, 2), Err((0, above)));
        assert_eq!(lower.recover(2048, 9), Ok(512 + 8));
        assert_eq!(lower.free(a, 3), Ok(()));
        // Multi-word blocks: an order-7 block is above 6; a start word of order 8 without
        // its continuation words names no block, only orphans.
        let lower = Lower::new(2048);
        let b = lower.alloc(HugeId(3), 7, 0).unwrap();
        assert_eq!(refused(&lower, 6), Err((3, above)));
        assert_eq!(lower.free(b, 7), Ok(()));
        lower
            .bits(HugeId(3), 8)
            .store(start_word(8), Ordering::Relaxed);
        assert_eq!(lower.recover(2048, 7), Ok(32));
        assert_eq!(blocks_of(&lower, 2048).len(), 32);
    }
}

#[cfg(test)]
mod span_tests {
    use alloc::vec::Vec;

    use super::*;

    /// Spans of orders 11 and 12 come back whole; a span claim cut off after some of its
    /// pair words (no first word), a free cut off after its claim (first word FREEING, some
    /// words cleared) and a first word whose other frames are not all set (damage) leave
    /// frames taken whole that name nothing: each becomes an order-9 block nobody holds.
    /// A span above the largest order is refused untouched.
    #[test]
    fn recovery_keeps_spans_and_turns_cut_off_ones_into_huge_frames() {
        let lower = Lower::new(48 * HUGE_UNITS);
        assert!(lower.take_span(HugeId(0), 12));
        assert!(lower.take_span(HugeId(8), 11));
        let set = |h: usize, child: Child| {
            let _ = lower.update_child(HugeId(h), |_| Some(child));
        };
        // A claim of order 12 at frame 16 that had set the pair words of frames 18..=21.
        (18..22).for_each(|h| set(h, Child::SPAN));
        // A free of order 12 at frame 24 that had claimed the first word and cleared the
        // frames 26 and 27.
        set(24, Child::SPAN_FREEING);
        set(25, Child::SPAN);
        (28..32).for_each(|h| set(h, Child::SPAN));
        // Counters (below the flags) are rebuilt, not trusted: damaged ones in the frames of
        // the span at frame 8 leave it whole.
        set(8, Child(Child::span_start(11).0 | 0x155));
        set(9, Child(Child::SPAN.0 | 0x3_0000));
        // A first word of order 11 at frame 32 whose frame 34 is free.
        set(32, Child::span_start(11));
        set(33, Child::SPAN);
        set(35, Child::SPAN);
        let before: Vec<Child> = (0..48).map(|h| lower.child(HugeId(h))).collect();
        let refused = lower
            .recover(48 * HUGE_UNITS, 11)
            .map_err(super::tests::frame_and_what);
        assert_eq!(refused, Err((0, "a block above the largest order")));
        let after: Vec<Child> = (0..48).map(|h| lower.child(HugeId(h))).collect();
        assert_eq!(before, after, "a refused recovery changed a child entry");
        let orphans = [18, 19, 20, 21, 24, 25, 28, 29, 30, 31, 32, 33, 35];
        let allocated = (8 + 4 + orphans.len()) * HUGE_UNITS;
        assert_eq!(lower.recover(48 * HUGE_UNITS, 12), Ok(allocated));
        lower.assert_consistent();
        assert_eq!(lower.child(HugeId(8)), Child::span_start(11));
        assert_eq!(lower.child(HugeId(9)), Child::SPAN);
        let mut want = alloc::vec![(0, 12), (8 * HUGE_UNITS, 11)];
        want.extend(orphans.iter().map(|&h| (h * HUGE_UNITS, HUGE_ORDER)));
        assert_eq!(super::tests::blocks_of(&lower, 48 * HUGE_UNITS), want);
        for (index, order) in want {
            assert_eq!(lower.free(index, order), Ok(()), "free({index}, {order})");
        }
        assert!((0..48).all(|h| lower.child(HugeId(h)) == Child::FREE));
    }
}
