//! The harts: their boot stacks, their numbers, starting them through the firmware's HSM
//! extension, and the barrier that runs them in rounds.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

use crate::sbi;
use crate::trap;

/// Harts with a boot stack; a hart numbered higher is not started.
pub const MAX_HARTS: usize = 8;
/// A power of two (`_start` shifts by its log).
pub const STACK: usize = 64 << 10;

/// The boot stacks, one per hart id, in `.bss` (inside the kernel image, so out of the memory
/// map). `_start` points `sp` at the top of its hart's.
#[repr(C, align(4096))]
pub struct Stacks(UnsafeCell<[[u8; STACK]; MAX_HARTS]>);

// SAFETY: each hart uses only its own stack, through `sp`; Rust never reads the array.
unsafe impl Sync for Stacks {}

#[no_mangle]
pub static BOOT_STACKS: Stacks = Stacks(UnsafeCell::new([[0; STACK]; MAX_HARTS]));

/// This hart's id, which `_start` keeps in `tp`.
pub fn this_hart() -> usize {
    let hart: usize;
    // SAFETY: reads `tp`, which nothing but `_start` writes.
    unsafe { asm!("mv {}, tp", out(reg) hart) };
    hart
}

/// A reusable barrier for `harts` harts.
pub struct Barrier {
    harts: AtomicUsize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Barrier {
    pub const fn new() -> Self {
        Barrier {
            harts: AtomicUsize::new(1),
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    pub fn wait(&self) {
        let generation = self.generation.load(Acquire);
        if self.arrived.fetch_add(1, AcqRel) + 1 == self.harts.load(Acquire) {
            self.arrived.store(0, Relaxed);
            self.generation.fetch_add(1, Release);
        } else {
            while self.generation.load(Acquire) == generation {
                core::hint::spin_loop();
            }
        }
    }
}

pub static ROUNDS: Barrier = Barrier::new();

/// Harts that have reached `secondary_main`.
static ONLINE: AtomicUsize = AtomicUsize::new(0);
/// Set once the round barrier knows how many harts run.
static COUNTED: AtomicBool = AtomicBool::new(false);

extern "C" {
    fn _secondary_start();
}

/// Starts every hart in `ids` but `boot`, waits (up to a second) until they run, and sets
/// the round barrier to them and the boot hart. Returns how many harts run.
pub fn start_others(ids: impl Iterator<Item = usize>, boot: usize, timebase_hz: u64) -> usize {
    let mut started = 0;
    for hart in ids.filter(|&h| h != boot && h < MAX_HARTS) {
        match sbi::hart_start(hart, _secondary_start as *const () as usize, 0) {
            Ok(()) => started += 1,
            Err(e) => crate::println!("hart {hart}: the firmware would not start it ({e})"),
        }
    }
    let deadline = trap::now() + timebase_hz;
    while ONLINE.load(Acquire) < started && trap::now() < deadline {
        core::hint::spin_loop();
    }
    let harts = ONLINE.load(Acquire) + 1;
    ROUNDS.harts.store(harts, Release);
    COUNTED.store(true, Release);
    harts
}

/// Called by each started hart once it runs: returns when the round barrier counts it.
pub fn online() {
    ONLINE.fetch_add(1, Release);
    while !COUNTED.load(Acquire) {
        core::hint::spin_loop();
    }
}
