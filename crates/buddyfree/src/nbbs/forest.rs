//! The NBBS algorithms (Alg. 2-5) over a forest of cells, written once for any cell height
//! ([`Kind`]: the 1-level tree of [`Nbbs`](super::Nbbs), the 4-level bunches of
//! [`Nbbs4`](super::Nbbs4)). The module docs of [`nbbs`](super) give the protocol and what
//! it adds to the paper; this file is where each step of it lives.
//!
//! # Structure
//!
//! ```text
//!  Forest<K>
//!  ├── cells:       [K::Atomic]  every cell level in turn, roots first, each level one cache
//!  │                             line off a power-of-two boundary; a cell packs the nodes of
//!  │                             K levels (state bits per node, the guard, a generation)
//!  ├── level_start: [usize]      first cell of each cell level
//!  ├── cores:       Cores        per core: free-slot hints per order, free-unit counters
//!  └── refusals:    Refusals     refusals remembered until a free or rollback (refusal.rs)
//! ```
//!
//! A node (`order`, `pos`) is the block of `2^order` units at `pos << order`; its [`Place`]
//! is its cell level, its cell and its number inside the cell ([`Forest`] draws the
//! arithmetic). The bit layout of a cell, and every change to it as a pure function from the
//! old word to the new one, is [`Shape`]'s (module `cell`); this file chooses which cell to
//! change and in what order.
//!
//! # Invariants
//!
//! - A node is occupied exactly while it or a node below it is allocated or being
//!   allocated, or a free below it has not finished its UNMARK; an allocated node also
//!   carries `ALLOCATED`, set once its allocation completes and cleared by the claim that
//!   starts its free, so a bad or double free finds no claim and changes nothing.
//! - An allocation reserves its node (T2), then marks each ancestor cell up to the roots
//!   (T8-T15); a mark that finds an occupied ancestor rolls back every mark below it
//!   ([`Forest::roll_back`]) and releases like a free. A free claims its node, marks its
//!   ancestors coalescing, clears the node and UNMARKs upward ([`Forest::free_node`]),
//!   stopping under a link that is occupied and not coalescing, which its holder clears.
//! - UNMARK clears a link only if the cell's generation is the one it read when it marked
//!   the link coalescing ([`Seen`]), and, in guarded cells, only while the guard is valid;
//!   otherwise it re-checks the child. A refusal of any CAS step is confirmed by an RMW,
//!   never by a plain read.
//! - The units past `units` in the last tree are occupied at construction and never freed.
//!
//! # Ordering, and no locks
//!
//! Nothing here waits: every change is one CAS or RMW on one cell, and a climb changes one
//! cell at a time, from the node's cell up to the roots (allocations, coalescing marks) or
//! back down (rollbacks). Reservations and marks acquire (the units may have just been freed
//! by another thread); the clear that ends a free releases (F20), so the next owner's writes
//! follow the last owner's. The comments at each step give the paper's line.

#[cfg(all(test, loom))]
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

use super::cell::{Shape, State};
use super::cores::{Cores, Slot};
use super::word::Word;
use crate::range;
use crate::refusal::{Failure, Refusals};
use crate::reserved::Reserved;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;
#[cfg(feature = "alloc")]
use crate::table::build_on_heap;
use crate::table::{Metadata, Part, Plan, Table};
use crate::{check_block, BlockAlloc, Config, ConfigRule, Error};

/// Records protocol steps under loom tests, printed when a check fails.
#[cfg(all(test, loom))]
pub static TRACE: std::sync::Mutex<Vec<std::string::String>> = std::sync::Mutex::new(Vec::new());

macro_rules! trace {
    ($($arg:tt)*) => {
        #[cfg(all(test, loom))]
        TRACE.lock().unwrap().push(std::format!("{:?} {}", loom::thread::current().id(), std::format!($($arg)*)));
    };
}

/// A cell height: the word it lives in and its masks.
pub trait Kind: Send + Sync + 'static {
    /// The atomic word of one cell.
    type Atomic: Word;
    /// The layout of its cells.
    const SHAPE: Shape;
    /// Cells per 64-byte cache line.
    const LINE: usize;
}

