//! The upper level's tree entries (§3.2.2): per tree of `children` huge frames a free counter
//! `cU`, a reserved flag `r`, the tree's class and whether it is offline, in one 32-bit word,
//! 16 trees to a cache line, and the search for a tree to reserve.
//!
//! ```text
//!  31   30      29..27    26                 0
//! [ r ][ off ][ class  ][ free cU (27 bits)   ]
//! ```
//!
//! Every field changes only by a compare-and-swap of the whole word (or, for `cU`, an add that
//! cannot carry into the fields above it: `cU` never exceeds the tree's units, below 2^27), so
//! a reservation, a demotion (a reservation that also re-classes) and a change of state see
//! each other. While a tree is reserved its class does not change: only an unreserved tree is
//! demoted or re-classed. An offline tree has `cU` = 0 and is never reserved, so nothing takes
//! a unit of it (`classes.rs`, `online.rs`).

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
const OFFLINE: u32 = 1 << 30;
const CLASS_SHIFT: u32 = 27;
const CLASS_MASK: u32 = 0b111 << CLASS_SHIFT;
const FREE_MASK: u32 = (1 << CLASS_SHIFT) - 1;
/// Trees must have fewer units than this: the free counter's width.
pub(crate) const TREE_UNITS_LIMIT: usize = 1 << CLASS_SHIFT;
/// Classes a tree entry can name.
pub(crate) const MAX_CLASSES: usize = 1 << (30 - CLASS_SHIFT);

impl Tree {
    /// An unreserved, online entry of class `class` with `free` units.
    pub(crate) const fn new(free: usize, class: u8) -> Tree {
        Tree(free as u32 | (class as u32) << CLASS_SHIFT)
    }

    /// An offline entry that was (and comes back as) class `class`.
    pub(crate) const fn offline_of(class: u8) -> Tree {
        Tree(OFFLINE | (class as u32) << CLASS_SHIFT)
    }

    #[inline]
    pub(crate) const fn free(self) -> usize {
        (self.0 & FREE_MASK) as usize
    }

    #[inline]
    pub(crate) const fn reserved(self) -> bool {
        self.0 & RESERVED != 0
    }

    #[inline]
    pub(crate) const fn class(self) -> u8 {
        ((self.0 & CLASS_MASK) >> CLASS_SHIFT) as u8
    }

    #[inline]
    pub(crate) const fn offline(self) -> bool {
        self.0 & OFFLINE != 0
    }

    /// This entry reserved for class `class` with its free count moved out.
    const fn reserved_as(class: u8) -> Tree {
        Tree(RESERVED | (class as u32) << CLASS_SHIFT)
    }
}

/// How full a tree is, for the reservation heuristic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fill {
    /// Almost all units free.
    Free,
    Partial,
    /// Almost all units taken.
    Allocated,
}

/// The tree entries and the fill thresholds.
pub(crate) struct Trees {
    entries: Table<AtomicU32>,
    /// Units of a whole tree, and of all trees (the last tree may have fewer).
    tree_units: usize,
    units: usize,
    /// A tree with fewer free units than this is "allocated".
    allocated_below: usize,
    /// A tree with more free units than this is "free".
    free_above: usize,
}

