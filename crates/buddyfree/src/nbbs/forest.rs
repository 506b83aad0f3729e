//! The NBBS forest: its cells and their addressing, the allocation protocol (Alg. 2-3) and
//! the [`BlockAlloc`] surface, written once for any cell height ([`Kind`]: the 1-level tree of
//! [`Nbbs`](super::Nbbs), the 4-level bunches of [`Nbbs4`](super::Nbbs4)). The release
//! protocol (Alg. 4-5, FREENODE and UNMARK, with the generation check and the guard) is
//! module `release`'s; the bit layout of a cell, and every change to it as a pure function
//! from the old word to the new one, is [`Shape`]'s (module `cell`). These modules choose
//! which cell to change and in what order. The module docs of [`nbbs`](super) give what the
//! protocol adds to the paper, and why.
//!
//! # Structure
//!
//! ```text
//!  Forest<K>
//!  ├── cells:       [AtomicU64]  every cell level in turn, roots first, each level one cache
//!  │                             line off a power-of-two boundary; a cell packs the nodes of
//!  │                             K levels (state bits per node, the guard, a generation)
//!  ├── level_start: [usize]      first cell of each cell level
//!  ├── cores:       Cores        per core: free-slot hints per order, free-unit counters
//!  ├── refusals:    Refusals     refusals remembered until a free or rollback (refusal.rs)
//!  ├── rollbacks:   AtomicUsize  rolled-back allocations, for a refusal's confirmation
//!  └── reserved:    Reserved     the boot reservation, which every free checks first
//! ```
//!
//! A node (`order`, `pos`) is the block of `2^order` units at `pos << order`; its [`Place`]
//! is its cell level, its cell and its number inside the cell ([`Forest`] draws the
//! arithmetic). Every climb goes through a [`Climb`], from a node's cell up to its root cell.
//!
//! # Invariants
//!
//! - A node is occupied exactly while it or a node below it is allocated or being
//!   allocated, or a free below it has not finished its UNMARK; an allocated node also
//!   carries `ALLOCATED`, set once its allocation completes and cleared by the claim that
//!   starts its free, so a bad or double free finds no claim and changes nothing.
//! - A link (a child cell's `OCC_CHILD` bit in its parent) is set while something below it is
//!   allocated: an allocation's climb marks it before the allocation completes, and only an
//!   UNMARK (or a guarded cell's sweep) that finds the sub-tree below free clears it. Each
//!   mark of a link bumps its cell's generation.
//! - The counters of [`Cores`] change after the tree: an allocation is counted once its climb
//!   succeeded, a free once its UNMARK ended, so the count of releases changes exactly when a
//!   free completes (A4, A15). `rollbacks` counts a rollback once its release ended.
//! - The units past `units` in the last tree are occupied at construction and never freed.
//!
//! # Protocol
//!
//! - **Allocation** (NBALLOC, Alg. 2, through the refusal memo): the core's hint of the order
//!   first ([`Forest::attempt`]: one load, then TRYALLOC if the node looks free); if that
//!   fails, unless the count of free units rules the order out, a scan of the order's nodes
//!   from the hint that skips the sub-tree of each node that made a try fail, repeated while
//!   frees complete during it. The scan passes the nodes that look taken a cell at a time
//!   ([`Forest::pass_taken`]: a load and a mask test per cell) and tries the others. The
//!   memo's confirmation of a refusal scans again only if a free or a rollback completed
//!   since that scan began ([`Forest::alloc_once`]).
//! - **TRYALLOC** (Alg. 3, [`Forest::try_alloc`]): a CAS reserves the node (T2), holding it
//!   (occupied, not allocated); then one CAS per cell up to the roots marks the link to the
//!   cell below occupied (T8-T15) and bumps the generation; then an RMW on the node's cell
//!   sets `ALLOCATED`. A mark that finds an occupied node above the link fails the
//!   allocation: [`Forest::roll_back`] releases the node like a free, past the last link it
//!   marked (module docs of `nbbs`), and tells the refusal memo.
//! - **Free** (NBFREE, Alg. 4-5, module `release`): the reservation check, then a CAS claims
//!   the allocated node (clears `ALLOCATED`), a climb marks the ancestors' links coalescing
//!   and reads their generations, an RMW clears the node (F20), and UNMARK climbs again
//!   clearing each coalescing link whose child is free and whose generation is unchanged.
//!   Then the counters, the core's hint, and the refusal memo.
//! - **Groups** (`alloc_bulk`, `free_bulk`): `2^r` blocks under one node of their cell are
//!   one TRYALLOC of that node, completed as its blocks, and one free of it after a CAS that
//!   checks and clears them all ([`Shape::complete`], [`Shape::join`]).
//!
//! # Ordering, and no locks
//!
//! Nothing here waits: every change is one CAS or RMW on one cell, and a climb changes one
//! cell at a time, from the node's cell up to the roots (allocations, coalescing marks) or
//! back down (rollbacks). Reservations and marks acquire (the units may have just been freed
//! by another thread); the clear that ends a free releases (F20), so the next owner's writes
//! follow the last owner's. A refusal of any CAS step is confirmed by an RMW, never by a
//! plain read ([`try_cas`]). The comments at each step give the paper's line.

