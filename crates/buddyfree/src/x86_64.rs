//! The [`x86_64`](::x86_64) crate's frame traits over any [`BlockAlloc`], for kernels that
//! map pages through that crate (its `OffsetPageTable`, kernels booted by the `bootloader`
//! crate, the "Writing an OS in Rust" blog's): [`PhysFrames`] implements
//! [`FrameAllocator`] and [`FrameDeallocator`] for 4 KiB, 2 MiB and 1 GiB frames.
//!
//! # Invariants
//!
//! - **Unit `i` is the 4 KiB frame at `base + i · 4 KiB`.** [`PhysFrames::new`] checks that
//!   `base` is 4 KiB aligned and that the whole region lies in x86_64's 52-bit physical
//!   address space, so that every unit has a [`PhysFrame`]. That the units are frames of
//!   unused RAM, given over to this allocator alone, is the caller's promise: `new` is
//!   `unsafe`.
//! - **A frame of `2^k` units is one block of order `k`:** 4 KiB frames are order 0,
//!   2 MiB frames order 9, 1 GiB frames order 18. Blocks never overlap and the allocator never
//!   hands a unit out twice, so live frames are distinct, whatever their sizes.
//! - **Large frames need a base aligned to their size.** A block is aligned to its size in
//!   units, which is physical alignment only where `base` is aligned as well. Where it is
//!   not, or where the allocator's [`max_order`](BlockAlloc::max_order) is below the frame's
//!   order, `allocate_frame` answers `None` for that size and changes nothing. A region
//!   whose base is only 4 KiB aligned is accepted rather than refused, since it still serves
//!   4 KiB frames, which is all most page tables need.
//! - **Bad frees are counted, never acted on.** `deallocate_frame` has no way to report an
//!   error, so a frame this allocator does not hold at that size (never allocated, freed
//!   twice, outside the region, a 2 MiB frame freed as a 4 KiB one, a frame with a unit
//!   of the boot reservation: [`Error::Reserved`]) adds one to
//!   [`PhysFrames::bad_frees`] and leaves the allocator exactly as it was.
//!
//! The traits are those of `x86_64` 0.15: a kernel must depend on a semver-compatible
//! version for these implementations to be the ones its mapper asks for.
//!
//! # Example
//!
//! 16 MiB of frames at 1 GiB, as a memory map would report them:
//!
#![cfg_attr(feature = "alloc", doc = "```")]
#![cfg_attr(not(feature = "alloc"), doc = "```ignore")]
//! use buddyfree::llfree::LLFree;
//! use buddyfree::x86_64::PhysFrames;
//! use buddyfree::{BlockAlloc, Config};
//! use x86_64::structures::paging::{
//!     FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size2MiB, Size4KiB,
//! };
//! use x86_64::PhysAddr;
//!
//! let llfree = LLFree::new(Config::new(4096, 10))?;
//! // SAFETY: the example never touches the memory these frames name.
//! let mut frames = unsafe { PhysFrames::new(&llfree, PhysAddr::new(1 << 30), 0) }?;
//!
//! let table: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
//! let huge: PhysFrame<Size2MiB> = frames.allocate_frame().unwrap();
//! assert!(huge.start_address().is_aligned(Size2MiB::SIZE));
//! assert_eq!(llfree.free_units(), 4096 - 1 - 512);
//!
//! // SAFETY: nothing maps either frame any more.
//! unsafe {
//!     frames.deallocate_frame(table);
//!     frames.deallocate_frame(huge);
//!     frames.deallocate_frame(huge); // freed twice: counted, not acted on
//! }
//! assert_eq!((llfree.free_units(), frames.bad_frees()), (4096, 1));
//! # Ok::<(), buddyfree::Error>(())
//! ```
#![cfg_attr(docsrs, doc(cfg(feature = "x86_64")))]

use core::fmt;

use ::x86_64::structures::paging::{
    FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size4KiB,
};
use ::x86_64::PhysAddr;

use crate::{BlockAlloc, Error};

/// The bytes of one unit: the smallest x86_64 frame.
const UNIT_BYTES: u64 = Size4KiB::SIZE;

/// The first address past x86_64's physical address space (52 bits wide).
const PHYS_ADDR_END: u64 = 1 << 52;

/// A [`BlockAlloc`] whose units are the 4 KiB physical frames from `base` on, as the
/// `x86_64` crate's [`FrameAllocator`] and [`FrameDeallocator`] for every frame size: see
/// the [module docs](self) for the invariants.
///
/// It borrows the allocator, so that each core of a kernel can hold one with its own `core`
/// hint over one shared allocator.
pub struct PhysFrames<'a, A: BlockAlloc + ?Sized> {
    alloc: &'a A,
    base: PhysAddr,
    core: usize,
    bad_frees: usize,
}

