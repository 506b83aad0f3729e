//! The real-time suite's results: latency percentiles per allocator, pattern and operation;
//! the contrived case per allocator and N; the estranged-vs-Knuth shares; defragmentation
//! per order. Summarised over repetitions, printed as tables, written as CSV and plotted.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::chart::{file_safe, push_point, whole, Chart, Series, XScale};
use super::columns::columns;
use super::stat::Stat;
use crate::case::RunSet;
use crate::units::{bytes, UNIT_BYTES};
use crate::workloads::realtime::contrived::ContrivedSample;
use crate::workloads::realtime::defrag::DefragSample;
use crate::workloads::realtime::latency::{LatencySample, Op, Pattern};
use crate::workloads::realtime::share::ShareSample;
use crate::workloads::Outcome;

/// Latency percentiles of one operation in one pattern, on one allocator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyRecord {
    /// Allocator name.
    pub alloc: String,
    /// "constant-occupancy", "larson" or "fragmented".
    pub pattern: String,
    /// "alloc" or "free".
    pub op: String,
    /// The smallest block order.
    pub order: u32,
    /// Its size, e.g. "4K".
    pub size: String,
    /// Worker threads.
    pub threads: usize,
    /// Heap size in units.
    pub heap_units: usize,
    /// Repetitions.
    pub reps: usize,
    /// Operations timed per repetition (median).
    pub count: u64,
    /// Failed allocations, summed over repetitions.
    pub failures: u64,
    /// Median ns, median over repetitions.
    pub p50: u64,
    /// 99th percentile ns, median over repetitions.
    pub p99: u64,
    /// 99.9th percentile ns, median over repetitions.
    pub p999: u64,
    /// The longest operation, median over repetitions, ns.
    pub max: u64,
    /// The longest operation in any repetition, ns.
    pub worst: u64,
    /// Mean ns, median over repetitions.
    pub mean: f64,
    /// The clock's cost subtracted from each time, ns.
    pub overhead_ns: f64,
    /// The clock: "tsc" or "instant".
    pub clock: String,
}

/// The contrived case on one allocator at one N.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContrivedRecord {
    /// Allocator name.
    pub alloc: String,
    /// The order k of the N blocks (the request is of k + 1).
    pub order: u32,
    /// N.
    pub blocks: usize,
    /// Holes left (N/2).
    pub holes: usize,
    /// Heap size in units.
    pub heap_units: usize,
    /// Repetitions.
    pub reps: usize,
    /// Repetitions whose request succeeded.
    pub ok_reps: usize,
    /// Holes below the block the first repetition's request got (first fit: extents walked).
    pub holes_below: Option<usize>,
    /// The first request's ns, over repetitions.
    pub first_ns: Stat,
    /// The median request's ns, over repetitions.
    pub median_ns: Stat,
    /// The longest request in any repetition, ns.
    pub max_ns: u64,
}

/// The estranged-vs-Knuth shares of one allocator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShareRecord {
    /// "knuth" or "estranged".
    pub alloc: String,
    /// Requests per repetition.
    pub requests: u64,
    /// Of them, served immediately (the same in every repetition: the sequence is fixed).
    pub immediate: u64,
    /// immediate / requests.
    pub share: f64,
    /// How the requests were served, by the allocator's counters.
    pub served_by: Vec<(String, u64)>,
    /// Failed requests.
    pub failed: u64,
    /// Repetitions.
    pub reps: usize,
    /// Mean ns per allocation, over repetitions.
    pub alloc_ns: Stat,
    /// Mean ns per free, over repetitions.
    pub free_ns: Stat,
}

/// One defragmenting request of one order on one allocator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DefragRecord {
    /// "knuth" or "estranged".
    pub alloc: String,
    /// The order requested.
    pub order: u32,
    /// Heap size in units.
    pub heap_units: usize,
    /// Repetitions.
    pub reps: usize,
    /// Repetitions whose request succeeded.
    pub ok_reps: usize,
    /// Blocks moved (the same in every repetition).
    pub moves: usize,
    /// Moves predicted: 2^(k-1).
    pub predicted: usize,
    /// Units moved.
    pub units_moved: usize,
    /// The request's ns, defragmentation included, over repetitions.
    pub ns: Stat,
}

