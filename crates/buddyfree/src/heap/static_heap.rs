//! A `#[global_allocator]` for `no_std` programs: a `const` static, initialised at boot.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;

use super::Heap;
use crate::{BlockAlloc, Error};

/// A global allocator that a kernel declares as a `const` static and initialises once it has
/// memory: a [`Heap`] over a region it owns, with the block allocator's metadata in memory it
/// provides too (the `in_metadata` constructors), so nothing needs a heap before there is one.
/// No `std`, no mmap. A sequential allocator brings the caller's lock of choice through
/// [`Locked<A, R>`](crate::Locked) (any `lock_api::RawMutex`, such as an IRQ-disabling
/// spinlock); NBBS and LLFree need none. Over per-core state (magazines, LLFree's
/// reservations), give the heap the CPU's number ([`Heap::with_core_hint`]): without `std`
/// it would pass core 0 for every CPU.
///
/// Until [`init`](StaticHeap::init), and for requests the heap refuses (too large, too
/// aligned, out of memory), allocations go to the fallback: none by default (null, as any
/// allocator that runs out), or any [`GlobalAlloc`] given to
/// [`with_fallback`](StaticHeap::with_fallback). `dealloc` tells the two apart by address.
///
/// ```
/// use buddyfree::heap::{Heap, Region, StaticHeap};
/// use buddyfree::nbbs::Nbbs4;
/// use buddyfree::Config;
/// use core::alloc::{GlobalAlloc, Layout};
///
/// static HEAP: StaticHeap<Nbbs4> = StaticHeap::new();
///
/// // At boot: 64 units of 64 bytes of memory the kernel owns (plus one: the heap starts at
/// // the first unit-aligned address).
/// let memory: &'static mut [u8] = Box::leak(vec![0u8; 65 * 64].into_boxed_slice());
/// let alloc = Nbbs4::new(Config::new(64, 6))?;
/// let heap = Heap::new(Region::from_static(memory), 64, alloc)?;
/// HEAP.init(heap).map_err(|(e, _)| e)?; // once only: a second call is `Error::AlreadyInitialized`
/// let layout = Layout::from_size_align(100, 8).unwrap();
/// // SAFETY: a non-zero-sized layout; the block is freed with the same layout.
/// unsafe {
///     let p = HEAP.alloc(layout);
///     assert!(!p.is_null() && HEAP.heap().unwrap().contains(p));
///     HEAP.dealloc(p, layout);
/// }
/// # Ok::<(), buddyfree::Error>(())
/// ```
pub struct StaticHeap<A, F = NoFallback> {
    heap: spin::Once<Heap<A>>,
    fallback: F,
}

impl<A> StaticHeap<A, NoFallback> {
    /// An uninitialised heap whose refusals are null.
    pub const fn new() -> Self {
        Self::with_fallback(NoFallback)
    }
}

impl<A> Default for StaticHeap<A, NoFallback> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A, F> StaticHeap<A, F> {
    /// An uninitialised heap whose refusals go to `fallback`.
    pub const fn with_fallback(fallback: F) -> Self {
        StaticHeap {
            heap: spin::Once::new(),
            fallback,
        }
    }

    /// Installs the heap. Only the first call succeeds; a later one is refused with
    /// [`Error::AlreadyInitialized`] and its heap, given back (as [`TypedPool::alloc`]
    /// gives back its value).
    ///
    /// [`TypedPool::alloc`]: super::TypedPool::alloc
    pub fn init(&self, heap: Heap<A>) -> Result<&Heap<A>, (Error, Heap<A>)> {
        let mut offered = Some(heap);
        let installed = self
            .heap
            .call_once(|| offered.take().expect("offered once"));
        match offered {
            None => Ok(installed),
            Some(refused) => Err((Error::AlreadyInitialized, refused)),
        }
    }

    /// The heap, once installed.
    pub fn heap(&self) -> Option<&Heap<A>> {
        self.heap.get()
    }
}

// SAFETY: heap blocks are as `Heap`'s `GlobalAlloc` guarantees; everything else comes from and
// goes back to the fallback, which upholds the contract itself. A pointer is returned to the
// heap only if it lies in the heap's region, which the fallback's memory never does (the
// heap owns its region).
unsafe impl<A: BlockAlloc, F: GlobalAlloc> GlobalAlloc for StaticHeap<A, F> {
    /// # Safety
    /// The contract of [`GlobalAlloc::alloc`].
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(block) = self.heap.get().and_then(|h| h.alloc(layout).ok()) {
            return block.as_ptr();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.fallback.alloc(layout) }
    }

    /// # Safety
    /// The contract of [`GlobalAlloc::dealloc`].
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Only a pointer in the installed heap's region is the heap's.
        match self.heap.get().filter(|h| h.contains(ptr)) {
            Some(heap) => heap.free_or_count(ptr, layout),
            // SAFETY: not the heap's, so the fallback handed it out, with this layout.
            None => unsafe { self.fallback.dealloc(ptr, layout) },
        }
    }
}

/// The fallback that has nothing: every request gets null.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFallback;

// SAFETY: never hands out memory, so `dealloc` is never called with a pointer of its own.
unsafe impl GlobalAlloc for NoFallback {
    /// # Safety
    /// The contract of [`GlobalAlloc::alloc`].
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        ptr::null_mut()
    }

    /// # Safety
    /// The contract of [`GlobalAlloc::dealloc`]; never called, as `alloc` gives nothing.
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}
