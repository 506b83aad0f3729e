//! The comparison table printed at the end of a run.

use std::fmt::Write as _;

use super::columns::columns;
use super::latency;
use super::summary::{FragRound, Report};
use crate::allocs::{lock_applies, AllocSpec};
use crate::runner::Clock;
use crate::units::{bytes, UNIT_BYTES};

/// The allocators `--lock` applies to, for the table's header.
fn locked_names() -> String {
    AllocSpec::all()
        .iter()
        .map(|a| a.name())
        .filter(|n| lock_applies(n))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ns(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// The mean of `value` over the second half of frag's rounds after the initial one, which a
/// single round's figure can miss by a third (docs/results.md).
fn late_mean(rounds: &[FragRound], value: impl Fn(&FragRound) -> usize) -> String {
    let late = &rounds[rounds.len().div_ceil(2)..];
    match late.len() {
        0 => "-".into(),
        n => format!(
            "{:.0}",
            late.iter().map(value).sum::<usize>() as f64 / n as f64
        ),
    }
}

/// The table of all records, grouped by workload phase, size and thread count, with each
/// allocator's speedup over the baseline, then frag's first and last rounds and the notes.
pub fn render(report: &Report) -> String {
    let mut rows = vec![[
        "workload",
        "op",
        "size",
        "thr",
        "allocator",
        "ns/op",
        "min..max",
        "Mops/s",
        "failed",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("vs {}", report.baseline)])
    .collect::<Vec<_>>()];
    let mut last_key = None;
    for r in &report.records {
        let key = (r.workload.as_str(), r.phase.as_str(), r.order, r.threads);
        let first = last_key != Some(key);
        last_key = Some(key);
        let show = |s: &str| if first { s.to_string() } else { String::new() };
        rows.push(vec![
            show(&r.workload),
            show(&r.phase),
            show(&r.size),
            if first {
                r.threads.to_string()
            } else {
                String::new()
            },
            r.alloc.clone(),
            ns(r.ns_per_op.median),
            format!("{}..{}", ns(r.ns_per_op.min), ns(r.ns_per_op.max)),
            format!("{:.2}", r.mops.median),
            r.failures.to_string(),
            match r.speedup {
                Some(x) => format!("{x:.2}x"),
                None if r.fault_bound() => "faults".into(),
                None => "-".into(),
            },
        ]);
    }
    let numeric = [
        false, false, false, true, false, true, true, true, true, true,
    ];
    let mut out = String::new();
    if !report.records.is_empty() {
        let m = &report.meta;
        let _ = writeln!(
            out,
            "heap {} of 4 KiB units for every case (metadata only; real-time workloads size their own); locked baselines ({}) behind a {} lock; {} clock; median of {} counted repetition(s), allocators interleaved{}; phases repeated to last at least {} ms",
            bytes(m.heap_units * UNIT_BYTES),
            locked_names(),
            m.lock.name(),
            match m.clock {
                Clock::Wall => "wall",
                Clock::Cpu => "thread CPU-time",
            },
            report.records.iter().map(|r| r.reps).max().unwrap_or(0),
            if m.warmup { " after one warm-up round" } else { ", no warm-up" },
            m.min_phase_ms,
        );
        let _ = writeln!(
            out,
            "ns/op: the threads' time per operation; vs {b}: {b}'s ns/op over the allocator's (above 1 = faster); {}",
            report.ratio_rule,
            b = report.baseline
        );
        out.push_str(&columns(&rows, &numeric));
    }
    if !report.frag.is_empty() {
        let mut rows = vec![[
            "frag",
            "thr",
            "unmovable",
            "huge frames",
            "free huge (start -> end)",
            "possible",
            "compaction cost (start -> end)",
            "free huge, late mean",
            "cost, late mean",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()];
        for f in &report.frag {
            let (Some(a), Some(z)) = (f.rounds.first(), f.rounds.last()) else {
                continue;
            };
            rows.push(vec![
                f.alloc.clone(),
                f.threads.to_string(),
                format!("{}%", f.unmovable_percent),
                f.huge_frames.to_string(),
                format!("{} -> {}", a.free_huge, z.free_huge),
                format!("{} -> {}", a.possible_huge, z.possible_huge),
                format!("{} -> {}", a.compaction_cost, z.compaction_cost),
                late_mean(&f.rounds, |r| r.free_huge),
                late_mean(&f.rounds, |r| r.compaction_cost),
            ]);
        }
        out.push('\n');
        out.push_str(&columns(
            &rows,
            &[false, true, true, true, true, true, true, true, true],
        ));
        out.push_str(
            "late mean: over the second half of the rounds (a single round's figures swing)\n",
        );
        if report.frag.iter().any(|f| f.unmovable_percent > 0) {
            out.push('\n');
            out.push_str(&recovery_table(report));
        }
    }
    out.push_str(&latency::render(&report.realtime));
    if !report.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for n in &report.notes {
            let _ = writeln!(out, "  - {n}");
        }
    }
    out
}

/// The rounds frag's recovery table shows, where the run has them (the paper's 100 and two
/// earlier).
const CHECKPOINTS: &[usize] = &[10, 50, 100];

/// frag with unmovable allocations: after rounds 10, 50 and 100 (and the last, where the run
/// has fewer), the free huge frames and what compaction can free, moving any frame and
/// moving movable frames only.
fn recovery_table(report: &Report) -> String {
    let mut rows = vec![[
        "frag",
        "thr",
        "unmovable",
        "round",
        "huge frames",
        "free huge",
        "possible",
        "cost",
        "unpinned",
        "recoverable",
        "recovery cost",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    for f in &report.frag {
        let last = f.rounds.len().saturating_sub(1);
        let mut shown: Vec<usize> = CHECKPOINTS.iter().map(|&r| r.min(last)).collect();
        shown.dedup();
        for r in shown.iter().filter_map(|&r| f.rounds.get(r)) {
            rows.push(vec![
                f.alloc.clone(),
                f.threads.to_string(),
                format!("{}%", f.unmovable_percent),
                r.round.to_string(),
                f.huge_frames.to_string(),
                r.free_huge.to_string(),
                r.possible_huge.to_string(),
                r.compaction_cost.to_string(),
                r.unpinned_huge.to_string(),
                r.recoverable_huge.to_string(),
                r.recovery_cost.to_string(),
            ]);
        }
    }
    let mut out = columns(
        &rows,
        &[
            false, true, true, true, true, true, true, true, true, true, true,
        ],
    );
    out.push_str(
        "possible, cost: huge frames compaction could free moving any frame, and the 4 KiB moves; unpinned: huge frames holding no unmovable frame; recoverable, recovery cost: the same moving movable frames only\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(costs: &[usize]) -> Vec<FragRound> {
        costs
            .iter()
            .enumerate()
            .map(|(round, &compaction_cost)| FragRound {
                round,
                free_huge: 2 * round,
                possible_huge: 0,
                compaction_cost,
                free_units: 0,
                unpinned_huge: 0,
                recoverable_huge: 0,
                recovery_cost: 0,
            })
            .collect()
    }

    #[test]
    fn late_mean_takes_the_second_half_after_round_zero() {
        // Rounds 1..=4 after the initial one: the second half is rounds 3 and 4.
        let r = rounds(&[1000, 50, 60, 70, 90]);
        assert_eq!(late_mean(&r, |r| r.compaction_cost), "80");
        assert_eq!(late_mean(&r, |r| r.free_huge), "7");
        // Rounds 1..=5: rounds 3, 4, 5.
        assert_eq!(
            late_mean(&rounds(&[0, 0, 0, 3, 6, 9]), |r| r.compaction_cost),
            "6"
        );
        assert_eq!(late_mean(&rounds(&[5]), |r| r.compaction_cost), "-");
    }
}
