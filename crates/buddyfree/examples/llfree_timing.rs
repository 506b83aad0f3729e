//! The LLFree paper's userspace benchmarks (llfree-rs `bench`: bulk, repeat, rand) on an
//! 8 GiB heap of 4 KiB frames, at orders 0 and 9, for 1 and 2 threads; medians of repeated
//! runs, each on a fresh allocator. Not a test: run it with
//!
//! ```text
//! cargo run --release -p buddyfree --example llfree_timing [-- reps [bulk|repeat|rand]]
//! ```
//!
//! Per thread `allocs = frames / threads / 2 / 2^order`; threads are pinned to CPUs 0, 1, ...
//! - bulk: allocate `allocs`, barrier, free them: ns per get and per put.
//! - repeat: pre-allocate `allocs`, then `allocs` get+put pairs: ns per pair.
//! - rand: allocate `allocs`, shuffle all blocks across threads, each frees its share: ns per put.
//!
//! Every figure is given twice: wall-clock time per operation (what llfree-rs reports), and
//! the thread's CPU time per operation, which a machine loaded by other work inflates less.

mod support;

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};
use support::cpu_time;

use buddyfree::llfree::LLFree;
use buddyfree::{BlockAlloc, Config};

const FRAMES: usize = 1 << 21;

/// Pins the calling thread to `cpu` (best effort, as llfree-rs does).
fn pin(cpu: usize) {
    // SAFETY: the set is zeroed, then filled by CPU_SET for an index below CPU_SETSIZE, and
    // passed with its own size; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A timed section: wall and CPU nanoseconds per operation.
struct Timer(Instant, Duration);

impl Timer {
    fn start() -> Timer {
        Timer(Instant::now(), cpu_time())
    }

    fn per(self, ops: usize) -> [f64; 2] {
        let wall = self.0.elapsed().as_nanos() as f64;
        let cpu = (cpu_time() - self.1).as_nanos() as f64;
        [wall / ops as f64, cpu / ops as f64]
    }
}

fn shuffle(v: &mut [usize], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// Runs `work(thread, barrier)` on `threads` pinned threads; the mean of what they return.
fn on_threads(threads: usize, work: impl Fn(usize, &Barrier) -> Vec<f64> + Sync) -> Vec<f64> {
    let barrier = Barrier::new(threads);
    let results: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, barrier) = (&work, &barrier);
                s.spawn(move || {
                    pin(t);
                    work(t, barrier)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (0..results[0].len())
        .map(|i| results.iter().map(|r| r[i]).sum::<f64>() / threads as f64)
        .collect()
}

/// One run of `bench`: its figures, each as wall then CPU ns/op.
fn run(bench: &str, order: u32, threads: usize) -> Vec<f64> {
    let alloc = LLFree::new(Config::new(FRAMES, 10).with_cores(threads)).unwrap();
    let allocs = FRAMES / threads / 2 / (1 << order);
    let shared = Mutex::new(Vec::new());
    on_threads(threads, |t, barrier| {
        // Touch the vector's pages before timing.
        let mut mine = vec![usize::MAX; allocs];
        mine.clear();
        barrier.wait();
        let timer = Timer::start();
        for _ in 0..allocs {
            mine.push(alloc.alloc(order, t).unwrap());
        }
        let get = timer.per(allocs);
        barrier.wait();
        match bench {
            "bulk" => {
                let timer = Timer::start();
                for &i in &mine {
                    alloc.free(i, order, t).unwrap();
                }
                [get, timer.per(allocs)].concat()
            }
            "repeat" => {
                let timer = Timer::start();
                for _ in 0..allocs {
                    let i = alloc.alloc(order, t).unwrap();
                    alloc.free(i, order, t).unwrap();
                }
                let pair = timer.per(allocs);
                for &i in &mine {
                    alloc.free(i, order, t).unwrap();
                }
                pair.to_vec()
            }
            _ => {
                shared.lock().unwrap().extend(mine.drain(..));
                barrier.wait();
                if t == 0 {
                    shuffle(&mut shared.lock().unwrap(), 0x2545_F491_4F6C_DD1D);
                }
                barrier.wait();
                let share: Vec<usize> = {
                    let all = shared.lock().unwrap();
                    all.chunks(allocs).nth(t).unwrap().to_vec()
                };
                barrier.wait();
                let timer = Timer::start();
                for &i in &share {
                    alloc.free(i, order, t).unwrap();
                }
                timer.per(share.len()).to_vec()
            }
        }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    // Optional filter: a benchmark name, to profile one.
    let only = args.get(2);
    println!("LLFree, {FRAMES} frames (8 GiB of 4 KiB), medians of {reps} runs");
    println!("ns/op as wall-clock / thread CPU time");
    println!("| bench | order | threads | get | put | pair |");
    println!("|---|---|---|---|---|---|");
    for bench in ["bulk", "repeat", "rand"] {
        if only.is_some_and(|o| o != bench) {
            continue;
        }
        for order in [0, 9] {
            for threads in [1, 2] {
                let runs: Vec<Vec<f64>> = (0..reps).map(|_| run(bench, order, threads)).collect();
                let col = |i: usize| {
                    let wall = median(runs.iter().map(|r| r[2 * i]).collect());
                    let cpu = median(runs.iter().map(|r| r[2 * i + 1]).collect());
                    format!("{wall:.1} / {cpu:.1}")
                };
                let (get, put, pair) = match bench {
                    "bulk" => (col(0), col(1), String::new()),
                    "repeat" => (String::new(), String::new(), col(0)),
                    _ => (String::new(), col(0), String::new()),
                };
                println!("| {bench} | {order} | {threads} | {get} | {put} | {pair} |");
            }
        }
    }
}
