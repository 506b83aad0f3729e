//! Memory maps: reserving and freeing runs of units, ragged ends included.
//!
//! A kernel at boot knows its memory as ranges: usable RAM with holes for firmware, the
//! kernel image and MMIO in between. The usual sequence builds an allocator, reserves every
//! unit ([`reserve_all`]), then frees each usable range with [`BlockAlloc::free_range`]; or
//! builds it free and reserves each hole with [`BlockAlloc::reserve_range`]. Either way a
//! range becomes the largest naturally aligned blocks that tile it ([`aligned_blocks`]): at
//! most `len / 2^max_order + 2 * max_order` blocks, so the cost is
//! `O(len / 2^max_order + max_order)` block operations per range, never one per unit.
//!
//! ```
//! use buddyfree::nbbs::Nbbs4;
//! use buddyfree::{range, BlockAlloc, Config};
//!
//! // 1 MiB of 4 KiB page frames; firmware owns frames 0..3, MMIO 100..120.
//! let frames = Nbbs4::new(Config::new(256, 6))?;
//! range::reserve_all(&frames)?;
//! frames.free_range(3, 97, 0)?; // ragged at both ends
//! frames.free_range(120, 136, 0)?;
//! assert_eq!(frames.free_units(), 256 - 3 - 20);
//! assert_eq!(frames.block_of(110)?, Some((104, 3))); // still reserved: MMIO
//! assert_eq!(frames.block_of(50)?, None);
//! assert_eq!(frames.alloc_at(32, 5, 0), Ok(()));
//! assert_eq!(frames.alloc_at(32, 5, 0), Err(buddyfree::Error::Occupied));
//! # Ok::<(), buddyfree::Error>(())
//! ```
//!
//! **Rules.** `free_range` needs every unit of the range allocated. Where the range starts or
//! ends inside a live block (a reserved block of `max_order`, typically), that block is cut:
//! freed, and its part outside the range allocated again at once. Between the two another
//! thread could take a unit of that outside part, so a `free_range` whose ends cut a block
//! must not race with allocations: call it at boot, or on ranges reserved with the same
//! `reserve_range` (then nothing is cut). [`crate::Locked`] allocators run the whole range
//! under their lock, where no such window exists. Validation comes first: a range with a unit
//! that is not allocated is refused with [`Error::NotAllocated`] and nothing changes.
//! `reserve_range` is safe under any concurrency: it takes each block with `alloc_at`, and if
//! one is not free it gives back what it took and answers [`Error::Occupied`].
//!
//! **The boot reservation.** What `reserve_range` (and so [`reserve_all`]) takes, the published
//! allocators remember: any free of a block with a reserved unit answers
//! [`Error::Reserved`] and changes nothing, whatever its order, and only `free_range` gives
//! reserved units back (firmware memory is never freed by a stray `free`; an initrd held at
//! boot is released by `free_range` when the kernel is done with it). At most
//! [`crate::MAX_RESERVED_RUNS`] separate runs; see `docs/kernel.md`.

use crate::reserved::Reserved;
use crate::{BlockAlloc, Error, SeqBlockAlloc};

/// The largest naturally aligned blocks (at most `2^max_order` units) that tile
/// `start..start + len`, in address order, as `(index, order)`.
pub fn aligned_blocks(
    start: usize,
    len: usize,
    max_order: u32,
) -> impl Iterator<Item = (usize, u32)> {
    let end = start.saturating_add(len);
    let mut at = start;
    core::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let order = at.trailing_zeros().min((end - at).ilog2()).min(max_order);
        let block = (at, order);
        at += 1 << order;
        Some(block)
    })
}

/// Allocates every unit of `alloc` ([`BlockAlloc::reserve_range`] over all of it): the first
/// step of a boot that then frees the usable ranges.
pub fn reserve_all(alloc: &(impl BlockAlloc + ?Sized)) -> Result<(), Error> {
    alloc.reserve_range(0, alloc.total_units(), 0)
}

/// The end of `start..start + len`, if it lies within `units`: [`Error::OutOfRange`] if not.
pub(crate) fn check_range(units: usize, start: usize, len: usize) -> Result<usize, Error> {
    start
        .checked_add(len)
        .filter(|&end| end <= units)
        .ok_or(Error::OutOfRange)
}