/// The paper's 1-level tree: one node per `AtomicU64` (5 state bits, 59 generation bits).
pub struct OneLevel;
impl Kind for OneLevel {
    type Atomic = AtomicU64;
    const SHAPE: Shape = Shape::new(1, Shape::state_bits(1), 59);
    const LINE: usize = 8;
}

/// The paper's 4-level bunches: 15 nodes per `AtomicU64` (47 state bits, the guard's
/// `INVALID` bit and 5-bit count, an 11-bit generation).
pub struct FourLevel;
impl Kind for FourLevel {
    type Atomic = AtomicU64;
    const SHAPE: Shape = Shape::guarded(4, 5, 11);
    const LINE: usize = 8;
}

/// Cells of `LEVELS` levels in an `AtomicU64` with a generation of only `GEN` bits, which
/// wraps after `2^GEN` marks: for tests showing that they catch a generation too narrow.
#[cfg(test)]
pub struct Narrow<const LEVELS: u32, const GEN: u32>;
#[cfg(test)]
impl<const LEVELS: u32, const GEN: u32> Kind for Narrow<LEVELS, GEN> {
    type Atomic = AtomicU64;
    const SHAPE: Shape = Shape::new(LEVELS, Shape::state_bits(LEVELS), GEN);
    const LINE: usize = 8;
}

/// Guarded cells of `LEVELS` levels with a count of `COUNT` bits and a generation of only
/// `GEN` bits: for tests showing that the guard makes a wrap harmless.
#[cfg(test)]
pub struct Guarded<const LEVELS: u32, const COUNT: u32, const GEN: u32>;
#[cfg(test)]
impl<const LEVELS: u32, const COUNT: u32, const GEN: u32> Kind for Guarded<LEVELS, COUNT, GEN> {
    type Atomic = AtomicU64;
    const SHAPE: Shape = Shape::guarded(LEVELS, COUNT, GEN);
    const LINE: usize = 8;
}

/// The generations a free read at the cells where it set its coalescing bits (Alg. 4, F9),
/// by cell level: its UNMARK trusts a coalescing bit only while the generation is unchanged,
/// and re-checks the child where none is known. In guarded cells a generation recorded here
/// is also a registration, which the free must end (by its UNMARK's CAS, or by leaving)
/// before it returns. An entry for every cell level a forest can have (`max_order` is below
/// 64, so at most 64 of them), left uninitialised but for the entries `known` names, so that
/// setting it up writes nothing before the free's next locked instruction (which would wait
/// for those stores).
struct Seen {
    /// Which entries of `gens` hold a generation: exactly those `set` wrote.
    known: u64,
    /// By cell level.
    gens: [MaybeUninit<u64>; 64],
}

impl Seen {
    #[inline]
    fn new() -> Self {
        Seen {
            known: 0,
            gens: [const { MaybeUninit::uninit() }; 64],
        }
    }

    #[inline]
    fn set(&mut self, level: usize, gen: u64) {
        self.gens[level] = MaybeUninit::new(gen);
        self.known |= 1 << level;
    }

    /// The generation recorded at `level`, forgotten.
    #[inline]
    fn take(&mut self, level: usize) -> Option<u64> {
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
    fn any(&self) -> bool {
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

/// Where the tables of a forest lie in its metadata ([`Forest::plan`]).
pub(crate) struct Parts<K: Kind> {
    cells: Part<K::Atomic>,
    level_start: Part<usize>,
    slots: Part<CachePadded<Slot>>,
}

/// A block of `2^order` units at `pos * 2^order`: one node of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Node {
    order: u32,
    pos: usize,
}

/// A free stopped between its clear and its UNMARK ([`Forest::free_until_unmark`]).
#[cfg(test)]
pub struct Stalled {
    node: Node,
    at: Place,
    now: State,
    seen: Seen,
}

/// Where a node lives: cell level (0 = the cells holding the roots), cell within the level,
/// node number inside the cell.
#[derive(Clone, Copy, Debug)]
struct Place {
    level: usize,
    cell: usize,
    j: u32,
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
struct Climb<'a, K: Kind> {
    cells: &'a [K::Atomic],
    starts: &'a [usize],
    level: usize,
    cell: usize,
}

/// A step of a [`Climb`]: cell `cell` of cell level `level`, its word, and which of its
/// children the climb came from.
struct Up<'a, A> {
    level: usize,
    cell: usize,
    ch: u32,
    word: &'a A,
}

impl<K: Kind> Clone for Climb<'_, K> {
    fn clone(&self) -> Self {
        Climb { ..*self }
    }
}

