//! LLFree (Wrenger et al., USENIX ATC'23): the lock- and log-free page-frame allocator.
//!
//! A unit is a 4 KiB frame; a huge frame is 512 units (order 9); orders 0..=10 are served,
//! and beyond the paper orders up to a whole tree (14 with the paper's 64 MiB trees).
//! The lower level (`lower.rs`) keeps per huge frame a 1024-bit bit field and a child entry
//! (free counter, huge flag); the upper level groups huge frames into trees (32 by default,
//! 64 MiB) with a free counter and a reserved flag (`trees.rs`), and gives every core a
//! reserved tree with a core-local counter (`local.rs`).
//!
//! Allocation (Fig. 14a): take `2^order` units from the core's counter `cP` (syncing it with
//! the tree's `cU`, or reserving a new tree, when short), then search the tree's children
//! from the last allocated position. A failure anywhere gives the units back. When every
//! fast path fails the allocator drains all reservations and scans every tree, so a
//! sequential allocation fails only when no free aligned block exists. Before it reserves
//! another tree, an allocation sums the cores' counters and the entries of the trees that
//! a summary bitmap marks as holding units, or a huge frame's units for a huge request
//! (`summary.rs`): on a heap with fewer free units than it asks for, or with no tree that
//! has a huge frame's, it is refused after a few reads, with no reservation moved. A complete
//! refusal (that sum, or a round of the complete fallback, read while no reservation move
//! was in flight) is remembered until units that could serve it are next credited to a
//! counter (a free: of a huge frame or more, or in a tree that then has a whole free frame,
//! for a refusal of a huge frame or more; any, for one below; or an allocation that gave
//! back units it took and could not use, where they may cover the order): meanwhile a request of that order or
//! larger is refused after one load (`refusal.rs`), on a fragmented heap too.
//!
//! Free (Fig. 14b): clear the block in the lower level, then credit `cP` if this core holds
//! the tree (in any of its reservations, one per class of trees), else `cU`; after 4 frees
//! in a row into one partial tree this core reserves it (as its reservation of the tree's
//! class).
//!
//! Counters are moved, never recomputed: the free units of a tree are its `cU` plus the `cP`
//! of the core holding it plus units in flight, so [`BlockAlloc::free_units`] is exact when
//! no operation is running.
//!
//! Beyond the paper:
//! - Orders 11 and up (as far as a tree reaches: [`Options::max_order`]) claim
//!   `2^(order - 9)` whole free huge frames of one tree, their child entries one pair after
//!   the other and the first pair, which records the order, last (`lower/span.rs`); a claim
//!   that meets a taken frame gives back what it claimed. Their units are taken from the
//!   tree's counters as for every order, so a tree with too few free units is passed over.
//! - Orders 6, 7 and 8 claim 2, 4 or 8 whole bit-field words one after the other; if a
//!   racing allocation took a unit of a word not yet claimed, every claimed word is cleared
//!   again and the group counts as taken. Success is reported only for a complete claim.
//! - Bad frees (never allocated, freed twice, wrong order) are told apart by two bits per
//!   unit instead of the paper's one (see `lower.rs`): a one-bit field cannot (eight order-0
//!   blocks look like one order-3 block). A block's first slot and, for orders 6..=8, its
//!   start word record its order, so whether a free matches a live block of its order is
//!   decided by the same compare-and-swap that clears it: a bad free never succeeds, even
//!   racing other operations on the same units, and racing double frees of one block are
//!   exact (one wins, the rest get `NotAllocated`). Which error a bad free gets
//!   (`OrderMismatch` where a block of another order starts, else `NotAllocated`) is read
//!   after the fact, so a racing operation may tip it from one to the other.
//! - The paper's design may fail an allocation with `OutOfMemory` while another core is
//!   between reserving a tree and installing it (its count is then in no counter). Here every
//!   reservation change (reserve, install, steal, drain, sync, reserve-on-free) is bracketed
//!   on a shared move counter (`moves.rs`), and the complete fallback accepts a failed scan
//!   only if no change was in flight at any time during it; otherwise it scans again after a
//!   growing pause, up to a generous bound (`FALLBACK_ROUNDS`, reached only under an endless
//!   stream of changes or a core stalled inside one). The fast paths (allocating from the
//!   core's own reservation, freeing) never touch that counter. What remains: the units one
//!   allocation has taken from a counter until it finds its block or gives them back, and a
//!   tree's count split between `cU` and `cP`s none of which alone has `2^order` units, can
//!   still make an allocation fail within a few blocks of exhaustion. Sequential allocation
//!   is complete.
//! - Classes of trees (`classes.rs`, the paper's §6 outlook): a request names a
//!   [`Class`] ([`BlockAlloc::alloc_class`]), trees carry one, each core holds
//!   a reservation per class, and a [`Policy`] says when a request may demote (re-class) or
//!   steal from a tree of another class. The complete fallback ignores classes, so a
//!   sequential allocation still fails only when no free block exists in any class. With
//!   one class (the default) the allocator is the paper's.
//! - Trees taken out of service and back, or re-classed, while entirely free and held by no
//!   core ([`LLFree::set_tree_state`], `online.rs`).
//! - The lower level is one contiguous array of cache lines of plain atomics, with no
//!   pointers, so that it can lie in memory the caller owns and keeps across runs
//!   ([`Builder::kept`], `caller.rs`: every unit free, every unit allocated, or
//!   recovered from what the memory holds, §3.2.3); `llfree::persist` (feature `persist`) keeps
//!   it in a file mapping through the same constructor.

mod atomic;
mod bitfield;
mod build;
#[cfg(not(loom))]
mod caller;
mod child;
mod classes;
mod local;
mod lower;
mod moves;
mod online;
#[cfg(all(feature = "persist", not(loom)))]
pub mod persist;
mod summary;
mod trees;
mod writeback;

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

