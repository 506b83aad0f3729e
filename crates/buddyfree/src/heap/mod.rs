//! Address adapters: a [`Heap`] turns any [`BlockAlloc`] into an allocator of memory.
//!
//! ```text
//!  region start           base (aligned up to the unit)           base + units * unit
//!  |--- trimmed ---|unit 0|unit 1|unit 2| ...                                |--- unused ---|
//!                  ^ index i lives at base + i * unit
//! ```
//!
//! A request `Layout { size, align }` becomes the order
//! `max(ceil_log2(ceil(size / unit)), log2(align / unit))`: blocks of order `k` are aligned to
//! `2^k` units relative to `base`, so alignment above the unit size is served by a larger
//! order, never ignored. A block's address is only as aligned as `base` itself, so alignments
//! above `base`'s alignment are refused ([`Error::BadAlign`]) rather than silently broken.
//!
//! [`GlobalAlloc`](core::alloc::GlobalAlloc) and `allocator_api2`'s `Allocator` (and `core`'s, behind the `nightly`
//! feature) are implemented on [`Heap`]; [`GlobalHeap`] is a lazily mapped heap for
//! `#[global_allocator]` statics; [`TypedPool`] hands out typed, dropping handles.

mod api;
mod device;
#[cfg(all(feature = "std", unix, not(loom)))]
mod global;
mod pool;
mod region;
mod static_heap;

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::{BlockAlloc, Class, Config, Error, HeldCore};

pub use device::{DeviceHeap, HeldDevice};
#[cfg(all(feature = "std", unix, not(loom)))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "std", unix))))]
pub use global::GlobalHeap;
pub use pool::{PoolBox, PoolSlice, TypedPool};
pub use region::Region;
pub use static_heap::{NoFallback, StaticHeap};

/// A block allocator over a region of memory: unit `i` lives at `base + i * unit`.
pub struct Heap<A> {
    /// The allocator and the arithmetic of addresses, over the units' addresses.
    device: DeviceHeap<A>,
    /// The address of unit 0, with the region's provenance.
    base: NonNull<u8>,
    /// Frees that failed where no error can be returned (`GlobalAlloc::dealloc`, drops).
    bad_frees: AtomicUsize,
    /// Where the calling core's number comes from, if not from [`default_core`].
    core_hint: Option<fn() -> usize>,
    // Last, so the memory outlives nothing that points into it.
    _region: Region,
}

// SAFETY: the heap hands out disjoint blocks of the region and never touches their contents;
// all shared state is in `A` (which is `Sync`) and an atomic counter. The region is plain
// memory owned (or exclusively borrowed) by the heap, so moving it between threads is fine.
unsafe impl<A: BlockAlloc + Send> Send for Heap<A> {}
// SAFETY: as above; every `&self` operation goes through `A: Sync` or atomics.
unsafe impl<A: BlockAlloc> Sync for Heap<A> {}

impl<A: BlockAlloc> Heap<A> {
    /// A heap of `alloc.total_units()` units of `unit` bytes in `region`, starting at the
    /// first `unit`-aligned address of the region.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use buddyfree::heap::{Heap, Region};
    /// use buddyfree::{Config, Nbbs};
    ///
    /// // 1 MiB of 64-byte units, blocks up to 4 KiB (64 bytes more for aligning the start).
    /// let memory = vec![0u8; (1 << 20) + 64].into_boxed_slice();
    /// let heap = Heap::new(Region::from_box(memory), 64, Nbbs::new(Config::new(1 << 14, 6))?)
    ///     .unwrap();
    /// let layout = Layout::from_size_align(100, 8).unwrap();
    /// let block = heap.alloc(layout).unwrap();
    /// heap.free(block.as_ptr(), layout).unwrap();
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(region: Region, unit: usize, alloc: A) -> Result<Self, Error> {
        let (skip, units) = first_unit(&region, unit).ok_or(Error::BadRegion)?;
        // Every block's bytes in a `usize`, so that `max_size` and `Layout`s can name them.
        if alloc.total_units() > units || block_bytes(unit, alloc.max_order()).is_none() {
            return Err(Error::BadRegion);
        }
        // SAFETY: `first_unit` checked `skip <= region.len()`, so the offset stays inside
        // (or one past the end of) the region.
        let base = unsafe { region.as_ptr().add(skip) };
        let base = NonNull::new(base).ok_or(Error::BadRegion)?;
        Ok(Heap {
            device: DeviceHeap::new(base.as_ptr() as u64, unit, alloc)?,
            base,
            bad_frees: AtomicUsize::new(0),
            core_hint: None,
            _region: region,
        })
    }

