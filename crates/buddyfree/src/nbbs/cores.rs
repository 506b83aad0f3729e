//! Per-core state: free-slot hints (Section 3.6.1) and the sharded counters behind
//! `free_units`, the full-heap fast path and the `release_count` retry (Alg. 2, A4/A15).

use crate::table::{Metadata, Part, Table};
use crate::Error;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::CachePadded;

/// Orders with a free-slot hint; larger orders start their search at a scattered position.
#[cfg(not(loom))]
const HINTS: usize = 32;
#[cfg(loom)]
const HINTS: usize = 6;

/// One core's state, alone on its cache lines.
///
/// The counters are monotonic (they wrap, and only differences are used): `allocated` and
/// `freed` count units, so the free units are `units + Σfreed - Σallocated`, and `Σfreed`
/// changes exactly when some free completes, which is the paper's `release_count`. One
/// counter per core keeps every operation's RMW on a line its own core owns.
pub struct Slot {
    allocated: AtomicUsize,
    freed: AtomicUsize,
    /// Per order: the position to try first, the last one freed on this core or the one after
    /// the last one allocated (3.6.1).
    hints: [AtomicUsize; HINTS],
}

/// The per-core slots.
pub struct Cores {
    slots: Table<CachePadded<Slot>>,
}

impl Cores {
    /// The slots at `part` of `meta`, their hints starting at `start(core, order)`, scattered
    /// so that cores with no history search different places.
    pub fn new(
        meta: &Metadata,
        part: Part<CachePadded<Slot>>,
        start: impl Fn(usize, u32) -> usize,
    ) -> Result<Self, Error> {
        let slots = meta.table(part, |core| {
            CachePadded::new(Slot {
                allocated: AtomicUsize::new(0),
                freed: AtomicUsize::new(0),
                hints: core::array::from_fn(|order| AtomicUsize::new(start(core, order as u32))),
            })
        })?;
        Ok(Cores { slots })
    }

    /// The slot of core hint `core` (taken modulo the number of cores).
    #[inline]
    pub fn slot(&self, core: usize) -> &Slot {
        &self.slots[crate::core_slot(core, self.slots.len())]
    }

    /// Units freed minus units allocated, over all cores (wrapping).
    ///
    /// Reads every `allocated` before any `freed`, so a concurrent alloc-free pair can only
    /// make the result larger than the true value at the end of the read, never smaller:
    /// the full-heap fast path may scan needlessly but never fails an allocation that the
    /// counters say could succeed.
    pub fn net_freed(&self) -> usize {
        let allocated = self.slots.iter().fold(0usize, |sum, s| {
            sum.wrapping_add(s.allocated.load(Ordering::Relaxed))
        });
        self.releases().wrapping_sub(allocated)
    }

    /// Units freed so far over all cores: changes iff a free completed (A4/A15). Acquire pairs
    /// with the release in [`Slot::freed`], so a scan after a changed count sees the freed node.
    pub fn releases(&self) -> usize {
        self.slots.iter().fold(0usize, |sum, s| {
            sum.wrapping_add(s.freed.load(Ordering::Acquire))
        })
    }
}

impl Slot {
    /// The hint for `order`, if this order has one.
    #[inline]
    pub fn hint(&self, order: u32) -> Option<usize> {
        self.hints
            .get(order as usize)
            .map(|h| h.load(Ordering::Relaxed))
    }

    /// Sets the hint for `order` (hints are advice: relaxed, and racing cores may overwrite).
    #[inline]
    pub fn set_hint(&self, order: u32, pos: usize) {
        if let Some(h) = self.hints.get(order as usize) {
            h.store(pos, Ordering::Relaxed);
        }
    }

    /// Counts an allocation of `units` units.
    #[inline]
    pub fn allocated(&self, units: usize) {
        self.allocated.fetch_add(units, Ordering::Relaxed);
    }

    /// Counts a completed free of `units` units (Alg. 4, F4). Release: a thread that sees the
    /// new count in [`Cores::releases`] also sees the freed node. `SeqCst` (on x86-64 and
    /// AArch64 the same instruction): the write the refusal memo's argument puts in the
    /// single order (`refusal.rs`); an allocation's slow path reads every core's count, with
    /// acquire, before it scans, so it sees the freed node whenever it sees this.
    #[inline]
    pub fn freed(&self, units: usize) {
        self.freed.fetch_add(units, Ordering::SeqCst);
    }
}
