//! The NBBS paper's workloads (reference code: HPDCS/NBBS `TB_*` benchmarks), on blocks of
//! `k = 2^order` units (the paper's size S = 4 KiB * k).
//!
//! Each counts one operation per allocation attempt and per free. Work done before the start
//! barrier or after the timed loop (Larson's initial pool, freeing what is left) is counted in
//! the outcome's totals but not in the timed phase.

use std::time::{Duration, Instant};

use buddyfree::{BlockAlloc, HeldCore, OnCore};
use buddyfree_baselines::stats::HUGE_FRAME_UNITS;

use super::counts::{Counts, Recorder};
use super::outcome::{phase, Outcome};
use super::params::{Params, Stop};
use super::rng::Rng;
use crate::runner::{run_workers, Worker};

/// Constant Occupancy's pool, in units of `k`: 1·16 + 2·8 + 4·4 + 8·2 + 16·1.
pub const POOL_UNITS: usize = 80;

/// Constant Occupancy's pool, in blocks: 1 + 2 + 4 + 8 + 16.
pub const POOL_BLOCKS: usize = 31;

/// Constant Occupancy's largest blocks are `16k` units: 4 orders above `k`.
pub const POOL_SPAN: u32 = 4;

/// Units Constant Occupancy holds at once at `order` with `threads` threads: every thread's
/// pool.
pub fn constant_occupancy_units(order: u32, threads: usize) -> usize {
    threads * POOL_UNITS * (1 << order)
}

/// Units Larson holds at once at `order` with `threads` threads: every thread's blocks, each
/// counted at the largest size.
pub fn larson_units(order: u32, threads: usize, p: &Params) -> usize {
    threads * p.larson_chunks * ((1 << order) << p.larson_span)
}

/// Marks an empty slot in a pool of held blocks (its allocation failed).
const EMPTY: usize = usize::MAX;

/// Blocks of `k` units in a burst of `units` units (at least one).
pub(crate) fn burst(units: usize, k: usize) -> usize {
    (units / k).max(1)
}

/// The outcome of a run recorded with plain [`Counts`].
fn outcome(parts: Vec<Recorded<Counts>>) -> Outcome {
    let timed: Vec<_> = parts.iter().map(|p| (p.timed, p.time)).collect();
    let mut out = Outcome {
        phases: vec![phase("op", &timed)],
        ..Outcome::default()
    };
    out.count(&parts.iter().map(|p| p.total).collect::<Vec<_>>());
    out
}

/// `rounds` times: allocate `burst` blocks, then free them all; each burst on a held core
/// if `on_held_core` ([`Params::held_bursts`]).
fn bursts(
    a: &dyn BlockAlloc,
    order: u32,
    w: &Worker,
    rounds: usize,
    burst: usize,
    on_held_core: bool,
) -> Recorded<Counts> {
    let core = w.id;
    let mut c = Counts::default();
    let mut held = Vec::with_capacity(burst);
    let ((), time) = w.timed(|| {
        for _ in 0..rounds {
            if on_held_core {
                a.with_core(core, &mut |calls| {
                    one_burst(calls, order, burst, &mut held, &mut c)
                });
            } else {
                one_burst(&mut OnCore(a, core), order, burst, &mut held, &mut c);
            }
        }
    });
    Recorded {
        timed: c,
        time,
        total: c,
    }
}

/// Allocates `burst` blocks of `order` through `calls` into `held`, then frees them all.
#[inline(always)]
fn one_burst<H: HeldCore + ?Sized>(
    calls: &mut H,
    order: u32,
    burst: usize,
    held: &mut Vec<usize>,
    c: &mut Counts,
) {
    for _ in 0..burst {
        if let Some(i) = c.allocated(calls.alloc(order)) {
            held.push(i);
        }
    }
    for i in held.drain(..) {
        c.freed(calls.free(i, order));
    }
}

/// Linux Scalability (NBBS version): per thread `2k` rounds, each a burst of
/// `ls_burst_units / k` allocations of `k` units, then free them all.
pub fn linux_scalability(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let k = 1usize << order;
    let burst = burst(p.ls_burst_units, k);
    outcome(run_workers(threads, |w| {
        bursts(a, order, w, 2 * k, burst, p.held_bursts)
    }))
}

