//! Which tree entries may hold free units: one bit per tree, so that an allocation on a
//! heap with too few free units is refused after reading a few words instead of reserving,
//! stealing, draining and scanning every tree.
//!
//! The free units of LLFree are in the tree entries' `cU` and the cores' `cP` (`moves.rs`).
//! The cores' counters are few and read directly; the tree entries are many, so they are
//! summed through this bitmap. The invariant, whenever no summary update is in flight:
//!
//! > a tree whose `cU` is not 0 has its bit set.
//!
//! A bit may be set for a tree whose `cU` is 0 (stale); only [`Summary::clear_stale`], on
//! the refusing path, clears it. Kept by:
//!
//! - **Raising `cU` from 0** (a free from a core not holding the tree, a reservation given
//!   back, units an allocation gives back): the read-modify-write that raised it returns
//!   the old count, and the writer then sets the bit with a read-modify-write of its own
//!   ([`Summary::mark`]), never after a plain read of the bit. Inside a reservation move the
//!   bit is set before the move ends, so a scanner that finds the move counter quiet sees it.
//! - **Lowering `cU` to 0** (an allocation's take, a reservation, a sync): the bit stays.
//! - **Clearing** ([`Summary::clear_stale`], as one reservation move): clear the bit, read
//!   `cU` again, set the bit again if it is not 0. A writer that raised `cU` set the bit by
//!   a read-modify-write; either that comes after the clear (the bit ends set) or the clear
//!   read it (acquire-release: the raise happened before, and the second read sees it).
//!   Between the clear and the setting again the bit may be 0 with `cU` not 0: the move
//!   brackets that window, so a concurrent refusal that read the bitmap then is not quiet
//!   and takes the complete path.
//!
//! So a refusal that read the move counter quiet before and after it summed the cores'
//! counters and the marked trees' entries saw every unit that was in a counter, as the
//! complete scan does (`moves.rs`).

use super::TreeId;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::table::{Metadata, Part, Table};
use crate::Error;

/// Trees per bitmap word.
const BITS: usize = 64;

/// One bit per tree: set when its entry may hold free units.
pub(crate) struct Summary {
    words: Table<AtomicU64>,
}

impl Summary {
    /// Words of the bitmap for `trees` trees.
    pub(crate) const fn words(trees: usize) -> usize {
        trees.div_ceil(BITS)
    }

    /// The bitmap at `part` of `meta` for `trees` trees, a bit set for each tree that
    /// `has_free`.
    pub(crate) fn new(
        meta: &Metadata,
        part: Part<AtomicU64>,
        trees: usize,
        has_free: impl Fn(usize) -> bool,
    ) -> Result<Summary, Error> {
        let word = |w: usize| {
            (w * BITS..((w + 1) * BITS).min(trees))
                .filter(|&t| has_free(t))
                .fold(0, |bits, t| bits | 1 << (t % BITS))
        };
        Ok(Summary {
            words: meta.table(part, |w| AtomicU64::new(word(w)))?,
        })
    }

    /// After `t`'s `cU` was raised from 0: its bit is set (a read-modify-write, see the
    /// module docs). `SeqCst` (the same instruction as `AcqRel` on x86-64 and AArch64): a
    /// credit's writes are in the single order that the refusal memo's argument needs
    /// (`refusal.rs`).
    #[inline]
    pub(crate) fn mark(&self, t: TreeId) {
        self.words[t.0 / BITS].fetch_or(1 << (t.0 % BITS), Ordering::SeqCst);
    }

    /// The trees whose bits are set, in order (each word read once, with acquire).
    pub(crate) fn marked(&self) -> impl Iterator<Item = TreeId> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::Acquire);
            core::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let t = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    TreeId(w * BITS + t)
                })
            })
        })
    }

    /// The trees whose bits are set, from tree `from` on, wrapping around to those before
    /// it (each word read once, with acquire; the word of `from` twice, its bits at and
    /// after `from` first, those before it last): the candidates of a walk that starts
    /// where the last one ended, as the classes' steal (`classes.rs`).
    pub(crate) fn marked_from(&self, from: TreeId) -> impl Iterator<Item = TreeId> + '_ {
        let len = self.words.len();
        let (first, bit) = (from.0 / BITS, from.0 % BITS);
        let at = move |i: usize| {
            let w = (first + i) % len;
            let bits = self.words[w].load(Ordering::Acquire);
            let bits = match i {
                0 => bits & (u64::MAX << bit),
                i if i == len => bits & !(u64::MAX << bit),
                _ => bits,
            };
            (w, bits)
        };
        (0..=len).map(at).flat_map(|(w, mut bits)| {
            core::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let t = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    TreeId(w * BITS + t)
                })
            })
        })
    }

    /// Clears `t`'s bit, read as stale, and sets it again if `has_free` (a read of `cU`
    /// after the clear) says the entry holds units. Only inside a reservation move.
    pub(crate) fn clear_stale(&self, t: TreeId, has_free: impl Fn() -> bool) {
        let bit = 1 << (t.0 % BITS);
        self.words[t.0 / BITS].fetch_and(!bit, Ordering::AcqRel);
        if has_free() {
            self.mark(t);
        }
    }

    /// Whether `t`'s bit is set (for consistency checks).
    #[cfg(test)]
    pub(crate) fn is_marked(&self, t: TreeId) -> bool {
        self.words[t.0 / BITS].load(Ordering::Acquire) & 1 << (t.0 % BITS) != 0
    }
}
