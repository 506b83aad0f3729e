//! A kernel's reclaim loop on a fragmented heap (issue 57), not in the papers: the heap is
//! filled with blocks of `k` units and one block in every huge frame (2 MiB) is freed, so
//! that free units lie in every frame and none is whole. Then, per thread, one request of a
//! huge frame ("first 2M", which fails), and the loop a kernel under memory pressure runs:
//! free one block (of a few held ones, in turn), allocate a block of `k` units again (what the freed block's user does
//! next), ask for a huge frame, which fails ("re-take", time per try). The heap stays as
//! fragmented as it was, so every request should be refused, and whatever the heap's size,
//! as fast as the allocator can tell that no frame is whole.
//!
//! One pass per repetition (not repeated to last [`crate::suite::MIN_PHASE`]): "first 2M" is
//! a single request on a heap that takes seconds to fill at 16 GiB.

use std::time::Duration;

use buddyfree::BlockAlloc;
use buddyfree_baselines::stats::HUGE_FRAME_UNITS;

use super::counts::Counts;
use super::outcome::{phase, Outcome};
use super::params::Params;
use crate::runner::run_workers;

/// The huge request: one huge frame (2 MiB), order 9.
pub const LARGE: u32 = HUGE_FRAME_UNITS.trailing_zeros();

/// Tries of the loop per thread.
pub const TRIES: usize = 20_000;

/// The blocks the loop frees and takes back in turn: few, so that a try costs what the
/// allocator does to answer it, not cache misses on metadata spread over the heap (which
/// every allocator pays alike).
const ROUND: usize = 64;

/// The workload at `order` (below [`LARGE`]) with `threads` threads.
pub fn run(a: &dyn BlockAlloc, order: u32, threads: usize, _p: &Params) -> Outcome {
    let parts = run_workers(threads, |w| {
        let core = w.id;
        let mut setup = Counts::default();
        let most = (a.total_units() >> order) + 1;
        let mut held = Vec::with_capacity(most / threads + 1);
        for _ in 0..most {
            match setup.alloc(a, order, core) {
                Some(i) => held.push(i),
                None => break,
            }
        }
        w.sync();
        // The first block of every frame back (each thread frees those it holds).
        held.retain(|&i| match i % HUGE_FRAME_UNITS == 0 {
            true => {
                setup.free(a, i, order, core);
                false
            }
            false => true,
        });
        w.sync();
        let mut first = Counts::default();
        let (got, first_time) = w.timed(|| first.alloc(a, LARGE, core));
        let mut large = Vec::from_iter(got);
        w.sync();
        let mut c = Counts::default();
        let round = ROUND.min(held.len());
        // A thread that got no block (another filled the heap) has nothing to free.
        let tries = if round == 0 { 0 } else { TRIES };
        let ((), time) = w.timed(|| {
            for n in 0..tries {
                let at = n % round;
                setup.free(a, held[at], order, core);
                if let Some(i) = setup.alloc(a, order, core) {
                    held[at] = i;
                }
                if let Some(i) = c.alloc(a, LARGE, core) {
                    large.push(i);
                }
            }
        });
        w.sync();
        for &i in &held {
            setup.free(a, i, order, core);
        }
        for &i in &large {
            setup.free(a, i, LARGE, core);
        }
        (setup, (first, first_time), (c, time))
    });
    let first: Vec<(Counts, Duration)> = parts.iter().map(|p| p.1).collect();
    let retake: Vec<(Counts, Duration)> = parts.iter().map(|p| p.2).collect();
    let mut out = Outcome {
        phases: vec![phase("first 2M", &first), phase("re-take", &retake)],
        ..Outcome::default()
    };
    out.count(
        &parts
            .iter()
            .flat_map(|p| [p.0, p.1 .0, p.2 .0])
            .collect::<Vec<_>>(),
    );
    out
}
