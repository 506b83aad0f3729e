//! Sv39 page tables built from the allocator's frames: a hart allocates a root, a middle and
//! a leaf table and four data frames, maps all memory one-to-one with gigapages (so the
//! kernel keeps running) and the data frames, in reverse order, at a virtual address no
//! frame has, switches `satp` to the tables, writes through the mapping, switches back, finds
//! each write in the frame the mapping named, and frees everything.

use core::arch::asm;

use buddyfree::Error;

use crate::memmap::FRAME;
use crate::stress::{Block, Round};

const VALID: u64 = 1 << 0;
const READ: u64 = 1 << 1;
const WRITE: u64 = 1 << 2;
const EXECUTE: u64 = 1 << 3;
const ACCESSED: u64 = 1 << 6;
const DIRTY: u64 = 1 << 7;
const SV39: usize = 8 << 60;
const GIGA: usize = 1 << 30;

/// Where the data frames are mapped: above every physical address of the `virt` machine's
/// memory, inside Sv39's lower half.
const WINDOW: usize = 0x10_0000_0000;
const DATA_ORDER: u32 = 2;

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
    /// A write was not found where the mapping sent it.
    Misplaced,
}

/// The round trip on hart `hart`; an allocator answer other than a block or `OutOfMemory`
/// is an error.
pub fn round_trip(round: &Round, hart: usize) -> Result<Trip, Error> {
    let mut taken = [None; 4];
    let orders = [0, 0, 0, DATA_ORDER];
    for (slot, &order) in taken.iter_mut().zip(&orders) {
        match round.take(order, hart) {
            Ok(block) => *slot = Some(block),
            Err(Error::OutOfMemory) => break,
            Err(e) => return give_back(round, hart, &taken).and(Err(e)),
        }
    }
    // A block outside the usable map is counted where it was handed out; it is not written.
    let usable = taken.iter().flatten().all(|&b| round.is_usable(b));
    let [Some(root), Some(middle), Some(leaf), Some(data)] = taken.map(|b| b.filter(|_| usable))
    else {
        return give_back(round, hart, &taken).map(|()| Trip::Skipped);
    };
    let table = |block: Block| round.address(block.index) as *mut u64;
    for block in [root, middle, leaf] {
        // SAFETY: a frame just allocated for this hart alone.
        unsafe { table(block).write_bytes(0, FRAME / 8) };
    }
    // SAFETY: each index below is below 512, so every write stays in its table's frame, which
    // this hart owns.
    unsafe {
        for r in round.memory.iter() {
            for giga in r.start / GIGA..r.end.div_ceil(GIGA) {
                let flags = VALID | READ | WRITE | EXECUTE | ACCESSED | DIRTY;
                *table(root).add(giga) = entry(giga * GIGA, flags);
            }
        }
        *table(root).add(vpn(WINDOW, 2)) = entry(round.address(middle.index), VALID);
        *table(middle).add(vpn(WINDOW, 1)) = entry(round.address(leaf.index), VALID);
        for page in 0..4 {
            let frame = round.address(data.index + 3 - page);
            let flags = VALID | READ | WRITE | ACCESSED | DIRTY;
            *table(leaf).add(vpn(WINDOW, 0) + page) = entry(frame, flags);
        }
    }
    let pattern = |page: usize| 0x5EED_0000_0000 | (hart as u64) << 16 | page as u64;
    let satp = SV39 | (hart + 1) << 44 | round.address(root.index) >> 12;
    let mut seen_through_mapping = true;
    // SAFETY: the tables map all memory one-to-one (code, stacks, metadata, the console is
    // the firmware's), so execution goes on where it was; the window maps four frames this
    // hart owns. `sfence.vma` makes the switches take effect; satp 0 is bare mode again.
    unsafe {
        asm!("csrw satp, {}", "sfence.vma", in(reg) satp);
        for page in 0..4 {
            let va = (WINDOW + page * FRAME) as *mut u64;
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
    // The tables and the data no longer hold their owner's stamps, by design.
    for block in taken.iter().flatten() {
        round.stamp(*block);
    }
    give_back(round, hart, &taken)?;
    Ok(if seen_through_mapping && landed {
        Trip::Done
    } else {
        Trip::Misplaced
    })
}

fn give_back(round: &Round, hart: usize, taken: &[Option<Block>]) -> Result<(), Error> {
    taken
        .iter()
        .flatten()
        .try_for_each(|&block| round.release(block, hart))
}
