//! The next links of the free lists, and the two list steps every stack shares.
//!
//! A list is named by its head (a raw unit or [`Unit::NIL`]); `push` and `pop` are pure
//! steps from an old head to a new one, applied under a lock ([`super::LockedStack`]) or in
//! a CAS on a tagged head ([`super::cas::TaggedHead`]). A unit is in at most one list, so
//! several lists can share one link array.

use alloc::boxed::Box;
use core::ops::Range;

use super::Unit;
use crate::filled;
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::Error;

/// `links[u]`: the unit after `u` in its list. Atomic so that a stale reader racing a writer
/// (a CAS pop that will fail) is no data race; the head's synchronisation orders them.
pub(super) struct Links(Box<[AtomicU32]>);

impl Links {
    /// Links for `units` units, none in a list.
    pub(super) fn new(units: u32) -> Result<Self, Error> {
        Ok(Links(filled(units as usize, |_| {
            AtomicU32::new(Unit::NIL)
        })?))
    }

    /// Chains `range` into one list in ascending order and returns its head.
    pub(super) fn chain(&self, range: Range<u32>) -> u32 {
        for u in range.clone() {
            let next = if u + 1 < range.end { u + 1 } else { Unit::NIL };
            self.0[u as usize].store(next, Ordering::Relaxed);
        }
        if range.is_empty() {
            Unit::NIL
        } else {
            range.start
        }
    }

    /// Links `unit` in front of the list headed by `head`; returns the new head.
    pub(super) fn push(&self, head: u32, unit: Unit) -> u32 {
        self.0[unit.as_usize()].store(head, Ordering::Relaxed);
        unit.raw()
    }

    /// The first unit of the list headed by `head` and the head after it, or `None` if the
    /// list is empty.
    pub(super) fn pop(&self, head: u32) -> Option<(Unit, u32)> {
        let unit = Unit::from_raw(head)?;
        Some((unit, self.0[unit.as_usize()].load(Ordering::Relaxed)))
    }
}
