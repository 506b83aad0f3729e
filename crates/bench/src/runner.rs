//! Threads for the workloads: started together on a barrier, pinned to a core each where the
//! machine has enough cores, timing themselves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The clock timed sections read; `--clock` takes its values' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// Elapsed time (what the papers report).
    Wall,
    /// The thread's CPU time: a machine loaded by other work inflates it less than wall time,
    /// but it hides time spent waiting (a sleeping lock, preemption).
    Cpu,
}

static CPU_CLOCK: AtomicBool = AtomicBool::new(false);
/// Minor page faults taken inside timed sections, by every thread, since the process started.
static TIMED_FAULTS: AtomicU64 = AtomicU64::new(0);

/// Selects the clock of every later timed section.
pub fn set_clock(clock: Clock) {
    CPU_CLOCK.store(clock == Clock::Cpu, Ordering::Relaxed);
}

/// The clock timed sections read.
pub fn clock() -> Clock {
    if CPU_CLOCK.load(Ordering::Relaxed) {
        Clock::Cpu
    } else {
        Clock::Wall
    }
}

/// Minor page faults taken inside timed sections so far (all threads); the difference over a
/// run tells whether its time was the allocator's or the kernel's.
pub fn timed_faults() -> u64 {
    TIMED_FAULTS.load(Ordering::Relaxed)
}

/// The calling thread's CPU time.
#[cfg(unix)]
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id a constant the OS knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Minor page faults of the calling thread so far.
#[cfg(target_os = "linux")]
fn thread_faults() -> u64 {
    // SAFETY: `rusage` is plain data, valid when zeroed, and `getrusage` writes only into it.
    unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut r) != 0 {
            return 0;
        }
        r.ru_minflt as u64
    }
}

#[cfg(not(target_os = "linux"))]
fn thread_faults() -> u64 {
    0
}

/// A start of a timed section on the selected clock.
struct Stamp(Option<Instant>, Duration);

impl Stamp {
    fn now(clock: Clock) -> Stamp {
        match clock {
            Clock::Wall => Stamp(Some(Instant::now()), Duration::ZERO),
            Clock::Cpu => Stamp(None, thread_cpu_time()),
        }
    }

    fn elapsed(&self) -> Duration {
        match self.0 {
            Some(i) => i.elapsed(),
            None => thread_cpu_time().saturating_sub(self.1),
        }
    }
}

/// What one worker thread knows about its run.
pub struct Worker<'a> {
    /// The worker's number, `0..threads`; also the `core` hint passed to the allocator.
    pub id: usize,
    /// The number of workers.
    pub threads: usize,
    cpu: Option<usize>,
    barrier: &'a Barrier,
    /// CPU time (ns) and page faults of the successor threads run since the current timed
    /// section began.
    successor_cpu: AtomicU64,
    successor_faults: AtomicU64,
}

impl Worker<'_> {
    /// Waits until every worker of this run has arrived.
    pub fn sync(&self) {
        self.barrier.wait();
    }

    /// Waits for every worker, then runs `f` and measures it on the selected [`Clock`]. The
    /// barrier makes all workers start their timed section together, so the longest of their
    /// (wall) times is the time from release to the last one finishing. The page faults
    /// taken inside are added to [`timed_faults`].
    ///
    /// Work that [`Worker::successor`] hands to other threads counts as the worker's: their
    /// CPU time on the CPU clock, and their page faults.
    pub fn timed<R>(&self, f: impl FnOnce() -> R) -> (R, Duration) {
        self.sync();
        self.timed_on(clock(), f)
    }

    /// [`Worker::timed`] on `clock`, without the barrier.
    fn timed_on<R>(&self, clock: Clock, f: impl FnOnce() -> R) -> (R, Duration) {
        self.successor_cpu.store(0, Ordering::Relaxed);
        self.successor_faults.store(0, Ordering::Relaxed);
        let faults = thread_faults();
        let start = Stamp::now(clock);
        let r = f();
        let mut time = start.elapsed();
        if clock == Clock::Cpu {
            time += Duration::from_nanos(self.successor_cpu.load(Ordering::Relaxed));
        }
        let successors = self.successor_faults.load(Ordering::Relaxed);
        TIMED_FAULTS.fetch_add(thread_faults() - faults + successors, Ordering::Relaxed);
        (r, time)
    }

    /// Runs `f` on a new thread, pinned as this worker is, and waits for it (the Larson
    /// server's successor threads). Its CPU time and page faults count toward the timed
    /// section it runs in, as if the worker had done the work.
    pub fn successor<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let cpu = self.cpu;
        let (r, time, faults) = std::thread::scope(|s| {
            s.spawn(move || {
                pin(cpu);
                let faults = thread_faults();
                let start = thread_cpu_time();
                let r = f();
                (
                    r,
                    thread_cpu_time().saturating_sub(start),
                    thread_faults() - faults,
                )
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        });
        self.successor_cpu
            .fetch_add(time.as_nanos() as u64, Ordering::Relaxed);
        self.successor_faults.fetch_add(faults, Ordering::Relaxed);
        r
    }
}

