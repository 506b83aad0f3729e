//! The real-time suite (Donahue et al., "Storage Allocation for Real-Time,
//! Embedded Systems", EMSOFT 2001, §3, and tail latency): what a real-time
//! user judges an allocator by, its worst cases rather than its throughput.
//!
//! - [`latency`]: each alloc's and free's own time, as percentiles, on Constant Occupancy,
//!   Larson and a heap near full (every allocator of the run);
//! - [`contrived`]: §3.1's case, where a first-fit list walks past `N/2` holes (every
//!   allocator of the run);
//! - [`share`]: §3.3, the share of requests Knuth's and the estranged buddy serve immediately
//!   (standalone: concrete types, to read their counters);
//! - [`defrag`]: §2.8, the moves and time of on-demand defragmentation (standalone).
//!
//! Per-operation times come from [`clock`], which subtracts the clock's own cost.

pub mod clock;
pub mod contrived;
pub mod defrag;
pub mod latency;
pub mod share;

pub use clock::{Clock, Percentiles};

use crate::workloads::{Outcome, Params, Workload};

/// The real-time suite's sizes. [`RtParams::default`] is the default suite's short version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtParams {
    /// latency: Constant Occupancy and fragmented-heap steps per thread (each a free and an
    /// alloc).
    pub latency_steps: usize,
    /// latency: Larson generations per thread (each `larson_steps` steps).
    pub latency_larson_generations: usize,
    /// latency: the heap, in units (the fragmented pattern fills it).
    pub latency_units: usize,
    /// latency: how full the fragmented pattern fills the heap, in percent.
    pub latency_fill_percent: usize,
    /// contrived: the block counts N (one heap each, `N + 4` blocks large).
    pub contrived_blocks: Vec<usize>,
    /// contrived: timed requests per run (the first, then request+free pairs).
    pub contrived_requests: usize,
    /// estranged-share: allocations (in bursts, each followed by a collection).
    pub share_requests: usize,
    /// estranged-share: the heap, in 16-byte units.
    pub share_units: usize,
    /// defrag: the orders requested.
    pub defrag_orders: Vec<u32>,
    /// defrag: the heap, in units.
    pub defrag_units: usize,
}

impl Default for RtParams {
    fn default() -> Self {
        RtParams {
            latency_steps: 100_000,
            latency_larson_generations: 10,
            latency_units: 1 << 14,
            latency_fill_percent: 95,
            contrived_blocks: vec![1 << 10, 1 << 12, 1 << 14, 1 << 16],
            contrived_requests: 101,
            share_requests: 1 << 20,
            share_units: 1 << 18,
            defrag_orders: vec![1, 2, 4, 6, 8, 10],
            defrag_units: 1 << 12,
        }
    }
}

impl RtParams {
    /// Tiny sizes, for tests and smoke runs.
    pub fn quick() -> Self {
        RtParams {
            latency_steps: 256,
            latency_larson_generations: 2,
            latency_units: 1 << 11,
            latency_fill_percent: 95,
            contrived_blocks: vec![64, 256],
            contrived_requests: 5,
            share_requests: 4 * share::BURST,
            share_units: 1 << 16,
            defrag_orders: vec![1, 3, 5],
            defrag_units: 1 << 7,
        }
    }
}

/// Runs a [`Workload::standalone`] workload once (they build Knuth's and the estranged buddy
/// themselves). The one place they are dispatched; [`crate::workloads::run`] comes here too.
pub fn run_standalone(w: Workload, p: &Params) -> Outcome {
    match w {
        Workload::EstrangedShare => share::run(p),
        Workload::Defrag => defrag::run(p),
        w => unreachable!("{} is not a standalone workload", w.name()),
    }
}

/// What a real-time workload measured in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RtOutcome {
    /// latency: one sample per pattern and operation.
    pub latency: Vec<latency::LatencySample>,
    /// contrived: one sample per run.
    pub contrived: Vec<contrived::ContrivedSample>,
    /// estranged-share: one sample per allocator.
    pub share: Vec<share::ShareSample>,
    /// defrag: one sample per allocator and order.
    pub defrag: Vec<defrag::DefragSample>,
}
