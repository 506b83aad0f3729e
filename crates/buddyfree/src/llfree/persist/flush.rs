//! Writing one cache line of the mapping back to the medium, after each transaction.

use crate::sync::atomic::AtomicU64;

/// Writes back the cache line holding a word of the lower level.
pub(crate) type Flush = fn(&AtomicU64);

/// How far each allocation and free is written back before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Nothing is written back per operation. A process crash (even SIGKILL) loses nothing:
    /// every store to a `MAP_SHARED` mapping is in the page cache (or, on DAX, in the CPU
    /// caches of a machine that keeps running) and reaches the file without help. A power
    /// failure or kernel crash may lose any operation since the last [`close`].
    ///
    /// [`close`]: super::PersistentLLFree::close
    None,
    /// The changed cache line is written back with `clwb` (else `clflushopt`, else `clflush`)
    /// and an `sfence` before the operation goes on: durable on a DAX mapping of persistent
    /// memory, where the line is the unit of persistence. On an ordinary file it only
    /// reaches the page cache (no better than `None`). On other architectures than x86_64
    /// this is [`Durability::Msync`].
    CacheLine,
    /// The page holding the changed line is written to the file with `msync(MS_SYNC)`: the
    /// portable fallback for ordinary files; one system call and one page write per
    /// operation, so slow. The device must write a page without tearing the line.
    Msync,
}

impl Durability {
    /// The best write-back this machine offers for this durability, if any.
    pub(crate) fn flush(self) -> Option<Flush> {
        match self {
            Durability::None => None,
            Durability::Msync => Some(msync_page),
            Durability::CacheLine => Some(cache_line()),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn cache_line() -> Flush {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // The maximum leaf is checked first, so an old CPU is never asked for a leaf it lacks.
    // Compilers before the intrinsics became safe (the MSRV among them) declare them `unsafe`.
    #[allow(unused_unsafe)]
    // SAFETY: `cpuid` exists on every x86_64 processor and only reads identification
    // registers; leaf 7 is asked for only when leaf 0 says it exists.
    let leaf7 = unsafe { (__cpuid(0).eax >= 7).then(|| __cpuid_count(7, 0)) };
    match leaf7.map(|l| l.ebx) {
        Some(ebx) if ebx & 1 << 24 != 0 => x86::clwb,
        Some(ebx) if ebx & 1 << 23 != 0 => x86::clflushopt,
        // clflush is part of SSE2, which every x86_64 has.
        _ => x86::clflush,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cache_line() -> Flush {
    msync_page
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::asm;
    use core::arch::x86_64::{_mm_clflush, _mm_sfence};

    use crate::sync::atomic::AtomicU64;

    /// Only selected when CPUID reports `clwb`.
    pub(super) fn clwb(word: &AtomicU64) {
        // SAFETY: `word` is a valid reference, so its line is mapped; `cache_line` picks this
        // function only on a CPU with clwb. The instruction changes no register.
        unsafe {
            asm!("clwb [{0}]", in(reg) word.as_ptr(), options(nostack, preserves_flags));
            _mm_sfence();
        }
    }

    /// Only selected when CPUID reports `clflushopt`.
    pub(super) fn clflushopt(word: &AtomicU64) {
        // SAFETY: as for `clwb`, with the clflushopt CPUID bit.
        unsafe {
            asm!("clflushopt [{0}]", in(reg) word.as_ptr(), options(nostack, preserves_flags));
            _mm_sfence();
        }
    }

    pub(super) fn clflush(word: &AtomicU64) {
        // SAFETY: `word` is a valid reference; clflush is SSE2, part of x86_64.
        unsafe { _mm_clflush(word.as_ptr().cast::<u8>()) }
    }
}

/// Writes the page holding `word` to the file. An I/O error cannot be returned from inside an
/// allocation; it shows again at [`close`](super::PersistentLLFree::close), whose `msync` of
/// the whole mapping fails the same way.
fn msync_page(word: &AtomicU64) {
    // SAFETY: sysconf has no preconditions. (It reads a value the C library keeps: no
    // system call, next to the msync.)
    let size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let page = word.as_ptr() as usize & !(size - 1);
    // SAFETY: `page` is the start of the mapped page holding `word` (the mapping is whole
    // pages); msync only writes it back.
    let _ = unsafe { libc::msync(page as *mut libc::c_void, size, libc::MS_SYNC) };
}
