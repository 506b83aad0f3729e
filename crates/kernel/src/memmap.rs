//! The physical memory map, from the device tree the firmware hands over: every `/memory`
//! range, minus `/reserved-memory` and the header's reservations (the firmware's own region),
//! what `/chosen` hands over (the initrd, held until the kernel releases it; a crash kernel's
//! ELF core header and the kexec buffers, kept), the kernel image (its boot stack included)
//! and the device tree blob.
//!
//! Built before there is a heap, so ranges live in a fixed array.

use core::fmt;
use core::ops::Range;

use fdt::node::{CellSizes, FdtNode};
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

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes in both sets.
    pub fn intersect(&self, other: &Ranges) -> Result<Ranges, TooManyRanges> {
        let mut both = Ranges::new();
        for a in self.iter() {
            for b in other.iter() {
                both.add(a.start.max(b.start)..a.end.min(b.end))?;
            }
        }
        Ok(both)
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
    /// Every `/memory` range (cut to `linux,usable-memory-range` where `/chosen` has it).
    pub memory: Ranges,
    /// What the firmware keeps: `/reserved-memory` nodes and the header's reservations.
    pub reserved: Ranges,
    /// The `/reserved-memory` nodes marked `no-map`: never mapped, not even one-to-one.
    pub no_map: Ranges,
    /// What `/chosen` hands over and the kernel keeps for good: `linux,elfcorehdr`,
    /// `linux,ima-kexec-buffer`, `linux,tpm-kexec-buffer`.
    pub chosen: Ranges,
    /// The initrd (`linux,initrd-start` to `linux,initrd-end`): out of the allocators until
    /// the kernel has read it and releases it ([`MemoryMap::releasable`]).
    pub initrd: Option<Range<usize>>,
    /// Everything held out for good: `reserved`, `chosen`, the kernel and the device tree.
    held: Ranges,
    /// `memory` minus `held` and the initrd, in whole frames.
    pub usable: Ranges,
}

/// Why the memory map could not be read. Each names the node or entry and the values.
#[derive(Debug)]
pub enum MapError {
    NoMemory,
    TooManyRanges,
    /// A range whose end is past 2^64: `start` and `size` as the device tree gives them.
    Wraps {
        what: &'static str,
        node: &'static str,
        start: u64,
        size: u64,
    },
    /// A property whose value is not what the devicetree bindings say.
    BadProperty {
        node: &'static str,
        property: &'static str,
        len: usize,
    },
    /// `linux,initrd-end` before `linux,initrd-start`.
    InitrdBackwards {
        start: u64,
        end: u64,
    },
}

impl From<TooManyRanges> for MapError {
    fn from(_: TooManyRanges) -> Self {
        MapError::TooManyRanges
    }
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::NoMemory => write!(f, "no /memory node names any memory"),
            MapError::TooManyRanges => write!(f, "more than {MAX_RANGES} disjoint ranges"),
            MapError::Wraps {
                what,
                node,
                start,
                size,
            } => {
                let sep = if node.is_empty() { "" } else { " " };
                write!(
                    f,
                    "{what}{sep}{node}: {start:#x} + {size:#x} bytes ends past 2^64"
                )
            }
            MapError::BadProperty {
                node,
                property,
                len,
            } => write!(f, "{node}: {property} has {len} bytes, not whole cells"),
            MapError::InitrdBackwards { start, end } => write!(
                f,
                "/chosen: linux,initrd-end {end:#x} is below linux,initrd-start {start:#x}"
            ),
        }
    }
}

/// `start..start + size`, or the error that names `what` when the end is past 2^64.
pub fn checked_range(
    what: &'static str,
    start: usize,
    size: usize,
) -> Result<Range<usize>, MapError> {
    let end = start.checked_add(size).ok_or(MapError::Wraps {
        what,
        node: "",
        start: start as u64,
        size: size as u64,
    })?;
    Ok(start..end)
}

/// The ranges of a `reg` property of `node` (or, for `/chosen`'s properties in `reg` form,
/// of `value`), checked. `node` is leaked into the error only by name: the device tree stays
/// where the firmware put it, so its strings live as long as the kernel.
fn reg_ranges(
    what: &'static str,
    node: &'static str,
    value: &[u8],
    cells: CellSizes,
    out: &mut Ranges,
) -> Result<(), MapError> {
    let (address_cells, size_cells) = (cells.address_cells, cells.size_cells);
    let entry = 4 * (address_cells + size_cells);
    let bad = MapError::BadProperty {
        node,
        property: what,
        len: value.len(),
    };
    if address_cells == 0
        || address_cells > 2
        || size_cells > 2
        || !value.len().is_multiple_of(entry)
    {
        return Err(bad);
    }
    for chunk in value.chunks_exact(entry) {
        let (address, size) = chunk.split_at(4 * address_cells);
        let (start, size) = (cells_value(address), cells_value(size));
        let wraps = MapError::Wraps {
            what,
            node,
            start,
            size,
        };
        let (Ok(start), Ok(size)) = (usize::try_from(start), usize::try_from(size)) else {
            return Err(wraps);
        };
        let end = start.checked_add(size).ok_or(wraps)?;
        out.add(start..end)?;
    }
    Ok(())
}

