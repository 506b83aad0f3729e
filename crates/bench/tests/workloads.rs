//! Each workload does exactly the operations its definition says, with no failure and no
//! rejected free when memory suffices, and leaves the allocator whole. Counted by a wrapper
//! around the reference model (correct, slow: hence the tiny sizes).

mod common;

use buddybench::allocs::{AllocSpec, Lock};
use buddybench::workloads::{
    self, llfree::allocs_per_thread, Outcome, Params, Stop, Suite, Workload,
};
use buddyfree::{BlockAlloc, Config};
use common::Counting;

/// Runs `w` on a counted `model` (or `system`) and checks the totals against the outcome,
/// no failures, no rejected frees, everything freed. Returns the outcome.
fn run(alloc: &str, w: Workload, order: u32, threads: usize, units: usize) -> (Outcome, Counting) {
    let c = Counting::new(alloc, units, threads);
    let out = workloads::run(w, &c, order, threads, &Params::quick());
    let (allocs, frees, failures) = c.counts();
    assert_eq!((out.allocs, out.frees), (allocs, frees), "{}", w.name());
    assert_eq!((out.failures, failures), (0, 0), "{}", w.name());
    assert_eq!(out.bad_frees, 0, "{}", w.name());
    assert_eq!(allocs, frees, "{}: everything is freed", w.name());
    let calls = w.calls(order, threads, units, &Params::quick());
    assert_eq!(calls, Some(allocs + frees), "{}: the estimate", w.name());
    c.assert_whole(units);
    (out, c)
}

fn ops(out: &Outcome) -> Vec<(&'static str, u64)> {
    out.phases.iter().map(|p| (p.name, p.ops)).collect()
}

const UNITS: usize = 4096;

#[test]
fn linux_scalability_counts() {
    let p = Params::quick();
    for (order, threads) in [(0, 1), (1, 2), (3, 2)] {
        let k = 1u64 << order;
        let burst = p.ls_burst_units as u64 / k;
        let per_thread = 2 * k * burst;
        let (out, c) = run("model", Workload::LinuxScalability, order, threads, UNITS);
        assert_eq!(c.counts().0, threads as u64 * per_thread);
        assert_eq!(ops(&out), [("op", 2 * threads as u64 * per_thread)]);
        assert_eq!(out.phases[0].thread_times.len(), threads);
    }
}

/// With `held_bursts`, linux-scalability and thread-test make the same calls, each burst
/// inside one `with_core`; without it, none.
#[test]
fn held_bursts_hold_a_core_once_per_burst() {
    for w in [Workload::LinuxScalability, Workload::ThreadTest] {
        for held_bursts in [false, true] {
            let p = Params {
                held_bursts,
                ..Params::quick()
            };
            let (order, threads) = (1, 2);
            let c = Counting::new("model", UNITS, threads);
            let out = workloads::run(w, &c, order, threads, &p);
            let plain = run("model", w, order, threads, UNITS).0;
            assert_eq!((out.allocs, out.frees), (plain.allocs, plain.frees));
            assert_eq!((out.failures, out.bad_frees), (0, 0));
            c.assert_whole(UNITS);
            let k = 1u64 << order;
            let rounds = match w {
                Workload::LinuxScalability => 2 * k,
                _ => p.tt_repeats as u64 * k,
            };
            let bursts = match held_bursts {
                true => threads as u64 * rounds,
                false => 0,
            };
            assert_eq!(c.holds(), bursts, "{}", w.name());
        }
    }
}

/// Bursts on held cores through the magazines (their pinned path) and the rest: no failure,
/// no rejected free, and every allocator whole afterwards.
#[test]
fn held_bursts_leave_every_allocator_whole() {
    let p = Params {
        held_bursts: true,
        ..Params::quick()
    };
    for name in [
        "llfree-magazine",
        "nbbs4-magazine",
        "linux",
        "knuth-locked",
        "llfree",
    ] {
        for order in [0, 6] {
            let alloc = AllocSpec::find(name)
                .unwrap()
                .build(Config::new(UNITS, 10).with_cores(2), Lock::Ticket)
                .unwrap();
            let out = workloads::run(Workload::ThreadTest, &*alloc, order, 2, &p);
            assert_eq!((out.failures, out.bad_frees), (0, 0), "{name}");
            alloc.drain();
            assert_eq!(alloc.free_units(), UNITS, "{name}");
        }
    }
}

