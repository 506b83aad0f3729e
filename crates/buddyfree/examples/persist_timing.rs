//! The cost of persistence: bulk order-0 allocation and free (llfree-rs `bench` bulk, one
//! thread) on a volatile LLFree and on persistent zones with each write-back mode, over a
//! zone file in the system's temporary folder. Not a test: run it with
//!
//! ```text
//! cargo run --release -p buddyfree --example persist_timing [-- reps]
//! ```
//!
//! Figures are thread CPU time per operation, medians of `reps` runs (default 5), each on a
//! fresh allocator; `msync` runs far fewer operations (one system call and page write each).

mod support;

use std::time::Duration;
use support::cpu_time;

use buddyfree::llfree::persist::{Durability, PersistentLLFree};
use buddyfree::llfree::LLFree;
use buddyfree::{BlockAlloc, Config};

/// 1 GiB of 4 KiB frames.
const FRAMES: usize = 1 << 18;

/// ns per get and per put of `n` order-0 frames.
fn bulk(a: &dyn BlockAlloc, n: usize) -> (f64, f64) {
    let mut blocks = Vec::with_capacity(n);
    let t0 = cpu_time();
    for _ in 0..n {
        blocks.push(a.alloc(0, 0).unwrap());
    }
    let t1 = cpu_time();
    for &b in &blocks {
        a.free(b, 0, 0).unwrap();
    }
    let t2 = cpu_time();
    let ns = |d: Duration| d.as_nanos() as f64 / n as f64;
    (ns(t1 - t0), ns(t2 - t1))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let dir = std::env::temp_dir().join(format!("persist-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config::new(FRAMES, 10);
    let cases: [(&str, Option<Durability>, usize); 4] = [
        ("volatile", None, FRAMES / 2),
        ("zone, none", Some(Durability::None), FRAMES / 2),
        ("zone, cache line", Some(Durability::CacheLine), FRAMES / 2),
        ("zone, msync", Some(Durability::Msync), 2048),
    ];
    println!("bulk order 0, 1 thread, {FRAMES} frames: CPU ns per op (median of {reps})");
    for (name, durability, n) in cases {
        let (mut gets, mut puts) = (Vec::new(), Vec::new());
        let mut kind = String::new();
        for rep in 0..reps {
            let (get, put) = match durability {
                None => bulk(&LLFree::new(config).unwrap(), n),
                Some(d) => {
                    let path = dir.join(format!("zone-{rep}"));
                    let zone = PersistentLLFree::create(&path, config, d).unwrap();
                    kind = format!(" ({:?})", zone.flush_kind());
                    let r = bulk(&zone, n);
                    zone.close().unwrap();
                    std::fs::remove_file(&path).unwrap();
                    r
                }
            };
            gets.push(get);
            puts.push(put);
        }
        println!(
            "  {name:18}{kind:14} {n:7} ops  get {:8.1}  put {:8.1}",
            median(gets),
            median(puts)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
