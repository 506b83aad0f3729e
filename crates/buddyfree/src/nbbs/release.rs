//! The release protocol of NBBS (Alg. 4-5): FREENODE, which claims a node, marks its
//! ancestors' links coalescing and clears it, and UNMARK, which clears those links again while
//! the sub-tree below is free, with the generation check and the guard that this crate adds
//! (module docs of [`nbbs`](super)). Frees, rolled-back allocations and group frees all end
//! here ([`Forest::free_node`], [`Forest::release`]); module `forest` holds the cells and the
//! allocation protocol.
//!
//! # Structure
//!
//! A release is three passes over the path from the node's cell up to the roots:
//!
//! ```text
//!  claim      node's cell   CAS: allocated -> held (or a group's join)     Forest::free_node
//!  coalesce   each parent   RMW: COAL_CHILD(link) [+ register], gen read   Forest::coalesce
//!             cell up       -> Seen (the generation per cell level)
//!  clear      node's cell   RMW, release: OCC and ALLOCATED off (F20)      Forest::clear
//!  unmark     each parent   CAS: link off if still coalescing, gen as      Forest::unlink
//!             cell up       read, not INVALID; leave / sweep (guard)
//! ```
//!
//! # Invariants
//!
//! - The coalescing climb goes on while the cell it marked may merge (the rest of it free,
//!   or a free or a held node in it: [`Shape::keeps_climbing`]); UNMARK goes on while the
//!   cell it left looks free. A link that is occupied and not coalescing stops both: its
//!   holder climbs on.
//! - UNMARK clears a link only if the cell's generation is the one its coalescing climb read
//!   there ([`Seen`]), and, in guarded cells, only while `INVALID` is clear; otherwise the
//!   confirmed state gives a fresh generation and the child is checked again.
//! - In a guarded cell, a generation in [`Seen`] is a registration (`COUNT`), which the free
//!   ends before it returns: by its UNMARK's CAS there, or by leaving. The last to leave an
//!   `INVALID` cell sweeps it.
//! - A bad or double free fails its claim and changes nothing.
//!
//! # Protocol
//!
//! The argument for the generation check is at [`Forest::unmark`], the guard's in the module
//! docs of `nbbs`, the rollback's climb past its marks at [`Forest::release`]. Every step is
//! one CAS or RMW on one cell; a step that refuses is confirmed by an RMW
//! ([`try_cas`]), never by a plain read.
//!
//! [`Shape::keeps_climbing`]: super::cell::Shape::keeps_climbing

use core::mem::MaybeUninit;

use super::cell::State;
#[cfg(test)]
use super::forest::Node;
use super::forest::{Climb, Forest, Kind, Place, Up};
use super::word::try_cas;
use crate::sync::atomic::{AtomicU64, Ordering};

/// The generations a free read at the cells where it set its coalescing bits (Alg. 4, F9),
/// by cell level: its UNMARK trusts a coalescing bit only while the generation is unchanged,
/// and re-checks the child where none is known. In guarded cells a generation recorded here
/// is also a registration, which the free must end (by its UNMARK's CAS, or by leaving)
/// before it returns. An entry for every cell level a forest can have (`max_order` is below
/// 64, so at most 64 of them), left uninitialised but for the entries `known` names, so that
/// setting it up writes nothing before the free's next locked instruction (which would wait
/// for those stores).
pub(super) struct Seen {
    /// Which entries of `gens` hold a generation: exactly those `set` wrote.
    known: u64,
    /// By cell level.
    gens: [MaybeUninit<u64>; 64],
}

impl Seen {
    #[inline]
    pub(super) fn new() -> Self {
        Seen {
            known: 0,
            gens: [const { MaybeUninit::uninit() }; 64],
        }
    }

    #[inline]
    pub(super) fn set(&mut self, level: usize, gen: u64) {
        self.gens[level] = MaybeUninit::new(gen);
        self.known |= 1 << level;
    }

    /// The generation recorded at `level`, forgotten.
    #[inline]
    pub(super) fn take(&mut self, level: usize) -> Option<u64> {
        let bit = 1 << level;
        if self.known & bit == 0 {
            return None;
        }
        self.known &= !bit;
        // SAFETY: bit `level` of `known` is set only by `set`, which initialised
        // `gens[level]` first.
        Some(unsafe { self.gens[level].assume_init() })
    }

    /// Whether any generation is still recorded.
    #[inline]
    pub(super) fn any(&self) -> bool {
        self.known != 0
    }
}

