//! What to run (a [`Plan`], checked into [`Case`]s) and running it.
//!
//! The default suite (no arguments): the workloads [`Workload::in_default_suite`] (not full-heap,
//! which runs only when named or with `all`), the registered allocators of [`DEFAULT_ALLOCS`], the
//! locked baselines behind a ticket lock, baseline `knuth-locked` (else `linux`, else the first);
//! thread counts 1, 2, 4, ... up to the usable cores; one heap of 16 GiB of 4 KiB units for every
//! case (only the allocators' metadata is written; the memory itself is never touched), except the
//! real-time workloads, which size their own; the NBBS workloads at 4K, 32K and 256K blocks, the
//! LLFree workloads at 4K and 2M (frag: order 0, one thread, on [`FRAG_ALLOCS`]); each case runs on
//! every allocator in turn (A B C A B C ...), one warm-up round uncounted and 5 counted, each timed
//! phase repeated until it lasted 10 ms; blocks up to order 10 (4 MiB); sizes from
//! [`Params::default`].

use std::fmt;
use std::time::Duration;

use buddyfree::magazine::Settings;
use buddyfree::Config;
use buddyfree_baselines::registry::DynAlloc;
use indicatif::{ProgressBar, ProgressStyle};

use crate::allocs::{AllocSpec, Lock, DEFAULT_ALLOCS, DEFAULT_BASELINES, REALTIME_ALLOCS};
use crate::case::{Case, RunSet};
use crate::report::{summarize, Report, RunMeta};
use crate::runner;
use crate::units::{bytes, UNIT_BYTES};
use crate::workloads::realtime::contrived;
use crate::workloads::{self, Params, Suite, Workload};

/// The NBBS paper's sizes: 4 KiB, 32 KiB, 256 KiB.
pub const NBBS_ORDERS: &[u32] = &[0, 3, 6];
/// The LLFree paper's natural frame sizes: 4 KiB and 2 MiB.
pub const LLFREE_ORDERS: &[u32] = &[0, 9];
/// The NBBS paper's largest block, 4 MiB.
pub const DEFAULT_MAX_ORDER: u32 = 10;
/// The heap of every case: 16 GiB of 4 KiB units, the NBBS paper's zone.
pub const DEFAULT_HEAP_UNITS: usize = 1 << 22;
/// The same for `--quick`: 64 MiB.
pub const QUICK_HEAP_UNITS: usize = 1 << 14;
/// Counted repetitions by default.
pub const DEFAULT_REPS: usize = 5;
/// The least time of a timed phase: shorter ones are repeated on the same allocator.
pub const MIN_PHASE: Duration = Duration::from_millis(10);
/// The most passes of a workload making up one repetition.
pub const MAX_PASSES: u32 = 10_000;
/// frag's allocators when none are named: LLFree and the two buddies the paper's figure and
/// the NBBS paper compare it with (the others add minutes to the suite and nothing to §5.6).
pub const FRAG_ALLOCS: &[&str] = &["llfree", "knuth-locked", "nbbs"];
/// The most threads a run may use.
pub const MAX_THREADS: usize = 1024;
/// The default thread counts: 1, 2, 4, ... up to the usable cores, and the core count.
pub fn default_threads() -> Vec<usize> {
    let cores = runner::usable_cpus().len().max(2);
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
    /// The most units each core's magazine may park (default: what the heap per core gets).
    pub parking_limit: Option<usize>,
    /// Per-core caches whose frees never wait for the cache that handed the block out
    /// ([`Settings::with_interrupt_safe_frees`](buddyfree::magazine::Settings::with_interrupt_safe_frees)).
    pub interrupt_safe_frees: bool,
    /// Tiny sizes.
    pub quick: bool,
    /// The lock of the locked baselines.
    pub lock: Option<Lock>,
    /// Skip the warm-up round.
    pub no_warmup: bool,
    /// bulk, repeat, rand: the work in bytes.
    pub work_bytes: Option<u64>,
    /// The workloads' random seed (default [`Params::default`]'s).
    pub seed: Option<u64>,
    /// Each burst of linux-scalability and thread-test on a held core
    /// ([`Params::held_bursts`]).
    pub held_bursts: bool,
    /// frag: the shares of unmovable allocations, in percent, one case each (default 0).
    pub unmovable: Option<Vec<u32>>,
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
    /// The most units each core's magazine may park, if the request chose it.
    pub parking_limit: Option<usize>,
    /// Whether the per-core caches' frees are interrupt-safe ([`Settings::with_interrupt_safe_frees`](buddyfree::magazine::Settings::with_interrupt_safe_frees)).
    pub interrupt_safe_frees: bool,
    /// Counted repetitions of each run.
    pub reps: usize,
    /// Whether an uncounted warm-up round comes first.
    pub warmup: bool,
    /// The least time of a timed phase.
    pub min_phase: Duration,
    /// The heap of every case but the real-time workloads', in units.
    pub heap_units: usize,
    /// The lock of the locked baselines.
    pub lock: Lock,
    /// frag runs only on [`FRAG_ALLOCS`] (no allocators were named).
    pub frag_default_allocs: bool,
    /// The workloads' parameters.
    pub params: Params,
    /// Things skipped or adjusted, for the report.
    pub notes: Vec<String>,
}

