//! What to run (a [`Plan`], checked into [`Case`]s) and running it.
//!
//! The default suite (no arguments): the registered allocators of
//! [`DEFAULT_ALLOCS`], baseline `knuth-locked` (else `linux`,
//! else the first); thread counts 1, 2, 4, ... up to the usable cores; 3 repetitions; the NBBS
//! workloads at 4K, 32K and 256K blocks on a heap sized to each run's need plus a quarter
//! (rounded up to a power of two), the LLFree workloads at 4K and 2M on a 1 GiB heap (frag:
//! order 0); the real-time workloads at 4K blocks on heaps of their own sizes (the contrived
//! case: one per N; estranged-share and defrag once, not per allocator), with the allocators
//! of [`REALTIME_ALLOCS`] added for them only; blocks up to order 10 (4 MiB); sizes from
//! [`Params::default`].

use std::fmt;

use buddyfree::Config;
use indicatif::{ProgressBar, ProgressStyle};

use crate::allocs::{AllocSpec, DEFAULT_ALLOCS, DEFAULT_BASELINES, REALTIME_ALLOCS};
use crate::report::{summarize, Report, RunSet};
use crate::system::UNIT_BYTES;
use crate::workloads::{self, Params, Suite, Workload};

/// The NBBS paper's sizes: 4 KiB, 32 KiB, 256 KiB.
pub const NBBS_ORDERS: &[u32] = &[0, 3, 6];
/// The LLFree paper's natural frame sizes: 4 KiB and 2 MiB.
pub const LLFREE_ORDERS: &[u32] = &[0, 9];
/// The NBBS paper's largest block, 4 MiB.
pub const DEFAULT_MAX_ORDER: u32 = 10;
/// The LLFree suite's heap, which sets its amount of work: 1 GiB (paper: 128 GiB).
pub const LLFREE_HEAP_UNITS: usize = 1 << 18;
/// The same for `--quick`: 32 MiB.
pub const QUICK_LLFREE_HEAP_UNITS: usize = 1 << 13;
/// The most threads a run may use.
pub const MAX_THREADS: usize = 1024;
/// The default thread counts: 1, 2, 4, ... up to the usable cores, and the core count.
pub fn default_threads() -> Vec<usize> {
    let cores = crate::runner::usable_cpus().len().max(2);
    let mut t: Vec<usize> = (0..).map(|i| 1 << i).take_while(|&n| n <= cores).collect();
    if t.last() != Some(&cores) {
        t.push(cores);
    }
    t
}

/// A user error: a bad name or an impossible parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

fn err<T>(msg: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError(msg.into()))
}

/// What the user asked for; `None` means the default.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Allocator names.
    pub allocs: Option<Vec<String>>,
    /// Workload or suite names (`nbbs`, `llfree`, `all`).
    pub workloads: Option<Vec<String>>,
    /// Thread counts.
    pub threads: Option<Vec<usize>>,
    /// Block orders (sizes are converted to orders by the CLI).
    pub orders: Option<Vec<u32>>,
    /// Heap size in bytes.
    pub heap_bytes: Option<u64>,
    /// Repetitions of each run.
    pub reps: Option<usize>,
    /// The allocator the others are compared with.
    pub baseline: Option<String>,
    /// Largest order the allocators are built for.
    pub max_order: Option<u32>,
    /// Tiny sizes.
    pub quick: bool,
}

/// One workload at one order and thread count over a heap of `units` units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// The workload.
    pub workload: Workload,
    /// The (smallest) block order it allocates.
    pub order: u32,
    /// Worker threads.
    pub threads: usize,
    /// Units in the heap.
    pub units: usize,
}

/// A checked request: everything needed to run.
pub struct Plan {
    /// The allocators, baseline included.
    pub allocs: Vec<AllocSpec>,
    /// The baseline's name.
    pub baseline: &'static str,
    /// The runs, per allocator ([`Workload::standalone`] ones: once).
    pub cases: Vec<Case>,
    /// Allocators of the run that only run the real-time workloads (the default ones added
    /// for them).
    pub realtime_only: Vec<&'static str>,
    /// Largest order the allocators are built for.
    pub max_order: u32,
    /// Repetitions of each run.
    pub reps: usize,
    /// The workloads' parameters.
    pub params: Params,
    /// Things skipped or adjusted, for the report.
    pub notes: Vec<String>,
}