impl<'a, K: Kind> Climb<'a, K> {
    /// The word of the cell the climb is at: its start, before the first step.
    #[inline(always)]
    fn here(&self) -> &'a K::Atomic {
        // SAFETY: the invariant of `Climb`: both indices are in bounds.
        unsafe {
            self.cells
                .get_unchecked(*self.starts.get_unchecked(self.level) + self.cell)
        }
    }
}

impl<'a, K: Kind> Iterator for Climb<'a, K> {
    type Item = Up<'a, K::Atomic>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.level == 0 {
            return None;
        }
        let (cell, ch) = Forest::<K>::parent(self.cell);
        self.level -= 1;
        self.cell = cell;
        // Keeps the invariant (see `Climb`).
        let word = self.here();
        Some(Up {
            level: self.level,
            cell,
            ch,
            word,
        })
    }
}

/// A forest of `roots` trees of height `max_order`, cut into cells of `K` levels from the
/// roots down (the deepest cells may reach below order 0; those nodes are never used).
///
/// ```text
///  cells: [ level 0: roots cells | line | level 1: roots·2^K cells | line | level 2: ... ]
///         (line: one cache line of unused cells)
///  node (order, pos): depth d = max_order - order, cell level d / K, row r = d % K,
///                     cell pos >> r, in-cell number 2^r + pos mod 2^r
/// ```
pub struct Forest<K: Kind> {
    cells: Table<K::Atomic>,
    /// First cell of each cell level.
    level_start: Table<usize>,
    units: usize,
    /// `roots << max_order`: the units the trees cover, `units` rounded up.
    span: usize,
    max_order: u32,
    cores: Cores,
    /// Refusals remembered until the next free or rollback (`refusal.rs`).
    refusals: Refusals,
    /// Units of the boot reservation, which frees refuse (`reserved.rs`).
    reserved: Reserved,
    kind: PhantomData<K>,
}

impl<K: Kind> Forest<K> {
    const S: Shape = {
        assert!(
            K::SHAPE.width() <= K::Atomic::BITS,
            "the cell does not fit its word"
        );
        K::SHAPE
    };
    const LEVELS: u32 = K::SHAPE.levels;
    /// The first root cell: a cache line of unused cells comes before it, as one comes after
    /// each level ([`Forest::level_cells`]), so that nothing next to the table (its
    /// neighbours in the plan, or whatever the system allocator puts there) shares a line
    /// with a cell in use. A read-mostly neighbour such as `level_start` would otherwise be
    /// invalidated by every update of the first roots.
    const FIRST_CELL: usize = K::LINE;

    /// A forest managing `config.units` units, its tables on the heap.
    #[cfg(feature = "alloc")]
    pub fn new(config: Config) -> Result<Self, Error> {
        build_on_heap(Self::plan(config), |parts, meta| {
            Self::build(config, parts, meta)
        })
    }

    /// The metadata of a forest of `config`: its cells, the first cell of each cell level,
    /// and the per-core slots. A `const fn` (for a `const` `metadata_layout`): `match` for `?`.
    pub(crate) const fn plan(config: Config) -> Result<(Plan, Parts<K>), Error> {
        const OVERFLOW: Error = Error::InvalidConfig(ConfigRule::MetadataOverflow);
        if let Err(e) = config.validate() {
            return Err(e);
        }
        let roots = config.units.div_ceil(1 << config.max_order);
        if roots.checked_mul(1 << config.max_order).is_none() {
            return Err(OVERFLOW);
        }
        let levels = (config.max_order / Self::LEVELS) as usize + 1;
        let mut total = Self::FIRST_CELL;
        let mut level = 0;
        while level < levels {
            let Some(cells) = Self::level_cells(roots, level) else {
                return Err(OVERFLOW);
            };
            let Some(sum) = total.checked_add(cells) else {
                return Err(OVERFLOW);
            };
            total = sum;
            level += 1;
        }
        let mut plan = Plan::new();
        let cells = match plan.add(total) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        let level_start = match plan.add(levels) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        let slots = match Cores::plan(&mut plan, config.cores) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        let parts = Parts {
            cells,
            level_start,
            slots,
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
            Some(cells) => cells.checked_add(K::LINE),
            None => None,
        }
    }