    /// The heap, passing `hint()` as the `core` of every call to its allocator (every call
    /// but those of [`Heap::with_core`], which name their core): a kernel's "this CPU's
    /// number", so that each CPU allocates through its own per-core state (a magazine, a
    /// reservation). Without it a heap passes [`core_hint`](crate::core_hint) with `std`
    /// (threads numbered as they first ask) and core 0 without, where every CPU would share
    /// core 0's magazine and its lock.
    ///
    /// ```
    /// use buddyfree::heap::{Heap, Region};
    /// use buddyfree::{llfree::LLFree, magazine::Magazine};
    /// use core::alloc::Layout;
    ///
    /// fn this_cpu() -> usize {
    ///     1 // a kernel reads its per-CPU area here
    /// }
    ///
    /// let region = Region::from_box(vec![0u8; 1 << 20].into_boxed_slice());
    /// let build = |config| Magazine::new(config, LLFree::new(config)?);
    /// let heap = Heap::build(region, 4096, 4, 2, build).unwrap().with_core_hint(this_cpu);
    /// let page = Layout::from_size_align(4096, 4096).unwrap();
    /// let p = heap.alloc(page).unwrap();
    /// heap.free(p.as_ptr(), page).unwrap();
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub fn with_core_hint(mut self, hint: fn() -> usize) -> Self {
        self.core_hint = Some(hint);
        self
    }

    /// The `core` passed to the allocator for the calling thread.
    #[inline]
    fn core(&self) -> usize {
        self.core_hint.map_or_else(default_core, |hint| hint())
    }

    /// A heap filling `region` with as many units as fit, its allocator built by `build`
    /// (e.g. a [`registry`](crate::registry) entry's) from that many units, `max_order` and
    /// `cores`. A region without room for one unit is [`Error::BadRegion`].
    ///
    /// ```
    /// use buddyfree::heap::{Heap, Region};
    /// use buddyfree::{buddy::Knuth, BlockAlloc, Locked};
    ///
    /// let region = Region::from_box(vec![0u8; 1 << 20].into_boxed_slice());
    /// let build = |config| Ok(Locked::<Knuth>::new(Knuth::new(config)?));
    /// let heap = Heap::build(region, 4096, 4, 2, build).unwrap();
    /// assert!(heap.allocator().total_units() >= 255); // 256 if the box happens to be page-aligned
    /// ```
    pub fn build(
        region: Region,
        unit: usize,
        max_order: u32,
        cores: usize,
        build: impl FnOnce(Config) -> Result<A, Error>,
    ) -> Result<Self, Error> {
        let units = Self::units_fitting(&region, unit)
            .filter(|&units| units > 0)
            .ok_or(Error::BadRegion)?;
        let alloc = build(Config::new(units, max_order).with_cores(cores))?;
        Self::new(region, unit, alloc)
    }

    /// How many whole units of `unit` bytes fit in `region` after aligning its start to
    /// `unit` (possibly 0); `None` if `unit` is not a power of two.
    #[must_use]
    pub fn units_fitting(region: &Region, unit: usize) -> Option<usize> {
        first_unit(region, unit).map(|(_, units)| units)
    }

    /// Allocates a block for `layout` (see the [module docs](self) for the order chosen).
    pub fn alloc(&self, layout: Layout) -> Result<NonNull<u8>, Error> {
        Ok(self.alloc_index(self.order_of(layout)?)?.1)
    }

    /// Allocates a block of `2^order` units; returns its first unit's index and address.
    pub fn alloc_index(&self, order: u32) -> Result<(usize, NonNull<u8>), Error> {
        self.placed(self.device.alloc.alloc(order, self.core())?)
    }

    /// [`Heap::alloc_index`] for memory of kind `class` ([`BlockAlloc::alloc_class`]).
    pub fn alloc_index_class(
        &self,
        order: u32,
        class: Class,
    ) -> Result<(usize, NonNull<u8>), Error> {
        self.placed(self.device.alloc.alloc_class(order, class, self.core())?)
    }

    /// [`Heap::alloc`] that never waits, for interrupt context: [`Error::WouldBlock`] where
    /// the allocator would wait for a lock or another core, [`Error::Unsupported`] where it
    /// cannot promise not to ([`BlockAlloc::try_alloc`]; over a magazine it gives back only
    /// what the caches whose locks are free at once park, so it may find no block where
    /// [`Heap::alloc`], which drains, would).
    pub fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, Error> {
        Ok(self.try_alloc_index(self.order_of(layout)?)?.1)
    }

    /// [`Heap::alloc_index`] that never waits, as [`Heap::try_alloc`].
    pub fn try_alloc_index(&self, order: u32) -> Result<(usize, NonNull<u8>), Error> {
        self.placed(self.device.alloc.try_alloc(order, self.core())?)
    }

