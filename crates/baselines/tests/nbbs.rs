//! The common battery on both NBBS layouts, with free-slot hints on (several cores), over
//! single- and multi-root forests, partial last trees and orders up to 6.

mod common;

use buddyfree::{BlockAlloc, Config, ConfigRule, Error, Nbbs, Nbbs4};
use proptest::prelude::*;

/// Builds both layouts over `config`.
fn both(config: Config) -> [(&'static str, Box<dyn BlockAlloc>); 2] {
    [
        ("nbbs", Box::new(Nbbs::new(config).unwrap())),
        ("nbbs4", Box::new(Nbbs4::new(config).unwrap())),
    ]
}

fn check(config: Config, ops: &[common::Op]) {
    for (_, alloc) in both(config) {
        common::check_against_model(&*alloc, config, ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_model_one_tree(ops in common::ops(64, 6, 300)) {
        check(Config::new(64, 6).with_cores(2), &ops);
    }

    #[test]
    fn matches_model_many_roots(ops in common::ops(96, 3, 300)) {
        check(Config::new(96, 3).with_cores(3), &ops);
    }

    #[test]
    fn matches_model_partial_last_tree(ops in common::ops(100, 4, 300)) {
        check(Config::new(100, 4).with_cores(2), &ops);
    }

    #[test]
    fn matches_model_deep_bunches(ops in common::ops(512, 5, 300)) {
        check(Config::new(512, 5).with_cores(4), &ops);
    }

    #[test]
    fn matches_model_order_zero_only(ops in common::ops(24, 0, 100)) {
        check(Config::new(24, 0).with_cores(2), &ops);
    }
}

#[test]
fn survives_stress_one_tree() {
    for (name, alloc) in both(Config::new(1024, 6).with_cores(4)) {
        assert!(common::stress(&*alloc, 4, 20_000, 6) > 0, "{name}");
    }
}

#[test]
fn survives_stress_many_roots_partial_tree() {
    for (name, alloc) in both(Config::new(1000, 5).with_cores(4)) {
        assert!(common::stress(&*alloc, 4, 20_000, 5) > 0, "{name}");
    }
}

#[test]
fn survives_stress_small_heap_high_contention() {
    // 64 units, blocks up to 16: most allocations contend on the same few trees.
    for (name, alloc) in both(Config::new(64, 4).with_cores(2)) {
        assert!(common::stress(&*alloc, 4, 20_000, 4) > 0, "{name}");
    }
}

#[test]
fn bulk_groups_race_single_operations_on_small_trees() {
    // NBBS-4 takes and gives back groups of blocks under one node of a cell: with max_order
    // 6, four blocks of order 0 below the root cell and eight of order 3 in it; with 5, two
    // of order 0 below it; with 2 and 3 (six roots of 8 units), four and eight of order 0 in
    // root cells. Few cells: groups, rollbacks and single operations collide on the same
    // words.
    for (units, max_order) in [(64, 6), (32, 5), (16, 2), (48, 3)] {
        for (name, alloc) in both(Config::new(units, max_order).with_cores(4)) {
            common::bulk_stress(&*alloc, 4, 20_000, max_order);
            assert_eq!(alloc.free_units(), units, "{name}");
        }
    }
}

#[test]
fn frees_each_block_once_under_racing_double_frees() {
    for order in [0, 1, 4] {
        for (_, alloc) in both(Config::new(256, 5).with_cores(4)) {
            common::double_free_race(&*alloc, 4, 256 >> order, order);
        }
    }
}

#[test]
fn full_heap_fails_and_bad_frees_change_nothing() {
    for (name, alloc) in both(Config::new(64, 3).with_cores(2)) {
        let blocks: Vec<usize> = (0..64).map(|_| alloc.alloc(0, 1).unwrap()).collect();
        for order in 0..=3 {
            assert_eq!(alloc.alloc(order, 0), Err(Error::OutOfMemory), "{name}");
        }
        assert_eq!(alloc.alloc(4, 0), Err(Error::BadOrder), "{name}");
        assert_eq!(alloc.free(0, 1, 0), Err(Error::OrderMismatch), "{name}");
        assert_eq!(alloc.free(1, 1, 0), Err(Error::Misaligned), "{name}");
        assert_eq!(alloc.free(64, 0, 0), Err(Error::OutOfRange), "{name}");
        assert_eq!(alloc.free_units(), 0, "{name}");
        for index in blocks {
            alloc.free(index, 0, 0).unwrap();
        }
        let a = alloc.alloc(3, 0).unwrap();
        assert_eq!(alloc.free(a, 0, 0), Err(Error::OrderMismatch), "{name}");
        assert_eq!(alloc.free(a + 1, 0, 0), Err(Error::NotAllocated), "{name}");
        alloc.free(a, 3, 0).unwrap();
        assert_eq!(alloc.free(a, 3, 0), Err(Error::NotAllocated), "{name}");
        common::assert_whole(&*alloc);
    }
}

#[test]
fn rejects_configs_it_cannot_build() {
    assert!(Nbbs::new(Config::new(0, 0)).is_err());
    assert!(Nbbs4::new(Config::new(8, 4)).is_err());
    assert!(Nbbs::new(Config::new(8, 2).with_cores(0)).is_err());
}

#[test]
fn survives_ping_pong_on_a_tiny_tree() {
    // Threads allocate and at once free small blocks of one 8-unit tree, so frees of a node
    // race its reallocation and the merge of its buddies: the pattern that strands an
    // occupied bit when an UNMARK gives up too early.
    for (_, alloc) in both(Config::new(8, 3).with_cores(4)) {
        let alloc = &*alloc;
        let owners = common::Owners::new(8);
        common::run_threads(4, |t| {
            let mut rng = common::Rng::new(t as u64 + 7);
            for _ in 0..50_000 {
                let order = rng.below(2) as u32;
                if let Ok(i) = alloc.alloc(order, t % 2) {
                    owners.claim(i, order, t as u64 + 1);
                    owners.release(i, order, t as u64 + 1);
                    alloc.free(i, order, t).unwrap();
                }
            }
        });
        common::assert_whole(alloc);
    }
}

#[test]
fn too_large_configs_fail_instead_of_aborting() {
    // Too large to reserve, or even to size: either metadata rule.
    let metadata = |e: Option<Error>| {
        matches!(
            e,
            Some(Error::InvalidConfig(
                ConfigRule::MetadataAlloc | ConfigRule::MetadataOverflow
            ))
        )
    };
    assert!(metadata(Nbbs::new(Config::new(1 << 60, 4)).err()));
    assert!(metadata(Nbbs4::new(Config::new(1 << 60, 40)).err()));
    assert_eq!(
        Nbbs::new(Config::new(64, 4).with_cores(1 << 58)).err(),
        Some(Error::InvalidConfig(ConfigRule::TooManyCores))
    );
}
