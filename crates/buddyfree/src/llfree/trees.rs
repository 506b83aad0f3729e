//! The upper level's tree entries (§3.2.2): per tree of `children` huge frames a free counter
//! `cU` and a reserved flag `r` in one 32-bit word, 16 trees to a cache line, and the search
//! for a tree to reserve.

use super::atomic::Atom;
use super::TreeId;
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::table::{Metadata, Part, Table};
use crate::Error;

/// Tree entries sharing one cache line: the "neighbourhood" of step 1 of the search.
const PER_LINE: usize = 16;

/// One tree entry, by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tree(u32);

const RESERVED: u32 = 1 << 31;

impl Tree {
    #[inline]
    pub(crate) const fn free(self) -> usize {
        (self.0 & !RESERVED) as usize
    }

    #[inline]
    pub(crate) const fn reserved(self) -> bool {
        self.0 & RESERVED != 0
    }
}

/// How full a tree is, for the reservation heuristic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Almost all units free.
    Free,
    Partial,
    /// Almost all units taken.
    Allocated,
}

/// The tree entries and the class thresholds.
pub(crate) struct Trees {
    entries: Table<AtomicU32>,
    /// A tree with fewer free units than this is "allocated".
    allocated_below: usize,
    /// A tree with more free units than this is "free".
    free_above: usize,
}

