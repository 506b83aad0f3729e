//! One core's cache: a free list per cached order, refilled and spilled in batches with a
//! high watermark, as Linux's per-CPU page lists do. Which orders, and how many blocks move
//! at once, is a [`Policy`].

use core::ptr::NonNull;

use crate::magazine::Backend;

/// The most orders one policy may cache.
pub(crate) const MAX_SLOTS: usize = 10;

/// Orders a policy can name: `0..ORDERS`.
const ORDERS: usize = 64;

/// Blocks one core's cache can hold, over all its lists: room for the lists of
/// [`Magazine`](crate::magazine::Magazine)'s policy, the largest (674 blocks, 43 cache lines per core).
const CAPACITY: usize = 674;

/// Blocks a free's spill takes out of its cache before the backend has them: the largest
/// batch any policy may have (256 units of order 1 in the magazines').
pub(crate) const SPILL_BUFFER: usize = 128;

/// `Policy::slot_of` for an order that is not cached.
const NOT_CACHED: u8 = u8::MAX;

/// Which orders a front caches per core and how many blocks move between a cache and the
/// backend at once.
#[derive(Clone)]
pub(crate) struct Policy {
    /// The cached orders (at most [`MAX_SLOTS`]); a block's list is its order's position here.
    pub(crate) orders: &'static [u32],
    /// Each order's position in `orders`, or [`NOT_CACHED`]: the lookup on every operation.
    slot_of: [u8; ORDERS],
    /// Blocks moved per refill or spill, per slot.
    pub(crate) batch: [usize; MAX_SLOTS],
    /// A list holding more than this many blocks spills one batch, oldest blocks first; per
    /// slot.
    pub(crate) high: [usize; MAX_SLOTS],
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

    /// The same, with `order` (a cached one) moving `batch_units` units at a time (at most
    /// [`SPILL_BUFFER`] blocks) and spilling above `high_units`.
    pub(crate) const fn with_units(
        mut self,
        order: u32,
        batch_units: usize,
        high_units: usize,
    ) -> Self {
        let slot = self.slot_of[order as usize];
        assert!(slot != NOT_CACHED, "not a cached order");
        let (batch, high) = (batch_units >> order, high_units >> order);
        let batch = if batch > 1 { batch } else { 1 };
        let high = if high > 2 { high } else { 2 };
        assert!(batch <= high, "a batch above the watermark");
        assert!(batch <= SPILL_BUFFER, "a batch above the spill buffer");
        (self.batch[slot as usize], self.high[slot as usize]) = (batch, high);
        self
    }

    /// The same, with every cached order that `backend` takes in bulk no cheaper than block
    /// by block ([`Backend::alloc_bulk_groups`]) moved one block at a time (its watermark
    /// kept): batches of them would save no work, and a stream of them passes the caches by
    /// (*Streams* in the [`cached`](super) module docs).
    pub(crate) fn fitted(&self, backend: &impl Backend) -> Self {
        let mut fitted = self.clone();
        for (slot, &order) in self.orders.iter().enumerate() {
            if !backend.alloc_bulk_groups(order) {
                fitted.batch[slot] = 1;
            }
        }
        fitted
    }

    /// The position of `order` among the cached orders, if it is cached.
    #[inline]
    pub(crate) fn slot(&self, order: u32) -> Option<usize> {
        match self.slot_of.get(order as usize) {
            Some(&slot) if slot != NOT_CACHED => Some(usize::from(slot)),
            _ => None,
        }
    }

    /// The most blocks any of the lists moves at once.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn largest_batch(&self) -> usize {
        self.batch[..self.orders.len()]
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Units one cache holds at most between operations: every list at its watermark.
    pub(crate) fn ceiling(&self) -> usize {
        (0..self.orders.len())
            .map(|slot| self.high[slot] << self.orders[slot])
            .sum()
    }
}