use core::cell::Cell;
use core::ops::ControlFlow;

use crate::refusal::{Failure, Refusals};
use crate::reserved::Reserved;
use crate::sync::atomic::Ordering;
use crate::sync::{spin_loop, CachePadded};
use crate::table::Table;
use crate::{check_block, BlockAlloc, Capabilities, Class, Error};
#[cfg(not(loom))]
pub use build::Kept;
pub use build::{Builder, Fresh, Options};
#[cfg(not(loom))]
pub use caller::{Init, RecoverError};
use classes::Classes;
pub use classes::{Access, Policy};
use local::{Local, Reservation};
use lower::Lower;
use moves::Moves;
pub use online::TreeState;
use summary::Summary;
use trees::Trees;
pub use writeback::{Volatile, WriteBack};

/// Units in a huge frame.
pub const HUGE_UNITS: usize = 512;
/// The order of a huge frame.
pub const HUGE_ORDER: u32 = 9;
/// The largest order LLFree serves with the paper's trees ([`Options::default`], 32 huge
/// frames, 64 MiB of 4 KiB units): a whole tree. Larger trees serve larger orders, up to a
/// whole tree ([`Options::max_order`]; at most 30, trees of 2^30 units); orders 11 and up
/// take whole huge frames of one tree.
pub const MAX_ORDER: u32 = 14;

/// A huge frame, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HugeId(pub(crate) usize);

impl HugeId {
    pub(crate) const fn first_unit(self) -> usize {
        self.0 * HUGE_UNITS
    }
}

/// A tree, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TreeId(pub(crate) usize);

/// The LLFree allocator over `Config.units` units, with one reservation per `Config.cores`.
///
/// Any unit count is accepted: the last huge frame may be partial (it then never serves
/// orders 9 and up), with an odd number of huge frames the last one has no order-10 buddy,
/// and a block of order 11 and up needs all its frames (a partial last tree serves fewer).
///
/// Its lower level may lie in memory the caller owns and keeps across runs
/// ([`Builder::kept`]), built over as an [`Init`] says.
///
/// `W` says whether the lower level is written back to a persistent medium: [`Volatile`]
/// (the default, compiled away) or a persistent zone's write-back (`persist`, feature `persist`).
pub struct LLFree<W: WriteBack = Volatile> {
    lower: Lower<W>,
    trees: Trees,
    /// One reservation per core and tree class: core `c`'s of class `k` at `k * cores + c`
    /// (class-major, so that the default class's reservation of a core is found by an add).
    locals: Table<CachePadded<Local>>,
    cores: usize,
    /// The classes of trees and the policy between them (`classes.rs`).
    classes: Classes,
    units: usize,
    max_order: u32,
    tree_children: usize,
    /// log2 of the units per tree.
    tree_shift: u32,
    reserve_on_free: u32,
    /// Reservation changes in flight, for the complete fallback (`moves.rs`).
    moves: Moves,
    /// The trees whose entries may hold free units, for quick refusals (`summary.rs`).
    summary: Summary,
    /// Refusals remembered until the next credit of units (`refusal.rs`).
    refusals: Refusals,
    /// Units of the boot reservation, which frees refuse (`reserved.rs`).
    reserved: Reserved,
}