    /// A block the allocator returned, with its address.
    fn placed(&self, index: usize) -> Result<(usize, NonNull<u8>), Error> {
        // An allocator keeps its indices below its units; anything else is its bug, reported
        // rather than turned into a wild pointer.
        Ok((index, self.ptr_of(index).ok_or(Error::OutOfRange)?))
    }

    /// Calls `f` with `core` held ([`BlockAlloc::with_core`]: over a magazine, a pair
    /// through the [`HeldHeap`] takes no lock) and returns its answer. `f` must not call
    /// this heap's other methods meanwhile: those that reach the held core would wait for `f`
    /// forever (with `std` they panic instead, naming the cause).
    ///
    /// ```
    /// use buddyfree::heap::{Heap, Region};
    /// use buddyfree::{llfree::LLFree, magazine::Magazine, Error};
    ///
    /// let region = Region::from_box(vec![0u8; 1 << 20].into_boxed_slice());
    /// let build = |config| Magazine::new(config, LLFree::new(config)?);
    /// let heap = Heap::build(region, 4096, 4, 2, build).unwrap();
    /// let (index, page) = heap.with_core(1, |core| -> Result<_, Error> {
    ///     let (index, page) = core.alloc_index(0)?;
    ///     let (other, _) = core.alloc_index(2)?;
    ///     core.free_index(other, 2)?;
    ///     assert_eq!(core.free_index(other, 2), Err(Error::NotAllocated));
    ///     Ok((index, page))
    /// })?;
    /// assert_eq!(heap.ptr_of(index), Some(page));
    /// heap.free_index(index, 0)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn with_core<R>(&self, core: usize, f: impl FnOnce(&mut HeldHeap<'_, A>) -> R) -> R {
        crate::hold_core(&self.device.alloc, core, |held| {
            f(&mut HeldHeap { heap: self, held })
        })
    }

    /// Frees the block of `2^order` units starting at unit `index`, with the same checks as
    /// [`Heap::free`].
    pub fn free_index(&self, index: usize, order: u32) -> Result<(), Error> {
        self.device.alloc.free(index, order, self.core())
    }

    /// Allocates up to `out.len()` blocks of `2^order` units in one call and writes their
    /// first units' indices to the front of `out`; returns how many, as
    /// [`BlockAlloc::alloc_bulk`] does (fewer only where a further allocation would fail).
    pub fn alloc_bulk(&self, order: u32, out: &mut [usize]) -> Result<usize, Error> {
        self.device.alloc.alloc_bulk(order, self.core(), out)
    }

    /// Frees the blocks of `2^order` units starting at the unit indices `blocks`, with the
    /// checks of [`Heap::free_index`], stopping at the first one refused: its position in
    /// `blocks` and the error (it and the blocks after it stay allocated), as
    /// [`BlockAlloc::free_bulk`] does.
    pub fn free_bulk(&self, blocks: &[usize], order: u32) -> Result<(), (usize, Error)> {
        self.device.alloc.free_bulk(blocks, order, self.core())
    }

    /// Frees the block at `ptr` allocated for `layout`.
    ///
    /// A null or foreign pointer, a pointer not at the start of a live block, a layout giving
    /// another order than the allocation's, or a double free returns an error and changes
    /// nothing. Never dereferences `ptr`.
    pub fn free(&self, ptr: *mut u8, layout: Layout) -> Result<(), Error> {
        self.device.free(ptr as u64, layout, self.core())
    }

    /// [`Heap::free`] that never waits, for interrupt context (where the interrupted code may
    /// hold the lock a free would wait for): [`Error::WouldBlock`], changing nothing, where
    /// the allocator would wait; [`Error::Unsupported`] where it cannot promise not to
    /// ([`BlockAlloc::try_free`]). The same checks as [`Heap::free`].
    pub fn try_free(&self, ptr: *mut u8, layout: Layout) -> Result<(), Error> {
        self.device.try_free(ptr as u64, layout, self.core())
    }

    /// Frees the block that starts at `ptr`, whatever its size: the allocator knows its order
    /// ([`BlockAlloc::order_at`]). A pointer not at the start of a live block is an error
    /// and changes nothing, as for [`Heap::free`].
    ///
    /// ```
    /// use buddyfree::heap::{Heap, Region};
    /// use buddyfree::Nbbs4;
    /// use core::alloc::Layout;
    ///
    /// let region = Region::from_box(vec![0u8; 1 << 20].into_boxed_slice());
    /// let heap = Heap::build(region, 4096, 4, 2, Nbbs4::new).unwrap();
    /// let p = heap.alloc(Layout::from_size_align(20_000, 8).unwrap()).unwrap();
    /// heap.free_at(p.as_ptr()).unwrap(); // 8 units, found without the layout
    /// assert!(heap.free_at(p.as_ptr()).is_err());
    /// ```
    pub fn free_at(&self, ptr: *mut u8) -> Result<(), Error> {
        self.device.free_at(ptr as u64, self.core())
    }

    /// [`Heap::free_at`] that never waits, for interrupt context: the order comes from
    /// [`BlockAlloc::try_order_at`] and the free is [`BlockAlloc::try_free`], so the answer
    /// is [`Error::WouldBlock`] (nothing changed) where either would wait for a lock.
    pub fn try_free_at(&self, ptr: *mut u8) -> Result<(), Error> {
        self.device.try_free_at(ptr as u64, self.core())
    }

    /// The order of the block serving `layout`.
    pub fn order_of(&self, layout: Layout) -> Result<u32, Error> {
        self.device.order_of(layout)
    }

    /// The address of unit `index`, or `None` past the last unit.
    #[must_use]
    pub fn ptr_of(&self, index: usize) -> Option<NonNull<u8>> {
        if index >= self.device.units {
            return None;
        }
        // SAFETY: `index` is below the units, all of which `new` checked lie inside the
        // region, so the offset stays inside that allocation.
        Some(unsafe { self.base.add(index << self.device.unit_shift) })
    }

    /// The unit index of `ptr`: [`Error::Foreign`] if it is null or outside the heap,
    /// [`Error::Misaligned`] if it is inside but not at a unit boundary.
    pub fn index_of(&self, ptr: *const u8) -> Result<usize, Error> {
        self.device.index_of(ptr as u64)
    }

    /// Whether `ptr` points into the heap's units.
    #[must_use]
    pub fn contains(&self, ptr: *const u8) -> bool {
        !matches!(self.index_of(ptr), Err(Error::Foreign))
    }

    /// The unit size in bytes.
    pub fn unit(&self) -> usize {
        1 << self.device.unit_shift
    }

    /// The first unit's address.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// The largest alignment a request may ask for.
    pub fn max_align(&self) -> usize {
        self.device.max_align
    }

    /// The largest request in bytes (one block of the maximum order).
    pub fn max_size(&self) -> usize {
        self.unit() << self.device.max_order
    }

    /// The block allocator.
    pub fn allocator(&self) -> &A {
        &self.device.alloc
    }

    /// Frees that failed where no error could be returned (`GlobalAlloc::dealloc`, the
    /// `Allocator` traits). Each left the heap unchanged.
    #[must_use]
    pub fn bad_frees(&self) -> usize {
        self.bad_frees.load(Ordering::Relaxed)
    }

    /// Frees `ptr` where the caller cannot take an error: a failure is counted, never acted on.
    fn free_or_count(&self, ptr: *mut u8, layout: Layout) {
        if self.free(ptr, layout).is_err() {
            self.bad_frees.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<A> fmt::Debug for Heap<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heap")
            .field("base", &self.base)
            .field("unit", &(1usize << self.device.unit_shift))
            .field("max_align", &self.device.max_align)
            .finish_non_exhaustive()
    }
}

