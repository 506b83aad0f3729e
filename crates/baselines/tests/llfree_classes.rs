//! LLFree with classes of trees and trees taken on- and offline, across threads: mixed
//! classes and orders never share a unit nor lose one, an offline tree's frames are never
//! handed out, and `alloc_class` reaches LLFree's classes through the registry, magazines
//! and zones.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use buddyfree::llfree::{LLFree, Options, Policy, TreeState};
use buddyfree::magazine::Magazine;
use buddyfree::zones::{Zone, Zones};
use buddyfree::{BlockAlloc, Class, Config, Error};
use buddyfree_baselines::registry;
use common::{Owners, Rng};

const CLASSES: [Class; 4] = [Class::MOVABLE, Class::UNMOVABLE, Class::HUGE, Class::new(5)];

/// Trees of 1024 units (two huge frames), so small heaps have many.
fn small_trees() -> Options {
    Options::default().with_tree_children(2)
}

fn classed(units: usize, cores: usize, policy: Policy) -> LLFree {
    LLFree::builder(Config::new(units, 10).with_cores(cores))
        .options(small_trees())
        .policy(policy)
        .build()
        .unwrap()
}

/// A random order, small ones most often, huge ones for the huge class.
fn order_for(rng: &mut Rng, class: Class) -> u32 {
    match class {
        Class::HUGE => 9 + rng.below(2) as u32,
        _ => [0, 0, 0, 1, 2, 3, 5, 7, 9][rng.below(9)],
    }
}

/// `threads` threads allocate blocks of random classes and orders, stamp every unit in an
/// ownership map (an overlap panics), and free them again, some from other cores; at the
/// end everything is freed, the free units of the classes add up to all of them, and the
/// heap is whole (no unit lost).
fn mixed_classes_share_no_unit(alloc: &LLFree, threads: usize, steps: usize) {
    let owners = Owners::new(alloc.total_units());
    let served = AtomicUsize::new(0);
    common::run_threads(threads, |t| {
        let mut rng = Rng::new(0xC1A55 + t as u64);
        let mut mine: Vec<(usize, u32)> = Vec::new();
        for _ in 0..steps {
            if mine.len() < 24 && rng.below(3) != 0 {
                let class = CLASSES[rng.below(CLASSES.len())];
                let order = order_for(&mut rng, class);
                match alloc.alloc_class(order, class, t) {
                    Ok(i) => {
                        owners.claim(i, order, common::stamp(i, order));
                        mine.push((i, order));
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => assert_eq!(e, Error::OutOfMemory),
                }
            } else if !mine.is_empty() {
                let (i, o) = mine.swap_remove(rng.below(mine.len()));
                owners.release(i, o, common::stamp(i, o));
                alloc.free(i, o, t + rng.below(2)).unwrap();
            }
        }
        for (i, o) in mine {
            owners.release(i, o, common::stamp(i, o));
            alloc.free(i, o, t).unwrap();
        }
    });
    assert!(
        served.into_inner() > steps / 4,
        "too few allocations succeeded"
    );
    alloc.drain();
    let per_class: usize = (0..8).map(|c| alloc.free_units_of(Class::new(c))).sum();
    assert_eq!(per_class, alloc.free_units());
    common::assert_whole(alloc);
}

#[test]
fn mixed_classes_and_orders_share_no_unit() {
    for policy in [Policy::unmovable_movable_huge(), Policy::small_huge()] {
        // 8 trees for 4 threads: trees of every class, and steals once they are short.
        mixed_classes_share_no_unit(&classed(8 * 1024, 4, policy), 4, 20_000);
        // 3 trees and a partial frame for 3 threads: the classes fight for every tree.
        mixed_classes_share_no_unit(&classed(3 * 1024 + 300, 3, policy), 3, 20_000);
    }
}

/// Sequentially, an allocation of any class fails only when no free block of its order is
/// left anywhere: after random classes and orders, every unit is still handed out as an
/// order-0 block of any class before the first failure.
#[test]
fn a_full_heap_is_full_in_every_class() {
    let alloc = classed(6 * 1024 + 512, 3, Policy::unmovable_movable_huge());
    let mut rng = Rng::new(7);
    let mut live: Vec<(usize, u32)> = Vec::new();
    for _ in 0..200 {
        let class = CLASSES[rng.below(4)];
        let order = order_for(&mut rng, class);
        if let Ok(i) = alloc.alloc_class(order, class, rng.below(3)) {
            live.push((i, order));
        }
    }
    loop {
        let class = CLASSES[rng.below(4)];
        match alloc.alloc_class(0, class, rng.below(3)) {
            Ok(i) => live.push((i, 0)),
            Err(e) => {
                assert_eq!(e, Error::OutOfMemory);
                break;
            }
        }
    }
    let taken: usize = live.iter().map(|&(_, o)| 1 << o).sum();
    assert_eq!(taken, alloc.total_units());
    assert_eq!(alloc.free_units(), 0);
    for (i, o) in live {
        alloc.free(i, o, 1).unwrap();
    }
    common::assert_whole(&alloc);
}

/// Workers allocate and free mixed classes while another thread takes ranges of trees
/// offline and brings them back (in random classes). A worker that holds a unit of a tree
/// keeps it online (a tree goes offline only when entirely free), so every tree a worker
/// gets a block from must read online; and once a tree is offline no unit of it may be
/// owned until it is back.
#[test]
fn an_offline_tree_is_never_handed_out() {
    const TREES: usize = 8;
    let alloc = classed(TREES * 1024, 3, Policy::unmovable_movable_huge());
    let owners = Owners::new(alloc.total_units());
    let done = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    /// Counts a worker out when it ends, panicking or not; the last one stops the operator.
    struct Out<'a>(&'a AtomicUsize, &'a AtomicBool, usize);
    impl Drop for Out<'_> {
        fn drop(&mut self) {
            if self.0.fetch_add(1, Ordering::AcqRel) + 1 == self.2 {
                self.1.store(true, Ordering::Release);
            }
        }
    }
    let offlined = AtomicUsize::new(0);
    let workers = 3;
    common::run_threads(workers + 1, |t| {
        let mut rng = Rng::new(0x0FF + t as u64);
        if t == workers {
            // The operator: drains (so free trees are not held), then tries ranges.
            while !done.load(Ordering::Acquire) {
                alloc.drain_core(rng.below(workers));
                let first = rng.below(TREES);
                let range = first..(first + 1 + rng.below(2)).min(TREES);
                match alloc.set_tree_state(range.clone(), TreeState::Offline) {
                    Ok(()) => {}
                    Err((t, e)) => {
                        assert!(matches!(e, Error::Occupied | Error::WouldBlock), "{e:?}");
                        assert!(range.contains(&t));
                    }
                }
                for tree in range.clone() {
                    if alloc.tree_state(tree) != Ok(TreeState::Offline) {
                        continue;
                    }
                    offlined.fetch_add(1, Ordering::Relaxed);
                    for unit in tree * 1024..(tree + 1) * 1024 {
                        assert!(!owners.owned(unit), "unit {unit} of offline tree {tree}");
                    }
                    let class = CLASSES[rng.below(3)];
                    alloc
                        .set_tree_state(tree..tree + 1, TreeState::Online(class))
                        .unwrap();
                }
            }
            return;
        }
        let _out = Out(&finished, &done, workers);
        let mut mine: Vec<(usize, u32)> = Vec::new();
        for _ in 0..30_000 {
            if mine.len() < 16 && rng.below(2) == 0 {
                let class = CLASSES[rng.below(CLASSES.len())];
                let order = order_for(&mut rng, class);
                match alloc.alloc_class(order, class, t) {
                    Ok(i) => {
                        owners.claim(i, order, common::stamp(i, order));
                        let state = alloc.tree_state(i / 1024).unwrap();
                        assert_ne!(state, TreeState::Offline, "block {i} of an offline tree");
                        mine.push((i, order));
                    }
                    Err(e) => assert_eq!(e, Error::OutOfMemory),
                }
            } else if !mine.is_empty() {
                let (i, o) = mine.swap_remove(rng.below(mine.len()));
                owners.release(i, o, common::stamp(i, o));
                alloc.free(i, o, t).unwrap();
            }
        }
        for (i, o) in mine {
            owners.release(i, o, common::stamp(i, o));
            alloc.free(i, o, t).unwrap();
        }
    });
    assert!(offlined.into_inner() > 0, "no tree ever went offline");
    alloc.drain();
    alloc
        .set_tree_state(0..TREES, TreeState::Online(Class::MOVABLE))
        .unwrap();
    common::assert_whole(&alloc);
}

