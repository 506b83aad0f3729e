//! Crash injection into LLFree's persistent zones (as in §5.7 of the LLFree paper): a worker process allocates and frees on a zone at random while
//! recording what it holds in a side file, another process kills it with SIGKILL, reopens
//! the zone and checks the recovered state against the record. Used by the tests and by
//! buddybench's `crash` workload; each re-executes its own binary as the worker, which calls
//! [`run_worker_if_asked`] first thing.
//!
//! The zone is a [`Form`]: a persistent zone file, or LLFree over caller memory
//! ([`Builder::kept`](crate::llfree::Builder::kept)) that is a mapping of a plain file holding the lower level
//! alone, which both the worker and the checker build with [`Init::Recover`].
//!
//! The side file (a `MAP_SHARED` mapping, so every store survives the kill) holds per worker
//! thread one `pending` word and `slots` block words. Each thread keeps the record such
//! that, at any instruction where it may be killed, the zone holds the recorded blocks plus
//! at most the block of the operation named by `pending`:
//!
//! ```text
//! alloc: pending = (n, order);  alloc;  slots = blocks;  pending = 0
//! free:  pending = (n, order);  slots = 0;  free;  pending = 0
//! ```
//! where an operation is `alloc`, `try_alloc` or `alloc_at` of one block, or `alloc_bulk` of
//! up to `n` blocks (`free` of one, or `free_bulk` of `n`). So after recovery: every recorded
//! block is allocated with its order, and the blocks allocated beyond them (lost,
//! "orphans") total at most the pending operations' units.

use std::fs::OpenOptions;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::string::{String, ToString};
use std::time::{Duration, Instant};
use std::vec::Vec;
use std::{format, thread, vec};

use memmap2::MmapMut;

use std::sync::atomic::{AtomicU64, Ordering};

use buddyfree::llfree::persist::{Durability, PersistError, PersistentLLFree, Recovery};
use buddyfree::llfree::{Init, LLFree, Options};
use buddyfree::{BlockAlloc, Config, MetadataMemory};

/// The environment variable that turns a process into a crash worker; its value is the
/// worker's [`Plan`] and files.
pub const WORKER_ENV: &str = "BUDDYFREE_CRASH_WORKER";
/// A worker not killed by then exits by itself (its parent died).
const WORKER_LIFETIME: Duration = Duration::from_secs(30);
/// How long the parent waits for a worker to start.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the parent and the worker wait out a lock shared with a forked child.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// What the workers do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Worker threads.
    pub threads: usize,
    /// Blocks each thread holds at most.
    pub slots: usize,
    /// Orders allocated: `0..=max_order`, smaller ones more often.
    pub max_order: u32,
}

/// What varies between the runs of one [`Injector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Write-back of the worker's operations.
    pub durability: Durability,
    /// Seed of the workers' random choices.
    pub seed: u64,
    /// How long after its threads started the worker is killed.
    pub kill_after: Duration,
}

/// Where the worker's allocator keeps its lower level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A persistent zone file ([`PersistentLLFree`]).
    Zone,
    /// LLFree over caller memory ([`Builder::kept`](crate::llfree::Builder::kept)): a `MAP_SHARED` mapping of a
    /// file that holds the lower level alone, built with [`Init::Recover`] every time.
    CallerMemory,
}

/// A zone file and its side file, set up for repeated injections.
pub struct Injector {
    zone: PathBuf,
    side: PathBuf,
    plan: Plan,
    form: Form,
    config: Config,
    options: Options,
}

/// LLFree over the lower level in a mapped file: the caller-memory form of a zone.
pub struct MappedLower {
    // Declared before `map`: the allocator borrows the mapping and must go first.
    alloc: LLFree,
    map: MmapMut,
}

impl MappedLower {
    /// Creates the file at `path` (which must not exist) with every unit free.
    fn create(path: &Path, config: Config, options: Options) -> Result<(), PersistError> {
        let layout = LLFree::lower_layout(config).map_err(PersistError::Config)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        file.set_len(layout.size() as u64)?;
        MappedLower::open(path, config, options, Init::Free)?.close()
    }

