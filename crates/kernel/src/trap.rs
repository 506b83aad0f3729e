//! Supervisor traps: timer interrupts whose handler allocates and frees frames with the
//! never-waiting calls only, on whatever allocator the hart is running, while the interrupted
//! code may be inside that allocator's `alloc` or `free`. Any other trap (a page fault, an
//! illegal instruction) fails the boot at once.
//!
//! The handler runs on the interrupted code's stack with interrupts off (the hart clears
//! `sstatus.SIE` on entry), so it never nests; it takes no lock, prints nothing and uses no
//! heap. What it may not do, by design, is wait: where `try_alloc`/`try_free` answer
//! `WouldBlock` it counts that and tries again at the next tick.
//!
//! The period is whatever the kernel is given (`timer-ns=` on the command line), however
//! short: each deadline follows the previous one by the period, so ticks do not drift, but
//! never comes sooner after the handler returns than the handler took. A tick that costs more
//! than the period therefore slows the interrupted code to half speed at worst, and never
//! stops it, as re-arming from `now()` with no gap did.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed};

use buddyfree::Error;

use crate::harts::{self, this_hart};
use crate::sbi;
use crate::stress::{Block, Round};

// Saves the registers a Rust function may clobber (ra, t0-t6, a0-a7), calls the handler,
// restores them and returns to the interrupted instruction.
global_asm!(
    r#"
    .section .text
    .balign 4
    .globl trap_entry
trap_entry:
    addi sp, sp, -16*8
    sd ra, 0*8(sp)
    sd t0, 1*8(sp)
    sd t1, 2*8(sp)
    sd t2, 3*8(sp)
    sd t3, 4*8(sp)
    sd t4, 5*8(sp)
    sd t5, 6*8(sp)
    sd t6, 7*8(sp)
    sd a0, 8*8(sp)
    sd a1, 9*8(sp)
    sd a2, 10*8(sp)
    sd a3, 11*8(sp)
    sd a4, 12*8(sp)
    sd a5, 13*8(sp)
    sd a6, 14*8(sp)
    sd a7, 15*8(sp)
    call trap_handler
    ld ra, 0*8(sp)
    ld t0, 1*8(sp)
    ld t1, 2*8(sp)
    ld t2, 3*8(sp)
    ld t3, 4*8(sp)
    ld t4, 5*8(sp)
    ld t5, 6*8(sp)
    ld t6, 7*8(sp)
    ld a0, 8*8(sp)
    ld a1, 9*8(sp)
    ld a2, 10*8(sp)
    ld a3, 11*8(sp)
    ld a4, 12*8(sp)
    ld a5, 13*8(sp)
    ld a6, 14*8(sp)
    ld a7, 15*8(sp)
    addi sp, sp, 16*8
    sret
"#
);

extern "C" {
    fn trap_entry();
}

const SIE: usize = 1 << 1;
const STIE: usize = 1 << 5;
const TIMER_INTERRUPT: usize = (1 << 63) | 5;

/// The period when the command line names none: an interrupt every 10 µs of a hart's time
/// asked for (QEMU delivers fewer), often enough to land inside allocator calls hundreds of
/// times a round.
pub const DEFAULT_PERIOD_NS: u64 = 10_000;

/// Ticks of `time` between timer interrupts (from the period and the device tree's timebase).
static INTERVAL: AtomicU64 = AtomicU64::new(1000);

/// One hart's interrupt-side state. Written by the handler and by its hart with interrupts
/// off, so relaxed atomics suffice; they are atomics so that the boot hart may sum them.
pub struct HartIrq {
    /// The round whose allocator the handler uses; null when timer interrupts are off.
    round: AtomicPtr<Round<'static>>,
    /// The `time` the pending tick was asked for.
    deadline: AtomicU64,
    /// A block the handler allocated and has not yet freed (packed by `Block`), or 0.
    held: AtomicU64,
    /// Set by the hart around its `alloc` and `free` calls.
    pub in_call: AtomicBool,
    pub ticks: AtomicUsize,
    /// Ticks whose next deadline was pushed past the period, to give the interrupted code
    /// as long as the handler took.
    pub floored: AtomicUsize,
    /// Ticks that arrived while the hart was inside `alloc` or `free`.
    pub inside_call: AtomicUsize,
    pub allocs: AtomicUsize,
    pub would_block: AtomicUsize,
    /// Answers the documentation does not allow, or blocks that failed their checks.
    pub wrong: AtomicUsize,
}

impl HartIrq {
    pub const fn new() -> Self {
        HartIrq {
            round: AtomicPtr::new(core::ptr::null_mut()),
            deadline: AtomicU64::new(0),
            held: AtomicU64::new(0),
            in_call: AtomicBool::new(false),
            ticks: AtomicUsize::new(0),
            floored: AtomicUsize::new(0),
            inside_call: AtomicUsize::new(0),
            allocs: AtomicUsize::new(0),
            would_block: AtomicUsize::new(0),
            wrong: AtomicUsize::new(0),
        }
    }
}