/// Where the first `unit`-aligned address of `region` is (bytes from its start) and how many
/// whole units fit from there (the region's end and no units if it holds no aligned address);
/// `None` if `unit` is not a power of two.
fn first_unit(region: &Region, unit: usize) -> Option<(usize, usize)> {
    let start = region.as_ptr() as usize;
    let skip = start
        .checked_next_multiple_of(unit)
        .map_or(usize::MAX, |aligned| aligned - start)
        .min(region.len());
    unit.is_power_of_two()
        .then(|| (skip, (region.len() - skip) / unit))
}

/// The bytes in a block of `2^order` units of `unit` bytes, if that fits in a `usize`.
pub fn block_bytes(unit: usize, order: u32) -> Option<usize> {
    1usize.checked_shl(order)?.checked_mul(unit)
}

/// The core hint for the calling thread where the heap was given no source of its own.
#[inline]
fn default_core() -> usize {
    #[cfg(all(feature = "std", not(loom)))]
    return crate::core_hint();
    #[cfg(not(all(feature = "std", not(loom))))]
    return 0;
}

/// A [`Heap`]'s core held by [`Heap::with_core`]: its allocations and frees by order go to
/// that core without taking its lock.
pub struct HeldHeap<'a, A> {
    heap: &'a Heap<A>,
    held: &'a mut dyn HeldCore,
}

impl<A: BlockAlloc> HeldHeap<'_, A> {
    /// [`Heap::alloc_index`] on the held core.
    pub fn alloc_index(&mut self, order: u32) -> Result<(usize, NonNull<u8>), Error> {
        self.heap.placed(self.held.alloc(order)?)
    }

    /// [`Heap::free_index`] on the held core.
    pub fn free_index(&mut self, index: usize, order: u32) -> Result<(), Error> {
        self.held.free(index, order)
    }
}