impl<W: WriteBack> LLFree<W> {
    /// Free units per huge frame (512 units; the last one may be smaller), in address order;
    /// 0 for the frames of offline trees, which nothing can allocate.
    pub fn free_per_huge(&self) -> impl Iterator<Item = usize> + '_ {
        let online = |h: usize| !self.trees.get(TreeId(h / self.tree_children)).offline();
        let free = |h: usize| self.lower.child(HugeId(h)).free();
        (0..self.lower.huges()).map(move |h| if online(h) { free(h) } else { 0 })
    }

    /// Free units per tree (its counter plus the counter of the core holding it).
    #[cfg(feature = "alloc")]
    pub fn free_per_tree(&self) -> Vec<usize> {
        let mut free = alloc::vec![0; self.trees.len()];
        for (t, n) in self.counters() {
            free[t.0] += n;
        }
        free
    }

    /// Every counter of free units with its tree: the tree entries' `cU`s (0 for an offline
    /// tree) and the `cP`s of the reservations that hold a tree.
    fn counters(&self) -> impl Iterator<Item = (TreeId, usize)> + '_ {
        let trees = (0..self.trees.len()).map(|t| (TreeId(t), self.trees.get(TreeId(t)).free()));
        let held = self.locals.iter().map(|l| l.get());
        trees.chain(held.filter_map(|r| Some((r.tree()?, r.free()))))
    }

    /// Free units in the trees of class `class` (every tree for `None`): their counters and
    /// those of the reservations holding them (a reserved tree has the class of the
    /// reservation holding it).
    fn free_in(&self, class: Option<u8>) -> usize {
        let of_class = |t: TreeId| class.is_none_or(|c| self.trees.get(t).class() == c);
        let counters = self.counters().filter(|&(t, _)| of_class(t));
        counters.map(|(_, n)| n).sum()
    }

    /// The core hint, reduced to a core.
    fn core(&self, core: usize) -> usize {
        crate::core_slot(core, self.cores)
    }

    /// The reservation of `core` for trees of class `class`, as an index into `locals`.
    #[inline]
    fn slot(&self, core: usize, class: usize) -> usize {
        class * self.cores + core
    }

    fn tree_of(&self, index: usize) -> TreeId {
        TreeId(index >> self.tree_shift)
    }

    fn children(&self, t: TreeId) -> core::ops::Range<usize> {
        let first = t.0 * self.tree_children;
        first..(first + self.tree_children).min(self.lower.huges())
    }

    /// [`LLFree::alloc_with`] through the refusal memo (`refusal.rs`): a refusal is
    /// remembered only where it is complete, a fallback round during which no reservation
    /// move was in flight (or the counters' sum, read likewise); a failure that met moves in
    /// flight in every round is [`Error::WouldBlock`], never remembered.
    #[inline]
    fn alloc_remembered(
        &self,
        order: u32,
        core: usize,
        class: usize,
        rounds: usize,
    ) -> Result<usize, Error> {
        let core = self.core(core);
        self.refusals.alloc(order, || {
            let ask = Ask {
                order,
                core,
                class,
                rounds,
                gave: Cell::new(None),
            };
            let answer = self.alloc_with(&ask).map_err(Failure::searched);
            (answer, ask.gave.get())
        })
    }

    /// [`LLFree::alloc_remembered`] with every round of the fallback, for `alloc`: a failure
    /// that met reservation moves in every round ([`Error::WouldBlock`]) is out of memory, as
    /// before the memo, but not remembered.
    #[inline]
    fn alloc_waiting(&self, order: u32, core: usize, class: usize) -> Result<usize, Error> {
        self.alloc_remembered(order, core, class, FALLBACK_ROUNDS)
            .map_err(|e| match e {
                Error::WouldBlock => Error::OutOfMemory,
                e => e,
            })
    }

    /// The allocation of `ask`: from its core's reservation of its class (Fig. 14a), else
    /// from a renewed one or what the classes allow ([`LLFree::renew`]), else from any tree
    /// (the complete fallback).
    fn alloc_with(&self, ask: &Ask) -> Result<usize, Error> {
        crate::check_order(ask.order, self.max_order)?;
        let slot = self.slot(ask.core, ask.class);
        let local = &self.locals[slot];
        for _ in 0..RESERVE_ATTEMPTS {
            let taken = local.take(None, 1 << ask.order);
            let found = match taken {
                Ok(t) => {
                    let hint = local.last.load(Ordering::Relaxed) as usize;
                    if let Some(index) = self.alloc_in(t, ask.order, hint) {
                        local.last.store(index as u64, Ordering::Relaxed);
                        return Ok(index);
                    }
                    None
                }
                // A class living on steals: from the tree of its last one.
                Err(r) if r.tree().is_none() && self.classes.count > 1 => self.steal_again(ask),
                Err(_) => None,
            };
            if let Some(index) = found {
                return Ok(index);
            }
            if let ControlFlow::Break(answer) = self.renew(ask, slot, taken) {
                return answer;
            }
        }
        self.alloc_anywhere(ask)
    }

    /// After the reservation `slot` of `ask` had no block (`taken`: the tree it took the
    /// units from, or the reservation that was short): gives the units back and syncs or
    /// renews the reservation (`classes.rs` where there are classes), or answers. Out of
    /// line, so that the allocation's fast path carries none of this.
    #[inline(never)]
    fn renew(&self, ask: &Ask, slot: usize, taken: Result<TreeId, Reservation>) -> Renewal {
        let n = 1 << ask.order;
        let near = match taken {
            Ok(t) => {
                // Too fragmented for this order: give the units back, move on.
                self.credit_local(slot, t, n);
                self.gave_back(ask, t);
                t.0
            }
            Err(r) => match r.tree() {
                Some(t) if self.sync(slot, t) => return ControlFlow::Continue(()),
                Some(t) => t.0,
                None => ask.core * self.trees.len() / self.cores,
            },
        };
        if self.too_few_free(n) {
            return ControlFlow::Break(Err(Error::OutOfMemory));
        }
        match self.classes.count {
            1 if self.reserve(ask, near, true) => ControlFlow::Continue(()),
            1 => ControlFlow::Break(self.alloc_anywhere(ask)),
            _ => self.renew_classed(ask, near),
        }
    }

    /// The children of `t`, every `step`th (counted from the tree's first), from the one
    /// holding `hint` (the last allocation, clamped into the tree: next fit, as the paper's
    /// start PFN) on, wrapping around.
    #[inline]
    fn frames_from(&self, t: TreeId, hint: usize, step: usize) -> NextFit {
        let children = self.children(t);
        let near = (hint / HUGE_UNITS).clamp(children.start, children.end - 1);
        let first = children.start + ((near - children.start) & !(step - 1));
        NextFit {
            at: Some(first),
            first,
            children,
            step,
        }
    }

    /// Searches the children of `t` for a block, from the child and word of `hint` on
    /// ([`LLFree::frames_from`]). Inlined into the allocation's fast path, where it is most
    /// of the work (the steal of `classes.rs` and the fallback's scan call it too, and would
    /// otherwise tip the compiler into a call).
    #[inline(always)]
    fn alloc_in(&self, t: TreeId, order: u32, hint: usize) -> Option<usize> {
        // Order 10 looks at even children only, orders above at the first of each aligned
        // run of `2^(order - 9)`.
        let step = 1 << order.saturating_sub(HUGE_ORDER);
        let mut word = (hint % HUGE_UNITS) / lower::SLOTS;
        for h in self.frames_from(t, hint, step) {
            // `Lower::alloc` reads the child entry first and refuses a frame without room.
            if let Some(index) = self.lower.alloc(HugeId(h), order, word) {
                return Some(index);
            }
            word = 0;
        }
        None
    }

    /// Notes in the ask what a give-back of units to `t` may have made findable, read after
    /// it as a free's [`LLFree::freed_covers`] is: every order where a frame of `t` is free as a
    /// whole, else the orders of the bit fields. Not the size given back: units a search
    /// held for a huge frame it did not find are no frame.
    fn gave_back(&self, ask: &Ask, t: TreeId) {
        // A scan gives back to tree after tree: once every order is covered, no more reads.
        if ask.gave.get() == Some(u32::MAX) {
            return;
        }
        let covered = match self.lower.any_free_frame(self.children(t)) {
            true => u32::MAX,
            false => lower::BITS_ORDER,
        };
        ask.gave.set(ask.gave.get().max(Some(covered)));
    }

    /// Fig. 14a (1b): reserves a new tree of the ask's class for its core's reservation of
    /// that class, with room for its block (a tree of that class, or one the policy lets it
    /// demote), stealing the reservations of the other cores, if `steal`, as a last resort
    /// (step 4 of §3.2.2).
    fn reserve(&self, ask: &Ask, near: usize, steal: bool) -> bool {
        self.moves.bracket(|| {
            let mut stole = false;
            let found = self.search(ask, near).or_else(|| {
                if !steal {
                    return None;
                }
                // Nothing given back, nothing new to find.
                stole = self.release_all(Some(ask.core));
                stole.then(|| self.search(ask, near))?
            });
            if let Some((t, free)) = found {
                self.install(self.slot(ask.core, ask.class), t, free);
            }
            (found.is_some(), found.is_some() || stole)
        })
    }

    /// Fig. 14a (1a): moves the frees other cores made into `t` (reserved by the reservation
    /// `local`) from the tree entry to `local`; true if it still holds `t` and got some.
    fn sync(&self, local: usize, t: TreeId) -> bool {
        // Read first: most of the time there is nothing, and then no move is needed.
        if self.trees.get(t).free() == 0 {
            return false;
        }
        self.moves.bracket(|| {
            let synced = self.trees.take_all_reserved(t);
            let held = synced > 0 && self.credit_local(local, t, synced);
            (held, synced > 0)
        })
    }

    /// The complete fallback: every reservation back, then every tree in turn, taking its
    /// units from whichever counter holds them. Sequentially this finds any free block.
    ///
    /// A concurrent reservation change moves a tree's count through the hands of a core, where
    /// no counter shows it. So a failed scan counts only if no such move was in flight at any
    /// time during it (`moves.rs`); otherwise it is repeated, after a growing pause that lets
    /// the moving core finish. A repeat follows a move of another core that began (and, unless
    /// that core stalls, ends) during the scan: under a steady stream of reservation changes
    /// the rounds are bounded by [`FALLBACK_ROUNDS`] (then the allocation fails as before),
    /// so the fallback stays lock-free and takes at most about `FALLBACK_ROUNDS` scans and
    /// `FALLBACK_ROUNDS * MAX_PAUSE` spins.
    ///
    /// [`Error::WouldBlock`] when the last of the ask's rounds still met a move in flight.
    ///
    /// A round scans every tree from the one the last steal or fallback of the ask's class
    /// took a block from on (wrapping around): a class that only the fallback serves finds
    /// its next block there, not after every tree before it.
    fn alloc_anywhere(&self, ask: &Ask) -> Result<usize, Error> {
        let (len, from) = (self.trees.len(), self.classes.stole_at(ask.class));
        let take = |t| self.take_from(ask, TreeId(t));
        let scan = || (from..len).chain(0..from).find_map(take);
        self.until_quiet(ask.rounds, || self.drain(), scan)
    }

    /// Runs `attempt` (after `prepare`) until it gives an answer, or fails in a round during
    /// which no reservation move was in flight; at most `rounds` rounds, with a growing pause
    /// between them. If every round failed: [`Error::OutOfMemory`] where the last one was
    /// quiet, else [`Error::WouldBlock`].
    fn until_quiet<T>(
        &self,
        rounds: usize,
        prepare: impl Fn(),
        mut attempt: impl FnMut() -> Option<T>,
    ) -> Result<T, Error> {
        let mut pause = 1;
        for round in 1..=rounds {
            prepare();
            let before = self.moves.snapshot();
            if let Some(answer) = attempt() {
                return Ok(answer);
            }
            if self.moves.quiet_since(before) {
                return Err(Error::OutOfMemory);
            }
            if round < rounds {
                for _ in 0..pause {
                    spin_loop();
                }
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
        Err(Error::WouldBlock)
    }

    /// A block for the fallback from `t`, whatever the tree's class: its units from
    /// whichever counter holds them, given back if the tree has no such block. Out of line:
    /// called from the allocation's path (a class living on the fallback), it would
    /// otherwise swell the fast path around it.
    #[inline(never)]
    fn take_from(&self, ask: &Ask, t: TreeId) -> Option<usize> {
        let source = self.take_gathered(t, 1 << ask.order)?;
        self.alloc_taken(ask, t, source)
    }

    /// A block from `t`, whose units the fallback or a steal took from `source`, searched
    /// from the tree's first frame: noted as where the ask's class took one
    /// ([`Classes::stole`]), or the units given back ([`LLFree::gave_back`]).
    #[inline(always)]
    fn alloc_taken(&self, ask: &Ask, t: TreeId, source: Counter) -> Option<usize> {
        let first = self.children(t).start * HUGE_UNITS;
        let index = self.alloc_in(t, ask.order, first);
        match index {
            Some(_) => self.classes.stole(ask.class, t.0),
            None => {
                self.give_back(source, t, 1 << ask.order);
                self.gave_back(ask, t);
            }
        }
        index
    }

    /// Returns `n` units taken by [`LLFree::take_gathered`] to the counter they came from.
    fn give_back(&self, source: Counter, t: TreeId, n: usize) {
        match source {
            Counter::Local(local) => _ = self.credit_local(local, t, n),
            Counter::Tree => self.add_to_tree(t, n),
        }
    }

    /// Takes `n` units of `t` from its tree counter or from the counter of a reservation
    /// holding it; where neither has them, the tree's units gathered first in the counter
    /// of the reservation holding it: a reserved tree's free
    /// units may be split, the holder's counter having some and the tree entry those that
    /// other cores freed since, and only together count for the block. Without this, a
    /// search would miss a free block of such a tree, and its refusal would be no refusal
    /// (`refusal.rs`: a refusal of a huge frame is ended only by a free that may have made
    /// one findable). The gathering is a reservation move, so a round that needed it is
    /// not quiet.
    fn take_gathered(&self, t: TreeId, n: usize) -> Option<Counter> {
        let take = || match self.trees.take(t, n) {
            true => Some(Counter::Tree),
            false => (0..self.locals.len())
                .find(|&local| self.locals[local].take(Some(t), n).is_ok())
                .map(Counter::Local),
        };
        take().or_else(|| {
            // Read first: most trees a search passes are held by nobody.
            if !self.trees.get(t).reserved() {
                return None;
            }
            let holder =
                (0..self.locals.len()).find(|&l| self.locals[l].get().tree() == Some(t))?;
            self.sync(holder, t).then(take)?
        })
    }

    /// [`BlockAlloc::free`], the boot reservation checked waiting or, with `never_wait`, not.
    #[inline(always)]
    fn free_checked(
        &self,
        index: usize,
        order: u32,
        core: usize,
        never_wait: bool,
    ) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.units)?;
        self.reserved.check_free(index, order, never_wait)?;
        self.lower.free(index, order)?;
        self.freed(index, 1 << order, core);
        Ok(())
    }

    /// Counts `n` units freed at `index` (taken off the bit field) as free, for `core`:
    /// into `cP` of `core` if one of its reservations is their tree, else into `cU` (and
    /// then perhaps reserve-on-free); tells the refusal memo what the free may have made
    /// findable ([`LLFree::freed_covers`]).
    fn freed(&self, index: usize, n: usize, core: usize) {
        let core = self.core(core);
        let t = self.tree_of(index);
        let local = match self.classes.count {
            1 => self.locals[core].add(t, n),
            // Only the reservation of the tree's class can hold it, and none an unreserved
            // one (`classes.rs`): a tree read unreserved that this core reserves meanwhile
            // gets the units in `cU`, where the holder's sync finds them.
            _ => {
                let e = self.trees.get(t);
                e.reserved() && self.locals[self.slot(core, usize::from(e.class()))].add(t, n)
            }
        };
        if !local {
            return self.free_elsewhere(core, t, n);
        }
        self.freed_covers(t, n, core);
    }

    /// Tells the refusal memo of a free of `n` units in tree `t` (all its writes done) whether
    /// a block of an order may now be free for a search to find (`refusal.rs`, "Frees that
    /// cover"): a block of a huge frame or more freed (`n` is at least a frame), or a
    /// frame of `t` free as a whole, read now with `SeqCst` loads ([`Lower::any_free_frame`]).
    /// Orders 0..=8 always: a block of them may lie anywhere in a frame's bit field.
    ///
    /// The whole tree, not only the frame of the freed units: a search takes a block's units
    /// from the tree's counter before it looks at frames, and a counter's units are no
    /// frame's in particular, so a search may miss a free frame of `t` for want of this
    /// free's units in the counter (another allocation having taken those of the frame).
    ///
    /// Unless, read after the free's credit, `t`'s counters hold less than a huge frame
    /// ([`LLFree::short_of_huge`], with the reservation of `core` the free would credit): then
    /// no search can take one there before a later credit, which reads the frames itself
    /// (`refusal.rs`, "Short counts"). That spares a reclaim loop on a fragmented heap the
    /// read of every frame of the tree at every free.
    #[inline]
    fn freed_covers(&self, t: TreeId, n: usize, core: usize) {
        // The memo's load first: a free that finds it empty builds nothing for `freed_if`,
        // whose closure the compiler would otherwise write out before the load.
        if self.refusals.remembered() != 0 {
            self.settle_freed(t, n, core);
        }
    }

    /// [`LLFree::freed_covers`] where the memo remembers something.
    #[inline(never)]
    fn settle_freed(&self, t: TreeId, n: usize, core: usize) {
        self.refusals.freed_if(|order| {
            order <= lower::BITS_ORDER
                || n >= HUGE_UNITS
                || (!self.short_of_huge(t, core) && self.lower.any_free_frame(self.children(t)))
        });
    }

    /// Whether `t`'s counters hold fewer units than a huge frame: its entry's `cU` and, if
    /// it is reserved, the `cP` of `core`'s reservation of its class, read with `SeqCst`
    /// loads while no count was in a core's hands (`moves.rs`). False where that cannot be
    /// told: another reservation holds `t`, or a move ran.
    fn short_of_huge(&self, t: TreeId, core: usize) -> bool {
        let before = self.moves.snapshot();
        let entry = self.trees.get_seq_cst(t);
        let held = match entry.reserved() {
            false => 0,
            true => match self.locals[self.slot(core, usize::from(entry.class()))].get_seq_cst() {
                r if r.tree() == Some(t) => r.free(),
                _ => return false,
            },
        };
        entry.free() + held < HUGE_UNITS && self.moves.quiet_since(before)
    }

    /// Puts `n` units of `t` back: into `cP` of the reservation `local` if it is `t`, else
    /// into `cU`.
    fn credit_local(&self, local: usize, t: TreeId, n: usize) -> bool {
        let held = self.locals[local].add(t, n);
        if !held {
            self.add_to_tree(t, n);
        }
        held
    }

    /// Adds `n` units to `t`'s entry `cU`.
    #[inline]
    fn add_to_tree(&self, t: TreeId, n: usize) {
        self.credited(t, self.trees.add(t, n), n);
    }

    /// Ends a reservation swapped out of a core; says whether there was one (whether a count
    /// was in the caller's hands). Only inside a move (`moves.rs`).
    fn release(&self, r: Reservation) -> bool {
        let end = |t| self.credited(t, self.trees.unreserve(t, r.free()), r.free());
        r.tree().map(end).is_some()
    }

    /// After `n` units went into the entry of `t`, which was `old`: marks the tree in the
    /// summary's levels it reached, and tells the classes' memo.
    #[inline]
    fn credited(&self, t: TreeId, old: trees::Tree, n: usize) {
        self.summary.raised(t, old.free() + n);
        if self.classes.count > 1 {
            let now = trees::Tree::new(old.free() + n, old.class());
            self.classes.credited(now, self.trees.capacity(t));
        }
    }

    /// Makes `t` (reserved by the caller, with `free` units moved out) the tree of the
    /// reservation `local`. Only inside a move begun before `t` was reserved.
    fn install(&self, local: usize, t: TreeId, free: usize) {
        // The reservation moved `cU` out: `t`'s marks went stale, and are cleared here,
        // inside the move, not by the first refusal to read them (on a heap fragmented
        // after it was filled, that of every tree).
        self.clear_marks(t);
        let local = &self.locals[local];
        let first = self.children(t).start * HUGE_UNITS;
        local.last.store(first as u64, Ordering::Relaxed);
        self.release(local.swap(Reservation::new(t, free)));
    }

    /// Swaps every reservation out (except those of core `keep`) and gives it back to its
    /// tree; says whether any was there. Only inside a move.
    fn release_all(&self, keep: Option<usize>) -> bool {
        let cores = (0..self.cores).filter(|&core| Some(core) != keep);
        cores.fold(false, |moved, core| self.release_core(core) | moved)
    }

    /// Swaps `core`'s reservations out and gives them back to their trees; says whether
    /// there was one. Only inside a move.
    fn release_core(&self, core: usize) -> bool {
        // One per class, `cores` apart.
        let locals = (core..self.locals.len()).step_by(self.cores);
        locals.fold(false, |moved, l| {
            self.release(self.locals[l].swap(Reservation::NONE)) | moved
        })
    }

    /// A free of `n` units into `t` that no reservation of `core` holds: credits `cU`, tells
    /// the memo, then reserve-on-free (§3.2.2): a core that freed F times in a row into the
    /// partial tree `t` (held by nobody) makes it its own, as its reservation of the tree's
    /// class. Out of line, so that a free into the core's own tree makes no call.
    #[inline(never)]
    fn free_elsewhere(&self, core: usize, t: TreeId, n: usize) {
        self.add_to_tree(t, n);
        self.freed_covers(t, n, core);
        let threshold = self.reserve_on_free;
        if threshold == 0 || !self.locals[core].count_free(t, threshold) {
            return;
        }
        let partial = |e| self.trees.is_partial(e);
        // Read first: no move (and no write to the shared move counter) for a tree that
        // another core holds.
        let e = self.trees.get(t);
        if e.reserved() || e.offline() || !partial(e) {
            return;
        }
        let keep_class = |e: trees::Tree| partial(e).then_some(e.class());
        self.moves.bracket(|| {
            let old = self.trees.reserve(t, keep_class);
            if let Some(old) = old {
                self.install(self.slot(core, usize::from(old.class())), t, old.free());
            }
            ((), old.is_some())
        });
    }

    /// [`BlockAlloc::free_bulk`] with `free_group` freeing the blocks of one huge frame in
    /// the lower level ([`Lower::free_many`] or [`Lower::free_owned`]), up to the first
    /// block with a reserved unit ([`Reserved::free_bulk`]): the blocks that follow each
    /// other in `blocks` within one frame go to it together, if they are all in range and
    /// aligned and their order is at most 8, and the counters are updated once for what it
    /// freed; from the first block it did not free on, one by one.
    fn free_in_frames(
        &self,
        blocks: &[usize],
        order: u32,
        core: usize,
        free_group: impl Fn(&[usize]) -> usize,
    ) -> Result<(), (usize, Error)> {
        self.reserved.free_bulk(blocks, order, |blocks| {
            let mut done = 0;
            for group in blocks.chunk_by(|a, b| a / HUGE_UNITS == b / HUGE_UNITS) {
                let checked = order <= lower::BITS_ORDER
                    && group
                        .iter()
                        .all(|&i| check_block(i, order, self.max_order, self.units).is_ok());
                let freed = if checked { free_group(group) } else { 0 };
                if freed > 0 {
                    self.freed(group[0], freed << order, core);
                }
                crate::free_each(self, &group[freed..], order, core)
                    .map_err(|(k, e)| (done + freed + k, e))?;
                done += group.len();
            }
            Ok(())
        })
    }

    /// Allocates up to `out.len()` blocks of `order` (0..=8) from `core`'s units in one huge
    /// frame ([`Lower::alloc_many`]): that of its last allocation, or, if it has no room for
    /// a block, the next frame of the core's tree that has ([`LLFree::frames_from`], where
    /// `alloc`'s next fit would go on); no change of reservation, so that bulk allocations
    /// leave LLFree's placement as it is. Returns how many (0: no frame of the core's tree
    /// has room, its tree has too few free units, or the frame's free units lie apart).
    /// `before`: the blocks of this bulk allocation so far, which no one else has seen yet.
    fn alloc_near(&self, order: u32, core: usize, before: &[usize], out: &mut [usize]) -> usize {
        let slot = self.slot(self.core(core), self.classes.default);
        let local = &self.locals[slot];
        let reservation = local.get();
        let free = reservation.free();
        // Too few units in the core's counter for a block: no frame can have room.
        let Some(t) = reservation.tree().filter(|_| free >> order > 0) else {
            return 0;
        };
        let hint = local.last.load(Ordering::Relaxed) as usize;
        let room = |h: usize| free.min(self.lower.child(HugeId(h)).free());
        // Going on to the next frame here rather than through `alloc` lets a frame that is
        // free as a whole be taken whole, its words written with plain stores
        // (`Lower::claim_group`); `alloc` would claim its first block with compare-and-swaps.
        let Some((h, room)) = self
            .frames_from(t, hint, 1)
            .map(|h| (h, room(h)))
            .find(|&(_, room)| room >> order > 0)
        else {
            return 0;
        };
        // As many as the frame has units for, not more: asked for more, its counter would
        // refuse them all, and a frame that has room for fewer blocks than a batch (a
        // partly used one; any at orders 7 and 8, whose batches span frames) would then
        // give its blocks one `alloc` at a time.
        let len = out.len().min(room >> order);
        let out = &mut out[..len];
        let n = out.len() << order;
        if n == 0 || local.take(Some(t), n).is_err() {
            return 0;
        }
        let word = match hint / HUGE_UNITS == h {
            true => (hint % HUGE_UNITS) / lower::SLOTS,
            false => 0,
        };
        let ours = before.iter().filter(|&&i| i / HUGE_UNITS == h).count() << order;
        let got = self.lower.alloc_many(HugeId(h), order, word, out, ours);
        if got < out.len() {
            self.credit_local(slot, t, (out.len() - got) << order);
            // Outside `alloc`'s attempts, which tell the memo once each.
            self.refusals.freed();
        }
        if got > 0 {
            local.last.store(out[got - 1] as u64, Ordering::Relaxed);
        }
        got
    }

    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        self.lower.assert_consistent();
        let per_tree = self.free_per_tree();
        for (t, &free) in per_tree.iter().enumerate() {
            let lower: usize = self
                .children(TreeId(t))
                .map(|h| self.lower.child(HugeId(h)).free())
                .sum();
            let entry = self.trees.get(TreeId(t));
            assert!(usize::from(entry.class()) < self.classes.count, "tree {t}");
            if entry.offline() {
                // An offline tree is whole in the lower level and counts nothing.
                assert_eq!(
                    (free, lower),
                    (0, self.trees.capacity(TreeId(t))),
                    "tree {t}"
                );
                assert!(!entry.reserved(), "tree {t}");
            } else {
                assert_eq!(free, lower, "tree {t}");
            }
            for level in [summary::ANY, summary::HUGE] {
                assert!(
                    entry.free() < summary::least(level)
                        || self.summary.is_marked(level, TreeId(t)),
                    "tree {t} unmarked at level {level}"
                );
            }
        }
        // A reservation's tree has the reservation's class.
        for (l, local) in self.locals.iter().enumerate() {
            if let Some(t) = local.get().tree() {
                let class = usize::from(self.trees.get(t).class());
                assert_eq!(class, l / self.cores, "reservation {l}");
            }
        }
    }
}

