//! Drawing a chart in SVG and PNG: a line per series with error bars and markers, a legend
//! right of the plotting area, log axes where the values span a wide range, and each
//! allocator in the same colour and marker in every chart.
//!
//! Text is drawn with the DejaVu Sans font shipped in `assets/` (through plotters' `ab_glyph`
//! feature), so plotting needs no system font libraries.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::allocs::{AllocSpec, DEFAULT_ALLOCS, REALTIME_ALLOCS};

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const SIZE: (u32, u32) = (900, 540);

/// One point: x, the median y, and the least and largest y (the error bar).
pub(crate) type Point = (f64, f64, f64, f64);

/// One line of a chart: a label (the allocator's name first) and its points.
pub(crate) type Series = (String, Vec<Point>);

/// How the x axis maps its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XScale {
    /// Linear.
    Linear,
    /// Base-2 logarithmic (thread counts), labelled at every measured value.
    Log2,
}

/// A chart to draw in both formats.
pub(crate) struct Chart {
    pub(crate) file: String,
    pub(crate) title: String,
    pub(crate) x_desc: &'static str,
    /// The x axis' tick labels.
    pub(crate) x_fmt: fn(f64) -> String,
    pub(crate) x_scale: XScale,
    /// The y axis' title, saying whether lower or higher is better.
    pub(crate) y_desc: &'static str,
    pub(crate) log_y: bool,
    pub(crate) series: Vec<Series>,
}

/// Every name a series can start with, in a fixed order: an allocator's colour and marker
/// come from its place here, never from its place in a chart, so it looks the same in every
/// plot of every run.
/// The default suite's allocators come first, so that they get the most distinct colours.
fn style_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = DEFAULT_ALLOCS
        .iter()
        .chain(REALTIME_ALLOCS)
        .copied()
        .collect();
    for a in AllocSpec::all() {
        if !names.contains(&a.name()) {
            names.push(a.name());
        }
    }
    names.push("buddy");
    names
}

/// Distinct colours, readable on white (Tableau 10, then darker companions).
const COLOURS: [RGBColor; 16] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(128, 0, 0),
    RGBColor(0, 100, 0),
    RGBColor(85, 0, 128),
    RGBColor(128, 96, 0),
    RGBColor(0, 0, 0),
];

/// The markers, drawn in turn with the colours.
const MARKERS: usize = 4;

/// The colour and marker of the series labelled `label` (its first word names the allocator).
fn style(label: &str) -> (RGBColor, usize) {
    let name = label.split(' ').next().unwrap_or(label);
    let i = style_names()
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| {
            // Not an allocator: a stable index from the name itself.
            name.bytes()
                .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize))
        });
    (COLOURS[i % COLOURS.len()], i % MARKERS)
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

/// Width of the legend, right of the plotting area, so that it never covers data.
const LEGEND_WIDTH: u32 = 190;

/// The x value where it is drawn.
fn x_at(scale: XScale, x: f64) -> f64 {
    match scale {
        XScale::Linear => x,
        XScale::Log2 => x.max(f64::MIN_POSITIVE).log2(),
    }
}

/// Bounds of all points (error bars included), padded so a single point or a flat line still
/// has an extent.
fn bounds(c: &Chart, log_y: bool) -> ((f64, f64), (f64, f64)) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, _, lo, hi) in c.series.iter().flat_map(|s| s.1.iter()) {
        let x = x_at(c.x_scale, x);
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(lo);
        y1 = y1.max(hi);
    }
    if x0 > x1 {
        return ((0.0, 1.0), (if log_y { 1.0 } else { 0.0 }, 10.0));
    }
    let xpad = ((x1 - x0) * 0.05).max(0.3);
    let (y0, y1) = if log_y {
        let lo = y0.max(1e-3);
        (lo / 1.5, y1.max(lo) * 1.5)
    } else {
        (0.0, if y1 > 0.0 { y1 * 1.1 } else { 1.0 })
    };
    ((x0 - xpad, x1 + xpad), (y0, y1))
}

/// Where the x axis is labelled: at every measured value where there are few (every thread
/// count), else at about ten even steps.
fn x_keys(c: &Chart) -> Vec<f64> {
    let mut xs: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| x_at(c.x_scale, p.0)))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if xs.len() <= 16 {
        return xs;
    }
    let (lo, hi) = (xs[0], xs[xs.len() - 1]);
    let step = ((hi - lo) / 10.0).max(1.0).round();
    (0..=10)
        .map(|i| lo + step * f64::from(i))
        .filter(|&x| x <= hi)
        .collect()
}

