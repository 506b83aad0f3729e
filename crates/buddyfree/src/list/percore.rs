//! Ideal per-core lists: no shared head on the fast path.

use alloc::boxed::Box;

use super::cas::TaggedHead;
use super::links::Links;
use super::{FreeStack, Unit};
use crate::sync::CachePadded;

/// One lock-free list per core over one shared link array (a unit is in one list at a
/// time). The units start evenly partitioned; a free goes to the freeing core's list, and an
/// allocation that finds its own list empty steals from the others in turn, so it fails only
/// if every list was seen empty. Lists are lock-free ([`TaggedHead`]) so that threads passing
/// the same core hint stay correct.
pub struct PerCoreStacks {
    heads: Box<[CachePadded<TaggedHead>]>,
    links: Links,
}

impl PerCoreStacks {
    fn head(&self, core: usize) -> &TaggedHead {
        &self.heads[core % self.heads.len()]
    }
}

impl FreeStack for PerCoreStacks {
    fn full(units: u32, cores: usize) -> Self {
        let links = Links::new(units);
        let share = |c: usize| (units as u64 * c as u64 / cores as u64) as u32;
        let heads = (0..cores)
            .map(|c| CachePadded::new(TaggedHead::new(links.chain(share(c)..share(c + 1)))))
            .collect();
        PerCoreStacks { heads, links }
    }

    fn push(&self, unit: Unit, core: usize) {
        self.head(core).push(&self.links, unit);
    }

    fn pop(&self, core: usize) -> Option<Unit> {
        let own = core % self.heads.len();
        (0..self.heads.len()).find_map(|k| self.head(own + k).pop(&self.links))
    }
}
