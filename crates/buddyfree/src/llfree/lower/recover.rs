//! Recovery of the lower level after a crash (§3.2.3), and the walk over its live blocks.
//!
//! The truth after a crash is what one atomic change of one word commits: the bit fields
//! (orders 0..=8) and the huge and pair flags of the child entries (orders 9 and 10). The
//! child counters are derived and rebuilt. The start table is persisted too and kept where
//! it is consistent with the slots: an entry `order + 1` names a live block only if it is
//! aligned, not inside another named block, and all its slots are `11`. Every other taken
//! slot becomes an order-0 block (`01`).
//!
//! What a crash in the middle of an operation leaves, and what recovery makes of it:
//! - an allocation that set its bits but not yet its start entry (orders 1..=8), or set only
//!   some words (orders 6..=8): the taken units are order-0 blocks nobody holds ("orphans",
//!   the paper's lost frames); a stale start entry over bits not all taken is cleared;
//! - a free that claimed its start entry ([`FREEING`]) but had not cleared (all) its bits:
//!   the entry is cleared, the units still taken are orphans. Recovery never frees a unit,
//!   because units of a half-freed block may already have been reused by another core;
//! - a free of order 0 or an allocation of order 0, 9 or 10 is one compare-and-swap: done
//!   or not.
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
    /// Rebuilds the child counters and cleans the start table from the bit fields and huge
    /// flags of a zone of `units` units and blocks up to `max_order`. Returns the units
    /// allocated. Runs alone (no operation in flight). Every frame is checked before any is
    /// changed, so a damaged lower level is reported untouched.
    pub(crate) fn recover(&self, units: usize, max_order: u32) -> Result<usize, Corrupt> {
        for h in (0..self.huges).map(HugeId) {
            self.check_frame(h, units, max_order)?;
        }
        let mut allocated = 0;
        for h in (0..self.huges).map(HugeId) {
            let (taken, child) = self.check_frame(h, units, max_order)?;
            let fixed = if child.huge() {
                // Nothing names a block inside a huge frame.
                for s in 0..START_WORDS {
                    self.start_word(h, s).store(0, Ordering::Relaxed);
                }
                allocated += HUGE_UNITS;
                if child.pair() {
                    Child::PAIR
                } else {
                    Child::HUGE
                }
            } else {
                allocated += taken;
                let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
                self.rebuild_starts(h);
                self.rebuild_slots(h, real);
                Child::with_free(real - taken)
            };
            let _ = self.update_child(h, |_| Some(fixed));
        }
        Ok(allocated)
    }

    /// Checks what recovery trusts in frame `h`: the padding past the last unit is taken, a
    /// huge frame has no taken bits and its pair flag a partner, and no block is above
    /// `max_order` (one could never be freed). Returns the taken units (without padding) and
    /// the child entry.
    fn check_frame(
        &self,
        h: HugeId,
        units: usize,
        max_order: u32,
    ) -> Result<(usize, Child), Corrupt> {
        let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
        let corrupt = |what| Corrupt { frame: h.0, what };
        let mut taken = 0;
        for w in 0..WORDS {
            let bits = self.bits(h, w).get();
            let padding = padding(real, w);
            if bits & padding != padding {
                return Err(corrupt("a unit past the end is free"));
            }
            if bits >> 1 & !bits & LOW_BITS != 0 {
                return Err(corrupt("a slot that is neither free nor taken"));
            }
            taken += taken_slots(bits & !padding) as usize;
        }
        let child = self.child(h);
        let order = match (child.huge(), child.pair()) {
            (true, true) => Some(HUGE_ORDER + 1),
            (true, false) => Some(HUGE_ORDER),
            // Start entries name orders up to 8: only a smaller limit needs them read.
            _ if max_order < HUGE_ORDER - 1 => self.largest_start(h),
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

    /// The largest order a start entry of frame `h` names, if it names any.
    fn largest_start(&self, h: HugeId) -> Option<u32> {
        (0..START_WORDS)
            .map(|s| self.start_word(h, s).load(Ordering::Relaxed))
            .flat_map(|word| (0..STARTS_PER_WORD).map(move |e| word >> (4 * e) & 0xF))
            .filter_map(live_order)
            .max()
    }

    /// Clears every start entry of frame `h` that names no live block.
    fn rebuild_starts(&self, h: HugeId) {
        // Blocks are aligned, so one that starts before a unit and covers it was seen last.
        let mut covered = 0;
        for s in 0..START_WORDS {
            let word = self.start_word(h, s);
            let old = word.load(Ordering::Relaxed);
            if old == 0 {
                // The usual word: no block of order 1..=8 starts in these 16 units.
                continue;
            }
            let mut kept = old;
            for e in (0..STARTS_PER_WORD).filter(|e| old >> (4 * e) & 0xF != 0) {
                let unit = s * STARTS_PER_WORD + e;
                match live_order(old >> (4 * e) & 0xF) {
                    Some(order)
                        if unit.is_multiple_of(1 << order)
                            && unit >= covered
                            && self.all_larger(h, unit, order) =>
                    {
                        covered = unit + (1 << order);
                    }
                    _ => kept &= !(0xF << (4 * e)),
                }
            }
            if kept != old {
                word.store(kept, Ordering::Relaxed);
            }
        }
    }

    /// Whether every slot of the block of `order` at unit `unit` of frame `h` is `11`.
    fn all_larger(&self, h: HugeId, unit: usize, order: u32) -> bool {
        if order <= WORD_ORDER {
            let mask = block_mask(order + 1) << (unit % SLOTS * 2);
            self.bits(h, unit / SLOTS).get() & mask == mask
        } else {
            let first = unit / SLOTS;
            (first..first + (1 << (order - WORD_ORDER))).all(|w| self.bits(h, w).get() == u64::MAX)
        }
    }

    /// Makes every taken slot of frame `h` that no start entry names (cut-off operations)
    /// an order-0 block, keeping the padding past `real` units.
    fn rebuild_slots(&self, h: HugeId, real: usize) {
        let mut named = [0u64; WORDS];
        self.blocks_of(h, real, |unit, order| {
            if order > 0 {
                for u in unit..unit + (1 << order) {
                    named[u / SLOTS] |= LARGER_SLOT << (u % SLOTS * 2);
                }
            }
        });
        for (w, named) in named.into_iter().enumerate() {
            let word = self.bits(h, w);
            let old = word.load(Ordering::Relaxed);
            let fixed = (old | old >> 1) & LOW_BITS | named | padding(real, w);
            if fixed != old {
                word.store(fixed, Ordering::Relaxed);
            }
        }
    }

    /// Calls `f(index, order)` for every block the lower level holds, in address order:
    /// huge flags give orders 9 and 10, start entries orders 1..=8, and any other taken unit
    /// is an order-0 block. Only meaningful with no operation in flight.
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
            self.blocks_of(h, real, |unit, order| f(h.first_unit() + unit, order));
        }
    }

    /// Calls `f(unit, order)` for every block of orders 0..=8 among the first `real` units of
    /// frame `h`: start entries name orders 1..=8, and any other taken unit is an order-0
    /// block.
    fn blocks_of(&self, h: HugeId, real: usize, mut f: impl FnMut(usize, u32)) {
        let mut unit = 0;
        while unit < real {
            let index = h.first_unit() + unit;
            if let Some(order) = live_order(self.start(index)) {
                f(unit, order);
                unit += 1 << order;
            } else {
                if self.slot(index) != FREE_SLOT {
                    f(unit, 0);
                }
                unit += 1;
            }
        }
    }

    fn start_word(&self, h: HugeId, s: usize) -> &AtomicU64 {
        self.word(self.starts_at + h.0 * START_WORDS + s)
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::llfree::MAX_ORDER;

    /// A frame with a live order-3 block, an order-4 allocation cut off after its bits, a
    /// free of order 2 cut off after its claim, and a stale entry over free bits.
    #[test]
    fn recovery_keeps_named_blocks_and_turns_cut_off_operations_into_orphans() {
        let lower = Lower::new(1024);
        let a = lower.alloc(HugeId(0), 3, 0).unwrap();
        let b = lower.alloc(HugeId(0), 4, 0).unwrap();
        let c = lower.alloc(HugeId(0), 2, 0).unwrap();
        // b's start entry never written; c's free claimed but not carried out; a stale
        // order-5 entry at unit 128, whose bits are free.
        let _ = lower.update_start(b, |_| Some(0));
        let _ = lower.update_start(c, |_| Some(FREEING));
        let _ = lower.update_start(128, |_| Some(6));
        // The counters are wrong after a crash; recovery must not read them.
        let _ = lower.update_child(HugeId(0), |_| Some(Child::with_free(3)));
        assert_eq!(lower.recover(1024, MAX_ORDER), Ok(8 + 16 + 4));
        lower.assert_consistent();
        let mut blocks = Vec::new();
        lower.blocks(1024, |i, o| blocks.push((i, o)));
        let mut want = alloc::vec![(a, 3)];
        want.extend((b..b + 16).map(|i| (i, 0)));
        want.extend((c..c + 4).map(|i| (i, 0)));
        want.sort();
        assert_eq!(blocks, want);
        assert_eq!(lower.free(a, 3), Ok(()));
        assert_eq!(lower.free(b + 1, 0), Ok(()));
    }

    #[test]
    fn recovery_rejects_impossible_states() {
        let lower = Lower::new(1000);
        assert_eq!(lower.recover(1000, MAX_ORDER), Ok(0));
        // A padding unit of the partial last frame freed.
        lower.bits(HugeId(1), WORDS - 1).store(0, Ordering::Relaxed);
        assert_eq!(lower.recover(1000, MAX_ORDER).unwrap_err().frame, 1);
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
    }
}
