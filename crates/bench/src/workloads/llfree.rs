//! The LLFree paper's workloads (reference code: luhsra/llfree-rs `bench`). The paper lets the
//! heap size set the work (each thread handles `units / P / 2 / 2^order` blocks, half the
//! region together); here the work is [`Params::llfree_units`] in place of the heap's units,
//! so that every workload of a run shares one heap and the work stays the same when it grows.
//! `frag` alone fills the heap itself: that is what it measures.

use std::sync::Mutex;
use std::time::Duration;

use buddyfree::stats::{huge_fragmentation, Fragmentation, HUGE_FRAME_UNITS};
use buddyfree::BlockAlloc;

use super::counts::Counts;
use super::outcome::{phase, Outcome, Phase};
use super::params::Params;
use super::rng::Rng;
use crate::runner::run_workers;

/// Blocks each thread allocates: `units / threads / 2 / 2^order`.
pub fn allocs_per_thread(units: usize, threads: usize, order: u32) -> usize {
    (units / threads / 2) >> order
}

/// Blocks each thread handles in bulk, repeat and rand: [`allocs_per_thread`] of the work,
/// and at least [`Params::llfree_min_blocks`] over all threads, so that a phase of large
/// blocks is not a few microseconds between two thread starts.
pub fn blocks_per_thread(p: &Params, threads: usize, order: u32) -> usize {
    allocs_per_thread(p.llfree_units, threads, order).max(p.llfree_min_blocks / threads)
}

/// Allocates `n` blocks on the calling thread, pushing the ones that succeed onto `held`
/// (which must have room for `n` more, so that timing this does not time a reallocation).
fn alloc_many(
    a: &dyn BlockAlloc,
    order: u32,
    core: usize,
    n: usize,
    c: &mut Counts,
    held: &mut Vec<usize>,
) {
    for _ in 0..n {
        if let Some(i) = c.alloc(a, order, core) {
            held.push(i);
        }
    }
}

/// `n` blocks allocated on the calling thread (untimed), the ones that succeed.
fn alloc_held(a: &dyn BlockAlloc, order: u32, core: usize, n: usize, c: &mut Counts) -> Vec<usize> {
    let mut held = Vec::with_capacity(n);
    alloc_many(a, order, core, n, c, &mut held);
    held
}

/// bulk: each thread allocates its blocks, all meet at a barrier, then each frees its own.
/// Two phases: "get" (per allocation) and "put" (per free).
pub fn bulk(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let n = blocks_per_thread(p, threads, order);
    let parts = run_workers(threads, |w| {
        let mut get = Counts::default();
        let mut held = Vec::with_capacity(n);
        let ((), get_time) = w.timed(|| alloc_many(a, order, w.id, n, &mut get, &mut held));
        let mut put = Counts::default();
        let ((), put_time) = w.timed(|| {
            for &i in &held {
                put.free(a, i, order, w.id);
            }
        });
        ((get, get_time), (put, put_time))
    });
    let gets: Vec<_> = parts.iter().map(|p| p.0).collect();
    let puts: Vec<_> = parts.iter().map(|p| p.1).collect();
    let mut out = Outcome {
        phases: vec![phase("get", &gets), phase("put", &puts)],
        ..Outcome::default()
    };
    out.count(&gets.iter().chain(&puts).map(|p| p.0).collect::<Vec<_>>());
    out
}

/// repeat: each thread first holds its blocks (untimed), then does as many alloc+free pairs
/// of one block. One phase, "get+put", counted per pair.
pub fn repeat(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let n = blocks_per_thread(p, threads, order);
    let parts = run_workers(threads, |w| {
        let core = w.id;
        let mut setup = Counts::default();
        let held = alloc_held(a, order, core, n, &mut setup);
        let mut pairs = Counts::default();
        let ((), time) = w.timed(|| {
            for _ in 0..n {
                if let Some(i) = pairs.alloc(a, order, core) {
                    pairs.free(a, i, order, core);
                }
            }
        });
        for &i in &held {
            setup.free(a, i, order, core);
        }
        (setup, pairs, time)
    });
    let mut out = Outcome {
        phases: vec![Phase {
            name: "get+put",
            ops: parts.iter().map(|p| p.1.allocs).sum(),
            thread_times: parts.iter().map(|p| p.2).collect(),
        }],
        ..Outcome::default()
    };
    out.count(&parts.iter().flat_map(|p| [p.0, p.1]).collect::<Vec<_>>());
    out
}

/// rand: the threads allocate as in bulk (untimed), all blocks are shuffled and dealt out
/// again, and each thread frees its share, mostly blocks another thread allocated. One phase,
/// "put".
pub fn rand(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let n = blocks_per_thread(p, threads, order);
    let got = run_workers(threads, |w| {
        let mut c = Counts::default();
        let held = alloc_held(a, order, w.id, n, &mut c);
        (c, held)
    });
    let mut all: Vec<usize> = got.iter().flat_map(|g| g.1.iter().copied()).collect();
    Rng::new(p.seed, u64::MAX).shuffle(&mut all);
    let share = all.len().div_ceil(threads).max(1);
    let shares: Vec<&[usize]> = all.chunks(share).collect();
    let puts = run_workers(threads, |w| {
        let mut c = Counts::default();
        let mine = shares.get(w.id).copied().unwrap_or_default();
        let ((), time) = w.timed(|| {
            for &i in mine {
                c.free(a, i, order, w.id);
            }
        });
        (c, time)
    });
    let mut out = Outcome {
        phases: vec![phase("put", &puts)],
        ..Outcome::default()
    };
    out.count(
        &got.iter()
            .map(|g| g.0)
            .chain(puts.iter().map(|p| p.0))
            .collect::<Vec<_>>(),
    );
    out
}