#[cfg(all(test, loom))]
use alloc::vec::Vec;
use core::marker::PhantomData;

use super::cell::Shape;
use super::cores::{Cores, Slot};
use super::word::try_cas;
use crate::range;
use crate::refusal::{Failure, Refusals};
use crate::reserved::Reserved;
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::CachePadded;
use crate::table::{Metadata, Part, Plan, Table};
use crate::{check_block, BlockAlloc, Capabilities, Config, ConfigRule, Error};

/// A cell height: the layout of its cells, each in an `AtomicU64`. Sealed: [`OneLevel`] and
/// [`FourLevel`] are the two kinds.
pub trait Kind: Send + Sync + 'static {
    /// The layout of its cells.
    #[doc(hidden)]
    const SHAPE: Shape;
}

/// The paper's 1-level tree: one node per `AtomicU64` (5 state bits, 59 generation bits).
pub struct OneLevel;
impl Kind for OneLevel {
    const SHAPE: Shape = Shape::new(1, Shape::state_bits(1), 59);
}

/// The paper's 4-level bunches: 15 nodes per `AtomicU64` (47 state bits, the guard's
/// `INVALID` bit and 5-bit count, an 11-bit generation).
pub struct FourLevel;
impl Kind for FourLevel {
    const SHAPE: Shape = Shape::guarded(4, 5, 11);
}

/// Cells of `LEVELS` levels in an `AtomicU64` with a generation of only `GEN` bits, which
/// wraps after `2^GEN` marks: for tests showing that they catch a generation too narrow.
#[cfg(test)]
pub struct Narrow<const LEVELS: u32, const GEN: u32>;
#[cfg(test)]
impl<const LEVELS: u32, const GEN: u32> Kind for Narrow<LEVELS, GEN> {
    const SHAPE: Shape = Shape::new(LEVELS, Shape::state_bits(LEVELS), GEN);
}

/// Guarded cells of `LEVELS` levels with a count of `COUNT` bits and a generation of only
/// `GEN` bits: for tests showing that the guard makes a wrap harmless.
#[cfg(test)]
pub struct Guarded<const LEVELS: u32, const COUNT: u32, const GEN: u32>;
#[cfg(test)]
impl<const LEVELS: u32, const COUNT: u32, const GEN: u32> Kind for Guarded<LEVELS, COUNT, GEN> {
    const SHAPE: Shape = Shape::guarded(LEVELS, COUNT, GEN);
}

/// A [`Forest::stamp`]: the count of releases and the count of rollbacks.
pub(super) type Stamp = (usize, usize);

/// Where the tables of a forest lie in its metadata ([`Forest::plan`]).
pub(crate) struct Parts {
    cells: Part<AtomicU64>,
    level_start: Part<usize>,
    slots: Part<CachePadded<Slot>>,
}

/// A block of `2^order` units at `pos * 2^order`: one node of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) order: u32,
    pub(super) pos: usize,
}

impl Node {
    /// The node of the block of `order` at unit `index` (its start, if aligned).
    #[inline]
    pub(super) fn at(index: usize, order: u32) -> Node {
        Node {
            order,
            pos: index >> order,
        }
    }
}

/// Where a node lives: cell level (0 = the cells holding the roots), cell within the level,
/// node number inside the cell.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub(super) level: usize,
    pub(super) cell: usize,
    pub(super) j: u32,
}

/// The cells above a cell, from its parent up to its root cell, each with the child the
/// climb comes up through: the path of every climb (an allocation's marks, a free's
/// coalescing marks and its UNMARK).
///
/// It holds the cell table and the first cell of each level, copied out of the forest. The
/// forest holds atomics of its own (the refusal memo, the reservation), so the compiler must
/// assume that any atomic operation may change its fields, and would reload the tables (and
/// check their bounds again) at every step. The steps check no bounds either: the invariant
/// `level < starts.len()` and `starts[level] + cell < cells.len()` is checked once, at the
/// start ([`Forest::climb`]), and each step keeps it: the level goes down, and the index
/// does not grow, since `starts` increases with the level ([`Forest::build`]) and a parent's
/// number is its child's shifted right.
#[derive(Clone)]
pub(super) struct Climb<'a> {
    cells: &'a [AtomicU64],
    starts: &'a [usize],
    level: usize,
    cell: usize,
    /// Levels per cell (`K`): a parent's number is its child's shifted right by this.
    levels: u32,
}