/// One cache line of a core's lists: the unit [`Magazine`](crate::magazine::Magazine) lays
/// the lists out in, so that no two cores' lists share a line.
#[repr(C, align(128))]
pub(crate) struct ListLine([usize; LINE]);

/// Blocks per [`ListLine`].
const LINE: usize = 16;

/// [`ListLine`]s per core: room for [`CAPACITY`] blocks.
pub(crate) const LINES: usize = CAPACITY.div_ceil(LINE);

impl ListLine {
    pub(crate) const EMPTY: ListLine = ListLine([0; LINE]);
}

/// Free blocks cached for one core (all allocated in the backend), in a fixed array of
/// [`LINES`] lines of its own (in the allocator's metadata): each cached order's list has its
/// own stretch, as long as the most its policy lets it hold, so a cache never allocates (it
/// works in caller memory, without a heap). This header stays small (it shares its cache
/// line with the lock and is built on the stack). Allocation takes the most recently freed
/// block (cache-hot), a spill gives back the oldest.
///
/// Each slot's list is `blocks[start[slot]..top[slot]]`, and always
/// `start[slot] <= top[slot] <= start[slot + 1] <= CAPACITY`.
pub(crate) struct CoreCache {
    /// Per slot: one past its newest block.
    top: [u32; MAX_SLOTS],
    /// Per slot: where its list starts; `start[slot + 1]` is where its room ends. The
    /// policy's, copied beside `top` so that a pop or a push reads one cache line.
    start: [u32; MAX_SLOTS + 1],
    /// [`CAPACITY`] blocks, this cache's alone.
    blocks: NonNull<usize>,
    /// Per slot: blocks refills brought into the list since a free last parked a block in
    /// it (at most `u16::MAX`).
    dry: [u16; MAX_SLOTS],
    /// Per slot (a bit each): whether this cache started a stream of the order and has not
    /// seen it end since (its front's flag may have been cleared meanwhile by a free).
    streaming: u16,
    /// The cores (a bit each, modulo 64) whose refusals kept blocks here since one last
    /// found blocks and kept none ([`Self::take_all_but`]): the next refusal of one gives
    /// all back.
    screened: u64,
}

// SAFETY: `blocks` is memory this cache alone uses (`CoreCache::new`'s contract), so the
// cache owns it as it would an array field, and it moves between threads with the cache.
unsafe impl Send for CoreCache {}

impl CoreCache {
    /// An empty cache for `policy`'s lists, in the [`LINES`] lines at `blocks`.
    ///
    /// # Safety
    /// `blocks` must be valid for reads and writes of [`LINES`] lines, and used by nothing
    /// else, for as long as the cache lives.
    pub(crate) unsafe fn new(policy: &Policy, blocks: NonNull<ListLine>) -> Self {
        let mut cache = CoreCache {
            top: [0; MAX_SLOTS],
            start: [0; MAX_SLOTS + 1],
            blocks: blocks.cast(),
            dry: [0; MAX_SLOTS],
            streaming: 0,
            screened: 0,
        };
        cache.lay_out(policy);
        cache
    }

    /// Lays this cache's lists out anew for `policy`, one after another; only while they are
    /// empty.
    pub(crate) fn lay_out(&mut self, policy: &Policy) {
        assert!(
            (0..MAX_SLOTS).all(|slot| self.len(slot) == 0),
            "laid out anew a cache that holds blocks"
        );
        let mut end = 0;
        for slot in 0..MAX_SLOTS {
            (self.start[slot], self.top[slot]) = (end as u32, end as u32);
            // A refill fills an empty list with one batch; a free pushes one block, then
            // spills if the list is above the watermark: a list holds at most `high + 1`.
            if slot < policy.orders.len() {
                end += policy.high[slot] + 1;
            }
        }
        assert!(
            end <= CAPACITY,
            "the policy's lists do not fit a core's cache"
        );
        self.start[MAX_SLOTS] = end as u32;
        self.dry = [0; MAX_SLOTS];
        self.streaming = 0;
        self.screened = 0;
    }

