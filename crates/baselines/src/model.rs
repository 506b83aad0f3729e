//! The reference allocator: simple and obviously correct, slow on purpose.
//!
//! It keeps one flag per unit and a map of live blocks, allocates first-fit over aligned
//! positions, and classifies every bad `free` exactly. Tests run every other allocator against
//! it; it is also a stand-in wherever a correct allocator is needed and speed does not matter.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::{check_block, check_live, Capabilities, Config, Error, SeqBlockAlloc};

/// The reference allocator (first-fit over a unit map). `O(units)` per allocation.
#[derive(Clone, Debug)]
pub struct Model {
    used: Vec<bool>,
    live: BTreeMap<usize, u32>,
    free_units: usize,
    max_order: u32,
}

impl Model {
    /// A model of `config.units` free units.
    ///
    /// ```
    /// use buddyfree_baselines::model::Model;
    /// use buddyfree::{Config, SeqBlockAlloc};
    ///
    /// let mut model = Model::new(Config::new(64, 4))?;
    /// let index = model.alloc(2)?;
    /// assert!(!model.is_free(index, 2));
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Model {
            used: crate::filled(config.units, |_| false)?.into_vec(),
            live: BTreeMap::new(),
            free_units: config.units,
            max_order: config.max_order,
        })
    }

    /// Whether some aligned block of `2^order` units is entirely free.
    #[must_use]
    pub fn can_alloc(&self, order: u32) -> bool {
        order <= self.max_order && self.find_free(order).is_some()
    }

    /// Whether the `2^order` units at `index` are all free (`index` must be in range).
    #[must_use]
    pub fn is_free(&self, index: usize, order: u32) -> bool {
        self.used[index..index + (1 << order)].iter().all(|u| !u)
    }

    /// The live blocks, as (index, order), in index order.
    pub fn live(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.live.iter().map(|(&i, &o)| (i, o))
    }

    /// Records a block chosen by another allocator as allocated. Fails with
    /// [`Error::Occupied`] if any of its units is already in use: an overlap.
    pub fn take(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.used.len())?;
        if !self.is_free(index, order) {
            return Err(Error::Occupied);
        }
        self.mark(index, order, true);
        self.live.insert(index, order);
        Ok(())
    }

    fn find_free(&self, order: u32) -> Option<usize> {
        let size = 1usize << order;
        (0..=self.used.len().checked_sub(size)?)
            .step_by(size)
            .find(|&i| self.is_free(i, order))
    }

    fn mark(&mut self, index: usize, order: u32, used: bool) {
        self.used[index..index + (1 << order)].fill(used);
        let size = 1usize << order;
        if used {
            self.free_units -= size;
        } else {
            self.free_units += size;
        }
    }
}

impl SeqBlockAlloc for Model {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        let index = self.find_free(order).ok_or(Error::OutOfMemory)?;
        self.mark(index, order, true);
        self.live.insert(index, order);
        Ok(index)
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.used.len())?;
        check_live(self.live.get(&index).copied(), order)?;
        self.live.remove(&index);
        self.mark(index, order, false);
        Ok(())
    }

    fn free_units(&self) -> usize {
        self.free_units
    }

    fn total_units(&self) -> usize {
        self.used.len()
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALLOC_AT.union(Capabilities::BLOCK_OF)
    }

    fn alloc_at(&mut self, index: usize, order: u32) -> Result<(), Error> {
        self.take(index, order)
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        live_block_of(&self.live, self.used.len(), index)
    }

    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        live_next_block(&self.live, self.used.len(), from)
    }
}

/// [`SeqBlockAlloc::block_of`] of an allocator of `units` units that keeps its live blocks
/// in `live` (first unit to order), as the model and the first-fit list do.
pub(crate) fn live_block_of(
    live: &BTreeMap<usize, u32>,
    units: usize,
    index: usize,
) -> Result<Option<(usize, u32)>, Error> {
    if index >= units {
        return Err(Error::OutOfRange);
    }
    Ok(live
        .range(..=index)
        .next_back()
        .map(|(&start, &order)| (start, order))
        .filter(|&(start, order)| index < start + (1 << order)))
}

/// [`SeqBlockAlloc::next_block`] of the same.
pub(crate) fn live_next_block(
    live: &BTreeMap<usize, u32>,
    units: usize,
    from: usize,
) -> Result<Option<(usize, u32)>, Error> {
    if from >= units {
        return Ok(None);
    }
    Ok(live_block_of(live, units, from)?.or_else(|| {
        live.range(from..)
            .next()
            .map(|(&start, &order)| (start, order))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_bad_frees() {
        let mut m = Model::new(Config::new(16, 3)).unwrap();
        let a = m.alloc(2).unwrap();
        assert_eq!(a, 0);
        assert_eq!(m.free(0, 1), Err(Error::OrderMismatch));
        assert_eq!(m.free(4, 2), Err(Error::NotAllocated));
        assert_eq!(m.free(2, 2), Err(Error::Misaligned));
        assert_eq!(m.free(16, 0), Err(Error::OutOfRange));
        assert_eq!(m.free(0, 4), Err(Error::BadOrder));
        assert_eq!(m.free(0, 2), Ok(()));
        assert_eq!(m.free(0, 2), Err(Error::NotAllocated));
        assert_eq!(m.free_units(), 16);
    }

    #[test]
    fn fills_exactly() {
        let mut m = Model::new(Config::new(12, 2)).unwrap();
        assert_eq!(
            (0..3).map(|_| m.alloc(2).unwrap()).collect::<Vec<_>>(),
            [0, 4, 8]
        );
        assert_eq!(m.alloc(0), Err(Error::OutOfMemory));
    }
}