/// A step of a [`Climb`]: cell `cell` of cell level `level`, its word, and which of its
/// children the climb came from.
pub(super) struct Up<'a> {
    pub(super) level: usize,
    pub(super) cell: usize,
    pub(super) ch: u32,
    pub(super) word: &'a AtomicU64,
}

impl<'a> Climb<'a> {
    /// The word of the cell the climb is at: its start, before the first step.
    #[inline(always)]
    pub(super) fn here(&self) -> &'a AtomicU64 {
        // SAFETY: the invariant of `Climb`: both indices are in bounds.
        unsafe {
            self.cells
                .get_unchecked(*self.starts.get_unchecked(self.level) + self.cell)
        }
    }
}

impl<'a> Iterator for Climb<'a> {
    type Item = Up<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.level == 0 {
            return None;
        }
        let ch = (self.cell & ((1 << self.levels) - 1)) as u32;
        self.level -= 1;
        self.cell >>= self.levels;
        // Keeps the invariant (see `Climb`).
        let word = self.here();
        Some(Up {
            level: self.level,
            cell: self.cell,
            ch,
            word,
        })
    }
}

/// The NBBS allocator over cells of kind `K`: [`Nbbs`](super::Nbbs) (1-level) or
/// [`Nbbs4`](super::Nbbs4) (4-level bunches). A forest of `roots` trees of height
/// `max_order`, cut into cells of `K` levels from the roots down (the deepest cells may reach
/// below order 0; those nodes are never used).
///
/// ```text
///  cells: [ level 0: roots cells | line | level 1: roots·2^K cells | line | level 2: ... ]
///         (line: one cache line of unused cells)
///  node (order, pos): depth d = max_order - order, cell level d / K, row r = d % K,
///                     cell pos >> r, in-cell number 2^r + pos mod 2^r
/// ```
pub struct Forest<K: Kind> {
    cells: Table<AtomicU64>,
    /// First cell of each cell level.
    level_start: Table<usize>,
    units: usize,
    /// `roots << max_order`: the units the trees cover, `units` rounded up.
    span: usize,
    max_order: u32,
    cores: Cores,
    /// Refusals remembered until the next free or rollback (`refusal.rs`).
    refusals: Refusals,
    /// Rolled-back allocations so far: with the count of releases, what a refusal's
    /// confirmation re-reads ([`Forest::alloc_once`]).
    rollbacks: AtomicUsize,
    /// Units of the boot reservation, which frees refuse (`reserved.rs`).
    reserved: Reserved,
    kind: PhantomData<K>,
}

impl<K: Kind> Forest<K> {
    /// The layout of a cell (every [`Shape`] fits its `AtomicU64`: a `State` is one).
    pub(super) const S: Shape = K::SHAPE;
    pub(super) const LEVELS: u32 = K::SHAPE.levels;
    /// Cells per 64-byte cache line, and the first root cell: a line of unused cells comes
    /// before it, as one comes after each level ([`Forest::level_cells`]), so that nothing
    /// next to the table (its neighbours in the plan, or whatever the system allocator puts
    /// there) shares a line with a cell in use. A read-mostly neighbour such as `level_start`
    /// would otherwise be invalidated by every update of the first roots.
    pub(super) const LINE: usize = 8;