    /// The blocks in the list at `slot`, oldest first.
    #[inline]
    fn list(&self, slot: usize) -> &[usize] {
        let start = self.start[slot] as usize;
        // SAFETY: `start..top[slot]` lies inside the cache's `CAPACITY` blocks (the type's
        // invariant), which are initialised (`ListLine`s) and ours alone; `&self` keeps them
        // from being written meanwhile.
        unsafe { core::slice::from_raw_parts(self.blocks.as_ptr().add(start), self.len(slot)) }
    }

    /// Blocks in the list at `slot`.
    #[inline]
    fn len(&self, slot: usize) -> usize {
        (self.top[slot] - self.start[slot]) as usize
    }

    /// Takes a block of the order at `slot`.
    #[inline]
    pub(crate) fn pop(&mut self, slot: usize) -> Option<usize> {
        if self.top[slot] == self.start[slot] {
            return None;
        }
        self.top[slot] -= 1;
        let at = self.top[slot] as usize;
        // SAFETY: `start[slot] <= at < start[slot + 1] <= CAPACITY` (the type's invariant):
        // one of the cache's own blocks.
        Some(unsafe { self.blocks.as_ptr().add(at).read() })
    }

    /// Adds a free block of the order at `slot`. The policy bounds every list (a refill only
    /// fills an empty list, with at most a batch, and a push above the high watermark is
    /// spilled at once), so there is room.
    #[inline]
    pub(crate) fn push(&mut self, slot: usize, index: usize) {
        let at = self.top[slot];
        assert!(
            at < self.start[slot + 1],
            "a per-core cache list overflowed"
        );
        // SAFETY: `at < start[slot + 1] <= CAPACITY` (the type's invariant): one of the
        // cache's own blocks; `&mut self` makes this the only access.
        unsafe { self.blocks.as_ptr().add(at as usize).write(index) };
        self.top[slot] = at + 1;
    }

    /// Whether a refill of the list at `slot` starts (or goes on with) a stream: whether
    /// the refills since a free last parked a block in it, or ended the stream (`flagged`
    /// is the front's flag, which such a free clears), brought more blocks than the list's
    /// watermark (`policy`'s). Then the core allocates in a stream that its frees do not
    /// feed, such as a burst whose blocks are freed elsewhere or later, all at once. The
    /// blocks it has out by then fill the list past its watermark when they come back;
    /// parking the rest would only move each of them through the list on its way back to
    /// the backend.
    #[inline]
    pub(crate) fn streams_on(&mut self, policy: &Policy, slot: usize, flagged: bool) -> bool {
        if self.streaming & (1 << slot) != 0 && !flagged {
            self.fed(slot);
        }
        let on = usize::from(self.dry[slot]) > policy.high[slot];
        if on {
            self.streaming |= 1 << slot;
        }
        on
    }

    /// Notes a refill of the empty list at `slot` that handed out one block and left the
    /// rest in the list.
    #[inline]
    pub(crate) fn refilled(&mut self, slot: usize) {
        let blocks = u16::try_from(self.len(slot) + 1).unwrap_or(u16::MAX);
        self.dry[slot] = self.dry[slot].saturating_add(blocks);
    }

    /// Whether a refill of the list at `slot` has come since a free last parked a block in
    /// it (so that [`Self::fed`] has something to note; a stream has such refills).
    #[inline]
    pub(crate) fn is_dry(&self, slot: usize) -> bool {
        self.dry[slot] != 0
    }

    /// Notes a free that parks a block in the list at `slot`.
    #[inline]
    pub(crate) fn fed(&mut self, slot: usize) {
        self.dry[slot] = 0;
        self.streaming &= !(1 << slot);
    }

    /// Whether the list at `slot` takes one more block without a spill.
    #[inline]
    pub(crate) fn has_room(&self, policy: &Policy, slot: usize) -> bool {
        self.len(slot) < policy.high[slot]
    }

