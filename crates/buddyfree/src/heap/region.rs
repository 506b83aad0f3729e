//! The memory a heap lives in, and who gives it back.

#[cfg(feature = "alloc")]
use alloc::boxed::Box;
use core::ptr::NonNull;

#[cfg(all(feature = "std", unix))]
use crate::{ConfigRule, Error};

/// A contiguous range of memory a [`Heap`](super::Heap) hands out, with the right way to
/// release it on drop: nothing for borrowed memory, `Box` deallocation for a boxed slice,
/// `munmap` for an anonymous mapping.
///
/// The region keeps raw pointers only (a boxed slice is turned into one at once), so blocks
/// handed out of it stay valid however the region or heap is moved.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
}

#[derive(Debug)]
enum Owner {
    Borrowed,
    #[cfg(feature = "alloc")]
    Boxed,
    #[cfg(all(feature = "std", unix))]
    Mapped {
        addr: *mut libc::c_void,
        len: usize,
    },
}

// SAFETY: a region is plain memory the region exclusively owns or exclusively borrows; no
// thread affinity is attached to it (munmap and Box deallocation may run on any thread).
unsafe impl Send for Region {}
// SAFETY: `&Region` only exposes the address and length.
unsafe impl Sync for Region {}

impl Region {
    /// A region over memory borrowed for the rest of the program.
    pub fn from_static(memory: &'static mut [u8]) -> Self {
        let len = memory.len();
        // SAFETY: an exclusive `'static` borrow: valid, and the region's alone, for good.
        unsafe { Region::from_raw(NonNull::from(memory).cast(), len) }
    }

    /// A region owning a boxed slice, deallocated when the region is dropped.
    #[cfg(feature = "alloc")]
    ///
    /// A box's start is only as aligned as its allocator made it (often 16 bytes); a heap over
    /// it refuses larger alignments. Use [`Region::mmap`] or an aligned static for more.
    pub fn from_box(memory: Box<[u8]>) -> Self {
        let len = memory.len();
        Region {
            ptr: NonNull::from(Box::leak(memory)).cast(),
            len,
            owner: Owner::Boxed,
        }
    }

    /// A region over `len` bytes at `ptr` that the caller keeps owning.
    ///
    /// # Safety
    /// The memory must be valid for reads and writes, not used by anything else, and not
    /// released while the region (or any block handed out of it) is alive.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Self {
        Region {
            ptr,
            len,
            owner: Owner::Borrowed,
        }
    }

    /// A fresh anonymous private mapping of `len` bytes whose start is aligned to `align`
    /// (a power of two), unmapped when the region is dropped. Pages are reserved lazily.
    ///
    /// Fails with [`ConfigRule::RegionLength`] for a zero length (or one that overflows with
    /// the alignment), [`ConfigRule::NotPowerOfTwo`] for a bad alignment, and
    /// [`Error::Mmap`] with the OS error number when the system refuses the mapping.
    /// Never allocates on the heap, so it may be called from inside a global allocator.
    #[cfg(all(feature = "std", unix))]
    pub fn mmap(len: usize, align: usize) -> Result<Self, Error> {
        if len == 0 {
            return Err(ConfigRule::RegionLength.into());
        }
        if !align.is_power_of_two() {
            return Err(ConfigRule::NotPowerOfTwo.into());
        }
        // Over-map by `align` so an aligned start exists inside the mapping; the slack is
        // address space only (never touched, so never backed).
        let map_len = len
            .checked_add(align)
            .ok_or(Error::InvalidConfig(ConfigRule::RegionLength))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
        // no existing memory; the result is checked before use.
        let addr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                // Miri's mmap models private anonymous mappings alone; reserving swap or
                // not changes nothing it checks.
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | if cfg!(miri) { 0 } else { libc::MAP_NORESERVE },
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED || addr.is_null() {
            // Read at once: nothing between the call and here can have changed errno.
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(Error::Mmap(errno));
        }
        let skip = (addr as usize).next_multiple_of(align) - addr as usize;
        // SAFETY: `skip < align`, so the aligned start and the `len` bytes after it lie inside
        // the `len + align` bytes just mapped.
        let ptr = unsafe { addr.cast::<u8>().add(skip) };
        Ok(Region {
            // SAFETY: `addr` is not null and `skip` does not wrap (it stays in the mapping).
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            len,
            owner: Owner::Mapped { addr, len: map_len },
        })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.owner {
            Owner::Borrowed => {}
            #[cfg(feature = "alloc")]
            Owner::Boxed => {
                let slice = core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                // SAFETY: `ptr`/`len` came from `Box::leak` of a `Box<[u8]>` in `from_box`
                // and have not been released since.
                drop(unsafe { Box::from_raw(slice) });
            }
            #[cfg(all(feature = "std", unix))]
            Owner::Mapped { addr, len } => {
                // SAFETY: exactly the mapping made in `mmap`, unmapped once. A failure
                // could only mean a bad range, which this is not; nothing to do about it.
                unsafe { libc::munmap(addr, len) };
            }
        }
    }
}