/// A big-endian value of one or two cells.
fn cells_value(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |v, &b| v << 8 | u64::from(b))
}

/// The name of `node`, for errors: the device tree lives as long as the kernel.
fn name(node: &FdtNode<'_, 'static>) -> &'static str {
    node.name
}

/// Reads the memory map from the device tree `fdt`, leaving out `kernel` (the image and its
/// boot stack) and `dtb` (the blob). Every value from the firmware is checked: a range that
/// ends past 2^64 is an error naming the node and the values, never a wrapped address.
pub fn read(
    fdt: &Fdt<'static>,
    dtb: Range<usize>,
    kernel: Range<usize>,
) -> Result<MemoryMap, MapError> {
    let root = fdt
        .find_node("/")
        .map(|n| n.cell_sizes())
        .unwrap_or(CellSizes {
            address_cells: 2,
            size_cells: 1,
        });
    let mut memory = Ranges::new();
    let memory_nodes = fdt.all_nodes().filter(|n| {
        n.property("device_type")
            .and_then(|p| p.as_str())
            .is_some_and(|t| t == "memory")
    });
    for node in memory_nodes {
        if let Some(reg) = node.property("reg") {
            reg_ranges("memory node", name(&node), reg.value, root, &mut memory)?;
        }
    }
    let chosen_node = fdt.find_node("/chosen");
    if let Some(usable) = chosen_node.and_then(|c| c.property("linux,usable-memory-range")) {
        let mut limit = Ranges::new();
        reg_ranges(
            "linux,usable-memory-range",
            "/chosen",
            usable.value,
            root,
            &mut limit,
        )?;
        memory = memory.intersect(&limit)?;
    }
    if memory.bytes() == 0 {
        return Err(MapError::NoMemory);
    }
    let mut reserved = Ranges::new();
    for r in fdt.memory_reservations() {
        reserved.add(checked_range(
            "/memreserve/ entry",
            r.address() as usize,
            r.size(),
        )?)?;
    }
    let mut no_map = Ranges::new();
    if let Some(node) = fdt.find_node("/reserved-memory") {
        let cells = node.cell_sizes();
        for child in node.children() {
            let Some(reg) = child.property("reg") else {
                continue;
            };
            reg_ranges(
                "reserved-memory node",
                name(&child),
                reg.value,
                cells,
                &mut reserved,
            )?;
            if child.property("no-map").is_some() {
                reg_ranges(
                    "reserved-memory node",
                    name(&child),
                    reg.value,
                    cells,
                    &mut no_map,
                )?;
            }
        }
    }
    let mut chosen = Ranges::new();
    let mut initrd = None;
    if let Some(node) = chosen_node {
        for property in [
            "linux,elfcorehdr",
            "linux,ima-kexec-buffer",
            "linux,tpm-kexec-buffer",
        ] {
            if let Some(p) = node.property(property) {
                reg_ranges(property, "/chosen", p.value, root, &mut chosen)?;
            }
        }
        let cell = |property: &'static str| -> Result<Option<u64>, MapError> {
            let Some(p) = node.property(property) else {
                return Ok(None);
            };
            match p.value.len() {
                4 | 8 => Ok(Some(cells_value(p.value))),
                len => Err(MapError::BadProperty {
                    node: "/chosen",
                    property,
                    len,
                }),
            }
        };
        if let (Some(start), Some(end)) = (cell("linux,initrd-start")?, cell("linux,initrd-end")?) {
            if end < start {
                return Err(MapError::InitrdBackwards { start, end });
            }
            let too_far = MapError::Wraps {
                what: "the initrd",
                node: "/chosen",
                start,
                size: end - start,
            };
            let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
                return Err(too_far);
            };
            initrd = Some(start..end).filter(|r| !r.is_empty());
        }
    }
    let mut held = reserved;
    for r in chosen.iter().chain([kernel, dtb]) {
        held.add(r)?;
    }
    let mut usable = memory;
    for r in held.iter() {
        usable.remove(r)?;
    }
    // The broken kernel of `--fault initrd` reads the initrd's place and hands it out anyway.
    #[cfg(not(feature = "fault-initrd"))]
    if let Some(r) = &initrd {
        usable.remove(r.clone())?;
    }
    usable.whole_frames();
    Ok(MemoryMap {
        memory,
        reserved,
        no_map,
        chosen,
        initrd,
        held,
        usable,
    })
}

impl MemoryMap {
    /// The whole frames to free when the kernel releases `range` (the initrd): every frame
    /// that holds a byte of it, inside memory, minus those with a byte held for good.
    /// The frames at its ends that it shares with usable memory were never usable (usable
    /// ranges are whole frames apart from it), so they come back too.
    pub fn releasable(&self, range: Range<usize>) -> Result<Ranges, MapError> {
        let start = range.start / FRAME * FRAME;
        let end = range
            .end
            .checked_next_multiple_of(FRAME)
            .ok_or(MapError::Wraps {
                what: "the initrd",
                node: "/chosen",
                start: range.start as u64,
                size: range.len() as u64,
            })?;
        let mut span = Ranges::new();
        span.add(start..end)?;
        let mut frames = span.intersect(&self.memory)?;
        for r in self.held.iter().chain(self.usable.iter()) {
            frames.remove(r)?;
        }
        frames.whole_frames();
        Ok(frames)
    }
}