    /// A forest managing `config.units` units, its tables made in `meta` at the places
    /// `parts` (from [`Forest::plan`] of the same `config`) gives. When `units` is not a
    /// multiple of `2^max_order`, the last tree is cut short: its units past the end are
    /// occupied once, at construction, by aligned blocks no caller can free (they are out of
    /// range).
    pub(crate) fn build(config: Config, parts: Parts<K>, meta: &Metadata) -> Result<Self, Error> {
        let max_order = config.max_order;
        let roots = config.units.div_ceil(1 << max_order);
        // `plan` checked that neither this nor the level sizes below overflow.
        let span = roots << max_order;
        let mut next = Self::FIRST_CELL;
        let level_start = meta.table(parts.level_start, |level| {
            let start = next;
            next += Self::level_cells(roots, level).unwrap_or(0);
            start
        })?;
        let cores = config.cores;
        let forest = Forest {
            cells: meta.table(parts.cells, |_| K::Atomic::new(0))?,
            level_start,
            units: config.units,
            span,
            max_order,
            cores: Cores::new(meta, parts.slots, |core, order| {
                let len = span >> order.min(max_order);
                (len as u128 * core as u128 / cores as u128) as usize
            })?,
            refusals: Refusals::new(),
            reserved: Reserved::new(config.units, config.max_order),
            kind: PhantomData,
        };
        let mut pos = config.units;
        while pos < span {
            let order = (0..=pos.trailing_zeros().min(max_order))
                .rev()
                .find(|&o| span - pos >= 1 << o)
                .unwrap_or(0);
            // Cannot fail on a fresh forest; an error here would be a broken size computation.
            forest
                .try_alloc(
                    Node {
                        order,
                        pos: pos >> order,
                    },
                    0,
                )
                .map_err(|_| ConfigRule::MetadataOverflow)?;
            pos += 1 << order;
        }
        Ok(forest)
    }

    #[inline]
    fn place(&self, node: Node) -> Place {
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
    fn cell(&self, level: usize, cell: usize) -> &K::Atomic {
        &self.cells[self.level_start[level] + cell]
    }

    /// The climb from the cell at `at` up to its root cell.
    ///
    /// # Panics
    /// If the cell is not in the table, as [`Forest::cell`] (a node out of range: never, for
    /// a checked block).
    #[inline(always)]
    fn climb(&self, at: Place) -> Climb<'_, K> {
        assert!(
            self.level_start[at.level] + at.cell < self.cells.len(),
            "cell {at:?} out of the table"
        );
        Climb {
            cells: &self.cells,
            starts: &self.level_start,
            level: at.level,
            cell: at.cell,
        }
    }

