//! The report of a run: per-repetition outcomes summarised into [`Record`]s (median, min, max
//! over repetitions, and the speedup over the baseline measured in the same run), frag's
//! rounds and the real-time suite's tables.

use serde::Serialize;

use super::latency::{self, RealtimeReport};
use super::stat::Stat;
use crate::allocs::Lock;
use crate::case::RunSet;
use crate::machine::Machine;
use crate::runner::Clock;
use crate::units::{bytes, UNIT_BYTES};
use crate::workloads::Workload;

/// The phase names, in table order.
const PHASES: &[&str] = &[
    "op", "get", "put", "get+put", "fail 4K", "fail 2M", "fail 2k", "first 2M", "re-take",
];

/// Above this many page faults per operation in its timed phases, a record's time is partly
/// the kernel's (a minor fault costs about as much as a few dozen allocator calls), and no
/// ratio against it is given.
pub const FAULTS_PER_OP_LIMIT: f64 = 0.001;

/// The rule for ratios, as the table and the JSON state it.
pub const RATIO_RULE: &str = "no ratio where the timed phases took more than 1 page fault per 1000 operations (shown as `faults`): those times are partly the kernel's";

/// One counted repetition of a record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Nanoseconds per operation per thread.
    pub ns_per_op: f64,
    /// Millions of operations per second.
    pub mops: f64,
    /// Operations timed (all passes).
    pub ops: u64,
    /// Passes of the workload it took for the phase to last long enough.
    pub passes: u32,
    /// Minor page faults in the timed phases (all phases of the pass).
    pub faults: u64,
}

/// One timed phase of one case on one allocator, over all repetitions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// Allocator name.
    pub alloc: String,
    /// Workload name.
    pub workload: String,
    /// What one operation is ("op" = an alloc or a free; "get", "put", "get+put"; "fail 4K",
    /// "fail 2M" = a failing allocation of that size; "fail 2k" = of twice the block size,
    /// on a heap with every other block free).
    pub phase: String,
    /// Block order (the smallest, for workloads mixing sizes).
    pub order: u32,
    /// Block size, e.g. "4K".
    pub size: String,
    /// Worker threads.
    pub threads: usize,
    /// Heap size in 4 KiB units.
    pub heap_units: usize,
    /// Repetitions.
    pub reps: usize,
    /// Operations per repetition (median).
    pub ops: u64,
    /// Nanoseconds per operation per thread: the threads' summed time over the operations.
    pub ns_per_op: Stat,
    /// Throughput: operations over the slowest thread's time, in millions per second.
    pub mops: Stat,
    /// Failed allocations, summed over repetitions.
    pub failures: u64,
    /// Frees the allocator rejected, summed over repetitions (non-zero means a bug).
    pub bad_frees: u64,
    /// Page faults per operation in the timed phases (median over repetitions).
    pub faults_per_op: f64,
    /// The baseline's median ns/op over this one's: above 1 is faster than the baseline.
    /// `None` where either took page faults above [`FAULTS_PER_OP_LIMIT`].
    pub speedup: Option<f64>,
    /// Every counted repetition.
    pub samples: Vec<Sample>,
}

impl Record {
    /// Whether page faults make up part of its time (see [`FAULTS_PER_OP_LIMIT`]).
    pub fn fault_bound(&self) -> bool {
        self.faults_per_op > FAULTS_PER_OP_LIMIT
    }
}

impl Record {
    /// The key of records compared with each other.
    pub fn key(&self) -> (&str, &str, u32, usize) {
        (&self.workload, &self.phase, self.order, self.threads)
    }
}

/// frag's measurements after round 0 (the fragmented start) and each later round.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragRound {
    /// The round.
    pub round: usize,
    /// Huge frames with every unit free.
    pub free_huge: usize,
    /// Huge frames compaction could free.
    pub possible_huge: usize,
    /// 4 KiB moves needed to free them.
    pub compaction_cost: usize,
    /// Free units.
    pub free_units: usize,
    /// Huge frames holding no unmovable frame.
    pub unpinned_huge: usize,
    /// Huge frames compaction moving movable frames only could free.
    pub recoverable_huge: usize,
    /// Movable 4 KiB moves needed to free them.
    pub recovery_cost: usize,
}

/// frag's rounds for one allocator and thread count (first repetition).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragRecord {
    /// Allocator name.
    pub alloc: String,
    /// Worker threads.
    pub threads: usize,
    /// Heap size in 4 KiB units.
    pub heap_units: usize,
    /// The chance of an unmovable allocation, in percent.
    pub unmovable_percent: u32,
    /// Huge frames in the heap.
    pub huge_frames: usize,
    /// The rounds.
    pub rounds: Vec<FragRound>,
}

/// How a run measured, as far as it is the same for every case.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RunMeta {
    /// The heap of every case but the real-time workloads', in 4 KiB units.
    pub heap_units: usize,
    /// The lock of the locked baselines.
    pub lock: Lock,
    /// The clock of the timed phases.
    pub clock: Clock,
    /// Whether an uncounted warm-up round came first.
    pub warmup: bool,
    /// The least time of a timed phase, ms (shorter ones were repeated).
    pub min_phase_ms: f64,
}

