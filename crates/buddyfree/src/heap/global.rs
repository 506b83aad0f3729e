//! A heap for `#[global_allocator]` statics, mapped on first use.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::Cell;
use core::ptr;
use std::alloc::System;

use super::{Heap, Region};
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::{BlockAlloc, Config, Error};

std::thread_local! {
    // Set while this thread is inside the block allocator. A `const` initialiser of a type
    // without drop glue needs no allocation and no destructor registration, so reading it
    // from inside the global allocator is sound.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// A [`Heap`] over an anonymous mapping made on first use, usable as a
/// `#[global_allocator]`:
///
/// ```no_run
/// use buddyfree::heap::GlobalHeap;
/// use buddyfree::buddy::Knuth;
/// use buddyfree::{Config, Error, Locked};
///
/// type Backend = Locked<Knuth>;
/// fn build(c: Config) -> Result<Backend, Error> {
///     Ok(Locked::new(Knuth::new(c)?))
/// }
///
/// #[global_allocator]
/// static HEAP: GlobalHeap<Backend> =
///     GlobalHeap::with_system_fallback(64, Config::new(1 << 16, 14), build);
/// # fn main() {}
/// ```
///
/// The block allocator's own metadata (its tree, lists, maps) cannot come from the heap it
/// manages, so every allocation made while this thread is inside the block allocator, and
/// while the heap is being built, is served by [`System`] instead; `dealloc` tells the two
/// apart by address. Requests the heap cannot serve (too large, too aligned, out of memory)
/// return null, like any allocator that runs out — unless built
/// [`with_system_fallback`](GlobalHeap::with_system_fallback), which sends them to [`System`]
/// too. (Pointers outside the heap are taken for `System`'s, so a foreign pointer freed
/// through a `GlobalHeap` is not detected; bad frees of heap blocks are, see
/// [`Heap::bad_frees`].)
pub struct GlobalHeap<A> {
    unit: usize,
    config: Config,
    build: fn(Config) -> Result<A, Error>,
    heap: spin::Once<Option<Heap<A>>>,
    fallbacks: AtomicUsize,
    refused_to_system: bool,
}

impl<A: BlockAlloc> GlobalHeap<A> {
    /// A heap of `config.units` units of `unit` bytes, its allocator built by `build` on first
    /// use. The mapping is aligned to the largest block, so every alignment up to
    /// `unit << config.max_order` is honoured.
    #[must_use]
    pub const fn new(unit: usize, config: Config, build: fn(Config) -> Result<A, Error>) -> Self {
        GlobalHeap {
            unit,
            config,
            build,
            heap: spin::Once::new(),
            fallbacks: AtomicUsize::new(0),
            refused_to_system: false,
        }
    }

    /// As [`new`](GlobalHeap::new), but requests the heap refuses (too large, too aligned, out
    /// of memory) are served by [`System`] instead of failing. Programs that may ask for more
    /// than the largest block (a panic's backtrace, a big buffer) want this.
    #[must_use]
    pub const fn with_system_fallback(
        unit: usize,
        config: Config,
        build: fn(Config) -> Result<A, Error>,
    ) -> Self {
        let mut heap = Self::new(unit, config, build);
        heap.refused_to_system = true;
        heap
    }

    /// The heap, building it on first use; `None` if it could not be built (bad
    /// configuration, mapping refused), in which case every request returns null.
    pub fn heap(&self) -> Option<&Heap<A>> {
        let _inside = Inside::enter();
        self.heap.call_once(|| self.init()).as_ref()
    }

    /// Allocations served by [`System`]: the block allocator's metadata, and with
    /// [`with_system_fallback`](GlobalHeap::with_system_fallback) the requests the heap refused.
    pub fn fallbacks(&self) -> usize {
        self.fallbacks.load(Ordering::Relaxed)
    }

    fn init(&self) -> Option<Heap<A>> {
        let bytes = self.config.units.checked_mul(self.unit)?;
        let largest = super::block_bytes(self.unit, self.config.max_order)?;
        let region = Region::mmap(bytes, largest).ok()?;
        let alloc = (self.build)(self.config).ok()?;
        Heap::new(region, self.unit, alloc).ok()
    }

    /// Serves a request from [`System`], counted.
    ///
    /// # Safety
    /// As for [`GlobalAlloc::alloc`].
    unsafe fn system_alloc(&self, layout: Layout) -> *mut u8 {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees (non-zero size).
        unsafe { System.alloc(layout) }
    }

    /// The built heap if `ptr` lies in it.
    fn owner_of(&self, ptr: *mut u8) -> Option<&Heap<A>> {
        self.heap.get()?.as_ref().filter(|h| h.contains(ptr))
    }
}

/// Marks the calling thread as inside the block allocator until dropped; holds what the
/// mark was before.
struct Inside(bool);

impl Inside {
    fn enter() -> Self {
        Inside(INSIDE.replace(true))
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.set(self.0);
    }
}

// SAFETY: blocks come from a `Heap` (see its `GlobalAlloc` impl) or from `System`; every
// pointer is returned to the one that made it, told apart by address: heap blocks lie inside
// the heap's mapping, which `System` never hands out.
unsafe impl<A: BlockAlloc> GlobalAlloc for GlobalHeap<A> {
    /// # Safety
    /// The contract of [`GlobalAlloc::alloc`].
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if INSIDE.get() {
            // SAFETY: forwarded with the caller's guarantees (non-zero size).
            return unsafe { self.system_alloc(layout) };
        }
        let block = self.heap().map(|heap| {
            let _inside = Inside::enter();
            heap.alloc(layout)
        });
        // A request the heap refused gets `System`'s memory if so configured, else null.
        match block {
            Some(Ok(p)) => p.as_ptr(),
            // SAFETY: forwarded with the caller's guarantees.
            _ if self.refused_to_system => unsafe { self.system_alloc(layout) },
            _ => ptr::null_mut(),
        }
    }

    /// # Safety
    /// The contract of [`GlobalAlloc::dealloc`].
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.owner_of(ptr) {
            Some(heap) => {
                let _inside = Inside::enter();
                // SAFETY: forwarded with the caller's guarantees.
                unsafe { GlobalAlloc::dealloc(heap, ptr, layout) }
            }
            // SAFETY: not in the heap, so `System` allocated it.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    /// # Safety
    /// The contract of [`GlobalAlloc::realloc`].
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match self.owner_of(ptr) {
            // SAFETY: forwarded with the caller's guarantees, for a block of the heap; a
            // new block comes from `self.alloc` (the heap, or `System` where the heap
            // refuses and that is configured), and the old one goes back to the heap.
            Some(heap) => unsafe { super::api::realloc_block(heap, self, ptr, layout, new_size) },
            // SAFETY: not in the heap, so `System` allocated it; metadata stays there.
            None => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}
