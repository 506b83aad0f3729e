//! The parallel binary buddy ("Parallel Binary Buddy", after Johnson & Davis, ICCI'92; see
//! [References](crate#references)): Knuth's buddy with one lock per level instead of one global lock, so requests
//! of different sizes, and the split and merge steps of different requests, run in parallel.
//!
//! ```text
//! levels[k] (CachePadded): Mutex<R, list of free blocks of order k>  + wait counters
//! links (next/prev per unit), tags (per unit: Free(k) / Used(k) / none), both atomics
//! ```
//!
//! # Protocol
//! - A thread holds **at most one level lock at any time**, so there is no lock order to
//!   respect and no deadlock: no thread ever waits while holding a lock.
//! - Level `k`'s lock guards list `k` and every `Free(k)` tag: a tag becomes or stops being
//!   `Free(k)` only under it. Blocks between two lists (taken from a list by an alloc that is
//!   splitting it, or by a free that is merging it) are *in transit*: owned by that one
//!   thread, on no list, tagged none; the lock hand-over orders their links and tags.
//! - alloc(k): for `j = k..=max`, skip `j` if its non-empty hint (written under its lock,
//!   read without) says empty, else lock `j` alone and pop; on success push the right halves at
//!   `j-1, ..., k`, each under its own lock. The left half stays in transit until returned,
//!   so no free can meet a buddy of a pushed right half: split pushes need no buddy check.
//! - free(k): claim the block by a CAS on its tag (`Used(k)` to none; a racing double free
//!   loses and gets `NotAllocated`). Then at level `j = k, k+1, ...`: lock `j`; if the buddy
//!   is tagged `Free(j)`, unlink it, unlock, and carry the merged block to `j+1`; otherwise push
//!   the block and stop. Two buddies that become free concurrently meet at their level: the
//!   check and push are one critical section, so the second of them sees the first.
//!   Hence when no operation is in flight, no two free buddies below `max_order` sit on a
//!   list (merging is as eager as Knuth's), and no block is lost or handed out twice.
//! - A concurrent alloc may miss a block that is in transit (or behind a stale hint); it rescans up to `RESCANS`
//!   times while enough units are free, and may still report `OutOfMemory` spuriously under
//!   contention. With no operation in flight an alloc fails only when no free aligned block
//!   exists (the model check runs sequentially and holds it to that).

use alloc::boxed::Box;
use alloc::vec::Vec;

use lock_api::{Mutex, MutexGuard, RawMutex};

use crate::buddy::{buddy_of, carve, initial_blocks};
use crate::buddy::{Links, ListHead};
use crate::buddy::{Tag, Tags};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use crate::sync::CachePadded;
use crate::{check_block, BlockAlloc, Capabilities, Config, Error};

/// Extra scans an allocation makes, while enough units are free, before `OutOfMemory`.
const RESCANS: usize = 2;

/// The parallel binary buddy with a spinlock per level.
pub type PerLevelSpin = PerLevel<spin::Mutex<()>>;
/// The parallel binary buddy with a spin-then-yield lock per level (the "mutex" variant).
pub type PerLevelYield = PerLevel<buddyfree::locked::YieldMutex>;

/// A buddy allocator with one lock of type `R` per level.
pub struct PerLevel<R: RawMutex = spin::Mutex<()>> {
    levels: Box<[CachePadded<Level<R>>]>,
    links: Links<AtomicUsize>,
    tags: Tags<AtomicU8>,
    free_units: CachePadded<AtomicUsize>,
    total_units: usize,
    max_order: u32,
}

struct Level<R: RawMutex> {
    list: Mutex<R, Guarded>,
    /// Lock acquisitions that found the lock held and waited.
    waits: AtomicU64,
    /// Nanoseconds spent waiting for the lock.
    wait_ns: AtomicU64,
    /// Requests waiting for the lock now, and the most ever at once.
    pending: AtomicUsize,
    pending_max: AtomicUsize,
    /// Whether the list is non-empty, written under the lock, read without it: a scan skips
    /// levels that look empty instead of taking their locks.
    nonempty: AtomicBool,
}

/// What a level's lock guards.
struct Guarded {
    head: ListHead,
    /// Lock acquisitions, counted under the lock (no extra shared write).
    acquired: u64,
}

/// One level's lock counters, the seed's measure of overhead ("pending requests").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Times the level's lock was taken.
    pub acquired: u64,
    /// Times a request found the lock held and had to wait.
    pub waits: u64,
    /// Total time requests waited for the lock, in nanoseconds.
    pub wait_ns: u64,
    /// The most requests ever waiting for this level's lock at the same time.
    pub pending_high_water: usize,
    /// Free blocks on the level's list now.
    pub free_blocks: usize,
}

