//! Trees taken out of service and back, and re-classed: memory hot-unplug, a balloon driver,
//! a virtual machine giving memory back to its host, or a kernel moving a tree between
//! classes by hand.
//!
//! A tree changes state only when it is entirely free and no core holds it: its entry is
//! unreserved, online and its counter `cU` has every unit of the tree. That one reading of
//! the entry, in the compare-and-swap that changes it, is exact: a tree's free units are its
//! `cU`, the `cP` of the reservation holding it and the units of allocations in flight,
//! which have taken theirs from one of those counters; unreserved, no reservation holds it,
//! and with every unit in `cU` none is live or in flight. A reservation, a demotion or a
//! steal racing the change is a compare-and-swap (or a take) on the same word: one of them
//! comes first, and the other sees what it left.
//!
//! An offline tree's entry has the offline flag and `cU` = 0 and is never reserved (the
//! reservation's compare-and-swap refuses it), so no path takes a unit of it: reservations,
//! steals, the complete fallback and `alloc_at` all take units from a counter first. Its
//! frames stay free in the lower level, so nothing can be freed into it either (a free there
//! is `NotAllocated`, as for any free unit), and bringing it back online puts every unit
//! into `cU` again. The state is kept in the upper level only: a persistent zone reopened or
//! recovered has every tree online.

use core::ops::Range;

use super::trees::Tree;
use super::{LLFree, TreeId, WriteBack};
use crate::{Class, Error};

/// The state of a tree ([`LLFree::set_tree_state`], [`LLFree::tree_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeState {
    /// Out of service: its units are neither free nor allocated, and nothing allocates them.
    Offline,
    /// In service, in this class.
    Online(Class),
}

impl<W: WriteBack> LLFree<W> {
    /// Number of trees; tree `t` holds units `t * tree_units()..` (the last may be short).
    pub fn trees(&self) -> usize {
        self.trees.len()
    }

    /// Units of a whole tree.
    pub fn tree_units(&self) -> usize {
        1 << self.tree_shift
    }

    /// The state of tree `tree`; [`Error::OutOfRange`] past the last tree.
    pub fn tree_state(&self, tree: usize) -> Result<TreeState, Error> {
        if tree >= self.trees.len() {
            return Err(Error::OutOfRange);
        }
        let e = self.trees.get(TreeId(tree));
        Ok(match e.offline() {
            true => TreeState::Offline,
            false => TreeState::Online(Class::new(e.class())),
        })
    }

