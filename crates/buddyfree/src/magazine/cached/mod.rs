//! Per-core caches of free blocks in front of a backend allocator, with exact answers to bad
//! frees: how a [`Magazine`] works.
//!
//! ```text
//!  Magazine<A>
//!  ├── backend: A                     allocates and frees in batches (Backend)
//!  ├── caches:  [CachePadded<Mutex<YieldMutex, CoreCache>>; cores]
//!  │              per cached order: a list of free blocks (allocated in the backend),
//!  │              all in one fixed array per core
//!  └── states:  [u8; units]           Free | Live | Direct | Owned(cache) | Cached, with
//!                                       the order's slot, per block start
//! ```
//!
//! A block in a cache is allocated as far as the backend knows, so the backend cannot
//! classify frees of the cached orders; `states` does, exactly. A block that a cache hands
//! out is `Owned` by that cache: its state changes only under that cache's lock, so its free
//! takes that lock (the freeing core's own, on the usual path), checks the state there and
//! ends it with a plain store, and racing frees are decided by the lock; the block is parked
//! in the freeing core's cache (a block another cache holds is ended under that cache's
//! lock, and only that happens there). A block handed out with no cache held (by the backend directly, or
//! adopted) is `Live`, and one CAS there decides its free. Either way a free costs one locked
//! instruction where the lock and a CAS on the state cost two (docs/results.md, "The
//! magazines' fast path"). Blocks of the other orders never enter a cache: the backend
//! answers their frees as it would without caches, and `states` does not record them.
//! Locks are taken in the order cache, then backend (if it has one), and never two caches at
//! once: a pinned core that frees a block another cache holds lets its own go meanwhile.
//!
//! A refusal is the backend's (with its own memo of refusals, `refusal.rs`), given only where
//! every cache is seen empty or gave back what could help (*Refusals* below). The caches keep
//! no memo of their own: a memo above the backend would miss what the backend makes findable
//! by itself (a tree given back by a whole-tree claim that failed, a bulk allocation's
//! rollback) and go on refusing.
//!
//! # Refusals
//!
//! An allocation of order `k` that the backend refuses takes every cache's lock in turn and
//! gives back, under it, the parked blocks that may make a block of order `k` free; then it
//! asks the backend once more. A parked block `b` of a smaller order `j` stays where a
//! caller's block starts at its buddy, `b ^ 2^j` (a `Live`, `Owned` or `Direct` state):
//! the buddy lies in the block of order `k` around `b`, which cannot be free while the
//! caller holds it. The test reads one state byte per parked block, beside `b`'s own, and
//! none of the backend's metadata. On a fragmented heap, whose parked blocks each lie among
//! allocated neighbours (a huge frame each, after a reclaim), a refusal of a huge frame so
//! gives nothing back, where a drain would free every parked block into the backend, each a
//! cold frame's metadata and a search's worth of counters; other cores keep their warm
//! lists.
//!
//! The refusal stays true. Let `R` be a block of order `k` whose units are all free (parked
//! or free in the backend) while the refusal runs, every free that made them so having
//! happened before it, and none taken meanwhile. Each block parked in `R` was parked before
//! the refusal took its cache's lock, so the refusal sees it. One of order `k` or more is
//! never kept. One of a smaller order `j` has its buddy `u` in `R`, and the byte at `u`
//! reads as a caller's block only while one is out there: it is written after the block
//! leaves the backend or a cache, and a free ends it before the block reaches a cache or the
//! backend. The free that ended the last block out at `u` happened before the refusal, whose
//! read of the byte therefore sees that end or a later state (coherence), and no later state
//! is a caller's block, since nothing in `R` is taken. So every parked block of `R` goes back,
//! under its cache's lock, before the backend is asked again, and the backend then finds
//! `R` free. Without concurrent calls, this is all of the premise: a refusal is exact.
//!
//! A cache that kept blocks at a core's refusal gives back everything it holds at that
//! core's next one (cores told apart modulo 64), so a core never keeps a block twice in a
//! row. A kept block may stop being hopeless when its buddy's caller frees the buddy (into
//! another cache, or straight to the backend); a memo of the blocks once screened would
//! have to hear of every such free, a store and a fence on frees that have neither now.
//! Testing them again at every refusal would cost a loop of refusals (a kernel's reclaim
//! loop on a fragmented heap) a pass over every kept block per try. Given back at the
//! loop's next refusal instead, they cost it one drain, at its second try, and a lone
//! refusal, or the first of each core in a storm of them, none.
//!
//! # Streams
//!
//! A cache helps where a core's frees feed its allocations. Where they do not (a burst of
//! allocations freed all at once later, or on other cores, in a shuffled order: `bulk` and
//! `rand` in `buddybench`), every block would pass through a list on its way back, at the
//! price of a lock, a list push and a spill per free on top of the backend's own free, and
//! the shuffled spills group no better than single frees. So (unless a test turns
//! streams off to see what parked blocks do) a core whose list of an order is refilled twice
//! with no free parking a block in it between (a stream of allocations its frees do not
//! feed) hands the blocks of that order out `Direct` until one of its frees parks a block
//! of the order, or frees a `Direct` one (its frees feed its allocations again): their
//! frees go straight to the backend, with a plain load and store of the state and no lock
//! (the state table's docs). Refills keep their batches; an order moved one block at a
//! time (the huge frames, and the orders the backend takes in bulk no cheaper than block by
//! block: [`Backend::alloc_bulk_groups`]) is allocated straight from the backend meanwhile,
//! without the cache's lock. The flag per order ([`Front::streams`]) lies on the line of
//! the core's lock, which each operation touches anyway.

