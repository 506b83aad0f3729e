//! A first-fit allocator over an unstructured free list: the baseline of the real-time buddy
//! paper ([Donahue et al. 2001](crate#references) §3.1, JDK 1.1.8's allocator), shaped to the trait.
//!
//! The free memory is one list of extents `(start, length)` in address order, coalesced on
//! free so that no two extents touch. A request of `2^order` units walks the list from the
//! lowest address and takes the first extent holding an aligned block of that size, leaving
//! the pieces before and after it on the list. The walk is what the paper's contrived case
//! exposes: with `N/2` small holes ahead of the first large extent, a larger request costs
//! `O(N)`, where a buddy finds its block on the list of its order in `O(1)`.
//!
//! ```text
//! units   [ used ][ free ][used][    free     ][used]...
//! free    {  8: 4,          16: 12,  ... }    start -> length, address order, never touching
//! live    {  0: 3, 12: 2, 28: 0, ... }        start -> order of every block handed out
//! ```
//!
//! The live map makes every bad free exact (as the model classifies it) without looking at
//! the free list. Both maps are B-trees, so a free finds its neighbours in `O(log n)`; the
//! allocation walk is linear, as in the paper's unstructured list.

use alloc::collections::BTreeMap;

use crate::{check_block, Capabilities, Config, Error, SeqBlockAlloc};

/// The first-fit unstructured-list allocator (sequential; wrap it in [`Locked`](buddyfree::Locked)).
#[derive(Clone, Debug)]
pub struct FirstFit {
    /// Free extents: start -> length in units; in address order, pairwise not touching.
    free: BTreeMap<usize, usize>,
    /// Live blocks: start -> order.
    live: BTreeMap<usize, u32>,
    free_units: usize,
    total_units: usize,
    max_order: u32,
}

impl FirstFit {
    /// An allocator of `config.units` free units, one extent.
    ///
    /// ```
    /// use buddyfree_baselines::list::FirstFit;
    /// use buddyfree::{Config, SeqBlockAlloc};
    ///
    /// let mut list = FirstFit::new(Config::new(1000, 4))?;
    /// let index = list.alloc(4)?;
    /// list.free(index, 4)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(FirstFit {
            free: BTreeMap::from([(0, config.units)]),
            live: BTreeMap::new(),
            free_units: config.units,
            total_units: config.units,
            max_order: config.max_order,
        })
    }

    /// Extents on the free list: the length of the walk a request may make.
    pub fn extents(&self) -> usize {
        self.free.len()
    }

    /// The first extent, in address order, holding an aligned block of `size` units: the
    /// extent's start and length and the block's start.
    fn first_fit(&self, size: usize) -> Option<(usize, usize, usize)> {
        self.free.iter().find_map(|(&start, &len)| {
            let index = start.next_multiple_of(size);
            (index + size <= start + len).then_some((start, len, index))
        })
    }

    /// Puts the free units `[index, index + len)` back on the list, joined with the extents
    /// that end at `index` and start at its end, so that extents never touch.
    fn insert_free(&mut self, index: usize, mut len: usize) {
        if let Some(next) = self.free.remove(&(index + len)) {
            len += next;
        }
        if let Some((&start, prev)) = self.free.range_mut(..index).next_back() {
            if start + *prev == index {
                *prev += len;
                return;
            }
        }
        self.free.insert(index, len);
    }
}

impl SeqBlockAlloc for FirstFit {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        let size = 1usize << order;
        let (start, len, index) = self.first_fit(size).ok_or(Error::OutOfMemory)?;
        self.free.remove(&start);
        if index > start {
            self.free.insert(start, index - start);
        }
        let end = start + len;
        if index + size < end {
            self.free.insert(index + size, end - index - size);
        }
        self.live.insert(index, order);
        self.free_units -= size;
        Ok(index)
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        crate::check_live(self.live.get(&index).copied(), order)?;
        self.live.remove(&index);
        self.insert_free(index, 1 << order);
        self.free_units += 1 << order;
        Ok(())
    }

    fn free_units(&self) -> usize {
        self.free_units
    }

    fn total_units(&self) -> usize {
        self.total_units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    /// No `alloc_at`: the first fit of a request is where it goes.
    fn capabilities(&self) -> Capabilities {
        Capabilities::BLOCK_OF
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        crate::model::live_block_of(&self.live, self.total_units, index)
    }

    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        crate::model::live_next_block(&self.live, self.total_units, from)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn takes_the_first_aligned_fit_and_coalesces() {
        let mut f = FirstFit::new(Config::new(16, 3)).unwrap();
        assert_eq!(f.alloc(0), Ok(0));
        // The first extent [1, 16) holds an aligned block of 4 at 4, leaving [1, 4) before it.
        assert_eq!(f.alloc(2), Ok(4));
        assert_eq!(f.extents(), 2);
        assert_eq!(f.alloc(1), Ok(2));
        assert_eq!(f.free(4, 1), Err(Error::OrderMismatch));
        assert_eq!(f.free(8, 0), Err(Error::NotAllocated));
        assert_eq!(f.free(4, 2), Ok(()));
        assert_eq!(f.free(4, 2), Err(Error::NotAllocated));
        assert_eq!(f.free(0, 0), Ok(()));
        assert_eq!(f.free(2, 1), Ok(()));
        assert_eq!((f.extents(), f.free_units()), (1, 16));
        assert_eq!(f.alloc(3), Ok(0));
    }

    #[test]
    fn walks_past_small_holes() {
        // The paper's contrived case in small: every other unit free, then a block of 2.
        let mut f = FirstFit::new(Config::new(20, 2)).unwrap();
        let units: alloc::vec::Vec<usize> = (0..16).map(|_| f.alloc(0).unwrap()).collect();
        for &u in units.iter().step_by(2) {
            f.free(u, 0).unwrap();
        }
        assert_eq!(f.extents(), 9);
        assert_eq!(f.alloc(1), Ok(16));
    }
}
