//! `buddybench.json` (the whole report), `buddybench.csv` (one line per record) and
//! `frag.csv` (one line per frag round), and the real-time suite's CSV files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::latency;
use super::summary::Report;

/// The CSV columns of a record.
pub const CSV_HEADER: &str = "alloc,workload,phase,order,size,threads,heap_units,reps,ops,ns_per_op_median,ns_per_op_min,ns_per_op_max,mops_median,mops_min,mops_max,failures,bad_frees,faults_per_op,speedup";

/// The records as CSV.
pub fn records_csv(report: &Report) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in &report.records {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{:.2},{:.2},{:.2},{:.4},{:.4},{:.4},{},{},{:.5},{}",
            r.alloc,
            r.workload,
            r.phase,
            r.order,
            r.size,
            r.threads,
            r.heap_units,
            r.reps,
            r.ops,
            r.ns_per_op.median,
            r.ns_per_op.min,
            r.ns_per_op.max,
            r.mops.median,
            r.mops.min,
            r.mops.max,
            r.failures,
            r.bad_frees,
            r.faults_per_op,
            r.speedup.map(|x| format!("{x:.3}")).unwrap_or_default(),
        );
    }
    s
}

/// frag's rounds as CSV.
pub fn frag_csv(report: &Report) -> String {
    let mut s = String::from(
        "alloc,threads,heap_units,round,free_huge,possible_huge,compaction_cost,free_units,unmovable_percent,unpinned_huge,recoverable_huge,recovery_cost\n",
    );
    for f in &report.frag {
        for r in &f.rounds {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                f.alloc,
                f.threads,
                f.heap_units,
                r.round,
                r.free_huge,
                r.possible_huge,
                r.compaction_cost,
                r.free_units,
                f.unmovable_percent,
                r.unpinned_huge,
                r.recoverable_huge,
                r.recovery_cost
            );
        }
    }
    s
}

/// Writes the JSON and CSV files into `dir`.
pub fn write(report: &Report, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    for (name, text) in [
        ("buddybench.json", json),
        ("buddybench.csv", records_csv(report)),
        ("frag.csv", frag_csv(report)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        files.push(path);
    }
    files.extend(latency::write_csv(&report.realtime, dir)?);
    Ok(files)
}
