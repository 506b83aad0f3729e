//! Single-thread timing of NBBS: ns per alloc+free pair of order 0 and order 9, and ns per
//! failing allocation on a full heap, for the 1-level tree and the 4-level bunches.
//!
//! `cargo run --release -p buddyfree --example nbbs_timing [reps]`
//!
//! Heap: 2^18 units (1 GiB of 4 KiB units). Each figure is `median/min` over `reps` (default
//! 21) short repetitions: the minimum shows the cost without interference from other load on a
//! shared machine. Not a test: nothing here asserts a time.

use std::hint::black_box;
use std::time::Instant;

use buddyfree::{BlockAlloc, Config, Nbbs, Nbbs4};

const UNITS: usize = 1 << 18;

/// Median and minimum.
fn stats(mut xs: Vec<f64>) -> String {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    format!("{:.1}/{:.1}", xs[xs.len() / 2], xs[0])
}

/// ns per alloc+free pair of `order`.
fn pair(a: &dyn BlockAlloc, order: u32, reps: usize) -> String {
    let n = 200_000;
    stats(
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
fn failing(a: &dyn BlockAlloc, fill: u32, order: u32, reps: usize) -> String {
    let blocks: Vec<usize> = (0..UNITS >> fill)
        .map(|_| a.alloc(fill, 0).unwrap())
        .collect();
    let n = 100_000;
    let ns = stats(
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
        .map_or(21, |r| r.parse().expect("reps"));
    println!("heap 2^18 units, single thread, ns, median/min of {reps} runs");
    println!(
        "{:<6} {:>9} {:>12} {:>12} {:>14} {:>14} {:>14}",
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
                "{:<6} {:>9} {:>12} {:>12} {:>14} {:>14} {:>14}",
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