#[test]
fn thread_test_counts() {
    let p = Params::quick();
    for (order, threads) in [(0, 1), (1, 2), (2, 3)] {
        let k = 1u64 << order;
        let burst = (p.tt_burst_units as u64 / threads as u64 / k).max(1);
        let per_thread = p.tt_repeats as u64 * k * burst;
        let (out, c) = run("model", Workload::ThreadTest, order, threads, UNITS);
        assert_eq!(c.counts().0, threads as u64 * per_thread);
        assert_eq!(ops(&out), [("op", 2 * threads as u64 * per_thread)]);
    }
}

#[test]
fn larson_counts_with_successor_threads() {
    let p = Params::quick();
    let Stop::Generations(g) = p.larson_stop else {
        panic!("quick Larson runs a fixed number of generations")
    };
    for (order, threads) in [(0, 1), (1, 2)] {
        let (out, c) = run("model", Workload::Larson, order, threads, UNITS);
        let t = threads as u64;
        let steps = (g * p.larson_steps) as u64;
        // Each step frees one block and allocates one; the pool is filled before and
        // emptied after the timed part.
        assert_eq!(ops(&out), [("op", 2 * t * steps)]);
        assert_eq!(c.counts().0, t * (p.larson_chunks as u64 + steps));
    }
}

#[test]
fn constant_occupancy_counts() {
    let p = Params::quick();
    for (order, threads) in [(0, 1), (2, 2)] {
        let (out, c) = run("model", Workload::ConstantOccupancy, order, threads, UNITS);
        let t = threads as u64;
        let steps = (p.co_steps / threads) as u64;
        // 1 + 2 + 4 + 8 + 16 = 31 blocks, then one free and one alloc per step.
        assert_eq!(ops(&out), [("op", t * (31 + 2 * steps))]);
        assert_eq!(c.counts().0, t * (31 + steps));
    }
}

#[test]
fn cached_counts() {
    let p = Params::quick();
    for (order, threads) in [(0, 1), (4, 2)] {
        let (out, c) = run("model", Workload::Cached, order, threads, UNITS);
        let t = threads as u64;
        assert_eq!(ops(&out), [("op", 2 * t * p.cached_pairs as u64)]);
        assert_eq!(c.counts().0, t * p.cached_pairs as u64);
    }
}

#[test]
fn bulk_counts_half_the_work() {
    for (order, threads) in [(0, 1), (0, 2), (9, 2)] {
        let work = Params::quick().llfree_units;
        let n = (allocs_per_thread(work, threads, order) * threads) as u64;
        let (out, c) = run("model", Workload::Bulk, order, threads, UNITS);
        assert_eq!(ops(&out), [("get", n), ("put", n)]);
        assert_eq!(c.counts().0, n);
        assert_eq!(n << order, work as u64 / 2);
    }
}

#[test]
fn repeat_counts_pairs() {
    for (order, threads) in [(0, 1), (3, 2)] {
        let work = Params::quick().llfree_units;
        let n = (allocs_per_thread(work, threads, order) * threads) as u64;
        let (out, c) = run("model", Workload::Repeat, order, threads, UNITS);
        assert_eq!(ops(&out), [("get+put", n)]);
        assert_eq!(c.counts().0, 2 * n);
    }
}

#[test]
fn rand_counts_puts() {
    for (order, threads) in [(0, 1), (0, 3), (9, 2)] {
        let work = Params::quick().llfree_units;
        let n = (allocs_per_thread(work, threads, order) * threads) as u64;
        let (out, c) = run("model", Workload::Rand, order, threads, UNITS);
        assert_eq!(ops(&out), [("put", n)]);
        assert_eq!(c.counts().0, n);
    }
}

