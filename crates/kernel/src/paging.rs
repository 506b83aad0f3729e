//! Sv39 page tables built from the allocator's frames: a hart allocates a root table, the
//! tables the identity map needs and a middle and a leaf table for a window, and four data
//! frames; maps all memory one-to-one (so the kernel keeps running, and the interrupt handler
//! can stamp any usable frame) and the data frames, in reverse order, at a virtual address no
//! memory has; switches `satp` to the tables, writes through the mapping, switches back,
//! finds each write in the frame the mapping named, and frees everything.
//!
//! The identity map uses gigapages, but never maps a `no-map` reserved range (the firmware's
//! own memory, which the devicetree bindings say the OS must not map, lest speculative
//! accesses touch it): a gigapage holding one is split into megapages, and a megapage holding
//! one into pages. Sv39 reaches 256 GiB one-to-one (the lower half of its 512 root entries);
//! where memory reaches further, the round trip is not made.

use alloc::vec::Vec;
use core::arch::asm;
use core::ops::Range;

use buddyfree::Error;

use crate::memmap::{Ranges, FRAME};
use crate::stress::{Block, Round};

const VALID: u64 = 1 << 0;
const READ: u64 = 1 << 1;
const WRITE: u64 = 1 << 2;
const EXECUTE: u64 = 1 << 3;
const ACCESSED: u64 = 1 << 6;
const DIRTY: u64 = 1 << 7;
const LEAF: u64 = VALID | READ | WRITE | EXECUTE | ACCESSED | DIRTY;
const SV39: usize = 8 << 60;
/// Entries per table.
const ENTRIES: usize = 512;
/// Root entries whose addresses a one-to-one map can use: Sv39 addresses with bit 38 set are
/// the upper half (bits 63..39 set too), which no physical address below 2^64 equals.
const LOWER_HALF: usize = ENTRIES / 2;
const DATA_ORDER: u32 = 2;

/// The bytes one entry of a table of level `level` (2 = root) maps.
const fn span(level: u32) -> usize {
    FRAME << (9 * level)
}

/// A page-table entry naming physical address `pa` with `flags`.
fn entry(pa: usize, flags: u64) -> u64 {
    (pa as u64 >> 12) << 10 | flags
}

/// The index into the table of level `level` (2 = root) for virtual address `va`.
fn vpn(va: usize, level: u32) -> usize {
    va >> (12 + 9 * level) & 0x1FF
}

/// How a round trip went.
pub enum Trip {
    /// Every write went where the mapping sent it.
    Done,
    /// The allocator was full: nothing was mapped.
    Skipped,
    /// Memory reaches past what Sv39 maps one-to-one: nothing was mapped.
    OutOfReach,
    /// A write was not found where the mapping sent it.
    Misplaced,
}

