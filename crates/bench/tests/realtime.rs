//! The real-time suite: each workload does exactly its operations, its histograms count
//! every one and are ordered, and its structural outcomes are the ones the real-time buddy
//! paper predicts (never a time).

mod common;

use buddybench::report::{table, write_all};
use buddybench::suite::{Plan, Request};
use buddybench::workloads::realtime::contrived::{self, units_for};
use buddybench::workloads::realtime::defrag::predicted_moves;
use buddybench::workloads::realtime::latency::{LatencySample, Op, Pattern};
use buddybench::workloads::realtime::run_standalone;
use buddybench::workloads::{self, Params, Workload};
use buddyfree::Config;
use common::{temp_dir, Counting};

fn assert_ordered(s: &LatencySample) {
    let t = s.times;
    assert!(
        t.p50 <= t.p99 && t.p99 <= t.p999 && t.p999 <= t.max,
        "{s:?}"
    );
    assert!(t.mean <= t.max as f64, "{s:?}");
}

/// Every alloc and free of the timed parts is in its histogram once; totals match the
/// allocator's own count and everything is freed.
#[test]
fn latency_times_every_operation_once() {
    let p = Params::quick();
    let rt = &p.rt;
    for alloc in ["knuth-locked", "first-fit-locked", "linux"] {
        for threads in [1, 2] {
            let c = Counting::new(alloc, rt.latency_units, threads);
            let out = workloads::run(Workload::Latency, &c, 0, threads, &p);
            let t = threads as u64;
            let steps = rt.latency_steps as u64;
            let larson = (rt.latency_larson_generations * p.larson_steps) as u64;
            let want = [
                (Pattern::ConstantOccupancy, Op::Alloc, t * (31 + steps)),
                (Pattern::ConstantOccupancy, Op::Free, t * steps),
                (Pattern::Larson, Op::Alloc, t * larson),
                (Pattern::Larson, Op::Free, t * larson),
                (Pattern::Fragmented, Op::Alloc, t * steps),
                (Pattern::Fragmented, Op::Free, t * steps),
            ];
            let got: Vec<_> = out
                .realtime
                .latency
                .iter()
                .map(|s| (s.pattern, s.op, s.times.count))
                .collect();
            assert_eq!(got, want, "{alloc} x{threads}");
            for s in &out.realtime.latency {
                assert_ordered(s);
                if s.pattern != Pattern::Fragmented {
                    assert_eq!(s.failures, 0, "{alloc}: {s:?}");
                }
            }
            let (allocs, frees, failures) = c.counts();
            assert_eq!(
                (out.allocs, out.frees, out.failures),
                (allocs, frees, failures)
            );
            assert_eq!(allocs - failures, frees, "{alloc}: everything is freed");
            assert_eq!(out.bad_frees, 0);
            c.assert_whole(rt.latency_units);
        }
    }
}

/// §3.1: both kinds succeed (the remainder holds a block of 2k); the first-fit list's
/// request lands above every hole, i.e. it walked past all N/2 of them (the paper's O(N)
/// search), which no timing is needed to see.
#[test]
fn contrived_first_fit_walks_past_every_hole() {
    let p = Params::quick();
    for &n in &p.rt.contrived_blocks {
        for order in [0, 2] {
            for alloc in [
                "first-fit-locked",
                "knuth-locked",
                "estranged-locked",
                "linux",
            ] {
                let units = units_for(n, 1 << order);
                let c = Counting::with(alloc, Config::new(units, order + 1));
                let out = workloads::run(Workload::Contrived, &c, order, 1, &p);
                let [s] = &out.realtime.contrived[..] else {
                    panic!("one sample per run: {:?}", out.realtime)
                };
                assert_eq!((s.blocks, s.allocated, s.holes), (n, n, n / 2), "{alloc}");
                assert!(s.ok, "{alloc}: the larger request fits in the remainder");
                assert_eq!(s.requests, p.rt.contrived_requests);
                assert!(s.first_ns <= s.max_ns && s.median_ns <= s.max_ns);
                if alloc == "first-fit-locked" {
                    assert_eq!(s.holes_below, Some(n / 2), "N = {n}, k = {}", 1 << order);
                }
                let (allocs, frees, failures) = c.counts();
                let requests = p.rt.contrived_requests as u64;
                assert_eq!((allocs, failures), (n as u64 + requests, 0), "{alloc}");
                assert_eq!(frees, allocs, "{alloc}: everything is freed");
                assert_eq!((out.allocs, out.frees), (allocs, frees));
                c.assert_whole(units);
                assert_eq!(contrived::blocks_in(units, order), n);
            }
        }
    }
}