/// The workloads' parameters: the default or quick sizes, with the seed, held bursts and the
/// work the request chose.
fn params(req: &Request, notes: &mut Vec<String>) -> Result<Params, PlanError> {
    let mut params = if req.quick {
        Params::quick()
    } else {
        Params::default()
    };
    if let Some(seed) = req.seed {
        params.seed = seed;
    }
    if req.held_bursts {
        params.held_bursts = true;
        notes.push(
            "linux-scalability and thread-test: each burst on a held core (--held-bursts: \
             BlockAlloc::with_core; allocators without per-core caches answer it with their \
             plain calls)"
                .to_string(),
        );
    }
    if let Some(b) = req.work_bytes {
        params.llfree_units = usize::try_from(b / UNIT_BYTES as u64).unwrap_or(usize::MAX);
        if params.llfree_units == 0 {
            return err("--work is smaller than one 4 KiB unit");
        }
    }
    Ok(params)
}

/// The workloads to run: those named, else the default suite's.
fn workloads(req: &Request) -> Result<Vec<Workload>, PlanError> {
    let workloads = match &req.workloads {
        Some(n) => workload_names(n)?,
        None => Workload::ALL
            .into_iter()
            .filter(|w| w.in_default_suite())
            .collect(),
    };
    if workloads.is_empty() {
        return err("no workload to run");
    }
    Ok(workloads)
}

