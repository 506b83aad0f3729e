//! Magazines built in front of an allocator that is already in use adopt its blocks: a
//! differential run against the model that goes on across the moment the magazines are put
//! in front (blocks allocated before are freed, double freed and freed with a wrong order
//! through them), for every allocator in the registry behind; and `next_block`, the query
//! the adoption walks with, against the model.

mod common;

use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Backend, Magazine, Plain};
use buddyfree::{BlockAlloc, Config, ConfigRule, Error, Nbbs4};
use buddyfree_baselines::registry;
use common::{ModelRun, Op};
use proptest::prelude::*;

/// Each registry allocator over each small configuration: `before` on it alone, `after`
/// through magazines in front of it.
fn adopt_everywhere(before: &[Op], after: &[Op]) {
    let mut adopted = Vec::new();
    for entry in registry::entries() {
        for &(units, max_order) in common::CONFIGS {
            let max_order = max_order.min(entry.max_order);
            let config = Config::new(units, max_order).with_cores(3);
            let Ok(inner) = (entry.build)(config, Default::default()) else {
                continue;
            };
            let mut run = ModelRun::new(config);
            run.run(&*inner, &common::clamp(before, max_order));
            let used = inner.free_units() != inner.total_units();
            let names_blocks = inner.block_of(0) != Err(Error::Unsupported);
            match Magazine::new(config, Plain(inner)) {
                Ok(fast) => {
                    run.run(&fast, &common::clamp(after, max_order));
                    run.finish(&fast);
                    adopted.push(entry.name);
                }
                Err(e) => {
                    assert!(used && !names_blocks, "{}: {e}", entry.name);
                    assert_eq!(e, ConfigRule::InnerInUse.into());
                }
            }
        }
    }
    adopted.dedup();
    assert!(adopted.len() >= 10, "only {adopted:?} behind magazines");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn magazines_adopt_the_blocks_of_every_allocator(
        before in common::ops(100, 5, 60),
        after in common::ops(100, 5, 120),
    ) {
        adopt_everywhere(&before, &after);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// After random operations, `next_block`, `block_of` and `try_block_of` from every unit
    /// answer as the model, for each
    /// registry allocator and for magazines in front of it (whose parked blocks are free),
    /// over a few units and over several LLFree huge frames with a ragged end.
    #[test]
    fn next_block_finds_the_models_blocks(
        before in common::ops(2348, 10, 200),
        after in common::ops(2348, 10, 100),
    ) {
        for entry in registry::entries() {
            for (units, max_order) in [(37, 5), (2348, 10)] {
                let max_order = max_order.min(entry.max_order);
                let config = Config::new(units, max_order).with_cores(3);
                let Ok(inner) = (entry.build)(config, Default::default()) else {
                    continue;
                };
                let mut run = ModelRun::new(config);
                run.run(&*inner, &common::clamp(&before, max_order));
                run.check_next_block(&*inner, entry.name);
                run.check_block_of(&*inner, entry.name);
                if let Ok(fast) = Magazine::new(config, Plain(inner)) {
                    run.run(&fast, &common::clamp(&after, max_order));
                    run.check_next_block(&fast, entry.name);
                    run.check_block_of(&fast, entry.name);
                }
            }
        }
    }
}

/// Threads racing to free the same adopted blocks (each block from every thread): exactly
/// one free of each wins, through the state table as for the magazines' own blocks.
#[test]
fn racing_frees_of_adopted_blocks_let_exactly_one_through() {
    fn race<A: Backend>(build: fn(Config) -> Result<A, Error>) {
        for order in [0, 3, 8] {
            let config = Config::new(1 << 14, 10).with_cores(4);
            let inner = build(config).unwrap();
            let live: Vec<usize> = (0..(1 << 12) >> order)
                .map(|_| inner.alloc(order, 0).unwrap())
                .collect();
            let fast = Magazine::new(config, inner).unwrap();
            common::double_free_race_of(&fast, 4, &live, order);
        }
    }
    race(LLFree::new);
    race(Nbbs4::new);
}