    /// The parent cell of `cell` and which of its children `cell` is.
    #[inline]
    fn parent(cell: usize) -> (usize, u32) {
        (
            cell >> Self::LEVELS,
            (cell & (Self::S.children() as usize - 1)) as u32,
        )
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
        let r = home.try_update(Ordering::Acquire, |w| {
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
            let r = up
                .word
                .try_update(Ordering::AcqRel, |w| Self::S.mark(w, up.ch).ok());
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
            let _ = home.try_update(Ordering::Relaxed, |w| Some(Self::S.complete(w, at.j, rows)));
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
        // Units a search may have passed over while this held them.
        self.refusals.released();
        self.node(level, cell, failed)
    }

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
    fn release(&self, at: Place, now: State, marked: usize) {
        let mut seen = Seen::new();
        let climb = self.climb(at);
        self.mark_coalescing(climb.clone(), at.j, now, marked, &mut seen);
        let now = self.clear(at);
        self.unmark(climb, now, &mut seen);
    }

    /// F6-F19: marks the ancestors coalescing along `climb`, from the cell of the held node
    /// `j` (whose state is `now`), as far as the merge may reach, recording the generation of
    /// each cell marked. Above cell level `marked` (see `release`) only links that are set
    /// and live.
    #[inline(always)]
    fn mark_coalescing(
        &self,
        climb: Climb<'_, K>,
        j: u32,
        now: State,
        marked: usize,
        seen: &mut Seen,
    ) {
        if !Self::S.keeps_climbing(now, Self::S.node_bits(j)) {
            return;
        }
        for up in climb {
            let own = up.level >= marked;
            let Some(old) = Self::coalesce(up.word, up.level, up.ch, own, seen) else {
                return;
            };
            if !Self::S.keeps_climbing(old, Self::S.child_bits(up.ch)) {
                return;
            }
        }
    }

    /// F9 at one cell: sets the coalescing bit of child `ch` of `here` (at `level`) and, where
    /// the cell is guarded, registers (module docs); records the generation read. `own`: the link carries the caller's own mark; otherwise (a rollback
    /// above its marks, see `release`) only a link that is set and live, and `None` if it is
    /// not. The cell's state after.
    #[inline(always)]
    fn coalesce(
        here: &K::Atomic,
        level: usize,
        ch: u32,
        own: bool,
        seen: &mut Seen,
    ) -> Option<State> {
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
                here.try_update(Ordering::Acquire, |w| Some(coalesce(w)))
                    .unwrap_or_else(|w| w)
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
            here.try_update(Ordering::AcqRel, |w| {
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
    fn clear(&self, at: Place) -> State {
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
    fn unmark(&self, climb: Climb<'_, K>, now: State, seen: &mut Seen) {
        // `Some(state)` while climbing: the state of the cell below after our last step.
        let mut below = Self::S.looks_free(now).then_some(now);
        for up in climb {
            let reg = seen.take(up.level);
            below = if below.is_some() {
                self.unlink(&up, reg)
            } else if !Self::S.is_guarded() || !(reg.is_some() || seen.any()) {
                return;
            } else if reg.is_some() {
                // Stopped below: leave the cells where the coalescing climb registered. The
                // last to leave an `INVALID` cell sweeps it, and may climb on from there.
                self.leave(up.level, up.cell)
            } else {
                None
            }
            .filter(|&w| Self::S.looks_free(w));
        }
    }

    /// One level of UNMARK (U8-U11): clears the link to child `up.ch` of the cell at `up` if
    /// the child is free and no mark came since generation `reg` (`None`: not read, or not
    /// registered). Returns the cell's state after the step, or `None` where the UNMARK
    /// stops here (the child is occupied, or the cell is left to its sweeper).
    #[inline(always)]
    fn unlink(&self, up: &Up<'_, K::Atomic>, mut reg: Option<u64>) -> Option<State> {
        let (here, level, cell, ch) = (up.word, up.level, up.cell, up.ch);
        loop {
            let mut step = Step::GaveUp;
            // AcqRel: acquire the frees merged below (the buddy's release), release them,
            // with ours, to whoever allocates this larger block; acquire the marks whose
            // generation a refusal reads.
            let r = here.try_update(Ordering::AcqRel, |w| {
                let (new, s) = Self::unmark_step(w, ch, reg);
                step = s;
                new
            });
            let w = r.unwrap_or_else(|w| w);
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
                    let c = self
                        .cell(level + 1, cell << Self::LEVELS | ch as usize)
                        .try_update(Ordering::Relaxed, |_| None)
                        .unwrap_or_else(|c| c);
                    trace!("recheck child -> {c:x}");
                    if !Self::S.looks_free(c) {
                        return if Self::S.is_guarded() {
                            self.leave(level, cell)
                        } else {
                            None
                        };
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
        let leave = |w, otherwise| {
            let (new, sweeps) = s.leave(w);
            (Some(new), if sweeps { Step::Sweep } else { otherwise })
        };
        if !s.coalescing(w, ch) {
            return match reg {
                Some(_) if s.is_guarded() => leave(w, Step::Consumed),
                _ => (None, Step::Consumed),
            };
        }
        if s.invalid(w) {
            return match reg {
                Some(_) => leave(w, Step::GaveUp),
                None => (None, Step::GaveUp),
            };
        }
        if let Some(new) = s.unmark(w, ch, reg) {
            return (Some(new), Step::Unlinked);
        }
        if reg.is_some() || !s.is_guarded() {
            return (None, Step::Recheck);
        }
        match s.register(w) {
            (new, true) => (Some(new), Step::Recheck),
            (new, false) => (Some(new), Step::GaveUp),
        }
    }

    /// Ends a registration at `cell` of `level` without unlinking; the last to leave an
    /// `INVALID` cell sweeps it. The cell's state after the sweep, or `None`.
    fn leave(&self, level: usize, cell: usize) -> Option<State> {
        let mut sweeps = false;
        // AcqRel: a sweeper's reading, as `unlink`'s.
        let w = self
            .cell(level, cell)
            .try_update(Ordering::AcqRel, |w| {
                let (new, s) = Self::S.leave(w);
                sweeps = s;
                Some(new)
            })
            .unwrap_or_else(|w| w);
        trace!("leave {level}/{cell} -> sweeps {sweeps} {w:x}");
        if sweeps {
            self.sweep(level, cell, w)
        } else {
            None
        }
    }

    /// The sweep of a guarded cell whose `INVALID` bit the caller cleared, registered, its
    /// reading `w`: the UNMARKs that gave up here (module docs) left their links coalescing,
    /// so every coalescing link whose child is free is cleared, in one CAS checked as a
    /// single UNMARK's is: against the generation of the reading, and only for links still
    /// coalescing then ([`Shape::sweep`]: between the check and the CAS, another UNMARK may
    /// unlink one and an allocation take the node above it, which marks nothing here). The
    /// cell's state after, or `None` if it gave up again (to the next sweeper).
    fn sweep(&self, level: usize, cell: usize, mut w: State) -> Option<State> {
        let here = self.cell(level, cell);
        loop {
            let expect = Self::S.gen(w);
            let mut drop = 0;
            for ch in 0..Self::S.children() {
                if Self::S.coalescing(w, ch) {
                    let c = self
                        .cell(level + 1, cell << Self::LEVELS | ch as usize)
                        .try_update(Ordering::Relaxed, |_| None)
                        .unwrap_or_else(|c| c);
                    if Self::S.looks_free(c) {
                        drop |= Self::S.child_bits(ch);
                    }
                }
            }
            let mut step = Step::GaveUp;
            let r = here.try_update(Ordering::AcqRel, |w| {
                if Self::S.invalid(w) {
                    let (new, s) = Self::S.leave(w);
                    step = if s { Step::Sweep } else { Step::GaveUp };
                    Some(new)
                } else if let Some(new) = Self::S.sweep(w, expect, drop) {
                    step = Step::Unlinked;
                    Some(new)
                } else {
                    step = Step::Recheck;
                    None
                }
            });
            w = r.unwrap_or_else(|w| w);
            trace!("sweep {level}/{cell} drop {drop:x} -> {step:?} {w:x}");
            match step {
                Step::Unlinked => return Some(w),
                Step::GaveUp => return None,
                _ => {}
            }
        }
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

    /// Alg. 2, A6-A14: scans the positions of `order` from `start`, wrapping around.
    fn scan(&self, order: u32, start: usize) -> Option<usize> {
        let len = self.span >> order;
        for (from, to) in [(start, len), (0, start)] {
            let mut pos = from;
            while pos < to {
                match self.attempt(Node { order, pos }, 0) {
                    Ok(()) => return Some(pos),
                    Err(next) => pos = next,
                }
            }
        }
        None
    }

    /// Alg. 4 from the claim: once `claim` (allocated node -> held, or a group's join) takes
    /// the node at `at` on its cell, clears it and FREENODEs up to the roots; false, with
    /// nothing changed, if `claim` refuses. The claim is Relaxed (the caller's own ordering
    /// puts it after the allocation); the release that publishes the block's units is on
    /// the clear (F20). A node in a root cell has nothing to climb, so there the claim is
    /// the clear, in one CAS.
    #[inline]
    fn free_node(&self, at: Place, claim: impl Fn(State) -> Option<State>) -> bool {
        let home = self.cell(at.level, at.cell);
        if at.level == 0 {
            return home
                .try_update(Ordering::Release, |w| {
                    Some(claim(w)? & Self::S.clear_mask(at.j))
                })
                .is_ok();
        }
        match home.try_update(Ordering::Relaxed, claim) {
            Ok(now) => {
                trace!("claim {at:?} -> {now:x}");
                self.release(at, now, 0);
                true
            }
            Err(_) => false,
        }
    }

    /// F4: counts a completed free of `units` units (the block that starts with `node`)
    /// and hints `node` to the core's next allocation of its order; then tells the refusal
    /// memo what the free may have made findable ([`Forest::covers`]).
    fn count_free(&self, units: usize, node: Node, core: usize) {
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
        let at = self.place(Node {
            order,
            pos: (first.pos << first.order) >> order,
        });
        Self::S.is_free(self.cell(at.level, at.cell).load(Ordering::Relaxed), at.j)
    }

    /// Frees the allocated block (`index`, `order`), which must not lie in a root cell, up
    /// to its clear (F20), and stops there: for tests that replay races with the UNMARK.
    #[cfg(test)]
    pub fn free_until_unmark(&self, index: usize, order: u32) -> Stalled {
        let node = Node {
            order,
            pos: index >> order,
        };
        let at = self.place(node);
        assert!(at.level > 0, "a node in a root cell has no UNMARK");
        let now = self
            .cell(at.level, at.cell)
            .try_update(Ordering::Relaxed, |w| Self::S.claim(w, at.j))
            .expect("the block is allocated");
        let mut seen = Seen::new();
        self.mark_coalescing(self.climb(at), at.j, now, 0, &mut seen);
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

    /// The cell states from the first root cell on, for failure reports.
    #[cfg(all(test, loom))]
    pub fn dump(&self) -> Vec<State> {
        self.cells[Self::FIRST_CELL..]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// The position an allocation of `order` by `core` (whose slot is `slot`) tries first: the
    /// core's hint, or, for an order without one, a position scattered by core.
    #[inline]
    fn start(&self, slot: &Slot, order: u32, core: usize) -> usize {
        let len = self.span >> order;
        let start = slot
            .hint(order)
            .unwrap_or(core.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize));
        // Hints are always in range, so the division is off the common path.
        if start < len {
            start
        } else {
            start % len
        }
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
        if seen.count_ones() as usize != group.len() {
            return false;
        }
        let node = Node {
            order: top,
            pos: base >> top,
        };
        let at = self.place(node);
        if !self.free_node(at, |w| Self::S.join(w, at.j, rows)) {
            return false;
        }
        trace!("freed group {node:?} rows {rows}");
        // The hint single frees of the blocks would leave, for the next group or block.
        let first = Node {
            order,
            pos: base >> order,
        };
        self.count_free(1 << top, first, core);
        true
    }

    /// One NBALLOC (Alg. 2) of a checked `order`, for [`Refusals::alloc_sorted`]: a
    /// failure by the count of free units is [`Failure::Counted`] (a free anywhere ends it),
    /// one after a scan [`Failure::Searched`].
    #[inline(always)]
    fn alloc_once(&self, order: u32, core: usize) -> Result<usize, Failure> {
        let slot = self.cores.slot(core);
        let start = self.start(slot, order, core);
        let pos = match self.attempt(Node { order, pos: start }, 0) {
            Ok(()) => start,
            Err(_) => loop {
                // The full-heap fast path: too few free units means no block, without a scan.
                if self.free_units() < 1 << order {
                    return Err(Failure::Counted);
                }
                let releases = self.cores.releases();
                if let Some(pos) = self.scan(order, start) {
                    break pos;
                }
                if self.cores.releases() == releases {
                    return Err(Failure::Searched);
                }
            },
        };
        self.count_alloc(slot, 1 << order, order, pos);
        Ok(pos << order)
    }

    /// Whether the block (`index`, `order`) is allocated.
    fn is_allocated(&self, index: usize, order: u32) -> bool {
        let at = self.place(Node {
            order,
            pos: index >> order,
        });
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
        let node = Node {
            order,
            pos: index >> order,
        };
        let at = self.place(node);
        if !self.free_node(at, |w| Self::S.claim(w, at.j)) {
            let other = (0..=self.max_order)
                .any(|o| o != order && index.is_multiple_of(1 << o) && self.is_allocated(index, o));
            return Err(if other {
                Error::OrderMismatch
            } else {
                Error::NotAllocated
            });
        }
        self.count_free(1 << node.order, node, core);
        Ok(())
    }
}

impl<K: Kind> Forest<K> {
    /// Orders below the top row of their cell: several blocks under one node.
    pub(crate) fn alloc_bulk_groups(&self, order: u32) -> bool {
        self.group_rows(order) > 0
    }
}

impl<K: Kind> BlockAlloc for Forest<K> {
    /// Alg. 2 (NBALLOC): the core's hint first (3.6.1), then, unless the free-unit count
    /// already rules it out, a scan of the order's level from the hint, repeated while frees
    /// complete during the scan (A15-A16).
    ///
    /// Through the refusal memo (`refusal.rs`): a refusal after a scan during which no free
    /// completed is remembered until a free that may have made a block of the order free
    /// there ([`Forest::covers`]), a refusal by the count of free units until any free,
    /// either until a rolled-back allocation.
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        self.refusals
            .alloc_sorted(order, || self.alloc_once(order, core))
    }

    /// Groups of `2^r` blocks under one node of their cell, each group taken by one TRYALLOC
    /// of that node ([`Forest::try_alloc`]): one reservation and one climb for the group.
    /// `r` is at most the order's row in its cell (with 4-level cells and `max_order` 10:
    /// 4 blocks of order 0, 8 of order 3; the 1-level tree has no groups). A group is taken
    /// only where `alloc` would look first, at the core's hint, if the group is free there
    /// (one load when it is not); otherwise the next block comes from `alloc`.
    fn alloc_bulk(&self, order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
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
        self.reserved.check_free(index, order)?;
        self.free_unreserved(index, order, core)
    }

    /// The same as `free`, which waits for no other thread (but for a range operation's
    /// update of the reservation, next to reserved units: [`Error::WouldBlock`]).
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.reserved.try_check_free(index, order)?;
        self.free_unreserved(index, order, core)
    }

    fn reserve_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
        range::reserve_recorded(&self.reserved, &mut range::Shared(self, core), start, len)
    }

    fn free_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
        range::free_recorded(&self.reserved, &mut range::Shared(self, core), start, len)
    }

    fn free_units(&self) -> usize {
        self.units.wrapping_add(self.cores.net_freed())
    }

    fn total_units(&self) -> usize {
        self.units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    /// TRYALLOC (Alg. 3) on the node of the block: it succeeds only if neither the node, nor
    /// a node below it, nor an ancestor is occupied.
    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.units)?;
        self.try_alloc(
            Node {
                order,
                pos: index >> order,
            },
            0,
        )
        .map_err(|_| Error::Occupied)?;
        self.cores.slot(core).allocated(1 << order);
        Ok(())
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        if index >= self.units {
            return Err(Error::OutOfRange);
        }
        Ok((0..=self.max_order)
            .map(|order| (index & !((1 << order) - 1), order))
            .find(|&(start, order)| self.is_allocated(start, order)))
    }

    /// A descent from the root over `from` towards it, which passes a free sub-tree in one
    /// read of its cell and, after one, goes on from the largest node that starts where it
    /// ends (the nodes above that one were passed on the way down, partly taken).
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        let mut at = from;
        let mut order = self.max_order;
        while at < self.units {
            let start = at & !((1 << order) - 1);
            let node = self.place(Node {
                order,
                pos: start >> order,
            });
            let w = self.cell(node.level, node.cell).load(Ordering::Acquire);
            if Self::S.is_allocated(w, node.j) {
                return Ok(Some((start, order)));
            }
            if order == 0 || Self::S.is_subtree_free(w, node.j) {
                at = start + (1 << order);
                order = self.max_order.min(at.trailing_zeros());
            } else {
                order -= 1;
            }
        }
        Ok(None)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