    /// Maps the file at `path` and builds LLFree over it as `init` says.
    fn open(
        path: &Path,
        config: Config,
        options: Options,
        init: Init,
    ) -> Result<MappedLower, PersistError> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        // SAFETY: the file belongs to the injector, and one process at a time maps it (the
        // checker only once the worker is dead).
        let mut map = unsafe { MmapMut::map_mut(&file)? };
        let base = std::ptr::NonNull::new(map.as_mut_ptr()).expect("a mapping is never at null");
        // SAFETY: the page-aligned mapping of the whole file, ours alone while `map` lives,
        // and `map` outlives the allocator (it is dropped after it); a file's bytes are
        // initialised (for `Init::Recover`).
        let alloc = unsafe {
            let lower = MetadataMemory::from_raw(base, map.len());
            LLFree::builder(config).options(options).kept(lower, init)
        };
        let alloc = alloc.build()?;
        Ok(MappedLower { alloc, map })
    }

    /// Drops the allocator and writes the mapping back to the file.
    fn close(self) -> Result<(), PersistError> {
        let MappedLower { alloc, map } = self;
        drop(alloc);
        map.flush()?;
        Ok(())
    }
}

/// A zone recovered after a kill, in its [`Form`]; dereferences to its allocator.
pub enum Opened {
    /// A persistent zone.
    Zone(PersistentLLFree),
    /// LLFree over a mapped lower level.
    CallerMemory(MappedLower),
}

impl Opened {
    /// Closes the zone (cleanly), or drops the allocator over caller memory and writes the
    /// mapping back.
    pub fn close(self) -> Result<(), PersistError> {
        match self {
            Opened::Zone(zone) => zone.close(),
            Opened::CallerMemory(lower) => lower.close(),
        }
    }

    fn blocks(&self) -> Vec<(usize, u32)> {
        match self {
            Opened::Zone(zone) => zone.blocks(),
            Opened::CallerMemory(lower) => lower.alloc.blocks(),
        }
    }
}

impl Deref for Opened {
    type Target = dyn BlockAlloc + Send + Sync;

    fn deref(&self) -> &Self::Target {
        match self {
            Opened::Zone(zone) => zone,
            Opened::CallerMemory(lower) => &lower.alloc,
        }
    }
}

/// The result of one injection: the recovered zone and what the worker held.
pub struct Injection {
    /// The zone, recovered and open.
    pub zone: Opened,
    /// What the open found.
    pub recovery: Recovery,
    /// Blocks the worker had recorded (allocation returned, free not called).
    pub held: Vec<(usize, u32)>,
    /// Blocks the zone holds beyond them: lost by operations in flight.
    pub orphans: Vec<(usize, u32)>,
    /// Units of the operations in flight (the bound on the orphans' units).
    pub in_flight_units: usize,
    /// Worker threads that were in the middle of an operation.
    pub in_flight_ops: usize,
    /// Of those, the ones in the middle of a bulk operation (more than one block).
    pub in_flight_bulk: usize,
}

impl Injection {
    /// Units the worker had committed (its recorded blocks).
    pub fn committed_units(&self) -> usize {
        units(&self.held)
    }

    /// Units lost by operations in flight.
    pub fn lost_units(&self) -> usize {
        units(&self.orphans)
    }
}

fn units(blocks: &[(usize, u32)]) -> usize {
    blocks.iter().map(|&(_, o)| 1usize << o).sum()
}

impl Injector {
    /// Creates `zone.llfree` and `side.bin` in `dir` (which must not hold them): a zone of
    /// `config` (its cores are the worker threads), closed clean.
    pub fn new(
        dir: &Path,
        config: Config,
        options: Options,
        plan: Plan,
    ) -> Result<Injector, PersistError> {
        Injector::with_form(dir, config, options, plan, Form::Zone)
    }

    /// [`Injector::new`] for a zone of the given [`Form`] (for [`Form::CallerMemory`] the
    /// file `zone.llfree` holds the lower level alone, every unit free).
    pub fn with_form(
        dir: &Path,
        config: Config,
        options: Options,
        plan: Plan,
        form: Form,
    ) -> Result<Injector, PersistError> {
        let zone = dir.join("zone.llfree");
        let side = dir.join("side.bin");
        let config = config.with_cores(plan.threads);
        match form {
            Form::Zone => {
                PersistentLLFree::create(&zone, config, options, Durability::None)?.close()?;
            }
            Form::CallerMemory => MappedLower::create(&zone, config, options)?,
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&side)?;
        file.set_len((side_words(&plan) * 8) as u64)?;
        Ok(Injector {
            zone,
            side,
            plan,
            form,
            config,
            options,
        })
    }

