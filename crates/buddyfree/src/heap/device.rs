//! Device memory: a heap of addresses that it never dereferences.

use core::alloc::Layout;

use super::block_bytes;
use crate::{BlockAlloc, Error, HeldCore};

/// Sub-allocation of memory the CPU does not touch through this heap (GPU memory, a device
/// BAR, offsets into a file): unit `i` is the address `base + i * unit`, and blocks are
/// handed out and freed as addresses. There is no [`Region`](super::Region): nothing is
/// read or written at those addresses, so any `u64` range works, including one above the
/// host's address space.
///
/// Frees need not repeat the size: [`free_at`](DeviceHeap::free_at) asks the allocator for
/// the order of the block that starts there ([`BlockAlloc::order_at`]), which every
/// allocator of the registry records (NBBS node states, LLFree's two-bit slots, the
/// buddies' tags, the first-fit list's map of live blocks), at no extra memory.
///
/// ```
/// use buddyfree::heap::DeviceHeap;
/// use buddyfree::nbbs::Nbbs4;
/// use buddyfree::Config;
/// use core::alloc::Layout;
///
/// // 1 GiB of device memory at 0x1_0000_0000, in 64 KiB units.
/// let vram = DeviceHeap::new(0x1_0000_0000, 64 << 10, Nbbs4::new(Config::new(1 << 14, 14))?)
///     .expect("an aligned base");
/// let texture = vram.alloc(Layout::from_size_align(3 << 20, 1 << 20).unwrap(), 0).unwrap();
/// assert_eq!(texture % (1 << 20), 0);
/// assert_eq!(vram.order_at(texture), Ok(6)); // 4 MiB: 64 units
/// vram.free_at(texture, 0).unwrap();
/// # Ok::<(), buddyfree::Error>(())
/// ```
pub struct DeviceHeap<A> {
    pub(super) alloc: A,
    /// The address of unit 0.
    pub(super) base: u64,
    pub(super) unit_shift: u32,
    /// The allocator's units and largest order, kept here so that a heap over a
    /// `dyn BlockAlloc` makes no indirect call for them on every allocation and free.
    pub(super) units: usize,
    pub(super) max_order: u32,
    /// The largest alignment every block start is guaranteed to have: `base`'s own
    /// alignment, capped at the largest block.
    pub(super) max_align: usize,
}

impl<A: BlockAlloc> DeviceHeap<A> {
    /// A heap of `alloc.total_units()` units of `unit` bytes (a power of two) from `base`,
    /// which must be a multiple of `unit`; blocks are aligned to their size relative to
    /// `base`, so alignments up to `base`'s own are honoured. [`Error::BadRegion`] if the
    /// unit is not a power of two, `base` not aligned to it, or the range would pass 2^64.
    pub fn new(base: u64, unit: usize, alloc: A) -> Result<Self, Error> {
        if !unit.is_power_of_two() || !base.is_multiple_of(unit as u64) {
            return Err(Error::BadRegion);
        }
        let (units, unit_shift) = (alloc.total_units(), unit.trailing_zeros());
        if base as u128 + ((units as u128) << unit_shift) > 1u128 << 64 {
            return Err(Error::BadRegion);
        }
        let largest = block_bytes(unit, alloc.max_order()).unwrap_or(usize::MAX);
        let base_align = 1u64
            .checked_shl(base.trailing_zeros())
            .map_or(usize::MAX, |a| usize::try_from(a).unwrap_or(usize::MAX));
        Ok(DeviceHeap {
            base,
            unit_shift,
            units,
            max_order: alloc.max_order(),
            max_align: base_align.min(largest),
            alloc,
        })
    }

    /// Allocates a block for `layout`; returns its address.
    pub fn alloc(&self, layout: Layout, core: usize) -> Result<u64, Error> {
        let order = self.order_of(layout)?;
        Ok(self.address_of(self.alloc.alloc(order, core)?))
    }