/// See [`BlockAlloc::reserve_range`]; the range recorded in `reserved`, if given, for
/// allocators whose frees refuse reserved units.
pub(crate) fn reserve_range<'a>(
    reserved: impl Into<Option<&'a Reserved>>,
    units: &mut impl SeqBlockAlloc,
    start: usize,
    len: usize,
) -> Result<(), Error> {
    let end = check_range(units.total_units(), start, len)?;
    if let Some(reserved) = reserved.into() {
        return reserved.reserve(start, end, || reserve_range(None, units, start, len));
    }
    let max_order = units.max_order();
    for (i, (index, order)) in aligned_blocks(start, len, max_order).enumerate() {
        if let Err(e) = units.alloc_at(index, order) {
            // Give back what this call took, so that a refused range changes nothing.
            for (index, order) in aligned_blocks(start, len, max_order).take(i) {
                units
                    .free(index, order)
                    .expect("a block this call just took");
            }
            return Err(e);
        }
    }
    Ok(())
}

/// See [`BlockAlloc::free_range`]; the range taken out of `reserved`, if given, the blocks
/// cut at its ends lifted from it while they are freed and taken again.
pub(crate) fn free_range<'a>(
    reserved: impl Into<Option<&'a Reserved>>,
    units: &mut impl SeqBlockAlloc,
    start: usize,
    len: usize,
) -> Result<(), Error> {
    let end = check_range(units.total_units(), start, len)?;
    if len == 0 {
        // Nothing to free, so nothing to cut.
        return Ok(());
    }
    if let Some(reserved) = reserved.into() {
        let cut_start = block_across(units, start)?.map_or(start, |(first, _)| first);
        let cut_end = block_across(units, end)?.map_or(end, |(first, order)| first + (1 << order));
        let give = || free_range(None, units, start, len);
        return reserved.release(start, end, cut_start, cut_end, give);
    }
    // Validate first: every unit allocated.
    allocated_throughout(units, start, end)?;
    for edge in [start, end] {
        cut_at(units, edge)?;
    }
    let mut at = start;
    while at < end {
        let (first, order) = units.block_of(at)?.ok_or(Error::NotAllocated)?;
        debug_assert_eq!(first, at, "the ends were cut");
        units.free(first, order)?;
        at = first + (1 << order);
    }
    Ok(())
}

/// [`Error::NotAllocated`] unless every unit of `start..end` is allocated.
pub(crate) fn allocated_throughout(
    units: &impl SeqBlockAlloc,
    start: usize,
    end: usize,
) -> Result<(), Error> {
    let mut at = start;
    while at < end {
        let (first, order) = units.block_of(at)?.ok_or(Error::NotAllocated)?;
        at = first + (1 << order);
    }
    Ok(())
}

/// The live block that contains `edge` past its first unit, if any: what [`cut_at`] cuts.
fn block_across(units: &impl SeqBlockAlloc, edge: usize) -> Result<Option<(usize, u32)>, Error> {
    if edge >= units.total_units() {
        return Ok(None);
    }
    Ok(units.block_of(edge)?.filter(|&(first, _)| first < edge))
}

/// Makes `edge` a block boundary: a live block that contains `edge` past its first unit is
/// freed and its units allocated again as blocks that end at `edge` and start there.
fn cut_at(units: &mut impl SeqBlockAlloc, edge: usize) -> Result<(), Error> {
    let Some((first, order)) = block_across(units, edge)? else {
        return Ok(());
    };
    units.free(first, order)?;
    for (from, len) in [(first, edge - first), (edge, first + (1 << order) - edge)] {
        for (index, order) in aligned_blocks(from, len, units.max_order()) {
            units.alloc_at(index, order)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn aligned_blocks_tile_ragged_ranges_with_the_largest_blocks() {
        let blocks: Vec<_> = aligned_blocks(3, 14, 3).collect();
        assert_eq!(blocks, [(3, 0), (4, 2), (8, 3), (16, 0)]);
        for start in 0..40 {
            for len in 0..70 {
                let mut next = start;
                for (index, order) in aligned_blocks(start, len, 4) {
                    assert_eq!((index, index % (1 << order)), (next, 0));
                    next += 1 << order;
                }
                assert_eq!(next, start + len);
                assert!(aligned_blocks(start, len, 4).count() <= len / 16 + 2 * 4 + 1);
            }
        }
    }
}
