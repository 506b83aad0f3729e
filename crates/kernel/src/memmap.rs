//! The physical memory map, from the device tree the firmware hands over: every `/memory`
//! range, minus `/reserved-memory` and the header's reservations (the firmware's own region),
//! the kernel image (its boot stacks included) and the device tree blob.
//!
//! Built before there is a heap, so ranges live in a fixed array.

use core::fmt;
use core::ops::Range;

use fdt::Fdt;

/// 4 KiB frames.
pub const FRAME: usize = 4096;

/// The most ranges a set holds; a map with more is refused, not truncated.
const MAX_RANGES: usize = 32;

/// A set of disjoint, ascending, non-adjacent byte ranges.
#[derive(Clone, Copy)]
pub struct Ranges {
    ranges: [(usize, usize); MAX_RANGES],
    len: usize,
}

/// A map with more ranges than [`MAX_RANGES`].
#[derive(Debug)]
pub struct TooManyRanges;

impl Ranges {
    pub const fn new() -> Self {
        Ranges {
            ranges: [(0, 0); MAX_RANGES],
            len: 0,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.ranges[..self.len].iter().map(|&(s, e)| s..e)
    }

    pub fn bytes(&self) -> usize {
        self.iter().map(|r| r.len()).sum()
    }

    /// Adds `range`, merging it with those it overlaps or touches.
    pub fn add(&mut self, range: Range<usize>) -> Result<(), TooManyRanges> {
        if range.is_empty() {
            return Ok(());
        }
        let (mut start, mut end) = (range.start, range.end);
        let mut kept = Ranges::new();
        for r in self.iter() {
            if r.end < start || end < r.start {
                kept.push(r)?;
            } else {
                start = start.min(r.start);
                end = end.max(r.end);
            }
        }
        kept.push(start..end)?;
        kept.ranges[..kept.len].sort_unstable();
        *self = kept;
        Ok(())
    }

    /// Removes every byte of `range`.
    pub fn remove(&mut self, range: Range<usize>) -> Result<(), TooManyRanges> {
        let mut kept = Ranges::new();
        for r in self.iter() {
            kept.push(r.start..r.end.min(range.start))?;
            kept.push(r.start.max(range.end)..r.end)?;
        }
        *self = kept;
        Ok(())
    }

    /// Shrinks every range to whole frames.
    pub fn whole_frames(&mut self) {
        let mut kept = Ranges::new();
        for r in self.iter() {
            let start = r.start.next_multiple_of(FRAME);
            let end = r.end / FRAME * FRAME;
            // Cannot overflow: whole-frame ranges are no more than the ones they came from.
            let _ = kept.push(start..end.max(start));
        }
        *self = kept;
    }

    /// Whether `range` lies inside one range of the set.
    pub fn contains(&self, range: Range<usize>) -> bool {
        self.iter()
            .any(|r| r.start <= range.start && range.end <= r.end)
    }

    /// Takes `len` bytes aligned to `align` from the end of the largest range that has them.
    pub fn carve(&mut self, len: usize, align: usize) -> Option<Range<usize>> {
        let found = self
            .iter()
            .filter_map(|r| {
                let start = r.end.checked_sub(len)? / align * align;
                (start >= r.start).then_some((r.len(), start..start + len))
            })
            .max_by_key(|(size, _)| *size)?
            .1;
        self.remove(found.clone()).ok()?;
        Some(found)
    }

    fn push(&mut self, range: Range<usize>) -> Result<(), TooManyRanges> {
        if range.is_empty() {
            return Ok(());
        }
        let slot = self.ranges.get_mut(self.len).ok_or(TooManyRanges)?;
        *slot = (range.start, range.end);
        self.len += 1;
        Ok(())
    }
}

impl fmt::Display for Ranges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{:#x}..{:#x}", r.start, r.end)?;
        }
        Ok(())
    }
}

/// What the device tree says about memory, and what is left for the allocators.
pub struct MemoryMap {
    /// Every `/memory` range.
    pub memory: Ranges,
    /// What the firmware keeps: `/reserved-memory` nodes and the header's reservations.
    pub reserved: Ranges,
    /// `memory` minus `reserved`, the kernel image and the device tree, in whole frames.
    pub usable: Ranges,
}

/// Why the memory map could not be read.
#[derive(Debug)]
pub enum MapError {
    NoMemory,
    TooManyRanges,
}

impl From<TooManyRanges> for MapError {
    fn from(_: TooManyRanges) -> Self {
        MapError::TooManyRanges
    }
}

/// Reads the memory map from the device tree `fdt`, leaving out `kernel` (the image and its
/// boot stacks).
pub fn read(fdt: &Fdt, dtb: Range<usize>, kernel: Range<usize>) -> Result<MemoryMap, MapError> {
    let mut memory = Ranges::new();
    let memory_nodes = fdt.all_nodes().filter(|n| {
        n.property("device_type")
            .and_then(|p| p.as_str())
            .is_some_and(|t| t == "memory")
    });
    for node in memory_nodes {
        for region in node.reg().into_iter().flatten() {
            let start = region.starting_address as usize;
            memory.add(start..start + region.size.unwrap_or(0))?;
        }
    }
    if memory.bytes() == 0 {
        return Err(MapError::NoMemory);
    }
    let mut reserved = Ranges::new();
    for r in fdt.memory_reservations() {
        let start = r.address() as usize;
        reserved.add(start..start + r.size())?;
    }
    if let Some(node) = fdt.find_node("/reserved-memory") {
        for child in node.children() {
            for region in child.reg().into_iter().flatten() {
                let start = region.starting_address as usize;
                reserved.add(start..start + region.size.unwrap_or(0))?;
            }
        }
    }
    let mut usable = memory;
    for r in reserved.iter().chain([kernel, dtb]) {
        usable.remove(r)?;
    }
    usable.whole_frames();
    Ok(MemoryMap {
        memory,
        reserved,
        usable,
    })
}