/// The frames [`LLFree::frames_from`] visits: from `first` on, every `step`th, wrapping
/// around to the tree's first child once past its last, until `first` comes round again.
/// One add and two compares a frame (the allocation's fast path walks it), where a chain
/// of two stepped ranges works out both their lengths before the first frame.
struct NextFit {
    /// The next frame, `None` once every frame was visited.
    at: Option<usize>,
    first: usize,
    /// The tree's children; `first` and `children.start` are multiples of `step` apart.
    children: core::ops::Range<usize>,
    step: usize,
}

impl Iterator for NextFit {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let h = self.at?;
        let mut next = h + self.step;
        if next >= self.children.end {
            next = self.children.start;
        }
        self.at = (next != self.first).then_some(next);
        Some(h)
    }
}

/// Where units taken for an allocation came from, to give them back there.
enum Counter {
    /// The tree entry's `cU`.
    Tree,
    /// The `cP` of this reservation (an index into `locals`).
    Local(usize),
}

/// An allocation past its core's own counter: what renewing its reservation, the classes'
/// steps and the complete fallback need to know of it.
struct Ask {
    order: u32,
    /// The core, reduced ([`LLFree::core`]).
    core: usize,
    /// The class of trees that serves it.
    class: usize,
    /// Rounds of the complete fallback ([`LLFree::until_quiet`]).
    rounds: usize,
    /// What the give-backs of units it took and could not use may have made findable, for
    /// the refusal memo ([`Refusals::alloc`]): nothing where the block came
    /// from the core's counter at once.
    gave: Cell<Option<u32>>,
}

