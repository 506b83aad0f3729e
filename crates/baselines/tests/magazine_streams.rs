//! Streams of allocations through the magazines (every `*-magazine` allocator in the
//! registry): bursts longer than a list's watermark, whose later blocks a core hands out
//! `Direct` (freed straight to the backend, which alone decides their frees), freed in a
//! shuffled order by other threads while those allocate and free pairs of the same order,
//! and raced double frees of such blocks. No unit goes to two owners, none is lost, and
//! each raced block is freed exactly once.

mod common;

use buddyfree::{BlockAlloc, Config};
use buddyfree_baselines::registry::{self, Entry};
use common::{assert_whole, double_free_race_of, run_threads, stamp, Owners, Rng};

/// Small enough that bursts run far past every list's watermark and refills come often.
const UNITS: usize = 1 << 14;
const MAX_ORDER: u32 = 10;
const THREADS: usize = 4;
/// The orders of the rounds: batches of 32 units, of 256, and one block at a time (allocated
/// without the cache's lock in a stream): over NBBS-4 order 6, on the top row of a cell,
/// which it takes in bulk no cheaper than block by block; everywhere the huge frames; over
/// NBBS, which has no groups, every order.
const ORDERS: [u32; 5] = [0, 1, 3, 6, 9];

fn magazines() -> impl Iterator<Item = &'static Entry> {
    let found: Vec<&Entry> = registry::entries()
        .iter()
        .filter(|e| e.name.ends_with("-magazine"))
        .collect();
    assert!(found.len() >= 2, "only {} magazines", found.len());
    found.into_iter()
}

fn build(entry: &Entry) -> registry::DynAlloc {
    (entry.build)(
        Config::new(UNITS, MAX_ORDER).with_cores(THREADS),
        Default::default(),
    )
    .unwrap()
}

/// Each thread allocates a burst of half its share of the heap (claimed in `owners`); then
/// the blocks of all threads, shuffled, are freed by every thread in turn, each also making
/// an alloc+free pair every fourth block.
fn burst_then_shuffled_frees(alloc: &dyn BlockAlloc, owners: &Owners, order: u32, seed: u64) {
    let burst = (UNITS / THREADS / 2) >> order;
    // A spin lock, which ThreadSanitizer sees (the standard library is not instrumented).
    let out = spin::Mutex::new(Vec::new());
    run_threads(THREADS, |t| {
        let mut mine = Vec::with_capacity(burst);
        for _ in 0..burst {
            // Half the heap is free, but a refusal while other cores refill and drain is
            // allowed (see `Magazine`'s docs): the burst just ends there.
            let Ok(index) = alloc.alloc(order, t) else {
                break;
            };
            owners.claim(index, order, stamp(index, order));
            mine.push(index);
        }
        out.lock().extend(mine);
    });
    let mut blocks = out.into_inner();
    let mut rng = Rng::new(seed);
    for i in (1..blocks.len()).rev() {
        blocks.swap(i, rng.below(i + 1));
    }
    run_threads(THREADS, |t| {
        for (k, &index) in blocks.iter().enumerate().skip(t).step_by(THREADS) {
            owners.release(index, order, stamp(index, order));
            alloc.free(index, order, t).unwrap();
            if k % 4 == 0 {
                if let Ok(pair) = alloc.alloc(order, t) {
                    owners.claim(pair, order, stamp(pair, order));
                    owners.release(pair, order, stamp(pair, order));
                    alloc.free(pair, order, t).unwrap();
                }
            }
        }
    });
}

#[test]
fn bursts_freed_on_other_cores_are_never_lost_or_handed_out_twice() {
    for entry in magazines() {
        let alloc = build(entry);
        let owners = Owners::new(UNITS);
        for round in 0..25 {
            let order = ORDERS[round % ORDERS.len()];
            burst_then_shuffled_frees(&*alloc, &owners, order, round as u64 + 1);
        }
        assert_whole(&*alloc);
    }
}

/// A burst on one core, far past the watermark, then every thread frees every block of it
/// at once: exactly one free of each goes through, the rest are `NotAllocated`.
#[test]
fn raced_double_frees_of_stream_blocks_let_exactly_one_through() {
    for entry in magazines() {
        for order in [0, 6, 9] {
            let alloc = build(entry);
            let live: Vec<usize> = (0..(UNITS / 2) >> order)
                .map(|_| alloc.alloc(order, 0).unwrap())
                .collect();
            double_free_race_of(&*alloc, THREADS, &live, order);
        }
    }
}