    /// The zone file.
    pub fn zone_path(&self) -> &Path {
        &self.zone
    }

    /// Opens the zone after a kill, recovering it.
    fn recover(&self) -> Result<(Opened, Recovery), PersistError> {
        match self.form {
            Form::Zone => {
                let (zone, recovery) = PersistentLLFree::open(
                    &self.zone,
                    self.plan.threads,
                    Durability::None,
                    LOCK_WAIT,
                )?;
                Ok((Opened::Zone(zone), recovery))
            }
            Form::CallerMemory => {
                let started = Instant::now();
                let lower =
                    MappedLower::open(&self.zone, self.config, self.options, Init::Recover)?;
                let recovery = Recovery {
                    clean: false,
                    allocated_units: lower.alloc.total_units() - lower.alloc.free_units(),
                    elapsed: started.elapsed(),
                };
                Ok((Opened::CallerMemory(lower), recovery))
            }
        }
    }

    /// Runs one worker with `worker` (a command running a binary that calls
    /// [`run_worker_if_asked`]), kills it `run.kill_after` after its threads started,
    /// recovers the zone and checks it against the side file. The zone must be closed
    /// (clean) before the next injection.
    pub fn inject(&self, mut worker: Command, run: Run) -> Result<Injection, String> {
        let side = Side::map(&self.side, &self.plan).map_err(|e| e.to_string())?;
        side.clear();
        let o = &self.options;
        let spec = format!(
            "{};{};{};{};{};{};{};{};{};{};{};{};{};{}",
            self.zone.display(),
            self.side.display(),
            self.plan.threads,
            self.plan.slots,
            self.plan.max_order,
            durability_name(run.durability),
            run.seed,
            u8::from(self.form == Form::CallerMemory),
            self.config.units,
            self.config.max_order,
            o.tree_children,
            o.allocated_below_permille,
            o.free_above_permille,
            o.reserve_on_free,
        );
        let mut child = worker
            .env(WORKER_ENV, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the worker: {e}"))?;
        let started = Instant::now();
        while side.ready() < self.plan.threads as u64 {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("worker exited before starting: {status}"));
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err("worker did not start".into());
            }
            thread::sleep(Duration::from_micros(200));
        }
        thread::sleep(run.kill_after);
        child
            .kill()
            .map_err(|e| format!("cannot kill the worker: {e}"))?;
        let status = child.wait().map_err(|e| e.to_string())?;
        if status.code().is_some() {
            return Err(format!("worker ended by itself before the kill: {status}"));
        }
        let (zone, recovery) = self
            .recover()
            .map_err(|e| format!("recovery failed: {e}"))?;
        if recovery.clean {
            return Err("a killed zone opened as clean".into());
        }
        let Pending {
            units: in_flight_units,
            ops: in_flight_ops,
            bulk: in_flight_bulk,
        } = side.pending(&self.plan);
        let mut held = side.held(&self.plan);
        held.sort_unstable();
        let blocks = zone.blocks();
        let mut orphans = Vec::new();
        let mut want = held.iter().peekable();
        for &b in &blocks {
            if want.peek() == Some(&&b) {
                want.next();
            } else {
                orphans.push(b);
            }
        }
        if let Some(missing) = want.next() {
            return Err(format!(
                "a committed block {missing:?} is not allocated with its order after recovery"
            ));
        }
        let injection = Injection {
            zone,
            recovery,
            held,
            orphans,
            in_flight_units,
            in_flight_ops,
            in_flight_bulk,
        };
        if injection.recovery.allocated_units != units(&blocks) {
            return Err("the recovered count does not match the blocks".into());
        }
        if injection.lost_units() > in_flight_units {
            return Err(format!(
                "{} units lost, but only {in_flight_units} were in flight",
                injection.lost_units()
            ));
        }
        Ok(injection)
    }
}

/// The side file of a plan.
struct Side {
    map: MmapMut,
}