mod cache;
mod pinned;
mod states;

pub(super) use cache::{CoreCache, ListLine, Policy, LINES, SPILL_BUFFER};
pub use pinned::PinnedCore;
use states::State;
pub(super) use states::{BlockStates, OWNERS};

use super::{Backend, Magazine};
use crate::reserved::Reserved;
use crate::sync::atomic::{AtomicBool, AtomicU16, AtomicU8, Ordering};
use crate::sync::CachePadded;
use crate::table::{Metadata, Part, Plan};
use crate::yield_mutex::YieldMutex;
use crate::{check_block, BlockAlloc, Class, Config, ConfigRule, Error, HeldCore};

/// Where a [`Magazine`]'s tables lie in its metadata.
pub(crate) struct Parts {
    states: Part<AtomicU8>,
    caches: Part<CachePadded<Front>>,
    lists: Part<ListLine>,
}

/// A core's cache behind its lock, with a hint that others read without the lock.
pub(crate) struct Front {
    pub(super) lock: CacheLock,
    /// Whether the cache may hold blocks: set under the lock by every operation that parks
    /// one, before the lock goes; cleared under the lock only when the cache is emptied into
    /// the backend, or a refusal gave back all it held (a pop that empties it leaves it
    /// set). So a reader that sees it clear (with no park in flight) knows the cache holds
    /// nothing, and an allocation the backend refuses drains nothing, and asks nothing
    /// again, where every cache is seen clear: the refusal on a full heap costs the
    /// backend's own, the own cache's lock and a read per core.
    may_hold: AtomicBool,
    /// Per cached order's slot (a bit each): whether the cache hands that order's blocks out
    /// `Direct` (see *Streams* in the module docs). Set under the lock by a refill that
    /// follows a dry one; cleared by a free that parks a block of the order here (under the
    /// lock) or that a core with this cache makes of a `Direct` block (without it). A hint:
    /// either answer is sound, since a `Direct` block's free never needs a cache.
    streams: AtomicU16,
}

impl core::ops::Deref for Front {
    type Target = CacheLock;

    #[inline]
    fn deref(&self) -> &CacheLock {
        &self.lock
    }
}

/// A core's cache behind a lock that spins briefly, then yields (with `std`): a thread that
/// is preempted while it holds a cache must not cost every drainer and every other thread of
/// its core a whole time slice of spinning. Where threads outnumber cores, plain spinning
/// would let the drains on out-of-memory answers take most of a magazine's time.
type CacheLock = lock_api::Mutex<YieldMutex, CoreCache>;

/// A core's cache, held.
type CacheGuard<'a> = lock_api::MutexGuard<'a, YieldMutex, CoreCache>;

/// The layout of the metadata of magazines for `config`: the state table (a byte per
/// unit), the caches (a cache line per core) and their lists; [`Error::InvalidConfig`] for
/// a configuration that cannot be built, or that is not that of the allocator behind, of
/// `inner_units` units. A `const fn` (for a `const` `Magazine::metadata_layout`).
pub(crate) const fn plan(config: Config, inner_units: usize) -> Result<(Plan, Parts), Error> {
    const_try!(config.validate());
    let mut plan = Plan::new();
    let parts = Parts {
        states: const_try!(plan.add(config.units)),
        caches: const_try!(plan.add(config.cores)),
        lists: const_try!(plan.add(config.cores * LINES)),
    };
    if config.units != inner_units {
        return Err(Error::InvalidConfig(ConfigRule::InnerUnits));
    }
    Ok((plan, parts))
}

