//! Which tree entries may hold free units, and which may hold a huge frame's: two bits per
//! tree, so that an allocation on a heap with too few free units, or with no huge frame's
//! worth of them in any tree (a fragmented heap), is refused after reading a few words
//! instead of reserving, stealing, draining and scanning every tree.
//!
//! The free units of LLFree are in the tree entries' `cU` and the cores' `cP` (`moves.rs`).
//! The cores' counters are few and read directly; the tree entries are many, so they are
//! summed through this bitmap. Its two levels, [`ANY`] (one unit) and [`HUGE`] (a huge
//! frame's units, what a request of order 9 or more needs), each have the invariant,
//! whenever no summary update is in flight:
//!
//! > a tree whose `cU` is at least the level's units has its bit of that level set.
//!
//! A bit may be set for a tree whose `cU` is below (stale); only [`LLFree::clear_stale`],
//! on the refusing path, clears it. Kept by:
//!
//! - **Raising `cU` to the level or above** (a free from a core not holding the tree, a
//!   reservation given back, units an allocation gives back): the writer reads, after the
//!   read-modify-write that raised it, the bit of each level the new count reaches, and
//!   sets it where it is clear ([`Summary::raised`]). Every raise does,
//!   not only the one that crossed the level: the crossing writer may be preempted before
//!   its bit, and the units of a later raise (a whole reservation given back) must not wait
//!   for it. Inside a reservation move the bit is set before the move ends, so a scanner
//!   that finds the move counter quiet sees it.
//! - **Lowering `cU`** (an allocation's take, a reservation, a sync): the bits stay.
//! - **Clearing** ([`LLFree::clear_stale`], as one reservation move): clear the bit, read
//!   `cU` again, set the bit again if it is at the level. All four accesses (the raise, the
//!   writer's read of the bit, the clear, the second read) are `SeqCst`: in their single
//!   order either the writer's read comes after the clear (it sees the bit clear, or set
//!   again, and sets it) or the raise comes before the second read (which sees it and sets
//!   the bit again). Between the clear and the setting again the bit may be 0 with `cU` at
//!   the level: the move brackets that window, so a concurrent refusal that read the bitmap
//!   then is not quiet and takes the complete path.
//!
//! So a refusal that read the move counter quiet before and after it summed the cores'
//! counters and the marked trees' entries saw every unit that was in a counter, as the
//! complete scan does (`moves.rs`).

use super::{LLFree, TreeId, WriteBack, HUGE_UNITS};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::table::{Metadata, Part, Table};
use crate::Error;

/// Trees per bitmap word.
const BITS: usize = 64;

/// The level of trees whose `cU` holds a unit.
pub(crate) const ANY: usize = 0;
/// The level of trees whose `cU` holds a huge frame's units.
pub(crate) const HUGE: usize = 1;

/// Two bits per tree, by level: the words of [`ANY`], then those of [`HUGE`].
pub(crate) struct Summary {
    words: Table<AtomicU64>,
}

/// The units of a summary level, below which a tree's bit of it is stale.
pub(crate) const fn least(level: usize) -> usize {
    match level {
        ANY => 1,
        _ => HUGE_UNITS,
    }
}

/// The trees whose bits are set in `bits`, word `w` of a level, in order.
pub(crate) fn trees_in(w: usize, mut bits: u64) -> impl Iterator<Item = TreeId> {
    core::iter::from_fn(move || {
        (bits != 0).then(|| {
            let t = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            TreeId(w * BITS + t)
        })
    })
}

impl Summary {
    /// Words of the bitmap for `trees` trees (both levels).
    pub(crate) const fn words(trees: usize) -> usize {
        2 * trees.div_ceil(BITS)
    }

    /// The bitmap at `part` of `meta`, every bit clear: the builder marks each tree
    /// ([`Summary::raised`]).
    pub(crate) fn new(meta: &Metadata, part: Part<AtomicU64>) -> Result<Summary, Error> {
        Ok(Summary {
            words: meta.table(part, |_| AtomicU64::new(0))?,
        })
    }

    /// The word of `t`'s bit at `level`.
    #[inline]
    fn word(&self, level: usize, t: TreeId) -> &AtomicU64 {
        &self.words[level * (self.words.len() / 2) + t.0 / BITS]
    }

    /// After `t`'s `cU` was raised to `new` units: the bit of each level it reaches is set,
    /// by a read-modify-write where a `SeqCst` load finds it clear (module docs). Every
    /// raise, not only the one that crossed the level: that one may still be on its way to
    /// its bit (a core preempted between its credit and this), and a later raise, a
    /// reservation's whole count given back, must not leave its units unmarked meanwhile.
    /// `SeqCst` (the same instructions as `Acquire`/`AcqRel` on x86-64 and AArch64): a
    /// credit's writes are in the single order that the refusal memo's argument needs
    /// (`refusal.rs`).
    #[inline]
    pub(crate) fn raised(&self, t: TreeId, new: usize) {
        // Loom models SeqCst accesses as acquire/release: the fence gives its model the
        // order that the SeqCst credit and load give in a real build (module docs).
        #[cfg(loom)]
        crate::sync::atomic::fence(Ordering::SeqCst);
        let bit = 1 << (t.0 % BITS);
        for level in [ANY, HUGE] {
            if new >= least(level) && self.word(level, t).load(Ordering::SeqCst) & bit == 0 {
                self.word(level, t).fetch_or(bit, Ordering::SeqCst);
            }
        }
    }

