//! One core's cache: a free list per cached order, with Linux's batch and high watermark.

use alloc::collections::VecDeque;

/// The orders with per-core caches, as in Linux since 5.13 (orders 0–3 and the 2 MiB huge
/// frame, order 9; LLFree paper §2).
pub(super) const CACHED_ORDERS: [u32; 5] = [0, 1, 2, 3, 9];

/// Units moved between a cache and the buddy at once; Linux's per-CPU batch is 63 pages for
/// zones of a gigabyte and more. Orders above 0 move `BATCH_UNITS >> order` blocks, at least 1.
const BATCH_UNITS: usize = 64;

/// A cache list longer than its watermark spills one batch, oldest blocks first. 256 units
/// per small order; for order 9 two blocks (1024 frames, the size the LLFree paper gives
/// for Linux's order-9 per-CPU caches).
const HIGH_UNITS: usize = 256;

/// The position of `order` in [`CACHED_ORDERS`], if it is cached.
pub(super) fn slot(order: u32) -> Option<usize> {
    CACHED_ORDERS.iter().position(|&o| o == order)
}

/// Blocks of `order` moved per refill or spill.
pub(super) fn batch(order: u32) -> usize {
    (BATCH_UNITS >> order).max(1)
}

/// Blocks of `order` a cache list may hold.
fn high(order: u32) -> usize {
    (HIGH_UNITS >> order).max(2)
}

/// Free blocks cached for one core (all allocated in the buddy). Allocation takes the most
/// recently freed block (cache-hot), a spill gives back the oldest.
#[derive(Default)]
pub(super) struct CoreCache {
    lists: [VecDeque<usize>; CACHED_ORDERS.len()],
}

impl CoreCache {
    /// Takes a block of the order at `slot`.
    pub(super) fn pop(&mut self, slot: usize) -> Option<usize> {
        self.lists[slot].pop_back()
    }

    /// Adds a free block of the order at `slot`.
    pub(super) fn push(&mut self, slot: usize, index: usize) {
        self.lists[slot].push_back(index);
    }

    /// If the list at `slot` is above its watermark, takes one batch of its oldest blocks.
    pub(super) fn spill(&mut self, slot: usize) -> impl Iterator<Item = usize> + '_ {
        let order = CACHED_ORDERS[slot];
        let list = &mut self.lists[slot];
        let n = if list.len() > high(order) {
            batch(order).min(list.len())
        } else {
            0
        };
        list.drain(..n)
    }

    /// Takes every block, as (index, order).
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.lists
            .iter_mut()
            .zip(CACHED_ORDERS)
            .flat_map(|(list, order)| list.drain(..).map(move |i| (i, order)))
    }

    /// Units held.
    pub(super) fn units(&self) -> usize {
        self.lists
            .iter()
            .zip(CACHED_ORDERS)
            .map(|(list, order)| list.len() << order)
            .sum()
    }
}