/// What one UNMARK step at a link did ([`Forest::unlink`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Cleared the link (and left the cell).
    Unlinked,
    /// Found the coalescing bit gone (and left the cell): whoever took it goes on.
    Consumed,
    /// Found the cell `INVALID`, or could not register: the last to leave sweeps it.
    GaveUp,
    /// Became the cell's sweeper: registered, `INVALID` cleared.
    Sweep,
    /// Registered with a fresh generation: the child must be checked again.
    Recheck,
}

/// A free stopped between its clear and its UNMARK ([`Forest::free_until_unmark`]).
#[cfg(test)]
pub struct Stalled {
    node: Node,
    at: Place,
    now: State,
    seen: Seen,
}

impl<K: Kind> Forest<K> {
    /// Alg. 4 (FREENODE, F6-F22) and Alg. 5 (UNMARK) for the node at `at`, held by the caller
    /// (occupied, not allocated); `now` is its cell's state as of the caller's last RMW on it.
    /// The caller's marks reach up to cell level `marked` (0 for a free, the last level a
    /// rolled-back allocation marked).
    ///
    /// A rollback climbs on above `marked`, where the paper's FREENODE stops (T11): while
    /// its marks were up, a free below one of them stopped its own climb there, since an
    /// occupied link that is not coalescing means "whoever holds it climbs on" (F15-F17),
    /// and left the links above set, for the holder to clear. The links above `marked`
    /// were free or dead (an occupied ancestor) when the allocation gave up, but that
    /// ancestor may have been freed and the links above reused and left since (the unit
    /// test `rollback_unlinks_a_cell_emptied_after_reuse`). Above `marked` the rollback
    /// only marks links that are set and live, and its UNMARK re-checks them (no generation
    /// seen), as a free's does where its coalescing bit was taken.
    #[inline(always)]
    pub(super) fn release(&self, at: Place, now: State, marked: usize) {
        let mut seen = Seen::new();
        let climb = self.climb(at);
        if Self::S.keeps_climbing(now, Self::S.node_bits(at.j)) {
            self.mark_coalescing(climb.clone(), marked, &mut seen);
        }
        let now = self.clear(at);
        self.unmark(climb, now, &mut seen);
    }

    /// F6-F19: marks the ancestors coalescing along `climb`, from the cell of a held node
    /// whose free keeps climbing there ([`Shape::keeps_climbing`], the caller's check), as far
    /// as the merge may reach, recording the generation of each cell marked. Above cell level
    /// `marked` (see `release`) only links that are set and live.
    ///
    /// [`Shape::keeps_climbing`]: super::cell::Shape::keeps_climbing
    #[inline(always)]
    fn mark_coalescing(&self, climb: Climb<'_>, marked: usize, seen: &mut Seen) {
        for up in climb {
            let own = up.level >= marked;
            let Some(old) = Self::coalesce(&up, own, seen) else {
                return;
            };
            if !Self::S.keeps_climbing(old, Self::S.child_bits(up.ch)) {
                return;
            }
        }
    }

    /// F9 at one cell: sets the coalescing bit of child `up.ch` of the cell at `up` and, where
    /// the cell is guarded, registers (module docs); records the generation read. `own`: the
    /// link carries the caller's own mark; otherwise (a rollback above its marks, see
    /// `release`) only a link that is set and live, and `None` if it is not. The cell's state
    /// after.
    #[inline(always)]
    pub(super) fn coalesce(up: &Up<'_>, own: bool, seen: &mut Seen) -> Option<State> {
        let (here, level, ch) = (up.word, up.level, up.ch);
        let coal = Self::S.coal_bit(ch);
        let mut registered = false;
        let mut coalesce = |w: State| {
            let (w, r) = Self::S.register(w | coal);
            registered = r;
            w
        };
        let old = if own {
            // Acquire: the generation read here vouches for every mark before it
            // (`unmark`).
            if Self::S.is_guarded() {
                try_cas(here, Ordering::Acquire, |w| Some(coalesce(w))).unwrap_or_else(|w| w)
            } else {
                registered = true;
                here.fetch_or(coal, Ordering::Acquire)
            }
        } else {
            // A link left set by a free that stopped at one of our marks, or by one that
            // stopped above such a free. A clear link has no such history (it would be set
            // up to here), and a dead one is clear and stays so while its ancestor is
            // occupied: a free that reuses the branch after that sees our coalescing bits
            // below. Release: that free's mark then also sees those bits.
            try_cas(here, Ordering::AcqRel, |w| {
                (Self::S.link_live(w, ch) && w & Self::S.child_bits(ch) != 0).then(|| coalesce(w))
            })
            .ok()?
        };
        trace!("coal {level} ch {ch} -> {old:x} registered {registered}");
        debug_assert!(
            Self::S.link_live(old, ch),
            "coalescing below a node: {old:x}"
        );
        if registered {
            seen.set(level, Self::S.gen(old));
        }
        Some(old)
    }

