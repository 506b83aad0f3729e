//! Classes of trees: placement by kind of memory (movable, unmovable, huge), which the LLFree
//! paper (Wrenger et al., USENIX ATC'23, §6) names as the way to keep memory that cannot be
//! moved off most huge frames, as Linux does with a free list per migrate type.
//!
//! Every tree carries a class in its entry (`trees.rs`); a request names a [`Class`], which
//! the [`Policy`] maps to the class of trees that serves it (its *home*: requests of several
//! classes may share one). Each core has one reservation per class of trees, so a core
//! allocating two kinds of memory fills two trees, one of each class.
//!
//! A request whose reservation runs short goes, in this order:
//! 1. **match**: reserves a tree of its home class (the paper's search, §3.2.2, among those);
//! 2. **demote**: reserves a tree of another class that the policy lets it demote
//!    ([`Access::Demote`]), re-classing it in the same compare-and-swap that reserves it;
//! 3. **steal**: takes one block from a tree of another class that the policy lets it steal
//!    from ([`Access::Steal`]), without reserving or re-classing it: its units come from
//!    the tree's counter `cU` as in the complete fallback, so the tree's holder (if any)
//!    keeps its reservation;
//! 4. takes the other cores' reservations, where any holds one, and searches (1, 2) again
//!    (step 4 of §3.2.2);
//! 5. the complete fallback of `mod.rs`, which takes a block from any tree of any class. So
//!    a sequential allocation fails only when no free aligned block exists anywhere, whatever
//!    the policy: the policy decides where memory goes first, never whether it is found.
//!
//! Invariants: a tree's class changes only by a compare-and-swap of its entry, and only
//! while no core holds it (a demotion is the reservation itself; a re-class by
//! `LLFree::set_tree_state` needs an unreserved, entirely free tree), so a reserved tree
//! always has the class of the reservation holding it. Frees never name a class: a block's
//! units go back to the counter of the reservation holding its tree (any of the freeing
//! core's reservations), else to the tree's `cU`, as without classes. Every move of a count
//! between counters is the one of `mod.rs`, bracketed on the move counter (`moves.rs`); a
//! steal moves no count (its units belong to the allocation, as in the complete fallback).
//!
//! A class notes per step (1 and 2 together, 3) the smallest order that step found nothing
//! for, and skips the step for that order and above until a credit to a tree the step could
//! take (of its own class, or one the policy lets it demote or steal from); a steal and the
//! complete fallback start at the tree where the class last got a block. So a class without
//! trees of its own on a fragmented heap gets a block in a few reads, not after passes over
//! every tree (`docs/results.md`, "Classes on a fragmented heap").
//!
//! With one class ([`Policy::single`], what `LLFree::new` builds) there is one reservation
//! per core, every tree is of class 0, and steps 2 and 3 are skipped: LLFree as in the paper.

use super::trees::{Tree, MAX_CLASSES};
use super::{Ask, Counter, LLFree, Renewal, TreeId, WriteBack, HUGE_ORDER};
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::{Class, ConfigRule, Error};

/// What a request may do with a tree of another class than its home class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reserve the tree and re-class it to the request's home class, for good (until it is
    /// demoted or re-classed again): the tree joins the request's class.
    Demote,
    /// Take one block from the tree, leaving it in its class and with its holder.
    Steal,
    /// Neither: only the complete fallback takes a block from it, when no tree of the
    /// request's class, and none it may demote or steal from, has one.
    Fallback,
}

/// Which class of trees serves each class of request, and what a request may do with trees
/// of other classes: the placement policy of LLFree with classes
/// ([`Builder::policy`](super::Builder::policy)).
///
/// The functions are asked while the allocator runs (`access` whenever a request looks for
/// a tree outside its class); they must be cheap and give the same answer for the same
/// arguments.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    classes: u8,
    initial: Class,
    home: fn(Class) -> Class,
    access: Rule,
}

/// How a [`Policy`] answers `access`: the ready policies' rule, which the allocator
/// evaluates inline where every credit to a tree asks it (`Classes::credited`), or the
/// caller's function.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// The ready policies' rule: a tree that is entirely free costs no placement, so any
    /// class may take it over; one in use keeps its class, and gives single blocks only.
    DemoteFreeElseSteal,
    Custom(fn(Class, Class, usize, usize) -> Access),
}