impl<A: Backend> Magazine<A> {
    /// Puts caches for the cores of `parts` (from [`plan`] for the backend's units) in front
    /// of `backend`, their tables in `meta`. Blocks the backend has out are recorded as the
    /// caches' own (see [`BlockStates::adopt`]); [`Error::InvalidConfig`] if it has some and
    /// cannot name them ([`BlockAlloc::block_of`] unsupported), with nothing written.
    pub(super) fn build(
        backend: A,
        policy: &Policy,
        parts: Parts,
        meta: &Metadata,
    ) -> Result<Self, Error> {
        let in_use = backend.free_units() != backend.total_units();
        if in_use && backend.block_of(0) == Err(Error::Unsupported) {
            return Err(ConfigRule::InnerInUse.into());
        }
        let mut lists = meta.table(parts.lists, |_| ListLine::EMPTY)?;
        let lines = lists.as_mut_ptr();
        let policy = policy.fitted(&backend);
        let caches = meta.table(parts.caches, |core| {
            // SAFETY: core `core`'s `LINES` lines of `lists` (`plan` made `cores * LINES`),
            // which only this cache uses, and which live as long as it (both in the magazine).
            let cache = unsafe { CoreCache::new(&policy, lines.add(core * LINES)) };
            CachePadded::new(Front {
                lock: CacheLock::new(cache),
                may_hold: AtomicBool::new(false),
                streams: AtomicU16::new(0),
            })
        })?;
        let states = BlockStates(meta.table(parts.states, |_| AtomicU8::new(0))?);
        if in_use {
            states.adopt(&backend, &policy)?;
        }
        Ok(Magazine {
            reserved: Reserved::new(backend.total_units(), backend.max_order()),
            states,
            holders: caches.len().min(OWNERS),
            streams: true,
            caches,
            _lists: lists,
            policy,
            backend,
        })
    }

    /// The same magazines parking every free of a cached order, with no streams (see
    /// *Streams* in the module docs): for the tests of what parked blocks do.
    #[cfg(test)]
    pub(crate) fn without_streams(mut self) -> Self {
        self.streams = false;
        self.caches
            .iter()
            .for_each(|c| c.streams.store(0, Ordering::Relaxed));
        self
    }

    /// Records the block at `index` of the order at `slot`, just taken from `core`'s cache
    /// (held by the caller), as the caller's: `Direct` in a stream, else held by that cache
    /// if it is one of the holders.
    #[inline]
    fn hand_out(&self, index: usize, slot: usize, core: usize) {
        let cache = self.cache_index(core);
        let state = if self.in_stream(cache, slot) {
            State::Direct(slot)
        } else if cache < self.holders {
            State::Owned(slot, cache)
        } else {
            State::Live(slot)
        };
        self.states.set(index, state);
    }

    /// Whether cache `at` hands out the blocks of the order at `slot` `Direct`.
    #[inline]
    fn in_stream(&self, at: usize, slot: usize) -> bool {
        self.caches[at].streams.load(Ordering::Relaxed) & (1 << slot) != 0
    }

    /// Starts (`on`) or ends cache `at`'s stream of the order at `slot`: a read of the
    /// cache's own line, and a write only when the flag changes. Ended without the cache
    /// held by the frees of `Direct` blocks, so both are idempotent.
    #[inline]
    fn set_stream(&self, at: usize, slot: usize, on: bool) {
        if self.in_stream(at, slot) != on {
            let flags = &self.caches[at].streams;
            match on {
                true => flags.fetch_or(1 << slot, Ordering::Relaxed),
                false => flags.fetch_and(!(1 << slot), Ordering::Relaxed),
            };
        }
    }

    /// Parks a free's block `index` of the order at `slot` in `cache` (cache `at`'s, held by
    /// the caller), noting that the cache may hold blocks, and that its core's frees feed its
    /// allocations of the order.
    #[inline]
    fn put(&self, cache: &mut CoreCache, at: usize, slot: usize, index: usize) {
        cache.push(slot, index);
        if cache.is_dry(slot) {
            self.end_dry_run(cache, at, slot);
        }
        self.parks(at);
    }

    /// [`Self::put`] after refills: ends the stream the cache is in, if any. Out of line,
    /// since most frees park where the last one did.
    #[cold]
    #[inline(never)]
    fn end_dry_run(&self, cache: &mut CoreCache, at: usize, slot: usize) {
        self.set_stream(at, slot, false);
        cache.fed(slot);
    }

    /// The index of `core`'s cache.
    #[inline]
    fn cache_index(&self, core: usize) -> usize {
        crate::core_slot(core, self.caches.len())
    }

    /// `core`'s cache.
    #[inline]
    pub(super) fn cache(&self, core: usize) -> &Front {
        &self.caches[self.cache_index(core)]
    }

    /// Notes that cache `at`, whose lock the caller holds, parks a block now ([`Front`]):
    /// a read of the cache's own line, and a store only when the hint was clear.
    #[inline]
    fn parks(&self, at: usize) {
        let hint = &self.caches[at].may_hold;
        if !hint.load(Ordering::Relaxed) {
            hint.store(true, Ordering::Relaxed);
        }
    }

    /// Takes a block of the order at `slot` from `cache` (`core`'s, held by the caller),
    /// refilling it with one batch from the backend if it is empty, and records it as the
    /// caller's, held by that cache.
    #[inline]
    fn take(&self, cache: &mut CoreCache, slot: usize, core: usize) -> Result<usize, Error> {
        let index = match cache.pop(slot) {
            Some(index) => index,
            None => self.refill(cache, slot, core)?,
        };
        self.hand_out(index, slot, core);
        Ok(index)
    }