/// Thread Test (NBBS version of Hoard's): bursts of `tt_burst_units / P / k` blocks, repeated
/// `tt_repeats * k` times per thread.
pub fn thread_test(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let k = 1usize << order;
    let burst = burst(p.tt_burst_units / threads, k);
    outcome(run_workers(threads, |w| {
        bursts(a, order, w, p.tt_repeats * k, burst, p.held_bursts)
    }))
}

/// Cached Allocation: per thread `cached_pairs` allocations each immediately freed.
pub fn cached(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    outcome(run_workers(threads, |w| {
        let core = w.id;
        let mut c = Counts::default();
        let ((), time) = w.timed(|| {
            for _ in 0..p.cached_pairs {
                if let Some(i) = c.alloc(a, order, core) {
                    c.free(a, i, order, core);
                }
            }
        });
        Recorded {
            timed: c,
            time,
            total: c,
        }
    }))
}

/// full-heap's large request: one huge frame (2 MiB), order 9.
pub const FULL_HEAP_LARGE: u32 = HUGE_FRAME_UNITS.trailing_zeros();

/// Failing allocation on a full heap: each thread allocates blocks of `k` units until one
/// fails (untimed), then, once every thread has, makes `full_heap_fails` requests of 4 KiB
/// ("fail 4K") and as many of 2 MiB ("fail 2M"), which should all fail; then, with every
/// other block freed, requests of 2k ("fail 2k") and the reclaim loop ("reclaim", see
/// [`reclaim`]); then it frees what it holds. A request that cannot be served is the slow
/// path of every allocator (a search that finds nothing), and the one a caller under memory
/// pressure keeps hitting.
pub fn full_heap(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let parts = run_workers(threads, |w| {
        let core = w.id;
        let mut setup = Counts::default();
        // One more than the heap can hold: filling stops at the first failure, but an
        // allocator that never fails (malloc) must not fill the machine.
        let most = (a.total_units() >> order) + 1;
        let mut held = Vec::with_capacity(most / threads + 1);
        for _ in 0..most {
            match setup.alloc(a, order, core) {
                Some(i) => held.push((i, order)),
                None => break,
            }
        }
        let timed = |held: &mut Vec<(usize, u32)>, o: u32, requests: usize| {
            let mut c = Counts::default();
            let ((), time) = w.timed(|| {
                for _ in 0..requests {
                    // Not full after all (another thread's spurious failure stopped its
                    // fill early): keep the block, which fills the heap further.
                    if let Some(i) = c.alloc(a, o, core) {
                        held.push((i, o));
                    }
                }
            });
            (c, time)
        };
        let small = timed(&mut held, 0, p.full_heap_fails);
        let large = timed(&mut held, FULL_HEAP_LARGE, p.full_heap_fails);
        // A thread freeing early would serve the requests of one still timing them.
        w.sync();
        // Half the fill back (untimed): of each pair of buddies of `order` this thread
        // holds, the upper one. Half the units are then free, and the buddy of every free
        // block is held, so no free block of twice the size exists and requests of 2k all
        // fail, however the allocator placed the threads' blocks.
        held.sort_unstable();
        let mut kept = Vec::with_capacity(held.len());
        for (n, &(i, o)) in held.iter().enumerate() {
            let pair = n > 0 && o == order && held[n - 1] == (i ^ (1 << order), order);
            match pair && i & (1 << order) != 0 {
                true => setup.free(a, i, o, core),
                false => kept.push((i, o)),
            }
        }
        held = kept;
        w.sync();
        let fragmented = match order < a.max_order() {
            true => timed(
                &mut held,
                order + 1,
                p.full_heap_fails.min(FRAGMENTED_FAILS),
            ),
            false => (Counts::default(), Default::default()),
        };
        w.sync();
        let reclaim = reclaim(a, &mut held, order, core, p, w, &mut setup);
        w.sync();
        for &(i, o) in &held {
            setup.free(a, i, o, core);
        }
        (setup, small, large, fragmented, reclaim)
    });
    let small: Vec<_> = parts.iter().map(|p| p.1).collect();
    let large: Vec<_> = parts.iter().map(|p| p.2).collect();
    let fragmented: Vec<_> = parts.iter().map(|p| p.3).collect();
    let reclaim: Vec<_> = parts.iter().map(|p| p.4).collect();
    let mut out = Outcome {
        phases: vec![
            phase("fail 4K", &small),
            phase("fail 2M", &large),
            phase("fail 2k", &fragmented),
            phase("reclaim", &reclaim),
        ],
        ..Outcome::default()
    };
    out.count(
        &parts
            .iter()
            .flat_map(|p| [p.0, p.1 .0, p.2 .0, p.3 .0, p.4 .0])
            .collect::<Vec<_>>(),
    );
    out
}