impl<R: RawMutex> PerLevel<R> {
    /// An allocator of `config.units` free units (any number; the tail beyond the last block
    /// of `max_order` is cut into smaller blocks). It keeps no per-core state.
    ///
    /// ```
    /// use buddyfree_baselines::per_level::PerLevelSpin;
    /// use buddyfree::{BlockAlloc, Config};
    ///
    /// let buddy = PerLevelSpin::new(Config::new(1 << 12, 8))?;
    /// let index = buddy.alloc(3, 0)?;
    /// buddy.free(index, 3, 0)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        let mut alloc = PerLevel {
            levels: (0..=config.max_order)
                .map(|_| {
                    CachePadded::new(Level {
                        list: Mutex::new(Guarded {
                            head: ListHead::EMPTY,
                            acquired: 0,
                        }),
                        waits: AtomicU64::new(0),
                        wait_ns: AtomicU64::new(0),
                        pending: AtomicUsize::new(0),
                        pending_max: AtomicUsize::new(0),
                        nonempty: AtomicBool::new(false),
                    })
                })
                .collect(),
            links: Links::new(config.units)?,
            tags: Tags::new(config.units)?,
            free_units: CachePadded::new(AtomicUsize::new(config.units)),
            total_units: config.units,
            max_order: config.max_order,
        };
        for (index, order) in initial_blocks(config.units, config.max_order) {
            // Not through `lock`: building the lists is not a request to count.
            let level = &mut alloc.levels[order as usize];
            alloc.links.push(&mut level.list.get_mut().head, index);
            alloc.tags.set(index, Tag::free(order));
            level.nonempty.store(true, Ordering::Relaxed);
        }
        Ok(alloc)
    }

    /// The lock counters of every level, index = order.
    pub fn level_stats(&self) -> Vec<LevelStats> {
        self.levels
            .iter()
            .map(|level| {
                let guarded = level.list.lock();
                LevelStats {
                    acquired: guarded.acquired,
                    waits: level.waits.load(Ordering::Relaxed),
                    wait_ns: level.wait_ns.load(Ordering::Relaxed),
                    pending_high_water: level.pending_max.load(Ordering::Relaxed),
                    free_blocks: guarded.head.len(),
                }
            })
            .collect()
    }

    /// Zeroes the lock counters (not the lists), e.g. between benchmark phases.
    pub fn reset_stats(&self) {
        for level in self.levels.iter() {
            level.list.lock().acquired = 0;
            level.waits.store(0, Ordering::Relaxed);
            level.wait_ns.store(0, Ordering::Relaxed);
            level.pending_max.store(0, Ordering::Relaxed);
        }
    }

    /// Locks level `order`, counting the wait if the lock is held.
    fn lock(&self, order: u32) -> MutexGuard<'_, R, Guarded> {
        let level = &self.levels[order as usize];
        let mut guard = match level.list.try_lock() {
            Some(guard) => guard,
            None => {
                let waiting = level.pending.fetch_add(1, Ordering::Relaxed) + 1;
                level.pending_max.fetch_max(waiting, Ordering::Relaxed);
                let clock = Clock::start();
                let guard = level.list.lock();
                level
                    .wait_ns
                    .fetch_add(clock.elapsed_ns(), Ordering::Relaxed);
                level.waits.fetch_add(1, Ordering::Relaxed);
                level.pending.fetch_sub(1, Ordering::Relaxed);
                guard
            }
        };
        guard.acquired += 1;
        guard
    }

    /// One scan upward from `order` for a block, split down to `order` and handed out.
    fn take(&self, order: u32) -> Option<usize> {
        for from in order..=self.max_order {
            if !self.levels[from as usize].nonempty.load(Ordering::Relaxed) {
                continue;
            }
            let mut guard = self.lock(from);
            let Some(index) = guard.head.first() else {
                continue;
            };
            self.unlink(&mut guard, index, from);
            drop(guard);
            carve(index, from, index, order, |piece, k| {
                self.push(&mut self.lock(k), piece, k)
            });
            self.free_units.fetch_sub(1 << order, Ordering::Relaxed);
            self.tags.mark_used(index, order);
            return Some(index);
        }
        None
    }

    /// Puts a block in transit on level `order`'s list (its lock held by `guard`).
    fn push(&self, guard: &mut Guarded, index: usize, order: u32) {
        self.links.push(&mut guard.head, index);
        self.tags.set(index, Tag::free(order));
        self.levels[order as usize]
            .nonempty
            .store(true, Ordering::Relaxed);
    }

    /// Takes the block at `index` off level `order`'s list into transit.
    fn unlink(&self, guard: &mut Guarded, index: usize, order: u32) {
        self.links.remove(&mut guard.head, index);
        self.tags.set(index, Tag::NONE);
        if guard.head.is_empty() {
            self.levels[order as usize]
                .nonempty
                .store(false, Ordering::Relaxed);
        }
    }
}

