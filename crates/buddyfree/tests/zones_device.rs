//! Zones (routing, preference, per-zone statistics, stress with gaps) and the device-memory
//! heap (addresses only, frees without the size).

mod common;

use core::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use buddyfree::heap::{DeviceHeap, HeapError};
use buddyfree::registry::{self, DynAlloc};
use buddyfree::zones::{Zone, Zones};
use buddyfree::{BlockAlloc, Config, Error};
use common::{Owners, Rng};

fn build(name: &str, units: usize, max_order: u32) -> DynAlloc {
    (registry::find(name).unwrap().build)(Config::new(units, max_order).with_cores(2)).unwrap()
}

/// Three zones with gaps between them, of one registry allocator.
fn zones(name: &str) -> Zones<DynAlloc, 3> {
    Zones::new([
        Zone::new(0, build(name, 1000, 6)),
        Zone::new(1024, build(name, 3072, 6)),
        Zone::new(8192, build(name, 2048, 6)),
    ])
    .unwrap()
}

const NAMES: [&str; 5] = [
    "nbbs",
    "nbbs4",
    "llfree",
    "knuth-locked",
    "estranged-locked",
];

#[test]
fn zones_route_by_index_and_fall_back_in_the_order_asked() {
    for name in NAMES {
        let z = zones(name);
        let a = z.alloc_from(&[2, 0], 4, 0).unwrap();
        assert!((8192..10240).contains(&a), "{name}");
        assert_eq!(z.zone_of(a), Ok((2, a - 8192)));
        assert_eq!(z.zone_of(1010), Err(Error::OutOfRange), "{name}: a gap");
        assert_eq!(z.free(1010, 0, 0), Err(Error::OutOfRange));
        assert_eq!(z.alloc_at(1010, 0, 0), Err(Error::OutOfRange));
        // Fill zone 0, then ask it first: the request falls back to zone 1.
        while z.zones()[0].allocator().alloc(0, 0).is_ok() {}
        let b = z.alloc_from(&[0, 1], 0, 1).unwrap();
        assert!((1024..4096).contains(&b), "{name}: {b}");
        let stats = z.stats();
        assert_eq!((stats[1].served, stats[1].fell_back), (1, 1), "{name}");
        assert!(stats[0].refused >= 1);
        assert_eq!(stats[2].free, 2048 - 16);
        assert_eq!(z.order_at(a), Ok(4));
        assert_eq!(z.block_of(a + 3), Ok(Some((a, 4))));
        z.free(a, 4, 0).unwrap();
        assert_eq!(z.free(a, 4, 0), Err(Error::NotAllocated));
        assert_eq!(z.alloc_from(&[3], 0, 0), Err(Error::OutOfRange));
    }
    assert!(Zones::new([
        Zone::new(100, build("nbbs", 64, 3)),
        Zone::new(0, build("nbbs", 64, 3)),
    ])
    .is_err());
}

/// The shared stress over zones: units in the gaps are claimed in the ownership map, so a
/// block handed out across a zone's end or in a gap fails the claim.
#[test]
fn zones_under_stress_keep_to_their_ranges() {
    for name in NAMES {
        let z = zones(name);
        let owners = Owners::new(z.total_units());
        for unit in (1000..1024).chain(4096..8192) {
            owners.claim(unit, 0, u64::MAX);
        }
        common::stress_with(&z, &owners, 2, 3000, 5);
        z.drain();
        assert_eq!(z.free_units(), 1000 + 3072 + 2048, "{name}");
    }
}