    /// Refills `cache`'s empty list at `slot` with one batch from the backend but its first
    /// block, which it returns. Out of line, so that the usual allocation (a pop) stays
    /// small enough to be inlined whole wherever the allocation is.
    #[cold]
    #[inline(never)]
    fn refill(&self, cache: &mut CoreCache, slot: usize, core: usize) -> Result<usize, Error> {
        let (at, order) = (self.cache_index(core), self.policy.orders[slot]);
        let more = self.policy.batch[slot] - 1;
        // Streams cover the orders moved one block at a time, whose spills group nothing:
        // the huge frames, and the orders the backend takes in bulk no cheaper than block by
        // block (NBBS-4's on the top row of a cell, every order of the 1-level NBBS). The
        // others keep parking: over NBBS-4 a burst freed in address order goes back far
        // cheaper in grouped spills than block by block, and over LLFree streams of them cost
        // the bursts (`linux-scalability`, `thread-test`) and grouped frees more than they
        // saved on shuffled frees.
        let stream = self.streams && more == 0;
        if stream && cache.streams_on(&self.policy, slot, self.in_stream(at, slot)) {
            self.set_stream(at, slot, true);
        }
        let first = self.alloc_batch(order, core, more, |index| {
            self.states.set(index, State::Cached(slot));
            cache.push(slot, index);
        })?;
        cache.refilled(slot);
        if more > 0 {
            self.parks(at);
        }
        Ok(first)
    }

    /// [`Self::take`] from `core`'s cache, under its lock; in a stream of an order moved one
    /// block at a time, straight from the backend without the lock: the list is empty
    /// (a refill emptied into the hand-out started the stream, and a park ends it), so the
    /// cache has nothing to add.
    #[inline]
    fn take_shared(&self, slot: usize, order: u32, core: usize) -> Result<usize, Error> {
        let at = self.cache_index(core);
        // The stream's flag first: almost always clear, it predicts well, where a test of the
        // batch first would follow the orders of the calls (one block a batch at some, not
        // at others) and mispredict on a mix of them.
        if self.in_stream(at, slot) && self.policy.batch[slot] == 1 {
            let index = self.backend.alloc(order, core)?;
            self.states.set(index, State::Direct(slot));
            return Ok(index);
        }
        self.take(&mut self.caches[at].lock(), slot, core)
    }

    /// Gives every cached block back to the backend, then what the backend keeps per core
    /// ([`BlockAlloc::drain`] for `core`).
    fn drain_all(&self, core: usize) {
        self.drain_caches(core);
        self.backend.drain();
    }

    /// Returns every cached block to the backend (no block is of an order below 0).
    pub(super) fn drain_caches(&self, core: usize) {
        self.drain_for(0, core);
    }

    /// Gives back, for an allocation of `order` that the backend refused, the cached blocks
    /// that may make a block of `order` free ([`Magazine::empty_cache`]), cache by cache.
    #[inline]
    fn drain_for(&self, order: u32, core: usize) {
        for front in self.caches.iter() {
            self.empty_cache(front, order, core);
        }
    }

    /// Gives the blocks of the cache `front` that may make a block of `order` free back to the
    /// backend for `core`: each of a smaller order stays where a caller's block starts at its
    /// buddy (*Refusals* in the module docs), unless the cache kept blocks at `core`'s last
    /// such call; every block, for `order` 0.
    fn empty_cache(&self, front: &Front, order: u32, core: usize) {
        let keep = |index: usize, of: u32| of < order && self.states.is_held(index ^ (1 << of));
        let mut cache = front.lock();
        let kept = cache.take_all_but(&self.policy, core, keep, |blocks, of| {
            self.give_back(blocks, of, core)
        });
        front.may_hold.store(kept, Ordering::Relaxed);
    }

    /// Gives the blocks of every cache whose lock is free at once back to the backend, each
    /// through its `try_free`: nothing here waits. A block the backend would wait for stays
    /// parked, with the rest of its list. Whether any block went back.
    fn try_drain_caches(&self, core: usize) -> bool {
        let mut any = false;
        for mut cache in self.caches.iter().filter_map(|front| front.try_lock()) {
            for (slot, &order) in self.policy.orders.iter().enumerate() {
                while let Some(index) = cache.pop(slot) {
                    self.states.set(index, State::Free);
                    let given = self.try_give_back(index, order, core, State::Cached(slot));
                    if given.is_err() {
                        cache.push(slot, index);
                        break;
                    }
                    any = true;
                }
            }
        }
        any
    }

    /// Records a block that the backend handed to a caller, no cache held, in the state
    /// table (`Live`) if its order is cached (`slot` is its order's, from [`Policy::slot`]).
    /// Blocks of the other orders never enter a cache, so the backend alone answers their
    /// frees (exactly, as it does without caches) and the table is not touched for them.
    #[inline]
    fn record_live(&self, slot: Option<usize>, index: usize) {
        if let Some(slot) = slot {
            self.states.set(index, State::Live(slot));
        }
    }