impl Policy {
    /// A policy with `classes` classes of trees (numbered `0..classes`, at most 8), every
    /// tree of class `initial` at the start; `home(class)` is the class of trees that serves
    /// requests of `class`, and `access(request, tree, free, capacity)` what a request whose
    /// home is `request` may do with a tree of class `tree` that has `free` of its `capacity`
    /// units free (asked only for `tree != request`).
    ///
    /// [`ConfigRule::Classes`] if `classes` is 0 or above 8, or `initial` or a home class is
    /// not below `classes`.
    pub fn new(
        classes: u8,
        initial: Class,
        home: fn(Class) -> Class,
        access: fn(Class, Class, usize, usize) -> Access,
    ) -> Result<Policy, Error> {
        let count = usize::from(classes);
        let below = |c: Class| c.number() < classes;
        let homes_below = (0..=u8::MAX).all(|c| below(home(Class::new(c))));
        if !(1..=MAX_CLASSES).contains(&count) || !below(initial) || !homes_below {
            return Err(ConfigRule::Classes.into());
        }
        Ok(Policy {
            classes,
            initial,
            home,
            access: Rule::Custom(access),
        })
    }

    /// One class: every request is served by every tree, as in the paper (the default).
    #[must_use]
    pub const fn single() -> Policy {
        Policy {
            classes: 1,
            initial: Class::MOVABLE,
            home: |_| Class::MOVABLE,
            access: Rule::Custom(|_, _, _, _| Access::Fallback),
        }
    }

    /// Small and huge: movable and unmovable requests (and any other class but
    /// [`Class::HUGE`]) share the trees of class [`Class::MOVABLE`], huge ones have their
    /// own, so that freeing huge frames leaves trees of whole huge frames. Trees start
    /// movable. A tree entirely free is demoted to whichever class asks for it; a tree in
    /// use is only stolen from.
    #[must_use]
    pub fn small_huge() -> Policy {
        Policy::demoting(|class| match class {
            Class::HUGE => Class::HUGE,
            _ => Class::MOVABLE,
        })
    }

    /// Unmovable, movable and huge, each in trees of its own (classes other than these three
    /// are movable): memory that cannot move pins only the trees it is in, so the huge
    /// frames compaction can free stay in the other trees. Trees start movable. A tree
    /// entirely free is demoted to whichever class asks for it; a tree in use is only stolen
    /// from.
    #[must_use]
    pub fn unmovable_movable_huge() -> Policy {
        Policy::demoting(|class| match class {
            Class::UNMOVABLE | Class::HUGE => class,
            _ => Class::MOVABLE,
        })
    }

    /// The ready policies' shape: three classes homed by `home`, trees movable at the
    /// start, a tree entirely free demoted to whichever class asks for it, one in use only
    /// stolen from.
    fn demoting(home: fn(Class) -> Class) -> Policy {
        Policy {
            classes: 3,
            initial: Class::MOVABLE,
            home,
            access: Rule::DemoteFreeElseSteal,
        }
    }

    /// Classes of trees.
    #[must_use]
    pub const fn classes(&self) -> u8 {
        self.classes
    }

    /// The class of every tree at the start.
    #[must_use]
    pub fn initial(&self) -> Class {
        self.initial
    }

    /// The class of trees that serves requests of `class`.
    #[must_use]
    pub fn home(&self, class: Class) -> Class {
        (self.home)(class)
    }

    /// What a request whose home is `request` may do with a tree of class `tree` that has
    /// `free` of its `capacity` units free.
    #[must_use]
    #[inline]
    pub fn access(&self, request: Class, tree: Class, free: usize, capacity: usize) -> Access {
        match self.access {
            Rule::DemoteFreeElseSteal if free == capacity => Access::Demote,
            Rule::DemoteFreeElseSteal => Access::Steal,
            Rule::Custom(access) => access(request, tree, free, capacity),
        }
    }
}

/// The memo of the searches, in [`Classes`].
const SEARCH: usize = 0;
/// The memo of the steals, in [`Classes`].
const STEAL: usize = 1;

