//! The calls into the firmware (the RISC-V Supervisor Binary Interface) the kernel makes:
//! the console, starting harts (HSM), the timer, and the system reset that ends QEMU.

use core::arch::asm;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The legacy console extension: one byte out.
const LEGACY_PUTCHAR: usize = 0x01;
/// Hart state management.
const HSM: usize = 0x0048_534D;
/// The timer.
const TIME: usize = 0x5449_4D45;
/// System reset.
const SRST: usize = 0x5352_5354;

/// An SBI call: `Ok(value)` or the firmware's negative error code.
fn call(extension: usize, function: usize, args: [usize; 3]) -> Result<usize, isize> {
    let (error, value): (isize, usize);
    // SAFETY: `ecall` from S-mode traps into the firmware, which follows the SBI calling
    // convention: it reads a0-a2, a6, a7 and writes a0 and a1 only.
    unsafe {
        asm!(
            "ecall",
            inlateout("a0") args[0] => error,
            inlateout("a1") args[1] => value,
            in("a2") args[2],
            in("a6") function,
            in("a7") extension,
        );
    }
    if error == 0 {
        Ok(value)
    } else {
        Err(error)
    }
}

/// Writes one byte to the firmware's console.
pub fn putchar(byte: u8) {
    let _ = call(LEGACY_PUTCHAR, 0, [byte as usize, 0, 0]);
}

/// Starts hart `hart` at physical address `entry` in S-mode, with `a0 = hart` and
/// `a1 = opaque`.
pub fn hart_start(hart: usize, entry: usize, opaque: usize) -> Result<(), isize> {
    call(HSM, 0, [hart, entry, opaque]).map(|_| ())
}

/// Asks for a supervisor timer interrupt when `time` reaches `at` (and clears a pending one).
pub fn set_timer(at: u64) {
    let _ = call(TIME, 0, [at as usize, 0, 0]);
}

/// The address of QEMU's test finisher (`sifive,test0` in the device tree), or 0.
static FINISHER: AtomicUsize = AtomicUsize::new(0);

/// Tells `shutdown` where the machine's test finisher is.
pub fn set_finisher(address: usize) {
    FINISHER.store(address, Relaxed);
}

/// Powers the machine off through the firmware's system reset. OpenSBI 1.1 powers QEMU off
/// with exit status 0 whatever the reset reason, so a failed run first asks the test
/// finisher, which the firmware drives for its own shutdown, for exit status 1.
pub fn shutdown(failed: bool) -> ! {
    const SHUTDOWN: usize = 0;
    const NO_REASON: usize = 0;
    const SYSTEM_FAILURE: usize = 1;
    const FINISHER_FAIL: u32 = 0x3333 | 1 << 16;
    let finisher = FINISHER.load(Relaxed);
    if failed && finisher != 0 {
        // SAFETY: the device tree names this MMIO register; the write ends the machine.
        unsafe { (finisher as *mut u32).write_volatile(FINISHER_FAIL) };
    }
    let reason = if failed { SYSTEM_FAILURE } else { NO_REASON };
    let _ = call(SRST, 0, [SHUTDOWN, reason, 0]);
    // The firmware has no reset extension: nothing else can end the machine.
    loop {
        // SAFETY: waits for an interrupt; none is enabled, so this parks the hart.
        unsafe { asm!("wfi") };
    }
}