/// Everything the real-time suite measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RealtimeReport {
    /// Latency percentiles.
    pub latency: Vec<LatencyRecord>,
    /// The contrived case.
    pub contrived: Vec<ContrivedRecord>,
    /// Estranged vs Knuth.
    pub share: Vec<ShareRecord>,
    /// Defragmentation.
    pub defrag: Vec<DefragRecord>,
}

impl RealtimeReport {
    /// Whether nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.latency.is_empty()
            && self.contrived.is_empty()
            && self.share.is_empty()
            && self.defrag.is_empty()
    }
}

fn median_u64(values: impl Iterator<Item = u64>) -> u64 {
    let v: Vec<f64> = values.map(|x| x as f64).collect();
    Stat::of(&v).median.round() as u64
}

fn stat(values: impl Iterator<Item = f64>) -> Stat {
    Stat::of(&values.collect::<Vec<_>>())
}

/// Appends to `out` one record per sample of a kind in `set`: `record` gets the set, the first
/// repetition's sample and that sample of every repetition (the workloads emit them in a
/// fixed order).
fn summarize_each<T, R>(
    set: &RunSet,
    of: fn(&Outcome) -> &Vec<T>,
    record: fn(&RunSet, &T, &[&T]) -> R,
    out: &mut Vec<R>,
) {
    let outs = &set.outcomes;
    for (i, first) in of(&outs[0]).iter().enumerate() {
        let all: Vec<&T> = outs.iter().filter_map(|o| of(o).get(i)).collect();
        out.push(record(set, first, &all));
    }
}

fn latency(set: &RunSet, first: &LatencySample, all: &[&LatencySample]) -> LatencyRecord {
    let times = || all.iter().map(|s| s.times);
    LatencyRecord {
        alloc: set.alloc.to_string(),
        pattern: first.pattern.name().to_string(),
        op: first.op.name().to_string(),
        order: set.case.order,
        size: bytes(UNIT_BYTES << set.case.order),
        threads: set.case.threads,
        heap_units: set.case.units,
        reps: set.outcomes.len(),
        count: median_u64(times().map(|t| t.count)),
        failures: all.iter().map(|s| s.failures).sum(),
        p50: median_u64(times().map(|t| t.p50)),
        p99: median_u64(times().map(|t| t.p99)),
        p999: median_u64(times().map(|t| t.p999)),
        max: median_u64(times().map(|t| t.max)),
        worst: times().map(|t| t.max).max().unwrap_or(0),
        mean: stat(times().map(|t| t.mean)).median,
        overhead_ns: first.overhead_ns,
        clock: first.clock.to_string(),
    }
}

fn contrived(set: &RunSet, first: &ContrivedSample, all: &[&ContrivedSample]) -> ContrivedRecord {
    ContrivedRecord {
        alloc: set.alloc.to_string(),
        order: set.case.order,
        blocks: first.blocks,
        holes: first.holes,
        heap_units: set.case.units,
        reps: set.outcomes.len(),
        ok_reps: all.iter().filter(|s| s.ok).count(),
        holes_below: first.holes_below,
        first_ns: stat(all.iter().map(|s| s.first_ns as f64)),
        median_ns: stat(all.iter().map(|s| s.median_ns as f64)),
        max_ns: all.iter().map(|s| s.max_ns).max().unwrap_or(0),
    }
}

fn share(set: &RunSet, first: &ShareSample, all: &[&ShareSample]) -> ShareRecord {
    ShareRecord {
        alloc: first.alloc.to_string(),
        requests: first.requests,
        immediate: first.immediate,
        share: first.share(),
        served_by: first
            .served_by
            .iter()
            .map(|&(n, c)| (n.to_string(), c))
            .collect(),
        failed: first.failed,
        reps: set.outcomes.len(),
        alloc_ns: stat(all.iter().map(|s| s.alloc_ns)),
        free_ns: stat(all.iter().map(|s| s.free_ns)),
    }
}