/// The workloads named, suites expanded to their workloads, each once.
fn workload_names(names: &[String]) -> Result<Vec<Workload>, PlanError> {
    let mut out = Vec::new();
    for name in names {
        let add: Vec<Workload> = match name.as_str() {
            "all" => Workload::ALL.to_vec(),
            n => match Suite::ALL.into_iter().find(|s| s.name() == n) {
                Some(suite) => Workload::ALL
                    .into_iter()
                    .filter(|w| w.suite() == suite && w.in_default_suite())
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

/// The allocators to run: those named, each once, else the registered default ones.
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

/// With no allocators named and a real-time workload to run, adds [`REALTIME_ALLOCS`] for
/// the real-time workloads only; returns those it added.
fn add_realtime_allocs(
    req: &Request,
    workloads: &[Workload],
    allocs: &mut Vec<AllocSpec>,
    notes: &mut Vec<String>,
) -> Vec<&'static str> {
    let mut added = Vec::new();
    if req.allocs.is_some() || !workloads.iter().any(|w| w.suite() == Suite::Realtime) {
        return added;
    }
    for &n in REALTIME_ALLOCS {
        match AllocSpec::find(n) {
            Some(a) if !allocs.iter().any(|o| o.name() == n) => {
                allocs.push(a);
                added.push(a.name());
            }
            Some(_) => {}
            None => notes.push(format!(
                "real-time allocator `{n}` is not registered; skipped"
            )),
        }
    }
    added
}

/// The thread counts: those asked for (each at least 1, at most [`MAX_THREADS`]), else 1 and
/// 2 with `quick`, else [`default_threads`].
fn thread_counts(req: &Request) -> Result<Vec<usize>, PlanError> {
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
    Ok(threads)
}

/// The counted repetitions of each run: at least one.
fn repetitions(req: &Request) -> Result<usize, PlanError> {
    let reps = req.reps.unwrap_or(if req.quick { 2 } else { DEFAULT_REPS });
    if reps == 0 {
        return err("--reps 0: every run needs at least one repetition");
    }
    Ok(reps)
}

/// Checks the shares of unmovable allocations: percentages, at least one; a note where frag
/// does not run.
fn unmovable_shares(
    req: &Request,
    workloads: &[Workload],
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
    let Some(shares) = &req.unmovable else {
        return Ok(());
    };
    if shares.is_empty() {
        return err("--unmovable: no share given");
    }
    if let Some(s) = shares.iter().find(|&&s| s > 100) {
        return err(format!(
            "--unmovable {s}: a share is a percentage, 0 to 100"
        ));
    }
    if !workloads.contains(&Workload::Frag) {
        notes.push("--unmovable applies to frag only, which does not run".into());
    }
    Ok(())
}

/// The largest order the allocators are built for.
fn max_order(req: &Request) -> Result<u32, PlanError> {
    let max_order = req.max_order.unwrap_or(DEFAULT_MAX_ORDER);
    if max_order > 40 {
        return err(format!("maximum order {max_order} is above 40"));
    }
    Ok(max_order)
}

/// The heap of every case but the real-time workloads', in units: at least one block of
/// `max_order`.
fn heap_units(req: &Request, max_order: u32) -> Result<usize, PlanError> {
    let heap_units = match req.heap_bytes {
        None if req.quick => QUICK_HEAP_UNITS,
        None => DEFAULT_HEAP_UNITS,
        Some(b) => usize::try_from(b / UNIT_BYTES as u64).unwrap_or(usize::MAX),
    };
    let min_units = 1usize << max_order;
    if heap_units < min_units {
        return err(format!(
            "heap of {} is smaller than one block of the maximum order {max_order} ({})",
            bytes(heap_units * UNIT_BYTES),
            bytes(min_units * UNIT_BYTES)
        ));
    }
    Ok(heap_units)
}

/// What the cases are swept over, once checked: the request's orders, and its thread counts,
/// maximum order and heap.
struct Sweep<'a> {
    req: &'a Request,
    threads: &'a [usize],
    max_order: u32,
    heap_units: usize,
    params: &'a Params,
}

impl Sweep<'_> {
    /// The cases of `workloads`, in order: each workload at each of its orders, thread
    /// counts and heaps; a standalone one once.
    fn cases(
        &self,
        workloads: &[Workload],
        notes: &mut Vec<String>,
    ) -> Result<Vec<Case>, PlanError> {
        let mut cases = Vec::new();
        for &w in workloads {
            if w.standalone() {
                if self.req.orders.is_some() {
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
                    unmovable: 0,
                });
                continue;
            }
            for order in self.orders(w, notes) {
                self.check_order(w, order)?;
                for &threads in self.threads(w) {
                    for units in self.heaps(w, order, threads)? {
                        for &unmovable in self.unmovable(w) {
                            cases.push(Case {
                                workload: w,
                                order,
                                threads,
                                units,
                                unmovable,
                            });
                        }
                    }
                }
            }
        }
        Ok(cases)
    }

    /// The orders `w` runs at: those asked for, else its paper's sizes.
    fn orders(&self, w: Workload, notes: &mut Vec<String>) -> Vec<u32> {
        match (&self.req.orders, w) {
            (Some(o), Workload::Frag) if o != &[0] => {
                notes.push("frag always allocates order 0; --size/--order ignored for it".into());
                vec![0]
            }
            (_, Workload::Frag) => vec![0],
            (Some(o), _) => o.clone(),
            (None, _) if w.suite() == Suite::Llfree => LLFREE_ORDERS.to_vec(),
            (None, _) if w.suite() == Suite::Realtime => vec![0],
            (None, _) if self.req.quick => vec![0, 2],
            (None, _) => NBBS_ORDERS.to_vec(),
        }
    }

    /// Checks that the largest order `w` allocates at `order` is one the allocators are built
    /// for.
    fn check_order(&self, w: Workload, order: u32) -> Result<(), PlanError> {
        let top = w.top_order(order, self.params);
        if top > self.max_order {
            return err(format!(
                "order {order} ({}) is too large for {}: it allocates up to order {top}, above the maximum order {}",
                bytes(UNIT_BYTES << order),
                w.name(),
                self.max_order
            ));
        }
        Ok(())
    }

    /// The shares of unmovable allocations `w` runs with: those asked for in frag, else 0.
    fn unmovable(&self, w: Workload) -> &[u32] {
        match (w, &self.req.unmovable) {
            (Workload::Frag, Some(shares)) => shares,
            _ => &[0],
        }
    }

    /// The thread counts `w` runs with.
    fn threads(&self, w: Workload) -> &[usize] {
        // The contrived case and its one request are sequential; frag fills the whole heap,
        // which makes it the slowest case: the default suite runs it on one thread.
        match w {
            Workload::Contrived => &[1],
            Workload::Frag if self.req.threads.is_none() => &[1],
            _ => self.threads,
        }
    }

    /// The heaps `w` runs on at `order` with `threads`: the run's heap, checked to hold what
    /// it needs, unless the workload sizes its own.
    fn heaps(&self, w: Workload, order: u32, threads: usize) -> Result<Vec<usize>, PlanError> {
        // The contrived case sweeps N, one heap each; latency fills its own.
        Ok(match w {
            Workload::Contrived => self
                .params
                .rt
                .contrived_blocks
                .iter()
                .map(|&n| contrived::units_for(n, 1 << order))
                .collect(),
            _ if w.own_heap() => vec![w.units_needed(order, threads, self.params)],
            _ => {
                check_heap(w, order, threads, self.heap_units, self.params)?;
                vec![self.heap_units]
            }
        })
    }
}

