//! Ideal per-core lists: no shared head on the fast path.

use alloc::boxed::Box;

use super::cas::TaggedHead;
use super::links::Links;
use super::{FreeStack, Unit};
use crate::filled;
use crate::sync::CachePadded;
use crate::Error;

/// One lock-free list per core over one shared link array (a unit is in one list at a
/// time). The units start evenly partitioned; a free goes to the freeing core's list, and an
/// allocation that finds its own list empty steals from the others in turn, so it fails only
/// if every list was seen empty. Lists are lock-free (an ABA-tagged head) so that threads passing
/// the same core hint stay correct.
pub struct PerCoreStacks {
    heads: Box<[CachePadded<TaggedHead>]>,
    links: Links,
}

impl PerCoreStacks {
    /// The list of `core` (a hint, reduced modulo the number of lists).
    fn own(&self, core: usize) -> usize {
        crate::core_slot(core, self.heads.len())
    }
}

impl FreeStack for PerCoreStacks {
    const LOCK_FREE: bool = true;

    fn full(units: u32, cores: usize) -> Result<Self, Error> {
        let links = Links::new(units)?;
        let share = |c: usize| (units as u64 * c as u64 / cores as u64) as u32;
        let heads = filled(cores, |c| {
            CachePadded::new(TaggedHead::new(links.chain(share(c)..share(c + 1))))
        })?;
        Ok(PerCoreStacks { heads, links })
    }

    fn push(&self, unit: Unit, core: usize) {
        self.heads[self.own(core)].push(&self.links, unit);
    }

    fn pop(&self, core: usize) -> Option<Unit> {
        let own = self.own(core);
        // The others in turn after `own`: a rotation, so cores steal from different lists.
        let (before, after) = self.heads.split_at(own);
        after
            .iter()
            .chain(before)
            .find_map(|head| head.pop(&self.links))
    }
}