/// A policy as the allocator uses it, with what the hot paths read kept apart: the number
/// of classes and the home class of requests without one.
pub(crate) struct Classes {
    /// Classes of trees (and reservations per core).
    pub(super) count: usize,
    /// The class of trees that serves requests without a class ([`Class::MOVABLE`]).
    pub(super) default: usize,
    /// The home classes of the request classes below [`TABLED`], four bits each (homes are
    /// below [`MAX_CLASSES`]): what every `alloc_class` asks, without a call through the
    /// policy.
    homes: u64,
    pub(super) policy: Policy,
    /// The memo of the searches (`[SEARCH]`) and of the steals (`[STEAL]`), a byte per
    /// class: one more than the smallest order for which a search of that class (own
    /// trees, then demotable ones) found no tree to reserve, or a steal no block, since the
    /// last credit to a tree entry that either could take; 0 for none. A search or steal at
    /// that order or above is then skipped, so that a class that has no tree with room (on
    /// a fragmented heap, every class but the one that took the trees) goes on to its steal
    /// and the complete fallback without passing over every tree on every allocation.
    short: [AtomicU64; 2],
    /// Per class, the tree its last steal (or complete fallback) took a block from, where
    /// its next steal (and fallback) looks first: a class without trees of its own steals block after block, and a tree that
    /// had one usually has the next (as a reservation's next fit), so that a steal is not a
    /// walk over the trees already drained from the first on.
    stole_at: [AtomicUsize; MAX_CLASSES],
}

/// Request classes whose home [`Classes`] keeps in a table.
const TABLED: u8 = 16;

