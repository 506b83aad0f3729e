//! Device memory: a heap of addresses that it never dereferences.

use core::alloc::Layout;

use super::{order_for, HeapError};
use crate::{BlockAlloc, Error};

/// Sub-allocation of memory the CPU does not touch through this heap (GPU memory, a device
/// BAR, offsets into a file): unit `i` is the address `base + i * unit`, and blocks are
/// handed out and freed as addresses. There is no [`Region`](super::Region): nothing is
/// read or written at those addresses, so any `u64` range works, including one above the
/// host's address space.
///
/// Frees need not repeat the size: [`free_at`](DeviceHeap::free_at) asks the allocator for
/// the order of the block that starts there ([`BlockAlloc::order_at`]), which `nbbs`,
/// `nbbs4`, `llfree`, `knuth` and `estranged` record (their node states, two-bit slots or
/// tags), at no extra memory.
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
    alloc: A,
    base: u64,
    unit_shift: u32,
    max_align: usize,
}

impl<A: BlockAlloc> DeviceHeap<A> {
    /// A heap of `alloc.total_units()` units of `unit` bytes (a power of two) from `base`,
    /// which must be a multiple of `unit`; blocks are aligned to their size relative to
    /// `base`, so alignments up to `base`'s own are honoured. [`HeapError::BadRegion`] if the
    /// unit is not a power of two, `base` not aligned to it, or the range would pass 2^64.
    pub fn new(base: u64, unit: usize, alloc: A) -> Result<Self, HeapError> {
        if !unit.is_power_of_two() || !base.is_multiple_of(unit as u64) {
            return Err(HeapError::BadRegion);
        }
        let bytes = (alloc.total_units() as u128) << unit.trailing_zeros();
        if base as u128 + bytes > 1u128 << 64 {
            return Err(HeapError::BadRegion);
        }
        let largest = super::block_bytes(unit, alloc.max_order()).unwrap_or(usize::MAX);
        let base_align = 1u64
            .checked_shl(base.trailing_zeros())
            .map_or(usize::MAX, |a| usize::try_from(a).unwrap_or(usize::MAX));
        Ok(DeviceHeap {
            alloc,
            base,
            unit_shift: unit.trailing_zeros(),
            max_align: base_align.min(largest),
        })
    }

    /// Allocates a block for `layout`; returns its address.
    pub fn alloc(&self, layout: Layout, core: usize) -> Result<u64, HeapError> {
        let order = self.order_of(layout)?;
        let index = self.alloc.alloc(order, core)?;
        Ok(self.address_of(index))
    }

    /// Frees the block at `addr` allocated for `layout`.
    pub fn free(&self, addr: u64, layout: Layout, core: usize) -> Result<(), HeapError> {
        let order = self.order_of(layout)?;
        Ok(self.alloc.free(self.index_of(addr)?, order, core)?)
    }

    /// Frees the block that starts at `addr`, whatever its size.
    pub fn free_at(&self, addr: u64, core: usize) -> Result<(), HeapError> {
        let index = self.index_of(addr)?;
        let order = self.alloc.order_at(index)?;
        Ok(self.alloc.free(index, order, core)?)
    }

    /// The order of the live block that starts at `addr`.
    pub fn order_at(&self, addr: u64) -> Result<u32, HeapError> {
        Ok(self.alloc.order_at(self.index_of(addr)?)?)
    }

    /// The order of the block serving `layout`.
    pub fn order_of(&self, layout: Layout) -> Result<u32, HeapError> {
        order_for(
            layout,
            self.unit_shift,
            self.max_align,
            self.alloc.max_order(),
        )
    }

    /// The unit index of `addr`: [`HeapError::Foreign`] outside the heap,
    /// [`Error::Misaligned`] inside but not at a unit boundary.
    pub fn index_of(&self, addr: u64) -> Result<usize, HeapError> {
        let offset = addr.checked_sub(self.base).ok_or(HeapError::Foreign)?;
        let index = usize::try_from(offset >> self.unit_shift).map_err(|_| HeapError::Foreign)?;
        if index >= self.alloc.total_units() {
            return Err(HeapError::Foreign);
        }
        if offset & ((1 << self.unit_shift) - 1) != 0 {
            return Err(Error::Misaligned.into());
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
}