/// The step counters of each allocator add up to its requests, immediate is the right sum,
/// and, as §3.3 found, delaying recombination serves more requests immediately.
#[test]
fn estranged_share_counters_add_up() {
    let p = Params::quick();
    let out = run_standalone(Workload::EstrangedShare, &p);
    let [knuth, estranged] = &out.realtime.share[..] else {
        panic!("two samples: {:?}", out.realtime)
    };
    assert_eq!((knuth.alloc, estranged.alloc), ("knuth", "estranged"));
    for s in [knuth, estranged] {
        let served: u64 = s.served_by.iter().map(|x| x.1).sum();
        assert_eq!(served + s.failed, s.requests, "{s:?}");
        assert_eq!(s.requests, p.rt.share_requests as u64);
        assert_eq!(s.failed, 0, "the heap is large enough: {s:?}");
        assert_eq!(s.frees, s.requests, "{s:?}");
        assert!(s.immediate <= s.requests);
    }
    let by = |s: &buddybench::workloads::realtime::share::ShareSample, n: &str| {
        s.served_by.iter().find(|x| x.0 == n).map(|x| x.1).unwrap()
    };
    assert_eq!(knuth.immediate, by(knuth, "immediate"));
    assert_eq!(
        estranged.immediate,
        by(estranged, "buddy-busy") + by(estranged, "buddy-free")
    );
    // Same request sequence for both; deterministic (fixed seed).
    assert!(estranged.immediate > knuth.immediate, "{out:?}");
    assert_eq!(
        (out.allocs, out.frees, out.bad_frees),
        (2 * knuth.requests, 2 * knuth.requests, 0)
    );
}

/// With every other unit busy, one request of order k moves exactly the 2^(k-1) busy units of
/// one block, on both buddies, and succeeds.
#[test]
fn defrag_moves_the_predicted_count() {
    let p = Params::quick();
    let out = run_standalone(Workload::Defrag, &p);
    assert_eq!(out.realtime.defrag.len(), 2 * p.rt.defrag_orders.len());
    for (s, &k) in out
        .realtime
        .defrag
        .iter()
        .zip(p.rt.defrag_orders.iter().flat_map(|k| [k, k]))
    {
        assert_eq!(s.order, k);
        assert!(s.ok, "{s:?}");
        assert_eq!(s.predicted, predicted_moves(k));
        assert_eq!(s.predicted, 1 << (k - 1));
        assert_eq!(
            (s.moves, s.units_moved),
            (s.predicted, s.predicted),
            "{s:?}"
        );
        assert_eq!(s.units, p.rt.defrag_units);
    }
    assert_eq!((out.failures, out.bad_frees), (0, 0));
    // Per order and allocator: fill every unit, free the even ones, one request.
    let runs = 2 * p.rt.defrag_orders.len() as u64;
    let units = p.rt.defrag_units as u64;
    assert_eq!(
        (out.allocs, out.frees),
        (runs * (units + 1), runs * units / 2)
    );
}

/// `--workload realtime` selects the four workloads; the standalone ones run once, the
/// others on every allocator; the report has every table, its latency counts those of the
/// runs.
#[test]
fn realtime_suite_runs_and_reports_every_table() {
    let plan = Plan::new(&Request {
        allocs: Some(vec!["knuth-locked".into(), "first-fit-locked".into()]),
        workloads: Some(vec!["realtime".into()]),
        threads: Some(vec![1]),
        reps: Some(2),
        quick: true,
        ..Request::default()
    })
    .unwrap();
    let p = plan.params.clone();
    let kinds: Vec<Workload> = plan.cases.iter().map(|c| c.workload).collect();
    let n = p.rt.contrived_blocks.len();
    let mut want = vec![Workload::Latency];
    want.extend(std::iter::repeat_n(Workload::Contrived, n));
    want.extend([Workload::EstrangedShare, Workload::Defrag]);
    assert_eq!(kinds, want);
    let report = plan.run(vec![]);
    let dir = temp_dir("rt");
    write_all(&report, &dir, false).unwrap();
    let lines = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(lines("latency.csv"), 1 + 2 * 6);
    assert_eq!(lines("contrived.csv"), 1 + 2 * n);
    assert_eq!(lines("share.csv"), 1 + 2);
    assert_eq!(lines("defrag.csv"), 1 + 2 * p.rt.defrag_orders.len());
    let _ = std::fs::remove_dir_all(&dir);
    let text = table::render(&report);
    for heading in [
        "\nlatency,",
        "\ncontrived (",
        "\nestranged vs Knuth",
        "\ndefrag (",
    ] {
        assert!(text.contains(heading), "{heading} missing from:\n{text}");
    }
    let r = report.realtime;
    assert_eq!(r.latency.len(), 2 * 6);
    assert_eq!(r.contrived.len(), 2 * n);
    assert_eq!(r.share.len(), 2);
    assert_eq!(r.defrag.len(), 2 * p.rt.defrag_orders.len());
    for l in &r.latency {
        assert_eq!(l.reps, 2);
        assert!(
            l.p50 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max,
            "{l:?}"
        );
    }
    for c in &r.contrived {
        assert_eq!(c.ok_reps, 2, "{c:?}");
    }
}
