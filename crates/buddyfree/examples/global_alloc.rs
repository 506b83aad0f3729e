//! buddyfree as the program's `#[global_allocator]`: every `Box`, `Vec`, `String` and map
//! below, on every thread, lives in one buddy heap, and what the heap cannot serve (a
//! request above its largest block, or any request once it is full) goes to the system
//! allocator instead of failing.
//!
//! ```sh
//! cargo run --release -p buddyfree --example global_alloc
//! ```

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use buddyfree::heap::GlobalHeap;
use buddyfree::{BlockAlloc, Config, Nbbs4};

/// The allocator serving the heap. Any other works whose largest order is at least
/// [`MAX_ORDER`] (`buddybench --list`; with a smaller one the heap is never built and every
/// request goes to the system allocator).
type Backend = Nbbs4;
const BACKEND: &str = "nbbs4";

/// 2^20 units of 64 bytes: a 64 MiB heap (address space; only the pages used are touched)
/// whose largest block is 2^14 units (1 MiB). The workload below peaks at a few MiB across
/// its threads, so the heap serves all of it with room for power-of-two rounding.
const UNIT: usize = 64;
const UNITS: usize = 1 << 20;
const MAX_ORDER: u32 = 14;
const THREADS: usize = 4;
/// A request larger than the largest block: the heap refuses it and `System` serves it.
const HUGE: usize = 4 << 20;

// With the system fallback a request the heap refuses is served by `System` rather than
// returned as null, which would abort the program ("memory allocation failed").
#[global_allocator]
static HEAP: GlobalHeap<Backend> = GlobalHeap::with_system_fallback(
    UNIT,
    Config::new(UNITS, MAX_ORDER).with_cores(THREADS),
    Backend::new,
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
    assert_eq!(heap.bad_frees(), 0);

    // Above the largest block: served by the system allocator, counted as a fallback.
    let before = HEAP.fallbacks();
    let huge = vec![1u8; HUGE];
    assert!(!heap.contains(huge.as_ptr()));
    assert!(HEAP.fallbacks() > before);
    assert_eq!(huge.iter().map(|&b| b as usize).sum::<usize>(), HUGE);
    drop(huge);
    println!(
        "{BACKEND}: {} workloads on {THREADS} threads in {elapsed:.2?}, {distinct} distinct words",
        results.len()
    );
    println!(
        "heap: {} of {} units free, {} allocations served by System (metadata and refused requests), {} bad frees",
        heap.allocator().free_units(),
        heap.allocator().total_units(),
        HEAP.fallbacks(),
        heap.bad_frees()
    );
}