fn side_words(plan: &Plan) -> usize {
    1 + plan.threads * (1 + plan.slots)
}

impl Side {
    fn map(path: &Path, plan: &Plan) -> Result<Side, PersistError> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() != (side_words(plan) * 8) as u64 {
            return Err(PersistError::BadHeader("side file size"));
        }
        // SAFETY: the side file belongs to the injector, which sized it; worker and parent
        // access it through atomics only.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(Side { map })
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned and a whole number of words long; it is only
        // accessed through these atomics while `self` lives.
        unsafe {
            core::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU64>(), self.map.len() / 8)
        }
    }

    fn clear(&self) {
        for w in self.words() {
            w.store(0, Ordering::Relaxed);
        }
    }

    fn ready(&self) -> u64 {
        self.words()[0].load(Ordering::Acquire)
    }

    /// Thread `t`'s `pending` word and slots.
    fn thread(&self, plan: &Plan, t: usize) -> (&AtomicU64, &[AtomicU64]) {
        let at = 1 + t * (1 + plan.slots);
        let words = self.words();
        (&words[at], &words[at + 1..at + 1 + plan.slots])
    }

    /// The recorded blocks.
    fn held(&self, plan: &Plan) -> Vec<(usize, u32)> {
        (0..plan.threads)
            .flat_map(|t| self.thread(plan, t).1)
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&s| s != 0)
            .map(|s| ((s >> 8) as usize, (s & 0xFF) as u32 - 1))
            .collect()
    }

    /// The operations in flight.
    fn pending(&self, plan: &Plan) -> Pending {
        let mut pending = Pending::default();
        for t in 0..plan.threads {
            let p = self.thread(plan, t).0.load(Ordering::Acquire);
            if p != 0 {
                let blocks = (p >> 8) as usize;
                pending.units += blocks << ((p & 0xFF) - 1);
                pending.ops += 1;
                pending.bulk += usize::from(blocks > 1);
            }
        }
        pending
    }
}

/// What the side file says was in flight at the kill.
#[derive(Default)]
struct Pending {
    units: usize,
    ops: usize,
    bulk: usize,
}

/// A `pending` word: `blocks` blocks of `order`.
fn pending_word(blocks: usize, order: u32) -> u64 {
    (blocks as u64) << 8 | (u64::from(order) + 1)
}

/// A slot word: the block `(index, order)`.
fn slot_word(index: usize, order: u32) -> u64 {
    (index as u64) << 8 | (u64::from(order) + 1)
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::None => "none",
        Durability::CacheLine => "line",
        Durability::Msync => "msync",
    }
}

/// If this process was started as a crash worker ([`WORKER_ENV`] set), runs the worker and
/// never returns (it is killed, or exits after a while); otherwise returns at once.
pub fn run_worker_if_asked() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let code = match worker(&spec) {
        Ok(()) => 0,
        Err(e) => {
            std::eprintln!("crash worker: {e}");
            3
        }
    };
    std::process::exit(code);
}

fn worker(spec: &str) -> Result<(), String> {
    let f: Vec<&str> = spec.split(';').collect();
    let [zone, side, threads, slots, max_order, durability, seed, memory, units, zone_order, children, below, above, reserve] =
        f[..]
    else {
        return Err(format!("bad {WORKER_ENV}: {spec}"));
    };
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
    let plan = Plan {
        threads: num(threads)? as usize,
        slots: num(slots)? as usize,
        max_order: num(max_order)? as u32,
    };
    let durability = match durability {
        "line" => Durability::CacheLine,
        "msync" => Durability::Msync,
        _ => Durability::None,
    };
    let seed = num(seed)?;
    let zone = match memory {
        "1" => {
            let config =
                Config::new(num(units)? as usize, num(zone_order)? as u32).with_cores(plan.threads);
            let options = Options::default()
                .with_tree_children(num(children)? as usize)
                .with_thresholds(num(below)? as usize, num(above)? as usize)
                .with_reserve_on_free(num(reserve)? as u32);
            // The checker left it whole; recovery is how it is taken every time.
            let lower = MappedLower::open(Path::new(zone), config, options, Init::Recover)
                .map_err(|e| e.to_string())?;
            if lower.alloc.free_units() != config.units {
                return Err("the lower level was not whole before the worker started".into());
            }
            Opened::CallerMemory(lower)
        }
        _ => {
            let (zone, recovery) =
                PersistentLLFree::open(zone, plan.threads, durability, LOCK_WAIT)
                    .map_err(|e| e.to_string())?;
            if !recovery.clean {
                return Err("the zone was not closed before the worker started".into());
            }
            Opened::Zone(zone)
        }
    };
    let opened = zone;
    let zone: &(dyn BlockAlloc + Send + Sync) = &*opened;
    let side = Side::map(Path::new(side), &plan).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + WORKER_LIFETIME;
    thread::scope(|s| {
        for t in 0..plan.threads {
            let side = &side;
            s.spawn(move || work(zone, side, &plan, seed, t, deadline));
        }
    });
    Ok(())
}