fn defrag(set: &RunSet, first: &DefragSample, all: &[&DefragSample]) -> DefragRecord {
    DefragRecord {
        alloc: first.alloc.to_string(),
        order: first.order,
        heap_units: first.units,
        reps: set.outcomes.len(),
        ok_reps: all.iter().filter(|s| s.ok).count(),
        moves: first.moves,
        predicted: first.predicted,
        units_moved: first.units_moved,
        ns: stat(all.iter().map(|s| s.ns as f64)),
    }
}

/// Summarises the real-time samples of every run set, in table order.
pub fn summarize(sets: &[RunSet]) -> RealtimeReport {
    let mut r = RealtimeReport::default();
    for set in sets.iter().filter(|s| !s.outcomes.is_empty()) {
        summarize_each(set, |o| &o.realtime.latency, latency, &mut r.latency);
        summarize_each(set, |o| &o.realtime.contrived, contrived, &mut r.contrived);
        summarize_each(set, |o| &o.realtime.share, share, &mut r.share);
        summarize_each(set, |o| &o.realtime.defrag, defrag, &mut r.defrag);
    }
    let pattern_rank = |p: &str| Pattern::ALL.iter().position(|x| x.name() == p);
    r.latency.sort_by_key(|l| {
        (
            pattern_rank(&l.pattern),
            l.op != Op::Alloc.name(),
            l.order,
            l.threads,
        )
    });
    r.contrived.sort_by_key(|c| (c.order, c.blocks));
    r
}

fn us(ns: f64) -> String {
    if ns >= 10_000.0 {
        format!("{:.0}", ns / 1e3)
    } else {
        format!("{:.2}", ns / 1e3)
    }
}

/// Shows a group's key cells on its first row only.
fn grouped<K: PartialEq + Clone>(last: &mut Option<K>, key: K) -> bool {
    let first = last.as_ref() != Some(&key);
    *last = Some(key);
    first
}