/// Draws a marker of kind `m` centred on pixel `(x, y)` of `area`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    m: usize,
    colour: RGBColor,
) -> std::io::Result<()> {
    let style = colour.filled();
    let line = colour.stroke_width(2);
    match m {
        0 => area.draw(&Circle::new((x, y), 4, style)),
        1 => area.draw(&Polygon::new(
            vec![(x, y - 5), (x - 5, y + 4), (x + 5, y + 4)],
            style,
        )),
        2 => area
            .draw(&PathElement::new(
                vec![(x - 4, y - 4), (x + 4, y + 4)],
                line,
            ))
            .and_then(|()| {
                area.draw(&PathElement::new(
                    vec![(x - 4, y + 4), (x + 4, y - 4)],
                    line,
                ))
            }),
        _ => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], style)),
    }
    .map_err(io_err)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart) -> std::io::Result<()> {
    root.fill(&WHITE).map_err(io_err)?;
    let (w, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(w.saturating_sub(LEGEND_WIDTH));
    // A log axis only pays off (and only gets labels) when values span a wide range.
    let ((_, _), (lo, hi)) = bounds(c, true);
    let log_y = c.log_y && hi / lo > 50.0;
    let ((x0, x1), (y0, y1)) = bounds(c, log_y);
    let keys = x_keys(c);
    let mut b = ChartBuilder::on(&plot);
    b.caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    let scale = c.x_scale;
    let x_fmt = c.x_fmt;
    let label_x = move |x: &f64| match scale {
        XScale::Linear => x_fmt(*x),
        XScale::Log2 => x_fmt(x.exp2().round()),
    };
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                // The x labels are drawn below at the measured values instead.
                .x_labels(0)
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
                .axis_desc_style(("sans-serif", 15))
                .draw()
                .map_err(io_err)?;
            for (name, pts) in &c.series {
                let (colour, m) = style(name);
                let at = |p: &Point| (x_at(scale, p.0), p.1);
                chart
                    .draw_series(LineSeries::new(pts.iter().map(at), colour.stroke_width(2)))
                    .map_err(io_err)?;
                chart
                    .draw_series(pts.iter().filter(|p| p.3 > p.2).map(|p| {
                        ErrorBar::new_vertical(
                            x_at(scale, p.0),
                            p.2,
                            p.1,
                            p.3,
                            colour.stroke_width(1),
                            8,
                        )
                    }))
                    .map_err(io_err)?;
                if pts.len() <= 32 {
                    let fill = colour.filled();
                    let line = colour.stroke_width(2);
                    let pts = pts.iter().map(at);
                    match m {
                        0 => chart
                            .draw_series(
                                pts.map(|p| EmptyElement::at(p) + Circle::new((0, 0), 4, fill)),
                            )
                            .map(|_| ()),
                        1 => chart
                            .draw_series(pts.map(|p| {
                                EmptyElement::at(p)
                                    + Polygon::new(vec![(0, -5), (-5, 4), (5, 4)], fill)
                            }))
                            .map(|_| ()),
                        2 => chart
                            .draw_series(pts.map(|p| {
                                EmptyElement::at(p)
                                    + PathElement::new(vec![(-4, -4), (4, 4)], line)
                                    + PathElement::new(vec![(-4, 4), (4, -4)], line)
                            }))
                            .map(|_| ()),
                        _ => chart
                            .draw_series(pts.map(|p| {
                                EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], fill)
                            }))
                            .map(|_| ()),
                    }
                    .map_err(io_err)?;
                }
            }
            for &k in &keys {
                let (px, py) = chart.backend_coord(&(k, y0));
                let text = label_x(&k);
                plot.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))
                    .map_err(io_err)?;
                let half = 4 * text.len() as i32;
                plot.draw(&Text::new(
                    text,
                    (px - half, py + 8),
                    ("sans-serif", 14).into_font().color(&BLACK),
                ))
                .map_err(io_err)?;
            }
        }};
    }
    let x_range = x0..x1;
    if log_y {
        body!(b
            .build_cartesian_2d(x_range, (y0..y1).log_scale())
            .map_err(io_err)?);
    } else {
        body!(b.build_cartesian_2d(x_range, y0..y1).map_err(io_err)?);
    }
    for (i, (name, _)) in c.series.iter().enumerate() {
        let (colour, m) = style(name);
        let y = 50 + 22 * i as i32;
        legend
            .draw(&PathElement::new(
                vec![(6, y), (34, y)],
                colour.stroke_width(2),
            ))
            .map_err(io_err)?;
        draw_marker(&legend, (20, y), m, colour)?;
        legend
            .draw(&Text::new(
                name.clone(),
                (42, y - 8),
                ("sans-serif", 14).into_font().color(&BLACK),
            ))
            .map_err(io_err)?;
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

/// Adds `point` (x, median, min, max) to the series of `alloc`, starting that series if it
/// has none yet.
pub(crate) fn push_point(series: &mut Vec<Series>, alloc: &str, point: Point) {
    match series.iter_mut().find(|s| s.0 == alloc) {
        Some(s) => s.1.push(point),
        None => series.push((alloc.to_owned(), vec![point])),
    }
}

/// Draws every chart as `<file>.svg` and `<file>.png` into `dir` (created if missing).
pub(crate) fn draw_all(charts: Vec<Chart>, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    for c in charts {
        let svg = dir.join(format!("{}.svg", c.file));
        draw(SVGBackend::new(&svg, SIZE).into_drawing_area(), &c)?;
        let png = dir.join(format!("{}.png", c.file));
        draw(BitMapBackend::new(&png, SIZE).into_drawing_area(), &c)?;
        files.push(svg);
        files.push(png);
    }
    Ok(files)
}