/// full-heap's last phase, a kernel's reclaim loop on the fragmented heap: free one block of
/// `k` units the thread holds (a 4 KiB frame at order 0), then ask for a huge frame, which
/// fails while no frame is whole; at most [`FRAGMENTED_FAILS`] times. The blocks go back
/// round the huge frames (the first block of every frame, then the second, ...), so that
/// none is whole again while few are freed. Only the requests are counted (the frees in
/// `setup`): its time per operation is the time per try, free and request together. A
/// request that succeeds keeps its frame. None at orders of a huge frame or more, where the
/// block freed is a frame itself.
fn reclaim(
    a: &dyn BlockAlloc,
    held: &mut Vec<(usize, u32)>,
    order: u32,
    core: usize,
    p: &Params,
    w: &Worker,
    setup: &mut Counts,
) -> (Counts, Duration) {
    if order >= FULL_HEAP_LARGE {
        return Default::default();
    }
    let frame = |i: usize| (i % HUGE_FRAME_UNITS, i / HUGE_FRAME_UNITS);
    held.sort_unstable_by_key(|&(i, o)| (o != order, frame(i)));
    let tries = held
        .iter()
        .take_while(|&&(_, o)| o == order)
        .count()
        .min(p.full_heap_fails.min(FRAGMENTED_FAILS));
    let back: Vec<_> = held.drain(..tries).collect();
    let mut c = Counts::default();
    let ((), time) = w.timed(|| {
        for &(i, o) in &back {
            setup.free(a, i, o, core);
            if let Some(i) = c.alloc(a, FULL_HEAP_LARGE, core) {
                held.push((i, FULL_HEAP_LARGE));
            }
        }
    });
    (c, time)
}

/// full-heap's requests on the fragmented heap, per thread: at most this many, since a
/// design that answers them by a scan of the heap takes microseconds each.
pub(crate) const FRAGMENTED_FAILS: usize = 2000;

/// Frees every block of a pool (after the timed part).
fn free_pool(a: &dyn BlockAlloc, pool: &[(usize, u32)], core: usize, c: &mut impl Recorder) {
    for &(i, o) in pool {
        if i != EMPTY {
            c.free(a, i, o, core);
        }
    }
}

/// `steps` times: free a random block of the pool and allocate a block of `next_order` in its
/// slot. The shared step of Larson and Constant Occupancy.
#[inline(always)]
fn churn(
    a: &dyn BlockAlloc,
    pool: &mut [(usize, u32)],
    steps: usize,
    core: usize,
    rng: &mut Rng,
    c: &mut impl Recorder,
    mut next_order: impl FnMut(&mut Rng, u32) -> u32,
) {
    for _ in 0..steps {
        let slot = &mut pool[rng.below(pool.len())];
        if slot.0 != EMPTY {
            c.free(a, slot.0, slot.1, core);
        }
        let o = next_order(rng, slot.1);
        *slot = (c.alloc(a, o, core).unwrap_or(EMPTY), o);
    }
}

/// Constant Occupancy: each thread allocates 1 block of `16k`, 2 of `8k`, 4 of `4k`, 8 of `2k`
/// and 16 of `k` units, then `co_steps / P` times frees a random one and reallocates its size.
pub fn constant_occupancy(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    outcome(constant_occupancy_with(
        a,
        order,
        threads,
        p.co_steps,
        p.seed,
        |_| Counts::default(),
    ))
}

/// One thread's share of a run with a [`Recorder`]: the recorder of its timed part, that
/// part's time, and the counts of all it did.
pub(crate) struct Recorded<R> {
    pub(crate) timed: R,
    pub(crate) time: Duration,
    pub(crate) total: Counts,
}

