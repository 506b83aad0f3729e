//! buddyfree as the program's `#[global_allocator]`: every `Box`, `Vec`, `String` and map
//! below, on every thread, lives in one buddy heap.
//!
//! ```sh
//! cargo run --release -p buddyfree --example global_alloc
//! ```

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use buddyfree::heap::GlobalHeap;
use buddyfree::registry::{self, DynAlloc};
use buddyfree::{Config, Error};

/// The allocator serving the heap, by registry name (any of `buddybench --list` that serves
/// order 14).
const BACKEND: &str = "nbbs4";

/// 2^16 units of 32 bytes: a 2 MiB heap whose largest block is 2^14 units (512 KiB).
const UNIT: usize = 32;
const UNITS: usize = 1 << 16;
const MAX_ORDER: u32 = 14;
const THREADS: usize = 4;

fn backend(config: Config) -> Result<DynAlloc, Error> {
    let entry = registry::find(BACKEND).expect("BACKEND names a registered allocator");
    (entry.build)(config)
}

#[global_allocator]
static HEAP: GlobalHeap<DynAlloc> = GlobalHeap::new(
    UNIT,
    Config::new(UNITS, MAX_ORDER).with_cores(THREADS),
    backend,
);

/// A word-frequency count, an index of words by length and a sort, over text generated from
/// `seed`: strings, vectors and two kinds of map, growing and shrinking.
fn workload(seed: u64, words: usize) -> (usize, usize, u64) {
    let mut x = seed | 1;
    let mut text = String::new();
    for _ in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % 9) as usize;
        let word: String = (0..len)
            .map(|i| (b'a' + ((x >> (i * 5)) % 6) as u8) as char)
            .collect();
        text.push_str(&word);
        text.push(' ');
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for w in text.split_whitespace() {
        *counts.entry(w.to_owned()).or_default() += 1;
    }
    let mut by_len: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for w in counts.keys() {
        by_len.entry(w.len()).or_default().push(w);
    }
    let mut sorted: Vec<(&String, &usize)> = counts.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let checksum = sorted
        .iter()
        .take(100)
        .fold(0u64, |h, (w, c)| h.rotate_left(5) ^ (w.len() * **c) as u64);
    (counts.len(), by_len.len(), checksum)
}

fn main() {
    let start = Instant::now();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || {
                    (0..5)
                        .map(|r| workload((t * 5 + r) as u64, 4000))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let elapsed = start.elapsed();
    let distinct: usize = results.iter().map(|r| r.0).sum();
    let heap = HEAP.heap().expect("the heap was built on first use");
    let boxed = Box::new(42u64);
    assert!(heap.contains(&*boxed as *const u64 as *const u8));
    println!(
        "{BACKEND}: {} workloads on {THREADS} threads in {elapsed:.2?}, {distinct} distinct words",
        results.len()
    );
    println!(
        "heap: {} of {} units free, {} metadata allocations served by System, {} bad frees",
        heap.allocator().free_units(),
        heap.allocator().total_units(),
        HEAP.fallbacks(),
        heap.bad_frees()
    );
}
