//! The per-core state of the upper level (§3.2.2, "CPU-local tree roots"): the reserved tree
//! with its local free counter `cP`, the last allocated unit (a next-fit hint), and the
//! reserve-on-free tracker. One cache line per core.

use super::atomic::Atom;
use super::TreeId;
use crate::sync::atomic::{AtomicU64, Ordering};

/// The reservation of a core: a tree and the free units moved out of its entry.
///
/// ```text
///  63            32 31          0
/// [ tree + 1 (0: none) ][ free cP ]
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation(u64);

impl Reservation {
    pub(crate) const NONE: Reservation = Reservation(0);

    pub(crate) const fn new(t: TreeId, free: usize) -> Reservation {
        Reservation(((t.0 as u64 + 1) << 32) | free as u64)
    }

    #[inline]
    pub(crate) const fn tree(self) -> Option<TreeId> {
        match self.0 >> 32 {
            0 => None,
            t => Some(TreeId(t as usize - 1)),
        }
    }

    #[inline]
    pub(crate) const fn free(self) -> usize {
        self.0 as u32 as usize
    }
}

/// One core's state. Every field may be touched by other cores (steals, shared core hints),
/// so all are atomic; the owner is the usual writer.
pub(crate) struct Local {
    reservation: AtomicU64,
    /// The last unit this core allocated: where the next search starts.
    pub(crate) last: AtomicU64,
    /// Reserve-on-free: tree + 1 in the high half, consecutive frees into it in the low.
    frees: AtomicU64,
}

impl Local {
    pub(crate) fn new() -> Local {
        Local {
            reservation: AtomicU64::new(Reservation::NONE.0),
            last: AtomicU64::new(0),
            frees: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn get(&self) -> Reservation {
        Reservation(self.reservation.get())
    }

    /// [`Local::get`] with a `SeqCst` load, for the refusal memo's reads after a free.
    pub(crate) fn get_seq_cst(&self) -> Reservation {
        Reservation(self.reservation.load(Ordering::SeqCst))
    }

    #[inline]
    /// Fig. 14a (1): takes `n` units from `cP` if this core holds a tree (`t`, where one is
    /// named) with enough; returns the tree, or the reservation that had too few.
    pub(crate) fn take(&self, t: Option<TreeId>, n: usize) -> Result<TreeId, Reservation> {
        match self.reservation.try_change(|r| {
            let r = Reservation(r);
            let held = r.tree().is_some() && t.is_none_or(|t| r.tree() == Some(t));
            (held && r.free() >= n).then(|| r.0 - n as u64)
        }) {
            Ok(r) => Reservation(r).tree().ok_or(Reservation(r)),
            Err(r) => Err(Reservation(r)),
        }
    }

    #[inline]
    /// Adds `n` units to `cP` if this core holds `t`; false if it does not (then they belong
    /// in the tree entry).
    pub(crate) fn add(&self, t: TreeId, n: usize) -> bool {
        self.reservation
            .try_change(|r| (Reservation(r).tree() == Some(t)).then(|| r + n as u64))
            .is_ok()
    }

    #[inline]
    /// Installs a new reservation and returns the one it replaced: whoever swaps a
    /// reservation out must return it to its tree.
    pub(crate) fn swap(&self, new: Reservation) -> Reservation {
        Reservation(self.reservation.swap(new.0, Ordering::AcqRel))
    }

    #[inline]
    /// Counts a free into `t` from this core; true once `threshold` consecutive frees went
    /// there (and restarts the count). A heuristic: races only blur the count.
    pub(crate) fn count_free(&self, t: TreeId, threshold: u32) -> bool {
        let v = self.frees.load(Ordering::Relaxed);
        let tag = (t.0 as u64 + 1) << 32;
        let count = if v & !0xFFFF_FFFF == tag {
            (v as u32) + 1
        } else {
            1
        };
        let reached = count >= threshold;
        let next = if reached { 0 } else { tag | count as u64 };
        self.frees.store(next, Ordering::Relaxed);
        reached
    }
}
