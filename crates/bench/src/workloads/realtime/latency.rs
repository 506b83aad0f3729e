//! Per-operation latency on three patterns, one after the other on one allocator:
//!
//! 1. **Constant Occupancy** (the NBBS workload): the 31-block pool of `k..16k` units, then
//!    `latency_steps` steps per thread of freeing a random block and reallocating its size;
//! 2. **Larson** (the NBBS workload, with successor threads): `latency_larson_generations`
//!    generations of `larson_steps` steps, sizes in `[k, k << larson_span]`;
//! 3. **fragmented**: each thread fills its share of the heap to `latency_fill_percent`% with
//!    mixed orders (`k` to `8k` units, each order half as often as the one below), frees a
//!    random half of its `k`-unit blocks (untimed), then `latency_steps` times allocates a
//!    random mixed order and frees a random block it holds.
//!
//! Every alloc (failed ones included) and every free of the timed parts is timed on its own
//! ([`Timed`]); the threads' histograms are merged per pattern and operation.

use buddyfree::BlockAlloc;

pub use super::samples::{LatencySample, Op, Pattern};

use super::clock::{Clock, Timed};
use crate::runner::run_workers;
use crate::workloads::counts::{Counts, Recorder};
use crate::workloads::nbbs::{self, Recorded};
use crate::workloads::outcome::Outcome;
use crate::workloads::params::{Params, Stop};
use crate::workloads::rng::Rng;

/// The fragmented pattern's orders span `k..=k+3`; Constant Occupancy's `k..=k+4`.
const FRAG_SPAN: u32 = 3;

/// Orders above the base order the workload allocates.
pub fn order_span(p: &Params) -> u32 {
    nbbs::POOL_SPAN.max(p.larson_span).max(FRAG_SPAN)
}

/// Units the heap needs: Constant Occupancy's and Larson's pools, and at least the
/// fragmented pattern's heap.
pub fn units_needed(order: u32, threads: usize, p: &Params) -> usize {
    let co = nbbs::constant_occupancy_units(order, threads);
    let larson = nbbs::larson_units(order, threads, p);
    co.max(larson).max(p.rt.latency_units)
}

/// Its parameters with their values, for `--list`.
pub fn parameters(p: &Params) -> String {
    format!(
        "{} steps per thread of Constant Occupancy and of the fragmented heap ({} units, {}% full, orders k..k+{FRAG_SPAN}); {} Larson generations of {} steps",
        p.rt.latency_steps,
        p.rt.latency_units,
        p.rt.latency_fill_percent,
        p.rt.latency_larson_generations,
        p.larson_steps
    )
}

/// Timed operations of one run (the fragmented pattern's failed allocations aside).
pub fn timed_ops(threads: usize, p: &Params) -> usize {
    let co = nbbs::POOL_BLOCKS + 2 * p.rt.latency_steps;
    let larson = 2 * p.rt.latency_larson_generations * p.larson_steps;
    let frag = 2 * p.rt.latency_steps;
    threads * (co + larson + frag)
}

/// Runs the three patterns on `a`.
pub fn run(a: &dyn BlockAlloc, order: u32, threads: usize, p: &Params) -> Outcome {
    let clock = Clock::get();
    let timed = move |_: usize| Timed::new(clock);
    let mut out = Outcome::default();
    let co = nbbs::constant_occupancy_with(
        a,
        order,
        threads,
        p.rt.latency_steps * threads,
        p.seed,
        timed,
    );
    add(&mut out, Pattern::ConstantOccupancy, co, clock);
    let stop = Stop::Generations(p.rt.latency_larson_generations);
    let larson = nbbs::larson_with(a, order, threads, p, stop, timed);
    add(&mut out, Pattern::Larson, larson, clock);
    // Blocks parked in per-core caches go back, so the fill starts from a merged heap.
    a.drain();
    let frag = fragmented(a, order, threads, p, clock);
    add(&mut out, Pattern::Fragmented, frag, clock);
    out
}

/// Merges the threads' recorders of one pattern into the outcome.
fn add(out: &mut Outcome, pattern: Pattern, parts: Vec<Recorded<Timed>>, clock: Clock) {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return;
    };
    let mut all = first.timed;
    let mut totals = vec![first.total];
    for p in parts {
        all.merge(&p.timed);
        totals.push(p.total);
    }
    out.count(&totals);
    let failures = all.counts().failures;
    for (op, lat, failures) in [(Op::Alloc, &all.alloc, failures), (Op::Free, &all.free, 0)] {
        out.realtime.latency.push(LatencySample {
            pattern,
            op,
            times: lat.percentiles(),
            failures,
            overhead_ns: clock.overhead_ns(),
            clock: clock.source_name(),
        });
    }
}

/// A random order of the fragmented pattern: `order + j` with probability `2^-(j+1)`
/// (renormalised over `j <= FRAG_SPAN`), so that each order holds about as many units.
#[inline(always)]
fn mixed_order(rng: &mut Rng, order: u32) -> u32 {
    let r = rng.below((1 << (FRAG_SPAN + 1)) - 1) + 1;
    // r in 1..=15: 8 of 15 draws have their top bit at 3 (order + 0), 4 at 2, ...
    order + FRAG_SPAN - r.ilog2()
}

/// The fragmented heap near full: fill, free half of the smallest blocks at random, then
/// timed alloc+free steps.
fn fragmented(
    a: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    p: &Params,
    clock: Clock,
) -> Vec<Recorded<Timed>> {
    let target = a.total_units() * p.rt.latency_fill_percent / 100 / threads;
    run_workers(threads, |w| {
        let core = w.id;
        let mut rng = Rng::new(p.seed ^ 0xf7a9, w.id as u64);
        let mut total = Counts::default();
        let mut held: Vec<(usize, u32)> = Vec::new();
        let mut held_units = 0;
        loop {
            let o = mixed_order(&mut rng, order);
            if held_units + (1 << o) > target {
                break;
            }
            match total.alloc(a, o, core) {
                Some(i) => {
                    held.push((i, o));
                    held_units += 1 << o;
                }
                None => break,
            }
        }
        let (mut small, mut rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|b| b.1 == order);
        rng.shuffle(&mut small);
        for (i, o) in small.drain(..small.len() / 2) {
            total.free(a, i, o, core);
        }
        rest.append(&mut small);
        let mut held = rest;
        // Each step pushes at most one block before freeing one: room for it now, so that no
        // reallocation falls in the timed part.
        held.reserve(1);
        let mut c = Timed::new(clock);
        let ((), time) = w.timed(|| {
            for _ in 0..p.rt.latency_steps {
                let o = mixed_order(&mut rng, order);
                if let Some(i) = c.alloc(a, o, core) {
                    held.push((i, o));
                }
                if !held.is_empty() {
                    let (i, o) = held.swap_remove(rng.below(held.len()));
                    c.free(a, i, o, core);
                }
            }
        });
        total.add(&c.counts());
        for (i, o) in held {
            total.free(a, i, o, core);
        }
        Recorded {
            timed: c,
            time,
            total,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_orders_halve_per_order() {
        let mut rng = Rng::new(1, 2);
        let mut n = [0usize; 4];
        for _ in 0..15_000 {
            n[(mixed_order(&mut rng, 5) - 5) as usize] += 1;
        }
        // Expected 8000, 4000, 2000, 1000.
        for (j, &c) in n.iter().enumerate() {
            let want = 8000 >> j;
            assert!(c.abs_diff(want) < want / 5, "{n:?}");
        }
    }
}
