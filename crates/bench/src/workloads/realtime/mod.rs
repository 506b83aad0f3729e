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
//! Per-operation times come from [`clock`], which subtracts the clock's own cost; what the
//! workloads measure is in `samples`, which the outcome of every workload carries.

pub mod clock;
pub mod contrived;
pub mod defrag;
pub mod latency;
pub(crate) mod samples;
pub mod share;

pub use clock::{Clock, Percentiles};
pub use samples::RtOutcome;

use crate::workloads::outcome::Outcome;
use crate::workloads::params::Params;
pub use crate::workloads::params::RtParams;
use crate::workloads::workload::Workload;

/// Runs a [`Workload::standalone`] workload once (they build Knuth's and the estranged buddy
/// themselves). The one place they are dispatched; [`crate::workloads::run`] comes here too.
pub fn run_standalone(w: Workload, p: &Params) -> Outcome {
    match w {
        Workload::EstrangedShare => share::run(p),
        Workload::Defrag => defrag::run(p),
        w => unreachable!("{} is not a standalone workload", w.name()),
    }
}
