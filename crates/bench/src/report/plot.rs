//! SVG and PNG plots: ns/op against threads for each workload phase and size (one line per
//! allocator, log scale), and frag's free huge frames and compaction cost per round.
//!
//! Text is drawn with the DejaVu Sans font shipped in `assets/` (through plotters' `ab_glyph`
//! feature), so plotting needs no system font libraries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Report;

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const SIZE: (u32, u32) = (900, 540);

/// One line of a chart: a label and its points.
pub(crate) type Series = (String, Vec<(f64, f64)>);

/// A chart to draw in both formats.
pub(crate) struct Chart {
    pub(crate) file: String,
    pub(crate) title: String,
    pub(crate) x_desc: &'static str,
    /// The x axis' tick labels.
    pub(crate) x_fmt: fn(f64) -> String,
    pub(crate) y_desc: &'static str,
    pub(crate) log_y: bool,
    pub(crate) series: Vec<Series>,
}

fn register_font() -> std::io::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the shipped font could not be loaded",
        ))
    }
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Bounds of all points, padded so a single point or a flat line still has an extent.
fn bounds(series: &[Series], log_y: bool) -> ((f64, f64), (f64, f64)) {
    let pts = series.iter().flat_map(|s| s.1.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return ((0.0, 1.0), (if log_y { 1.0 } else { 0.0 }, 10.0));
    }
    let xpad = ((x1 - x0) * 0.05).max(0.5);
    let (y0, y1) = if log_y {
        let lo = y0.max(1e-3);
        (lo / 1.5, y1.max(lo) * 1.5)
    } else {
        (0.0, if y1 > 0.0 { y1 * 1.1 } else { 1.0 })
    };
    ((x0 - xpad, x1 + xpad), (y0, y1))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart) -> std::io::Result<()> {
    root.fill(&WHITE).map_err(io_err)?;
    // A log axis only pays off (and only gets labels) when values span a wide range.
    let ((_, _), (lo, hi)) = bounds(&c.series, true);
    let log_y = c.log_y && hi / lo > 50.0;
    let ((x0, x1), (y0, y1)) = bounds(&c.series, log_y);
    let mut b = ChartBuilder::on(&root);
    b.caption(&c.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_label_formatter(&|x| (c.x_fmt)(*x))
                .y_label_formatter(&|y| {
                    if y.fract() == 0.0 || *y >= 10.0 {
                        format!("{y:.0}")
                    } else {
                        format!("{y:.1}")
                    }
                })
                .x_desc(c.x_desc)
                .y_desc(c.y_desc)
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 16))
                .draw()
                .map_err(io_err)?;
            for (i, (name, pts)) in c.series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                    .map_err(io_err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                if pts.len() <= 32 {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(io_err)?;
                }
            }
            chart
                .configure_series_labels()
                .label_font(("sans-serif", 14))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(io_err)?;
        }};
    }
    if log_y {
        body!(b
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(io_err)?);
    } else {
        body!(b.build_cartesian_2d(x0..x1, y0..y1).map_err(io_err)?);
    }
    root.present().map_err(io_err)
}

/// Axis labels for threads and rounds: whole numbers only.
pub(crate) fn whole(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round() as i64)
    } else {
        String::new()
    }
}

/// `s` usable in a file name: every character but ASCII letters and digits becomes `-`.
pub(crate) fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Adds `point` to the series of `alloc`, starting that series if it has none yet.
pub(crate) fn push_point(series: &mut Vec<Series>, alloc: &str, point: (f64, f64)) {
    match series.iter_mut().find(|s| s.0 == alloc) {
        Some(s) => s.1.push(point),
        None => series.push((alloc.to_owned(), vec![point])),
    }
}

fn charts(report: &Report) -> Vec<Chart> {
    // (workload, phase, order) -> allocator -> points (threads, ns/op), in record order.
    let mut groups: BTreeMap<(usize, u32), (String, String, Vec<Series>)> = BTreeMap::new();
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
            )
        });
        let point = (r.threads as f64, r.ns_per_op.median);
        push_point(&mut g.2, &r.alloc, point);
    }
    let mut out: Vec<Chart> = groups
        .into_values()
        .map(|(file, title, mut series)| {
            for s in &mut series {
                s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            Chart {
                file,
                title,
                x_desc: "threads",
                x_fmt: whole,
                y_desc: "ns per operation",
                log_y: true,
                series,
            }
        })
        .collect();
    if !report.frag.is_empty() {
        let series = |f: fn(&super::FragRound) -> usize| -> Vec<Series> {
            report
                .frag
                .iter()
                .map(|r| {
                    (
                        format!("{} x{}", r.alloc, r.threads),
                        r.rounds
                            .iter()
                            .map(|x| (x.round as f64, f(x) as f64))
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
            y_desc: "free huge frames",
            log_y: false,
            series: series(|r| r.free_huge),
        });
        out.push(Chart {
            file: "frag-compaction-cost".into(),
            title: "frag: compaction cost (4 KiB moves) after each round".into(),
            x_desc: "round",
            x_fmt: whole,
            y_desc: "4 KiB moves",
            log_y: false,
            series: series(|r| r.compaction_cost),
        });
    }
    out.extend(super::latency::charts(&report.realtime));
    out
}

/// Writes every chart as `<name>.svg` and `<name>.png` under `dir/plots`.
pub fn write(report: &Report, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    register_font()?;
    let dir = dir.join("plots");
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::new();
    for c in charts(report) {
        let svg = dir.join(format!("{}.svg", c.file));
        draw(SVGBackend::new(&svg, SIZE).into_drawing_area(), &c)?;
        let png = dir.join(format!("{}.png", c.file));
        draw(BitMapBackend::new(&png, SIZE).into_drawing_area(), &c)?;
        files.push(svg);
        files.push(png);
    }
    Ok(files)
}
