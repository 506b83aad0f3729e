//! Every registered allocator under many threads: the battery's ownership-checked stress
//! (cross-thread frees through a mailbox) alternating with raced double frees, at mixed
//! orders. A short form runs with the other tests; the large form (at least 10^7 operations
//! per allocator on 8 threads) runs on demand:
//!
//! ```sh
//! cargo test --release -p buddyfree --test stress_large -- --ignored --nocapture
//! ```

mod common;

use std::time::Instant;

use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Magazine, Settings};
use buddyfree::{BlockAlloc, Config, Nbbs4};
use buddyfree_baselines::registry;

const THREADS: usize = 8;
/// 256 MiB of 4 KiB frames: room for every thread's blocks at the largest order.
const UNITS: usize = 1 << 16;
const MAX_ORDER: u32 = 8;

/// Runs the rounds on every registered allocator but the model (the reference is
/// `O(units)` per allocation and checked against itself in `model.rs`), then on the
/// magazines again with the full lists (this heap's default is the shortest).
fn every_allocator(ops: usize) {
    for entry in registry::entries().iter().filter(|e| e.name != "model") {
        let max_order = MAX_ORDER.min(entry.max_order);
        let alloc = (entry.build)(
            Config::new(UNITS, max_order).with_cores(THREADS),
            Default::default(),
        )
        .unwrap();
        stress(entry.name, &alloc, ops, max_order);
    }
    let config = Config::new(UNITS, MAX_ORDER).with_cores(THREADS);
    let over_llfree = Magazine::new(config, LLFree::new(config).unwrap()).unwrap();
    let full = over_llfree.with_settings(Settings::new().with_parking_limit(usize::MAX));
    stress("llfree-magazine, full lists", &full, ops, MAX_ORDER);
    let over_nbbs4 = Magazine::new(config, Nbbs4::new(config).unwrap()).unwrap();
    let full = over_nbbs4.with_settings(Settings::new().with_parking_limit(usize::MAX));
    stress("nbbs4-magazine, full lists", &full, ops, MAX_ORDER);
}

/// The rounds on `alloc`, timed, with at least `ops` operations done.
fn stress(name: &str, alloc: &dyn BlockAlloc, ops: usize, max_order: u32) {
    let start = Instant::now();
    let done = common::stress_rounds(alloc, THREADS, ops, max_order);
    let elapsed = start.elapsed();
    assert!(done >= ops, "{name}: {done} operations");
    eprintln!(
        "{name:<18} {done:>10} ops on {THREADS} threads in {elapsed:>8.2?} ({:.2} Mops/s)",
        done as f64 / elapsed.as_secs_f64() / 1e6
    );
}

#[test]
fn every_allocator_survives_stress_on_8_threads() {
    // Under ThreadSanitizer (CI builds it unoptimised, about 50x slower) a tenth is enough to
    // show every kind of interleaving the sanitiser checks; the full short form runs uninstrumented.
    every_allocator(if cfg!(buddyfree_tsan) {
        20_000
    } else {
        200_000
    });
}

#[test]
#[ignore = "the large form, a few minutes on 2 cores: run with --ignored"]
fn every_allocator_survives_10_million_operations_on_8_threads() {
    every_allocator(10_000_000);
}