    /// Takes a batch off `cache`'s list at `slot` (above its watermark), lets the cache go,
    /// and only then gives the batch back to the backend: a spill under the lock would keep
    /// every other core's free of a block this cache holds waiting for the backend
    /// (docs/results.md, "Frees of other cores' blocks"). The batch's blocks are `Free` in
    /// the table before the lock goes, so a free of one meanwhile is refused, and no
    /// allocation can find them: they are in no list, and the backend has them allocated
    /// until it frees them. No policy's batch is larger than the buffer
    /// ([`Policy::with_units`]).
    #[cold]
    #[inline(never)]
    fn spill_unlocked(&self, mut cache: CacheGuard<'_>, slot: usize, order: u32, core: usize) {
        let mut batch = [0usize; SPILL_BUFFER];
        let mut taken = 0;
        cache.spill(&self.policy, slot, |blocks| {
            batch[..blocks.len()].copy_from_slice(blocks);
            self.mark_free(blocks);
            taken = blocks.len();
        });
        drop(cache);
        self.free_owned(&batch[..taken], order, core);
    }

    /// Ends the caller's block at `index` of the order at `slot`, held by cache `owner` (not
    /// one the caller holds), under `owner`'s lock: only the check and the store happen
    /// there, and the block, `Cached` and in no list, is the caller's to park in its own
    /// cache. Parking it in `owner`'s cache instead, with that cache's spills, would hold
    /// the lock that `owner`'s core takes for every call while a batch went back to the
    /// backend, so two cores freeing each other's blocks would wait for each other's spills
    /// (docs/results.md, "Frees of other cores' blocks"). Out of line: the usual free ends
    /// its own cache's blocks.
    #[cold]
    #[inline(never)]
    fn end_held_elsewhere(&self, index: usize, slot: usize, owner: usize) -> Result<(), Error> {
        let mut held_by = Some(owner);
        while let Some(at) = held_by {
            let _held = self.caches[at].lock();
            held_by = self.end_in(index, slot, at)?;
        }
        Ok(())
    }

    /// Ends the caller's block at `index` of the cached order at `slot` for a free that
    /// holds cache `at`'s lock, to be parked there (`None`), unless another cache holds it:
    /// then the free goes on under that cache's lock (`Some` of its index), the state
    /// unchanged.
    #[inline]
    fn end_in(&self, index: usize, slot: usize, at: usize) -> Result<Option<usize>, Error> {
        match self.end_owned(index, slot, at, State::Cached(slot)) {
            true => Ok(None),
            false => self.end_not_in(index, slot, at),
        }
    }

    /// [`Self::end_in`] for a block that cache `at` does not hold: through the CAS if it is
    /// `Live`. Out of line, to keep the usual free small.
    #[cold]
    #[inline(never)]
    fn end_not_in(&self, index: usize, slot: usize, at: usize) -> Result<Option<usize>, Error> {
        loop {
            match self.end_live(index, slot, State::Cached(slot))? {
                None => return Ok(None),
                Some(owner) if owner != at => return Ok(Some(owner)),
                // Held by `at` only if handed out under its lock, which the caller holds:
                // not since `end_owned` looked; read again.
                Some(_) if self.end_owned(index, slot, at, State::Cached(slot)) => return Ok(None),
                Some(_) => {}
            }
        }
    }

    /// What every free of `(index, order)` by `core` does before it takes a cache: the
    /// reservation's check; a `Direct` block's free, straight to the backend, which ends
    /// `core`'s stream of the order; else the block's check. Then the slot of `order`, whose
    /// block the caller ends and parks, or `None` where the free is done (the backend's, for
    /// a `Direct` block or an order that is not cached).
    ///
    /// The `Direct` test comes first on every free, before the block is checked: a `Direct`
    /// state of the order vouches for the block (see [`BlockStates::direct_at`]), and any
    /// other state costs the free only that load.
    #[inline]
    fn cached_slot(&self, index: usize, order: u32, core: usize) -> Result<Option<usize>, Error> {
        self.reserved.check_free(index, order, false)?;
        // Only a `Direct` block of `order` goes straight back; another order's, or none of a
        // cached order, gets the full check.
        let direct = self.states.direct_at(index);
        if let Some(slot) = direct.filter(|&s| self.policy.slot(order) == Some(s)) {
            // Recorded `Free` before the backend has it, so that no later free of it stops
            // anywhere but at the table; a racing free of the same block may do the same,
            // and the backend lets one of the two through.
            self.states.set(index, State::Free);
            let freed = self.backend.free(index, order, core);
            self.set_stream(self.cache_index(core), slot, false);
            return freed.map(|()| None);
        }
        check_block(index, order, self.max_order(), self.total_units())?;
        match self.policy.slot(order) {
            Some(slot) => Ok(Some(slot)),
            None => self
                .uncached_answer(index, self.backend.free(index, order, core))
                .map(|()| None),
        }
    }