impl Classes {
    pub(crate) fn new(policy: Policy) -> Classes {
        let home = |c: u8| u64::from(policy.home(Class::new(c)).number());
        Classes {
            count: usize::from(policy.classes),
            default: usize::from(policy.home(Class::MOVABLE).number()),
            homes: (0..TABLED).fold(0, |homes, c| homes | home(c) << (4 * c)),
            policy,
            short: [AtomicU64::new(0), AtomicU64::new(0)],
            stole_at: core::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    /// Whether a search (`step` [`SEARCH`]) or steal ([`STEAL`]) of class `class` for a
    /// block of `order` is known to find nothing.
    #[inline]
    fn short_of(&self, step: usize, class: usize, order: u32) -> bool {
        let byte = (self.short[step].load(Ordering::Relaxed) >> (8 * class)) & 0xff;
        byte != 0 && u64::from(order) + 1 >= byte
    }

    /// `f`, a search (`step` [`SEARCH`]) or steal ([`STEAL`]) for `ask`, unless the memo
    /// knows it finds nothing; noted there if it does.
    fn unless_short<T>(&self, step: usize, ask: &Ask, f: impl FnOnce() -> Option<T>) -> Option<T> {
        if self.short_of(step, ask.class, ask.order) {
            return None;
        }
        let found = f();
        if found.is_none() {
            let shift = 8 * ask.class;
            let new = u64::from(ask.order) + 1;
            let _ = self.short[step].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |memo| {
                let byte = (memo >> shift) & 0xff;
                (byte == 0 || new < byte).then_some(memo & !(0xff << shift) | new << shift)
            });
        }
        found
    }

    /// The tree where the last steal or fallback of class `class` took a block (0 before
    /// the first).
    #[inline]
    pub(crate) fn stole_at(&self, class: usize) -> usize {
        self.stole_at[class].load(Ordering::Relaxed)
    }

    /// Notes `t` as where class `class` last took a block by a steal or the fallback.
    #[inline]
    pub(crate) fn stole(&self, class: usize, t: usize) {
        if self.stole_at(class) != t {
            self.stole_at[class].store(t, Ordering::Relaxed);
        }
    }

    /// A tree changed class or came online: forgets every class's memo.
    pub(crate) fn forget(&self) {
        for memo in &self.short {
            memo.store(0, Ordering::Relaxed);
        }
    }

    /// Forgets the memo of each class whose search or steal may find the tree whose entry
    /// is now `tree` (of `capacity` units): its own class's search, and the search of those
    /// the policy lets demote it, the steal of those it lets steal from it. A load first: no
    /// write where nothing was noted, as on every free with one class.
    ///
    /// The memo is a hint for placement only: a search it skips leads to the steal and the
    /// complete fallback, which find any free block. A note that races with a credit may
    /// outlive it until the next credit, which at worst places a block by stealing or
    /// through the fallback instead of reserving.
    #[inline]
    pub(super) fn credited(&self, tree: Tree, capacity: usize) {
        for (step, memo) in self.short.iter().enumerate() {
            let noted = memo.load(Ordering::Relaxed);
            if noted != 0 {
                self.forget_finding(step, memo, noted, tree, capacity);
            }
        }
    }

    /// [`Classes::credited`] for the memo of `step`, which held `noted`.
    fn forget_finding(&self, step: usize, memo: &AtomicU64, noted: u64, tree: Tree, cap: usize) {
        let own = usize::from(tree.class());
        let mut keep = noted;
        let mut rest = noted;
        while rest != 0 {
            let shift = rest.trailing_zeros() & !7;
            let class = (shift / 8) as usize;
            let note = (noted >> shift) & 0xff;
            rest &= !(0xff << shift);
            // A note of order `k` stands while the tree has fewer than `2^k` units: neither
            // step takes a tree with less room than it asks for.
            let finds = tree.free() >> (note - 1) != 0
                && match (step, class == own) {
                    (SEARCH, true) => true,
                    (_, true) => false,
                    (SEARCH, false) => self.access(class, tree, cap) == Access::Demote,
                    (_, false) => self.access(class, tree, cap) == Access::Steal,
                };
            if finds {
                keep &= !(0xff << shift);
            }
        }
        if keep != noted {
            let _ = memo.fetch_and(keep | !noted, Ordering::Relaxed);
        }
    }

    /// The class of trees that serves requests of `class` (below `count`: `Policy::new`
    /// checked every class).
    #[inline]
    pub(crate) fn home(&self, class: Class) -> usize {
        match class.number() {
            c if c < TABLED => (self.homes >> (4 * c)) as usize & 0xf,
            _ => usize::from(self.policy.home(class).number()),
        }
    }

    /// What a request of home class `class` may do with the tree whose entry is `tree`.
    #[inline]
    fn access(&self, class: usize, tree: Tree, capacity: usize) -> Access {
        let (request, target) = (Class::new(class as u8), Class::new(tree.class()));
        self.policy.access(request, target, tree.free(), capacity)
    }
}

impl<W: WriteBack> LLFree<W> {
    /// Finds and reserves (as the ask's class) a tree with room for its block: one of that
    /// class, else one the policy lets it demote. With one class, any tree.
    pub(super) fn search(&self, ask: &Ask, near: usize) -> Option<(TreeId, usize)> {
        let (own, n, huge) = (ask.class as u8, 1 << ask.order, ask.order >= HUGE_ORDER);
        if self.classes.count == 1 {
            return self.trees.search(n, near, huge, |_, _| true, own);
        }
        let demotable = |t: TreeId, e: Tree| {
            e.class() != own
                && self.classes.access(ask.class, e, self.trees.capacity(t)) == Access::Demote
        };
        self.classes.unless_short(SEARCH, ask, || {
            let own_trees = self
                .trees
                .search(n, near, huge, |_, e| e.class() == own, own);
            own_trees.or_else(|| self.trees.search(n, near, huge, demotable, own))
        })
    }

    /// A new reservation for the ask, or a block stolen from a tree of another class, with
    /// several classes (steps 1 to 4 of the module's list). Out of line: the allocation's
    /// fast path stays as small as without classes.
    #[inline(never)]
    pub(super) fn renew_classed(&self, ask: &Ask, near: usize) -> Renewal {
        // The memo read first: a search it skips needs no move either.
        let short = self.classes.short_of(SEARCH, ask.class, ask.order);
        if !short && self.reserve(ask, near, false) {
            return Renewal::Continue(());
        }
        if let Some(index) = self.steal(ask) {
            return Renewal::Break(Ok(index));
        }
        // Step 4 only where another core holds a reservation to take.
        let others = (0..self.locals.len())
            .filter(|l| l % self.cores != ask.core)
            .any(|l| self.locals[l].get().tree().is_some());
        match others && self.reserve(ask, near, true) {
            true => Renewal::Continue(()),
            false => Renewal::Break(self.alloc_anywhere(ask)),
        }
    }

