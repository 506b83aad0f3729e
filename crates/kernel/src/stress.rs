//! What every hart does with the allocator of a round: allocate and free blocks of mixed
//! orders, hand some to other harts to free, build page tables, all while timer interrupts
//! allocate too. Every frame of every block carries its owner's stamp in its first word, in
//! the frame itself, checked before the block is freed: two owners of one frame overwrite
//! each other's stamps, so an overlap is caught by memory, not by the allocator's books.

use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

use buddyfree::{BlockAlloc, Error};

use crate::harts::{self, MAX_HARTS};
use crate::memmap::{Ranges, FRAME};
use crate::paging::{self, Trip};
use crate::trap;

/// Steps all harts take per round together, split between them (so that a machine with
/// many harts boots in about the time of one with four), and the least and most each takes.
const ROUND_STEPS: usize = 160_000;
const HART_STEPS: Range<usize> = 4_000..40_000;
/// Blocks a hart holds at most.
const LIVE: usize = 48;
/// A page-table round trip every this many steps.
const PAGE_TABLES_EVERY: usize = 2_000;

/// One allocator under test and the memory it manages: frame `i` is at `base + i * FRAME`.
pub struct Round<'a> {
    pub alloc: &'a dyn BlockAlloc,
    pub base: usize,
    pub usable: &'a Ranges,
    pub memory: &'a Ranges,
    /// The reserved ranges the page tables must not map.
    pub no_map: &'a Ranges,
    pub max_order: u32,
    /// Steps each hart takes.
    steps: usize,
    seq: AtomicU32,
    /// Blocks handed out that reach outside the usable map.
    pub outside: AtomicUsize,
    /// Frames whose stamp was not their owner's when the block was freed.
    pub overwritten: AtomicUsize,
    /// Answers the documentation does not allow.
    pub wrong: AtomicUsize,
    pub stamped: AtomicUsize,
    /// Page-table round trips made, and those where a write did not land where mapped.
    pub page_tables: AtomicUsize,
    pub mapping_wrong: AtomicUsize,
    /// Round trips not made because memory reaches past Sv39's one-to-one map.
    pub out_of_reach: AtomicUsize,
}

/// A block and who holds it; `owner` is a hart's index, or `MAX_HARTS` + its index for its
/// interrupt handler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Block {
    pub index: usize,
    pub order: u32,
    owner: u32,
    seq: u32,
}

/// The fields of a block word, low bit first: the frame index, the order, the owner and a
/// sequence number (wrapping), then the bit that says a block is there.
const INDEX_BITS: u32 = 33;
const ORDER_BITS: u32 = 5;
const OWNER_BITS: u32 = 13;
const SEQ_BITS: u32 = 12;
const _: () = assert!(INDEX_BITS + ORDER_BITS + OWNER_BITS + SEQ_BITS == 63);
const _: () = assert!(2 * MAX_HARTS <= 1 << OWNER_BITS);

/// Frames the stress test can name: the span of memory (from the lowest address) must not
/// be larger, which the boot hart checks.
pub const MAX_FRAMES: usize = 1 << INDEX_BITS;

const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

impl Block {
    const PRESENT: u64 = 1 << 63;

    /// The block in one word (never 0), for atomics.
    pub fn pack(self) -> u64 {
        let mut word = self.seq as u64 & mask(SEQ_BITS);
        word = word << OWNER_BITS | self.owner as u64 & mask(OWNER_BITS);
        word = word << ORDER_BITS | self.order as u64 & mask(ORDER_BITS);
        word = word << INDEX_BITS | self.index as u64 & mask(INDEX_BITS);
        Self::PRESENT | word
    }

    pub fn unpack(word: u64) -> Option<Block> {
        let field = |shift: u32, bits: u32| word >> shift & mask(bits);
        (word & Self::PRESENT != 0).then(|| Block {
            index: field(0, INDEX_BITS) as usize,
            order: field(INDEX_BITS, ORDER_BITS) as u32,
            owner: field(INDEX_BITS + ORDER_BITS, OWNER_BITS) as u32,
            seq: field(INDEX_BITS + ORDER_BITS + OWNER_BITS, SEQ_BITS) as u32,
        })
    }

    fn frames(self) -> Range<usize> {
        self.index..self.index + (1 << self.order)
    }