#[test]
fn frag_counts_rounds_and_measures_each() {
    let p = Params::quick();
    let units = 8 * 512;
    for threads in [1, 2] {
        let (out, c) = run("model", Workload::Frag, 0, threads, units);
        let t = threads as u64;
        let n = (units * 9 / 10 / threads) as u64;
        let held = n / 2;
        let per_round = held / 10;
        assert_eq!(
            ops(&out),
            [("op", 2 * t * per_round * p.frag_rounds as u64)]
        );
        assert_eq!(c.counts().0, t * (n + per_round * p.frag_rounds as u64));
        assert_eq!(out.frag.len(), p.frag_rounds + 1);
        for f in &out.frag {
            assert_eq!(f.frames, 8);
            assert_eq!(f.free_units, units - (t * held) as usize);
            assert_eq!(f.possible_frames, f.free_units / 512);
            assert!(f.free_frames <= f.possible_frames);
        }
    }
}

/// frag with a share of unmovable allocations: the same calls as without, about that share
/// of them through `alloc_class(.., UNMOVABLE, ..)`, and per measurement a recovery that agrees
/// with the fragmentation; with none unmovable, compaction recovers what it could anyway.
#[test]
fn frag_with_unmovable_allocations_reports_what_compaction_can_recover() {
    let units = 32 * 512;
    for alloc in ["model", "linux-migrate"] {
        for unmovable in [0, 30] {
            let p = Params {
                frag_unmovable_percent: unmovable,
                ..Params::quick()
            };
            let c = Counting::new(alloc, units, 1);
            let out = workloads::run(Workload::Frag, &c, 0, 1, &p);
            let (allocs, frees, failures) = c.counts();
            assert_eq!((out.allocs, out.frees), (allocs, frees), "{alloc}");
            assert_eq!(
                (out.failures, failures, out.bad_frees),
                (0, 0, 0),
                "{alloc}"
            );
            assert_eq!(Some(allocs + frees), Workload::Frag.calls(0, 1, units, &p));
            c.assert_whole(units);
            let share = c.unmovable() * 100 / allocs;
            match unmovable {
                0 => assert_eq!(c.unmovable(), 0),
                _ => assert!((25..=35).contains(&share), "{alloc}: {share}% unmovable"),
            }
            assert_eq!(out.frag.len(), p.frag_rounds + 1);
            assert_eq!(out.recovery.len(), out.frag.len());
            for (f, r) in out.frag.iter().zip(&out.recovery) {
                assert!(r.unpinned_frames <= f.frames, "{alloc}");
                assert_eq!(
                    r.recoverable_frames,
                    r.unpinned_frames.min(f.possible_frames),
                    "{alloc}"
                );
                assert!(f.free_frames <= r.recoverable_frames, "{alloc}");
                if r.recoverable_frames == f.possible_frames {
                    assert!(r.recovery_cost >= f.compaction_cost, "{alloc}");
                }
                if unmovable == 0 {
                    assert_eq!(r.unpinned_frames, f.frames, "{alloc}");
                    assert_eq!(r.recovery_cost, f.compaction_cost, "{alloc}");
                }
            }
        }
    }
}

/// The claim the experiment tests, small: an allocator that keeps unmovable frames apart
/// (`linux-migrate`) leaves compaction more huge frames to recover than one that ignores the
/// class (the first-fit `model`, which spreads them over every frame it fills).
#[test]
fn frag_recovers_more_where_unmovable_frames_are_kept_apart() {
    let units = 32 * 512;
    let p = Params {
        frag_unmovable_percent: 10,
        ..Params::quick()
    };
    let recoverable = |alloc| {
        let c = Counting::new(alloc, units, 1);
        let out = workloads::run(Workload::Frag, &c, 0, 1, &p);
        out.recovery.last().unwrap().recoverable_frames
    };
    let (apart, mixed) = (recoverable("linux-migrate"), recoverable("model"));
    assert!(apart > mixed, "linux-migrate {apart}, model {mixed}");
}

