use alloc::vec::Vec;

use super::subset::subset;
use crate::llfree::LLFree;
use crate::magazine::{Magazine, Settings};
use crate::{BlockAlloc, Config, Error};

/// A refill that finishes a partly used region and goes on into the next is cut at the
/// region's end; any other is kept whole.
#[test]
fn a_batch_is_cut_where_it_would_start_a_region_it_cannot_finish() {
    use crate::magazine::backend::batch_in_regions;
    // Order 6 in batches of 8: a region is a huge frame of 512 units.
    let rest_and_next: Vec<usize> = (1..8).map(|b| b * 64).chain([512]).collect();
    assert_eq!(batch_in_regions(&rest_and_next, 6, 8), 7);
    let whole: Vec<usize> = (0..8).map(|b| b * 64).collect();
    assert_eq!(batch_in_regions(&whole, 6, 8), 8);
    assert_eq!(batch_in_regions(&[128, 192], 6, 8), 2);
    // Order 0 in batches of 4.
    assert_eq!(batch_in_regions(&[3, 4, 5], 0, 4), 1);
    assert_eq!(batch_in_regions(&[2, 3, 8, 9], 0, 4), 2);
    // Not the whole rest of the first region (2 is not in the batch).
    assert_eq!(batch_in_regions(&[1, 3, 4, 5], 0, 4), 4);
    // The rest goes on into two regions: nothing to line up with.
    assert_eq!(batch_in_regions(&[3, 4, 8, 9], 0, 4), 4);
    assert_eq!(batch_in_regions(&[5], 0, 4), 1);
    assert_eq!(batch_in_regions(&[], 0, 4), 0);
    assert_eq!(batch_in_regions(&[3, 4], 0, 3), 2);
}

/// The state table records only the cached orders, so the errors that need a block of
/// an uncached order come from the backend, corrected where a cached block starts.
/// `cached` and `uncached` are a cached and an uncached order of `alloc`.
fn bad_frees_across_cached_and_uncached_orders(alloc: &dyn BlockAlloc, cached: u32, uncached: u32) {
    let free = alloc.free_units();
    let live = alloc.alloc(uncached, 0).unwrap();
    // A caller's block of an uncached order, freed with a cached order.
    if live.is_multiple_of(1 << cached) {
        assert_eq!(alloc.free(live, cached, 0), Err(Error::OrderMismatch));
    }
    // A cached block where a block of the uncached order could start.
    let mut others = Vec::new();
    let parked = loop {
        let b = alloc.alloc(cached, 0).unwrap();
        if b.is_multiple_of(1 << uncached) {
            break b;
        }
        others.push(b);
    };
    alloc.free(parked, cached, 0).unwrap();
    let before = alloc.free_units();
    assert_eq!(alloc.free(parked, uncached, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(parked, cached, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free_units(), before, "a bad free changed something");
    alloc.free(live, uncached, 0).unwrap();
    for b in others {
        alloc.free(b, cached, 0).unwrap();
    }
    alloc.drain();
    assert_eq!(alloc.free_units(), free);
}

#[test]
fn bad_frees_across_cached_and_uncached_orders_get_exact_errors() {
    let config = Config::new(1 << 14, 10).with_cores(1);
    // Magazines cache orders 0-9.
    let magazine = LLFree::new(config)
        .and_then(|inner| Magazine::new(config, inner))
        .unwrap();
    bad_frees_across_cached_and_uncached_orders(&magazine, 0, 10);
    bad_frees_across_cached_and_uncached_orders(&magazine, 7, 10);
    bad_frees_across_cached_and_uncached_orders(&magazine, 9, 10);
    // Orders 0-3 and 9, as Linux's per-CPU lists.
    let linux = subset::<spin::Mutex<()>>(config);
    bad_frees_across_cached_and_uncached_orders(&linux, 0, 5);
    bad_frees_across_cached_and_uncached_orders(&linux, 9, 5);
    bad_frees_across_cached_and_uncached_orders(&linux, 9, 8);
}

/// Every unit of `alloc` (256 units) taken as order 0 on core 0 and freed
/// there, the last ones a unit in every 8, so that core 0 parks a unit of every block of
/// order 6: the backend has none. `try_alloc` of order 6 then gives the parked units
/// back without waiting and gets one, unless core 0's cache is held (`WouldBlock`,
/// nothing changed); after a drain every block of the largest order is free.
fn try_alloc_gives_back_what_free_caches_park(alloc: &dyn BlockAlloc) {
    let all: Vec<usize> = (0..256).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    let (spread, rest): (Vec<usize>, Vec<usize>) = all.iter().partition(|&&u| u % 8 == 0);
    for unit in rest.into_iter().chain(spread) {
        alloc.free(unit, 0, 0).unwrap();
    }
    let mut held = Ok(0);
    alloc.with_core(0, &mut |_| held = alloc.try_alloc(6, 1));
    assert_eq!(held, Err(Error::WouldBlock));
    assert_eq!(alloc.free_units(), 256);
    let block = alloc.try_alloc(6, 1).unwrap();
    alloc.free(block, 6, 1).unwrap();
    alloc.drain();
    let top = alloc.max_order();
    for _ in 0..256 >> top {
        alloc.alloc(top, 0).unwrap();
    }
}

#[test]
fn try_alloc_gives_back_the_blocks_of_caches_it_can_take() {
    let config = Config::new(256, 8).with_cores(2);
    // The full lists, which park a unit of every block of order 6 here; no streams, so
    // that every free parks (a stream's last blocks would go straight back).
    try_alloc_gives_back_what_free_caches_park(
        &LLFree::new(config)
            .and_then(|inner| Magazine::new(config, inner))
            .unwrap()
            .with_settings(Settings::new().with_parking_limit(usize::MAX))
            .without_streams(),
    );
    // Order 0 in groups (below the top row of its cell: not with `max_order` 8).
    try_alloc_gives_back_what_free_caches_park(
        &crate::Nbbs4::new(Config::new(256, 6).with_cores(2))
            .and_then(|inner| Magazine::new(Config::new(256, 6).with_cores(2), inner))
            .unwrap()
            .with_settings(Settings::new().with_parking_limit(usize::MAX))
            .without_streams(),
    );
    try_alloc_gives_back_what_free_caches_park(&subset::<spin::Mutex<()>>(config));
}
