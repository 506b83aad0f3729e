//! The standard allocator traits on [`Heap`]: `GlobalAlloc`, `allocator_api2`'s `Allocator`,
//! and `core`'s `Allocator` behind the `nightly` feature.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};

use super::{Error, Heap};
use crate::BlockAlloc;

impl<A: BlockAlloc> Heap<A> {
    /// `Allocator::allocate`: the whole block is returned, so callers may use its slack.
    /// Zero-sized requests get a dangling, aligned pointer, as the trait requires.
    pub(super) fn allocate_block(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if layout.size() == 0 {
            return Ok(NonNull::slice_from_raw_parts(dangling(layout), 0));
        }
        let order = self.order_of(layout)?;
        let (_, ptr) = self.alloc_index(order)?;
        Ok(NonNull::slice_from_raw_parts(ptr, self.unit() << order))
    }

    /// `Allocator::deallocate`. The trait lets `layout.size()` be anything between the
    /// requested size and the returned length; every such size maps to the same order,
    /// because the returned length is exactly the block of the requested order.
    pub(super) fn deallocate_block(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            self.free_or_count(ptr.as_ptr(), layout);
        }
    }
}

fn dangling(layout: Layout) -> NonNull<u8> {
    // An address equal to the (non-zero) alignment is aligned and never inside a heap, so a
    // zero-sized "allocation" can never be mistaken for a block.
    NonNull::new(ptr::without_provenance_mut(layout.align())).unwrap_or(NonNull::dangling())
}

// SAFETY: blocks are disjoint until freed (the `BlockAlloc` contract), lie inside the region
// the heap keeps alive, and are at least `layout.size()` bytes aligned to `layout.align()`
// (`order_of` refuses what the region cannot honour). Errors become null, never a panic.
unsafe impl<A: BlockAlloc> GlobalAlloc for Heap<A> {
    /// # Safety
    /// The contract of [`GlobalAlloc::alloc`].
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Heap::alloc(self, layout).map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    /// # Safety
    /// The contract of [`GlobalAlloc::dealloc`].
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.free_or_count(ptr, layout);
    }

    /// # Safety
    /// The contract of [`GlobalAlloc::realloc`].
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees; `ptr` is a block of this heap.
        unsafe { realloc_block(self, self, ptr, layout, new_size) }
    }
}

/// `GlobalAlloc::realloc` of a block of `heap` through `through` (the heap itself, or a
/// global allocator in front of it that may serve the new size elsewhere): the block stays
/// where the new size needs its order; else a new block from `through`, the contents
/// copied and the old block freed through it; null, nothing changed, where there is none.
///
/// # Safety
/// The contract of [`GlobalAlloc::realloc`] on `through`, for a block `ptr` of `heap`.
pub(super) unsafe fn realloc_block<A: BlockAlloc>(
    heap: &Heap<A>,
    through: &impl GlobalAlloc,
    ptr: *mut u8,
    layout: Layout,
    new_size: usize,
) -> *mut u8 {
    let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
        return ptr::null_mut();
    };
    // The block already serves the new size: nothing to move.
    if heap
        .order_of(new_layout)
        .is_ok_and(|new| heap.order_of(layout) == Ok(new))
    {
        return ptr;
    }
    // SAFETY: the caller's guarantees (a non-zero `new_size`) hold for `new_layout`.
    let new = unsafe { through.alloc(new_layout) };
    if !new.is_null() {
        // SAFETY: the caller guarantees `ptr` is a live block of at least `layout.size()`
        // bytes; `new` is a fresh allocation of at least `new_size` bytes, so both ranges
        // are valid and, being distinct live allocations, do not overlap. Then the old
        // block is returned to the allocator it came from, with its layout.
        unsafe {
            ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            through.dealloc(ptr, layout);
        }
    }
    new
}

/// The `Allocator` trait of `$module` (allocator-api2's, `core`'s) on [`Heap`]: the two
/// traits' methods are the same.
macro_rules! allocator_on_heap {
    ($(#[$attr:meta])* $($module:ident)::+) => {
        $(#[$attr])*
        // SAFETY: as for `GlobalAlloc`; the returned slice is exactly the block, and
        // `deallocate` maps every size the trait allows back to that block's order (see
        // `deallocate_block`).
        unsafe impl<A: BlockAlloc> $($module)::+::Allocator for Heap<A> {
            fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, $($module)::+::AllocError> {
                self.allocate_block(layout)
                    .map_err(|_| $($module)::+::AllocError)
            }

            /// # Safety
            /// The contract of the trait's `deallocate`.
            unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                self.deallocate_block(ptr, layout);
            }
        }
    };
}

allocator_on_heap!(allocator_api2::alloc);
allocator_on_heap!(
    #[cfg(feature = "nightly")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nightly")))]
    core::alloc
);
