//! A free list behind one spinlock.

use super::links::Links;
use super::{FreeStack, Unit};
use crate::sync::CachePadded;
use crate::Error;

/// One list whose head is guarded by a spinlock; the lock orders all link accesses.
pub struct LockedStack {
    head: CachePadded<spin::Mutex<u32>>,
    links: Links,
}

impl FreeStack for LockedStack {
    const LOCK_FREE: bool = false;

    fn full(units: u32, _cores: usize) -> Result<Self, Error> {
        let links = Links::new(units)?;
        let head = links.chain(0..units);
        Ok(LockedStack {
            head: CachePadded::new(spin::Mutex::new(head)),
            links,
        })
    }

    fn push(&self, unit: Unit, _core: usize) {
        let mut head = self.head.lock();
        *head = self.links.push(*head, unit);
    }

    fn pop(&self, _core: usize) -> Option<Unit> {
        let mut head = self.head.lock();
        let (unit, next) = self.links.pop(*head)?;
        *head = next;
        Some(unit)
    }
}