fn header(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

/// The real-time tables (empty when nothing was measured).
pub fn render(r: &RealtimeReport) -> String {
    let mut out = String::new();
    if let Some(first) = r.latency.first() {
        let _ = writeln!(
            out,
            "\nlatency, ns per operation (clock: {}, its overhead of {:.1} ns subtracted from each); p50..max: median over repetitions, worst: the longest in any; max and worst include preemption and interrupts on a shared machine",
            first.clock, first.overhead_ns
        );
        let mut rows = vec![header(&[
            "pattern",
            "op",
            "size",
            "thr",
            "allocator",
            "p50",
            "p99",
            "p99.9",
            "max",
            "worst",
            "mean",
            "ops",
            "failed",
        ])];
        let mut last = None;
        for l in &r.latency {
            let key = (l.pattern.clone(), l.op.clone(), l.order, l.threads);
            let show = grouped(&mut last, key);
            let g = |s: String| if show { s } else { String::new() };
            rows.push(vec![
                g(l.pattern.clone()),
                g(l.op.clone()),
                g(l.size.clone()),
                g(l.threads.to_string()),
                l.alloc.clone(),
                l.p50.to_string(),
                l.p99.to_string(),
                l.p999.to_string(),
                l.max.to_string(),
                l.worst.to_string(),
                format!("{:.0}", l.mean),
                l.count.to_string(),
                l.failures.to_string(),
            ]);
        }
        let mut numeric = vec![false, false, false, true, false];
        numeric.extend([true; 8]);
        out.push_str(&columns(&rows, &numeric));
    }
    if !r.contrived.is_empty() {
        out.push_str("\ncontrived (§3.1): N blocks of k units, every other freed, then one request of 2k; holes below: holes at lower addresses than the block it got (first fit: the extents it walked past); first: the paper's request, median/max: of the request repeated (freed in between); µs\n");
        let mut rows = vec![header(&[
            "N",
            "size",
            "allocator",
            "ok",
            "holes below",
            "first µs",
            "median µs",
            "max µs",
        ])];
        let mut last = None;
        for c in &r.contrived {
            let show = grouped(&mut last, (c.order, c.blocks));
            rows.push(vec![
                if show {
                    c.blocks.to_string()
                } else {
                    String::new()
                },
                if show {
                    bytes(UNIT_BYTES << c.order)
                } else {
                    String::new()
                },
                c.alloc.clone(),
                format!("{}/{}", c.ok_reps, c.reps),
                c.holes_below
                    .map_or("-".into(), |h| format!("{h}/{}", c.holes)),
                us(c.first_ns.median),
                us(c.median_ns.median),
                us(c.max_ns as f64),
            ]);
        }
        out.push_str(&columns(
            &rows,
            &[true, false, false, true, true, true, true, true],
        ));
    }
    if !r.share.is_empty() {
        out.push_str("\nestranged vs Knuth (§3.3): Java-like mix in 16 B units, sequential, no lock; immediate = served from a list of the order without split or merge (paper: ~90% vs ~50%)\n");
        let mut rows = vec![header(&[
            "allocator",
            "requests",
            "immediate",
            "served by",
            "failed",
            "ns/alloc",
            "ns/free",
        ])];
        for s in &r.share {
            let by: Vec<String> = s
                .served_by
                .iter()
                .map(|(n, c)| format!("{n} {c}"))
                .collect();
            rows.push(vec![
                s.alloc.clone(),
                s.requests.to_string(),
                format!("{:.1}%", 100.0 * s.share),
                by.join(", "),
                s.failed.to_string(),
                format!("{:.1}", s.alloc_ns.median),
                format!("{:.1}", s.free_ns.median),
            ]);
        }
        out.push_str(&columns(
            &rows,
            &[false, true, true, false, true, true, true],
        ));
    }
    if !r.defrag.is_empty() {
        out.push_str("\ndefrag (§2.8): one request of order k on a heap with every other unit busy; moves made and predicted (2^(k-1)); µs with planning and moves, median over repetitions\n");
        let mut rows = vec![header(&[
            "k",
            "allocator",
            "heap",
            "ok",
            "moves",
            "predicted",
            "units moved",
            "µs",
        ])];
        let mut last = None;
        for d in &r.defrag {
            let show = grouped(&mut last, d.order);
            rows.push(vec![
                if show {
                    d.order.to_string()
                } else {
                    String::new()
                },
                d.alloc.clone(),
                d.heap_units.to_string(),
                format!("{}/{}", d.ok_reps, d.reps),
                d.moves.to_string(),
                d.predicted.to_string(),
                d.units_moved.to_string(),
                us(d.ns.median),
            ]);
        }
        out.push_str(&columns(
            &rows,
            &[true, false, true, true, true, true, true, true],
        ));
    }
    out
}

/// The latency rows as CSV.
pub fn latency_csv(r: &RealtimeReport) -> String {
    let mut s = String::from("alloc,pattern,op,order,size,threads,heap_units,reps,count,failures,p50_ns,p99_ns,p999_ns,max_ns,worst_ns,mean_ns,overhead_ns,clock\n");
    for l in &r.latency {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{}",
            l.alloc,
            l.pattern,
            l.op,
            l.order,
            l.size,
            l.threads,
            l.heap_units,
            l.reps,
            l.count,
            l.failures,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            l.worst,
            l.mean,
            l.overhead_ns,
            l.clock
        );
    }
    s
}

fn contrived_csv(r: &RealtimeReport) -> String {
    let mut s = String::from("alloc,order,blocks,holes,heap_units,reps,ok_reps,holes_below,first_ns_median,median_ns_median,max_ns\n");
    for c in &r.contrived {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.0},{:.0},{}",
            c.alloc,
            c.order,
            c.blocks,
            c.holes,
            c.heap_units,
            c.reps,
            c.ok_reps,
            c.holes_below.map(|h| h.to_string()).unwrap_or_default(),
            c.first_ns.median,
            c.median_ns.median,
            c.max_ns
        );
    }
    s
}