    /// Whether the list at `slot` is above `policy`'s watermark: a batch to spill.
    #[inline]
    pub(crate) fn is_over(&self, policy: &Policy, slot: usize) -> bool {
        self.len(slot) > policy.high[slot]
    }

    /// If the list at `slot` is above `policy`'s watermark, passes one batch of its oldest
    /// blocks to `give` and takes them off the list; with one block a batch, the newest.
    #[inline]
    pub(crate) fn spill(&mut self, policy: &Policy, slot: usize, give: impl FnOnce(&[usize])) {
        if self.is_over(policy, slot) {
            self.spill_batch(policy, slot, give);
        }
    }

    /// The spill of [`Self::spill`], out of line so that the check stays small where
    /// every free makes it.
    #[inline(never)]
    fn spill_batch(&mut self, policy: &Policy, slot: usize, give: impl FnOnce(&[usize])) {
        let len = self.len(slot);
        let n = policy.batch[slot].min(len);
        if n == 1 {
            // One block a batch (the large orders): the newest goes back, which leaves the
            // rest of the list in place instead of moving it down; for blocks this large,
            // which one stays warm in the processor's caches hardly matters.
            give(&self.list(slot)[len - 1..]);
            self.top[slot] -= 1;
            return;
        }
        give(&self.list(slot)[..n]);
        // The oldest blocks are the front: the others move down, once per batch.
        let start = self.start[slot] as usize;
        // SAFETY: both ranges lie inside the list (`start..start + len`), within the cache's
        // own blocks; `copy` allows them to overlap.
        unsafe {
            let list = self.blocks.as_ptr().add(start);
            core::ptr::copy(list.add(n), list, len - n);
        }
        self.top[slot] -= n as u32;
    }

    /// Passes every list to `give`, with its order, but for the blocks `keep` picks (by
    /// block and order), which stay, oldest first; all, where a call for the same `core`
    /// kept blocks since one last found blocks and kept none. Whether blocks stay. What it passes is
    /// in address order where blocks stay, so that the backend still meets the blocks of a
    /// region together.
    pub(crate) fn take_all_but(
        &mut self,
        policy: &Policy,
        core: usize,
        mut keep: impl FnMut(usize, u32) -> bool,
        mut give: impl FnMut(&[usize], u32),
    ) -> bool {
        let (bit, mut held, mut kept) = (1u64 << (core % 64), false, false);
        for (slot, &order) in policy.orders.iter().enumerate() {
            if self.len(slot) != 0 {
                let screen = self.screened & bit == 0;
                kept |= self.take_list(slot, order, screen, &mut keep, &mut give);
                held = true;
            }
        }
        // Left as it is where the lists were empty (a refusal's usual find): no block to
        // keep, and the next refusal that finds some starts from the same bits.
        if held {
            self.screened = if kept { self.screened | bit } else { 0 };
        }
        kept
    }

    /// [`Self::take_all_but`] for the list at `slot`, of `order`, which holds blocks;
    /// whether blocks stay. Out of line: a refusal mostly finds the lists empty.
    #[inline(never)]
    fn take_list(
        &mut self,
        slot: usize,
        order: u32,
        screen: bool,
        keep: &mut impl FnMut(usize, u32) -> bool,
        give: &mut impl FnMut(&[usize], u32),
    ) -> bool {
        let (start, len) = (self.start[slot] as usize, self.len(slot));
        // SAFETY: the list, `start..start + len`, lies inside the cache's own blocks (the
        // type's invariant); `&mut self` makes this the only access.
        let list = unsafe { core::slice::from_raw_parts_mut(self.blocks.as_ptr().add(start), len) };
        let mut stay = 0;
        for at in 0..len {
            if screen && keep(list[at], order) {
                list.swap(stay, at);
                stay += 1;
            }
        }
        let out = &mut list[stay..];
        if stay > 0 {
            out.sort_unstable();
        }
        if !out.is_empty() {
            give(out, order);
        }
        self.top[slot] = (start + stay) as u32;
        stay > 0
    }

