//! The battery on the buddy systems: Knuth's and the estranged buddy behind a global lock,
//! the parallel binary buddy with a lock per level (spinlock and spin-then-yield variants).

mod common;

use buddyfree::buddy::{Estranged, Knuth};
use buddyfree::locked::{PerLevelSpin, PerLevelYield};
use buddyfree::{BlockAlloc, Config, Error, Locked};
use proptest::prelude::*;

/// Configurations the differential test runs: powers of two and ragged tails.
const CONFIGS: &[(usize, u32)] = &[(64, 4), (100, 3), (13, 2), (37, 5)];

type Build = fn(Config) -> Result<Box<dyn BlockAlloc>, Error>;

fn knuth(c: Config) -> Result<Box<dyn BlockAlloc>, Error> {
    Ok(Box::new(Locked::<Knuth>::new(Knuth::new(c)?)))
}
fn estranged(c: Config) -> Result<Box<dyn BlockAlloc>, Error> {
    Ok(Box::new(Locked::<Estranged>::new(Estranged::new(c)?)))
}
fn perlevel_spin(c: Config) -> Result<Box<dyn BlockAlloc>, Error> {
    Ok(Box::new(PerLevelSpin::new(c)?))
}
fn perlevel_yield(c: Config) -> Result<Box<dyn BlockAlloc>, Error> {
    Ok(Box::new(PerLevelYield::new(c)?))
}

/// Every buddy of this file, by name, for the shared battery below.
const ALLOCS: &[(&str, Build)] = &[
    ("knuth-locked", knuth),
    ("estranged-locked", estranged),
    ("perlevel-spin", perlevel_spin),
    ("perlevel-yield", perlevel_yield),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]
    #[test]
    fn every_buddy_matches_model(
        which in 0..ALLOCS.len(),
        config in 0..CONFIGS.len(),
        ops in common::ops(100, 5, 200),
    ) {
        let (units, max_order) = CONFIGS[config];
        let config = Config::new(units, max_order);
        let ops = clamp(&ops, max_order);
        let alloc = (ALLOCS[which].1)(config).unwrap();
        common::check_against_model(&*alloc, config, &ops);
    }
}

/// The strategy is built once for the widest configuration; orders above a configuration's
/// `max_order + 2` would only repeat the `BadOrder` case, so fold them back into range.
fn clamp(ops: &[common::Op], max_order: u32) -> Vec<common::Op> {
    use common::Op;
    let fold = |o: u32| o % (max_order + 3);
    ops.iter()
        .map(|op| match *op {
            Op::Alloc(o) => Op::Alloc(fold(o)),
            Op::WrongOrder(p, o) => Op::WrongOrder(p, fold(o)),
            Op::Arbitrary(i, o) => Op::Arbitrary(i, fold(o)),
            ref other => other.clone(),
        })
        .collect()
}

#[test]
fn every_buddy_survives_stress() {
    for &(name, build) in ALLOCS {
        for (units, max_order, threads) in [(1000, 6, 4), (256, 4, 6)] {
            let alloc = build(Config::new(units, max_order)).unwrap();
            let allocs = common::stress(&*alloc, threads, 20_000, max_order);
            assert!(allocs > 0, "{name}");
        }
    }
}

#[test]
fn every_buddy_frees_each_block_once_under_racing_double_frees() {
    for &(_, build) in ALLOCS {
        let alloc = build(Config::new(300, 4)).unwrap();
        common::double_free_race(&*alloc, 4, 150, 1);
    }
}

#[test]
fn per_level_counts_lock_waits_consistently() {
    let alloc = PerLevelSpin::new(Config::new(1024, 6)).unwrap();
    let threads = 4;
    common::stress(&alloc, threads, 20_000, 6);
    let stats = alloc.level_stats();
    assert_eq!(stats.len(), 7);
    assert!(stats.iter().all(|s| s.acquired > 0));
    for s in &stats {
        assert!(s.waits <= s.acquired, "{s:?}");
        assert!(s.pending_high_water <= threads, "{s:?}");
        assert_eq!(s.pending_high_water == 0, s.waits == 0, "{s:?}");
    }
    // Whole again: every unit is on the top level's list.
    assert_eq!(stats[6].free_blocks, 1024 >> 6);
    alloc.reset_stats();
    assert!(alloc
        .level_stats()
        .iter()
        .all(|s| s.acquired == 0 && s.waits == 0));
}
