//! The workloads' sizes: how much each does, as the papers define it and scaled down.

use std::time::Duration;

/// When a time-bounded workload (Larson) stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// After this many generations per thread (deterministic; for tests).
    Generations(usize),
    /// After the first generation that ends past this time.
    Time(Duration),
}

/// The workloads' size parameters. [`Params::default`] is the papers' definition scaled down
/// so that the default suite stays short; the comment on each field gives the paper's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Linux Scalability: units per burst per thread (paper: 87040, i.e. 340 MiB).
    pub ls_burst_units: usize,
    /// Thread Test: units per burst over all threads (paper: 50000).
    pub tt_burst_units: usize,
    /// Thread Test: repetitions per unit of block size (paper: 500).
    pub tt_repeats: usize,
    /// Larson: blocks each thread holds.
    pub larson_chunks: usize,
    /// Larson: sizes range over `[k, k << span]` units.
    pub larson_span: u32,
    /// Larson: free+alloc steps per thread generation, before a successor takes over.
    pub larson_steps: usize,
    /// Larson: when to stop.
    pub larson_stop: Stop,
    /// Constant Occupancy: free+realloc steps over all threads (paper: 50M).
    pub co_steps: usize,
    /// Cached Allocation: alloc+free pairs per thread (paper: 5M).
    pub cached_pairs: usize,
    /// full-heap: failing allocations per thread of each size (not in the papers).
    pub full_heap_fails: usize,
    /// bulk, repeat, rand: units of work, `P` threads handle `W/P/2/2^order` blocks each
    /// (paper: the heap's units, 125 GiB).
    pub llfree_units: usize,
    /// bulk, repeat, rand: the least blocks over all threads, whatever their order.
    pub llfree_min_blocks: usize,
    /// frag: reallocation rounds (paper: 100).
    pub frag_rounds: usize,
    /// frag: the chance, in percent, that an allocation asks for an unmovable frame rather
    /// than a movable one (not in the paper: 0).
    pub frag_unmovable_percent: u32,
    /// Seed of every random choice, so runs are repeatable.
    pub seed: u64,
    /// Linux Scalability and Thread Test: each burst (its allocations, then its frees) on
    /// a core held for it ([`buddyfree::BlockAlloc::with_core`]), as a kernel that allocates
    /// a burst with preemption off would run it (not in the papers, which call per
    /// operation; off by default).
    pub held_bursts: bool,
    /// The real-time suite's sizes.
    pub rt: RtParams,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            ls_burst_units: 16384,
            tt_burst_units: 50000,
            tt_repeats: 2,
            larson_chunks: 256,
            larson_span: 3,
            larson_steps: 10_000,
            larson_stop: Stop::Time(Duration::from_millis(20)),
            co_steps: 200_000,
            cached_pairs: 50_000,
            full_heap_fails: 100_000,
            llfree_units: 1 << 18,
            llfree_min_blocks: 1 << 12,
            frag_rounds: 100,
            frag_unmovable_percent: 0,
            seed: 0x5eed_b0dd,
            held_bursts: false,
            rt: RtParams::default(),
        }
    }
}

impl Params {
    /// Tiny sizes, for tests and smoke runs.
    pub fn quick() -> Self {
        Params {
            ls_burst_units: 64,
            tt_burst_units: 128,
            tt_repeats: 2,
            larson_chunks: 8,
            larson_span: 2,
            larson_steps: 64,
            larson_stop: Stop::Generations(3),
            co_steps: 256,
            cached_pairs: 256,
            full_heap_fails: 256,
            llfree_units: 1 << 12,
            llfree_min_blocks: 0,
            frag_rounds: 5,
            frag_unmovable_percent: 0,
            seed: 0x5eed_b0dd,
            held_bursts: false,
            rt: RtParams::quick(),
        }
    }
}

/// estranged-share: allocations per burst, between two collections (a constant of the
/// workload; the quick sizes run whole bursts).
pub(crate) const SHARE_BURST: usize = 4096;

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
            share_requests: 4 * SHARE_BURST,
            share_units: 1 << 16,
            defrag_orders: vec![1, 3, 5],
            defrag_units: 1 << 7,
        }
    }
}