fn workload_names(names: &[String]) -> Result<Vec<Workload>, PlanError> {
    let mut out = Vec::new();
    for name in names {
        let add: Vec<Workload> = match name.as_str() {
            "all" => Workload::ALL.to_vec(),
            n => match Suite::ALL.into_iter().find(|s| s.name() == n) {
                Some(suite) => Workload::ALL
                    .into_iter()
                    .filter(|w| w.suite() == suite)
                    .collect(),
                None => match Workload::find(n) {
                    Some(w) => vec![w],
                    None => {
                        let known: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                        return err(format!(
                            "unknown workload `{n}` (known: {}, or the suites nbbs, llfree, realtime, all)",
                            known.join(", ")
                        ));
                    }
                },
            },
        };
        for w in add {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    Ok(out)
}

fn alloc_names(req: &Request, notes: &mut Vec<String>) -> Result<Vec<AllocSpec>, PlanError> {
    let mut out: Vec<AllocSpec> = Vec::new();
    match &req.allocs {
        Some(names) => {
            for n in names {
                let Some(a) = AllocSpec::find(n) else {
                    let known: Vec<_> = AllocSpec::all().iter().map(|a| a.name()).collect();
                    return err(format!(
                        "unknown allocator `{n}` (known: {})",
                        known.join(", ")
                    ));
                };
                if !out.iter().any(|o| o.name() == a.name()) {
                    out.push(a);
                }
            }
        }
        None => {
            for &n in DEFAULT_ALLOCS {
                match AllocSpec::find(n) {
                    Some(a) => out.push(a),
                    None => notes.push(format!(
                        "default allocator `{n}` is not registered; skipped"
                    )),
                }
            }
        }
    }
    if out.is_empty() {
        return err("no allocator to run");
    }
    Ok(out)
}

/// Picks the units of the heap for `w` at `order` with `threads`, or says why it is too small.
fn heap_units(
    w: Workload,
    order: u32,
    threads: usize,
    req_units: Option<usize>,
    min_units: usize,
    params: &Params,
    quick: bool,
) -> Result<usize, PlanError> {
    let need = w.units_needed(order, threads, params).max(min_units);
    match req_units {
        Some(u) if u < need => err(format!(
            "heap of {} is too small for {} at {} with {threads} thread(s): it needs at least {}",
            bytes(u * UNIT_BYTES),
            w.name(),
            bytes(UNIT_BYTES << order),
            bytes(need * UNIT_BYTES),
        )),
        Some(u) => Ok(u),
        None if w.work_from_heap() => Ok(if quick {
            QUICK_LLFREE_HEAP_UNITS
        } else {
            LLFREE_HEAP_UNITS
        }
        .max(need)),
        // The real-time workloads size their heaps exactly (the contrived case's remainder).
        None if w.suite() == Suite::Realtime => Ok(need),
        // Headroom, so that blocks parked in per-core caches never starve another core.
        None => Ok((need + need / 4).next_power_of_two()),
    }
}

impl Plan {
    /// Checks a request: names exist, thread counts and repetitions are positive, orders fit
    /// under the maximum order, the heap is large enough for every run.
    pub fn new(req: &Request) -> Result<Plan, PlanError> {
        let mut notes = Vec::new();
        let params = if req.quick {
            Params::quick()
        } else {
            Params::default()
        };
        let workloads = match &req.workloads {
            Some(n) => workload_names(n)?,
            None => Workload::ALL.to_vec(),
        };
        if workloads.is_empty() {
            return err("no workload to run");
        }
        let mut allocs = alloc_names(req, &mut notes)?;
        let mut realtime_only = Vec::new();
        if req.allocs.is_none() && workloads.iter().any(|w| w.suite() == Suite::Realtime) {
            for &n in REALTIME_ALLOCS {
                match AllocSpec::find(n) {
                    Some(a) if !allocs.iter().any(|o| o.name() == n) => {
                        allocs.push(a);
                        realtime_only.push(a.name());
                    }
                    Some(_) => {}
                    None => notes.push(format!(
                        "real-time allocator `{n}` is not registered; skipped"
                    )),
                }
            }
        }
        let threads = match &req.threads {
            Some(t) if t.is_empty() => return err("no thread count given"),
            Some(t) => t.clone(),
            None if req.quick => vec![1, 2],
            None => default_threads(),
        };
        if threads.contains(&0) {
            return err("thread count 0: every run needs at least one thread");
        }
        if let Some(t) = threads.iter().find(|&&t| t > MAX_THREADS) {
            return err(format!("thread count {t} is above {MAX_THREADS}"));
        }
        let reps = req.reps.unwrap_or(if req.quick { 2 } else { 3 });
        if reps == 0 {
            return err("--reps 0: every run needs at least one repetition");
        }
        let max_order = req.max_order.unwrap_or(DEFAULT_MAX_ORDER);
        if max_order > 40 {
            return err(format!("maximum order {max_order} is above 40"));
        }
        let req_units = match req.heap_bytes {
            None => None,
            Some(b) => {
                let u = usize::try_from(b / UNIT_BYTES as u64).unwrap_or(usize::MAX);
                if u == 0 {
                    return err(format!("heap of {b} bytes is smaller than one 4 KiB unit"));
                }
                Some(u)
            }
        };
        let min_units = 1usize << max_order;
        if let Some(u) = req_units {
            if u < min_units {
                return err(format!(
                    "heap of {} is smaller than one block of the maximum order {max_order} ({})",
                    bytes(u * UNIT_BYTES),
                    bytes(min_units * UNIT_BYTES)
                ));
            }
        }
        let mut cases = Vec::new();
        for &w in &workloads {
            if w.standalone() {
                if req.orders.is_some() || req.heap_bytes.is_some() {
                    notes.push(format!(
                        "{} sizes its own heaps and orders; --size/--order/--heap ignored for it",
                        w.name()
                    ));
                }
                cases.push(Case {
                    workload: w,
                    order: 0,
                    threads: 1,
                    units: 0,
                });
                continue;
            }
            let orders: Vec<u32> = match (&req.orders, w) {
                (Some(o), Workload::Frag) if o != &[0] => {
                    notes.push(
                        "frag always allocates order 0; --size/--order ignored for it".into(),
                    );
                    vec![0]
                }
                (_, Workload::Frag) => vec![0],
                (Some(o), _) => o.clone(),
                (None, _) if w.suite() == Suite::Llfree => LLFREE_ORDERS.to_vec(),
                (None, _) if w.suite() == Suite::Realtime => vec![0],
                (None, _) if req.quick => vec![0, 2],
                (None, _) => NBBS_ORDERS.to_vec(),
            };
            // The contrived case and its one request are sequential.
            let threads: &[usize] = if w == Workload::Contrived {
                &[1]
            } else {
                &threads
            };
            for &order in &orders {
                let top = order + w.order_span(&params);
                if top > max_order {
                    return err(format!(
                        "order {order} ({}) is too large for {}: it allocates up to order {top}, above the maximum order {max_order}",
                        bytes(UNIT_BYTES << order),
                        w.name()
                    ));
                }
                for &t in threads {
                    // The contrived case sweeps N, one heap each, unless the heap is given.
                    let heaps = match (w, req_units) {
                        (Workload::Contrived, None) => params
                            .rt
                            .contrived_blocks
                            .iter()
                            .map(|&n| workloads::realtime::contrived::units_for(n, 1 << order))
                            .collect(),
                        _ => vec![heap_units(
                            w, order, t, req_units, min_units, &params, req.quick,
                        )?],
                    };
                    for units in heaps {
                        cases.push(Case {
                            workload: w,
                            order,
                            threads: t,
                            units,
                        });
                    }
                }
            }
        }
        let baseline = match &req.baseline {
            Some(b) => match AllocSpec::find(b) {
                None => return err(format!("unknown baseline allocator `{b}`")),
                Some(a) => {
                    if !allocs.iter().any(|o| o.name() == a.name()) {
                        notes.push(format!("baseline `{b}` added to the allocators"));
                        allocs.push(a);
                    }
                    a.name()
                }
            },
            None => DEFAULT_BASELINES
                .iter()
                .find_map(|b| allocs.iter().find(|a| a.name() == *b))
                .unwrap_or(&allocs[0])
                .name(),
        };
        Ok(Plan {
            allocs,
            baseline,
            cases,
            realtime_only,
            max_order,
            reps,
            params,
            notes,
        })
    }

    /// The allocator calls of the whole plan (per allocator able to run every case: an upper
    /// bound) and the time of its time-bounded runs, to foresee how long it takes.
    pub fn estimate(&self) -> (u64, std::time::Duration) {
        let mut calls = 0u64;
        let mut time = std::time::Duration::ZERO;
        for c in &self.cases {
            match c.workload.calls(c.order, c.threads, c.units, &self.params) {
                Some(n) => calls += n,
                None => {
                    if let (Workload::Larson, workloads::Stop::Time(d)) =
                        (c.workload, self.params.larson_stop)
                    {
                        time += d;
                    }
                }
            }
        }
        let runs = (self.allocs.len() * self.reps) as u32;
        (calls * u64::from(runs), time * runs)
    }

    /// Runs every case on every allocator `reps` times, each time on a freshly built
    /// allocator, with a progress bar on stderr (drawn only on a terminal).
    pub fn run(mut self, args: Vec<String>) -> Report {
        let runs = |c: &Case| {
            if c.workload.standalone() {
                1
            } else {
                self.allocs
                    .iter()
                    .filter(|a| runs_on(&self.realtime_only, a, c))
                    .count()
            }
        };
        let total = (self.cases.iter().map(runs).sum::<usize>() * self.reps) as u64;
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let mut sets = Vec::new();
        for a in &self.allocs {
            for case in self
                .cases
                .iter()
                .filter(|c| runs_on(&self.realtime_only, a, c))
            {
                bar.set_message(format!(
                    "{} {} {} x{}",
                    a.name(),
                    case.workload.name(),
                    bytes(UNIT_BYTES << case.order),
                    case.threads
                ));
                match run_case(a, case, self.max_order, self.reps, &self.params, &bar) {
                    Ok(outcomes) => sets.push(RunSet {
                        alloc: a.name(),
                        case: *case,
                        outcomes,
                    }),
                    Err(why) => {
                        bar.inc(self.reps as u64);
                        let note = format!("{}: {} skipped: {why}", a.name(), case.workload.name());
                        if !self.notes.contains(&note) {
                            self.notes.push(note);
                        }
                    }
                }
            }
        }
        for case in self.cases.iter().filter(|c| c.workload.standalone()) {
            bar.set_message(case.workload.name());
            let outcomes = (0..self.reps)
                .map(|_| {
                    let o = workloads::realtime::run_standalone(case.workload, &self.params);
                    bar.inc(1);
                    o
                })
                .collect();
            sets.push(RunSet {
                alloc: "buddy",
                case: *case,
                outcomes,
            });
        }
        bar.finish_and_clear();
        summarize(self.baseline, self.max_order, args, sets, self.notes)
    }
}

/// Whether allocator `a` runs `case`: not for standalone workloads, and the allocators
/// added for the real-time workloads (`realtime_only`) only for those.
fn runs_on(realtime_only: &[&str], a: &AllocSpec, case: &Case) -> bool {
    !case.workload.standalone()
        && (case.workload.suite() == Suite::Realtime || !realtime_only.contains(&a.name()))
}

/// Runs one case `reps` times, or says why this allocator cannot run it.
fn run_case(
    a: &AllocSpec,
    case: &Case,
    max_order: u32,
    reps: usize,
    params: &Params,
    bar: &ProgressBar,
) -> Result<Vec<workloads::Outcome>, String> {
    if case.workload.needs_region() && !a.has_region() {
        return Err("it hands out addresses, not positions in a region".into());
    }
    // Heaps smaller than a block of `max_order` (the contrived case's smallest) get the
    // largest order that fits.
    let max_order = max_order.min(case.units.max(1).ilog2());
    let config = Config::new(case.units, max_order).with_cores(case.threads);
    let top = case.order + case.workload.order_span(params);
    let mut outcomes = Vec::with_capacity(reps);
    for _ in 0..reps {
        let alloc = a
            .build(config)
            .map_err(|e| format!("cannot build over {}: {e}", bytes(case.units * UNIT_BYTES)))?;
        if alloc.max_order() < top {
            return Err(format!(
                "it allocates up to order {}, the workload needs order {top}",
                alloc.max_order()
            ));
        }
        outcomes.push(workloads::run(
            case.workload,
            &*alloc,
            case.order,
            case.threads,
            params,
        ));
        drop(alloc);
        bar.inc(1);
    }
    Ok(outcomes)
}

/// A byte count in the largest binary unit that divides it: `4K`, `2M`, `1G`.
pub fn bytes(b: usize) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (name, shift) in UNITS {
        if b >= 1 << shift && b.trailing_zeros() >= shift {
            return format!("{}{name}", b >> shift);
        }
    }
    format!("{b}B")
}

/// Parses a byte count with an optional binary suffix (`4096`, `4K`, `32KiB`, `2M`, `1G`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 4096, 4K, 2M, 1G)"))?;
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("`{s}` has an unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// The order of a block size in bytes: a power of two of at least 4 KiB.
pub fn size_to_order(b: u64) -> Result<u32, String> {
    if b < UNIT_BYTES as u64 || !b.is_power_of_two() {
        return Err(format!(
            "block size {b} bytes is not a power of two of at least 4K"
        ));
    }
    Ok(b.trailing_zeros() - UNIT_BYTES.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert_eq!(parse_bytes("32KiB"), Ok(32 << 10));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("4X").is_err());
        assert!(parse_bytes("").is_err());
        assert_eq!(size_to_order(4096), Ok(0));
        assert_eq!(size_to_order(256 << 10), Ok(6));
        assert!(size_to_order(3000).is_err());
        assert!(size_to_order(12288).is_err());
        assert_eq!(bytes(4096), "4K");
        assert_eq!(bytes(2 << 20), "2M");
        assert_eq!(bytes(3 << 30), "3G");
        assert_eq!(bytes(100), "100B");
    }

    fn req() -> Request {
        Request {
            allocs: Some(vec!["model".into()]),
            quick: true,
            ..Request::default()
        }
    }

    #[test]
    fn impossible_requests_are_errors() {
        let bad = |r: Request| Plan::new(&r).err().expect("should be rejected").0;
        assert!(bad(Request {
            threads: Some(vec![1, 0]),
            ..req()
        })
        .contains("thread count 0"));
        assert!(bad(Request {
            allocs: Some(vec!["nope".into()]),
            ..req()
        })
        .contains("unknown allocator `nope`"));
        assert!(bad(Request {
            workloads: Some(vec!["nope".into()]),
            ..req()
        })
        .contains("unknown workload `nope`"));
        assert!(bad(Request {
            baseline: Some("nope".into()),
            ..req()
        })
        .contains("unknown baseline"));
        assert!(bad(Request {
            workloads: Some(vec!["constant-occupancy".into()]),
            orders: Some(vec![8]),
            ..req()
        })
        .contains("above the maximum order"));
        assert!(bad(Request {
            workloads: Some(vec!["linux-scalability".into()]),
            heap_bytes: Some(8 << 20),
            quick: false,
            ..req()
        })
        .contains("too small"));
        assert!(bad(Request {
            reps: Some(0),
            ..req()
        })
        .contains("--reps 0"));
    }

    #[test]
    fn defaults_cover_every_workload_and_fit_their_needs() {
        let p = Plan::new(&Request::default()).unwrap();
        for w in Workload::ALL {
            assert!(p.cases.iter().any(|c| c.workload == w), "{}", w.name());
        }
        for c in &p.cases {
            assert!(c.units >= c.workload.units_needed(c.order, c.threads, &p.params));
        }
        assert!(p.allocs.iter().all(|a| a.name() != "model"));
    }
}
