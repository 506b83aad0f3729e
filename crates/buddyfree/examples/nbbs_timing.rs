//! Single-thread timing of NBBS: ns per alloc+free pair of order 0 and order 9, and ns per
//! failing allocation on a full heap, for the 1-level tree and the 4-level bunches.
//!
//! `cargo run --release -p buddyfree --example nbbs_timing [reps]`
//!
//! Heap: 2^18 units (1 GiB of 4 KiB units). Each figure is the median over `reps` (default 7)
//! repetitions. Not a test: nothing here asserts a time.

use std::hint::black_box;
use std::time::Instant;

use buddyfree::{BlockAlloc, Config, Nbbs, Nbbs4};

const UNITS: usize = 1 << 18;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

/// ns per alloc+free pair of `order`.
fn pair(a: &dyn BlockAlloc, order: u32, reps: usize) -> f64 {
    let n = 1_000_000;
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    let i = a.alloc(black_box(order), 0).unwrap();
                    a.free(black_box(i), order, 0).unwrap();
                }
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    )
}

/// ns per failing `alloc(order)` once the heap is full of blocks of order `fill`.
fn failing(a: &dyn BlockAlloc, fill: u32, order: u32, reps: usize) -> f64 {
    let blocks: Vec<usize> = (0..UNITS >> fill)
        .map(|_| a.alloc(fill, 0).unwrap())
        .collect();
    let n = 100_000;
    let ns = median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    assert!(a.alloc(black_box(order), 0).is_err());
                }
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    );
    for i in blocks {
        a.free(i, fill, 0).unwrap();
    }
    ns
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .map_or(7, |r| r.parse().expect("reps"));
    println!("heap 2^18 units, single thread, median of {reps} runs, ns");
    println!(
        "{:<7} {:>9} {:>9} {:>9} {:>14} {:>14} {:>14}",
        "alloc",
        "max_order",
        "pair o0",
        "pair o9",
        "fail o0|full0",
        "fail o9|full0",
        "fail o0|full9"
    );
    for max_order in [9, 18] {
        let config = Config::new(UNITS, max_order);
        let allocs: [(&str, Box<dyn BlockAlloc>); 2] = [
            ("nbbs", Box::new(Nbbs::new(config).unwrap())),
            ("nbbs4", Box::new(Nbbs4::new(config).unwrap())),
        ];
        for (name, a) in allocs {
            println!(
                "{:<7} {:>9} {:>9.1} {:>9.1} {:>14.1} {:>14.1} {:>14.1}",
                name,
                max_order,
                pair(&*a, 0, reps),
                pair(&*a, 9, reps),
                failing(&*a, 0, 0, reps),
                failing(&*a, 0, 9, reps),
                failing(&*a, 9, 0, reps),
            );
        }
    }
}