    /// Takes the trees `trees` out of service ([`TreeState::Offline`]), brings them back or
    /// re-classes them ([`TreeState::Online`]), in order. A tree already in the state asked
    /// for is left as it is, whatever it holds; any other changes only while it is
    /// entirely free and no core holds it (a core holds a tree until it runs short, or until
    /// [`BlockAlloc::drain`](crate::BlockAlloc::drain) or `drain_core` gives its
    /// reservations back); an offline tree may be brought online in any class.
    ///
    /// While offline, a tree's units are not free ([`BlockAlloc::free_units`],
    /// [`LLFree::free_units_of`], [`LLFree::free_per_huge`] leave them out) and never
    /// allocated; [`BlockAlloc::total_units`] still counts them (they keep their indices),
    /// and [`LLFree::offline_units`] says how many they are.
    ///
    /// On the first tree it cannot change it stops, the trees before it changed: its number
    /// and [`Error::WouldBlock`] if a core holds it, [`Error::Occupied`] if a unit of it is
    /// allocated (or an allocation is taking one), [`Error::OutOfRange`] for a tree past
    /// the last or a class beyond the policy's.
    ///
    /// [`BlockAlloc::free_units`]: crate::BlockAlloc::free_units
    /// [`BlockAlloc::total_units`]: crate::BlockAlloc::total_units
    ///
    /// ```
    /// use buddyfree::llfree::{LLFree, Options, TreeState};
    /// use buddyfree::{BlockAlloc, Class, Config, Error};
    ///
    /// let options = Options::default().with_tree_children(2);
    /// let a = LLFree::builder(Config::new(4096, 10)).options(options).build()?; // 4 trees of 1024 units
    /// let block = a.alloc(0, 0)?;
    /// assert_eq!(a.set_tree_state(0..4, TreeState::Offline), Err((0, Error::WouldBlock)));
    /// a.drain();
    /// assert_eq!(a.set_tree_state(0..4, TreeState::Offline), Err((0, Error::Occupied)));
    /// a.set_tree_state(1..4, TreeState::Offline).map_err(|(_, e)| e)?;
    /// assert_eq!((a.free_units(), a.offline_units()), (1023, 3072));
    /// assert_eq!(a.alloc(10, 0), Err(Error::OutOfMemory));
    /// a.set_tree_state(1..4, TreeState::Online(Class::MOVABLE)).map_err(|(_, e)| e)?;
    /// a.free(block, 0, 0)?;
    /// assert_eq!(a.free_units(), 4096);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn set_tree_state(
        &self,
        mut trees: Range<usize>,
        state: TreeState,
    ) -> Result<(), (usize, Error)> {
        trees.try_for_each(|t| self.set_state(TreeId(t), state).map_err(|e| (t, e)))
    }

    /// [`LLFree::set_tree_state`] of one tree.
    fn set_state(&self, t: TreeId, state: TreeState) -> Result<(), Error> {
        if t.0 >= self.trees.len() {
            return Err(Error::OutOfRange);
        }
        let to = match state {
            TreeState::Offline => None,
            TreeState::Online(class) if usize::from(class.number()) < self.classes.count => {
                Some(class.number())
            }
            TreeState::Online(_) => return Err(Error::OutOfRange),
        };
        let capacity = self.trees.capacity(t);
        let already = |e: Tree| match to {
            None => e.offline(),
            Some(class) => !e.offline() && e.class() == class,
        };
        let whole = |e: Tree| !e.reserved() && (e.offline() || e.free() == capacity);
        self.trees
            .change(t, |e| {
                let new = match to {
                    None => Tree::offline_of(e.class()),
                    Some(class) => Tree::new(capacity, class),
                };
                (!already(e) && whole(e)).then_some(new)
            })
            .map(|_| {
                self.classes.forget();
                // A tree back online holds units its entry did not: mark it for refusals
                // (`summary.rs`), as every raise of a count from 0 does.
                if to.is_some() {
                    self.summary.raised(t, usize::MAX);
                    self.refusals.freed();
                }
            })
            .or_else(|e| match e {
                e if already(e) => Ok(()),
                e if e.reserved() => Err(Error::WouldBlock),
                _ => Err(Error::Occupied),
            })
    }

    /// Units of the offline trees.
    pub fn offline_units(&self) -> usize {
        (0..self.trees.len())
            .map(TreeId)
            .filter(|&t| self.trees.get(t).offline())
            .map(|t| self.trees.capacity(t))
            .sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use alloc::vec::Vec;

    use super::super::{Options, Policy};
    use super::*;
    use crate::{BlockAlloc, Config};

    fn four_trees(policy: Policy) -> LLFree {
        let options = Options::default().with_tree_children(2);
        LLFree::builder(Config::new(3 * 1024 + 700, 10).with_cores(2))
            .options(options)
            .policy(policy)
            .build()
            .unwrap()
    }

    /// Offline trees give nothing: every block comes from the online ones, and the heap is
    /// full when they are; back online, every unit is there again.
    #[test]
    fn an_offline_tree_gives_no_block_until_it_is_back() {
        let a = four_trees(Policy::single());
        assert_eq!((a.trees(), a.tree_units()), (4, 1024));
        a.set_tree_state(1..2, TreeState::Offline).unwrap();
        a.set_tree_state(3..4, TreeState::Offline).unwrap();
        assert_eq!(a.tree_state(3), Ok(TreeState::Offline));
        assert_eq!(a.offline_units(), 1024 + 700);
        assert_eq!(a.free_units(), 2048);
        assert_eq!(a.free_per_huge().filter(|&f| f > 0).count(), 4);
        a.assert_consistent();
        let mut live = Vec::new();
        while let Ok(i) = a.alloc(0, live.len()) {
            assert!(matches!(i / 1024, 0 | 2), "unit {i} of an offline tree");
            live.push(i);
        }
        assert_eq!(live.len(), 2048);
        // Nothing of an offline tree can be taken or freed.
        assert_eq!(a.alloc_at(1024, 0, 0), Err(Error::Occupied));
        assert_eq!(a.free(3 * 1024, 0, 0), Err(Error::NotAllocated));
        a.drain();
        assert_eq!(
            a.set_tree_state(0..1, TreeState::Offline),
            Err((0, Error::Occupied))
        );
        // Back online (again: no change), in another class.
        a.set_tree_state(1..4, TreeState::Online(Class::MOVABLE))
            .unwrap();
        assert_eq!(a.offline_units(), 0);
        assert_eq!(a.free_units(), 1024 + 700);
        for (n, i) in live.into_iter().enumerate() {
            a.free(i, 0, n).unwrap();
        }
        a.drain();
        assert_eq!(a.free_units(), a.total_units());
        a.assert_consistent();
    }

    #[test]
    fn a_free_tree_is_re_classed_and_a_tree_in_use_is_not() {
        let a = four_trees(Policy::unmovable_movable_huge());
        let block = a.alloc(0, 0).unwrap();
        let t = block / 1024;
        let huge = TreeState::Online(Class::HUGE);
        assert_eq!(
            a.set_tree_state(t..t + 1, huge),
            Err((t, Error::WouldBlock))
        );
        a.drain();
        assert_eq!(a.set_tree_state(t..t + 1, huge), Err((t, Error::Occupied)));
        let others = (0..4).filter(|&o| o != t);
        for o in others.clone() {
            a.set_tree_state(o..o + 1, huge).unwrap();
        }
        // The last tree has 700 units (and, partial, is the one the first search takes).
        let capacity = |t: usize| if t == 3 { 700 } else { 1024 };
        assert_eq!(a.free_units_of(Class::HUGE), a.total_units() - capacity(t));
        assert_eq!(a.free_units_of(Class::MOVABLE), capacity(t) - 1);
        let beyond = TreeState::Online(Class::new(3));
        assert_eq!(a.set_tree_state(0..1, beyond), Err((0, Error::OutOfRange)));
        assert_eq!(a.set_tree_state(4..5, huge), Err((4, Error::OutOfRange)));
        assert_eq!(a.tree_state(4), Err(Error::OutOfRange));
        // A huge request goes to a huge tree, a movable one to the movable tree.
        let h = a.alloc_class(9, Class::HUGE, 1).unwrap();
        assert!(others.clone().any(|o| o == h / 1024));
        a.free(h, 9, 1).unwrap();
        a.free(block, 0, 0).unwrap();
        a.drain();
        a.assert_consistent();
        assert_eq!(a.free_units(), a.total_units());
    }
}