    /// Takes a block for the ask from the tree of its class's last steal, else from the
    /// first tree marked in the summary from there on (wrapping around) of another class
    /// that the policy lets the ask's class steal from: units from the tree's counter
    /// `cU`, the block from its frames, the units given back if it has no such block. Huge
    /// orders look at the trees with most free units first (they hold whole huge frames),
    /// the others at the fullest first (to leave whole huge frames alone).
    fn steal(&self, ask: &Ask) -> Option<usize> {
        let near = self.classes.stole_at(ask.class);
        let huge = ask.order >= HUGE_ORDER;
        // Two passes: first the trees the order prefers (less than half free for small
        // orders, more for huge ones), then any; only the trees whose counters may hold
        // units (`summary.rs`): a tree with none in `cU` has nothing to steal.
        let prefers = |t: TreeId| (self.trees.get(t).free() * 2 > self.trees.capacity(t)) == huge;
        let pass = |pass| {
            let mut trees = self.summary.marked_from(TreeId(near));
            trees.find_map(|t| {
                let skip = (pass == 0 && !prefers(t)) || t.0 == near;
                (!skip).then(|| self.steal_from(ask, t))?
            })
        };
        // The tree of the last steal first, whatever it holds: it was the walk's choice,
        // and while it has blocks a steal is one look.
        self.classes.unless_short(STEAL, ask, || {
            (self.steal_from(ask, TreeId(near))).or_else(|| (0..2).find_map(pass))
        })
    }

    /// Takes a block for the ask from `t` if the policy lets its class steal from it:
    /// units from `cU`, given back if the tree has no such block.
    fn steal_from(&self, ask: &Ask, t: TreeId) -> Option<usize> {
        let n = 1 << ask.order;
        let e = self.trees.get(t);
        let candidate = usize::from(e.class()) != ask.class && !e.offline() && e.free() >= n;
        let access = |e| self.classes.access(ask.class, e, self.trees.capacity(t));
        if !candidate || access(e) != Access::Steal || !self.trees.take(t, n) {
            return None;
        }
        self.alloc_taken(ask, t, Counter::Tree)
    }

    /// For a class whose search is noted short (it has no tree to reserve): a block from
    /// the tree of its last steal or fallback, before the refusal check and the renewal, so
    /// that a class living on steals gets its next block in a few reads. Where its steals
    /// are noted short too, the block is the complete fallback's (`LLFree::take_from`, the
    /// first tree its scan would try), without the drain and the scan behind it: a class
    /// that the policy lets neither demote nor steal a tree in use (on a fragmented heap,
    /// every class but the one that took the trees) lives on the fallback, and would
    /// otherwise give back every core's reservations on each allocation.
    #[inline(never)]
    pub(super) fn steal_again(&self, ask: &Ask) -> Option<usize> {
        let short = |step| self.classes.short_of(step, ask.class, ask.order);
        if !short(SEARCH) {
            return None;
        }
        let t = TreeId(self.classes.stole_at(ask.class));
        match short(STEAL) {
            true => self.take_from(ask, t),
            false => self.steal_from(ask, t),
        }
    }

    /// The placement policy.
    pub fn policy(&self) -> Policy {
        self.classes.policy
    }

