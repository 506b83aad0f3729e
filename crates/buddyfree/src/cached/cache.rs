//! One core's cache: a free list per cached order, refilled and spilled in batches with a
//! high watermark, as Linux's per-CPU page lists do. Which orders, and how many blocks move
//! at once, is a [`Policy`].

use alloc::vec::Vec;

/// The most orders one policy may cache.
const MAX_SLOTS: usize = 8;

/// Orders a policy can name: `0..ORDERS`.
const ORDERS: usize = 64;

/// `Policy::slot_of` for an order that is not cached.
const NOT_CACHED: u8 = u8::MAX;

/// Which orders a front caches per core and how many blocks move between a cache and the
/// backend at once.
pub(crate) struct Policy {
    /// The cached orders (at most [`MAX_SLOTS`]); a block's list is its order's position here.
    pub(crate) orders: &'static [u32],
    /// Each order's position in `orders`, or [`NOT_CACHED`]: the lookup on every operation.
    slot_of: [u8; ORDERS],
    /// Blocks moved per refill or spill, per slot.
    batch: [usize; MAX_SLOTS],
    /// A list holding more than this many blocks spills one batch, oldest blocks first; per
    /// slot.
    high: [usize; MAX_SLOTS],
}

impl Policy {
    /// Caches `orders` (distinct, at most [`MAX_SLOTS`], each below 64), moving `batch_units`
    /// units at a time (at least one block) and spilling above `high_units` per order (at
    /// least two blocks); checked at compile time where the policy is a constant.
    pub(crate) const fn new(orders: &'static [u32], batch_units: usize, high_units: usize) -> Self {
        assert!(orders.len() <= MAX_SLOTS, "too many cached orders");
        let mut policy = Policy {
            orders,
            slot_of: [NOT_CACHED; ORDERS],
            batch: [0; MAX_SLOTS],
            high: [0; MAX_SLOTS],
        };
        let mut slot = 0;
        while slot < orders.len() {
            let order = orders[slot] as usize;
            assert!(order < ORDERS, "order out of range");
            assert!(policy.slot_of[order] == NOT_CACHED, "an order cached twice");
            policy.slot_of[order] = slot as u8;
            policy = policy.with_units(orders[slot], batch_units, high_units);
            slot += 1;
        }
        policy
    }

    /// The same, with `order` (a cached one) moving `batch_units` units at a time and
    /// spilling above `high_units`.
    pub(crate) const fn with_units(
        mut self,
        order: u32,
        batch_units: usize,
        high_units: usize,
    ) -> Self {
        let slot = self.slot_of[order as usize];
        assert!(slot != NOT_CACHED, "not a cached order");
        let batch = batch_units >> order;
        let high = high_units >> order;
        self.batch[slot as usize] = if batch > 1 { batch } else { 1 };
        self.high[slot as usize] = if high > 2 { high } else { 2 };
        self
    }

    /// The position of `order` among the cached orders, if it is cached.
    #[inline]
    pub(crate) fn slot(&self, order: u32) -> Option<usize> {
        match self.slot_of.get(order as usize) {
            Some(&slot) if slot != NOT_CACHED => Some(usize::from(slot)),
            _ => None,
        }
    }

    /// Blocks moved per refill or spill of the order at `slot`.
    #[inline]
    pub(crate) fn batch(&self, slot: usize) -> usize {
        self.batch[slot]
    }

    /// Blocks a cache list at `slot` may hold.
    #[inline]
    fn high(&self, slot: usize) -> usize {
        self.high[slot]
    }
}

/// Free blocks cached for one core (all allocated in the backend). Allocation takes the most
/// recently freed block (cache-hot), a spill gives back the oldest.
#[derive(Default)]
pub(crate) struct CoreCache {
    lists: [Vec<usize>; MAX_SLOTS],
}

impl CoreCache {
    /// Takes a block of the order at `slot`.
    #[inline]
    pub(crate) fn pop(&mut self, slot: usize) -> Option<usize> {
        self.lists[slot].pop()
    }

    /// Adds a free block of the order at `slot`.
    #[inline]
    pub(crate) fn push(&mut self, slot: usize, index: usize) {
        self.lists[slot].push(index);
    }

    /// If the list at `slot` is above `policy`'s watermark, takes one batch of its oldest
    /// blocks.
    #[inline]
    pub(crate) fn spill(
        &mut self,
        policy: &Policy,
        slot: usize,
    ) -> Option<impl Iterator<Item = usize> + '_> {
        let list = &mut self.lists[slot];
        if list.len() <= policy.high(slot) {
            return None;
        }
        // The oldest blocks are the front: the others move down, once per batch.
        Some(list.drain(..policy.batch(slot).min(list.len())))
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
