//! LLFree against the battery (model differential, stress, racing double frees), plus the
//! dedicated order-7/8 hammer on one huge frame and the bad-free cases a bit field alone
//! cannot tell apart.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use buddyfree::llfree::{LLFree, Options};
use buddyfree::magazine::Magazine;
use buddyfree::{BlockAlloc, Config, ConfigRule, Error};
use common::Rng;
use proptest::prelude::*;

/// Trees of 2 huge frames (1024 units), so small heaps have several trees.
fn small_trees() -> Options {
    Options::default().with_tree_children(2)
}

fn llfree(config: Config, options: Options) -> LLFree {
    LLFree::builder(config).options(options).build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_model_on_four_trees_all_orders(ops in common::ops(4096, 10, 300)) {
        let config = Config::new(4096, 10);
        common::check_against_model(&llfree(config, small_trees()), config, &ops);
    }

    #[test]
    fn matches_model_on_three_trees_with_two_cores(ops in common::ops(3072, 10, 300)) {
        let config = Config::new(3072, 10).with_cores(2);
        common::check_against_model(&llfree(config, small_trees()), config, &ops);
    }

    #[test]
    fn matches_model_with_a_partial_last_frame(ops in common::ops(1700, 9, 300)) {
        let config = Config::new(1700, 9);
        common::check_against_model(&llfree(config, small_trees()), config, &ops);
    }

    #[test]
    fn matches_model_with_paper_trees_and_high_orders(ops in common::ops(2048, 10, 200).prop_map(|mut ops| {
        // Bias towards orders 6..=10, where several words or children take part.
        for op in &mut ops {
            if let common::Op::Alloc(o) = op {
                *o = (*o + 6).min(11);
            }
        }
        ops
    })) {
        let config = Config::new(2048, 10);
        common::check_against_model(&LLFree::new(config).unwrap(), config, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_model_with_three_cores_and_small_trees(ops in common::ops(4096, 10, 300)) {
        // The battery rotates the core hint over three cores: several reservations, steals
        // and frees into other cores' trees.
        let config = Config::new(4096, 10).with_cores(3);
        common::check_against_model(&llfree(config, small_trees()), config, &ops);
    }
}

#[test]
fn tells_apart_blocks_a_bit_field_cannot() {
    let alloc = llfree(Config::new(4096, 10), small_trees());
    // Eight order-0 blocks look like one order-3 block in the bit field.
    let small: Vec<usize> = (0..8).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    assert_eq!(small, (0..8).collect::<Vec<_>>());
    assert_eq!(alloc.free(0, 3, 0), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(0, 1, 0), Err(Error::OrderMismatch));
    let b = alloc.alloc(3, 0).unwrap();
    assert_eq!(b, 8);
    assert_eq!(alloc.free(8, 0, 0), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(9, 0, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(8, 4, 0), Err(Error::Misaligned));
    assert_eq!(alloc.free(8, 2, 0), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(12, 2, 0), Err(Error::NotAllocated));
    let c = alloc.alloc(7, 0).unwrap();
    assert_eq!(alloc.free(c + 64, 6, 0), Err(Error::NotAllocated));
    let want = if c.is_multiple_of(256) {
        Error::OrderMismatch
    } else {
        Error::Misaligned
    };
    assert_eq!(alloc.free(c, 8, 0), Err(want));
    // Huge blocks live in the child entries only.
    let h = alloc.alloc(9, 0).unwrap();
    let p = alloc.alloc(10, 0).unwrap();
    assert_eq!(alloc.free(h, 0, 0), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(h + 1, 0, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(p, 9, 0), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(p + 512, 9, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(p + 512, 0, 0), Err(Error::NotAllocated));
    if h.is_multiple_of(1024) {
        assert_eq!(alloc.free(h, 10, 0), Err(Error::OrderMismatch));
    }
    assert_eq!(alloc.free(0, 10, 0), Err(Error::OrderMismatch));
    let free = alloc.free_units();
    for (i, o) in [(p, 10), (h, 9), (c, 7), (b, 3)] {
        alloc.free(i, o, 0).unwrap();
        assert_eq!(alloc.free(i, o, 0), Err(Error::NotAllocated));
    }
    for i in small {
        alloc.free(i, 0, 0).unwrap();
    }
    assert_eq!(free + 1024 + 512 + 128 + 8 + 8, alloc.free_units());
    common::assert_whole(&alloc);
}

#[test]
fn reports_free_units_per_huge_frame_and_tree() {
    let alloc = llfree(Config::new(4096 + 100, 10), small_trees());
    let free_huge = || alloc.free_per_huge().filter(|&f| f == 512).count();
    assert_eq!(
        alloc.free_per_huge().collect::<Vec<_>>(),
        [512, 512, 512, 512, 512, 512, 512, 512, 100]
    );
    assert_eq!(free_huge(), 8);
    assert_eq!(alloc.free_per_tree(), [1024, 1024, 1024, 1024, 100]);
    let a = alloc.alloc(0, 0).unwrap();
    let h = alloc.alloc(9, 0).unwrap();
    assert_eq!(free_huge(), 6);
    assert_eq!(alloc.free_per_huge().sum::<usize>(), 4096 + 100 - 513);
    assert_eq!(
        alloc.free_per_tree().iter().sum::<usize>(),
        alloc.free_units()
    );
    alloc.free(a, 0, 0).unwrap();
    alloc.free(h, 9, 0).unwrap();
    common::assert_whole(&alloc);
}

#[test]
fn rejects_configurations_it_cannot_serve() {
    let children = |tree_children| Options::default().with_tree_children(tree_children);
    let build = |max_order, n| {
        LLFree::builder(Config::new(1 << 14, max_order))
            .options(children(n))
            .build()
    };
    // Trees are found by shifting; an order-10 block needs two children in one tree.
    let children_rule = Some(Error::InvalidConfig(ConfigRule::TreeChildren));
    assert_eq!(build(9, 3).err(), children_rule);
    assert_eq!(build(10, 1).err(), children_rule);
    assert_eq!(build(9, 1 << 22).err(), children_rule);
    let mut permille = Options::default();
    permille.free_above_permille = usize::MAX;
    assert_eq!(
        LLFree::builder(Config::new(1 << 14, 9))
            .options(permille)
            .build()
            .err(),
        Some(Error::InvalidConfig(ConfigRule::Permille))
    );
    assert!(build(9, 1).is_ok());
    assert!(build(10, 2).is_ok());
    // Orders above 10 take whole trees at most: 2^(order - 9) children.
    assert!(build(12, 8).is_ok());
    assert_eq!(build(12, 4).err(), children_rule);
    assert!(LLFree::new(Config::new(1 << 14, 14)).is_ok());
    assert_eq!(
        LLFree::new(Config::new(1 << 16, 15)).err(),
        Some(Error::InvalidConfig(ConfigRule::OrderAboveAllocator))
    );
    assert!(LLFree::builder(Config::new(1 << 16, 16))
        .options(children(128))
        .build()
        .is_ok());
    assert_eq!(
        build(31, 1 << 21).err(),
        Some(Error::InvalidConfig(ConfigRule::OrderAboveAllocator))
    );
    assert_eq!(
        LLFree::new(Config::new(0, 0)).err(),
        Some(Error::InvalidConfig(ConfigRule::NoUnits))
    );
}

#[test]
fn survives_stress_with_all_orders() {
    let config = Config::new(1 << 14, 10).with_cores(4);
    let alloc = llfree(config, small_trees());
    assert!(common::stress(&alloc, 4, 40_000, 10) > 0);
}

#[test]
fn survives_stress_with_shared_cores_and_paper_trees() {
    // Two reservations for four threads: cores share them; one tree of 64 MiB... of 8 frames.
    let alloc = LLFree::new(Config::new(1 << 12, 10).with_cores(2)).unwrap();
    assert!(common::stress(&alloc, 4, 40_000, 10) > 0);
}

/// Bulk allocations of orders up to 8 (whole frames written with plain stores where the
/// frame is the caller's alone, compare-and-swap claims elsewhere) and owned bulk frees
/// (plain stores for orders 6..=8) mixed with single operations and bulk frees on four
/// threads over 8 huge frames, with and without a magazine in front: the ownership map
/// catches a unit handed out twice, and the allocator must be whole at the end.
#[test]
fn bulk_claims_of_whole_frames_and_owned_frees_share_no_unit() {
    for cores in [1, 4] {
        let config = Config::new(8 * 512, 8).with_cores(cores);
        common::bulk_stress_owned(&llfree(config, small_trees()), 4, 20_000, 8);
        let magazine = Magazine::new(config, llfree(config, small_trees())).unwrap();
        common::bulk_stress(&magazine, 4, 20_000, 8);
    }
}

#[test]
fn frees_each_block_once_under_racing_double_frees() {
    for order in [0, 1, 3, 6, 7, 8, 9, 10] {
        let alloc = llfree(Config::new(1 << 14, 10).with_cores(4), small_trees());
        let blocks = ((1 << 14) >> order).min(256) / 2;
        common::double_free_race(&alloc, 4, blocks, order);
    }
}

/// Threads allocating and freeing orders 7 and 8 on one huge frame: the multi-word protocol
/// under maximal contention. Each thread keeps its last block while it allocates the next
/// (so blocks live long enough for an overlap to be seen), and frees it after. Blocks are
/// stamped in an ownership map of the 4 order-7 slots; an overlap fails, and the frame must
/// be whole at the end.
#[test]
fn hammers_orders_7_and_8_on_one_huge_frame() {
    const THREADS: usize = 2;
    const OPS: usize = 4_000_000;
    // One reservation shared by both threads: they search the frame at the same time, rather
    // than taking turns stealing the only tree.
    let alloc = LLFree::new(Config::new(512, 8)).unwrap();
    // One slot per 128 units: an order-7 block owns one, an order-8 block two.
    let slots = common::Owners::new(4);
    let done = AtomicUsize::new(0);
    common::run_threads(THREADS, |t| {
        let mut rng = Rng::new(t as u64 + 7);
        let stamp = |i: usize, o: u32| ((t as u64) << 32 | (i as u64) << 4 | o as u64) + 1;
        let put = |(i, o): (usize, u32)| {
            slots.release(i >> 7, o - 7, stamp(i, o));
            alloc.free(i, o, 0).unwrap();
        };
        let mut held = None;
        let mut ops = 0;
        // Each thread does its own share, so that their runs overlap however loaded
        // the machine is.
        while ops < OPS / THREADS {
            let order = 7 + rng.below(2) as u32;
            match alloc.alloc(order, 0) {
                Ok(i) => {
                    slots.claim(i >> 7, order - 7, stamp(i, order));
                    ops += 1;
                    if let Some(old) = held.replace((i, order)) {
                        put(old);
                        ops += 1;
                    }
                }
                Err(e) => {
                    // The frame is full for this order (the other thread holds two
                    // blocks), or a racing claim got in the way: make room.
                    assert_eq!(e, Error::OutOfMemory);
                    if let Some(old) = held.take() {
                        put(old);
                        ops += 1;
                    }
                }
            }
        }
        if let Some(old) = held {
            put(old);
        }
        done.fetch_add(ops, Ordering::Relaxed);
    });
    assert!(done.into_inner() >= OPS);
    common::assert_whole(&alloc);
}

/// As above, with a third thread taking and returning single units of the same frame: its
/// units land in words a multi-word claim has checked but not yet set, the race that makes a
/// claim fail half-way. A claim that reported such a half-done block would overlap a unit.
#[test]
fn hammers_orders_7_and_8_against_order_0_on_one_huge_frame() {
    const ROUNDS: usize = 300_000;
    let alloc = LLFree::new(Config::new(512, 8)).unwrap();
    let owners = common::Owners::new(512);
    common::run_threads(3, |t| {
        let mut rng = Rng::new(t as u64 + 11);
        let mut held = std::collections::VecDeque::new();
        let keep = if t == 2 { 32 } else { 1 };
        let stamp = |i: usize, o: u32| ((t as u64) << 32 | (i as u64) << 4 | o as u64) + 1;
        for _ in 0..ROUNDS {
            let order = if t == 2 { 0 } else { 7 + rng.below(2) as u32 };
            if let Ok(i) = alloc.alloc(order, 0) {
                owners.claim(i, order, stamp(i, order));
                held.push_back((i, order));
            }
            if held.len() > keep || (held.len() == keep && rng.below(2) == 0) {
                let (i, o) = held.pop_front().unwrap();
                owners.release(i, o, stamp(i, o));
                alloc.free(i, o, 0).unwrap();
            }
        }
        for (i, o) in held {
            owners.release(i, o, stamp(i, o));
            alloc.free(i, o, 0).unwrap();
        }
    });
    common::assert_whole(&alloc);
}

/// `threads` threads (one core each) allocate and free orders 0..=2, each holding at most
/// `blocks` blocks and all together never a quarter of the units: at every instant some tree
/// has fewer units taken than it has aligned order-2 groups, so a free block of every order
/// asked for exists and no allocation may fail. Reservations change hands all the time (a
/// thread whose core holds no tree steals one), so this catches an allocation that gives up
/// while another core has a tree's count in its hands (reserving, installing, stealing,
/// syncing). Blocks are checked for overlaps, and the heap must be whole at the end. Returns
/// the number of failed allocations.
fn failures_while_mostly_free(
    alloc: &LLFree,
    threads: usize,
    steps: usize,
    blocks: usize,
) -> usize {
    const MAX_ORDER: u32 = 2;
    let units = alloc.total_units();
    // Units taken, counted before an allocation (so an allocation in flight is included).
    let budget = units / 4 - 1;
    let held = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let owners = common::Owners::new(units);
    common::run_threads(threads, |t| {
        let mut rng = Rng::new(0x5EED + t as u64);
        let mut mine: Vec<(usize, u32)> = Vec::new();
        let stamp = |i: usize| ((t as u64) << 32 | i as u64) + 1;
        let put = |(i, o): (usize, u32)| {
            owners.release(i, o, stamp(i));
            alloc.free(i, o, t).unwrap();
            held.fetch_sub(1 << o, Ordering::AcqRel);
        };
        for _ in 0..steps {
            let order = rng.below(MAX_ORDER as usize + 1) as u32;
            let n = 1 << order;
            let room = held.fetch_add(n, Ordering::AcqRel) + n <= budget;
            if !room || mine.len() >= blocks || (!mine.is_empty() && rng.below(2) == 0) {
                held.fetch_sub(n, Ordering::AcqRel);
                if !mine.is_empty() {
                    put(mine.swap_remove(rng.below(mine.len())));
                }
                continue;
            }
            match alloc.alloc(order, t) {
                Ok(i) => {
                    owners.claim(i, order, stamp(i));
                    mine.push((i, order));
                }
                Err(e) => {
                    assert_eq!(e, Error::OutOfMemory);
                    failed.fetch_add(1, Ordering::Relaxed);
                    held.fetch_sub(n, Ordering::AcqRel);
                }
            }
        }
        for block in mine {
            put(block);
        }
    });
    common::assert_whole(alloc);
    failed.into_inner()
}

/// Runs [`failures_while_mostly_free`] with 2 and 4 threads (a core each), few and many
/// blocks per thread, on heaps built by `build(cores)`; no allocation may fail.
fn never_fails_while_mostly_free(build: impl Fn(usize) -> LLFree) {
    for threads in [2, 4] {
        for blocks in [8, usize::MAX] {
            let alloc = build(threads);
            let failed = failures_while_mostly_free(&alloc, threads, 1_000_000, blocks);
            assert_eq!(
                failed, 0,
                "{threads} threads of at most {blocks} blocks: {failed} allocations failed"
            );
        }
    }
}

#[test]
fn never_fails_while_mostly_free_on_one_tree() {
    // 4 MiB: one tree of two huge frames, which the cores keep taking from each other.
    never_fails_while_mostly_free(|cores| {
        LLFree::new(Config::new(1024, 9).with_cores(cores)).unwrap()
    });
}

#[test]
fn never_fails_while_mostly_free_on_few_trees() {
    never_fails_while_mostly_free(|cores| {
        llfree(Config::new(2048, 9).with_cores(cores), small_trees())
    });
}

/// LLFree's per-huge-frame free counts feed the §5.6 fragmentation metrics directly. Four huge
/// frames: two taken whole, one with 100 single units taken, one free. 924 free units make one
/// possible huge frame, already free, so nothing needs moving; taking the free frame too leaves
/// 412 free units, less than a frame.
#[test]
fn free_counts_per_huge_frame_give_the_fragmentation_metrics() {
    let alloc = LLFree::new(Config::new(4 * 512, 9)).unwrap();
    let whole: Vec<usize> = (0..4).map(|_| alloc.alloc(9, 0).unwrap()).collect();
    for &i in &whole[2..] {
        alloc.free(i, 9, 0).unwrap();
    }
    let units: Vec<usize> = (0..100).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    let counts: Vec<usize> = alloc.free_per_huge().collect();
    let mut sorted = counts.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 0, 412, 512]);
    let f = buddyfree_baselines::stats::huge_fragmentation(&counts);
    assert_eq!((f.frames, f.free_units, f.free_frames), (4, 924, 1));
    assert_eq!((f.possible_frames, f.compaction_cost), (1, 0));

    let fourth = alloc.alloc(9, 0).unwrap();
    let f =
        buddyfree_baselines::stats::huge_fragmentation(&alloc.free_per_huge().collect::<Vec<_>>());
    assert_eq!(
        (
            f.free_units,
            f.free_frames,
            f.possible_frames,
            f.compaction_cost
        ),
        (412, 0, 0, 0)
    );
    for i in units {
        alloc.free(i, 0, 0).unwrap();
    }
    for i in whole[..2].iter().copied().chain([fourth]) {
        alloc.free(i, 9, 0).unwrap();
    }
    common::assert_whole(&alloc);
}

/// A reserved tree's free units can lie in two counters: its holder's, and the tree entry's
/// (frees by other cores). `alloc_at` of a free block larger than either part must still
/// succeed (found by the memory-map property test: it answered `Occupied`).
#[test]
fn alloc_at_counts_the_units_of_a_tree_split_between_its_holder_and_its_entry() {
    let alloc = LLFree::new(Config::new(64, 5).with_cores(2)).unwrap();
    // Core 0 reserves the only tree and takes 0..40 from its own counter.
    let taken: Vec<usize> = [3, 3, 4, 3]
        .iter()
        .map(|&order| alloc.alloc(order, 0).unwrap())
        .collect();
    assert_eq!(taken, [0, 8, 16, 32]);
    // Core 1 does not hold the tree: its free goes to the tree entry. 32..64 is free now,
    // 24 units counted by core 0 and 8 by the entry.
    alloc.free(32, 3, 1).unwrap();
    assert_eq!(alloc.free_units(), 32);
    assert_eq!(alloc.alloc_at(32, 5, 1), Ok(()));
    assert_eq!(alloc.free_units(), 0);
    assert_eq!(alloc.alloc_at(0, 0, 1), Err(Error::Occupied));
    assert_eq!(alloc.block_of(40), Ok(Some((32, 5))));
}

/// Trees of 8 huge frames (4096 units): orders up to 12, a whole tree.
fn trees_of_8() -> Options {
    Options::default().with_tree_children(8)
}

/// The battery over orders 0..=12 on four trees of 8 frames (whole trees included): the
/// ownership map catches a unit handed out twice, and the allocator must be whole after.
#[test]
fn survives_stress_with_orders_up_to_a_whole_tree() {
    let config = Config::new(1 << 14, 12).with_cores(4);
    let alloc = llfree(config, trees_of_8());
    assert!(common::stress(&alloc, 4, 40_000, 12) > 0);
    // The paper's trees: orders up to 14 on two trees of 32 frames.
    let alloc = LLFree::new(Config::new(1 << 15, 14).with_cores(2)).unwrap();
    assert_eq!(alloc.max_order(), 14);
    assert!(common::stress(&alloc, 4, 20_000, 14) > 0);
}

/// Threads that allocate mostly whole frames and spans (orders 9..=12: one frame, a pair,
/// half a tree, a whole tree), with order-0 and order-3 blocks among them, on sixteen trees of
/// 8 frames, by `alloc` and by `alloc_at` at random aligned places: every block stamped in
/// the ownership map, each thread holding a few at a time and leaving some for another
/// thread to free, so claims race claims of overlapping spans and small allocations in
/// their frames. At the end every block is freed and the allocator must be whole.
#[test]
fn span_claims_racing_each_other_and_small_blocks_share_no_unit() {
    const THREADS: usize = 4;
    const UNITS: usize = 1 << 16;
    let alloc = llfree(Config::new(UNITS, 12).with_cores(THREADS), trees_of_8());
    let owners = common::Owners::new(UNITS);
    // Blocks one thread leaves for whichever thread comes next to free. A spin lock, which
    // ThreadSanitizer sees (it does not see into the uninstrumented std's `Mutex`).
    let handoff = spin::Mutex::new(Vec::new());
    let spans = AtomicUsize::new(0);
    common::run_threads(THREADS, |t| {
        let mut rng = Rng::new(t as u64 + 41);
        let mut mine: Vec<(usize, u32)> = Vec::new();
        let free = |(index, order): (usize, u32), core: usize| {
            owners.release(index, order, common::stamp(index, order));
            alloc.free(index, order, core).unwrap();
        };
        for _ in 0..10_000 {
            let order = [0, 3, 9, 10, 11, 11, 11, 12, 12, 12][rng.below(10)];
            let got = match rng.below(3) {
                0 => {
                    let index = rng.below(UNITS) & !((1 << order) - 1);
                    alloc.alloc_at(index, order, t).ok().map(|()| index)
                }
                _ => alloc.alloc(order, t).ok(),
            };
            if let Some(index) = got {
                owners.claim(index, order, common::stamp(index, order));
                assert_eq!(
                    alloc.block_of(index + (1 << order) - 1),
                    Ok(Some((index, order)))
                );
                spans.fetch_add(usize::from(order > 10), Ordering::Relaxed);
                mine.push((index, order));
            }
            if mine.len() > 1 || (got.is_none() && !mine.is_empty()) {
                let block = mine.swap_remove(rng.below(mine.len()));
                if rng.below(2) == 0 {
                    handoff.lock().push(block);
                } else {
                    free(block, t);
                }
            }
            if rng.below(2) == 0 {
                let theirs = std::mem::take(&mut *handoff.lock());
                theirs.into_iter().for_each(|b| free(b, t));
            }
        }
        mine.into_iter().for_each(|b| free(b, t));
    });
    for (index, order) in handoff.into_inner() {
        owners.release(index, order, common::stamp(index, order));
        alloc.free(index, order, 0).unwrap();
    }
    let spans = spans.into_inner();
    assert!(spans > 1000, "too few spans ({spans}) to test anything");
    common::assert_whole(&alloc);
}

/// Every bad free around spans gets its exact error and changes nothing: another order at a
/// span's start, a part of a span, a span's order where a huge frame, a pair or an order-0
/// block lives, twice. Then racing double frees of spans free each exactly once.
#[test]
fn bad_frees_of_spans_are_refused_exactly() {
    let alloc = llfree(Config::new(1 << 14, 12).with_cores(2), trees_of_8());
    // Tree 0 one whole block; tree 1: a pair, a huge frame, an order-0 unit, half a tree.
    let live = [(0, 12), (4096, 10), (5120, 9), (5637, 0), (6144, 11)];
    for (index, order) in live {
        alloc.alloc_at(index, order, 0).unwrap();
    }
    let free = alloc.free_units();
    let refused = [
        (0, 11, Error::OrderMismatch),
        (0, 10, Error::OrderMismatch),
        (0, 9, Error::OrderMismatch),
        (2048, 11, Error::NotAllocated),
        (1024, 10, Error::NotAllocated),
        (512, 9, Error::NotAllocated),
        (6144, 12, Error::Misaligned),
        (4096, 12, Error::OrderMismatch),
        (4096, 11, Error::OrderMismatch),
        (6144, 10, Error::OrderMismatch),
        (6144, 9, Error::OrderMismatch),
        (6144 + 1024, 10, Error::NotAllocated),
        (6144 + 512, 9, Error::NotAllocated),
        (4096 + 512, 9, Error::NotAllocated),
        (5632, 9, Error::NotAllocated),
        (5632, 0, Error::NotAllocated),
        (8192, 11, Error::NotAllocated),
        (0, 13, Error::BadOrder),
    ];
    for (index, order, want) in refused {
        assert_eq!(
            alloc.free(index, order, 0),
            Err(want),
            "free({index}, {order})"
        );
        assert_eq!(
            alloc.free_units(),
            free,
            "free({index}, {order}) changed the count"
        );
    }
    for (index, order) in live {
        assert_eq!(alloc.block_of(index), Ok(Some((index, order))));
        alloc.free(index, order, 0).unwrap();
        assert_eq!(alloc.free(index, order, 1), Err(Error::NotAllocated));
    }
    common::assert_whole(&alloc);
    for order in [11, 12] {
        common::double_free_race(&alloc, 4, (1 << 14) >> order, order);
    }
}
