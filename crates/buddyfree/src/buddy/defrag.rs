//! On-demand defragmentation of a buddy heap ([Donahue et al. 2001](crate#references) §2.8): when a
//! request of order `k` fails although enough units are free, relocate busy blocks so that
//! one aligned block of order `k` becomes free, and no more.
//!
//! The paper's step, recursively down the sizes: a free block whose buddy is busy becomes
//! joinable once the busy buddy's contents move into another free block. Generalised to a
//! target block `P` of order `k`: every live block inside `P` moves (largest first) into a
//! free block of its own order outside `P`; where no such block exists, one is made the same
//! way one order lower (never inside a block being emptied). The caller moves the contents
//! (objects behind handles): `relocate(from, to, order)` is called once per move, and `to`
//! is always wholly free and `from` a live block of `order` at that moment.
//!
//! # Which block, and the bound
//! `P` is the aligned block of order `k` with the most free units (lowest index on ties),
//! so the fewest busy units move. Moves to empty a block of order `m`:
//! `T(m) <= sum over the live blocks b in P of (1 + T(order(b))) <= 2^m - free(P)`
//! (by induction, `T(o) <= 2^o - 1`), so **one defragmentation makes at most `2^k - 1` moves**
//! and moves at most `k * 2^k` units. Planning runs on a copy of the unit map
//! (a flag per unit and the live blocks) before anything moves: `O(units * 2^k)` time, `O(units)` memory.
//!
//! # When it fails
//! Nothing moves unless the whole plan succeeded. With `units` a multiple of `2^k` the plan
//! succeeds exactly when at least `2^k` units are free (full compaction could do no better):
//! outside `P` there are at least as many free units as live ones inside it, and placing
//! blocks largest-first into a region made of aligned blocks of their order never strands one.
//! With a ragged tail (units not a multiple of `2^k`) it may fail where moving blocks into the
//! tail would have helped; it then returns `OutOfMemory` and changes nothing.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::{Error, SeqBlockAlloc};

/// A sequential buddy that can be defragmented: it shows which blocks are live
/// ([`block_of`](SeqBlockAlloc::block_of)) and which free entries cover a unit, and hands out
/// a chosen free block with [`alloc_at`](SeqBlockAlloc::alloc_at).
pub trait Defrag: SeqBlockAlloc {
    /// The free list entry `(start, order)` that covers unit `index`, if the unit is free
    /// (an estranged pair of order `o` is one entry of order `o + 1`).
    fn free_entry(&self, index: usize) -> Option<(usize, u32)>;
}

/// One relocation: the live block of `2^order` units at `from` now lives at `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// Where the block was.
    pub from: usize,
    /// Where it is now.
    pub to: usize,
    /// Its order.
    pub order: u32,
}

/// Relocates the fewest busy units needed so that a block of `order` can be allocated, calling
/// `relocate(from, to, order)` for each move, and returns the moves in the order made (none
/// if a block of `order` is free already). `BadOrder` for an order above the maximum;
/// `OutOfMemory`, with nothing moved, if no block of `order` can be emptied.
pub fn defrag<A: Defrag + ?Sized>(
    alloc: &mut A,
    order: u32,
    mut relocate: impl FnMut(usize, usize, u32),
) -> Result<Vec<Move>, Error> {
    crate::check_order(order, alloc.max_order())?;
    if alloc.free_units() < 1 << order {
        return Err(Error::OutOfMemory);
    }
    let mut planner = Planner::new(alloc)?;
    planner.empty_block(order).ok_or(Error::OutOfMemory)?;
    for m in &planner.moves {
        // The plan replays the shadow's steps in order, so `to` is free and `from` live now.
        alloc.alloc_at(m.to, m.order)?;
        relocate(m.from, m.to, m.order);
        alloc.free(m.from, m.order)?;
    }
    Ok(planner.moves)
}

