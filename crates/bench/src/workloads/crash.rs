//! The `crash` workload (LLFree §5.7): a persistent LLFree zone over a file, a worker
//! process allocating and freeing on it with several threads, killed with SIGKILL at a
//! random moment, then recovered and checked, many times over. It runs alone (not per
//! allocator): `buddybench --workload crash`.
//!
//! Each injection: the worker (this binary, re-executed with
//! [`crash::WORKER_ENV`](buddyfree_baselines::crash::WORKER_ENV) set) opens the
//! clean zone and runs `threads` threads holding up to [`SLOTS`] blocks each of orders
//! 0..=10; it is killed 1–20 ms after its threads started. Recovery must succeed, keep every
//! block the worker had recorded, and lose at most the blocks of its operations in flight.
//! Then everything is freed, the zone must be whole, it is closed, and reopened once clean
//! to time the re-initialisation the paper compares recovery with.
//!
//! With `caller_memory` the zone is LLFree over caller memory instead (a mapped file that
//! holds the lower level alone, which worker and checker build with `Init::Recover`; no
//! write-back, no clean open to time).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use buddyfree::llfree::persist::{Durability, PersistentLLFree};
use buddyfree::llfree::Options;
use buddyfree::Config;
use buddyfree_baselines::crash::{Form, Injector, Plan, Run};
use serde::Serialize;

use super::rng::Rng;

/// Blocks each worker thread holds at most.
pub const SLOTS: usize = 256;
/// Injections by default (the paper's count).
pub const DEFAULT_INJECTIONS: usize = 1000;

/// What to run.
#[derive(Clone, Debug)]
pub struct CrashParams {
    /// Crashes to inject.
    pub injections: usize,
    /// Worker threads.
    pub threads: usize,
    /// Units of the zone.
    pub units: usize,
    /// Write-back of the worker's operations.
    pub durability: Durability,
    /// Seed of the kill times and the workers' choices.
    pub seed: u64,
    /// LLFree over caller memory (a mapped lower level) instead of a zone file.
    pub caller_memory: bool,
}

/// A summary of durations, in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Micros {
    /// Median.
    pub median: f64,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: f64,
}

impl Micros {
    fn of(mut d: Vec<Duration>) -> Micros {
        if d.is_empty() {
            return Micros::default();
        }
        d.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        Micros {
            median: us(d[d.len() / 2]),
            mean: d.iter().map(|&d| us(d)).sum::<f64>() / d.len() as f64,
            max: us(d[d.len() - 1]),
        }
    }
}

/// What the injections found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CrashReport {
    /// Crashes injected (each one recovered and checked).
    pub injections: usize,
    /// Worker threads.
    pub threads: usize,
    /// Units of the zone.
    pub units: usize,
    /// Bytes of the zone file.
    pub file_bytes: u64,
    /// The write-back the worker used.
    pub durability: String,
    /// `zone` (a persistent zone file) or `caller-memory` (LLFree over a mapped lower level).
    pub form: String,
    /// Injections that killed at least one thread inside an operation.
    pub hit_in_flight: usize,
    /// Injections after which units were lost.
    pub with_loss: usize,
    /// Units lost over all injections.
    pub lost_units: usize,
    /// Most units lost in one injection.
    pub max_lost_units: usize,
    /// Most operations in flight at one kill (at most one per thread; the units lost are
    /// bounded by theirs).
    pub max_in_flight_ops: usize,
    /// Mean units the worker held at the kill.
    pub mean_held_units: f64,
    /// Time of recovery after a crash (rebuilding lower and upper level).
    pub recovery: Micros,
    /// Time of opening a cleanly closed zone (rebuilding the upper level only).
    pub clean_open: Micros,
    /// Wall time of the whole workload, in seconds.
    pub seconds: f64,
}

