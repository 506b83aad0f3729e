//! The memory the lower level lives in: a heap allocation it owns (volatile LLFree) or cache
//! lines borrowed from a file mapping that the persistent zone owns (`persist.rs`). Either way
//! it is a pointer and a length, so the hot path indexes it exactly like a boxed slice.

use alloc::boxed::Box;
use core::ops::Deref;
use core::ptr::NonNull;

use crate::config::filled;
use crate::sync::atomic::AtomicU64;
use crate::Error;

/// Words in a cache line.
pub(crate) const LINE_WORDS: usize = 8;

/// One cache line of the lower level.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [AtomicU64; LINE_WORDS]);

/// The cache lines of a lower level.
pub(crate) struct Lines {
    ptr: NonNull<Line>,
    len: usize,
    /// Whether `ptr` came from `Box<[Line]>` (freed on drop) or is borrowed.
    owned: bool,
}

// SAFETY: `Lines` is either a `Box<[Line]>` or a borrow of memory that outlives it (the
// contract of `Lines::borrowed`); its contents are atomics, which are `Send + Sync`.
unsafe impl Send for Lines {}
// SAFETY: as above: shared access only ever goes through atomics.
unsafe impl Sync for Lines {}

impl Lines {
    /// `len` zeroed lines on the heap, or an error if they cannot be reserved.
    pub(crate) fn zeroed(len: usize) -> Result<Lines, Error> {
        let lines = filled(len, |_| Line(core::array::from_fn(|_| AtomicU64::new(0))))?;
        let raw = Box::into_raw(lines);
        Ok(Lines {
            ptr: NonNull::new(raw.cast::<Line>()).expect("Box::into_raw is never null"),
            len,
            owned: true,
        })
    }

    /// `len` lines at `ptr`, borrowed.
    ///
    /// # Safety
    /// `ptr` must be aligned to 64 bytes and valid for reads and writes of `len` lines for as
    /// long as the returned value (and the lower level built on it) lives, and nothing else in
    /// this process may access that memory other than through atomic operations.
    #[cfg(all(feature = "persist", not(loom)))]
    pub(crate) unsafe fn borrowed(ptr: NonNull<Line>, len: usize) -> Lines {
        Lines {
            ptr,
            len,
            owned: false,
        }
    }
}

impl Deref for Lines {
    type Target = [Line];

    #[inline(always)]
    fn deref(&self) -> &[Line] {
        // SAFETY: `ptr` is valid for `len` lines for our lifetime (owned, or by the contract
        // of `Lines::borrowed`).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        if self.owned {
            let slice = core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: an owned `ptr` came from `Box::into_raw` of a `Box<[Line]>` of `len`
            // lines in `Lines::zeroed`, and is dropped only here, once.
            drop(unsafe { Box::from_raw(slice) });
        }
    }
}