impl Trees {
    /// Trees of `tree_units` over `units` at `part` of `meta` with no free units (the
    /// builder credits them), none reserved, all of class `class`; thresholds in units.
    pub(crate) fn new(
        meta: &Metadata,
        part: Part<AtomicU32>,
        (tree_units, units): (usize, usize),
        class: u8,
        thresholds: (usize, usize),
    ) -> Result<Trees, Error> {
        Ok(Trees {
            entries: meta.table(part, |_| AtomicU32::new(Tree::new(0, class).0))?,
            tree_units,
            units,
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

    /// The entry of `t`, read in the single order of `SeqCst` accesses (the summary's
    /// second read after a clear, `summary.rs`; the refusal memo's reads after a free).
    pub(crate) fn get_seq_cst(&self, t: TreeId) -> Tree {
        Tree(self.entries[t.0].load(Ordering::SeqCst))
    }

    /// The units of tree `t` (those of the last tree may be fewer than a whole tree's).
    #[inline]
    pub(crate) fn capacity(&self, t: TreeId) -> usize {
        let first = t.0 * self.tree_units;
        self.tree_units.min(self.units.saturating_sub(first))
    }

    /// Replaces the entry of `t` by `f(old)` if `f` gives one; the old entry either way.
    pub(crate) fn change(
        &self,
        t: TreeId,
        mut f: impl FnMut(Tree) -> Option<Tree>,
    ) -> Result<Tree, Tree> {
        self.entries[t.0]
            .try_change(|e| f(Tree(e)).map(|new| new.0))
            .map(Tree)
            .map_err(Tree)
    }

    #[inline]
    /// Takes `n` units from the global counter `cU` (whether reserved or not).
    pub(crate) fn take(&self, t: TreeId, n: usize) -> bool {
        self.change(t, |e| (e.free() >= n).then(|| Tree(e.0 - n as u32)))
            .is_ok()
    }

    #[inline]
    /// Gives `n` units back to the global counter (frees from cores not holding the tree);
    /// returns the entry it replaced. `SeqCst`, as every change of an entry (`atomic.rs`):
    /// the refusal memo's argument (`refusal.rs`).
    pub(crate) fn add(&self, t: TreeId, n: usize) -> Tree {
        Tree(self.entries[t.0].fetch_add(n as u32, Ordering::SeqCst))
    }

    #[inline]
    /// Takes the whole global counter of a reserved tree (the sync of Fig. 14a (1a)).
    pub(crate) fn take_all_reserved(&self, t: TreeId) -> usize {
        self.change(t, |e| {
            (e.reserved() && e.free() > 0).then_some(Tree(e.0 & !FREE_MASK))
        })
        .map_or(0, Tree::free)
    }

    #[inline]
    /// Reserves `t` if no core has it, it is online and `class_for` gives the class it is to
    /// have (its own: a match; another: a demotion): sets `r` and that class, moves `cU` out
    /// and leaves 0 behind. Returns the entry it replaced (its free count and old class).
    pub(crate) fn reserve(
        &self,
        t: TreeId,
        class_for: impl Fn(Tree) -> Option<u8>,
    ) -> Option<Tree> {
        self.change(t, |e| {
            if e.reserved() || e.offline() {
                return None;
            }
            class_for(e).map(Tree::reserved_as)
        })
        .ok()
    }

    #[inline]
    /// Ends a reservation, returning the per-core count `free` to `cU`; returns the entry it
    /// replaced.
    pub(crate) fn unreserve(&self, t: TreeId, free: usize) -> Tree {
        let before = self.change(t, |e| {
            debug_assert!(e.reserved());
            Some(Tree((e.0 & !RESERVED) + free as u32))
        });
        before.unwrap_or_else(|e| e)
    }

    fn fill(&self, tree: Tree) -> Fill {
        match tree.free() {
            free if free > self.free_above => Fill::Free,
            free if free < self.allocated_below => Fill::Allocated,
            _ => Fill::Partial,
        }
    }

    /// The search order of §3.2.2: (1) partial, then free trees on the cache line of `near`,
    /// (2) first-fit partial trees, (3) free trees, then allocated ones with room. For huge
    /// orders free trees come before partial ones (§4.2.1), on the line as in the whole array.
    /// Only trees `accept` takes (by number and entry) count; the one found is reserved as
    /// class `class` and returned with the free count moved out of it.
    ///
    /// The paper's step 1 takes the first partial *or* free tree on the line. We look at the
    /// line twice, partial trees first: the line is in the cache either way, and with a
    /// heap of 16 trees or fewer (1 GiB of 4 KiB units) the line is the whole array, so
    /// taking whichever comes first would let small allocations into the free trees the
    /// heuristic exists to keep free, until none is left (as under the `frag` workload).
    pub(crate) fn search(
        &self,
        n: usize,
        near: usize,
        huge: bool,
        accept: impl Fn(TreeId, Tree) -> bool,
        class: u8,
    ) -> Option<(TreeId, usize)> {
        let len = self.len();
        let (first, second) = match huge {
            true => (Fill::Free, Fill::Partial),
            false => (Fill::Partial, Fill::Free),
        };
        // Where a step looks: the trees from `base` on, `near`'s first, `count` of them
        // wrapping around (the neighbourhood or the whole array), and how full a tree it takes.
        let (line, all) = ((near / PER_LINE * PER_LINE, PER_LINE), (0, len));
        let steps = [
            (line, Some(first)),
            (line, Some(second)),
            (all, Some(first)),
            (all, Some(second)),
            (all, None),
        ];
        steps.into_iter().find_map(|((base, count), fill)| {
            let trees = (0..count).map(|i| TreeId(base + (near + i) % count));
            trees.filter(|t| t.0 < len).find_map(|t| {
                let like = |e: Tree| {
                    e.free() >= n && fill.is_none_or(|f| self.fill(e) == f) && accept(t, e)
                };
                // Read first: a CAS on every tree would write every cache line of the array.
                let e = self.get(t);
                (!e.reserved() && !e.offline() && like(e))
                    .then(|| self.reserve(t, |e| like(e).then_some(class)))?
                    .map(|old| (t, old.free()))
            })
        })
    }

    #[inline]
    /// Whether `t` is partial (the trees reserve-on-free picks).
    pub(crate) fn is_partial(&self, tree: Tree) -> bool {
        self.fill(tree) == Fill::Partial
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Every tree, for searches without classes.
    const ANY: fn(TreeId, Tree) -> bool = |_, _| true;

    /// Trees of 1000 units: below 125 allocated, above 875 free.
    fn trees(free: &[usize]) -> Trees {
        let part = crate::table::Plan::new().add(free.len()).unwrap();
        let units = (1000, 1000 * free.len());
        let trees = Trees::new(&Metadata::heap(), part, units, 0, (125, 875)).unwrap();
        for (t, &free) in free.iter().enumerate() {
            trees.add(TreeId(t), free);
        }
        trees
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
        assert_eq!(t.search(200, 0, false, ANY, 0), Some((TreeId(32), 500)));
        assert!(t.get(TreeId(32)).reserved());
        assert_eq!(t.get(TreeId(32)).free(), 0);
        // Partial trees are taken or too small now: a free tree next.
        assert_eq!(t.search(200, 0, false, ANY, 0), Some((TreeId(16), 1000)));
        // A smaller request fits the small partial tree; then only an allocated one is left.
        assert_eq!(t.search(50, 0, false, ANY, 0), Some((TreeId(33), 130)));
        assert_eq!(t.search(50, 0, false, ANY, 0), Some((TreeId(17), 100)));
        assert_eq!(t.search(1, 0, false, ANY, 0), None);
        assert_eq!(t.unreserve(TreeId(32), 480).free(), 0);
        assert_eq!(t.get(TreeId(32)), Tree::new(480, 0));
    }

    #[test]
    fn search_for_huge_orders_prefers_free_trees() {
        let t = trees_beyond_first_line(&[(16, 600), (32, 1000)]);
        assert_eq!(t.search(512, 0, true, ANY, 0), Some((TreeId(32), 1000)));
        assert_eq!(t.search(512, 0, true, ANY, 0), Some((TreeId(16), 600)));
    }

    #[test]
    fn search_prefers_partial_trees_on_the_line_over_free_ones_before_them() {
        // One line holds every tree, as on a 1 GiB heap: the free tree 4 comes right after
        // `near`, the partial tree 9 later; the partial one is taken first.
        let mut free = [0; 16];
        free[4] = 1000;
        free[9] = 500;
        let t = trees(&free);
        assert_eq!(t.search(10, 3, false, ANY, 0), Some((TreeId(9), 500)));
        assert_eq!(t.search(10, 3, false, ANY, 0), Some((TreeId(4), 1000)));
        // Huge requests the other way round.
        let t = trees(&free);
        assert_eq!(t.search(10, 3, true, ANY, 0), Some((TreeId(4), 1000)));
    }

    #[test]
    fn search_looks_at_the_neighbourhood_first() {
        // The partial tree 20 is on another cache line than tree 3; the free tree 4 is next
        // to it and wins.
        let mut free = [0; 32];
        free[4] = 1000;
        free[20] = 500;
        let t = trees(&free);
        assert_eq!(t.search(10, 3, false, ANY, 0), Some((TreeId(4), 1000)));
        assert_eq!(t.search(10, 3, false, ANY, 0), Some((TreeId(20), 500)));
    }
}