impl Trees {
    /// Trees at `part` of `meta` with the free counts `free(tree)`, none reserved;
    /// thresholds in units.
    pub(crate) fn new(
        meta: &Metadata,
        part: Part<AtomicU32>,
        free: impl Fn(usize) -> usize,
        thresholds: (usize, usize),
    ) -> Result<Trees, Error> {
        Ok(Trees {
            entries: meta.table(part, |t| AtomicU32::new(free(t) as u32))?,
            allocated_below: thresholds.0,
            free_above: thresholds.1,
        })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub(crate) fn get(&self, t: TreeId) -> Tree {
        Tree(self.entries[t.0].get())
    }

    #[inline]
    /// Takes `n` units from the global counter `cU` (whether reserved or not).
    pub(crate) fn take(&self, t: TreeId, n: usize) -> bool {
        self.entries[t.0]
            .try_change(|e| (Tree(e).free() >= n).then(|| e - n as u32))
            .is_ok()
    }

    #[inline]
    /// Gives `n` units back to the global counter (frees from cores not holding the tree);
    /// returns the free units it had before.
    pub(crate) fn add(&self, t: TreeId, n: usize) -> usize {
        Tree(self.entries[t.0].fetch_add(n as u32, Ordering::AcqRel)).free()
    }

    #[inline]
    /// Takes the whole global counter of a reserved tree (the sync of Fig. 14a (1a)).
    pub(crate) fn take_all_reserved(&self, t: TreeId) -> usize {
        self.entries[t.0]
            .try_change(|e| (Tree(e).reserved() && Tree(e).free() > 0).then_some(RESERVED))
            .map_or(0, |e| Tree(e).free())
    }

    #[inline]
    /// Reserves `t` if no core has it and `accept` likes its entry: sets `r`, moves `cU` out
    /// (returned) and leaves 0 behind.
    pub(crate) fn reserve(&self, t: TreeId, accept: impl Fn(Tree) -> bool) -> Option<usize> {
        self.entries[t.0]
            .try_change(|e| (!Tree(e).reserved() && accept(Tree(e))).then_some(RESERVED))
            .ok()
            .map(|e| Tree(e).free())
    }

    #[inline]
    /// Ends a reservation, returning the per-core count `free` to `cU`; returns the free
    /// units `cU` had before.
    pub(crate) fn unreserve(&self, t: TreeId, free: usize) -> usize {
        let before = self.entries[t.0].try_change(|e| {
            debug_assert!(Tree(e).reserved());
            Some((e & !RESERVED) + free as u32)
        });
        Tree(before.unwrap_or_else(|e| e)).free()
    }

    fn class(&self, tree: Tree) -> Class {
        if tree.free() > self.free_above {
            Class::Free
        } else if tree.free() < self.allocated_below {
            Class::Allocated
        } else {
            Class::Partial
        }
    }

    /// The search order of §3.2.2: (1) partial, then free trees on the cache line of `near`,
    /// (2) first-fit partial trees, (3) free trees, then allocated ones with room. For huge
    /// orders free trees come before partial ones (§4.2.1), on the line as in the whole array.
    /// Reserves the tree found and returns it with the free count moved out of it.
    ///
    /// The paper's step 1 takes the first partial *or* free tree on the line. We look at the
    /// line twice, partial trees first: the line is in the cache either way, and with a
    /// heap of 16 trees or fewer (1 GiB of 4 KiB units) the line is the whole array, so
    /// taking whichever comes first would let small allocations into the free trees the
    /// heuristic exists to keep free, until none is left (as under the `frag` workload).
    pub(crate) fn search(&self, n: usize, near: usize, huge: bool) -> Option<(TreeId, usize)> {
        let len = self.len();
        let room = |t: Tree| t.free() >= n;
        let line = near / PER_LINE * PER_LINE;
        let neighbourhood = || {
            (0..PER_LINE)
                .map(move |i| line + (near + i) % PER_LINE)
                .filter(move |&t| t < len)
        };
        let all = || (0..len).map(|i| (near + i) % len);
        let of_class = |class| move |e: Tree| room(e) && self.class(e) == class;
        let (first, second) = if huge {
            (Class::Free, Class::Partial)
        } else {
            (Class::Partial, Class::Free)
        };
        self.reserve_first(neighbourhood(), of_class(first))
            .or_else(|| self.reserve_first(neighbourhood(), of_class(second)))
            .or_else(|| self.reserve_first(all(), of_class(first)))
            .or_else(|| self.reserve_first(all(), of_class(second)))
            .or_else(|| self.reserve_first(all(), room))
    }

    /// Reserves the first of `trees` whose entry `accept` likes.
    fn reserve_first(
        &self,
        mut trees: impl Iterator<Item = usize>,
        accept: impl Fn(Tree) -> bool,
    ) -> Option<(TreeId, usize)> {
        trees.find_map(|t| self.try_reserve(t, &accept))
    }

    fn try_reserve(&self, t: usize, accept: impl Fn(Tree) -> bool) -> Option<(TreeId, usize)> {
        // Read first: a CAS on every tree would write every cache line of the array.
        let tree = self.get(TreeId(t));
        (!tree.reserved() && accept(tree))
            .then(|| self.reserve(TreeId(t), &accept))?
            .map(|free| (TreeId(t), free))
    }

    #[inline]
    /// Whether `t` is partial (the trees reserve-on-free picks).
    pub(crate) fn is_partial(&self, tree: Tree) -> bool {
        self.class(tree) == Class::Partial
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Trees of 1000 units: below 125 allocated, above 875 free.
    fn trees(free: &[usize]) -> Trees {
        let part = crate::table::Plan::new().add(free.len()).unwrap();
        Trees::new(&Metadata::heap(), part, |t| free[t], (125, 875)).unwrap()
    }

    /// 48 trees, all full but the given ones; the search starts on the first cache line
    /// (trees 0..16), where nothing is free, so the neighbourhood step finds nothing.
    fn trees_beyond_first_line(given: &[(usize, usize)]) -> Trees {
        let mut free = [0; 48];
        for &(t, f) in given {
            free[t] = f;
        }
        trees(&free)
    }

    #[test]
    fn search_prefers_partial_then_free_then_allocated() {
        // 16: free, 17: allocated, 32: partial, 33: partial with too little room.
        let t = trees_beyond_first_line(&[(16, 1000), (17, 100), (32, 500), (33, 130)]);
        assert_eq!(t.search(200, 0, false), Some((TreeId(32), 500)));
        assert!(t.get(TreeId(32)).reserved());
        assert_eq!(t.get(TreeId(32)).free(), 0);
        // Partial trees are taken or too small now: a free tree next.
        assert_eq!(t.search(200, 0, false), Some((TreeId(16), 1000)));
        // A smaller request fits the small partial tree; then only an allocated one is left.
        assert_eq!(t.search(50, 0, false), Some((TreeId(33), 130)));
        assert_eq!(t.search(50, 0, false), Some((TreeId(17), 100)));
        assert_eq!(t.search(1, 0, false), None);
        assert_eq!(t.unreserve(TreeId(32), 480), 0);
        assert_eq!(t.get(TreeId(32)), Tree(480));
    }

    #[test]
    fn search_for_huge_orders_prefers_free_trees() {
        let t = trees_beyond_first_line(&[(16, 600), (32, 1000)]);
        assert_eq!(t.search(512, 0, true), Some((TreeId(32), 1000)));
        assert_eq!(t.search(512, 0, true), Some((TreeId(16), 600)));
    }

    #[test]
    fn search_prefers_partial_trees_on_the_line_over_free_ones_before_them() {
        // One line holds every tree, as on a 1 GiB heap: the free tree 4 comes right after
        // `near`, the partial tree 9 later; the partial one is taken first.
        let mut free = [0; 16];
        free[4] = 1000;
        free[9] = 500;
        let t = trees(&free);
        assert_eq!(t.search(10, 3, false), Some((TreeId(9), 500)));
        assert_eq!(t.search(10, 3, false), Some((TreeId(4), 1000)));
        // Huge requests the other way round.
        let t = trees(&free);
        assert_eq!(t.search(10, 3, true), Some((TreeId(4), 1000)));
    }

    #[test]
    fn search_looks_at_the_neighbourhood_first() {
        // The partial tree 20 is on another cache line than tree 3; the free tree 4 is next
        // to it and wins.
        let mut free = [0; 32];
        free[4] = 1000;
        free[20] = 500;
        let t = trees(&free);
        assert_eq!(t.search(10, 3, false), Some((TreeId(4), 1000)));
        assert_eq!(t.search(10, 3, false), Some((TreeId(20), 500)));
    }
}