/// What renewing an ask's reservation got: `Continue` to try it again, or `Break` with the
/// allocation's answer.
type Renewal = ControlFlow<Result<usize, Error>>;

/// Tries to reserve a new tree this often before falling back to the complete scan.
const RESERVE_ATTEMPTS: usize = 4;
/// Rounds of the complete scan, while reservation changes of other cores keep getting in the
/// way, before an allocation fails anyway. Generous: a round that fails without such a change
/// ends the fallback at once, so the bound is reached only under a stream of changes or a
/// core stalled in the middle of one (preempted for longer than the pauses add up to).
#[cfg(not(loom))]
const FALLBACK_ROUNDS: usize = 1 << 12;
#[cfg(loom)]
const FALLBACK_ROUNDS: usize = 8;
/// The longest pause between rounds of the fallback, in spins (the pause doubles per round).
#[cfg(not(loom))]
const MAX_PAUSE: usize = 1 << 10;
/// Under loom a spin is a yield to the model checker: one per round.
#[cfg(loom)]
const MAX_PAUSE: usize = 1;

impl<W: WriteBack> BlockAlloc for LLFree<W> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.alloc_waiting(order, core, self.classes.default)
    }

    /// In the trees of the class the [`Policy`] gives `class` (stealing from or demoting
    /// trees of other classes as it allows, and at last from any tree): see `classes.rs`.
    /// Its refusals are the complete fallback's, which ignores classes, so they share the
    /// memo of `alloc`.
    fn alloc_class(&self, order: u32, class: Class, core: usize) -> Result<usize, Error> {
        self.alloc_waiting(order, core, self.classes.home(class))
    }

    /// Blocks of orders 0..=8 come frame by frame from the core's tree, from the frame of
    /// its last allocation on, with one update of each counter per frame: for orders 0..=5
    /// each bit-field word gives all the free blocks it has in one compare-and-swap, for
    /// orders 6..=8 each group of 2, 4 or 8 free words one block (with plain stores where the
    /// call takes a whole free frame). When the core's tree has too few, one block as
    /// [`BlockAlloc::alloc`] places it, which moves the next claim on.
    fn alloc_bulk(&self, order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error> {
        let near = order <= self.max_order.min(lower::BITS_ORDER);
        let mut n = 0;
        while n < out.len() {
            let (before, rest) = out.split_at_mut(n);
            if near && (n > 0 || rest.len() > 1) {
                let got = self.alloc_near(order, core, before, rest);
                if got > 0 {
                    n += got;
                    continue;
                }
            }
            match self.alloc(order, core) {
                Ok(index) => rest[0] = index,
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
            n += 1;
        }
        Ok(n)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    /// One round of the fallback and no pause: where [`BlockAlloc::alloc`] would wait for a
    /// reservation move of another core to finish, this answers [`Error::WouldBlock`].
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        let class = self.classes.default;
        self.alloc_remembered(order, core, class, 1)
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.free_checked(index, order, core, false)
    }

    /// The same as `free`, which waits for no other core (but for a range operation's
    /// update of the reservation, next to reserved units: [`Error::WouldBlock`]).
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.free_checked(index, order, core, true)
    }

    /// Blocks of orders 0..=8 that follow each other in `blocks` within one huge frame are
    /// freed together, with one update of each counter per frame: for orders 0..=5 one
    /// compare-and-swap per bit-field word that checks every block in it, for orders 6..=8
    /// each block's words as [`BlockAlloc::free`] clears them. From a word (or block) with
    /// a bad block on, one by one.
    fn free_bulk(&self, blocks: &[usize], order: u32, core: usize) -> Result<(), (usize, Error)> {
        self.free_in_frames(blocks, order, core, |group| {
            self.lower.free_many(group, order)
        })
    }

    fn free_units(&self) -> usize {
        self.free_in(None)
    }

    fn total_units(&self) -> usize {
        self.units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    fn drain(&self) {
        self.moves.bracket(|| ((), self.release_all(None)));
    }

    /// Gives back only `core`'s reserved tree (its free count into the tree entry), as a
    /// steal from `core` would.
    fn drain_core(&self, core: usize) {
        let core = self.core(core);
        self.moves.bracket(|| ((), self.release_core(core)));
    }

    ranges_recorded!();

    /// Takes the units from whichever counter holds the tree's (as the fallback scan does),
    /// then the block itself. A failed take counts only if no reservation move was in flight
    /// meanwhile (the count may be in a moving core's hands); it is retried, bounded as the
    /// fallback is.
    fn alloc_at(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.units)?;
        let t = self.tree_of(index);
        let n = 1 << order;
        let taken = || {
            let source = self.take_gathered(t, n)?;
            if self.lower.alloc_at(index, order) {
                return Some(Ok(()));
            }
            self.give_back(source, t, n);
            self.refusals.freed();
            Some(Err(Error::Occupied))
        };
        self.until_quiet(FALLBACK_ROUNDS, || {}, taken)
            .unwrap_or(Err(Error::Occupied))
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        if index >= self.units {
            return Err(Error::OutOfRange);
        }
        Ok(self.lower.block_of(index))
    }

    /// The same as `block_of`, which reads the bit fields without waiting.
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.block_of(index)
    }

    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        Ok(self.lower.next_block(from, self.units))
    }
}