fn share_csv(r: &RealtimeReport) -> String {
    let mut s = String::from(
        "alloc,requests,immediate,share,served_by,failed,reps,alloc_ns_median,free_ns_median\n",
    );
    for x in &r.share {
        let by: Vec<String> = x
            .served_by
            .iter()
            .map(|(n, c)| format!("{n}={c}"))
            .collect();
        let _ = writeln!(
            s,
            "{},{},{},{:.4},{},{},{},{:.2},{:.2}",
            x.alloc,
            x.requests,
            x.immediate,
            x.share,
            by.join(";"),
            x.failed,
            x.reps,
            x.alloc_ns.median,
            x.free_ns.median
        );
    }
    s
}

fn defrag_csv(r: &RealtimeReport) -> String {
    let mut s = String::from(
        "alloc,order,heap_units,reps,ok_reps,moves,predicted,units_moved,ns_median,ns_min,ns_max\n",
    );
    for d in &r.defrag {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.0},{:.0},{:.0}",
            d.alloc,
            d.order,
            d.heap_units,
            d.reps,
            d.ok_reps,
            d.moves,
            d.predicted,
            d.units_moved,
            d.ns.median,
            d.ns.min,
            d.ns.max
        );
    }
    s
}

/// Writes `latency.csv`, `contrived.csv`, `share.csv` and `defrag.csv` into `dir`, each only
/// if it has rows.
pub fn write_csv(r: &RealtimeReport, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (name, rows, text) in [
        ("latency.csv", r.latency.len(), latency_csv(r)),
        ("contrived.csv", r.contrived.len(), contrived_csv(r)),
        ("share.csv", r.share.len(), share_csv(r)),
        ("defrag.csv", r.defrag.len(), defrag_csv(r)),
    ] {
        if rows > 0 {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            files.push(path);
        }
    }
    Ok(files)
}

/// The x axis of a latency chart: 1 = p50, 2 = p99, 3 = p99.9, 4 = max.
fn percentile_label(x: f64) -> String {
    match whole(x).as_str() {
        "1" => "p50".into(),
        "2" => "p99".into(),
        "3" => "p99.9".into(),
        "4" => "max".into(),
        _ => String::new(),
    }
}

/// One latency chart per pattern, operation, size and thread count (a line per allocator
/// through its p50, p99, p99.9 and max, log scale), and the contrived case's first request
/// against N (a line per allocator).
pub(crate) fn charts(r: &RealtimeReport) -> Vec<Chart> {
    let mut out: Vec<Chart> = Vec::new();
    let mut last = None;
    for l in &r.latency {
        if grouped(
            &mut last,
            (l.pattern.clone(), l.op.clone(), l.order, l.threads),
        ) {
            out.push(Chart {
                file: format!(
                    "latency-{}-{}-{}-x{}",
                    l.pattern,
                    l.op,
                    file_safe(&l.size),
                    l.threads
                ),
                title: format!(
                    "latency: {} {}, {} blocks, {} thread(s)",
                    l.pattern, l.op, l.size, l.threads
                ),
                x_desc: "percentile",
                x_fmt: percentile_label,
                x_scale: XScale::Linear,
                y_desc: "ns per operation (lower is better)",
                log_y: true,
                series: Vec::new(),
            });
        }
        let points = [l.p50, l.p99, l.p999, l.max]
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let y = v.max(1) as f64;
                ((i + 1) as f64, y, y, y)
            })
            .collect();
        if let Some(c) = out.last_mut() {
            c.series.push((l.alloc.clone(), points));
        }
    }
    if !r.contrived.is_empty() {
        let mut series: Vec<Series> = Vec::new();
        for c in &r.contrived {
            let point = (
                c.blocks as f64,
                c.first_ns.median.max(1.0),
                c.first_ns.min.max(1.0),
                c.first_ns.max.max(1.0),
            );
            push_point(&mut series, &c.alloc, point);
        }
        out.push(Chart {
            file: "contrived".into(),
            title: "contrived (§3.1): time of the larger request after N blocks, every other freed"
                .into(),
            x_desc: "N (blocks, log2 scale)",
            x_fmt: whole,
            x_scale: XScale::Log2,
            y_desc: "ns (lower is better)",
            log_y: true,
            series,
        });
    }
    out
}
