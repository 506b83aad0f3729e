//! The common battery (differential runs against the model, stress) on every allocator built
//! over caller metadata instead of the heap.

mod common;
mod metadata;

use buddyfree::Config;
use metadata::{build, each, CallerMetadata, Visit};
use proptest::prelude::*;

/// Runs `ops` against the model on each allocator, over each of the battery's shapes.
struct AgainstModel<'a>(&'a [common::Op]);

impl Visit for AgainstModel<'_> {
    fn visit<A: CallerMetadata>(&mut self) {
        for &(units, max_order) in common::CONFIGS {
            let config = Config::new(units, max_order).with_cores(2);
            let ops = common::clamp(self.0, max_order);
            common::check_against_model(&build::<A>(config), config, &ops);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn caller_metadata_matches_model(ops in common::ops(100, 5, 300)) {
        each(&mut AgainstModel(&ops));
    }
}

/// Four threads of mixed orders on a small heap, and on one with a partial last tree.
struct Stress;

impl Visit for Stress {
    fn visit<A: CallerMetadata>(&mut self) {
        for (units, max_order) in [(256, 6), (3 * 512 + 77, 10)] {
            let config = Config::new(units, max_order).with_cores(4);
            let done = common::stress(&build::<A>(config), 4, 20_000, max_order.min(6));
            assert!(done > 0, "{}", A::NAME);
        }
    }
}

#[test]
fn caller_metadata_survives_stress() {
    each(&mut Stress);
}
