//! `alloc_bulk` and `free_bulk` for every allocator in the registry: the blocks they hand out
//! are ordinary blocks (freed one by one or in bulk, never overlapping), a bulk free stops at
//! its first bad block and leaves it and the rest as they were, and under threads mixing
//! bulk and single operations with cross-thread frees no unit is handed out twice.

mod common;

use buddyfree::{BlockAlloc, Config, Error};
use buddyfree_baselines::registry;
use common::{stamp, Owners};

const UNITS: usize = 1024;

fn every_allocator(mut f: impl FnMut(&str, &dyn BlockAlloc, u32)) {
    for entry in registry::entries() {
        let max_order = entry.max_order.min(6);
        let alloc = (entry.build)(
            Config::new(UNITS, max_order).with_cores(2),
            Default::default(),
        )
        .unwrap();
        f(entry.name, &*alloc, max_order);
    }
}

#[test]
fn bulk_blocks_are_ordinary_blocks() {
    every_allocator(|name, alloc, max_order| {
        let owners = Owners::new(UNITS);
        for order in 0..=max_order.min(4) {
            for len in [1, 3, 8, 32] {
                let mut out = vec![0; len];
                let n = alloc.alloc_bulk(order, 1, &mut out).unwrap();
                assert!((1..=len).contains(&n), "{name}: {n} of {len}");
                for &b in &out[..n] {
                    assert_eq!(b % (1 << order), 0, "{name}: misaligned {b}");
                    owners.claim(b, order, stamp(b, order));
                }
                // The first alone, the rest in bulk.
                owners.release(out[0], order, stamp(out[0], order));
                alloc.free(out[0], order, 0).unwrap();
                for &b in &out[1..n] {
                    owners.release(b, order, stamp(b, order));
                }
                alloc.free_bulk(&out[1..n], order, 0).unwrap();
            }
        }
        assert_eq!(alloc.alloc_bulk(0, 0, &mut []), Ok(0), "{name}");
        assert_eq!(alloc.free_bulk(&[], 0, 0), Ok(()), "{name}");
        common::assert_whole(alloc);
    });
}

#[test]
fn a_bulk_free_stops_at_its_first_bad_block() {
    every_allocator(|name, alloc, _| {
        let mut out = [0; 4];
        let mut got = 0;
        while got < 4 {
            got += alloc.alloc_bulk(0, 0, &mut out[got..]).unwrap();
        }
        let [a, b, c, d] = out;
        let free = alloc.free_units();
        // A block named twice: the second naming is refused, the blocks after it stay.
        assert_eq!(
            alloc.free_bulk(&[a, b, a, c], 0, 0),
            Err((2, Error::NotAllocated)),
            "{name}"
        );
        assert_eq!(alloc.free_units(), free + 2, "{name}");
        // Out of range, and a block of another order, at the front: nothing changes.
        assert_eq!(
            alloc.free_bulk(&[UNITS, c], 0, 0),
            Err((0, Error::OutOfRange)),
            "{name}"
        );
        if alloc.max_order() > 0 {
            let big = alloc.alloc(1, 0).unwrap();
            assert_eq!(
                alloc.free_bulk(&[big, c], 0, 0).map_err(|(k, _)| k),
                Err(0),
                "{name}"
            );
            alloc.free(big, 1, 0).unwrap();
        }
        assert_eq!(alloc.free_units(), free + 2, "{name}");
        alloc.free_bulk(&[c, d], 0, 0).unwrap();
        common::assert_whole(alloc);
    });
}

#[test]
fn threads_mixing_bulk_and_single_operations_never_share_a_unit() {
    every_allocator(|name, alloc, max_order| {
        common::bulk_stress(alloc, 4, 4000, max_order);
        assert_eq!(alloc.free_units(), UNITS, "{name}");
    });
}