    /// F20: clears the node, returning its cell's new state. Release: the caller's writes to
    /// the block happen before its next owner's. An RMW, not the paper's store: other nodes
    /// of a bunch change concurrently.
    #[inline(always)]
    pub(super) fn clear(&self, at: Place) -> State {
        let keep = Self::S.clear_mask(at.j);
        let now = self
            .cell(at.level, at.cell)
            .fetch_and(keep, Ordering::Release)
            & keep;
        trace!("clear {at:?} -> {now:x}");
        now
    }

    /// F21-F22 and Alg. 5 (U1-U13): clears the coalescing links along `climb`, upwards from
    /// the cell of the cleared node, while the sub-tree below is free; `now` is that cell's
    /// state after the clear, `seen` the generations the coalescing climb saw.
    ///
    /// U11 clears the link to a child in one CAS, trusting a check of the child made earlier
    /// (the previous step's CAS, or the clear). The published UNMARK trusts the coalescing
    /// bit to say that no allocation passed the link in between, but that fails: if the
    /// child is reallocated (its mark clears the bit, or finds it clear and the link already
    /// occupied: no visible change) and a free below it sets the bit again (its climb passed
    /// the child before the reallocation marked it), the stale UNMARK unlinks a branch
    /// holding an allocated block (the unit test `stale_unmark_cannot_free_a_reused_branch`
    /// replays it, the loom test `loom_nbbs_stale_unmark` finds it).
    ///
    /// So every mark bumps its cell's generation, and the unlink also requires the
    /// generation seen before the check of the child. The argument: the CAS clears the link
    /// only if no mark reached this cell between that reading and the CAS. An allocation
    /// below the link that marked this cell before the reading had marked the child first,
    /// and the release of its mark with the acquire of the reading orders those marks
    /// before the check, so the child looked free only if they were undone since (a free
    /// that will, or need not, come here). One that marks after the CAS sets the link again.
    /// The reading is the coalescing climb's own RMW here (recorded in `seen`), so the fast
    /// path costs no extra RMW. When the generation moved (or this climb did not mark here),
    /// the refusing CAS's confirmed state supplies a fresh reading and an RMW on the child
    /// re-checks it after that: still free, the CAS is retried with the new generation; not
    /// free, the UNMARK stops, as U8-U9 do when an allocation took the bit, because whatever
    /// occupies the child will unmark it (an allocation through its free or rollback, a
    /// free through its own UNMARK, which finds this coalescing bit still set).
    ///
    /// Equal generations mean that no mark came in between. A 1-level node's 59-bit
    /// generation does not come back to a value within any run (2^59 marks of one cell, over
    /// 18 years of them back to back); a bunch's 11-bit one can, and its guard makes that
    /// harmless: a wrap while the UNMARK is registered in the cell sets `INVALID`, which
    /// refuses the CAS until the UNMARK has left (module docs of `nbbs`). An UNMARK that finds
    /// `INVALID`, or cannot register, stops and leaves the cell's coalescing links to the
    /// sweep of the last UNMARK to leave it ([`Forest::sweep`]); one that stops below a cell
    /// where its coalescing climb registered leaves that cell on the way up.
    #[inline(always)]
    pub(super) fn unmark(&self, climb: Climb<'_>, now: State, seen: &mut Seen) {
        // `Some(state)` while climbing: the state of the cell below after our last step.
        let mut below = Self::S.looks_free(now).then_some(now);
        for up in climb {
            let reg = seen.take(up.level);
            below = if below.is_some() {
                self.unlink(&up, reg)
            } else if !Self::S.is_guarded() || !(reg.is_some() || seen.any()) {
                return;
            } else {
                // Stopped below: leave the cells where the coalescing climb registered. The
                // last to leave an `INVALID` cell sweeps it, and may climb on from there.
                reg.and_then(|_| self.leave(up.level, up.cell))
            }
            .filter(|&w| Self::S.looks_free(w));
        }
    }