    /// Free units in the online trees of class `class` (the counters of those trees and of
    /// the reservations holding them; exact when no operation runs, as
    /// [`BlockAlloc::free_units`](crate::BlockAlloc::free_units)): over every class they add
    /// up to `free_units`. 0 for a class with no trees.
    pub fn free_units_of(&self, class: Class) -> usize {
        match usize::from(class.number()) < self.classes.count {
            true => self.free_in(Some(class.number())),
            false => 0,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use alloc::vec::Vec;

    use super::super::{Options, TreeState};
    use super::*;
    use crate::{BlockAlloc, Config};

    /// Trees of 1024 units (two huge frames).
    fn classed(units: usize, cores: usize, policy: Policy) -> LLFree {
        let options = Options {
            tree_children: 2,
            ..Options::default()
        };
        LLFree::builder(Config::new(units, 10).with_cores(cores))
            .options(options)
            .policy(policy)
            .build()
            .unwrap()
    }

    fn tree(index: usize) -> usize {
        index / 1024
    }

    fn class_of(a: &LLFree, index: usize) -> Class {
        match a.tree_state(tree(index)).unwrap() {
            TreeState::Online(class) => class,
            TreeState::Offline => panic!("a block in an offline tree"),
        }
    }

    #[test]
    fn each_class_fills_trees_of_its_own() {
        let a = classed(4096, 1, Policy::unmovable_movable_huge());
        let movable = a.alloc(0, 0).unwrap();
        let unmovable = a.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
        let huge = a.alloc_class(9, Class::HUGE, 0).unwrap();
        let trees = [tree(movable), tree(unmovable), tree(huge)];
        assert!(trees[0] != trees[1] && trees[1] != trees[2] && trees[0] != trees[2]);
        for (index, class) in [
            (movable, Class::MOVABLE),
            (unmovable, Class::UNMOVABLE),
            (huge, Class::HUGE),
        ] {
            assert_eq!(class_of(&a, index), class);
        }
        // More of each class go to the same trees; a class beyond the three is movable.
        assert_eq!(
            tree(a.alloc_class(0, Class::UNMOVABLE, 0).unwrap()),
            trees[1]
        );
        assert_eq!(tree(a.alloc_class(0, Class::new(7), 0).unwrap()), trees[0]);
        assert_eq!(tree(a.alloc_class(9, Class::HUGE, 0).unwrap()), trees[2]);
        a.assert_consistent();
        let of = |c| a.free_units_of(c);
        assert_eq!((of(Class::UNMOVABLE), of(Class::HUGE)), (1022, 0));
        assert_eq!(of(Class::MOVABLE), 1024 + 1022);
        assert_eq!(of(Class::new(3)), 0);
        let per_class: usize = (0..3).map(|c| of(Class::new(c))).sum();
        assert_eq!(per_class, a.free_units());
    }

    #[test]
    fn small_and_huge_share_small_trees() {
        let a = classed(4096, 1, Policy::small_huge());
        let movable = a.alloc(0, 0).unwrap();
        let unmovable = a.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
        let huge = a.alloc_class(9, Class::HUGE, 0).unwrap();
        assert_eq!(tree(movable), tree(unmovable));
        assert_ne!(tree(movable), tree(huge));
        assert_eq!(class_of(&a, unmovable), Class::MOVABLE);
        assert_eq!(a.free_units_of(Class::UNMOVABLE), 0);
        a.assert_consistent();
    }

    /// With no free tree left, a request of a class without trees steals single blocks from
    /// the trees in use, which keep their class; a freed tree is demoted to it.
    #[test]
    fn a_request_steals_from_trees_in_use_and_demotes_free_ones() {
        let a = classed(2048, 2, Policy::unmovable_movable_huge());
        // Both trees movable and in use.
        let first = a.alloc(0, 0).unwrap();
        let second = a.alloc(0, 1).unwrap();
        assert_ne!(tree(first), tree(second));
        let stolen = a.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
        assert_eq!(class_of(&a, stolen), Class::MOVABLE);
        assert_eq!(a.free_units_of(Class::UNMOVABLE), 0);
        a.assert_consistent();
        // Tree of `second` entirely free again: the next unmovable request demotes it.
        a.free(second, 0, 1).unwrap();
        a.drain();
        let demoted = a.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
        assert_eq!(tree(demoted), tree(second));
        assert_eq!(class_of(&a, demoted), Class::UNMOVABLE);
        assert_eq!(a.free_units_of(Class::UNMOVABLE), 1023);
        a.assert_consistent();
        for (b, core) in [(first, 0), (stolen, 0), (demoted, 1)] {
            a.free(b, 0, core).unwrap();
        }
        a.drain();
        assert_eq!(a.free_units(), 2048);
        a.assert_consistent();
    }

    /// A class without trees of its own, that may neither demote nor steal a tree in use,
    /// gets every free unit of the other class's trees through the complete fallback (its
    /// searches noted short meanwhile); a tree freed whole is demoted to it again (the
    /// note forgotten by the credit that made the tree demotable).
    #[test]
    fn a_class_without_trees_falls_back_and_gets_a_freed_tree_again() {
        let fallback = |_, _, free, capacity| match free == capacity {
            true => Access::Demote,
            false => Access::Fallback,
        };
        let policy = Policy::new(5, Class::MOVABLE, |c| Class::new(c.number() % 5), fallback);
        let a = classed(2048, 1, policy.unwrap());
        // Both trees movable and in use: one full, one with a unit taken.
        let movable: Vec<usize> = (0..1025).map(|_| a.alloc(0, 0).unwrap()).collect();
        let full = tree(movable[0]);
        assert_ne!(tree(movable[1024]), full);
        let class = Class::new(3);
        let mut fell_back = Vec::new();
        while let Ok(i) = a.alloc_class(0, class, 0) {
            assert_eq!(class_of(&a, i), Class::MOVABLE);
            fell_back.push(i);
        }
        assert_eq!(fell_back.len(), 1023);
        assert_eq!(a.free_units(), 0);
        a.assert_consistent();
        // Again, after each class's searches were noted short.
        assert_eq!(a.alloc_class(0, class, 0), Err(Error::OutOfMemory));
        for &i in movable.iter().filter(|&&i| tree(i) == full) {
            a.free(i, 0, 0).unwrap();
        }
        // Reserve-on-free made it core 0's movable reservation: given back whole.
        a.drain();
        let demoted = a.alloc_class(0, class, 0).unwrap();
        assert_eq!(tree(demoted), full);
        assert_eq!(class_of(&a, demoted), class);
        a.assert_consistent();
    }

    /// Whatever the classes asked for, a sequential allocation fails only when no free block
    /// of its order is left: every unit is handed out before the first failure.
    #[test]
    fn sequential_allocation_is_complete_in_any_class() {
        for policy in [Policy::unmovable_movable_huge(), Policy::small_huge()] {
            let a = classed(3 * 1024 + 512, 3, policy);
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut live: Vec<(usize, u32)> = Vec::new();
            let mut taken = 0;
            loop {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let class = Class::new((rng % 4) as u8);
                let core = (rng >> 8) as usize;
                match a.alloc_class(0, class, core) {
                    Ok(i) => {
                        live.push((i, 0));
                        taken += 1;
                    }
                    Err(e) => {
                        assert_eq!(e, Error::OutOfMemory);
                        break;
                    }
                }
            }
            assert_eq!(taken, a.total_units());
            a.assert_consistent();
            for (i, o) in live {
                a.free(i, o, 0).unwrap();
            }
            a.drain();
            assert_eq!(a.free_units(), a.total_units());
            a.assert_consistent();
        }
    }

    /// With one class, `alloc_class` places every class as `alloc` does.
    #[test]
    fn one_class_places_every_request_as_alloc_does() {
        let plain = classed(4096, 2, Policy::single());
        let classes = classed(4096, 2, Policy::single());
        let mut rng = 0x1234_5678u64;
        for _ in 0..2000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let order = (rng % 6) as u32;
            let core = (rng >> 8) as usize % 2;
            let class = Class::new((rng >> 16) as u8);
            assert_eq!(
                plain.alloc(order, core),
                classes.alloc_class(order, class, core)
            );
        }
        assert_eq!(plain.free_units(), classes.free_units());
        assert_eq!(plain.free_units_of(Class::MOVABLE), plain.free_units());
    }

    #[test]
    fn policies_name_only_their_classes() {
        let rule: Result<(), _> = Err(Error::InvalidConfig(ConfigRule::Classes));
        let home = |_| Class::MOVABLE;
        let access = |_, _, _, _| Access::Steal;
        assert_eq!(
            Policy::new(0, Class::MOVABLE, home, access).err(),
            rule.err()
        );
        assert_eq!(
            Policy::new(9, Class::MOVABLE, home, access).err(),
            rule.err()
        );
        assert_eq!(Policy::new(2, Class::HUGE, home, access).err(), rule.err());
        let far = |c: Class| Class::new(c.number() % 4);
        assert_eq!(
            Policy::new(3, Class::MOVABLE, far, access).err(),
            rule.err()
        );
        let p = Policy::new(4, Class::HUGE, far, access).unwrap();
        assert_eq!(
            (p.classes(), p.initial(), p.home(Class::new(6))),
            (4, Class::HUGE, Class::new(2))
        );
        let a = classed(4096, 1, p);
        assert_eq!(a.tree_state(3), Ok(TreeState::Online(Class::HUGE)));
        assert_eq!(a.free_units_of(Class::HUGE), 4096);
    }
}