/// Constant Occupancy with `steps` steps over all threads, recording the timed part (the
/// pool's allocation and the steps) with a recorder from `recorder(thread)`.
pub(crate) fn constant_occupancy_with<R: Recorder>(
    a: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    steps: usize,
    seed: u64,
    recorder: impl Fn(usize) -> R + Sync,
) -> Vec<Recorded<R>> {
    let steps = steps / threads;
    let orders: Vec<u32> = (0..=4u32)
        .flat_map(|i| std::iter::repeat_n(order + 4 - i, 1 << i))
        .collect();
    run_workers(threads, |w| {
        let core = w.id;
        let mut rng = Rng::new(seed, w.id as u64);
        let mut c = recorder(w.id);
        let mut pool = vec![(EMPTY, 0); orders.len()];
        let ((), time) = w.timed(|| {
            for (slot, &o) in pool.iter_mut().zip(&orders) {
                *slot = (c.alloc(a, o, core).unwrap_or(EMPTY), o);
            }
            churn(a, &mut pool, steps, core, &mut rng, &mut c, |_, o| o);
        });
        let mut total = c.counts();
        free_pool(a, &pool, core, &mut total);
        Recorded {
            timed: c,
            time,
            total,
        }
    })
}

/// The order of a size drawn uniformly from `[k, k << span]` units, rounded up to a power
/// of two.
#[inline(always)]
fn larson_order(rng: &mut Rng, order: u32, span: u32) -> u32 {
    let k = 1usize << order;
    let size = k + rng.below((k << span) - k + 1);
    usize::BITS - (size - 1).leading_zeros()
}

/// What a Larson thread hands to its successor.
struct Lineage<R> {
    pool: Vec<(usize, u32)>,
    rng: Rng,
    recorder: R,
}

/// Larson (Larson & Krishnan '98): each thread holds `larson_chunks` blocks of random sizes in
/// `[k, k << span]`; each step frees a random one and allocates a new random size in its slot.
/// After `larson_steps` steps a thread hands its blocks to a successor thread (pinned to the
/// same core), which frees blocks its predecessor allocated: cross-thread frees. Runs until
/// `larson_stop`; the initial pool is allocated before the start barrier.
pub fn larson(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    outcome(larson_with(a, order, threads, p, p.larson_stop, |_| {
        Counts::default()
    }))
}

/// Larson until `stop`, recording the timed steps (not the initial pool, nor freeing what is
/// left) with a recorder from `recorder(thread)` that moves along to each successor thread.
pub(crate) fn larson_with<R: Recorder>(
    a: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    p: &Params,
    stop: Stop,
    recorder: impl Fn(usize) -> R + Sync,
) -> Vec<Recorded<R>> {
    let span = p.larson_span;
    run_workers(threads, |w| {
        let core = w.id;
        let mut rng = Rng::new(p.seed, w.id as u64);
        let mut setup = Counts::default();
        let pool = (0..p.larson_chunks)
            .map(|_| {
                let o = larson_order(&mut rng, order, span);
                (setup.alloc(a, o, core).unwrap_or(EMPTY), o)
            })
            .collect();
        let lineage = Lineage {
            pool,
            rng,
            recorder: recorder(w.id),
        };
        let (lineage, time) = w.timed(move || {
            let mut lineage = lineage;
            let start = Instant::now();
            let mut generations = 0;
            loop {
                lineage = w.successor(move || {
                    let Lineage {
                        mut pool,
                        mut rng,
                        mut recorder,
                    } = lineage;
                    churn(
                        a,
                        &mut pool,
                        p.larson_steps,
                        core,
                        &mut rng,
                        &mut recorder,
                        |r, _| larson_order(r, order, span),
                    );
                    Lineage {
                        pool,
                        rng,
                        recorder,
                    }
                });
                generations += 1;
                let done = match stop {
                    Stop::Generations(n) => generations >= n,
                    Stop::Time(d) => start.elapsed() >= d,
                };
                if done {
                    break lineage;
                }
            }
        });
        let mut total = setup;
        total.add(&lineage.recorder.counts());
        free_pool(a, &lineage.pool, core, &mut total);
        Recorded {
            timed: lineage.recorder,
            time,
            total,
        }
    })
}