    /// One level of UNMARK (U8-U11): clears the link to child `up.ch` of the cell at `up` if
    /// the child is free and no mark came since generation `reg` (`None`: not read, or not
    /// registered). Returns the cell's state after the step, or `None` where the UNMARK
    /// stops here (the child is occupied, or the cell is left to its sweeper).
    #[inline(always)]
    fn unlink(&self, up: &Up<'_>, mut reg: Option<u64>) -> Option<State> {
        let (here, level, cell, ch) = (up.word, up.level, up.cell, up.ch);
        loop {
            // AcqRel (`step`): acquire the frees merged below (the buddy's release), release
            // them, with ours, to whoever allocates this larger block; acquire the marks whose
            // generation a refusal reads.
            let (w, step) = Self::step(here, |w| Self::unmark_step(w, ch, reg));
            trace!("unmark {level}/{cell} ch {ch} gen {reg:?} -> {step:?} {w:x}");
            match step {
                // U8-U9 return when the coalescing bit is gone. We go on while this cell is
                // free: another free's UNMARK may have consumed our bit here and then given
                // up above, where we had not yet set ours (a stranded OCC bit otherwise; see
                // the loom test `loom_nbbs_alloc_alloc_same_node`).
                Step::Unlinked | Step::Consumed => return Some(w),
                Step::GaveUp => return None,
                Step::Sweep => return self.sweep(level, cell, w),
                Step::Recheck => {
                    reg = Some(Self::S.gen(w));
                    // Relaxed: ordered after the marks that count by the acquire above.
                    let c = self.child_state(level, cell, ch);
                    trace!("recheck child -> {c:x}");
                    if !Self::S.looks_free(c) {
                        return Self::S
                            .is_guarded()
                            .then(|| self.leave(level, cell))
                            .flatten();
                    }
                }
            }
        }
    }

    /// The CAS step of [`Forest::unlink`] on state `w`: the new state (`None`: refuse, which
    /// confirms `w`) and what it did. `reg` is the generation read where the caller is
    /// registered (always, for a guarded cell), or `None`.
    #[inline]
    fn unmark_step(w: State, ch: u32, reg: Option<u64>) -> (Option<State>, Step) {
        let s = Self::S;
        // Stops here: the coalescing bit is gone, or the cell `INVALID` (only a guarded one
        // is); a registered caller leaves.
        let stop = if !s.coalescing(w, ch) {
            Step::Consumed
        } else if s.invalid(w) {
            Step::GaveUp
        } else if let Some(new) = s.unmark(w, ch, reg) {
            return (Some(new), Step::Unlinked);
        } else if reg.is_some() || !s.is_guarded() {
            return (None, Step::Recheck);
        } else {
            return match s.register(w) {
                (new, true) => (Some(new), Step::Recheck),
                (new, false) => (Some(new), Step::GaveUp),
            };
        };
        match reg {
            Some(_) if s.is_guarded() => Self::leave_step(w, stop),
            _ => (None, stop),
        }
    }

    /// Leaves a registration on state `w`: the new state and `otherwise`, or [`Step::Sweep`]
    /// for the last to leave an `INVALID` cell.
    #[inline(always)]
    fn leave_step(w: State, otherwise: Step) -> (Option<State>, Step) {
        let (new, sweeps) = Self::S.leave(w);
        (Some(new), if sweeps { Step::Sweep } else { otherwise })
    }

    /// [`try_cas`] (AcqRel) of a step that also says what it did: the state after (installed
    /// or confirmed) and what the last try did.
    #[inline(always)]
    fn step(here: &AtomicU64, mut f: impl FnMut(State) -> (Option<State>, Step)) -> (State, Step) {
        let mut step = Step::GaveUp;
        let r = try_cas(here, Ordering::AcqRel, |w| {
            let (new, s) = f(w);
            step = s;
            new
        });
        (r.unwrap_or_else(|w| w), step)
    }

    /// The state of child `ch` of cell `cell` at `level`, confirmed current by an RMW (a
    /// refused CAS): a plain load could be stale (`try_cas`).
    #[inline(always)]
    fn child_state(&self, level: usize, cell: usize, ch: u32) -> State {
        let child = self.cell(level + 1, cell << Self::LEVELS | ch as usize);
        try_cas(child, Ordering::Relaxed, |_| None).unwrap_or_else(|c| c)
    }