    /// Units held, under `policy`'s orders.
    pub(crate) fn units(&self, policy: &Policy) -> usize {
        (0..policy.orders.len())
            .map(|slot| self.len(slot) << policy.orders[slot])
            .sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    static SMALL: Policy = Policy::new(&[0, 2], 8, 16).with_units(2, 4, 12);

    /// A cache for `policy` over `lines`.
    fn cache(policy: &Policy, lines: &mut [ListLine; LINES]) -> CoreCache {
        // SAFETY: `lines` outlives the cache in every test, and nothing else uses them.
        unsafe { CoreCache::new(policy, NonNull::from(lines).cast()) }
    }

    /// Each list holds its watermark and one more in its own stretch of the array, spills
    /// its oldest batch, and is emptied by `take_all_but`, without touching its neighbour.
    #[test]
    fn lists_keep_to_their_stretch_and_spill_the_oldest_batch() {
        let mut lines = [ListLine::EMPTY; LINES];
        let mut cache = cache(&SMALL, &mut lines);
        let (zero, two) = (SMALL.slot(0).unwrap(), SMALL.slot(2).unwrap());
        for block in 0..2 {
            cache.push(two, 1000 + block * 4);
        }
        let mut spilled = Vec::new();
        for block in 0..=16 {
            cache.push(zero, block);
            cache.spill(&SMALL, zero, |b| spilled.extend_from_slice(b));
        }
        assert_eq!(spilled, (0..8).collect::<Vec<_>>(), "the oldest batch");
        assert_eq!(cache.list(zero), (8..=16).collect::<Vec<_>>());
        assert_eq!(cache.units(&SMALL), 9 + 2 * 4);
        assert_eq!(cache.pop(zero), Some(16), "the newest first");
        cache.push(two, 1008);
        cache.spill(&SMALL, two, |_| panic!("at the watermark"));
        // Order 2 moves one block a batch: above the watermark, the newest goes back.
        cache.push(two, 1012);
        let mut newest = Vec::new();
        cache.spill(&SMALL, two, |b| newest.extend_from_slice(b));
        assert_eq!(newest, [1012]);
        let mut all = Vec::new();
        cache.take_all_but(
            &SMALL,
            0,
            |_, _| false,
            |b, order| all.push((b.to_vec(), order)),
        );
        assert_eq!(
            all,
            [((8..16).collect(), 0), (alloc::vec![1000, 1004, 1008], 2)]
        );
        assert_eq!(
            (cache.units(&SMALL), cache.pop(zero), cache.pop(two)),
            (0, None, None)
        );
    }

    // Not under ThreadSanitizer: single-threaded, so it has nothing to check there, and its
    // panic, overlapping another test's in the uninstrumented standard library, can draw
    // false race reports.
    #[test]
    #[cfg_attr(buddyfree_tsan, ignore = "single-threaded; see above")]
    #[should_panic(expected = "a per-core cache list overflowed")]
    fn a_push_past_the_room_is_refused() {
        let mut lines = [ListLine::EMPTY; LINES];
        let mut cache = cache(&SMALL, &mut lines);
        let two = SMALL.slot(2).unwrap();
        // Room for the watermark (3 blocks) and one more.
        for block in 0..5 {
            cache.push(two, block * 4);
        }
    }

    #[test]
    #[cfg_attr(buddyfree_tsan, ignore = "single-threaded; see above")]
    #[should_panic(expected = "do not fit a core's cache")]
    fn a_policy_too_large_for_a_cache_is_refused() {
        static LARGE: Policy = Policy::new(&[0, 1], 128, 1024);
        let _ = cache(&LARGE, &mut [ListLine::EMPTY; LINES]);
    }
}
