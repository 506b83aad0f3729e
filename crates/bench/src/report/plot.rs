//! SVG and PNG plots of a report: ns/op and Mops/s against threads for each workload phase
//! and size (one line per allocator), frag's free huge frames and compaction cost per round
//! (and, with unmovable allocations, the huge frames compaction can recover),
//! and the real-time suite's charts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::chart::{draw_all, file_safe, push_point, whole, Chart, Series, XScale};
use super::latency;
use super::summary::{FragRound, Report};

fn charts(report: &Report) -> Vec<Chart> {
    // (workload, phase, order) -> (ns/op series, Mops/s series), points per allocator in
    // record order.
    type Group = (String, String, Vec<Series>, Vec<Series>);
    let mut groups: BTreeMap<(usize, u32), Group> = BTreeMap::new();
    for (i, r) in report.records.iter().enumerate() {
        let first = report
            .records
            .iter()
            .position(|o| (&o.workload, &o.phase) == (&r.workload, &r.phase))
            .unwrap_or(i);
        let g = groups.entry((first, r.order)).or_insert_with(|| {
            (
                format!("{}-{}-{}", r.workload, file_safe(&r.phase), r.size),
                format!("{} ({}), {} blocks", r.workload, r.phase, r.size),
                Vec::new(),
                Vec::new(),
            )
        });
        let t = r.threads as f64;
        let (ns, mops) = (&r.ns_per_op, &r.mops);
        push_point(&mut g.2, &r.alloc, (t, ns.median, ns.min, ns.max));
        push_point(&mut g.3, &r.alloc, (t, mops.median, mops.min, mops.max));
    }
    let by_threads = |file: String, title: String, mut series: Vec<Series>, mops: bool| {
        for s in &mut series {
            s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Chart {
            file: if mops { format!("{file}-mops") } else { file },
            title: if mops {
                format!("{title}: throughput")
            } else {
                title
            },
            x_desc: "threads (log2 scale)",
            x_fmt: whole,
            x_scale: XScale::Log2,
            y_desc: if mops {
                "Mops/s over all threads (higher is better)"
            } else {
                "ns per operation per thread (lower is better)"
            },
            log_y: !mops,
            series,
        }
    };
    let mut out = Vec::new();
    for (file, title, ns, mops) in groups.into_values() {
        out.push(by_threads(file.clone(), title.clone(), ns, false));
        out.push(by_threads(file, title, mops, true));
    }
    if !report.frag.is_empty() {
        let series = |f: fn(&FragRound) -> usize| -> Vec<Series> {
            report
                .frag
                .iter()
                .map(|r| {
                    (
                        match r.unmovable_percent {
                            0 => format!("{} x{}", r.alloc, r.threads),
                            u => format!("{} x{} {u}% unmovable", r.alloc, r.threads),
                        },
                        r.rounds
                            .iter()
                            .map(|x| {
                                let y = f(x) as f64;
                                (x.round as f64, y, y, y)
                            })
                            .collect(),
                    )
                })
                .collect()
        };
        out.push(Chart {
            file: "frag-free-huge".into(),
            title: "frag: free huge (2 MiB) frames after each round".into(),
            x_desc: "round",
            x_fmt: whole,
            x_scale: XScale::Linear,
            y_desc: "free huge frames (higher is better)",
            log_y: false,
            series: series(|r| r.free_huge),
        });
        out.push(Chart {
            file: "frag-compaction-cost".into(),
            title: "frag: compaction cost (4 KiB moves) after each round".into(),
            x_desc: "round",
            x_fmt: whole,
            x_scale: XScale::Linear,
            y_desc: "4 KiB moves (lower is better)",
            log_y: false,
            series: series(|r| r.compaction_cost),
        });
        if report.frag.iter().any(|f| f.unmovable_percent > 0) {
            out.push(Chart {
                file: "frag-recoverable-huge".into(),
                title: "frag: huge frames compaction can free moving movable frames only".into(),
                x_desc: "round",
                x_fmt: whole,
                x_scale: XScale::Linear,
                y_desc: "recoverable huge frames (higher is better)",
                log_y: false,
                series: series(|r| r.recoverable_huge),
            });
        }
    }
    out.extend(latency::charts(&report.realtime));
    out
}

/// Writes every chart as `<name>.svg` and `<name>.png` under `dir/plots`.
pub fn write(report: &Report, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    draw_all(charts(report), &dir.join("plots"))
}