impl<W: WriteBack> crate::magazine::Sealed for LLFree<W> {}

/// The magazines' hooks: LLFree frees its own batches with plain stores, continues bulk
/// allocations in the frame of the core's last one, and takes orders 0..=8 in groups.
impl<W: WriteBack> crate::magazine::Backend for LLFree<W> {
    /// Orders 6..=8: each block's words are cleared as [`BlockAlloc::free`] clears them,
    /// but with plain stores, since no other free can race the owner's (one locked
    /// instruction fewer per block); the rest as `free_bulk`.
    unsafe fn free_bulk_owned(
        &self,
        blocks: &[usize],
        order: u32,
        core: usize,
    ) -> Result<(), (usize, Error)> {
        // Checked still: caches built over an allocator that reserved units first adopt
        // them as a caller's blocks.
        self.free_in_frames(blocks, order, core, |group| {
            // SAFETY: the caller's promise; `free_in_frames` hands over blocks in range,
            // aligned, of orders up to 8 and in one frame.
            unsafe { self.lower.free_owned(group, order) }
        })
    }

    /// Bulk allocations continue in the frame of the core's last allocation.
    fn alloc_bulk_continues(&self) -> bool {
        true
    }

    /// Orders 0..=8: a bit-field word, or a group of words, per compare-and-swap.
    fn alloc_bulk_groups(&self, order: u32) -> bool {
        order <= self.max_order.min(lower::BITS_ORDER)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
