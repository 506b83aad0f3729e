//! What the real-time workloads measure: a sample type per workload, gathered in an
//! [`RtOutcome`]. Apart from the workloads because every workload's outcome carries them
//! while the workloads build outcomes.

use super::clock::Percentiles;

/// A pattern of the latency workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Constant Occupancy.
    ConstantOccupancy,
    /// Larson.
    Larson,
    /// The fragmented heap near full.
    Fragmented,
}

impl Pattern {
    /// Every pattern, in the order run.
    pub const ALL: [Pattern; 3] = [
        Pattern::ConstantOccupancy,
        Pattern::Larson,
        Pattern::Fragmented,
    ];

    /// Its name in tables and files.
    pub const fn name(self) -> &'static str {
        match self {
            Pattern::ConstantOccupancy => "constant-occupancy",
            Pattern::Larson => "larson",
            Pattern::Fragmented => "fragmented",
        }
    }
}

/// Which operation a sample times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocations, failed ones included.
    Alloc,
    /// Frees.
    Free,
}

impl Op {
    /// Its name in tables and files.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Alloc => "alloc",
            Op::Free => "free",
        }
    }
}

/// The times of one operation in one pattern of one run, over all threads.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySample {
    /// The pattern.
    pub pattern: Pattern,
    /// The operation.
    pub op: Op,
    /// The times.
    pub times: Percentiles,
    /// Failed allocations among them (0 for frees).
    pub failures: u64,
    /// The clock's cost, subtracted from each time, ns.
    pub overhead_ns: f64,
    /// The clock: "tsc" or "instant".
    pub clock: &'static str,
}

/// One run of the case.
#[derive(Clone, Debug, PartialEq)]
pub struct ContrivedSample {
    /// N.
    pub blocks: usize,
    /// Of them, allocated (all, unless the allocator ran out).
    pub allocated: usize,
    /// Holes freed (every other allocated block).
    pub holes: usize,
    /// Whether the larger request succeeded.
    pub ok: bool,
    /// Holes below the block the request got: for a first-fit list in address order, the
    /// number of extents it walked past; `None` if it failed.
    pub holes_below: Option<usize>,
    /// The first request's time, ns.
    pub first_ns: u64,
    /// The median of all requests' times, ns.
    pub median_ns: u64,
    /// The longest request, ns.
    pub max_ns: u64,
    /// Requests timed.
    pub requests: usize,
}

/// What one allocator did on the mix.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareSample {
    /// "knuth" or "estranged".
    pub alloc: &'static str,
    /// Allocations requested.
    pub requests: u64,
    /// Served immediately (Knuth: from the list of the order; estranged: steps 1 and 2).
    pub immediate: u64,
    /// How the served requests were served, by the allocator's own counters (they add up to
    /// the requests that did not fail).
    pub served_by: Vec<(&'static str, u64)>,
    /// Failed requests.
    pub failed: u64,
    /// Frees.
    pub frees: u64,
    /// Mean ns per allocation.
    pub alloc_ns: f64,
    /// Mean ns per free.
    pub free_ns: f64,
}

impl ShareSample {
    /// Immediately served requests over all requests.
    pub fn share(&self) -> f64 {
        self.immediate as f64 / self.requests.max(1) as f64
    }
}

/// One defragmenting request.
#[derive(Clone, Debug, PartialEq)]
pub struct DefragSample {
    /// "knuth" or "estranged".
    pub alloc: &'static str,
    /// The order requested.
    pub order: u32,
    /// Units in the heap.
    pub units: usize,
    /// Whether the request succeeded.
    pub ok: bool,
    /// Blocks moved.
    pub moves: usize,
    /// Units moved.
    pub units_moved: usize,
    /// The moves predicted for this heap: `2^(k-1)` (0 for order 0).
    pub predicted: usize,
    /// The request's time, defragmentation included, ns.
    pub ns: u64,
}

/// What a real-time workload measured in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RtOutcome {
    /// latency: one sample per pattern and operation.
    pub latency: Vec<LatencySample>,
    /// contrived: one sample per run.
    pub contrived: Vec<ContrivedSample>,
    /// estranged-share: one sample per allocator.
    pub share: Vec<ShareSample>,
    /// defrag: one sample per allocator and order.
    pub defrag: Vec<DefragSample>,
}
