//! The two system calls the program needs, raw (Linux, x86_64), and the process entry.

use core::arch::asm;
#[cfg(not(test))]
use core::arch::global_asm;

/// `write(2)` of all of `bytes` to `fd`; errors are ignored (there is nowhere to report them).
pub fn write(fd: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let written: isize;
        // SAFETY: `write` reads `bytes.len()` bytes at `bytes.as_ptr()`, which are valid; the
        // kernel clobbers rcx and r11 only.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") 1isize => written,
                in("rdi") fd,
                in("rsi") bytes.as_ptr(),
                in("rdx") bytes.len(),
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        if written <= 0 {
            return;
        }
        bytes = &bytes[written as usize..];
    }
}

/// `exit_group(2)`.
pub fn exit(code: i32) -> ! {
    // SAFETY: `exit_group` does not return.
    unsafe {
        asm!("syscall", in("rax") 231, in("rdi") code, options(noreturn, nostack));
    }
}

// The process entry: the kernel leaves the stack 16-byte aligned with no return address, so
// a Rust function called from here sees the alignment the ABI promises.
#[cfg(not(test))]
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "and rsp, -16",
    "call {main}",
    "ud2",
    main = sym crate::main,
);
