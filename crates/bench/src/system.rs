//! `system`: the process's allocator (`std::alloc::System`, i.e. malloc) behind the block
//! interface, as the front-end reference the NBBS paper compares against.
//!
//! A block of order `o` is `4096 << o` bytes aligned to 4096; its index is its address divided
//! by 4096. Indices are therefore not in `0..total_units`, so the adapter serves only the
//! size-based workloads, which never look at indices.

use std::alloc::{GlobalAlloc, Layout, System};

use buddyfree::{BlockAlloc, Config, Error};

use crate::units::UNIT_BYTES;

/// The system allocator as a [`BlockAlloc`]. See the module docs.
pub struct SystemAlloc {
    total_units: usize,
    max_order: u32,
}

impl SystemAlloc {
    /// An adapter reporting `config.units` units and orders up to `config.max_order`.
    ///
    /// # Safety
    ///
    /// `free` cannot check its arguments against malloc's state. The caller must only ever
    /// free, once, a block this adapter returned, with the order it was allocated with. The
    /// workloads do exactly that (their tests count it with a checking wrapper).
    pub unsafe fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        let a = SystemAlloc {
            total_units: config.units,
            max_order: config.max_order,
        };
        // glibc serves blocks above a dynamic threshold with mmap and raises the threshold
        // when such a block is freed. Freeing one largest block up front makes every later
        // block come from the heap, whichever workload happens to run first.
        let largest = a.alloc(a.max_order, 0)?;
        a.free(largest, a.max_order, 0)?;
        Ok(a)
    }

    fn layout(order: u32) -> Result<Layout, Error> {
        if order >= usize::BITS - UNIT_BYTES.trailing_zeros() {
            return Err(Error::BadOrder);
        }
        Layout::from_size_align(UNIT_BYTES << order, UNIT_BYTES).map_err(|_| Error::BadOrder)
    }
}

impl BlockAlloc for SystemAlloc {
    fn alloc(&self, order: u32, _core: usize) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        let layout = Self::layout(order)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { System.alloc(layout) };
        if ptr.is_null() {
            return Err(Error::OutOfMemory);
        }
        Ok(ptr as usize / UNIT_BYTES)
    }

    fn free(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        let layout = Self::layout(order)?;
        let ptr = index.checked_mul(UNIT_BYTES).ok_or(Error::OutOfRange)? as *mut u8;
        // SAFETY: by the contract of `SystemAlloc::new`, `index` names a live block this
        // adapter allocated with this order, i.e. with this layout.
        unsafe { System.dealloc(ptr, layout) };
        Ok(())
    }

    /// Not tracked (a shared counter would add contention the other allocators do not have).
    fn free_units(&self) -> usize {
        self.total_units
    }

    fn total_units(&self) -> usize {
        self.total_units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_distinct_and_freed() {
        // SAFETY: the test frees exactly the blocks it allocated, once, with their orders.
        let a = unsafe { SystemAlloc::new(Config::new(1 << 12, 4)) }.unwrap();
        let blocks: Vec<_> = (0..5).map(|o| (a.alloc(o, 0).unwrap(), o)).collect();
        for (i, &(x, o)) in blocks.iter().enumerate() {
            for &(y, p) in &blocks[i + 1..] {
                assert!(x + (1 << o) <= y || y + (1 << p) <= x, "overlap");
            }
        }
        for (x, o) in blocks {
            a.free(x, o, 0).unwrap();
        }
        assert_eq!(a.alloc(5, 0), Err(Error::BadOrder));
    }
}
