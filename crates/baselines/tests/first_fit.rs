//! The battery on the first-fit unstructured-list allocator (the real-time paper's baseline),
//! behind a global lock, plus the shape of its free list in the paper's contrived case.

mod common;

use buddyfree::{BlockAlloc, Config, Locked, SeqBlockAlloc};
use buddyfree_baselines::list::FirstFit;
use proptest::prelude::*;

fn locked(config: Config) -> Locked<FirstFit> {
    Locked::new(FirstFit::new(config).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn first_fit_matches_model(
        config in 0..common::CONFIGS.len(),
        ops in common::ops(100, 5, 200),
    ) {
        let (units, max_order) = common::CONFIGS[config];
        let config = Config::new(units, max_order);
        let ops = common::clamp(&ops, max_order);
        common::check_against_model(&locked(config), config, &ops);
    }
}

#[test]
fn first_fit_survives_stress() {
    for (units, max_order, threads) in [(1000, 6, 4), (256, 4, 6)] {
        let alloc = locked(Config::new(units, max_order));
        assert!(common::stress(&alloc, threads, 20_000, max_order) > 0);
    }
}

#[test]
fn first_fit_frees_each_block_once_under_racing_double_frees() {
    common::double_free_race(&locked(Config::new(300, 4)), 4, 150, 1);
}

/// §3.1: after N blocks of one size and freeing every other, the free list holds N/2 holes
/// ahead of the remainder; a larger request walks past all of them and lands at the end, and
/// freeing the rest coalesces the list back into one extent.
#[test]
fn contrived_case_leaves_holes_ahead_of_the_remainder() {
    let (n, order) = (64, 2);
    let units = (n + 4) << order;
    let mut f = FirstFit::new(Config::new(units, order + 1)).unwrap();
    let blocks: Vec<usize> = (0..n).map(|_| f.alloc(order).unwrap()).collect();
    assert_eq!(blocks, (0..n).map(|i| i << order).collect::<Vec<_>>());
    for &b in blocks.iter().step_by(2) {
        f.free(b, order).unwrap();
    }
    assert_eq!(f.extents(), n / 2 + 1);
    assert_eq!(f.alloc(order + 1), Ok(n << order));
    for &b in blocks.iter().skip(1).step_by(2) {
        f.free(b, order).unwrap();
    }
    f.free(n << order, order + 1).unwrap();
    assert_eq!((f.extents(), f.free_units()), (1, units));
    let boxed: Box<dyn BlockAlloc> = Box::new(Locked::<FirstFit>::new(f));
    common::assert_whole(&*boxed);
}
