//! `buddybench`: runs the NBBS and LLFree papers' workloads against the buddyfree allocators.
//! With no arguments it runs the default suite; `--list` shows what can be selected.
//!
//! The top layer over the library's (see its docs): the command line turned into a
//! [`Request`], planned and run by `suite`, printed by `report::table` and written by
//! `report::write_all`; the crash workload, which runs alone, straight from `workloads`.

use std::path::PathBuf;
use std::process::ExitCode;

use buddybench::allocs::{AllocSpec, Lock, DEFAULT_ALLOCS, REALTIME_ALLOCS};
use buddybench::report::{table, write_all};
use buddybench::runner::Clock;
use buddybench::suite::{Plan, Request};
use buddybench::units::{parse_bytes, size_to_order};
use buddybench::workloads::Workload;
use buddyfree::llfree::persist::Durability;
use clap::{Parser, ValueEnum};

/// Compares back-end allocators on the workloads of the NBBS and LLFree papers.
///
/// With no arguments, runs the default suite: every workload but full-heap, on the default
/// allocators that are registered, at 1, 2, 4, ... threads up to the core count, over one
/// 16 GiB heap, printing a table and writing JSON, CSV and plots to `results/<date-time>/`
/// (linked from `results/latest`).
#[derive(Parser, Debug)]
#[command(name = "buddybench", version)]
struct Cli {
    /// Allocators to run, comma-separated (see --list).
    #[arg(long, value_delimiter = ',')]
    alloc: Option<Vec<String>>,
    /// Workloads to run, comma-separated; also the suites `nbbs`, `llfree`, `realtime` (their
    /// workloads of the default suite) and `all` (every workload but crash).
    #[arg(long, value_delimiter = ',')]
    workload: Option<Vec<String>>,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Block sizes, comma-separated powers of two of at least 4K (e.g. 4K,32K,256K).
    #[arg(long, value_delimiter = ',', conflicts_with = "order")]
    size: Option<Vec<String>>,
    /// Block orders (size = 4 KiB << order), comma-separated; instead of --size.
    #[arg(long, value_delimiter = ',')]
    order: Option<Vec<u32>>,
    /// The heap of every case (e.g. 1G; default 16G, 64M with --quick): only the allocators'
    /// metadata is written, the memory itself never touched. The real-time workloads size
    /// their own.
    #[arg(long)]
    heap: Option<String>,
    /// bulk, repeat, rand: the work, in bytes of blocks (default 1G; the paper: half the
    /// memory).
    #[arg(long)]
    work: Option<String>,
    /// Counted repetitions of each run (the table shows the median; default 5).
    #[arg(long)]
    reps: Option<usize>,
    /// Skip the uncounted warm-up round.
    #[arg(long)]
    no_warmup: bool,
    /// The lock of the locked baselines (knuth-locked, linux, linux-migrate): `ticket` (fair, like Linux's
    /// queued zone lock) or `tas` (test-and-set).
    #[arg(long, value_enum, default_value_t = Lock::Ticket)]
    lock: Lock,
    /// The clock of the timed phases: `wall` or `cpu` (each thread's CPU time, which other
    /// load on a shared machine inflates less but which hides waiting).
    #[arg(long, value_enum, default_value_t = Clock::Wall)]
    clock: Clock,
    /// The allocator the others are compared with (default: knuth-locked, else linux, else
    /// the first one run).
    #[arg(long)]
    baseline: Option<String>,
    /// The largest order the allocators are built for (default 10: 4 MiB blocks).
    #[arg(long)]
    max_order: Option<u32>,
    /// The most units each core's magazine may park (the `*-magazine` allocators): a number
    /// of units (the longest lists within it), or `max` for the longest whatever the heap.
    /// Default: lists that follow the heap per core.
    #[arg(long)]
    parking_limit: Option<String>,
    /// Per-core caches (the `*-magazine` allocators, `linux`) that decide every free by a
    /// compare-and-swap on the block's state instead of under the lock of the cache that
    /// handed it out: what a kernel whose interrupt handlers free builds
    /// (`magazine::Settings::with_interrupt_safe_frees`); one more locked instruction per free.
    #[arg(long)]
    interrupt_safe_frees: bool,
    /// linux-scalability and thread-test: run each burst on a held core
    /// (`BlockAlloc::with_core`), as a kernel allocating a burst with preemption off would:
    /// the magazines take their core's lock once per burst instead of once per call; the
    /// other allocators answer with their plain calls. Not the papers' definition.
    #[arg(long)]
    held_bursts: bool,
    /// Folder for the runs: each run writes its JSON, CSV and plots into a new
    /// `<out>/<date-time>/` and points `<out>/latest` at it.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// List the allocators and workloads, then exit.
    #[arg(long)]
    list: bool,
    /// Tiny sizes, for a smoke test.
    #[arg(long)]
    quick: bool,
    /// Skip the plots.
    #[arg(long)]
    no_plots: bool,
    /// crash workload: crashes to inject (default 1000; 50 with --quick).
    #[arg(long)]
    injections: Option<usize>,
    /// crash workload: write-back of each operation: none, line (clwb) or msync.
    #[arg(long, value_enum, default_value_t = WriteBack::None)]
    durability: WriteBack,
    /// frag: shares of unmovable allocations in percent, comma-separated, one case each
    /// (e.g. 0,10,30; default 0): each allocation asks for an unmovable frame with that
    /// chance (`BlockAlloc::alloc_class`), and the report adds the huge frames compaction can
    /// recover moving movable frames only. Not in the paper.
    #[arg(long, value_delimiter = ',')]
    unmovable: Option<Vec<u32>>,
    /// crash workload: LLFree over caller memory (a mapped file holding the lower level
    /// alone, rebuilt with `Init::Recover`; no write-back) instead of a zone file.
    #[arg(long)]
    crash_memory: bool,
    /// The seed of the workloads' random choices (which blocks frag and rand free, the sizes
    /// of constant occupancy and larson, the crash points). Fixed by default, so that runs
    /// repeat; vary it to see how much a figure owes to one random stream.
    #[arg(long)]
    seed: Option<u64>,
}