    /// An allocator of `config.units` free units, blocks up to `2^config.max_order` units,
    /// with free-slot hints for `config.cores` cores; its metadata on the heap.
    ///
    /// ```
    /// use buddyfree::{BlockAlloc, Config, Nbbs4};
    /// let frames = Nbbs4::new(Config::new(1 << 12, 9).with_cores(2))?;
    /// let huge = frames.alloc(9, 0)?;
    /// frames.free(huge, 9, 1)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn new(config: Config) -> Result<Self, Error> {
        crate::table::build(Self::plan(config), None, |parts, meta| {
            Self::build(config, parts, meta)
        })
    }

    /// The metadata of a forest of `config`: its cells, the first cell of each cell level,
    /// and the per-core slots. A `const fn` (for a `const` `metadata_layout`).
    pub(crate) const fn plan(config: Config) -> Result<(Plan, Parts), Error> {
        const OVERFLOW: Error = Error::InvalidConfig(ConfigRule::MetadataOverflow);
        const_try!(config.validate());
        let roots = config.units.div_ceil(1 << config.max_order);
        if roots.checked_mul(1 << config.max_order).is_none() {
            return Err(OVERFLOW);
        }
        let levels = (config.max_order / Self::LEVELS) as usize + 1;
        let mut total = Self::LINE;
        let mut level = 0;
        while level < levels {
            match Self::level_cells(roots, level) {
                Some(cells) if cells <= usize::MAX - total => total += cells,
                _ => return Err(OVERFLOW),
            }
            level += 1;
        }
        let mut plan = Plan::new();
        let parts = Parts {
            cells: const_try!(plan.add(total)),
            level_start: const_try!(plan.add(levels)),
            slots: const_try!(plan.add(config.cores)),
        };
        Ok((plan, parts))
    }

    /// The cells of cell level `level`, with the cache line of unused cells after them.
    /// Each level starts one cache line further from a power-of-two boundary than the one
    /// above: level sizes are powers of two times `roots`, so the cells of one root-to-leaf
    /// path would otherwise share an L1 set (more lines than ways for a deep 1-level tree: a
    /// conflict miss per level on every climb).
    const fn level_cells(roots: usize, level: usize) -> Option<usize> {
        match roots.checked_mul(1usize << (level as u32 * Self::LEVELS)) {
            Some(cells) => cells.checked_add(Self::LINE),
            None => None,
        }
    }

    /// A forest managing `config.units` units, its tables made in `meta` at the places
    /// `parts` (from [`Forest::plan`] of the same `config`) gives. When `units` is not a
    /// multiple of `2^max_order`, the last tree is cut short: its units past the end are
    /// occupied once, at construction, by aligned blocks no caller can free (they are out of
    /// range).
    pub(crate) fn build(config: Config, parts: Parts, meta: &Metadata) -> Result<Self, Error> {
        let max_order = config.max_order;
        let roots = config.units.div_ceil(1 << max_order);
        // `plan` checked that neither this nor the level sizes below overflow.
        let span = roots << max_order;
        let mut next = Self::LINE;
        let level_start = meta.table(parts.level_start, |level| {
            let start = next;
            next += Self::level_cells(roots, level).unwrap_or(0);
            start
        })?;
        let forest = Forest {
            cells: meta.table(parts.cells, |_| AtomicU64::new(0))?,
            level_start,
            units: config.units,
            span,
            max_order,
            cores: Cores::new(meta, parts.slots, |core, order| {
                let len = span >> order.min(max_order);
                (len as u128 * core as u128 / config.cores as u128) as usize
            })?,
            refusals: Refusals::default(),
            rollbacks: AtomicUsize::new(0),
            reserved: Reserved::new(config.units, config.max_order),
            kind: PhantomData,
        };
        for (pos, order) in range::aligned_blocks(config.units, span - config.units, max_order) {
            // Cannot fail on a fresh forest; an error here would be a broken size computation.
            forest
                .try_alloc(Node::at(pos, order), 0)
                .map_err(|_| ConfigRule::MetadataOverflow)?;
        }
        Ok(forest)
    }

    #[inline]
    pub(super) fn place(&self, node: Node) -> Place {
        let depth = self.max_order - node.order;
        let row = depth % Self::LEVELS;
        Place {
            level: (depth / Self::LEVELS) as usize,
            cell: node.pos >> row,
            j: (1 << row) | (node.pos & ((1 << row) - 1)) as u32,
        }
    }

    #[inline]
    fn node(&self, level: usize, cell: usize, j: u32) -> Node {
        let row = j.ilog2();
        Node {
            order: self.max_order - (level as u32 * Self::LEVELS + row),
            pos: cell << row | (j - (1 << row)) as usize,
        }
    }

    #[inline]
    pub(super) fn cell(&self, level: usize, cell: usize) -> &AtomicU64 {
        &self.cells[self.level_start[level] + cell]
    }

    /// The climb from the cell at `at` up to its root cell.
    ///
    /// # Panics
    /// If the cell is not in the table, as [`Forest::cell`] (a node out of range: never, for
    /// a checked block).
    #[inline(always)]
    pub(super) fn climb(&self, at: Place) -> Climb<'_> {
        assert!(
            self.level_start[at.level] + at.cell < self.cells.len(),
            "cell {at:?} out of the table"
        );
        Climb {
            cells: &self.cells,
            starts: &self.level_start,
            level: at.level,
            cell: at.cell,
            levels: Self::LEVELS,
        }
    }

    /// Alg. 3 (TRYALLOC): reserves `node`, then climbs marking the ancestors occupied up to
    /// the roots, and completes it: allocated, or for a bulk allocation (`rows > 0`) handed
    /// out as the `2^rows` nodes `rows` rows below it in its cell ([`Shape::complete`]). On
    /// failure returns the node that made it fail (`node` or an occupied ancestor), having
    /// rolled back its marks.
    #[inline(always)]
    fn try_alloc(&self, node: Node, rows: u32) -> Result<(), Node> {
        let at = self.place(node);
        let done = at.level == 0;
        let climb = self.climb(at);
        let home = climb.here();
        // T2. Acquire: the node, or an in-cell ancestor, may have just been freed by another
        // thread; its writes to those units must happen before the caller's. In a root cell
        // there is no climb: the reservation completes the allocation.
        let r = try_cas(home, Ordering::Acquire, |w| {
            let w = Self::S.reserve(w, at.j).ok()?;
            Some(if done {
                Self::S.complete(w, at.j, rows)
            } else {
                w
            })
        });
        trace!("reserve {node:?} {at:?} -> {r:x?}");
        if let Err(seen) = r {
            let failed = Self::S.reserve(seen, at.j).unwrap_err();
            return Err(self.node(at.level, at.cell, failed));
        }
        for up in climb {
            // T8-T15. Acquire, as for T2: this ancestor may have been freed just now. Release:
            // an UNMARK that reads this mark's generation must also see the marks below it
            // (see `unmark`).
            let r = try_cas(up.word, Ordering::AcqRel, |w| Self::S.mark(w, up.ch).ok());
            trace!("mark {}/{} ch {} -> {r:x?}", up.level, up.cell, up.ch);
            if let Err(seen) = r {
                let failed = Self::S.mark(seen, up.ch).unwrap_err();
                return Err(self.roll_back(at, up.level, up.cell, failed));
            }
        }
        // Relaxed: a free of this block learns of it through the caller, which orders it
        // after this, and its claim is an RMW, which reads the latest state anyway.
        if rows == 0 {
            home.fetch_or(Self::S.allocated_bit(at.j), Ordering::Relaxed);
        } else {
            let _ = try_cas(home, Ordering::Relaxed, |w| {
                Some(Self::S.complete(w, at.j, rows))
            });
        }
        trace!("allocated {node:?} rows {rows}");
        Ok(())
    }

    /// T10-T12: the mark of cell `cell` at `level` failed on its node `failed`, occupied; undoes
    /// the marks below it and releases the node at `at`. The node that made the allocation fail.
    #[cold]
    #[inline(never)]
    fn roll_back(&self, at: Place, level: usize, cell: usize, failed: u32) -> Node {
        let now = self.cell(at.level, at.cell).fetch_or(0, Ordering::Relaxed);
        self.release(at, now, level + 1);
        // Units a search may have passed over while this held them: a refusal's confirmation
        // that reads this count sees the release (`SeqCst`, as a free's count; `alloc_once`),
        // and the memo is told.
        self.rollbacks.fetch_add(1, Ordering::SeqCst);
        self.refusals.released();
        self.node(level, cell, failed)
    }

    /// Tries `node` if it looks free (for `rows`, see [`Forest::try_alloc`]); otherwise, or
    /// on failure, the next position worth trying at its order (past the sub-tree of the node
    /// that made it fail; Alg. 2, A13-A14).
    #[inline(always)]
    fn attempt(&self, node: Node, rows: u32) -> Result<(), usize> {
        let at = self.place(node);
        let w = self.cell(at.level, at.cell).load(Ordering::Relaxed);
        let failed = if Self::S.is_free(w, at.j) {
            match self.try_alloc(node, rows) {
                Ok(()) => return Ok(()),
                Err(failed) => failed,
            }
        } else {
            node
        };
        Err((failed.pos + 1) << (failed.order - node.order))
    }

    /// Alg. 2, A6-A14: scans the positions of `order` from `start`, wrapping around. The
    /// nodes that look taken are passed cell by cell ([`Forest::pass_taken`]); each that
    /// looks free is tried ([`Forest::attempt`]).
    fn scan(&self, order: u32, start: usize) -> Option<usize> {
        let len = self.span >> order;
        for (from, to) in [(start, len), (0, start)] {
            let mut pos = from;
            loop {
                pos = match (self.max_order - order) % Self::LEVELS {
                    0 => self.pass_taken::<0>(order, pos, to),
                    1 => self.pass_taken::<1>(order, pos, to),
                    2 => self.pass_taken::<2>(order, pos, to),
                    _ => self.pass_taken::<3>(order, pos, to),
                };
                if pos == to {
                    break;
                }
                match self.attempt(Node { order, pos }, 0) {
                    Ok(()) => return Some(pos),
                    Err(next) => pos = next,
                }
            }
        }
        None
    }

    /// The first position in `from..to` of `order` (whose nodes are in row `ROW` of their
    /// cells) whose node looks free, or `to`: the positions `attempt` would pass, each read
    /// as `attempt` reads it (one relaxed load of its cell; a try confirms by its CAS), the
    /// cells eight at a time, so that a level of taken nodes costs a load and a mask test
    /// per cell and no taken branch.
    #[inline(always)]
    fn pass_taken<const ROW: u32>(&self, order: u32, from: usize, to: usize) -> usize {
        if from >= to {
            return to;
        }
        let level = self.place(Node { order, pos: from }).level;
        let first = from >> ROW;
        let base = self.level_start[level] + first;
        let cells = &self.cells[base..=base + ((to - 1) >> ROW) - first];
        // Bit k: node k of the row looks free.
        let looks = |cell: &AtomicU64| {
            let w = cell.load(Ordering::Relaxed);
            (0..1 << ROW).fold(0u32, |l, k| {
                l | u32::from(Self::S.is_free(w, (1 << ROW) | k)) << k
            })
        };
        let at = |i: usize, l: u32| ((first + i) << ROW | l.trailing_zeros() as usize).min(to);
        let find = |i: usize, cells: &[AtomicU64]| {
            (i..)
                .zip(cells)
                .find_map(|(i, c)| Some(looks(c)).filter(|&l| l != 0).map(|l| at(i, l)))
        };
        // The nodes of the first cell before `from` are not the scan's.
        let head = looks(&cells[0]) & (!0 << (from & ((1 << ROW) - 1)));
        if head != 0 {
            return at(0, head);
        }
        let mut i = 1;
        for eight in cells[1..].chunks_exact(8) {
            if eight.iter().any(|c| looks(c) != 0) {
                if let Some(pos) = find(i, eight) {
                    return pos;
                }
            }
            i += 8;
        }
        find(i, &cells[i..]).unwrap_or(to)
    }

    /// F4: counts a completed free of `units` units (the block that starts with `node`)
    /// and hints `node` to the core's next allocation of its order; then tells the refusal
    /// memo what the free may have made findable ([`Forest::covers`]).
    pub(super) fn count_free(&self, units: usize, node: Node, core: usize) {
        let slot = self.cores.slot(core);
        slot.freed(units);
        slot.set_hint(node.order, node.pos);
        self.refusals
            .freed_if(|order| self.covers(units, node, order));
    }

    /// Whether, after the free of `units` units from `first` on (all its writes done), a
    /// block of `order` may be free where they lie, for the refusal memo (`refusal.rs`,
    /// "Frees that cover"): the freed block is that large, or the node of `order` above it
    /// looks free now, as a scan reads it ([`Forest::attempt`]). A search refuses only after
    /// a scan during which no free completed, so the free it missed is the one that made the
    /// block free, which reads its own writes here.
    fn covers(&self, units: usize, first: Node, order: u32) -> bool {
        let freed = units.trailing_zeros();
        if order <= freed {
            return true;
        }
        let at = self.place(Node::at(first.pos << first.order, order));
        Self::S.is_free(self.cell(at.level, at.cell).load(Ordering::Relaxed), at.j)
    }

    /// The cell states from the first root cell on, for failure reports.
    #[cfg(all(test, loom))]
    pub fn dump(&self) -> Vec<super::cell::State> {
        self.cells[Self::LINE..]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// The position an allocation of `order` by `core` (whose slot is `slot`) tries first: the
    /// core's hint, or, for an order without one, a position scattered by core.
    #[inline]
    fn start(&self, slot: &Slot, order: u32, core: usize) -> usize {
        let start = slot
            .hint(order)
            .unwrap_or(core.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize));
        // Hints are always in range, so the division is off the common path.
        crate::core_slot(start, self.span >> order)
    }

    /// Counts an allocation of `units` units that ended at position `pos` of `order`, and
    /// hints the next position of that order.
    #[inline]
    fn count_alloc(&self, slot: &Slot, units: usize, order: u32, pos: usize) {
        slot.allocated(units);
        let len = self.span >> order;
        slot.set_hint(order, if pos + 1 == len { 0 } else { pos + 1 });
    }

    /// How many rows up a bulk operation of `order` may group blocks: the order's row in its
    /// cell, so that a group's node and its blocks share the cell and one compare-and-swap
    /// turns one into the other; none above `max_order`.
    #[inline]
    fn group_rows(&self, order: u32) -> u32 {
        self.max_order
            .checked_sub(order)
            .map_or(0, |up| up % Self::LEVELS)
    }

    /// A bulk allocation's try for `2^rows` blocks of `order`: the node `rows` rows above
    /// the position an `alloc` of `order` would try first (the core's hint), if it is free.
    /// Only there, so that groups go where single allocations would (frees hint their
    /// holes: a group would otherwise break up free blocks while those holes stay empty); the
    /// group's first unit.
    fn alloc_group(&self, order: u32, rows: u32, core: usize) -> Option<usize> {
        let slot = self.cores.slot(core);
        let top = order + rows;
        let pos = self.start(slot, order, core) >> rows;
        self.attempt(Node { order: top, pos }, rows).ok()?;
        self.count_alloc(slot, 1 << top, order, ((pos + 1) << rows) - 1);
        Some(pos << top)
    }

    /// Frees `group` (blocks of `order`) as one free of the node `rows` rows above them, if
    /// they are exactly that node's blocks and all allocated; whether it did.
    fn free_group(&self, group: &[usize], order: u32, core: usize) -> bool {
        let rows = group.len().ilog2();
        let top = order + rows;
        let base = group[0] & !((1 << top) - 1);
        let mut seen = 0u32;
        for &index in group {
            let k = index.wrapping_sub(base);
            if k >> top != 0 || k & ((1 << order) - 1) != 0 || index >= self.units {
                return false;
            }
            seen |= 1 << (k >> order);
        }
        let node = Node::at(base, top);
        let at = self.place(node);
        if seen.count_ones() as usize != group.len()
            || !self.free_node(at, |w| Self::S.join(w, at.j, rows))
        {
            return false;
        }
        trace!("freed group {node:?} rows {rows}");
        // The hint single frees of the blocks would leave, for the next group or block.
        self.count_free(1 << top, Node::at(base, order), core);
        true
    }

    /// The counts that change when units become findable: releases (completed frees) and
    /// rollbacks, each read with acquire after the writes they follow.
    #[inline]
    fn stamp(&self) -> Stamp {
        (
            self.cores.releases(),
            self.rollbacks.load(Ordering::Acquire),
        )
    }

    /// NBALLOC through the refusal memo, its confirmation of a scan's refusal by
    /// `still(stamp before the scan, stamp after the memo's fence)` ([`Forest::alloc_once`]):
    /// `alloc` passes equality; loom models pass weaker checks, which must fail.
    #[inline(always)]
    pub(super) fn alloc_with(
        &self,
        order: u32,
        core: usize,
        still: impl Fn(Stamp, Stamp) -> bool,
    ) -> Result<usize, Error> {
        let mut refused = None;
        self.refusals.alloc(
            order,
            #[inline(always)]
            move || (self.alloc_once(order, core, &mut refused, &still), None),
        )
    }

    /// One NBALLOC (Alg. 2) of a checked `order`, for [`Refusals::alloc`]: a
    /// failure by the count of free units is [`Failure::Counted`] (a free anywhere ends it),
    /// one after a scan [`Failure::Searched`], with the [`Forest::stamp`] read before that
    /// scan in `refused`.
    ///
    /// The memo's confirmation (the second call, after its fence) of such a refusal does not
    /// scan again if the stamp is still the same: every free and rollback that completed
    /// before the fence without seeing the memo's pending word is in the stamp read after the
    /// fence (the cycle in the module docs of `refusal.rs`), so it was in the one read before
    /// the scan, whose acquire made its writes visible to the scan. So the scan saw all that
    /// a scan after the fence would have to see (`refusal.rs`, "Searched").
    #[inline(always)]
    fn alloc_once(
        &self,
        order: u32,
        core: usize,
        refused: &mut Option<Stamp>,
        still: impl Fn(Stamp, Stamp) -> bool,
    ) -> Result<usize, Failure> {
        if let Some(stamp) = refused.take() {
            if still(stamp, self.stamp()) {
                return Err(Failure::Searched);
            }
        }
        let slot = self.cores.slot(core);
        let start = self.start(slot, order, core);
        let pos = match self.attempt(Node { order, pos: start }, 0) {
            Ok(()) => start,
            Err(_) => loop {
                // The full-heap fast path: too few free units means no block, without a scan.
                if self.free_units() < 1 << order {
                    return Err(Failure::Counted);
                }
                let stamp = self.stamp();
                if let Some(pos) = self.scan(order, start) {
                    break pos;
                }
                // Rollbacks do not repeat the scan: its own would make it repeat forever.
                if self.cores.releases() == stamp.0 {
                    *refused = Some(stamp);
                    return Err(Failure::Searched);
                }
            },
        };
        self.count_alloc(slot, 1 << order, order, pos);
        Ok(pos << order)
    }

    /// Whether the block (`index`, `order`) is allocated.
    fn is_allocated(&self, index: usize, order: u32) -> bool {
        let at = self.place(Node::at(index, order));
        Self::S.is_allocated(self.cell(at.level, at.cell).load(Ordering::Relaxed), at.j)
    }

    /// Frees runs of `blocks` that are exactly the `2^r` blocks under one node of their cell
    /// (in any order within the run) as one free of that node, after one compare-and-swap
    /// that checks and clears them all ([`Shape::join`]); any other block, and a run with a
    /// block that is not allocated, one by one, as `free` would, which gives the exact
    /// answer and position of a bad one.
    fn free_unreserved_bulk(
        &self,
        blocks: &[usize],
        order: u32,
        core: usize,
    ) -> Result<(), (usize, Error)> {
        let rows = self.group_rows(order);
        let mut i = 0;
        while i < blocks.len() {
            let most = rows.min((blocks.len() - i).ilog2());
            let group = (1..=most)
                .rev()
                .map(|r| &blocks[i..i + (1 << r)])
                .find(|group| self.free_group(group, order, core));
            i += match group {
                Some(group) => group.len(),
                None => {
                    self.free_unreserved(blocks[i], order, core)
                        .map_err(|e| (i, e))?;
                    1
                }
            };
        }
        Ok(())
    }

    /// Alg. 4 (NBFREE): claims the allocated node (the one check that makes double frees
    /// harmless), then FREENODE up to the roots and counts the release (F4).
    fn free_unreserved(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.units)?;
        let node = Node::at(index, order);
        let at = self.place(node);
        if !self.free_node(at, |w| Self::S.claim(w, at.j)) {
            // Why: a block of another order allocated at `index`, or none (not this order,
            // whose claim just failed).
            let other = (0..=self.max_order).find(|&o| {
                o != order && index.is_multiple_of(1 << o) && self.is_allocated(index, o)
            });
            return crate::check_live(other, order);
        }
        self.count_free(1 << node.order, node, core);
        Ok(())
    }
}