/// The fragmentation of `units` units of which exactly the blocks in `held` are allocated,
/// all of order 0. Caches must be drained first for this to be what a huge allocation sees.
pub fn fragmentation_of<'a>(
    units: usize,
    held: impl IntoIterator<Item = &'a [usize]>,
) -> Fragmentation {
    let frames = units / HUGE_FRAME_UNITS;
    let mut free = vec![HUGE_FRAME_UNITS; frames];
    for blocks in held {
        for &i in blocks {
            if let Some(f) = free.get_mut(i / HUGE_FRAME_UNITS) {
                *f = f.saturating_sub(1);
            }
        }
    }
    huge_fragmentation(&free)
}

/// One frag thread's blocks and random stream, kept between rounds.
struct FragThread {
    held: Vec<usize>,
    rng: Rng,
    counts: Counts,
}

/// frag (LLFree §5.6): the threads allocate 90% of the units as order 0 and free half of them
/// at random; then `frag_rounds` rounds in which each thread frees 10% of its blocks at random
/// and allocates as many again. After the initial phase (round 0) and after every round, the
/// caches are drained and the free huge frames and compaction cost are measured. One timed
/// phase, "op", over all rounds.
pub fn frag(a: &dyn BlockAlloc, threads: usize, p: &Params) -> Outcome {
    let units = a.total_units();
    let n = units * 9 / 10 / threads;
    let states: Vec<Mutex<FragThread>> = run_workers(threads, |w| {
        let mut rng = Rng::new(p.seed, w.id as u64);
        let mut counts = Counts::default();
        let mut held = alloc_held(a, 0, w.id, n, &mut counts);
        rng.shuffle(&mut held);
        for i in held.drain(held.len() / 2..) {
            counts.free(a, i, 0, w.id);
        }
        Mutex::new(FragThread { held, rng, counts })
    });
    let measure = |states: &[Mutex<FragThread>]| {
        a.drain();
        let locked: Vec<_> = states.iter().map(|s| s.lock().unwrap()).collect();
        fragmentation_of(units, locked.iter().map(|s| &s.held[..]))
    };
    let mut out = Outcome {
        frag: vec![measure(&states)],
        ..Outcome::default()
    };
    let mut round_counts = vec![Counts::default(); threads];
    let mut times = vec![Duration::ZERO; threads];
    for _ in 0..p.frag_rounds {
        let parts = run_workers(threads, |w| {
            let mut t = states[w.id].lock().unwrap();
            let FragThread { held, rng, .. } = &mut *t;
            let mut c = Counts::default();
            let k = held.len() / 10;
            let ((), time) = w.timed(|| {
                for _ in 0..k {
                    let i = held.swap_remove(rng.below(held.len()));
                    c.free(a, i, 0, w.id);
                }
                for _ in 0..k {
                    if let Some(i) = c.alloc(a, 0, w.id) {
                        held.push(i);
                    }
                }
            });
            (c, time)
        });
        for (id, (c, t)) in parts.into_iter().enumerate() {
            round_counts[id].add(&c);
            times[id] += t;
        }
        out.frag.push(measure(&states));
    }
    let timed: Vec<_> = round_counts.iter().copied().zip(times).collect();
    out.phases.push(phase("op", &timed));
    let mut totals = round_counts;
    for (id, s) in states.into_iter().enumerate() {
        let mut s = s.into_inner().unwrap();
        for &i in &s.held {
            s.counts.free(a, i, 0, id);
        }
        totals.push(s.counts);
    }
    out.count(&totals);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragmentation_counts_held_units_per_huge_frame() {
        let h = HUGE_FRAME_UNITS;
        // Frame 0: 2 held; frame 1: none; frame 2: all but one held; a partial frame 3 ignored.
        let a: Vec<usize> = vec![0, 5];
        let b: Vec<usize> = (2 * h..3 * h - 1).chain([3 * h + 1]).collect();
        let f = fragmentation_of(3 * h + 10, [&a[..], &b[..]]);
        assert_eq!(f.frames, 3);
        assert_eq!(f.free_frames, 1);
        assert_eq!(f.free_units, (h - 2) + h + 1);
        assert_eq!(f.possible_frames, 1);
        assert_eq!(f.compaction_cost, 0);
    }

    #[test]
    fn allocs_per_thread_is_half_the_units() {
        assert_eq!(allocs_per_thread(1 << 20, 4, 0), 1 << 17);
        assert_eq!(allocs_per_thread(1 << 20, 4, 9), 1 << 8);
        assert_eq!(allocs_per_thread(100, 3, 0), 16);
    }
}