impl<R: RawMutex + Send + Sync> BlockAlloc for PerLevel<R> {
    fn alloc(&self, order: u32, _core: usize) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        for _ in 0..=RESCANS {
            if let Some(index) = self.take(order) {
                return Ok(index);
            }
            // A scan misses blocks in transit between two levels; while enough units are free
            // one may be, so look again a few times before giving up.
            if self.free_units.load(Ordering::Relaxed) < 1 << order {
                break;
            }
            crate::sync::spin_loop();
        }
        Err(Error::OutOfMemory)
    }

    fn free(&self, index: usize, order: u32, _core: usize) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        self.tags.claim_used(index, order)?;
        self.free_units.fetch_add(1 << order, Ordering::Relaxed);
        let (mut index, mut order) = (index, order);
        loop {
            let mut guard = self.lock(order);
            let buddy = buddy_of(index, order);
            if order < self.max_order && self.tags.is_free(buddy, order) {
                self.unlink(&mut guard, buddy, order);
                drop(guard);
                index = index.min(buddy);
                order += 1;
            } else {
                self.push(&mut guard, index, order);
                return Ok(());
            }
        }
    }

    fn free_units(&self) -> usize {
        self.free_units.load(Ordering::Relaxed)
    }

    fn total_units(&self) -> usize {
        self.total_units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    /// `block_of` and `try_block_of` from the tags; no `alloc_at`, and no `try_alloc` or
    /// `try_free`, which would have to give up half-way between levels' locks.
    fn capabilities(&self) -> Capabilities {
        Capabilities::BLOCK_OF.union(Capabilities::TRY_BLOCK_OF)
    }

    /// From the tags: a caller's block is tagged `Used(k)` from the end of its allocation
    /// to the start of its free, so the answer for it is exact; a block a racing operation
    /// has in transit between two levels reads as free.
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        crate::buddy::block_of(&self.tags, index, self.max_order, self.total_units)
    }

    /// The same as `block_of`, which reads the tags without taking a level's lock.
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.block_of(index)
    }
}

/// A wait timer: the monotonic clock.
struct Clock {
    start: std::time::Instant,
}

impl Clock {
    fn start() -> Self {
        Clock {
            start: std::time::Instant::now(),
        }
    }

    fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use buddyfree::locked::YieldMutex;
    use loom::sync::Arc;

    /// Explores the interleavings with at most 3 preemptions (all of them take minutes).
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(f);
    }

    /// A fresh allocator whose lock flags all exist before any thread is spawned (made in one
    /// thread, they are ordered before the others by the spawn; `OnceLock` is invisible to loom).
    fn fresh() -> Arc<PerLevel<YieldMutex>> {
        let alloc = Arc::new(PerLevel::<YieldMutex>::new(Config::new(4, 2)).unwrap());
        alloc.level_stats();
        alloc
    }

    fn whole(alloc: &PerLevel<YieldMutex>) {
        assert_eq!(alloc.free_units(), 4);
        assert_eq!(alloc.alloc(2, 0), Ok(0));
    }

    /// Two buddies freed at once meet at their level under its lock and merge all the way up:
    /// the heap is whole afterwards, whichever free runs first.
    #[test]
    fn loom_buddies_freed_concurrently_merge() {
        model(|| {
            let alloc = fresh();
            let (x, y) = (alloc.alloc(0, 0).unwrap(), alloc.alloc(0, 0).unwrap());
            assert_eq!(x ^ y, 1);
            let other = {
                let alloc = alloc.clone();
                loom::thread::spawn(move || alloc.free(y, 0, 1).unwrap())
            };
            alloc.free(x, 0, 0).unwrap();
            other.join().unwrap();
            whole(&alloc);
        });
    }

    /// A split racing a merge: one thread allocates and frees a unit while the other does the
    /// same with a block of 2. Blocks never overlap, and the heap ends whole.
    #[test]
    fn loom_split_races_merge() {
        model(|| {
            let alloc = fresh();
            let other = {
                let alloc = alloc.clone();
                loom::thread::spawn(move || {
                    let block = alloc.alloc(1, 1);
                    if let Ok(index) = block {
                        alloc.free(index, 1, 1).unwrap();
                    }
                    block
                })
            };
            let unit = alloc.alloc(0, 0);
            if let Ok(index) = unit {
                alloc.free(index, 0, 0).unwrap();
            }
            let block = other.join().unwrap();
            assert!(
                unit.is_ok() || block.is_ok(),
                "both failed with 4 units free"
            );
            whole(&alloc);
        });
    }
}