/// Where the window goes: the highest root entry of the lower half that no memory range
/// touches; `None` where memory reaches past the lower half or fills it.
pub fn window(memory: &Ranges) -> Option<usize> {
    let giga = span(2);
    if memory.iter().any(|r| r.end > LOWER_HALF * giga) {
        return None;
    }
    (0..LOWER_HALF)
        .rev()
        .find(|&g| {
            !memory
                .iter()
                .any(|r| overlaps(&r, &(g * giga..(g + 1) * giga)))
        })
        .map(|g| g * giga)
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// The tables of one round trip, and the blocks they came from.
struct Tables<'r, 'a> {
    round: &'r Round<'a>,
    hart: usize,
    taken: Vec<Block>,
}

impl Tables<'_, '_> {
    /// A zeroed table from the allocator: `Ok(None)` where it is full.
    fn table(&mut self) -> Result<Option<*mut u64>, Error> {
        let block = match self.round.take(0, self.hart) {
            Ok(block) => block,
            Err(Error::OutOfMemory) => return Ok(None),
            Err(e) => return Err(e),
        };
        self.taken.push(block);
        // A block outside the usable map is counted where it was handed out; it is not
        // written.
        if !self.round.is_usable(block) {
            return Ok(None);
        }
        let table = self.round.address(block.index) as *mut u64;
        // SAFETY: a frame just allocated for this hart alone.
        unsafe { table.write_bytes(0, ENTRIES) };
        Ok(Some(table))
    }

    /// Maps `at..at + span(level)` one-to-one in `table` (of level `level`), the memory in it
    /// and none of the `no-map` ranges: whole where it can, else through a table of the next
    /// level. `Ok(false)` where the allocator ran out of frames for tables.
    fn identity(&mut self, table: *mut u64, level: u32, at: usize) -> Result<bool, Error> {
        let size = span(level);
        for i in 0..ENTRIES {
            let slot = at + i * size..at + (i + 1) * size;
            if !self.round.memory.iter().any(|r| overlaps(&r, &slot)) {
                continue;
            }
            let kept_out = self.round.no_map.iter().any(|r| overlaps(&r, &slot));
            let value = if !kept_out {
                entry(slot.start, LEAF)
            } else if level == 0 {
                continue;
            } else {
                let Some(next) = self.table()? else {
                    return Ok(false);
                };
                if !self.identity(next, level - 1, slot.start)? {
                    return Ok(false);
                }
                entry(next as usize, VALID)
            };
            // SAFETY: `i` is below 512, inside this hart's table frame.
            unsafe { *table.add(i) = value };
        }
        Ok(true)
    }
}

/// The round trip on hart `hart`; an allocator answer other than a block or `OutOfMemory`
/// is an error.
pub fn round_trip(round: &Round, hart: usize) -> Result<Trip, Error> {
    let Some(window) = window(round.memory) else {
        return Ok(Trip::OutOfReach);
    };
    let mut tables = Tables {
        round,
        hart,
        taken: Vec::with_capacity(8),
    };
    let built = build(&mut tables, window);
    let taken = core::mem::take(&mut tables.taken);
    let trip = match built {
        Ok(Some((root, data))) => Ok(trip(round, hart, root, data, window)),
        Ok(None) => Ok(Trip::Skipped),
        Err(e) => Err(e),
    };
    // The tables and the data no longer hold their owner's stamps, by design.
    for block in &taken {
        round.stamp(*block);
    }
    give_back(round, hart, &taken).and(trip)
}

/// Builds the tables and takes the data block: `(root, data)`, or `None` where the allocator
/// was full.
fn build(tables: &mut Tables, window: usize) -> Result<Option<(usize, Block)>, Error> {
    let (Some(root), Some(middle), Some(leaf)) =
        (tables.table()?, tables.table()?, tables.table()?)
    else {
        return Ok(None);
    };
    let data = match tables.round.take(DATA_ORDER, tables.hart) {
        Ok(block) => block,
        Err(Error::OutOfMemory) => return Ok(None),
        Err(e) => return Err(e),
    };
    tables.taken.push(data);
    if !tables.round.is_usable(data) || !tables.identity(root, 2, 0)? {
        return Ok(None);
    }
    let round = tables.round;
    // SAFETY: each index is below 512 (`vpn` masks it), so every write stays in its table's
    // frame, which this hart owns; the window's root entry is one the identity map left empty.
    unsafe {
        *root.add(vpn(window, 2)) = entry(middle as usize, VALID);
        *middle.add(vpn(window, 1)) = entry(leaf as usize, VALID);
        for page in 0..4 {
            let frame = round.address(data.index + 3 - page);
            let flags = VALID | READ | WRITE | ACCESSED | DIRTY;
            *leaf.add(vpn(window, 0) + page) = entry(frame, flags);
        }
    }
    Ok(Some((root as usize, data)))
}

/// Switches to the tables at `root`, writes through the window, switches back and looks for
/// each write in the data frames.
fn trip(round: &Round, hart: usize, root: usize, data: Block, window: usize) -> Trip {
    let pattern = |page: usize| 0x5EED_0000_0000 | (hart as u64) << 16 | page as u64;
    let satp = SV39 | (hart + 1) << 44 | root >> 12;
    let mut seen_through_mapping = true;
    // SAFETY: the tables map all memory one-to-one but the no-map ranges (code, stacks,
    // metadata and every usable frame the interrupt handler may stamp; the console is the
    // firmware's), so execution goes on where it was; the window maps four frames this hart
    // owns. `sfence.vma` makes the switches take effect; satp 0 is bare mode again.
    unsafe {
        asm!("csrw satp, {}", "sfence.vma", in(reg) satp);
        for page in 0..4 {
            let va = (window + page * FRAME) as *mut u64;
            va.write_volatile(pattern(page));
            seen_through_mapping &= va.read_volatile() == pattern(page);
        }
        asm!("csrw satp, zero", "sfence.vma");
    }
    let landed = (0..4).all(|page| {
        let frame = round.address(data.index + 3 - page) as *const u64;
        // SAFETY: a data frame this hart owns.
        unsafe { frame.read_volatile() == pattern(page) }
    });
    if seen_through_mapping && landed {
        Trip::Done
    } else {
        Trip::Misplaced
    }
}

fn give_back(round: &Round, hart: usize, taken: &[Block]) -> Result<(), Error> {
    taken
        .iter()
        .try_for_each(|&block| round.release(block, hart))
}