    /// Gives the block `(index, order)`, already `Free` in the table, to the backend with
    /// its `try_free`; where that refuses, the block's state goes back to `to` and it stays
    /// the caller's. The block is the caller's alone until the backend has it: no racing free
    /// passes the table, and the backend holds it as allocated.
    fn try_give_back(&self, index: usize, order: u32, core: usize, to: State) -> Result<(), Error> {
        let refused = |_: &Error| self.states.set(index, to);
        self.backend
            .try_free(index, order, core)
            .inspect_err(refused)
    }

    /// The backend's answer `freed` to a free of the checked block `(index, order)` of an
    /// uncached order, as callers see it: the backend sees a cached block as allocated, so
    /// where one starts its answer would be `OrderMismatch`, but the unit is free to callers.
    fn uncached_answer(&self, index: usize, freed: Result<(), Error>) -> Result<(), Error> {
        freed.map_err(|e| match (e, self.states.get(index)) {
            (Error::OrderMismatch, State::Cached(_)) => Error::NotAllocated,
            _ => e,
        })
    }

    /// Ends the caller's `Live` block at `index` of the cached order at `slot` in the state
    /// table, moving it to `to`: the one CAS that decides racing frees; the caller then
    /// parks it (or gives it back): `None`. If a cache holds the block, the state is left
    /// as it is and the answer names the cache (`Some` of its index), whose lock decides
    /// the free ([`Self::end_owned`]).
    #[inline]
    fn end_live(&self, index: usize, slot: usize, to: State) -> Result<Option<usize>, Error> {
        match self.states.release(index, slot, to) {
            Ok(()) => Ok(None),
            Err(State::Owned(held, owner)) if held == slot => Ok(Some(owner)),
            // Handed out `Direct` since the free read the state (which its free decides
            // alone): the block named was not allocated when the free began.
            Err(State::Direct(held)) if held == slot => Err(Error::NotAllocated),
            Err(found) => match states::refusal(found) {
                // No cached order's block starts here; a caller's block of an uncached
                // order may (the table does not record those).
                Error::NotAllocated if self.starts_uncached_block(index) => {
                    Err(Error::OrderMismatch)
                }
                e => Err(e),
            },
        }
    }

    /// Ends the caller's block at `index` of the order at `slot`, held by cache `owner`,
    /// whose lock the caller holds, moving it to `to`; false (nothing changed) if it is no
    /// longer held by `owner` at that order: the free starts over.
    #[inline]
    fn end_owned(&self, index: usize, slot: usize, owner: usize, to: State) -> bool {
        // Only the holder of `owner`'s lock moves the state out of `Owned(_, owner)`, so it
        // cannot change between the check and the store.
        self.states.end(index, State::Owned(slot, owner), to)
    }

    /// Parks the released block `(index, order)` in `cache` (`core`'s, held by the caller),
    /// giving its oldest batch back to the backend if the list is above its watermark.
    #[inline]
    fn park(&self, cache: &mut CoreCache, slot: usize, index: usize, order: u32, core: usize) {
        self.put(cache, self.cache_index(core), slot, index);
        cache.spill(&self.policy, slot, |blocks| {
            self.give_back(blocks, order, core)
        });
    }

    /// Gives `blocks` of `order`, taken out of a cache, back to the backend.
    fn give_back(&self, blocks: &[usize], order: u32, core: usize) {
        self.mark_free(blocks);
        self.free_owned(blocks, order, core);
    }

    /// Records `blocks`, taken out of a cache on their way back to the backend, as `Free`:
    /// every free of one stops at the table from here on.
    fn mark_free(&self, blocks: &[usize]) {
        blocks.iter().for_each(|&b| self.states.set(b, State::Free));
    }

    /// Whether the backend holds a block of an uncached order starting at `index` (a
    /// caller's: such blocks are never cached).
    fn starts_uncached_block(&self, index: usize) -> bool {
        matches!(
            self.backend.block_of(index),
            Ok(Some((start, order))) if start == index && self.policy.slot(order).is_none()
        )
    }

    /// Whether any cache may hold blocks, by the hints ([`Front::may_hold`]).
    fn may_hold_any(&self) -> bool {
        self.caches
            .iter()
            .any(|f| f.may_hold.load(Ordering::Relaxed))
    }

    /// The backend's `block`, or `None` where it is parked in a cache.
    fn unparked(&self, block: Option<(usize, u32)>) -> Result<Option<(usize, u32)>, Error> {
        Ok(block.filter(|&(start, order)| !self.is_parked(start, order)))
    }

    /// Whether the block `(start, order)` sits in a cache.
    fn is_parked(&self, start: usize, order: u32) -> bool {
        self.policy
            .slot(order)
            .is_some_and(|slot| self.states.get(start) == State::Cached(slot))
    }
}

