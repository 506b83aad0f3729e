//! Estranged vs Knuth (§3.3): the share of requests served immediately, from a list of their
//! own order with no split or merge (the paper: ~90% for the estranged buddy, ~50% for
//! Knuth's), on a Java-like size mix, and the time per operation.
//!
//! The mix, in bytes mapped to orders of a 16-byte unit (JDK 1.1.8 allocates at least 16 B,
//! §3.4): 40% 16 B, 15% 24 B, 15% 32 B, 20% 40–64 B (8-byte steps), 10% large, 128 B–4 KiB
//! (powers of two, each as likely). The lifetimes follow occasional collection (§2.6):
//! bursts of 4096 allocations, each followed by a collection freeing a random 3/4 of what is
//! live. Both allocators see the same sequence (same seed); they run sequentially, without a
//! lock, built as concrete types to read their counters.

use buddyfree::buddy::{Estranged, Knuth};
use buddyfree::{Config, Error, SeqBlockAlloc};

pub use super::samples::ShareSample;

use super::clock::Clock;
use crate::workloads::counts::Counts;
use crate::workloads::outcome::Outcome;
use crate::workloads::params::{Params, SHARE_BURST};
use crate::workloads::rng::Rng;
/// The largest order the heaps are built for: 64 KiB blocks.
const MAX_ORDER: u32 = 12;

/// The order of a request drawn from the mix.
#[inline(always)]
pub fn java_order(rng: &mut Rng) -> u32 {
    let bytes = match rng.below(100) {
        0..40 => 16,
        40..55 => 24,
        55..70 => 32,
        70..90 => 40 + 8 * rng.below(4),
        _ => 128 << rng.below(6),
    };
    bytes.div_ceil(16).next_power_of_two().ilog2()
}

/// What [`mix`] measured: the calls and the summed times of the allocations and the frees.
struct Mixed {
    counts: Counts,
    alloc_ns: u64,
    free_ns: u64,
    /// Frees of the collections (the last survivors are freed untimed).
    timed_frees: u64,
}

/// Runs the mix on `a`: `requests` allocations in bursts, each followed by a collection.
fn mix<A: SeqBlockAlloc>(a: &mut A, requests: usize, seed: u64, clock: Clock) -> Mixed {
    let mut rng = Rng::new(seed, 0x5a);
    let mut m = Mixed {
        counts: Counts::default(),
        alloc_ns: 0,
        free_ns: 0,
        timed_frees: 0,
    };
    let mut live: Vec<(usize, u32)> = Vec::new();
    let mut orders = Vec::with_capacity(SHARE_BURST);
    let mut left = requests;
    while left > 0 {
        let burst = left.min(SHARE_BURST);
        left -= burst;
        orders.clear();
        orders.extend((0..burst).map(|_| java_order(&mut rng)));
        // Room for the whole burst, so that no reallocation falls in the timed part.
        live.reserve(burst);
        let (failed, ns) = clock.time(|| {
            let mut failed = 0;
            for &o in &orders {
                match a.alloc(o) {
                    Ok(i) => live.push((i, o)),
                    Err(_) => failed += 1,
                }
            }
            failed
        });
        m.counts.allocs += burst as u64;
        m.counts.failures += failed;
        m.alloc_ns += ns;
        rng.shuffle(&mut live);
        let dead = live.len() - live.len() / 4;
        let (bad, ns) = clock.time(|| {
            live.drain(..dead)
                .filter(|&(i, o)| a.free(i, o).is_err())
                .count()
        });
        m.counts.frees += dead as u64;
        m.timed_frees += dead as u64;
        m.counts.bad_frees += bad as u64;
        m.free_ns += ns;
    }
    for (i, o) in live {
        m.counts.frees += 1;
        if a.free(i, o).is_err() {
            m.counts.bad_frees += 1;
        }
    }
    m
}

fn sample(
    alloc: &'static str,
    m: &Mixed,
    immediate: u64,
    served_by: Vec<(&'static str, u64)>,
    failed: u64,
) -> ShareSample {
    ShareSample {
        alloc,
        requests: m.counts.allocs,
        immediate,
        served_by,
        failed,
        frees: m.counts.frees,
        alloc_ns: m.alloc_ns as f64 / m.counts.allocs.max(1) as f64,
        free_ns: m.free_ns as f64 / m.timed_frees.max(1) as f64,
    }
}

/// Runs the mix on Knuth's and on the estranged buddy. No samples if the heap is empty.
pub fn run(p: &Params) -> Outcome {
    let mut out = Outcome::default();
    // Only an empty heap fails to build (the order is capped by the heap's size).
    let _ = run_both(p, &mut out);
    out
}

fn run_both(p: &Params, out: &mut Outcome) -> Result<(), Error> {
    let clock = Clock::get();
    let units = p.rt.share_units;
    let config = Config::new(units, MAX_ORDER.min(units.max(1).ilog2()));
    let requests = p.rt.share_requests;

    let mut knuth = Knuth::new(config)?;
    let m = mix(&mut knuth, requests, p.seed, clock);
    let s = knuth.stats();
    out.count(&[m.counts]);
    out.realtime.share.push(sample(
        "knuth",
        &m,
        s.immediate,
        vec![("immediate", s.immediate), ("split", s.split)],
        s.failed,
    ));

    let mut estranged = Estranged::new(config)?;
    let m = mix(&mut estranged, requests, p.seed, clock);
    let s = estranged.stats();
    out.count(&[m.counts]);
    out.realtime.share.push(sample(
        "estranged",
        &m,
        s.immediate(),
        vec![
            ("buddy-busy", s.buddy_busy),
            ("buddy-free", s.buddy_free),
            ("glue-halves", s.glue_halves),
            ("split", s.split),
            ("glue-up", s.glue_up),
        ],
        s.failed,
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_mostly_small() {
        let mut rng = Rng::new(3, 4);
        let mut n = [0usize; 9];
        for _ in 0..10_000 {
            n[java_order(&mut rng) as usize] += 1;
        }
        // 16 B -> 0; 24, 32 B -> 1; 40-64 B -> 2; 128 B-4 KiB -> 3..=8.
        assert!(n[0].abs_diff(4000) < 300, "{n:?}");
        assert!(n[1].abs_diff(3000) < 300, "{n:?}");
        assert!(n[2].abs_diff(2000) < 300, "{n:?}");
        assert!(n[3..].iter().sum::<usize>().abs_diff(1000) < 200, "{n:?}");
    }
}
