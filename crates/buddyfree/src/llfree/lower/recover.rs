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
//! So every block whose allocation returned and whose free was not called is recovered
//! with its order, and at most the block of each operation in flight is lost, as units
//! that [`Lower::blocks`] lists as order-0 blocks (they can be freed as such).

use super::*;
use crate::llfree::HUGE_ORDER;

/// A persistent lower level that no run of the allocator can leave behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Corrupt {
    /// The huge frame.
    pub(crate) frame: usize,
    /// What is wrong with it.
    pub(crate) what: &'static str,
}

impl<W: WriteBack> Lower<W> {
    /// Rebuilds the child counters, and turns the slots no block names into order-0 blocks,
    /// from the bit fields and huge flags of a zone of `units` units and blocks up to
    /// `max_order`. Returns the units allocated. Runs alone (no operation in flight). Every
    /// frame is checked before any is changed, so a damaged lower level is reported
    /// untouched.
    pub(crate) fn recover(&self, units: usize, max_order: u32) -> Result<usize, Corrupt> {
        for h in (0..self.huges).map(HugeId) {
            self.check_frame(h, units, max_order)?;
        }
        let mut allocated = 0;
        for h in (0..self.huges).map(HugeId) {
            let (taken, child) = self.check_frame(h, units, max_order)?;
            let fixed = if child.huge() {
                allocated += HUGE_UNITS;
                if child.pair() {
                    Child::PAIR
                } else {
                    Child::HUGE
                }
            } else {
                allocated += taken;
                let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
                self.rebuild_slots(h, real);
                Child::with_free(real - taken)
            };
            let _ = self.update_child(h, |_| Some(fixed));
        }
        Ok(allocated)
    }

    /// Checks what recovery trusts in frame `h`: the padding past the last unit is intact
    /// (`10` slots), a huge frame has no taken bits and its pair flag a partner, and no block
    /// is above `max_order` (one could never be freed). Returns the taken units (without
    /// padding) and the child entry.
    fn check_frame(
        &self,
        h: HugeId,
        units: usize,
        max_order: u32,
    ) -> Result<(usize, Child), Corrupt> {
        let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
        let corrupt = |what| Corrupt { frame: h.0, what };
        let words = self.frame_words(h);
        let mut taken = 0;
        for (w, &bits) in words.iter().enumerate() {
            let padding = padding(real, w);
            if bits & padding != padding & HIGH_BITS {
                return Err(corrupt("a unit past the end is not padding"));
            }
            taken += taken_slots(bits & !padding) as usize;
        }
        let child = self.child(h);
        let order = match (child.huge(), child.pair()) {
            (true, true) => Some(HUGE_ORDER + 1),
            (true, false) => Some(HUGE_ORDER),
            // The slots name orders up to 8: only a smaller limit needs them read.
            _ if max_order < HUGE_ORDER - 1 => {
                let mut largest = None;
                frame_blocks(&words, real, |_, order, named| {
                    if named {
                        largest = largest.max(Some(order));
                    }
                });
                largest
            }
            _ => None,
        };
        if order.is_some_and(|o| o > max_order) {
            return Err(corrupt("a block above the largest order"));
        }
        if child.huge() {
            let partner = HugeId(h.0 ^ 1);
            if taken != 0 || real != HUGE_UNITS {
                return Err(corrupt("a huge frame with taken bits"));
            }
            if child.pair() && (partner.0 >= self.huges || !self.child(partner).pair()) {
                return Err(corrupt("half of an order-10 block"));
            }
        } else if child.pair() {
            return Err(corrupt("a pair flag without the huge flag"));
        }
        Ok((taken, child))
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

    /// Calls `f(index, order)` for every block the lower level holds, in address order:
    /// huge flags give orders 9 and 10, the slots orders 0..=8, and any other taken unit is
    /// an order-0 block. Only meaningful with no operation in flight.
    pub(crate) fn blocks(&self, units: usize, mut f: impl FnMut(usize, u32)) {
        for h in (0..self.huges).map(HugeId) {
            let child = self.child(h);
            if child.huge() {
                if !child.pair() {
                    f(h.first_unit(), HUGE_ORDER);
                } else if h.0.is_multiple_of(2) {
                    f(h.first_unit(), HUGE_ORDER + 1);
                }
                continue;
            }
            let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
            frame_blocks(&self.frame_words(h), real, |unit, order, _| {
                f(h.first_unit() + unit, order)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::llfree::MAX_ORDER;

    fn blocks_of(lower: &Lower, units: usize) -> Vec<(usize, u32)> {
        let mut blocks = Vec::new();
        lower.blocks(units, |i, o| blocks.push((i, o)));
        blocks
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
            assert_eq!(lower.recover(1000, MAX_ORDER).unwrap_err().frame, 1);
        }
        let lower = Lower::new(2048);
        let _ = lower.update_child(HugeId(2), |_| Some(Child::PAIR));
        assert_eq!(lower.recover(2048, MAX_ORDER).unwrap_err().frame, 2);
        let lower = Lower::new(2048);
        assert_eq!(lower.alloc(HugeId(2), 10, 0), Some(1024));
        assert_eq!(lower.alloc(HugeId(0), 9, 0), Some(0));
        assert_eq!(lower.recover(2048, MAX_ORDER), Ok(1536));
        lower.bits(HugeId(0), 3).store(1, Ordering::Relaxed);
        assert_eq!(lower.recover(2048, MAX_ORDER).unwrap_err().frame, 0);
    }

    /// A zone whose header says a smaller largest order than its blocks have (damage that
    /// fixed up the header's checksum): those blocks could never be freed.
    #[test]
    fn recovery_rejects_blocks_above_the_largest_order() {
        let refused = |lower: &Lower, max_order| {
            lower
                .recover(2048, max_order)
                .map_err(|c| (c.frame, c.what))
        };
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