/// Checks that the run's heap of `units` holds what `w` needs at `order` with `threads`.
fn check_heap(
    w: Workload,
    order: u32,
    threads: usize,
    units: usize,
    params: &Params,
) -> Result<(), PlanError> {
    let need = w.units_needed(order, threads, params);
    if units < need {
        return err(format!(
            "heap of {} is too small for {} at {} with {threads} thread(s): it needs at least {}",
            bytes(units * UNIT_BYTES),
            w.name(),
            bytes(UNIT_BYTES << order),
            bytes(need * UNIT_BYTES),
        ));
    }
    Ok(())
}

/// The notes on the per-core caches' settings the request chose.
fn cache_notes(req: &Request) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(limit) = req.parking_limit {
        let lists = match limit {
            usize::MAX => "the longest".to_string(),
            units => format!("the longest within {units} units per core"),
        };
        notes.push(format!(
            "magazine lists: {lists}, whatever the heap (--parking-limit)"
        ));
    }
    if req.interrupt_safe_frees {
        notes.push(
            "per-core caches: every free by a compare-and-swap on the block's state, none \
             under the lock of the cache that handed it out (--interrupt-safe-frees)"
                .to_string(),
        );
    }
    notes
}

/// The allocator the others are compared with: the one named (added to the run if it is not
/// in it), else the first of [`DEFAULT_BASELINES`] in the run, else the run's first.
fn baseline(
    req: &Request,
    allocs: &mut Vec<AllocSpec>,
    notes: &mut Vec<String>,
) -> Result<&'static str, PlanError> {
    Ok(match &req.baseline {
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
    })
}

