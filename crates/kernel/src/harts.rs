//! The harts: their stacks, their numbers, starting them through the firmware's HSM
//! extension, and the barrier that runs them in rounds.
//!
//! A hart has a firmware id (any value the device tree names) and an index, dense from 0:
//! the boot hart is 0, whatever its id, and the others follow in device-tree order. The index
//! is what the kernel passes as the allocators' core hint and keeps in `tp`; per-hart state
//! is a table of [`Hart`]s, one per hart the device tree names, built on the heap once there
//! is one. So nothing is sized by a compile-time hart count: only the boot hart's stack is
//! static; the others' are carved from usable memory, as many as the device tree asks for.

use alloc::vec::Vec;
use core::arch::asm;
use core::cell::UnsafeCell;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering::*};

use crate::sbi;
use crate::trap::{self, HartIrq};

/// The most harts the kernel runs, far above the 512 of QEMU's `virt` machine; the bound
/// comes from the owner field of the stress test's block words (`stress::Block`). A device
/// tree that names more is refused, naming the limit.
pub const MAX_HARTS: usize = 4096;
/// Each hart's stack.
pub const STACK: usize = 64 << 10;

/// The boot hart's stack, in `.bss` (inside the kernel image, so out of the memory map).
/// `_start` points `sp` at its top before anything is known about the machine.
#[repr(C, align(4096))]
pub struct BootStack(UnsafeCell<[u8; STACK]>);

// SAFETY: only the boot hart uses it, through `sp`; Rust never reads the array.
unsafe impl Sync for BootStack {}

#[no_mangle]
pub static BOOT_STACK: BootStack = BootStack(UnsafeCell::new([0; STACK]));

/// Where a started hart is: the boot hart moves it from `STARTING` to `KEPT_OUT` at the
/// deadline, the hart itself to `ONLINE` when it arrives, and only one of the two moves
/// wins, so a hart is either counted in the round barrier or never joins it.
const STARTING: u8 = 0;
const ONLINE: u8 = 1;
const KEPT_OUT: u8 = 2;

/// One hart. `_secondary_start` reads the first two fields by offset (the opaque argument of
/// the HSM start call points here), so their order is fixed. Padded to a cache line: each
/// hart's interrupt counters are written by that hart alone.
#[repr(C, align(64))]
pub struct Hart {
    /// The top of this hart's stack (offset 0).
    stack_top: usize,
    /// This hart's index (offset 8).
    pub index: usize,
    /// The firmware's id of this hart.
    pub id: usize,
    state: AtomicU8,
    pub irq: HartIrq,
}

/// The table of harts (`HART_COUNT` of them), published by the boot hart before it starts
/// any other.
static HARTS: AtomicPtr<Hart> = AtomicPtr::new(core::ptr::null_mut());
static HART_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Every hart the device tree names, the boot hart first; empty before [`init`].
pub fn all() -> &'static [Hart] {
    let harts = HARTS.load(Acquire);
    if harts.is_null() {
        return &[];
    }
    // SAFETY: `init` leaked a slice of this length at this address, never freed; the length
    // was stored before the pointer was published (Release/Acquire).
    unsafe { core::slice::from_raw_parts(harts, HART_COUNT.load(Relaxed)) }
}

/// This hart's entry in the table.
pub fn this() -> &'static Hart {
    &all()[this_hart()]
}

/// This hart's index, which `_start` and `_secondary_start` keep in `tp`.
pub fn this_hart() -> usize {
    let hart: usize;
    // SAFETY: reads `tp`, which nothing but the entry code writes.
    unsafe { asm!("mv {}, tp", out(reg) hart) };
    hart
}

/// Builds the table: the boot hart (id `boot`) at index 0, then every other id in `ids`,
/// each with a stack carved from `stacks` (`STACK` bytes per hart but the boot hart).
pub fn init(ids: &[usize], boot: usize, stacks: Range<usize>) {
    let others = ids.iter().copied().filter(|&id| id != boot);
    let harts: Vec<Hart> = core::iter::once(boot)
        .chain(others)
        .enumerate()
        .map(|(index, id)| Hart {
            // The boot hart runs on `BOOT_STACK`; its entry here is never read.
            stack_top: stacks.start + index * STACK,
            index,
            id,
            state: AtomicU8::new(if index == 0 { ONLINE } else { STARTING }),
            irq: HartIrq::new(),
        })
        .collect();
    HART_COUNT.store(harts.len(), Relaxed);
    HARTS.store(harts.leak().as_mut_ptr(), Release);
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

/// Set once the round barrier knows how many harts run.
static COUNTED: AtomicBool = AtomicBool::new(false);

extern "C" {
    fn _secondary_start();
}

/// What starting the other harts came to.
pub struct Started {
    /// Harts in the round barrier, the boot hart included.
    pub running: usize,
    /// Ids of harts the firmware would not start.
    pub refused: Vec<usize>,
    /// Ids of harts started that had not arrived by the deadline: kept out for good.
    pub late: Vec<usize>,
}

/// Starts every hart of the table but the boot hart, waits (up to a second) until they run,
/// and sets the round barrier to those that arrived in time and the boot hart.
pub fn start_others(timebase_hz: u64) -> Started {
    let mut refused = Vec::new();
    for hart in &all()[1..] {
        let record = hart as *const Hart as usize;
        if let Err(e) = sbi::hart_start(hart.id, _secondary_start as *const () as usize, record) {
            crate::println!("hart {}: the firmware would not start it ({e})", hart.id);
            hart.state.store(KEPT_OUT, Relaxed);
            refused.push(hart.id);
        }
    }
    let state = |s: u8| all().iter().filter(move |h| h.state.load(Acquire) == s);
    let deadline = trap::now().saturating_add(timebase_hz);
    while state(STARTING).next().is_some() && trap::now() < deadline {
        core::hint::spin_loop();
    }
    let late = all()
        .iter()
        .filter(|h| {
            h.state
                .compare_exchange(STARTING, KEPT_OUT, AcqRel, Acquire)
                .is_ok()
        })
        .map(|h| h.id)
        .collect();
    let running = state(ONLINE).count();
    ROUNDS.harts.store(running, Release);
    COUNTED.store(true, Release);
    Started {
        running,
        refused,
        late,
    }
}

/// Called by each started hart once it runs: returns when the round barrier counts it, or
/// never, where the hart came after the deadline and the barrier does not count it.
pub fn online(hart: &Hart) {
    if hart
        .state
        .compare_exchange(STARTING, ONLINE, AcqRel, Acquire)
        .is_err()
    {
        crate::park();
    }
    while !COUNTED.load(Acquire) {
        core::hint::spin_loop();
    }
}