    /// The word frame `frame` of this block holds while the block is its owner's: a tag,
    /// the owner, the sequence number and the frame's low bits.
    fn stamp(self, frame: usize) -> u64 {
        0xB0 << 56
            | (self.owner as u64 & mask(OWNER_BITS)) << 43
            | (self.seq as u64 & mask(SEQ_BITS)) << 31
            | frame as u64 & mask(31)
    }
}

/// The owner number of hart `hart`'s interrupt handler.
pub fn handler_owner(hart: usize) -> u32 {
    (MAX_HARTS + hart) as u32
}

impl<'a> Round<'a> {
    pub fn new(
        alloc: &'a dyn BlockAlloc,
        base: usize,
        usable: &'a Ranges,
        memory: &'a Ranges,
        no_map: &'a Ranges,
        harts: usize,
    ) -> Self {
        Round {
            alloc,
            base,
            usable,
            memory,
            no_map,
            max_order: alloc.max_order().min(10),
            steps: (ROUND_STEPS / harts.max(1)).clamp(HART_STEPS.start, HART_STEPS.end),
            seq: AtomicU32::new(0),
            outside: AtomicUsize::new(0),
            overwritten: AtomicUsize::new(0),
            wrong: AtomicUsize::new(0),
            stamped: AtomicUsize::new(0),
            page_tables: AtomicUsize::new(0),
            mapping_wrong: AtomicUsize::new(0),
            out_of_reach: AtomicUsize::new(0),
        }
    }

    pub fn address(&self, frame: usize) -> usize {
        self.base + frame * FRAME
    }

    fn word(&self, frame: usize) -> *mut u64 {
        self.address(frame) as *mut u64
    }

    /// A block the allocator answered with: checked against the usable map, then stamped.
    /// A block outside the map is counted and kept unstamped (writing the firmware's memory
    /// would fault); it is still freed later, so the books balance.
    fn placed(&self, index: usize, order: u32, owner: u32) -> Block {
        let block = Block {
            index,
            order,
            owner,
            seq: self.seq.fetch_add(1, Relaxed) & mask(SEQ_BITS) as u32,
        };
        if self.is_usable(block) {
            self.stamp(block);
            self.stamped.fetch_add(1 << order, Relaxed);
        } else {
            self.outside.fetch_add(1, Relaxed);
        }
        block
    }

    pub fn is_usable(&self, block: Block) -> bool {
        let bytes = self.address(block.index)..self.address(block.index + (1 << block.order));
        self.usable.contains(bytes)
    }

    /// Writes `block`'s owner stamp into each of its frames, if they are usable memory.
    pub fn stamp(&self, block: Block) {
        if !self.is_usable(block) {
            return;
        }
        for frame in block.frames() {
            // SAFETY: the frame is usable memory (checked above) that the allocator handed
            // to this block's owner alone; memory is identity-mapped.
            unsafe { self.word(frame).write_volatile(block.stamp(frame)) };
        }
    }

    /// Checks every stamp of `block` before it is freed.
    fn check(&self, block: Block) {
        if !self.is_usable(block) {
            return;
        }
        let overwritten = block
            .frames()
            // SAFETY: as in `placed`: the block is still its owner's.
            .filter(|&f| unsafe { self.word(f).read_volatile() } != block.stamp(f))
            .count();
        self.overwritten.fetch_add(overwritten, Relaxed);
    }

    /// Allocates a block for hart `hart` (`alloc`, which may wait).
    pub fn take(&self, order: u32, hart: usize) -> Result<Block, Error> {
        let index = in_call(hart, || self.alloc.alloc(order, hart))?;
        #[cfg(feature = "fault-double-alloc")]
        let index = fault::hand_out_twice(index, order);
        Ok(self.placed(index, order, hart as u32))
    }

    /// Frees a block (`free`, which may wait), after checking its stamps.
    pub fn release(&self, block: Block, hart: usize) -> Result<(), Error> {
        self.check(block);
        in_call(hart, || self.alloc.free(block.index, block.order, hart))
    }