impl<K: Kind> BlockAlloc for Forest<K> {
    /// Alg. 2 (NBALLOC): the core's hint first (3.6.1), then, unless the free-unit count
    /// already rules it out, a scan of the order's level from the hint, repeated while frees
    /// complete during the scan (A15-A16).
    ///
    /// Through the refusal memo (`refusal.rs`): a refusal after a scan during which no free
    /// completed is remembered until a free that may have made a block of the order free
    /// there (`Forest::covers`), a refusal by the count of free units until any free,
    /// either until a rolled-back allocation.
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        // Not `check_order`: its `?` costs this fast path an instruction (callgrind).
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        // Inlined here, as the memo's own load is: one call for the whole allocation.
        self.alloc_with(order, core, |before, after| before == after)
    }

    /// Groups of `2^r` blocks under one node of their cell, each group taken by one TRYALLOC
    /// of that node (`Forest::try_alloc`): one reservation and one climb for the group.
    /// `r` is at most the order's row in its cell (with 4-level cells and `max_order` 10:
    /// 4 blocks of order 0, 8 of order 3; the 1-level tree has no groups). A group is taken
    /// only where `alloc` would look first, at the core's hint, if the group is free there
    /// (one load when it is not); otherwise the next block comes from `alloc`.
    fn alloc_bulk(&self, order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error> {
        crate::check_order(order, self.max_order)?;
        let rows = self.group_rows(order);
        let mut n = 0;
        while n < out.len() {
            let r = rows.min((out.len() - n).ilog2());
            if r > 0 {
                if let Some(first) = self.alloc_group(order, r, core) {
                    for (k, slot) in out[n..n + (1 << r)].iter_mut().enumerate() {
                        *slot = first + (k << order);
                    }
                    n += 1 << r;
                    continue;
                }
            }
            match self.alloc(order, core) {
                Ok(index) => out[n] = index,
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
            n += 1;
        }
        Ok(n)
    }

    fn free_bulk(&self, blocks: &[usize], order: u32, core: usize) -> Result<(), (usize, Error)> {
        self.reserved.free_bulk(blocks, order, |blocks| {
            self.free_unreserved_bulk(blocks, order, core)
        })
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.reserved.check_free(index, order, false)?;
        self.free_unreserved(index, order, core)
    }

    /// The same as `free`, which waits for no other thread (but for a range operation's
    /// update of the reservation, next to reserved units: [`Error::WouldBlock`]).
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.reserved.check_free(index, order, true)?;
        self.free_unreserved(index, order, core)
    }

    ranges_recorded!();

    fn free_units(&self) -> usize {
        self.units.wrapping_add(self.cores.net_freed())
    }

    fn total_units(&self) -> usize {
        self.units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    /// The same as `alloc`: NBBS never waits for another thread. Its scan is repeated only
    /// when frees completed meanwhile (Alg. 2, A15), each of them progress of another thread.
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.alloc(order, core)
    }

    /// The same as `block_of`, which reads the tree without waiting.
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.block_of(index)
    }

    /// TRYALLOC (Alg. 3) on the node of the block: it succeeds only if neither the node, nor
    /// a node below it, nor an ancestor is occupied.
    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.units)?;
        self.try_alloc(Node::at(index, order), 0)
            .map_err(|_| Error::Occupied)?;
        self.cores.slot(core).allocated(1 << order);
        Ok(())
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        crate::live_block_at(index, (self.units, self.max_order), |start, order| {
            self.is_allocated(start, order)
        })
    }

    /// A descent from the root over `from` towards it, which passes a free sub-tree in one
    /// read of its cell and, after one, goes on from the largest node that starts where it
    /// ends (the nodes above that one were passed on the way down, partly taken).
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        let mut at = from;
        let mut order = self.max_order;
        while at < self.units {
            let start = at & !((1 << order) - 1);
            let node = self.place(Node::at(start, order));
            let w = self.cell(node.level, node.cell).load(Ordering::Acquire);
            if Self::S.is_allocated(w, node.j) {
                return Ok(Some((start, order)));
            }
            if order == 0 || w & Self::S.node_bits(node.j) == 0 {
                at = start + (1 << order);
                order = self.max_order.min(at.trailing_zeros());
            } else {
                order -= 1;
            }
        }
        Ok(None)
    }
}

impl<K: Kind> crate::magazine::Sealed for Forest<K> {}

impl<K: Kind> crate::magazine::Backend for Forest<K> {
    /// Orders below the top row of their cell: several blocks under one node.
    fn alloc_bulk_groups(&self, order: u32) -> bool {
        self.group_rows(order) > 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