/// Puts the block of a single allocation, if it succeeded, first in `got`; how many.
fn one(allocated: Result<usize, buddyfree::Error>, got: &mut [usize]) -> usize {
    allocated.map(|index| got[0] = index).map_or(0, |()| 1)
}

/// The most blocks a bulk operation of a worker names.
const BULK: usize = 8;

/// One worker thread: random allocations and frees, single and in bulk, recorded as the
/// module doc says.
fn work(
    zone: &(dyn BlockAlloc + Send + Sync),
    side: &Side,
    plan: &Plan,
    seed: u64,
    t: usize,
    deadline: Instant,
) {
    let (pending, slots) = side.thread(plan, t);
    let mut rng = seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // (slot, index, order) of the blocks held, and the free slots.
    let mut live: Vec<(usize, usize, u32)> = Vec::new();
    let mut free_slots: Vec<usize> = (0..plan.slots).rev().collect();
    let units = zone.total_units();
    side.words()[0].fetch_add(1, Ordering::AcqRel);
    let mut step = 0u64;
    loop {
        step += 1;
        if step.is_multiple_of(4096) && Instant::now() > deadline {
            return;
        }
        let r = next();
        let how = (r >> 40) % 4;
        if !free_slots.is_empty() && (live.is_empty() || r % 2 == 0) {
            let span = u64::from(plan.max_order) + 1;
            let order = ((r >> 8) % span).min((r >> 24) % span) as u32;
            let n = if how == 0 {
                1 + (r >> 44) as usize % BULK.min(free_slots.len())
            } else {
                1
            };
            let mut got = [0usize; BULK];
            pending.store(pending_word(n, order), Ordering::Release);
            let count = match how {
                0 => zone.alloc_bulk(order, t, &mut got[..n]).unwrap_or(0),
                1 => {
                    let index = ((r >> 48) as usize % units) & !((1 << order) - 1);
                    one(zone.alloc_at(index, order, t).map(|()| index), &mut got)
                }
                2 => one(zone.try_alloc(order, t), &mut got),
                _ => one(zone.alloc(order, t), &mut got),
            };
            for &index in &got[..count] {
                let slot = free_slots.pop().expect("at most one block per free slot");
                slots[slot].store(slot_word(index, order), Ordering::Release);
                live.push((slot, index, order));
            }
            pending.store(0, Ordering::Release);
        } else {
            let (slot, index, order) = live.swap_remove((r >> 8) as usize % live.len());
            let mut batch = vec![(slot, index)];
            while how == 0 && batch.len() < BULK {
                let Some(k) = live.iter().position(|&(_, _, o)| o == order) else {
                    break;
                };
                let (slot, index, _) = live.swap_remove(k);
                batch.push((slot, index));
            }
            pending.store(pending_word(batch.len(), order), Ordering::Release);
            for &(slot, _) in &batch {
                slots[slot].store(0, Ordering::Release);
            }
            let indices: Vec<usize> = batch.iter().map(|&(_, index)| index).collect();
            let freed = if how == 0 {
                zone.free_bulk(&indices, order, t).map_err(|(_, e)| e)
            } else {
                zone.free(index, order, t)
            };
            if let Err(e) = freed {
                std::eprintln!("crash worker: free of {indices:?}, order {order}, failed: {e}");
                std::process::exit(4);
            }
            pending.store(0, Ordering::Release);
            free_slots.extend(batch.iter().map(|&(slot, _)| slot));
        }
    }
}
