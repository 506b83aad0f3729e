//! The LLFree paper's workloads (reference code: luhsra/llfree-rs `bench`). The paper lets the
//! heap size set the work (each thread handles `units / P / 2 / 2^order` blocks, half the
//! region together); here the work is [`Params::llfree_units`] in place of the heap's units,
//! so that every workload of a run shares one heap and the work stays the same when it grows.
//! `frag` alone fills the heap itself: that is what it measures.

use std::sync::Mutex;
use std::time::Duration;

use buddyfree::{BlockAlloc, Class};
use buddyfree_baselines::stats::{huge_fragmentation, Fragmentation, HUGE_FRAME_UNITS};

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

/// A frame frag holds: its index, and whether it was allocated unmovable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The frame (a block of order 0).
    pub index: usize,
    /// Allocated with [`Class::UNMOVABLE`]: compaction cannot move it.
    pub unmovable: bool,
}

/// What compaction can recover when it moves movable frames only: a huge frame that holds an
/// unmovable frame (*pinned*) stays in use whatever it moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Huge frames holding no unmovable frame: those compaction could empty.
    pub unpinned_frames: usize,
    /// Huge frames compaction could free: the unpinned ones, as many as the free units make
    /// up whole frames ([`Fragmentation::possible_frames`], which counts every frame).
    pub recoverable_frames: usize,
    /// The least number of movable frames to move to free them: the unpinned huge frames
    /// with the most free units are emptied, into free units anywhere.
    pub recovery_cost: usize,
}

/// [`Recovery`] of huge frames with `free[i]` free units, `pinned[i]` where one holds an
/// unmovable frame. Freeing `k` huge frames moves their live frames into the free units
/// outside them, which takes `k * HUGE_FRAME_UNITS` free units in all, as for
/// [`Fragmentation`]; only which frames may be emptied changes.
fn recovery(free: &[usize], pinned: &[bool]) -> Recovery {
    let free_units: usize = free.iter().sum();
    let mut open: Vec<usize> = free
        .iter()
        .zip(pinned)
        .filter(|&(_, &p)| !p)
        .map(|(&f, _)| f)
        .collect();
    let recoverable_frames = open.len().min(free_units / HUGE_FRAME_UNITS);
    open.sort_unstable_by(|a, b| b.cmp(a));
    Recovery {
        unpinned_frames: open.len(),
        recoverable_frames,
        recovery_cost: open[..recoverable_frames]
            .iter()
            .map(|&f| HUGE_FRAME_UNITS - f)
            .sum(),
    }
}

/// The fragmentation of `units` units of which exactly the frames in `held` are allocated,
/// and what compaction can recover of it moving movable frames only. Caches must be drained
/// first for this to be what a huge allocation sees. Units past the last whole huge frame are
/// left out.
pub fn measure<'a>(
    units: usize,
    held: impl IntoIterator<Item = &'a [Held]>,
) -> (Fragmentation, Recovery) {
    let frames = units / HUGE_FRAME_UNITS;
    let mut free = vec![HUGE_FRAME_UNITS; frames];
    let mut pinned = vec![false; frames];
    for frames in held {
        for h in frames {
            let frame = h.index / HUGE_FRAME_UNITS;
            if let Some(f) = free.get_mut(frame) {
                *f = f.saturating_sub(1);
                pinned[frame] |= h.unmovable;
            }
        }
    }
    (huge_fragmentation(&free), recovery(&free, &pinned))
}

/// One frag thread's frames, random streams and counts, kept between rounds.
struct FragThread {
    held: Vec<Held>,
    rng: Rng,
    classes: Rng,
    counts: Counts,
}

/// The stream of frag's class choices, apart from its block choices so that the share of
/// unmovable frames changes nothing else at 0%.
const CLASS_STREAM: u64 = 0x0c1a_55e5;

impl FragThread {
    /// Allocates one frame, unmovable with a chance of `unmovable` percent, and holds it.
    fn alloc(&mut self, a: &dyn BlockAlloc, core: usize, unmovable: u32, c: &mut Counts) {
        let pinned = unmovable > 0 && self.classes.below(100) < unmovable as usize;
        let class = if pinned {
            Class::UNMOVABLE
        } else {
            Class::MOVABLE
        };
        if let Some(index) = c.allocated(a.alloc_class(0, class, core)) {
            self.held.push(Held {
                index,
                unmovable: pinned,
            });
        }
    }
}