/// `alloc_class` through a `Box<dyn BlockAlloc>` from the registry, through magazines in
/// front (past their caches) and through zones reaches LLFree's classes: unmovable and
/// movable blocks land in trees of their own, and free as any block does.
#[test]
fn alloc_class_reaches_the_classes_through_every_wrapper() {
    let config = Config::new(1 << 14, 10).with_cores(2);
    // Trees of 8192 units for this configuration (one per core).
    let tree = |i: usize| i >> 13;
    let entry = registry::find("llfree-classes").expect("registered");
    let boxed = (entry.build)(config, Default::default()).unwrap();
    let policy = Policy::unmovable_movable_huge();
    let options = Options::for_config(config);
    let classed = LLFree::builder(config).options(options).policy(policy);
    let magazine = Magazine::new(config, classed.build().unwrap()).unwrap();
    let zones = Zones::new([Zone::new(
        0,
        LLFree::builder(config)
            .options(options)
            .policy(policy)
            .build()
            .unwrap(),
    )])
    .unwrap();
    let wrappers: [&dyn BlockAlloc; 3] = [&boxed, &magazine, &zones];
    for alloc in wrappers {
        let movable = alloc.alloc(0, 0).unwrap();
        let unmovable = alloc.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
        assert_ne!(tree(movable), tree(unmovable));
        assert_eq!(alloc.free(unmovable, 1, 0), Err(Error::OrderMismatch));
        alloc.free(unmovable, 0, 0).unwrap();
        assert_eq!(alloc.free(unmovable, 0, 0), Err(Error::NotAllocated));
        alloc.free(movable, 0, 0).unwrap();
        assert_eq!(alloc.alloc_class(11, Class::HUGE, 0), Err(Error::BadOrder));
        common::assert_whole(alloc);
    }
    assert_eq!(magazine.inner().free_units_of(Class::UNMOVABLE), 0);
    assert_eq!(
        zones
            .alloc_with(&[0], |zone| zone.alloc_class(9, Class::HUGE, 1))
            .map(|i| i % 512),
        Ok(0)
    );
}

/// Racing frees of one block allocated in each class: exactly one wins.
#[test]
fn racing_double_frees_of_classed_blocks_are_exact() {
    let alloc = classed(8 * 1024, 4, Policy::unmovable_movable_huge());
    for class in CLASSES {
        let live: Vec<usize> = (0..64)
            .map(|k| alloc.alloc_class(0, class, k).unwrap())
            .collect();
        common::double_free_race_of(&alloc, 4, &live, 0);
    }
    common::assert_whole(&alloc);
}