/// `--durability`: [`Durability`] under the names users type.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum WriteBack {
    /// Nothing written back per operation: a process crash loses nothing, a power failure may.
    None,
    /// The changed cache line, with clwb: durable on a DAX mapping of persistent memory.
    Line,
    /// The changed page, with msync: durable on an ordinary file, one system call per operation.
    Msync,
}

impl From<WriteBack> for Durability {
    fn from(w: WriteBack) -> Durability {
        match w {
            WriteBack::None => Durability::None,
            WriteBack::Line => Durability::CacheLine,
            WriteBack::Msync => Durability::Msync,
        }
    }
}

fn list() {
    println!("allocators (* = in the default suite, r = added to it for the real-time workloads):");
    let all = AllocSpec::all();
    let width = all.iter().map(|a| a.name().len()).max().unwrap_or(0);
    for a in &all {
        let mark = if DEFAULT_ALLOCS.contains(&a.name()) {
            '*'
        } else if REALTIME_ALLOCS.contains(&a.name()) {
            'r'
        } else {
            ' '
        };
        println!("  {mark} {:width$}  {}", a.name(), a.about());
    }
    println!("\nworkloads (* = in the default suite; k = 2^order units of 4 KiB per block, P = threads), with the default suite's parameters:");
    let p = buddybench::workloads::Params::default();
    for w in Workload::ALL {
        let mark = if w.in_default_suite() { '*' } else { ' ' };
        println!("  {mark} {:18}  {}", w.name(), w.about());
        println!("    {:18}    parameters: {}", "", w.parameters(&p));
    }
    println!("    {:18}  {}", "crash", CRASH_ABOUT);
    println!(
        "
suites: nbbs, llfree, realtime (each: its workloads marked *), all (every workload; crash runs alone, never in a suite)
the default suite: the workloads marked *, --heap 16G for every case but the real-time ones, --work 1G, 5 counted repetitions after one warm-up, phases of at least 10 ms, --lock ticket, --clock wall"
    );
}