#[test]
fn frag_follows_its_seed() {
    let frag = |seed| {
        let p = Params {
            seed,
            ..Params::quick()
        };
        let c = Counting::new("model", 8 * 512, 1);
        workloads::run(Workload::Frag, &c, 0, 1, &p).frag
    };
    assert_eq!(frag(1), frag(1));
    assert_ne!(frag(1), frag(2));
}

#[test]
fn system_runs_the_size_based_workloads() {
    // The real-time workloads have their own counts (tests/realtime.rs).
    for w in Workload::ALL
        .into_iter()
        .filter(|w| !w.needs_region() && w.suite() != Suite::Realtime)
    {
        run("system", w, 1, 2, UNITS);
    }
}

#[test]
fn failures_are_counted_not_fatal() {
    // Bursts of 16 blocks of 4 units into a heap of 32 units: in each of the 2k = 8 rounds,
    // 8 allocations succeed and 8 fail.
    let c = Counting::with("model", Config::new(32, 2));
    let mut p = Params::quick();
    p.ls_burst_units = 64;
    let out = workloads::run(Workload::LinuxScalability, &c, 2, 1, &p);
    assert_eq!(c.counts(), (8 * 16, 8 * 8, 8 * 8));
    assert_eq!((out.allocs, out.frees, out.failures), c.counts());
    assert_eq!(out.bad_frees, 0);
    assert_eq!(ops(&out), [("op", 8 * 16 + 8 * 8)]);
    assert_eq!(c.free_units(), 32);
}

#[test]
fn full_heap_counts_its_failing_requests_as_failures() {
    let p = Params::quick();
    let n = p.full_heap_fails as u64;
    for (alloc, order, threads) in [
        ("model", 0, 1),
        ("model", 9, 1),
        ("model", 2, 2),
        ("nbbs", 0, 1),
        ("nbbs4", 9, 1),
        ("llfree", 0, 1),
    ] {
        let c = Counting::new(alloc, UNITS, threads);
        let out = workloads::run(Workload::FullHeap, &c, order, threads, &p);
        let t = threads as u64;
        let blocks = (UNITS >> order) as u64;
        // The fill: every block of the heap and one failure per thread; then the failing
        // requests, timed; then the blocks freed.
        // Then, with half the blocks back, requests of twice the size, which fail too; then
        // the reclaim loop: a block freed and a huge frame asked for, at most `m` times per
        // thread, below the order of a huge frame.
        let what = format!("{alloc} order {order} x{threads}");
        let m = n.min(2000);
        let (phases, requests): (Vec<_>, Vec<_>) = ops(&out).into_iter().unzip();
        assert_eq!(
            phases,
            ["fail 4K", "fail 2M", "fail 2k", "reclaim"],
            "{what}"
        );
        assert_eq!(requests[..3], [t * n, t * n, t * m], "{what}");
        let tries = requests[3];
        // Frames the reclaim loop got are freed with the rest.
        let (allocs, frees, failures) = c.counts();
        let won = frees - blocks;
        assert!(won <= tries, "{what}");
        assert_eq!(failures, t + 2 * t * n + t * m + tries - won, "{what}");
        assert_eq!(allocs, blocks + failures + won, "{what}");
        assert_eq!(
            (out.allocs, out.frees, out.failures, out.bad_frees),
            (allocs, frees, failures, 0),
            "{what}"
        );
        let calls = Workload::FullHeap.calls(order, threads, UNITS, &p);
        if threads == 1 {
            // One thread holds half the heap: every try is made, and none of the 8 frames of
            // the heap is whole again after `m` blocks freed round them.
            let made = if (order as usize) < 9 { m } else { 0 };
            assert_eq!((tries, won), (made, 0), "{what}");
            assert_eq!(calls, Some(allocs + frees), "{what}: the estimate");
        } else {
            assert!(tries <= t * m, "{what}");
        }
        c.assert_whole(UNITS);
    }
}