/// Runs the injections; an error names the first one whose recovery failed a check.
pub fn run(p: &CrashParams, mut progress: impl FnMut(usize)) -> Result<CrashReport, String> {
    let dir = TempDir::new()?;
    let plan = Plan {
        threads: p.threads,
        slots: SLOTS,
        max_order: 10,
    };
    let config = Config::new(p.units, 10);
    let form = match p.caller_memory {
        true => Form::CallerMemory,
        false => Form::Zone,
    };
    let injector = Injector::with_form(&dir.0, config, Options::default(), plan, form)
        .map_err(|e| format!("cannot create the zone: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = Rng::new(p.seed, 0);
    let started = Instant::now();
    let mut r = CrashReport {
        injections: p.injections,
        threads: p.threads,
        units: p.units,
        file_bytes: std::fs::metadata(injector.zone_path())
            .map_err(|e| e.to_string())?
            .len(),
        durability: match form {
            Form::Zone => format!("{:?}", p.durability),
            Form::CallerMemory => "None".into(),
        },
        form: match form {
            Form::Zone => "zone".into(),
            Form::CallerMemory => "caller-memory".into(),
        },
        ..CrashReport::default()
    };
    let (mut recoveries, mut opens, mut held) = (Vec::new(), Vec::new(), 0usize);
    for i in 0..p.injections {
        let run = Run {
            durability: p.durability,
            seed: rng.next_u64(),
            kill_after: Duration::from_micros(1000 + rng.below(19_000) as u64),
        };
        let got = injector
            .inject(Command::new(&exe), run)
            .map_err(|e| format!("injection {i}: {e}"))?;
        recoveries.push(got.recovery.elapsed);
        let lost = got.lost_units();
        r.hit_in_flight += (got.in_flight_ops > 0) as usize;
        r.with_loss += (lost > 0) as usize;
        r.lost_units += lost;
        r.max_lost_units = r.max_lost_units.max(lost);
        r.max_in_flight_ops = r.max_in_flight_ops.max(got.in_flight_ops);
        held += got.committed_units();
        for &(index, order) in got.held.iter().chain(&got.orphans) {
            got.zone.free(index, order, 0).map_err(|e| {
                format!("injection {i}: free({index}, {order}) after recovery: {e}")
            })?;
        }
        if got.zone.free_units() != p.units {
            return Err(format!(
                "injection {i}: the zone is not whole after freeing everything"
            ));
        }
        got.zone.close().map_err(|e| e.to_string())?;
        if form == Form::Zone {
            let (zone, clean) = PersistentLLFree::open(
                injector.zone_path(),
                p.threads,
                Durability::None,
                Duration::ZERO,
            )
            .map_err(|e| format!("injection {i}: clean open: {e}"))?;
            opens.push(clean.elapsed);
            zone.close().map_err(|e| e.to_string())?;
        }
        progress(i + 1);
    }
    r.mean_held_units = held as f64 / p.injections.max(1) as f64;
    r.recovery = Micros::of(recoveries);
    r.clean_open = Micros::of(opens);
    r.seconds = started.elapsed().as_secs_f64();
    Ok(r)
}

/// The report as a few lines of text.
pub fn render(r: &CrashReport) -> String {
    format!(
        "crash: {} injections, {} worker threads, {} of {} units ({} bytes of file), write-back {}\n\
         \x20 killed inside an operation: {} injections; units lost in {} (total {}, at most {} in one; at most {} operations in flight at a kill)\n\
         \x20 worker held {:.0} units on average at the kill\n\
         \x20 recovery after a crash: median {:.0} us, mean {:.0} us, max {:.0} us\n\
         \x20 open after a clean close: median {:.0} us, mean {:.0} us, max {:.0} us\n\
         \x20 {:.1} s in all\n",
        r.injections,
        r.threads,
        r.form,
        r.units,
        r.file_bytes,
        r.durability,
        r.hit_in_flight,
        r.with_loss,
        r.lost_units,
        r.max_lost_units,
        r.max_in_flight_ops,
        r.mean_held_units,
        r.recovery.median,
        r.recovery.mean,
        r.recovery.max,
        r.clean_open.median,
        r.clean_open.mean,
        r.clean_open.max,
        r.seconds
    )
}

/// A folder for the zone, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let dir = std::env::temp_dir().join(format!("buddybench-crash-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
