//! What one run of a workload did: its timed phases and its counts.

use std::time::Duration;

use buddyfree_baselines::stats::Fragmentation;

use super::counts::Counts;
use super::llfree::Recovery;
use super::realtime::samples::RtOutcome;

/// One timed phase of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// What one operation is: "op" (an alloc or a free), "get", "put", "get+put", or a
    /// failing allocation of 4 KiB or 2 MiB ("fail 4K", "fail 2M"), or of twice the block
    /// size on a heap with every other block free ("fail 2k").
    pub name: &'static str,
    /// Operations over all threads.
    pub ops: u64,
    /// Each thread's time for its part.
    pub thread_times: Vec<Duration>,
}

/// What one run of a workload did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The timed phases.
    pub phases: Vec<Phase>,
    /// Allocations attempted, including failed ones.
    pub allocs: u64,
    /// Frees done.
    pub frees: u64,
    /// Allocations that failed.
    pub failures: u64,
    /// Frees the allocator rejected (a bug in it).
    pub bad_frees: u64,
    /// frag only: the fragmentation after the initial phase (round 0) and after each round.
    pub frag: Vec<Fragmentation>,
    /// frag only: what compaction moving movable frames only can recover, when `frag` was
    /// measured.
    pub recovery: Vec<Recovery>,
    /// The real-time workloads' measurements.
    pub realtime: RtOutcome,
    /// Minor page faults taken inside the timed phases.
    pub faults: u64,
    /// How many times the workload ran to make up this outcome (see [`Outcome::absorb`]).
    pub passes: u32,
}

impl Outcome {
    /// Adds another pass of the same workload to this one: per phase the operations and each
    /// thread's time add up, as if the pass had been part of the phase.
    pub fn absorb(&mut self, o: Outcome) {
        for (p, q) in self.phases.iter_mut().zip(o.phases) {
            p.ops += q.ops;
            for (t, u) in p.thread_times.iter_mut().zip(q.thread_times) {
                *t += u;
            }
        }
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.failures += o.failures;
        self.bad_frees += o.bad_frees;
        self.faults += o.faults;
        self.passes += o.passes;
    }

    /// The shortest phase's time: its slowest thread's.
    pub fn shortest_phase(&self) -> Duration {
        self.phases
            .iter()
            .map(|p| p.thread_times.iter().copied().max().unwrap_or_default())
            .min()
            .unwrap_or_default()
    }

    /// Adds up the counts of the threads.
    pub fn count(&mut self, counts: &[Counts]) {
        let mut total = Counts::default();
        for c in counts {
            total.add(c);
        }
        self.allocs += total.allocs;
        self.frees += total.frees;
        self.failures += total.failures;
        self.bad_frees += total.bad_frees;
    }
}

/// The phase built from each thread's `(counts, time)`: the operations they attempted.
pub(crate) fn phase(name: &'static str, parts: &[(Counts, Duration)]) -> Phase {
    Phase {
        name,
        ops: parts.iter().map(|(c, _)| c.ops()).sum(),
        thread_times: parts.iter().map(|&(_, t)| t).collect(),
    }
}