    /// Allocates a block in hart `hart`'s interrupt handler (`try_alloc`, never waiting).
    pub fn try_take(&self, order: u32, hart: usize) -> Result<Block, Error> {
        #[cfg(not(feature = "fault-irq-waits"))]
        let index = self.alloc.try_alloc(order, hart)?;
        #[cfg(feature = "fault-irq-waits")]
        let index = self.alloc.alloc(order, hart)?;
        Ok(self.placed(index, order, handler_owner(hart)))
    }

    /// Frees a block in an interrupt handler (`try_free`, never waiting).
    pub fn try_release(&self, block: Block, hart: usize) -> Result<(), Error> {
        self.check(block);
        self.alloc.try_free(block.index, block.order, hart)
    }
}

/// Runs `f` with this hart's "inside an allocator call" flag set, for the interrupt handler
/// to count the ticks that land there.
fn in_call<T>(hart: usize, f: impl FnOnce() -> T) -> T {
    let irq = &harts::all()[hart].irq;
    irq.in_call.store(true, Relaxed);
    let answer = f();
    irq.in_call.store(false, Relaxed);
    answer
}

/// Blocks on their way from one hart to another, which frees them.
static MAILBOX: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// A small xorshift generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One hart's share of a round.
pub fn run(round: &Round, hart: usize, seed: u64) {
    let mut rng = Rng::new(seed ^ (hart as u64 + 1) << 32);
    let mut live: Vec<Block> = Vec::with_capacity(LIVE);
    let wrong = |answer: Result<(), Error>| {
        if answer.is_err() {
            round.wrong.fetch_add(1, Relaxed);
        }
    };
    trap::start(round);
    for step in 0..round.steps {
        if step % PAGE_TABLES_EVERY == 0 {
            let counter = match paging::round_trip(round, hart) {
                Ok(Trip::Done) => &round.page_tables,
                Ok(Trip::Skipped) => continue,
                Ok(Trip::OutOfReach) => &round.out_of_reach,
                Ok(Trip::Misplaced) => &round.mapping_wrong,
                Err(_) => &round.wrong,
            };
            counter.fetch_add(1, Relaxed);
        }
        match rng.below(10) {
            0..=4 if live.len() < LIVE => {
                // Small orders mostly, now and then the largest: half order 0, a quarter 1...
                let order = rng.next().trailing_zeros().min(round.max_order);
                match round.take(order, hart) {
                    Ok(block) => live.push(block),
                    Err(Error::OutOfMemory) => {}
                    Err(_) => wrong(Err(Error::Unsupported)),
                }
            }
            0..=6 if !live.is_empty() => {
                let block = live.swap_remove(rng.below(live.len()));
                wrong(round.release(block, hart));
            }
            7 if !live.is_empty() => {
                let block = live.swap_remove(rng.below(live.len()));
                let slot = &MAILBOX[rng.below(MAILBOX.len())];
                if slot
                    .compare_exchange(0, block.pack(), Release, Relaxed)
                    .is_err()
                {
                    wrong(round.release(block, hart));
                }
            }
            8 | 9 => {
                let slot = &MAILBOX[rng.below(MAILBOX.len())];
                if let Some(block) = Block::unpack(slot.swap(0, Acquire)) {
                    wrong(round.release(block, hart));
                }
            }
            _ => {}
        }
    }
    trap::stop();
    for block in live {
        wrong(round.release(block, hart));
    }
}

/// Frees the blocks still in the mailbox, after every hart has finished its share.
pub fn empty_mailbox(round: &Round, hart: usize) {
    for slot in &MAILBOX {
        if let Some(block) = Block::unpack(slot.swap(0, Acquire)) {
            if round.release(block, hart).is_err() {
                round.wrong.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The broken allocator of `--fault double-alloc`.
#[cfg(feature = "fault-double-alloc")]
mod fault {
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    static ORDER0: AtomicUsize = AtomicUsize::new(usize::MAX);
    static CALLS: AtomicUsize = AtomicUsize::new(0);

    /// Every 200th order-0 allocation answers the block of the previous one (its own block
    /// leaks), as an allocator that hands a frame out twice would.
    pub fn hand_out_twice(index: usize, order: u32) -> usize {
        if order != 0 {
            return index;
        }
        let previous = ORDER0.swap(index, Relaxed);
        if CALLS.fetch_add(1, Relaxed) % 200 == 199 && previous != usize::MAX {
            previous
        } else {
            index
        }
    }
}