    /// Ends a registration at `cell` of `level` without unlinking; the last to leave an
    /// `INVALID` cell sweeps it. The cell's state after the sweep, or `None`.
    fn leave(&self, level: usize, cell: usize) -> Option<State> {
        // AcqRel: a sweeper's reading, as `unlink`'s.
        let (w, step) = Self::step(self.cell(level, cell), |w| {
            Self::leave_step(w, Step::GaveUp)
        });
        trace!("leave {level}/{cell} -> {step:?} {w:x}");
        (step == Step::Sweep)
            .then(|| self.sweep(level, cell, w))
            .flatten()
    }

    /// The sweep of a guarded cell whose `INVALID` bit the caller cleared, registered, its
    /// reading `w`: the UNMARKs that gave up here (module docs) left their links coalescing,
    /// so every coalescing link whose child is free is cleared, in one CAS checked as a
    /// single UNMARK's is: against the generation of the reading, and only for links still
    /// coalescing then ([`Shape::sweep`]: between the check and the CAS, another UNMARK may
    /// unlink one and an allocation take the node above it, which marks nothing here). The
    /// cell's state after, or `None` if it gave up again (to the next sweeper).
    ///
    /// [`Shape::sweep`]: super::cell::Shape::sweep
    fn sweep(&self, level: usize, cell: usize, mut w: State) -> Option<State> {
        let here = self.cell(level, cell);
        loop {
            let expect = Self::S.gen(w);
            let mut drop = 0;
            for ch in 0..Self::S.children {
                if Self::S.coalescing(w, ch) {
                    let c = self.child_state(level, cell, ch);
                    if Self::S.looks_free(c) {
                        drop |= Self::S.child_bits(ch);
                    }
                }
            }
            let step;
            (w, step) = Self::step(here, |w| {
                if Self::S.invalid(w) {
                    return Self::leave_step(w, Step::GaveUp);
                }
                match Self::S.sweep(w, expect, drop) {
                    Some(new) => (Some(new), Step::Unlinked),
                    None => (None, Step::Recheck),
                }
            });
            trace!("sweep {level}/{cell} drop {drop:x} -> {step:?} {w:x}");
            match step {
                Step::Unlinked => return Some(w),
                Step::GaveUp => return None,
                _ => {}
            }
        }
    }

    /// Alg. 4 from the claim: once `claim` (allocated node -> held, or a group's join) takes
    /// the node at `at` on its cell, clears it and FREENODEs up to the roots; false, with
    /// nothing changed, if `claim` refuses. The claim is Relaxed (the caller's own ordering
    /// puts it after the allocation); the release that publishes the block's units is on
    /// the clear (F20). A node in a root cell has nothing to climb, so there the claim is
    /// the clear, in one CAS.
    #[inline]
    pub(super) fn free_node(&self, at: Place, claim: impl Fn(State) -> Option<State>) -> bool {
        let home = self.cell(at.level, at.cell);
        if at.level == 0 {
            return try_cas(home, Ordering::Release, |w| {
                Some(claim(w)? & Self::S.clear_mask(at.j))
            })
            .is_ok();
        }
        let Ok(now) = try_cas(home, Ordering::Relaxed, claim) else {
            return false;
        };
        trace!("claim {at:?} -> {now:x}");
        self.release(at, now, 0);
        true
    }

    /// Frees the allocated block (`index`, `order`), which must not lie in a root cell, up
    /// to its clear (F20), and stops there: for tests that replay races with the UNMARK.
    #[cfg(test)]
    pub fn free_until_unmark(&self, index: usize, order: u32) -> Stalled {
        let node = Node::at(index, order);
        let at = self.place(node);
        assert!(at.level > 0, "a node in a root cell has no UNMARK");
        let now = try_cas(self.cell(at.level, at.cell), Ordering::Relaxed, |w| {
            Self::S.claim(w, at.j)
        })
        .expect("the block is allocated");
        let mut seen = Seen::new();
        if Self::S.keeps_climbing(now, Self::S.node_bits(at.j)) {
            self.mark_coalescing(self.climb(at), 0, &mut seen);
        }
        let now = self.clear(at);
        Stalled {
            node,
            at,
            now,
            seen,
        }
    }

    /// Completes a free stopped by [`Forest::free_until_unmark`].
    #[cfg(test)]
    pub fn resume(&self, stalled: Stalled, core: usize) {
        let Stalled {
            node,
            at,
            now,
            mut seen,
        } = stalled;
        self.unmark(self.climb(at), now, &mut seen);
        self.count_free(1 << node.order, node, core);
    }
}