/// Everything a run of the tool produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The tool's version.
    pub version: String,
    /// The machine and build that measured.
    pub machine: Machine,
    /// Usable cores of the machine.
    pub cores: usize,
    /// How it measured.
    pub meta: RunMeta,
    /// The rule for ratios against the baseline.
    pub ratio_rule: String,
    /// The command line.
    pub args: Vec<String>,
    /// The allocator the speedups are relative to.
    pub baseline: String,
    /// The largest order the allocators were built for.
    pub max_order: u32,
    /// One record per allocator, workload phase, order and thread count.
    pub records: Vec<Record>,
    /// frag's rounds.
    pub frag: Vec<FragRecord>,
    /// The real-time suite's tables.
    pub realtime: RealtimeReport,
    /// Skipped allocators or cases, and other remarks.
    pub notes: Vec<String>,
}

impl Report {
    /// Whether nothing at all ran.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.frag.is_empty() && self.realtime.is_empty()
    }
}

fn record(set: &RunSet, phase_index: usize) -> Record {
    let mut ns = Vec::new();
    let mut mops = Vec::new();
    let mut ops = Vec::new();
    let mut faults = Vec::new();
    let mut samples = Vec::new();
    for o in &set.outcomes {
        let p = &o.phases[phase_index];
        let sum: f64 = p.thread_times.iter().map(|t| t.as_nanos() as f64).sum();
        let slowest = p
            .thread_times
            .iter()
            .map(|t| t.as_nanos() as f64)
            .fold(0.0, f64::max);
        let n = p.ops.max(1) as f64;
        ns.push(sum / n);
        mops.push(if slowest > 0.0 {
            p.ops as f64 / slowest * 1e3
        } else {
            0.0
        });
        ops.push(p.ops as f64);
        let all_ops: u64 = o.phases.iter().map(|p| p.ops).sum();
        faults.push(o.faults as f64 / all_ops.max(1) as f64);
        samples.push(Sample {
            ns_per_op: *ns.last().expect("pushed"),
            mops: *mops.last().expect("pushed"),
            ops: p.ops,
            passes: o.passes,
            faults: o.faults,
        });
    }
    let case = &set.case;
    Record {
        alloc: set.alloc.to_string(),
        workload: case.workload.name().to_string(),
        phase: set.outcomes[0].phases[phase_index].name.to_string(),
        order: case.order,
        size: bytes(UNIT_BYTES << case.order),
        threads: case.threads,
        heap_units: case.units,
        reps: set.outcomes.len(),
        ops: Stat::of(&ops).median as u64,
        ns_per_op: Stat::of(&ns),
        mops: Stat::of(&mops),
        failures: set.outcomes.iter().map(|o| o.failures).sum(),
        bad_frees: set.outcomes.iter().map(|o| o.bad_frees).sum(),
        faults_per_op: Stat::of(&faults).median,
        speedup: None,
        samples,
    }
}

fn frag_record(set: &RunSet) -> Option<FragRecord> {
    let first = set.outcomes.first()?;
    if first.frag.is_empty() {
        return None;
    }
    Some(FragRecord {
        alloc: set.alloc.to_string(),
        threads: set.case.threads,
        heap_units: set.case.units,
        unmovable_percent: set.case.unmovable,
        huge_frames: first.frag[0].frames,
        rounds: first
            .frag
            .iter()
            .zip(&first.recovery)
            .enumerate()
            .map(|(round, (f, r))| FragRound {
                round,
                free_huge: f.free_frames,
                possible_huge: f.possible_frames,
                compaction_cost: f.compaction_cost,
                free_units: f.free_units,
                unpinned_huge: r.unpinned_frames,
                recoverable_huge: r.recoverable_frames,
                recovery_cost: r.recovery_cost,
            })
            .collect(),
    })
}

/// Summarises the run sets into a report, with speedups over `baseline`.
pub fn summarize(
    baseline: &str,
    max_order: u32,
    args: Vec<String>,
    meta: RunMeta,
    sets: Vec<RunSet>,
    mut notes: Vec<String>,
) -> Report {
    let mut records = Vec::new();
    let mut frag = Vec::new();
    for set in &sets {
        if set.outcomes.is_empty() {
            continue;
        }
        for i in 0..set.outcomes[0].phases.len() {
            records.push(record(set, i));
        }
        frag.extend(frag_record(set));
    }
    let base: Vec<Record> = records
        .iter()
        .filter(|r| r.alloc == baseline)
        .cloned()
        .collect();
    for r in &mut records {
        r.speedup = base
            .iter()
            .find(|b| b.key() == r.key())
            .filter(|b| r.ns_per_op.median > 0.0 && b.ns_per_op.median > 0.0)
            .filter(|b| !r.fault_bound() && !b.fault_bound())
            .map(|b| b.ns_per_op.median / r.ns_per_op.median);
    }
    // Table order: workload, size, threads, phase, then allocator in run order (the sort is
    // stable).
    let workload_rank = |name: &str| {
        Workload::ALL
            .iter()
            .position(|w| w.name() == name)
            .unwrap_or(usize::MAX)
    };
    let phase_rank = |name: &str| PHASES.iter().position(|p| *p == name).unwrap_or(usize::MAX);
    records.sort_by_key(|r| {
        (
            workload_rank(&r.workload),
            r.order,
            r.threads,
            phase_rank(&r.phase),
        )
    });
    for r in records.iter().filter(|r| r.bad_frees > 0) {
        notes.push(format!(
            "{}: {} rejected {} frees of blocks it handed out: an allocator bug",
            r.alloc, r.workload, r.bad_frees
        ));
    }
    let realtime = latency::summarize(&sets);
    Report {
        realtime,
        version: env!("CARGO_PKG_VERSION").to_string(),
        machine: Machine::current(),
        cores: crate::runner::usable_cpus().len(),
        meta,
        ratio_rule: RATIO_RULE.to_string(),
        args,
        baseline: baseline.to_string(),
        max_order,
        records,
        frag,
        notes,
    }
}