impl Plan {
    /// Checks a request: names exist, thread counts and repetitions are positive, orders fit
    /// under the maximum order, the heap is large enough for every run. Each part decides
    /// one thing, in the order the checks report errors and the notes come.
    pub fn new(req: &Request) -> Result<Plan, PlanError> {
        let mut notes = Vec::new();
        let params = params(req, &mut notes)?;
        let workloads = workloads(req)?;
        let mut allocs = alloc_names(req, &mut notes)?;
        let realtime_only = add_realtime_allocs(req, &workloads, &mut allocs, &mut notes);
        let threads = thread_counts(req)?;
        unmovable_shares(req, &workloads, &mut notes)?;
        let reps = repetitions(req)?;
        let max_order = max_order(req)?;
        let heap_units = heap_units(req, max_order)?;
        let sweep = Sweep {
            req,
            threads: &threads,
            max_order,
            heap_units,
            params: &params,
        };
        let cases = sweep.cases(&workloads, &mut notes)?;
        notes.extend(cache_notes(req));
        let baseline = baseline(req, &mut allocs, &mut notes)?;
        Ok(Plan {
            allocs,
            baseline,
            cases,
            realtime_only,
            max_order,
            parking_limit: req.parking_limit,
            interrupt_safe_frees: req.interrupt_safe_frees,
            reps,
            warmup: !req.no_warmup,
            min_phase: if req.quick { Duration::ZERO } else { MIN_PHASE },
            heap_units,
            lock: req.lock.unwrap_or(Lock::Ticket),
            frag_default_allocs: req.allocs.is_none(),
            params,
            notes,
        })
    }

    /// The allocator calls of the whole plan and the time of its time-bounded runs, to
    /// foresee how long it takes (phases repeated to last [`Plan::min_phase`] add more).
    pub fn estimate(&self) -> (u64, Duration) {
        let mut calls = 0u64;
        let mut time = Duration::ZERO;
        for c in &self.cases {
            let runs = self.runs_of(c) as u64;
            match c.workload.calls(c.order, c.threads, c.units, &self.params) {
                Some(n) => calls += n * runs,
                None => {
                    if let (Workload::Larson, workloads::Stop::Time(d)) =
                        (c.workload, self.params.larson_stop)
                    {
                        time += d * runs as u32;
                    }
                }
            }
        }
        (calls, time)
    }

