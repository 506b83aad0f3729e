//! On-demand defragmentation (§2.8) at its worst: every other unit of the heap busy (all
//! blocks of order 0, the even units freed), so no block of order 1 or more is free although
//! half the heap is. One request of order `k` then needs `buddyfree::buddy::defrag` to move
//! the `2^(k-1)` busy units of one aligned block of `2^k` units into holes elsewhere: that
//! many moves, no more (its bound is `2^k - 1`). Knuth's and the estranged buddy, built as
//! concrete types; the relocation copies one word per unit (standing for the contents).

use buddyfree::buddy::{alloc_or_defrag, Defrag, Estranged, Knuth};
use buddyfree::{Config, Error};

pub use super::samples::DefragSample;

use super::clock::Clock;
use crate::workloads::counts::Counts;
use crate::workloads::outcome::Outcome;
use crate::workloads::params::Params;

/// Moves predicted on a heap with every other unit busy: the busy half of one block of
/// `2^order` units, one unit each.
pub fn predicted_moves(order: u32) -> usize {
    (1usize << order) / 2
}

/// Builds a heap of `units` units with every odd unit busy, then times one request of
/// `order`.
fn worst_case<A: Defrag>(
    build: fn(Config) -> Result<A, Error>,
    name: &'static str,
    units: usize,
    order: u32,
    c: &mut Counts,
) -> Result<DefragSample, Error> {
    // The same heap shape for every order: blocks of up to 4 MiB (order 10), as in the
    // other workloads, or the whole heap if smaller.
    let max_order = units.max(1).ilog2().min(10).max(order);
    let mut a = build(Config::new(units, max_order))?;
    let mut live: Vec<usize> = (0..units).filter_map(|_| a.alloc(0).ok()).collect();
    c.allocs += units as u64;
    c.failures += (units - live.len()) as u64;
    live.sort_unstable();
    for &i in live.iter().filter(|&&i| i % 2 == 0) {
        c.frees += 1;
        a.free(i, 0)?;
    }
    let mut memory: Vec<u64> = (0..units as u64).collect();
    let (r, ns) = Clock::get().time(|| {
        alloc_or_defrag(&mut a, order, |from, to, o| {
            memory.copy_within(from..from + (1 << o), to);
        })
    });
    c.allocs += 1;
    let sample = |ok, moves: &[buddyfree::buddy::Move]| DefragSample {
        alloc: name,
        order,
        units,
        ok,
        moves: moves.len(),
        units_moved: moves.iter().map(|m| 1usize << m.order).sum(),
        predicted: predicted_moves(order),
        ns,
    };
    Ok(match r {
        Ok((_, moves)) => sample(true, &moves),
        Err(_) => {
            c.failures += 1;
            sample(false, &[])
        }
    })
}

/// One defragmenting request per order of `defrag_orders` on Knuth's and the estranged
/// buddy. Orders whose block would not leave room for its units' holes (`2^(k+1)` units
/// above the heap) are skipped.
pub fn run(p: &Params) -> Outcome {
    let mut out = Outcome::default();
    let mut c = Counts::default();
    let units = p.rt.defrag_units;
    for &order in &p.rt.defrag_orders {
        if order >= usize::BITS - 1 || 2usize << order > units {
            continue;
        }
        for r in [
            worst_case(Knuth::new, "knuth", units, order, &mut c),
            worst_case(Estranged::new, "estranged", units, order, &mut c),
        ] {
            match r {
                Ok(s) => out.realtime.defrag.push(s),
                Err(_) => c.bad_frees += 1,
            }
        }
    }
    out.count(&[c]);
    out
}