impl<'a, A: BlockAlloc + ?Sized> PhysFrames<'a, A> {
    /// The frames of `alloc`, unit 0 at `base`, allocated and freed with the `core` hint.
    ///
    /// [`Error::Misaligned`] where `base` is not 4 KiB aligned; [`Error::OutOfRange`] where
    /// the region's end (`base` plus 4 KiB per unit) lies past x86_64's 52-bit physical
    /// address space.
    ///
    /// # Safety
    ///
    /// The [`FrameAllocator`] contract (every frame handed out is unused and distinct from
    /// every other live one) rests on these:
    ///
    /// - Each unit of `alloc` stands for the 4 KiB frame at `base + index · 4 KiB`, and the
    ///   frames of its free units are RAM that nothing else uses while they are free.
    /// - Whatever else allocates from `alloc` (other `PhysFrames`, direct calls) names its
    ///   frames by this same `base`.
    /// - `alloc` never hands out a unit that is already allocated. Every allocator of this
    ///   crate keeps that; an implementation of [`BlockAlloc`] elsewhere must as well.
    pub unsafe fn new(alloc: &'a A, base: PhysAddr, core: usize) -> Result<Self, Error> {
        if !base.is_aligned(UNIT_BYTES) {
            return Err(Error::Misaligned);
        }
        u64::try_from(alloc.total_units())
            .ok()
            .and_then(|units| units.checked_mul(UNIT_BYTES))
            .and_then(|bytes| bytes.checked_add(base.as_u64()))
            .filter(|&end| end <= PHYS_ADDR_END)
            .ok_or(Error::OutOfRange)?;
        Ok(PhysFrames {
            alloc,
            base,
            core,
            bad_frees: 0,
        })
    }

    /// The block allocator.
    pub fn allocator(&self) -> &'a A {
        self.alloc
    }

    /// The physical address of unit 0.
    pub fn base(&self) -> PhysAddr {
        self.base
    }

    /// The `core` hint passed to the allocator.
    pub fn core(&self) -> usize {
        self.core
    }

    /// Frees that failed where no error could be returned (`deallocate_frame`). Each left
    /// the allocator unchanged.
    #[must_use]
    pub fn bad_frees(&self) -> usize {
        self.bad_frees
    }

    /// The `S` frame of the block of `2^order` units at `index`, if the block lies within
    /// the allocator's units and its start is aligned to `S`.
    fn frame_of_block<S: PageSize>(&self, index: usize, order: u32) -> Option<PhysFrame<S>> {
        index
            .checked_add(1usize.checked_shl(order)?)
            .filter(|&end| end <= self.alloc.total_units())?;
        let offset = u64::try_from(index).ok()?.checked_mul(UNIT_BYTES)?;
        let start = PhysAddr::try_new(self.base.as_u64().checked_add(offset)?).ok()?;
        PhysFrame::from_start_address(start).ok()
    }

    /// The unit at which `frame` starts, if it lies at or above `base`.
    fn index_of<S: PageSize>(&self, frame: PhysFrame<S>) -> Option<usize> {
        let offset = frame
            .start_address()
            .as_u64()
            .checked_sub(self.base.as_u64())?;
        usize::try_from(offset / UNIT_BYTES).ok()
    }
}

/// The order of an `S` frame in 4 KiB units: 0, 9 or 18.
const fn order_of<S: PageSize>() -> u32 {
    (S::SIZE / UNIT_BYTES).trailing_zeros()
}

// SAFETY: each frame is the block that `alloc` has just handed out, within its units
// (`frame_of_block` checks), at the base that `new`'s caller promised names those units, over
// RAM that nothing else uses while they are free. `alloc` hands no unit out again until it is
// freed, and distinct units are distinct frames (unit `i` is `base + i · 4 KiB`), so the
// frame is unused and overlaps no other live frame of any size.
unsafe impl<A: BlockAlloc + ?Sized, S: PageSize> FrameAllocator<S> for PhysFrames<'_, A> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<S>> {
        let order = order_of::<S>();
        // A block of this order would be aligned only to the base's alignment.
        if !self.base.is_aligned(S::SIZE) {
            return None;
        }
        let index = self.alloc.alloc(order, self.core).ok()?;
        let frame = self.frame_of_block(index, order);
        if frame.is_none() {
            // Only an allocator that breaks its own contract gets here (a block past its
            // units, or not aligned to its order; `new` checked that every unit is a
            // frame): such a block is no frame of the region, so it goes back, not out.
            let _ = self.alloc.free(index, order, self.core);
        }
        frame
    }
}

impl<A: BlockAlloc + ?Sized, S: PageSize> FrameDeallocator<S> for PhysFrames<'_, A> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<S>) {
        // Below the base there is no unit to name; everything else the allocator judges,
        // refusing (and changing nothing) what it does not hold at this order.
        let freed = self
            .index_of(frame)
            .map(|index| self.alloc.free(index, order_of::<S>(), self.core));
        if !matches!(freed, Some(Ok(()))) {
            self.bad_frees = self.bad_frees.saturating_add(1);
        }
    }
}

impl<A: BlockAlloc + ?Sized> fmt::Debug for PhysFrames<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PhysFrames")
            .field("base", &self.base)
            .field("units", &self.alloc.total_units())
            .field("core", &self.core)
            .field("bad_frees", &self.bad_frees)
            .finish_non_exhaustive()
    }
}