    /// Runs every case: on each allocator able to run it, one instance is built and the
    /// rounds go round the allocators (A B C A B C ...), so that a slow spell of a shared
    /// machine hits every allocator alike; the first round is a warm-up (it also faults in
    /// the allocators' metadata) and is not counted. Workloads measuring memory state run
    /// once on a fresh instance. Progress goes to stderr (drawn only on a terminal).
    pub fn run(mut self, args: Vec<String>) -> Report {
        let rounds = self.reps + usize::from(self.warmup);
        let total = self.cases.iter().map(|c| self.runs_of(c)).sum::<usize>() as u64;
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let mut sets = Vec::new();
        let mut skipped: Vec<(&'static str, String)> = Vec::new();
        for case in self.cases.iter().filter(|c| !c.workload.standalone()) {
            bar.set_message(format!(
                "{} {} x{}{}",
                case.workload.name(),
                bytes(UNIT_BYTES << case.order),
                case.threads,
                match case.unmovable {
                    0 => String::new(),
                    u => format!(" {u}% unmovable"),
                }
            ));
            let params = case.params(&self.params);
            let mut live = Vec::new();
            for a in self.runners(case) {
                match self.build(a, case) {
                    Ok(inst) => live.push((a.name(), inst, Vec::new())),
                    Err(why) => {
                        bar.inc(if case.workload.measures_state() {
                            1
                        } else {
                            rounds as u64
                        });
                        skipped.push((a.name(), why));
                    }
                }
            }
            let rounds = if case.workload.measures_state() {
                1
            } else {
                rounds
            };
            for round in 0..rounds {
                for (_, inst, outcomes) in &mut live {
                    let o = workloads::run_for(
                        case.workload,
                        &**inst,
                        case.order,
                        case.threads,
                        &params,
                        self.min_phase,
                        MAX_PASSES,
                    );
                    if round > 0 || !self.warmup || rounds == 1 {
                        outcomes.push(o);
                    }
                    bar.inc(1);
                }
            }
            sets.extend(live.into_iter().map(|(alloc, _, outcomes)| RunSet {
                alloc,
                case: *case,
                outcomes,
            }));
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
        if let Some(line) = skipped_summary(&skipped) {
            self.notes.push(line);
        }
        let meta = RunMeta {
            heap_units: self.heap_units,
            lock: self.lock,
            clock: runner::clock(),
            warmup: self.warmup,
            min_phase_ms: self.min_phase.as_secs_f64() * 1e3,
        };
        summarize(self.baseline, self.max_order, args, meta, sets, self.notes)
    }

    /// The allocators that run `case`: not for standalone workloads; the allocators added for
    /// the real-time workloads only for those; frag only on [`FRAG_ALLOCS`] unless the
    /// allocators were named.
    fn runners<'a>(&'a self, case: &'a Case) -> impl Iterator<Item = &'a AllocSpec> + 'a {
        self.allocs.iter().filter(move |a| {
            !case.workload.standalone()
                && (case.workload.suite() == Suite::Realtime
                    || !self.realtime_only.contains(&a.name()))
                && (case.workload != Workload::Frag
                    || !self.frag_default_allocs
                    || FRAG_ALLOCS.contains(&a.name()))
        })
    }

    /// Workload runs of `case`, warm-up included.
    fn runs_of(&self, c: &Case) -> usize {
        let rounds = self.reps + usize::from(self.warmup);
        match () {
            _ if c.workload.standalone() => self.reps,
            _ if c.workload.measures_state() => self.runners(c).count(),
            _ => self.runners(c).count() * rounds,
        }
    }

    /// Builds `a` for `case`, or says why it cannot run it.
    fn build(&self, a: &AllocSpec, case: &Case) -> Result<DynAlloc, String> {
        if case.workload.needs_region() && !a.has_region() {
            return Err("hands out addresses, not positions in a region".into());
        }
        if let Some(limit) = a.max_calls() {
            let calls = case
                .workload
                .calls(case.order, case.threads, case.units, &self.params);
            if calls.is_some_and(|n| n > limit) {
                return Err(format!(
                    "a system call per operation: runs only cases of at most {limit} calls"
                ));
            }
        }
        // Heaps smaller than a block of `max_order` (the contrived case's smallest) get the
        // largest order that fits.
        let max_order = self.max_order.min(case.units.max(1).ilog2());
        let config = Config::new(case.units, max_order).with_cores(case.threads);
        let mut settings = Settings::new();
        settings.parking_limit = self.parking_limit;
        settings.interrupt_safe_frees = self.interrupt_safe_frees;
        let top = case.workload.top_order(case.order, &self.params);
        let alloc = a
            .build_with(config, settings, self.lock)
            .map_err(|e| format!("cannot be built: {e}"))?;
        if alloc.max_order() < top {
            return Err(format!("serves orders up to {} only", alloc.max_order()));
        }
        Ok(alloc)
    }
}

/// One line for every allocator/case combination that did not run, grouped by reason.
fn skipped_summary(skipped: &[(&'static str, String)]) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    // reason -> (allocator, count), both in first-seen order.
    let mut groups: Vec<(&str, Vec<(&str, usize)>)> = Vec::new();
    for (alloc, why) in skipped {
        let g = match groups.iter().position(|g| g.0 == why) {
            Some(i) => &mut groups[i].1,
            None => {
                groups.push((why, Vec::new()));
                &mut groups.last_mut().expect("just pushed").1
            }
        };
        match g.iter_mut().find(|x| x.0 == *alloc) {
            Some(x) => x.1 += 1,
            None => g.push((alloc, 1)),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(why, allocs)| {
            let names: Vec<String> = allocs.iter().map(|(a, n)| format!("{a} x{n}")).collect();
            format!("{} ({why})", names.join(", "))
        })
        .collect();
    Some(format!(
        "skipped {} allocator/case combination(s): {}",
        skipped.len(),
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use buddyfree::Error;

    fn req() -> Request {
        Request {
            allocs: Some(vec!["model".into()]),
            quick: true,
            ..Request::default()
        }
    }

    /// `--held-bursts` reaches the workloads, and the report says so.
    #[test]
    fn held_bursts_are_planned_and_noted() {
        let plan = |held_bursts| {
            Plan::new(&Request {
                held_bursts,
                ..req()
            })
            .map_err(|e| e.0)
            .unwrap()
        };
        assert!(!plan(false).params.held_bursts);
        assert!(!plan(false).notes.iter().any(|n| n.contains("held")));
        assert!(plan(true).params.held_bursts);
        assert!(plan(true).notes.iter().any(|n| n.contains("--held-bursts")));
    }

    /// `--interrupt-safe-frees` reaches the caches the plan builds (a `try_free` while the
    /// cache that handed the block out is held goes through), and the report says so.
    #[test]
    fn interrupt_safe_frees_are_built_and_noted() {
        for safe in [false, true] {
            let p = Plan::new(&Request {
                allocs: Some(vec!["llfree-magazine".into(), "linux".into()]),
                workloads: Some(vec!["cached".into()]),
                threads: Some(vec![2]),
                interrupt_safe_frees: safe,
                quick: true,
                ..Request::default()
            })
            .unwrap();
            assert_eq!(p.interrupt_safe_frees, safe);
            assert_eq!(
                p.notes.iter().any(|n| n.contains("--interrupt-safe-frees")),
                safe
            );
            for a in &p.allocs {
                let alloc = p.build(a, &p.cases[0]).unwrap();
                let block = alloc.alloc(0, 1).unwrap();
                let mut in_handler = None;
                alloc.with_core(1, &mut |_| in_handler = Some(alloc.try_free(block, 0, 1)));
                // The Linux-like lists decide every free by a compare-and-swap, never
                // under the lock of the list that handed the block out.
                let expected = if safe || a.name() == "linux" {
                    Ok(())
                } else {
                    Err(Error::WouldBlock)
                };
                assert_eq!(in_handler, Some(expected), "{} (safe: {safe})", a.name());
            }
        }
    }

    /// `--parking-limit` reaches every configuration the plan builds, and the report says so.
    #[test]
    fn a_parking_limit_is_planned_and_noted() {
        let plan = |limit| {
            Plan::new(&Request {
                parking_limit: limit,
                ..req()
            })
            .map_err(|e| e.0)
            .unwrap()
        };
        assert_eq!(plan(None).parking_limit, None);
        assert!(!plan(None).notes.iter().any(|n| n.contains("parking")));
        for (limit, note) in [(usize::MAX, "the longest,"), (3000, "within 3000 units")] {
            let plan = plan(Some(limit));
            assert_eq!(plan.parking_limit, Some(limit));
            assert!(
                plan.notes.iter().any(|n| n.contains(note)),
                "{:?}",
                plan.notes
            );
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
    fn defaults_cover_every_default_workload_and_fit_their_needs() {
        let p = Plan::new(&Request::default()).unwrap();
        for w in Workload::ALL {
            let ran = p.cases.iter().any(|c| c.workload == w);
            assert_eq!(ran, w.in_default_suite(), "{}", w.name());
        }
        for c in &p.cases {
            assert!(c.units >= c.workload.units_needed(c.order, c.threads, &p.params));
        }
        assert!(p.allocs.iter().all(|a| a.name() != "model"));
    }

    #[test]
    fn full_heap_runs_when_named_or_with_all_only() {
        let workloads = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            workload_names(&names).unwrap()
        };
        assert!(!workloads(&["nbbs"]).contains(&Workload::FullHeap));
        assert!(workloads(&["all"]).contains(&Workload::FullHeap));
        assert_eq!(workloads(&["full-heap"]), [Workload::FullHeap]);
        // Its 2 MiB request needs allocators built for order 9, whatever its blocks.
        assert!(Plan::new(&Request {
            workloads: Some(vec!["full-heap".into()]),
            max_order: Some(8),
            orders: Some(vec![0]),
            ..req()
        })
        .err()
        .expect("order 9 above the maximum")
        .0
        .contains("up to order 9"));
    }

    /// `--unmovable` makes one frag case per share, and only frag's; a share above 100% is
    /// an error, a share without frag a note.
    #[test]
    fn unmovable_shares_make_one_frag_case_each() {
        let plan = |workloads: &[&str], shares: Option<Vec<u32>>| {
            Plan::new(&Request {
                workloads: Some(workloads.iter().map(|w| w.to_string()).collect()),
                threads: Some(vec![1]),
                unmovable: shares,
                ..req()
            })
        };
        let p = plan(&["frag", "bulk"], Some(vec![0, 10, 30])).unwrap();
        let frag: Vec<u32> = p
            .cases
            .iter()
            .filter(|c| c.workload == Workload::Frag)
            .map(|c| c.unmovable)
            .collect();
        assert_eq!(frag, [0, 10, 30]);
        assert!(p
            .cases
            .iter()
            .all(|c| c.workload == Workload::Frag || c.unmovable == 0));
        assert_eq!(p.cases[2].params(&p.params).frag_unmovable_percent, 30);
        let default = plan(&["frag"], None).unwrap();
        assert_eq!(default.cases.len(), 1);
        assert_eq!(default.cases[0].unmovable, 0);
        let bad = plan(&["frag"], Some(vec![10, 101])).err().unwrap().0;
        assert!(bad.contains("--unmovable 101"), "{bad}");
        let none = plan(&["frag"], Some(vec![])).err().unwrap().0;
        assert!(none.contains("no share"), "{none}");
        let unused = plan(&["bulk"], Some(vec![10])).unwrap();
        assert!(unused.notes.iter().any(|n| n.contains("frag only")));
    }

    #[test]
    fn the_seed_reaches_the_workloads() {
        let seed = |s| {
            Plan::new(&Request { seed: s, ..req() })
                .unwrap()
                .params
                .seed
        };
        assert_eq!(seed(None), Params::quick().seed);
        assert_eq!(seed(Some(7)), 7);
    }

    #[test]
    fn msync_zones_skip_cases_of_too_many_calls() {
        let plan = |work: u64| {
            Plan::new(&Request {
                allocs: Some(vec!["llfree-zone-msync".into()]),
                workloads: Some(vec!["bulk".into()]),
                threads: Some(vec![1]),
                orders: Some(vec![0]),
                work_bytes: Some(work),
                heap_bytes: Some(1 << 30),
                quick: true,
                ..Request::default()
            })
            .unwrap()
        };
        // 1 GiB of work: 2^17 gets and as many puts, each a system call.
        let p = plan(1 << 30);
        let why = p.build(&p.allocs[0], &p.cases[0]).err().expect("skipped");
        assert!(why.contains("system call per operation"), "{why}");
        let p = plan(16 << 20);
        assert!(p.build(&p.allocs[0], &p.cases[0]).is_ok());
    }
}