    /// Frees the block at `addr` allocated for `layout`.
    pub fn free(&self, addr: u64, layout: Layout, core: usize) -> Result<(), Error> {
        let order = self.order_of(layout)?;
        self.alloc.free(self.index_of(addr)?, order, core)
    }

    /// [`DeviceHeap::alloc`] that never waits, for interrupt context
    /// ([`BlockAlloc::try_alloc`]): [`Error::WouldBlock`] where the allocator would wait,
    /// [`Error::Unsupported`] where it cannot promise not to.
    pub fn try_alloc(&self, layout: Layout, core: usize) -> Result<u64, Error> {
        let order = self.order_of(layout)?;
        Ok(self.address_of(self.alloc.try_alloc(order, core)?))
    }

    /// [`DeviceHeap::free`] that never waits ([`BlockAlloc::try_free`]): [`Error::WouldBlock`],
    /// changing nothing, where the allocator would wait.
    pub fn try_free(&self, addr: u64, layout: Layout, core: usize) -> Result<(), Error> {
        let (index, order) = self.block_at(addr, Some(layout))?;
        self.alloc.try_free(index, order, core)
    }

    /// Frees the block that starts at `addr`, whatever its size.
    pub fn free_at(&self, addr: u64, core: usize) -> Result<(), Error> {
        let (index, order) = self.block_at(addr, None)?;
        self.alloc.free(index, order, core)
    }

    /// [`DeviceHeap::free_at`] that never waits: the block's order comes from
    /// [`BlockAlloc::try_order_at`] and the free is [`BlockAlloc::try_free`], so where
    /// either would wait for a lock the answer is [`Error::WouldBlock`], changing nothing
    /// ([`Error::Unsupported`] from allocators that cannot promise it).
    ///
    /// ```
    /// use buddyfree::heap::DeviceHeap;
    /// use buddyfree::{llfree::LLFree, magazine::Magazine, Config};
    /// use core::alloc::Layout;
    ///
    /// let config = Config::new(1 << 14, 10);
    /// let vram = DeviceHeap::new(1 << 40, 4096, Magazine::new(config, LLFree::new(config)?)?).unwrap();
    /// let addr = vram.alloc(Layout::from_size_align(64 << 10, 4096).unwrap(), 0)?;
    /// vram.try_free_at(addr, 0)?; // in an interrupt handler, say: 16 units, by address alone
    /// assert!(vram.try_free_at(addr, 0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_free_at(&self, addr: u64, core: usize) -> Result<(), Error> {
        let index = self.index_of(addr)?;
        let order = self.alloc.try_order_at(index)?;
        self.alloc.try_free(index, order, core)
    }

    /// Calls `f` with `core` held ([`BlockAlloc::with_core`]: over a magazine, a pair
    /// through the [`HeldDevice`] takes no lock) and returns its answer. `f` must not call
    /// this heap's other methods meanwhile: those that reach the held core would wait for `f`
    /// forever (with `std` they panic instead, naming the cause).
    ///
    /// ```
    /// use buddyfree::heap::DeviceHeap;
    /// use buddyfree::{llfree::LLFree, magazine::Magazine, Config, Error};
    /// use core::alloc::Layout;
    ///
    /// let config = Config::new(1 << 14, 10);
    /// let vram = DeviceHeap::new(1 << 40, 4096, Magazine::new(config, LLFree::new(config)?)?).unwrap();
    /// let page = Layout::from_size_align(4096, 4096).unwrap();
    /// let kept = vram.with_core(0, |core| -> Result<_, Error> {
    ///     let (kept, scratch) = (core.alloc(page)?, core.alloc(page)?);
    ///     core.free_at(scratch)?;
    ///     assert_eq!(core.free(scratch, page), Err(Error::NotAllocated));
    ///     Ok(kept)
    /// })?;
    /// vram.free_at(kept, 1)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_core<R>(&self, core: usize, f: impl FnOnce(&mut HeldDevice<'_, A>) -> R) -> R {
        crate::hold_core(&self.alloc, core, |held| {
            f(&mut HeldDevice { heap: self, held })
        })
    }

    /// The unit index and the order of the block at `addr`: the order of `layout`, or without
    /// one the order of the live block that starts there.
    fn block_at(&self, addr: u64, layout: Option<Layout>) -> Result<(usize, u32), Error> {
        let order = layout.map(|layout| self.order_of(layout)).transpose()?;
        let index = self.index_of(addr)?;
        Ok((index, order.map_or_else(|| self.alloc.order_at(index), Ok)?))
    }

    /// The order of the live block that starts at `addr`.
    pub fn order_at(&self, addr: u64) -> Result<u32, Error> {
        self.alloc.order_at(self.index_of(addr)?)
    }

    /// The order of the block serving `layout` (see the [module docs](super) for the order
    /// chosen).
    pub fn order_of(&self, layout: Layout) -> Result<u32, Error> {
        if layout.size() == 0 {
            return Err(Error::ZeroSize);
        }
        if layout.align() > self.max_align {
            return Err(Error::BadAlign);
        }
        // At least one unit (the size is not 0); `ceil(log2(units))`, up to `usize::BITS`
        // for an absurd request, which is then too large for any heap.
        let units = layout.size().div_ceil(1 << self.unit_shift);
        let by_size = usize::BITS - (units - 1).leading_zeros();
        let by_align = (layout.align() >> self.unit_shift).max(1).trailing_zeros();
        let order = by_size.max(by_align);
        if order > self.max_order {
            return Err(Error::TooLarge);
        }
        Ok(order)
    }

    /// The unit index of `addr`: [`Error::Foreign`] outside the heap,
    /// [`Error::Misaligned`] inside but not at a unit boundary.
    pub fn index_of(&self, addr: u64) -> Result<usize, Error> {
        let offset = addr.checked_sub(self.base).ok_or(Error::Foreign)?;
        let index = usize::try_from(offset >> self.unit_shift).map_err(|_| Error::Foreign)?;
        if index >= self.units {
            return Err(Error::Foreign);
        }
        if offset & ((1 << self.unit_shift) - 1) != 0 {
            return Err(Error::Misaligned);
        }
        Ok(index)
    }

    /// The address of unit `index` (which must be below the number of units).
    pub fn address_of(&self, index: usize) -> u64 {
        self.base + ((index as u64) << self.unit_shift)
    }

    /// The block allocator.
    pub fn allocator(&self) -> &A {
        &self.alloc
    }

    /// The largest alignment a request may ask for: `base`'s own, capped at the largest
    /// block (as [`Heap::max_align`](super::Heap::max_align)); above it,
    /// [`Error::BadAlign`].
    #[must_use]
    pub fn max_align(&self) -> usize {
        self.max_align
    }
}

