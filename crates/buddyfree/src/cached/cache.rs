//! One core's cache: a free list per cached order, refilled and spilled in batches with a
//! high watermark, as Linux's per-CPU page lists do. Which orders, and how many blocks move
//! at once, is a [`Policy`].

use alloc::collections::VecDeque;

/// The most orders one policy may cache.
const MAX_SLOTS: usize = 5;

/// Which orders a front caches per core and how many units move between a cache and the
/// backend at once.
pub(crate) struct Policy {
    /// The cached orders (at most [`MAX_SLOTS`]); a block's list is its order's position here.
    pub(crate) orders: &'static [u32],
    /// Units moved per refill or spill: orders above 0 move `batch_units >> order` blocks, at
    /// least 1.
    pub(crate) batch_units: usize,
    /// A list holding more than `high_units >> order` blocks (at least 2) spills one batch,
    /// oldest blocks first.
    pub(crate) high_units: usize,
}

impl Policy {
    /// Checks, at compile time where `self` is a constant, that the orders fit the lists.
    pub(crate) const fn checked(self) -> Self {
        assert!(self.orders.len() <= MAX_SLOTS, "too many cached orders");
        self
    }

    /// The position of `order` among the cached orders, if it is cached.
    #[inline]
    pub(crate) fn slot(&self, order: u32) -> Option<usize> {
        self.orders.iter().position(|&o| o == order)
    }

    /// Blocks of `order` moved per refill or spill.
    #[inline]
    pub(crate) fn batch(&self, order: u32) -> usize {
        (self.batch_units >> order).max(1)
    }

    /// Blocks of `order` a cache list may hold.
    #[inline]
    fn high(&self, order: u32) -> usize {
        (self.high_units >> order).max(2)
    }
}

/// Free blocks cached for one core (all allocated in the backend). Allocation takes the most
/// recently freed block (cache-hot), a spill gives back the oldest.
#[derive(Default)]
pub(crate) struct CoreCache {
    lists: [VecDeque<usize>; MAX_SLOTS],
}

impl CoreCache {
    /// Takes a block of the order at `slot`.
    #[inline]
    pub(crate) fn pop(&mut self, slot: usize) -> Option<usize> {
        self.lists[slot].pop_back()
    }

    /// Adds a free block of the order at `slot`.
    #[inline]
    pub(crate) fn push(&mut self, slot: usize, index: usize) {
        self.lists[slot].push_back(index);
    }

    /// If the list at `slot` is above `policy`'s watermark, takes one batch of its oldest
    /// blocks.
    #[inline]
    pub(crate) fn spill(
        &mut self,
        policy: &Policy,
        slot: usize,
    ) -> impl Iterator<Item = usize> + '_ {
        let order = policy.orders[slot];
        let list = &mut self.lists[slot];
        let n = if list.len() > policy.high(order) {
            policy.batch(order).min(list.len())
        } else {
            0
        };
        list.drain(..n)
    }

    /// Takes every block, as (index, order).
    pub(crate) fn take_all<'a>(
        &'a mut self,
        policy: &'a Policy,
    ) -> impl Iterator<Item = (usize, u32)> + 'a {
        self.lists
            .iter_mut()
            .zip(policy.orders)
            .flat_map(|(list, &order)| list.drain(..).map(move |i| (i, order)))
    }

    /// Units held, under `policy`'s orders.
    pub(crate) fn units(&self, policy: &Policy) -> usize {
        self.lists
            .iter()
            .zip(policy.orders)
            .map(|(list, &order)| list.len() << order)
            .sum()
    }
}
