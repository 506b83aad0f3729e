//! The workloads of the NBBS paper ([`nbbs`]), the LLFree paper ([`llfree`]) and the real-time
//! buddy paper ([`realtime`]), as the papers and their published code define them (see the References in the
//! repository's README).
//!
//! A workload runs once over one freshly built allocator at one order and thread count and
//! returns its [`Outcome`]: per timed phase the operations done and each thread's time.
//! Allocation failures are counted, never fatal; a failing `free` is an allocator bug and is
//! counted separately.
//!
//! Layers, each using only those above it: the random generator, the call [`Counts`] and the
//! sizes ([`Params`]); the [`Outcome`], with the real-time samples it carries; the workloads
//! themselves ([`nbbs`], [`llfree`], [`realtime`]'s, [`crash`]); [`Workload`], which names
//! them and knows what each needs; [`realtime::run_standalone`] and this module, which run
//! them.

pub mod crash;
pub mod llfree;
pub mod nbbs;
pub mod realtime;
pub mod reclaim;

mod counts;
mod outcome;
mod params;
mod rng;
mod workload;

use std::time::Duration;

use buddyfree::BlockAlloc;

pub use counts::{Counts, Recorder};
pub use outcome::{Outcome, Phase};
pub use params::{Params, Stop};
pub use rng::Rng;
pub use workload::{Suite, Workload};

use crate::runner;

/// Runs `workload` once on `alloc` (built for `threads` cores over its whole region).
/// [`Workload::standalone`] workloads ignore `alloc`, `order` and `threads`.
pub fn run(
    workload: Workload,
    alloc: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    params: &Params,
) -> Outcome {
    let faults = runner::timed_faults();
    let mut out = match workload {
        Workload::LinuxScalability => nbbs::linux_scalability(alloc, order, threads, params),
        Workload::ThreadTest => nbbs::thread_test(alloc, order, threads, params),
        Workload::Larson => nbbs::larson(alloc, order, threads, params),
        Workload::ConstantOccupancy => nbbs::constant_occupancy(alloc, order, threads, params),
        Workload::Cached => nbbs::cached(alloc, order, threads, params),
        Workload::FullHeap => nbbs::full_heap(alloc, order, threads, params),
        Workload::Reclaim => reclaim::run(alloc, order, threads, params),
        Workload::Bulk => llfree::bulk(alloc, order, threads, params),
        Workload::Repeat => llfree::repeat(alloc, order, threads, params),
        Workload::Rand => llfree::rand(alloc, order, threads, params),
        Workload::Frag => llfree::frag(alloc, threads, params),
        Workload::Latency => realtime::latency::run(alloc, order, threads, params),
        Workload::Contrived => realtime::contrived::run(alloc, order, params),
        Workload::EstrangedShare | Workload::Defrag => realtime::run_standalone(workload, params),
    };
    out.faults = runner::timed_faults() - faults;
    out.passes = 1;
    out
}

/// Runs `workload` on `alloc` again and again until its shortest phase has lasted `min` in
/// total (at most `max_passes` times): a phase of a few microseconds measures the clock and
/// the barrier, not the allocator. The workloads leave the allocator empty, so each pass
/// starts where the first did (with the allocator's caches warm).
pub fn run_for(
    workload: Workload,
    alloc: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    params: &Params,
    min: Duration,
    max_passes: u32,
) -> Outcome {
    let mut out = run(workload, alloc, order, threads, params);
    if !workload.repeatable() {
        return out;
    }
    while out.shortest_phase() < min && out.passes < max_passes {
        out.absorb(run(workload, alloc, order, threads, params));
    }
    out
}