/// Sets the period of every hart's timer to `period_ns` of a `timebase_hz` clock, at least
/// one tick of it; returns the ticks.
pub fn set_period(timebase_hz: u64, period_ns: u64) -> u64 {
    let ticks = u128::from(timebase_hz) * u128::from(period_ns) / 1_000_000_000;
    let ticks = u64::try_from(ticks).unwrap_or(u64::MAX).max(1);
    INTERVAL.store(ticks, Relaxed);
    ticks
}

/// Points this hart's traps at the handler.
pub fn install() {
    // SAFETY: `trap_entry` is 4-byte aligned (direct mode) and saves what it clobbers.
    unsafe { asm!("csrw stvec, {}", in(reg) trap_entry as *const () as usize) };
}

pub fn now() -> u64 {
    let time: u64;
    // SAFETY: reads the `time` CSR, which the firmware lets S-mode read.
    unsafe { asm!("rdtime {}", out(reg) time) };
    time
}

/// Asks for the tick after the one that came at `entered` and was handled until now: a
/// period after the previous deadline, but no sooner after now than the handler took.
fn rearm(irq: &HartIrq, entered: u64) {
    let left = now();
    let spent = left.saturating_sub(entered).max(1);
    let next = irq
        .deadline
        .load(Relaxed)
        .saturating_add(INTERVAL.load(Relaxed));
    let earliest = left.saturating_add(spent);
    let next = if next < earliest {
        irq.floored.fetch_add(1, Relaxed);
        earliest
    } else {
        next
    };
    irq.deadline.store(next, Relaxed);
    sbi::set_timer(next);
}

/// Starts timer interrupts on this hart, whose handler uses `round`'s allocator.
pub fn start(round: &Round) {
    let irq = &harts::this().irq;
    irq.round
        .store((round as *const Round).cast_mut().cast(), Relaxed);
    let first = now().saturating_add(INTERVAL.load(Relaxed));
    irq.deadline.store(first, Relaxed);
    sbi::set_timer(first);
    // SAFETY: enables the supervisor timer interrupt; `stvec` points at the handler.
    unsafe { asm!("csrs sie, {}", "csrs sstatus, {}", in(reg) STIE, in(reg) SIE) };
}

/// Stops timer interrupts on this hart and frees the block the handler still holds, if any.
pub fn stop() {
    // SAFETY: disables interrupts; nothing depends on them staying on.
    unsafe { asm!("csrc sstatus, {}", "csrc sie, {}", in(reg) SIE, in(reg) STIE) };
    sbi::set_timer(u64::MAX);
    let irq = &harts::this().irq;
    let round = irq.round.swap(core::ptr::null_mut(), Relaxed);
    if let Some(block) = Block::unpack(irq.held.swap(0, Relaxed)) {
        // SAFETY: `round` was set by `start` from a round that outlives the interrupts.
        let round = unsafe { &*round };
        if round.release(block, this_hart()).is_err() {
            irq.wrong.fetch_add(1, Relaxed);
        }
    }
}

#[no_mangle]
extern "C" fn trap_handler() {
    let entered = now();
    let (cause, epc, tval): (usize, usize, usize);
    // SAFETY: reads the trap CSRs.
    unsafe {
        asm!("csrr {}, scause", "csrr {}, sepc", "csrr {}, stval", out(reg) cause, out(reg) epc, out(reg) tval)
    };
    if cause != TIMER_INTERRUPT {
        // SAFETY: back to bare mode, in case the fault came from page tables that a broken
        // allocator let someone overwrite: the report and the finisher must be reachable.
        unsafe { asm!("csrw satp, zero", "sfence.vma") };
        crate::console::print_unlocked(format_args!(
            "FAILED: unexpected trap on hart {}: scause {cause:#x}, sepc {epc:#x}, stval {tval:#x}\n",
            this_hart()
        ));
        sbi::shutdown(true);
    }
    let irq = &harts::this().irq;
    irq.ticks.fetch_add(1, Relaxed);
    if irq.in_call.load(Relaxed) {
        irq.inside_call.fetch_add(1, Relaxed);
    }
    let round = irq.round.load(Relaxed);
    if !round.is_null() {
        // SAFETY: the round outlives the interrupts: `stop` clears the pointer first.
        on_tick(unsafe { &*round }, irq);
    }
    rearm(irq, entered);
}

/// One tick's work: free the block held since the last tick, or allocate one, never waiting.
fn on_tick(round: &Round, irq: &HartIrq) {
    let hart = this_hart();
    let count = |c: &AtomicUsize| {
        c.fetch_add(1, Relaxed);
    };
    match Block::unpack(irq.held.load(Relaxed)) {
        Some(block) => match round.try_release(block, hart) {
            Ok(()) => irq.held.store(0, Relaxed),
            Err(Error::WouldBlock) => count(&irq.would_block),
            Err(_) => count(&irq.wrong),
        },
        None => {
            let order = (irq.ticks.load(Relaxed) % 3) as u32;
            match round.try_take(order, hart) {
                Ok(block) => {
                    irq.held.store(block.pack(), Relaxed);
                    count(&irq.allocs);
                }
                Err(Error::WouldBlock) => count(&irq.would_block),
                Err(Error::OutOfMemory) => {}
                Err(_) => count(&irq.wrong),
            }
        }
    }
}
