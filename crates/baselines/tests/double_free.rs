//! Raced double frees against concurrent allocations of other orders over the same units,
//! for every allocator in the registry: a bad free must never be classified from state
//! that such an allocation changes before the free takes effect.

mod common;

use buddyfree::Config;
use buddyfree_baselines::registry;

/// A small heap, so that the other threads' blocks cover the double-freed unit often.
const UNITS: usize = 512;

#[test]
fn raced_double_frees_never_free_a_block_of_another_order() {
    let mut ran = 0;
    for entry in registry::entries() {
        if entry.max_order == 0 {
            // Order-0 only (the list allocators): no other order to race with. Their raced
            // double frees are covered by `double_free_race` in `baselines.rs`.
            continue;
        }
        let config = Config::new(UNITS, entry.max_order.min(4)).with_cores(2);
        for order in [0, 1, 2] {
            let alloc = (entry.build)(config, Default::default()).unwrap();
            common::double_free_against_other_orders(&*alloc, 2, 200_000, order);
        }
        ran += 1;
    }
    assert!(ran >= 9, "only {ran} allocators ran");
}