fn request(cli: &Cli) -> Result<Request, String> {
    let orders = match (&cli.size, &cli.order) {
        (Some(sizes), _) => Some(
            sizes
                .iter()
                .map(|s| parse_bytes(s).and_then(size_to_order))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        (None, o) => o.clone(),
    };
    let heap_bytes = cli.heap.as_deref().map(parse_bytes).transpose()?;
    let work_bytes = cli.work.as_deref().map(parse_bytes).transpose()?;
    let parking_limit =
        match cli.parking_limit.as_deref() {
            None => None,
            Some("max") => Some(usize::MAX),
            Some(units) => Some(units.parse::<usize>().map_err(|_| {
                format!("bad --parking-limit `{units}` (a number of units, or `max`)")
            })?),
        };
    Ok(Request {
        lock: Some(cli.lock),
        no_warmup: cli.no_warmup,
        work_bytes,
        allocs: cli.alloc.clone(),
        workloads: cli.workload.clone(),
        threads: cli.threads.clone(),
        orders,
        heap_bytes,
        reps: cli.reps,
        baseline: cli.baseline.clone(),
        max_order: cli.max_order,
        parking_limit,
        interrupt_safe_frees: cli.interrupt_safe_frees,
        quick: cli.quick,
        seed: cli.seed,
        held_bursts: cli.held_bursts,
        unmovable: cli.unmovable.clone(),
    })
}

const CRASH_ABOUT: &str = "LLFree 5.7: a worker process on a persistent zone killed with SIGKILL at random, recovered and checked, --injections times (--threads: its threads, --heap: the zone)";

/// `--workload crash`: crash injection on a persistent LLFree zone.
fn crash(cli: &Cli) -> ExitCode {
    use buddybench::workloads::crash;
    let units = match cli.heap.as_deref().map(parse_bytes).transpose() {
        Ok(b) => b.map_or(1 << 18, |b| (b / 4096) as usize),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let params = crash::CrashParams {
        injections: cli.injections.unwrap_or(if cli.quick {
            50
        } else {
            crash::DEFAULT_INJECTIONS
        }),
        threads: cli
            .threads
            .as_ref()
            .and_then(|t| t.first().copied())
            .unwrap_or(4),
        units,
        durability: cli.durability.into(),
        seed: cli.seed.unwrap_or(0x5eed_c4a5),
        caller_memory: cli.crash_memory,
    };
    if params.threads == 0 || params.units < 1024 {
        eprintln!("error: the crash workload needs a thread and a heap of at least 4M");
        return ExitCode::from(2);
    }
    let bar = indicatif::ProgressBar::new(params.injections as u64);
    let result = crash::run(&params, |i| bar.set_position(i as u64));
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: crash workload: {e}");
            return ExitCode::from(1);
        }
    };
    print!("{}", crash::render(&report));
    let path = cli.out.join("crash.json");
    let written = std::fs::create_dir_all(&cli.out).and_then(|()| {
        let json = serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?;
        std::fs::write(&path, json)
    });
    match written {
        Ok(()) => {
            eprintln!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", path.display());
            ExitCode::from(1)
        }
    }
}

/// Writes the report into a new `<out>/<date-time>/` and points `<out>/latest` at it.
fn write_run(
    report: &buddybench::report::Report,
    out: &std::path::Path,
    plots: bool,
) -> std::io::Result<(PathBuf, usize)> {
    std::fs::create_dir_all(out)?;
    let stamp = buddybench::machine::utc_now().folder();
    // Two runs within one second get distinct folders.
    let dir = (0..)
        .map(|i| match i {
            0 => out.join(&stamp),
            i => out.join(format!("{stamp}-{i}")),
        })
        .find(|d| !d.exists())
        .expect("some suffix is free");
    let written = write_all(report, &dir, plots)?;
    let latest = out.join("latest");
    if latest.symlink_metadata().is_ok() {
        std::fs::remove_file(&latest)?;
    }
    let name = dir.file_name().expect("a folder name");
    #[cfg(unix)]
    std::os::unix::fs::symlink(name, &latest)?;
    #[cfg(not(unix))]
    std::fs::write(&latest, name.to_string_lossy().as_bytes())?;
    Ok((dir, written.files.len()))
}

fn main() -> ExitCode {
    // The crash workload re-executes this binary as its worker process.
    buddyfree_baselines::crash::run_worker_if_asked();
    let cli = Cli::parse();
    if cli.list {
        list();
        return ExitCode::SUCCESS;
    }
    if let Some(w) = cli
        .workload
        .as_ref()
        .filter(|w| w.iter().any(|n| n == "crash"))
    {
        if w.len() > 1 {
            eprintln!("error: the crash workload runs alone");
            return ExitCode::from(2);
        }
        return crash(&cli);
    }
    buddybench::runner::set_clock(cli.clock);
    let plan = match request(&cli).and_then(|r| Plan::new(&r).map_err(|e| e.0)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let names: Vec<_> = plan.allocs.iter().map(|a| a.name()).collect();
    eprintln!(
        "buddybench: {} allocator(s) [{}] x {} case(s) x {} rep(s), baseline {}",
        names.len(),
        names.join(", "),
        plan.cases.len(),
        plan.reps,
        plan.baseline
    );
    let (calls, timed) = plan.estimate();
    eprintln!(
        "at most {:.1} M allocator calls (about {:.0} s at 100 ns each on one thread) plus {:.0} s of time-bounded runs",
        calls as f64 / 1e6,
        calls as f64 * 100e-9,
        timed.as_secs_f64()
    );
    let report = plan.run(std::env::args().collect());
    print!("{}", table::render(&report));
    if report.is_empty() {
        eprintln!(
            "error: nothing ran: no allocator could run any of the selected workloads ({})",
            report.notes.join("; ")
        );
        return ExitCode::from(1);
    }
    match write_run(&report, &cli.out, !cli.no_plots) {
        Ok((dir, n)) => eprintln!("wrote {n} file(s) to {}", dir.display()),
        Err(e) => {
            eprintln!("error: cannot write results to {}: {e}", cli.out.display());
            return ExitCode::from(1);
        }
    }
    if report.records.iter().any(|r| r.bad_frees > 0) {
        eprintln!("error: an allocator rejected frees of blocks it handed out (see notes)");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