#[test]
fn a_device_heap_hands_out_aligned_disjoint_addresses_and_frees_by_address() {
    let base = 0x40_0000_0000u64;
    for name in NAMES {
        let heap = DeviceHeap::new(base, 4096, build(name, 4096, 10)).unwrap();
        let mut rng = Rng::new(3);
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for step in 0..3000 {
            if rng.below(3) > 0 || live.is_empty() {
                let size = 1 + rng.below(40_000);
                let align = 1 << rng.below(16);
                let layout = Layout::from_size_align(size, align).unwrap();
                match heap.alloc(layout, step % 2) {
                    Ok(addr) => {
                        assert_eq!(addr % align as u64, 0, "{name}");
                        assert!(addr >= base && addr + size as u64 <= base + (4096 << 12));
                        let len = 4096u64 << heap.order_of(layout).unwrap();
                        let before = live.range(..addr + len).next_back();
                        assert!(
                            before.is_none_or(|(&a, &l)| a + l <= addr),
                            "{name}: overlap"
                        );
                        live.insert(addr, len);
                    }
                    Err(HeapError::Block(Error::OutOfMemory)) => {}
                    Err(e) => panic!("{name}: {e}"),
                }
            } else {
                let pick = *live.keys().nth(rng.below(live.len())).unwrap();
                let len = live.remove(&pick).unwrap();
                assert_eq!(heap.order_at(pick), Ok((len / 4096).trailing_zeros()));
                heap.free_at(pick, step % 2).unwrap();
                assert_eq!(
                    heap.free_at(pick, 0),
                    Err(HeapError::Block(Error::NotAllocated))
                );
            }
        }
        for &addr in live.keys() {
            heap.free_at(addr, 0).unwrap();
        }
        assert_eq!(heap.free_at(base - 4096, 0), Err(HeapError::Foreign));
        assert_eq!(
            heap.free_at(base + 1, 0),
            Err(HeapError::Block(Error::Misaligned))
        );
        assert_eq!(
            heap.free_at(base + (4096 << 12), 0),
            Err(HeapError::Foreign)
        );
        common::assert_whole(heap.allocator());
    }
    assert!(DeviceHeap::new(4097, 4096, build("nbbs", 64, 3)).is_err());
    assert!(DeviceHeap::new(u64::MAX - 4095, 4096, build("nbbs", 64, 3)).is_err());
}

/// A device heap's held core allocates and frees by address as the heap does, with the same
/// answers to bad frees; over a magazine it really holds the core: another thread's
/// allocation on that core waits until the call returns (it has 100 ms to get through if the
/// core is not held).
#[test]
fn a_device_heaps_held_core_frees_by_address_and_holds_a_magazines_core() {
    let base = 0x40_0000_0000u64;
    let page = Layout::from_size_align(4096, 4096).unwrap();
    let run = Layout::from_size_align(5 * 4096, 4096).unwrap();
    for name in NAMES
        .into_iter()
        .chain(["llfree-magazine", "nbbs4-magazine"])
    {
        let heap = DeviceHeap::new(base, 4096, build(name, 4096, 10)).unwrap();
        let through = AtomicBool::new(false);
        let (kept, theirs, through_while_held) = std::thread::scope(|s| {
            let (kept, waiter, seen) = heap.with_core(1, |core| {
                let kept = core.alloc(run).unwrap();
                assert_eq!(heap.order_at(kept), Ok(3), "{name}");
                let pages = [core.alloc(page).unwrap(), core.alloc(page).unwrap()];
                core.free(pages[0], page).unwrap();
                core.free_at(pages[1]).unwrap();
                for addr in pages {
                    let gone = Err(HeapError::Block(Error::NotAllocated));
                    assert_eq!(core.free(addr, page), gone, "{name}");
                    assert_eq!(core.free_at(addr), gone, "{name}");
                }
                let wrong = Err(HeapError::Block(Error::OrderMismatch));
                assert_eq!(core.free(kept, page), wrong, "{name}");
                let inside = Err(HeapError::Block(Error::NotAllocated));
                assert_eq!(core.free(kept + 4096, page), inside, "{name}");
                assert_eq!(core.free_at(base - 4096), Err(HeapError::Foreign));
                let misaligned = Err(HeapError::Block(Error::Misaligned));
                assert_eq!(core.free_at(kept + 1), misaligned, "{name}");
                let waiter = s.spawn(|| {
                    let theirs = heap.alloc(page, 1).unwrap();
                    through.store(true, Ordering::Release);
                    theirs
                });
                std::thread::sleep(Duration::from_millis(100));
                (kept, waiter, through.load(Ordering::Acquire))
            });
            (kept, waiter.join().unwrap(), seen)
        });
        if name.ends_with("-magazine") {
            assert!(!through_while_held, "{name}: core 1 was not held");
        }
        heap.with_core(0, |core| core.free_at(kept)).unwrap();
        heap.free(theirs, page, 0).unwrap();
        heap.allocator().drain();
        common::assert_whole(heap.allocator());
    }
}