impl<A: Backend> BlockAlloc for Magazine<A> {
    /// See [`BlockAlloc::alloc`].
    #[inline]
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        // Not `check_order`: its `?` costs this fast path an instruction (callgrind).
        if order > self.max_order() {
            return Err(Error::BadOrder);
        }
        let slot = self.policy.slot(order);
        let found = match slot {
            Some(slot) => self.take_shared(slot, order, core),
            None => self.backend.alloc(order, core),
        };
        match found {
            // Free blocks may sit in caches (this core's of other orders, or other cores'):
            // give them back so they merge, then ask once more. Where no cache holds any,
            // the backend's refusal stands. The backend is not drained: its own allocation
            // gives back what it keeps per core before it refuses (LLFree's complete
            // fallback), so that would change nothing but the placement of later
            // allocations, and cost a reclaim loop a new reservation at every refusal.
            Err(Error::OutOfMemory) if self.may_hold_any() => {
                self.drain_for(order, core);
                let found = self.backend.alloc(order, core);
                found.inspect(|&index| self.record_live(slot, index))
            }
            other => other,
        }
    }

    /// See [`BlockAlloc::alloc_class`]: the default class as [`BlockAlloc::alloc`]; any other
    /// past the caches, from the backend's `alloc_class` (the caches hold blocks of no
    /// particular class), recorded as `alloc` records blocks it gets from the backend.
    fn alloc_class(&self, order: u32, class: Class, core: usize) -> Result<usize, Error> {
        if class == Class::default() {
            return self.alloc(order, core);
        }
        crate::check_order(order, self.max_order())?;
        let backend = || self.backend.alloc_class(order, class, core);
        let found = match backend() {
            Err(Error::OutOfMemory) => {
                self.drain_all(core);
                backend()
            }
            other => other,
        };
        found.inspect(|&index| self.record_live(self.policy.slot(order), index))
    }

    /// See [`BlockAlloc::free`]. A block is ended under the lock of the cache that holds it
    /// (through the state table's CAS if none does) and parked in `core`'s cache. `core`'s
    /// cache is locked first, before the state is read: it is the holder on the common
    /// path, and its address does not wait for the state's load.
    #[inline]
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        let Some(slot) = self.cached_slot(index, order, core)? else {
            return Ok(());
        };
        let own = self.cache_index(core);
        let mut cache = self.caches[own].lock();
        if let Some(owner) = self.end_in(index, slot, own)? {
            // Never two caches held: ours is let go while the holder's is taken.
            drop(cache);
            self.end_held_elsewhere(index, slot, owner)?;
            cache = self.caches[own].lock();
        }
        self.put(&mut cache, own, slot, index);
        if cache.is_over(&self.policy, slot) {
            self.spill_unlocked(cache, slot, order, own);
        }
        Ok(())
    }

    /// See [`BlockAlloc::free_units`]: cached blocks count as free.
    fn free_units(&self) -> usize {
        let cores = 0..self.caches.len();
        self.backend.free_units() + cores.map(|core| self.parked_units(core)).sum::<usize>()
    }

    /// See [`BlockAlloc::total_units`].
    #[inline]
    fn total_units(&self) -> usize {
        self.backend.total_units()
    }

    /// See [`BlockAlloc::max_order`].
    #[inline]
    fn max_order(&self) -> u32 {
        self.backend.max_order()
    }

    /// See [`BlockAlloc::capabilities`]: the backend's, whose operations these are.
    fn capabilities(&self) -> crate::Capabilities {
        self.backend.capabilities()
    }

    /// The caches, then the backend's own.
    fn drain(&self) {
        self.drain_all(0);
    }

    /// See [`BlockAlloc::drain_core`]: `core`'s cache, then what the backend keeps for
    /// `core`.
    fn drain_core(&self, core: usize) {
        self.empty_cache(self.cache(core), 0, core);
        self.backend.drain_core(core);
    }

    /// See [`BlockAlloc::try_alloc`]: `core`'s cache if its lock is free at once, else the
    /// backend's `try_alloc`. Where the backend has nothing, the caches whose locks are free
    /// at once give their blocks back through the backend's `try_free` (so that they merge)
    /// and the backend is asked again; what a held cache parks, or a backend that would wait
    /// takes back, stays parked. So the answer is [`Error::WouldBlock`] while any cache holds
    /// a block or is busy, and [`Error::OutOfMemory`] only when every cache was seen empty.
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        crate::check_order(order, self.max_order())?;
        if let Some(slot) = self.policy.slot(order) {
            if let Some(index) = self.cache(core).try_lock().and_then(|mut c| c.pop(slot)) {
                self.hand_out(index, slot, core);
                return Ok(index);
            }
        }
        let mut found = self.backend.try_alloc(order, core);
        if found == Err(Error::OutOfMemory) && self.try_drain_caches(core) {
            found = self.backend.try_alloc(order, core);
        }
        // A cache that is busy or holds blocks may have some for the backend soon.
        let busy = |c: &CachePadded<Front>| c.try_lock().is_none_or(|c| c.units(&self.policy) != 0);
        match found {
            Err(Error::OutOfMemory) if self.caches.iter().any(busy) => Err(Error::WouldBlock),
            other => other.inspect(|&index| self.record_live(self.policy.slot(order), index)),
        }
    }

    /// See [`BlockAlloc::try_free`]. A block of a cached order that a cache holds goes into
    /// that cache if its lock is free at once (else `WouldBlock`) and it has room without a
    /// spill (a spill could wait for a locked backend); any other into `core`'s cache on the
    /// same terms. Where there is no room, or `core`'s cache is held, the block goes
    /// straight back to the backend if that can take it without waiting; the backend's
    /// `try_free` for the other orders.
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order(), self.total_units())?;
        self.reserved.check_free(index, order, true)?;
        let Some(slot) = self.policy.slot(order) else {
            let freed = self.backend.try_free(index, order, core);
            return self.uncached_answer(index, freed);
        };
        let would_block = |e| match e {
            Error::Unsupported => Error::WouldBlock,
            e => e,
        };
        // Recorded `Free` before the backend has it back: its free decides racing frees.
        if self.states.end(index, State::Direct(slot), State::Free) {
            // Back to `Direct` only where the backend did nothing (it would have waited).
            return self
                .backend
                .try_free(index, order, core)
                .inspect(|()| self.set_stream(self.cache_index(core), slot, false))
                .inspect_err(|&e| {
                    if matches!(e, Error::WouldBlock | Error::Unsupported) {
                        self.states.set(index, State::Direct(slot));
                    }
                })
                .map_err(would_block);
        }
        loop {
            if let State::Owned(held, owner) = self.states.get(index) {
                if held == slot {
                    let mut cache = self.caches[owner].try_lock().ok_or(Error::WouldBlock)?;
                    if cache.has_room(&self.policy, slot) {
                        if !self.end_owned(index, slot, owner, State::Cached(slot)) {
                            continue;
                        }
                        self.put(&mut cache, owner, slot, index);
                        return Ok(());
                    }
                    if !self.end_owned(index, slot, owner, State::Free) {
                        continue;
                    }
                    return self
                        .try_give_back(index, order, owner, State::Owned(slot, owner))
                        .map_err(would_block);
                }
            }
            if let Some(mut cache) = self.cache(core).try_lock() {
                if cache.has_room(&self.policy, slot) {
                    if self.end_live(index, slot, State::Cached(slot))?.is_some() {
                        continue;
                    }
                    self.put(&mut cache, self.cache_index(core), slot, index);
                    return Ok(());
                }
            }
            if self.end_live(index, slot, State::Free)?.is_some() {
                continue;
            }
            return self
                .try_give_back(index, order, core, State::Live(slot))
                .map_err(would_block);
        }
    }

    /// See [`BlockAlloc::alloc_at`]. The backend sees cached blocks as allocated, so where it
    /// finds a unit of the block taken while a cache may hold blocks, every cache gives its
    /// blocks back and the backend is asked again: a unit never goes to two owners, and a
    /// free unit is refused only if a concurrent free parks it meanwhile.
    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order(), self.total_units())?;
        match self.backend.alloc_at(index, order, core) {
            Err(Error::Occupied) if self.may_hold_any() => {
                self.drain_caches(core);
                self.backend.alloc_at(index, order, core)?;
            }
            other => other?,
        }
        self.record_live(self.policy.slot(order), index);
        Ok(())
    }

    ranges_recorded!();

    /// See [`BlockAlloc::block_of`]: the backend's answer, except that a cached block is
    /// free.
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.unparked(self.backend.block_of(index)?)
    }

    /// See [`BlockAlloc::try_block_of`]: the backend's, as `block_of` (the state table
    /// never waits).
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.unparked(self.backend.try_block_of(index)?)
    }

    /// The backend's next block that is not parked in a cache.
    fn next_block(&self, mut from: usize) -> Result<Option<(usize, u32)>, Error> {
        loop {
            match self.backend.next_block(from)? {
                Some((start, order)) if self.is_parked(start, order) => from = start + (1 << order),
                other => return Ok(other),
            }
        }
    }

    fn with_core(&self, core: usize, f: &mut dyn FnMut(&mut dyn HeldCore)) {
        f(&mut self.pin(core));
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

/// Caches of some orders only in front of a locked buddy, for the tests: orders 0–3 and 9,
/// as Linux's per-CPU lists, so that uncached orders lie between cached ones.
#[cfg(test)]
mod subset {
    use lock_api::RawMutex;

    use super::{plan, Magazine, Policy};
    use crate::buddy::Knuth;
    use crate::{Config, Locked};

    /// Orders 0–3 and 9, 64 units at a time, spilling above 256 units.
    static SUBSET: Policy = Policy::new(&[0, 1, 2, 3, 9], 64, 256);

    pub(crate) type Subset<R> = Magazine<Locked<Knuth, R>>;

    /// A [`Subset`] over `config`, with no streams: every free of a cached order parks.
    pub(crate) fn subset<R: RawMutex + Send + Sync>(config: Config) -> Subset<R> {
        let buddy = Locked::new(Knuth::new(config).unwrap());
        crate::table::build(plan(config, config.units), None, |parts, meta| {
            Magazine::build(buddy, &SUBSET, parts, meta)
        })
        .unwrap()
        .without_streams()
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
