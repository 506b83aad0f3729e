//! The battery on the buddy systems: Knuth's buddy behind a global lock.

mod common;

use buddyfree::buddy::Knuth;
use buddyfree::{Config, Locked};
use proptest::prelude::*;

/// Configurations the differential test runs: powers of two and ragged tails.
const CONFIGS: &[(usize, u32)] = &[(64, 4), (100, 3), (13, 2), (37, 5)];

proptest! {
    #[test]
    fn knuth_matches_model(which in 0..CONFIGS.len(), ops in common::ops(100, 5, 200)) {
        let (units, max_order) = CONFIGS[which];
        let config = Config::new(units, max_order);
        let ops = clamp(&ops, max_order);
        common::check_against_model(&Locked::<Knuth>::new(Knuth::new(config).unwrap()), config, &ops);
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
fn knuth_locked_survives_stress() {
    let alloc = Locked::<Knuth>::new(Knuth::new(Config::new(1000, 6)).unwrap());
    assert!(common::stress(&alloc, 4, 20_000, 6) > 0);
}

#[test]
fn knuth_locked_frees_each_block_once_under_racing_double_frees() {
    let alloc = Locked::<Knuth>::new(Knuth::new(Config::new(300, 4)).unwrap());
    common::double_free_race(&alloc, 4, 150, 1);
}