/// Allocates a block of `order`, defragmenting first if the heap is too fragmented for it.
/// Returns the block and the moves made.
///
/// ```
/// use buddyfree::buddy::{alloc_or_defrag, Knuth};
/// use buddyfree::{Config, Locked, SeqBlockAlloc};
///
/// let heap = Locked::<Knuth>::new(Knuth::new(Config::new(8, 3)).unwrap());
/// let units: Vec<usize> = (0..8).map(|_| heap.with(|k| k.alloc(0).unwrap())).collect();
/// for &u in units.iter().step_by(2) {
///     heap.with(|k| k.free(u, 0).unwrap()); // every other unit free: no block of 4
/// }
/// let mut memory: Vec<u64> = (0..8).collect(); // stands for the objects
/// let (index, moves) = heap
///     .with(|k| alloc_or_defrag(k, 2, |from, to, order| {
///         memory.copy_within(from..from + (1 << order), to);
///     }))
///     .unwrap();
/// assert_eq!(moves.len(), 2);
/// assert_eq!(index % 4, 0);
/// ```
pub fn alloc_or_defrag<A: Defrag + ?Sized>(
    alloc: &mut A,
    order: u32,
    relocate: impl FnMut(usize, usize, u32),
) -> Result<(usize, Vec<Move>), Error> {
    match alloc.alloc(order) {
        Err(Error::OutOfMemory) => {
            let moves = defrag(alloc, order, relocate)?;
            Ok((alloc.alloc(order)?, moves))
        }
        other => other.map(|index| (index, Vec::new())),
    }
}

/// Plans the moves on a copy of the unit map: which units are in use, and the live blocks.
struct Planner {
    used: Vec<bool>,
    live: BTreeMap<usize, u32>,
    /// The blocks being emptied, outermost first: never a source or a destination.
    emptying: Vec<(usize, u32)>,
    moves: Vec<Move>,
}

impl Planner {
    fn new<A: Defrag + ?Sized>(alloc: &A) -> Result<Self, Error> {
        let units = alloc.total_units();
        let mut planner = Planner {
            used: crate::config::filled(units, |_| false)?.into_vec(),
            live: BTreeMap::new(),
            emptying: Vec::new(),
            moves: Vec::new(),
        };
        let mut index = 0;
        while index < units {
            index = match (alloc.block_of(index)?, alloc.free_entry(index)) {
                (Some((start, order)), _) => {
                    planner.take(start, order)?;
                    start + (1 << order)
                }
                (None, Some((start, order))) => start + (1 << order),
                // Only block starts are visited; anything else is a `Defrag` implementation
                // that breaks its contract, and no room can be planned in it.
                (None, None) => return Err(Error::OutOfMemory),
            };
        }
        Ok(planner)
    }

    /// Makes the wholly free block `(index, order)` live; [`Error::Occupied`] if a unit of
    /// it is in use or lies past the end.
    fn take(&mut self, index: usize, order: u32) -> Result<(), Error> {
        let units = self
            .used
            .get_mut(index..index + (1 << order))
            .ok_or(Error::Occupied)?;
        if units.iter().any(|&u| u) {
            return Err(Error::Occupied);
        }
        units.fill(true);
        self.live.insert(index, order);
        Ok(())
    }

    /// Empties an aligned block of `order` that overlaps no block being emptied, recording
    /// the moves, and returns its index.
    fn empty_block(&mut self, order: u32) -> Option<usize> {
        let size = 1usize << order;
        let overlaps = |p: usize, (e, o): (usize, u32)| p < e + (1 << o) && e < p + size;
        let (target, free) = (0..=self.used.len().checked_sub(size)?)
            .step_by(size)
            .filter(|&p| !self.emptying.iter().any(|&e| overlaps(p, e)))
            .map(|p| (p, self.used[p..p + size].iter().filter(|&&u| !u).count()))
            // The first of those with the most free units.
            .min_by_key(|&(_, free)| core::cmp::Reverse(free))?;
        if free == size {
            return Some(target);
        }
        if free == 0 {
            return None;
        }
        let mut inside: Vec<(usize, u32)> = self
            .live
            .range(target..target + size)
            .map(|(&i, &o)| (i, o))
            .collect();
        inside.sort_by_key(|&(_, o)| core::cmp::Reverse(o));
        self.emptying.push((target, order));
        for (from, o) in inside {
            let to = self.empty_block(o)?;
            // Moved out: it was found live in the block being emptied, which nothing else
            // moves, so it is live here.
            self.live.remove(&from);
            self.used[from..from + (1 << o)].fill(false);
            self.take(to, o).ok()?;
            self.moves.push(Move { from, to, order: o });
        }
        self.emptying.pop();
        Some(target)
    }
}