/// A [`DeviceHeap`]'s core held by [`DeviceHeap::with_core`]: its allocations and frees go
/// to that core without taking its lock.
pub struct HeldDevice<'a, A> {
    heap: &'a DeviceHeap<A>,
    held: &'a mut dyn HeldCore,
}

impl<A: BlockAlloc> HeldDevice<'_, A> {
    /// [`DeviceHeap::max_align`] of the heap whose core is held.
    #[must_use]
    pub fn max_align(&self) -> usize {
        self.heap.max_align()
    }

    /// [`DeviceHeap::alloc`] on the held core.
    pub fn alloc(&mut self, layout: Layout) -> Result<u64, Error> {
        let order = self.heap.order_of(layout)?;
        Ok(self.heap.address_of(self.held.alloc(order)?))
    }

    /// [`DeviceHeap::free`] on the held core.
    pub fn free(&mut self, addr: u64, layout: Layout) -> Result<(), Error> {
        let (index, order) = self.heap.block_at(addr, Some(layout))?;
        self.held.free(index, order)
    }

    /// [`DeviceHeap::free_at`] on the held core. The order comes from
    /// [`BlockAlloc::order_at`], which takes no per-core cache in this crate's allocators.
    pub fn free_at(&mut self, addr: u64) -> Result<(), Error> {
        let (index, order) = self.heap.block_at(addr, None)?;
        self.held.free(index, order)
    }
}