    /// The words of `level` by number, each read once, with acquire ([`trees_in`] lists
    /// the trees whose bits are set).
    pub(crate) fn marked(&self, level: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let per_level = self.words.len() / 2;
        let words = &self.words[level * per_level..(level + 1) * per_level];
        let read = |(w, word): (usize, &AtomicU64)| (w, word.load(Ordering::Acquire));
        words.iter().enumerate().map(read)
    }

    /// The trees whose bits of [`ANY`] are set, from tree `from` on, wrapping around to
    /// those before it (two passes over the words, each word read once per pass, with
    /// acquire): the candidates of a walk that starts where the last one ended, as the
    /// classes' steal (`classes.rs`).
    pub(crate) fn marked_from(&self, from: TreeId) -> impl Iterator<Item = TreeId> + '_ {
        let trees = move || self.marked(ANY).flat_map(|(w, bits)| trees_in(w, bits));
        let before = move |t: &TreeId| t.0 < from.0;
        trees().skip_while(before).chain(trees().take_while(before))
    }

    /// Whether `t`'s bit of `level` is set (for consistency checks).
    #[cfg(test)]
    pub(crate) fn is_marked(&self, level: usize, t: TreeId) -> bool {
        self.word(level, t).load(Ordering::Acquire) & 1 << (t.0 % BITS) != 0
    }
}

impl<W: WriteBack> LLFree<W> {
    /// Clears the bits `stale` of word `w` of `level` of the summary, read as stale, and
    /// sets each again whose tree's `cU` (read after the clear) reaches the level: one
    /// read-modify-write for the word, however many of its trees a fragmented heap left
    /// stale. Only inside a reservation move.
    fn clear_stale(&self, level: usize, w: usize, stale: u64) {
        let word = self.summary.word(level, TreeId(w * BITS));
        word.fetch_and(!stale, Ordering::SeqCst);
        #[cfg(loom)]
        crate::sync::atomic::fence(Ordering::SeqCst);
        let back = trees_in(w, stale)
            .filter(|&t| self.trees.get_seq_cst(t).free() >= least(level))
            .fold(0, |bits, t| bits | 1 << (t.0 % BITS));
        if back != 0 {
            word.fetch_or(back, Ordering::SeqCst);
        }
    }

    /// Clears `t`'s bits of both levels, as [`LLFree::clear_stale`] does. Only inside a
    /// reservation move.
    pub(super) fn clear_marks(&self, t: TreeId) {
        for level in [ANY, HUGE] {
            self.clear_stale(level, t.0 / BITS, 1 << (t.0 % BITS));
        }
    }

    /// Whether no tree holds `n` free units in its counters together (its entry's `cU` and
    /// the `cP` of a reservation holding it; the cores' counters and the entries of the trees
    /// the summary marks at the level of `n`), read while no reservation move was in flight:
    /// then no free block of `n` units exists (a block lies within one tree) but what
    /// concurrent operations hold or free meanwhile, and an allocation may fail without
    /// reserving or scanning. On a full heap a handful of reads; on a fragmented one (free
    /// units in every tree, fewer than a huge frame's in each) as many for a huge frame or
    /// more, and one read per tree for smaller blocks, instead of the searches and the scan;
    /// on a heap with room it stops at the first tree that has it. Stale marks met on the way
    /// are cleared, a word's at once (module docs).
    #[cold]
    #[inline(never)]
    pub(super) fn too_few_free(&self, n: usize) -> bool {
        // A reservation's `cP`s; the tree's `cU` is added where it is marked or held.
        let held = |t: TreeId| -> usize {
            let reservations = self.locals.iter().map(|l| l.get());
            let holding = reservations.filter(|r| r.tree() == Some(t));
            holding.map(|r| r.free()).sum()
        };
        // The level a tree needs to have a block of `n` units in `cU`. Trees whose `cU` alone
        // has fewer units than a huge frame's are not marked at the huge level: on a
        // fragmented heap a refusal of a huge frame reads no entry.
        let level = if n >= HUGE_UNITS { HUGE } else { ANY };
        // A second pass only after this one cleared stale marks: those moves were its own.
        for _ in 0..2 {
            let before = self.moves.snapshot();
            let mut cleared = false;
            let mut reserved = self.locals.iter().filter_map(|l| l.get().tree());
            if reserved.any(|t| held(t) + self.trees.get(t).free() >= n) {
                return false;
            }
            for (w, bits) in self.summary.marked(level) {
                let mut stale = 0;
                for t in trees_in(w, bits) {
                    let e = self.trees.get(t);
                    match e.free() {
                        free if free < least(level) => stale |= 1 << (t.0 % BITS),
                        free if e.reserved() && free + held(t) >= n => return false,
                        free if free >= n => return false,
                        _ => {}
                    }
                }
                if stale != 0 {
                    self.moves
                        .bracket(|| (self.clear_stale(level, w, stale), true));
                    cleared = true;
                }
            }
            if !cleared {
                return self.moves.quiet_since(before);
            }
        }
        false
    }
}
