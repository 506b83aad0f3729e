//! The real-time buddy paper's contrived case (§3.1), on any allocator:
//!
//! 1. `N` blocks of `k` units fill most of a heap of `N + 4` blocks of `k` units;
//! 2. every other one of them, in address order, is freed, leaving `N/2` holes of `k` units
//!    whose neighbours are busy (for a buddy: whose buddies are busy, so none merge);
//! 3. one block of `2k` units is requested. It can only come from the 4-block remainder.
//!
//! The paper's prediction: an unstructured first-fit list walks past all `N/2` holes before
//! it reaches the remainder, so the request costs `O(N)` (its Fig. 8: 72 times slower than
//! the buddy, and "arbitrarily" slower as `N` grows), while a buddy finds a block on the list
//! of order `k + 1` or splits one from above in `O(log M)`, whatever `N`. Both succeed.
//!
//! The first request is timed alone (the paper's case); then it is freed and requested again
//! `contrived_requests - 1` times, each timed, for a steadier median.

use buddyfree::BlockAlloc;

pub use super::samples::ContrivedSample;

use super::clock::Clock;
use crate::workloads::counts::Counts;
use crate::workloads::outcome::Outcome;
use crate::workloads::params::Params;

/// Blocks beyond the `N` of the case: the remainder, room for one aligned block of `2k`
/// wherever the `N` blocks went.
const REMAINDER_BLOCKS: usize = 4;

/// The heap, in units, for `blocks` blocks of `k` units.
pub fn units_for(blocks: usize, k: usize) -> usize {
    (blocks + REMAINDER_BLOCKS) * k
}

/// The `N` of a heap of `units` units at `order`.
pub fn blocks_in(units: usize, order: u32) -> usize {
    (units >> order).saturating_sub(REMAINDER_BLOCKS)
}

/// Runs the case once on `a` (a fresh allocator over `units_for(N, 2^order)` units).
pub fn run(a: &dyn BlockAlloc, order: u32, p: &Params) -> Outcome {
    let clock = Clock::get();
    let blocks = blocks_in(a.total_units(), order);
    let mut c = Counts::default();
    let mut live: Vec<usize> = (0..blocks).filter_map(|_| c.alloc(a, order, 0)).collect();
    let allocated = live.len();
    live.sort_unstable();
    // Every other block in address order becomes a hole; the rest stay busy.
    let holes: Vec<usize> = live.iter().copied().step_by(2).collect();
    let kept: Vec<usize> = live.iter().copied().skip(1).step_by(2).collect();
    for &i in &holes {
        c.free(a, i, order, 0);
    }
    let mut times = Vec::with_capacity(p.rt.contrived_requests);
    let mut got = None;
    let mut holes_below = None;
    for n in 0..p.rt.contrived_requests.max(1) {
        if let Some(i) = got.take() {
            c.free(a, i, order + 1, 0);
        }
        let (r, ns) = clock.time(|| c.alloc(a, order + 1, 0));
        times.push(ns);
        if n == 0 {
            holes_below = r.map(|i| holes.iter().filter(|&&h| h < i).count());
        }
        got = r;
    }
    let ok = holes_below.is_some();
    if let Some(i) = got {
        c.free(a, i, order + 1, 0);
    }
    for i in kept {
        c.free(a, i, order, 0);
    }
    let first_ns = times[0];
    let max_ns = times.iter().copied().max().unwrap_or(0);
    times.sort_unstable();
    let mut out = Outcome::default();
    out.count(&[c]);
    out.realtime.contrived.push(ContrivedSample {
        blocks,
        allocated,
        holes: holes.len(),
        ok,
        holes_below,
        first_ns,
        median_ns: times[times.len() / 2],
        max_ns,
        requests: times.len(),
    });
    out
}