/// frag (LLFree §5.6): the threads allocate 90% of the units as order 0 and free half of them
/// at random; then `frag_rounds` rounds in which each thread frees 10% of its blocks at random
/// and allocates as many again. After the initial phase (round 0) and after every round, the
/// caches are drained and the free huge frames and compaction cost are measured. One timed
/// phase, "op", over all rounds.
///
/// With [`Params::frag_unmovable_percent`] above 0 (not in the paper), each allocation asks
/// for an unmovable frame with that chance and a movable one otherwise
/// ([`BlockAlloc::alloc_class`]), and each measurement also counts what compaction can
/// recover moving movable frames only ([`Recovery`]).
pub fn frag(a: &dyn BlockAlloc, threads: usize, p: &Params) -> Outcome {
    let units = a.total_units();
    let n = units * 9 / 10 / threads;
    let unmovable = p.frag_unmovable_percent;
    let states: Vec<Mutex<FragThread>> = run_workers(threads, |w| {
        let mut t = FragThread {
            held: Vec::with_capacity(n),
            rng: Rng::new(p.seed, w.id as u64),
            classes: Rng::new(p.seed ^ CLASS_STREAM, w.id as u64),
            counts: Counts::default(),
        };
        let mut counts = Counts::default();
        for _ in 0..n {
            t.alloc(a, w.id, unmovable, &mut counts);
        }
        t.rng.shuffle(&mut t.held);
        let half = t.held.len() / 2;
        for h in t.held.drain(half..) {
            counts.free(a, h.index, 0, w.id);
        }
        t.counts = counts;
        Mutex::new(t)
    });
    let measure = |states: &[Mutex<FragThread>]| {
        a.drain();
        let locked: Vec<_> = states.iter().map(|s| s.lock().unwrap()).collect();
        measure(units, locked.iter().map(|s| &s.held[..]))
    };
    let mut out = Outcome::default();
    let record = |out: &mut Outcome, (frag, recovery)| {
        out.frag.push(frag);
        out.recovery.push(recovery);
    };
    record(&mut out, measure(&states));
    let mut round_counts = vec![Counts::default(); threads];
    let mut times = vec![Duration::ZERO; threads];
    for _ in 0..p.frag_rounds {
        let parts = run_workers(threads, |w| {
            let mut guard = states[w.id].lock().unwrap();
            let t = &mut *guard;
            let mut c = Counts::default();
            let k = t.held.len() / 10;
            let ((), time) = w.timed(|| {
                for _ in 0..k {
                    let h = t.held.swap_remove(t.rng.below(t.held.len()));
                    c.free(a, h.index, 0, w.id);
                }
                for _ in 0..k {
                    t.alloc(a, w.id, unmovable, &mut c);
                }
            });
            (c, time)
        });
        for (id, (c, t)) in parts.into_iter().enumerate() {
            round_counts[id].add(&c);
            times[id] += t;
        }
        record(&mut out, measure(&states));
    }
    let timed: Vec<_> = round_counts.iter().copied().zip(times).collect();
    out.phases.push(phase("op", &timed));
    let mut totals = round_counts;
    for (id, s) in states.into_iter().enumerate() {
        let mut s = s.into_inner().unwrap();
        for h in std::mem::take(&mut s.held) {
            s.counts.free(a, h.index, 0, id);
        }
        totals.push(s.counts);
    }
    out.count(&totals);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn movable(blocks: impl IntoIterator<Item = usize>) -> Vec<Held> {
        blocks
            .into_iter()
            .map(|index| Held {
                index,
                unmovable: false,
            })
            .collect()
    }

    #[test]
    fn fragmentation_counts_held_units_per_huge_frame() {
        let h = HUGE_FRAME_UNITS;
        // Frame 0: 2 held; frame 1: none; frame 2: all but one held; a partial frame 3 ignored.
        let a = movable([0, 5]);
        let b = movable((2 * h..3 * h - 1).chain([3 * h + 1]));
        let (f, r) = measure(3 * h + 10, [&a[..], &b[..]]);
        assert_eq!(f.frames, 3);
        assert_eq!(f.free_frames, 1);
        assert_eq!(f.free_units, (h - 2) + h + 1);
        assert_eq!(f.possible_frames, 1);
        assert_eq!(f.compaction_cost, 0);
        // Nothing unmovable: compaction recovers what it could anyway.
        assert_eq!(
            (r.unpinned_frames, r.recoverable_frames, r.recovery_cost),
            (3, f.possible_frames, f.compaction_cost)
        );
    }

    /// An unmovable frame pins its huge frame: compaction empties the unpinned frames with
    /// the most free units instead, up to what the free units make up.
    #[test]
    fn unmovable_frames_pin_their_huge_frames() {
        let h = HUGE_FRAME_UNITS;
        // Frame 0: 1 unmovable; frame 1: 10 movable; frame 2: 1 unmovable and 1 movable;
        // frame 3: h/2 movable; frame 4: full, movable.
        let mut held = movable((h..h + 10).chain([2 * h + 1]).chain(3 * h..3 * h + h / 2));
        held.extend(movable(4 * h..5 * h));
        for index in [0, 2 * h] {
            held.push(Held {
                index,
                unmovable: true,
            });
        }
        let (f, r) = measure(5 * h, [&held[..]]);
        let free = (h - 1) + (h - 10) + (h - 2) + h / 2;
        assert_eq!(f.free_units, free);
        assert_eq!(f.possible_frames, free / h);
        assert_eq!(f.possible_frames, 3);
        // Unpinned: frames 1, 3 and 4; the free units make up 3 frames, but frame 4 is full,
        // so emptying it costs a whole frame.
        assert_eq!(r.unpinned_frames, 3);
        assert_eq!(r.recoverable_frames, 3);
        assert_eq!(r.recovery_cost, 10 + h / 2 + h);
        assert_eq!(f.compaction_cost, 1 + 10 + 2);
        // With frame 4 gone the free units limit nothing, the pins do.
        let (_, r) = measure(4 * h, [&held[..]]);
        assert_eq!((r.unpinned_frames, r.recoverable_frames), (2, 2));
        assert_eq!(r.recovery_cost, 10 + h / 2);
    }

    #[test]
    fn allocs_per_thread_is_half_the_units() {
        assert_eq!(allocs_per_thread(1 << 20, 4, 0), 1 << 17);
        assert_eq!(allocs_per_thread(1 << 20, 4, 9), 1 << 8);
        assert_eq!(allocs_per_thread(100, 3, 0), 16);
    }
}