/// Runs `f` on `threads` scoped threads, each pinned to its own core when the machine has at
/// least `threads` usable cores (otherwise left to the scheduler), and returns their results
/// in worker order.
pub fn run_workers<T: Send>(threads: usize, f: impl Fn(&Worker) -> T + Sync) -> Vec<T> {
    let cpus = usable_cpus();
    let pinned = cpus.len() >= threads;
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let worker = Worker {
                    id,
                    threads,
                    cpu: pinned.then(|| cpus[id]),
                    barrier: &barrier,
                    successor_cpu: AtomicU64::new(0),
                    successor_faults: AtomicU64::new(0),
                };
                let f = &f;
                s.spawn(move || {
                    pin(worker.cpu);
                    f(&worker)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// The CPUs this process may run on.
#[cfg(target_os = "linux")]
pub fn usable_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data, valid when zeroed; `sched_getaffinity` writes at most
    // `size_of::<cpu_set_t>()` bytes into it and `CPU_ISSET` only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return fallback_cpus();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The CPUs this process may run on.
#[cfg(not(target_os = "linux"))]
pub fn usable_cpus() -> Vec<usize> {
    fallback_cpus()
}

#[cfg_attr(target_os = "linux", allow(dead_code))]
fn fallback_cpus() -> Vec<usize> {
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Pins the calling thread to `cpu`, if any.
fn pin(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        pin_to(cpu);
    }
}

/// Pins the calling thread to `cpu`; quietly does nothing where that fails or is unsupported,
/// since an unpinned run is still a valid (noisier) measurement.
#[cfg(target_os = "linux")]
fn pin_to(cpu: usize) {
    // SAFETY: as in `usable_cpus`; `CPU_SET` ignores CPUs beyond the set's size, and pid 0
    // names the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_to(_cpu: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_runs_once_in_order() {
        let ids = run_workers(3, |w| {
            w.sync();
            (w.id, w.threads)
        });
        assert_eq!(ids, vec![(0, 3), (1, 3), (2, 3)]);
    }

    /// On the CPU clock, a successor's work is the worker's: without it, a Larson run timed
    /// only the threads' creation (0.7 ns per operation, whatever the allocator).
    #[test]
    fn a_successors_cpu_time_counts_for_its_worker() {
        let spin = Duration::from_millis(30);
        let ((), time) = run_workers(1, |w| {
            w.timed_on(Clock::Cpu, || {
                w.successor(|| {
                    let start = thread_cpu_time();
                    while thread_cpu_time() - start < spin {}
                })
            })
        })
        .remove(0);
        assert!(time >= spin, "{time:?}");
    }

    #[test]
    fn more_threads_than_cores_still_run() {
        let n = usable_cpus().len() + 2;
        let r = run_workers(n, |w| w.timed(|| w.id).0);
        assert_eq!(r, (0..n).collect::<Vec<_>>());
    }
}
