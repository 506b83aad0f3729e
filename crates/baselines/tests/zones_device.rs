//! Zones (routing, preference, per-zone statistics, stress with gaps, the model's answers,
//! allocations and frees that never wait) and the device-memory heap (addresses only, frees
//! without the size).

mod common;

use core::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use buddyfree::buddy::Knuth;
use buddyfree::heap::DeviceHeap;
use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Backend, Magazine};
use buddyfree::zones::{Zone, Zones};
use buddyfree::{BlockAlloc, Config, ConfigRule, Error, Locked, Nbbs4};
use buddyfree_baselines::registry::{self, DynAlloc};
use common::{Owners, Rng, TryFrees};
use proptest::prelude::*;

fn build(name: &str, units: usize, max_order: u32) -> DynAlloc {
    (registry::find(name).unwrap().build)(
        Config::new(units, max_order).with_cores(2),
        Default::default(),
    )
    .unwrap()
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
    // Zone 1 at unit 100 would hand out blocks of order 3 at 100, 108, ...: not aligned.
    let misaligned = Zones::new([
        Zone::new(0, build("nbbs", 64, 3)),
        Zone::new(100, build("nbbs", 64, 3)),
    ]);
    assert_eq!(misaligned.err(), Some(ConfigRule::ZoneLayout.into()));
    assert!(Zones::new([Zone::new(104, build("nbbs", 64, 3))]).is_ok());
}

/// `next_block` goes zone after zone and passes the gaps between them. (The locked
/// buddies walk unit by unit: every 97th unit for them.)
#[test]
fn zones_find_their_next_block_across_gaps() {
    for name in NAMES {
        let z = zones(name);
        let mut live: Vec<(usize, u32)> = [(0, 3), (2, 0), (1, 5), (2, 6), (0, 0)]
            .into_iter()
            .map(|(zone, order)| (z.alloc_from(&[zone], order, 0).unwrap(), order))
            .collect();
        live.sort_unstable();
        let step = if name.ends_with("-locked") { 97 } else { 1 };
        for from in (0..z.total_units() + 2).step_by(step) {
            let expected = live.iter().find(|&&(s, o)| s + (1 << o) > from).copied();
            assert_eq!(
                z.next_block(from),
                Ok(expected),
                "{name}: next_block({from})"
            );
        }
    }
}

/// `drain_core` reaches every zone and only that core's magazine in each.
#[test]
fn zones_drain_one_core_in_every_zone() {
    let zone = |start| {
        let config = Config::new(256, 4).with_cores(2);
        Zone::new(
            start,
            Magazine::new(config, Nbbs4::new(config).unwrap()).unwrap(),
        )
    };
    let z = Zones::new([zone(0), zone(512)]).unwrap();
    let backends = |z: &Zones<Magazine<Nbbs4>, 2>| {
        z.zones()
            .each_ref()
            .map(|zone| zone.allocator().inner().free_units())
    };
    for core in 0..2 {
        for at in [0, 1] {
            let b = z.alloc_from(&[at], core as u32, core).unwrap();
            z.free(b, core as u32, core).unwrap();
        }
    }
    let parked = backends(&z).map(|free| 256 - free);
    z.drain_core(1);
    let only_core0 = backends(&z).map(|free| 256 - free);
    for at in 0..2 {
        assert!(
            0 < only_core0[at] && only_core0[at] < parked[at],
            "zone {at}"
        );
    }
    z.drain_core(0);
    assert_eq!(backends(&z), [256, 256]);
    assert_eq!(z.free_units(), 512);
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Zones that tile the space without gaps, each of a registry allocator, answer as one
    /// allocator of the whole space would (the model, whose trees of `2^max_order` units
    /// fall within one zone each): bulk operations included, and with every free a
    /// `try_free` where the zones offer it.
    #[test]
    fn zones_without_gaps_answer_as_one_allocator(ops in common::ops(128, 4, 200)) {
        for entry in registry::entries() {
            for (halves, max_order) in [((64, 64), 4), ((64, 36), 3)] {
                let max_order = max_order.min(entry.max_order);
                let zone = |first, units| {
                    let config = Config::new(units, max_order).with_cores(3);
                    Zone::new(first, (entry.build)(config, Default::default()).unwrap())
                };
                let z = Zones::new([zone(0, halves.0), zone(64, halves.1)]).unwrap();
                let config = Config::new(64 + halves.1, max_order).with_cores(3);
                let ops = common::clamp(&ops, max_order);
                if common::offers_try_free(&z) {
                    common::check_against_model(&TryFrees(z), config, &ops);
                } else {
                    common::check_against_model(&z, config, &ops);
                }
            }
        }
    }
}

/// An interrupt on a core whose code holds one zone's lock: `try_alloc` takes its block
/// from another zone, `try_free` frees what lies in the other zones and answers
/// `WouldBlock` (changing nothing) for the held zone, and with the other zones full the
/// allocation says `WouldBlock`, not out of memory, since the held zone has blocks.
#[test]
fn zones_never_wait_for_a_held_zone() {
    let locked = |units| Locked::<Knuth>::new(Knuth::new(Config::new(units, 4)).unwrap());
    let z = Zones::new([Zone::new(0, locked(64)), Zone::new(64, locked(32))]).unwrap();
    let low = z.alloc(2, 0).unwrap();
    let high = z.alloc_from(&[1], 2, 0).unwrap();
    assert!(low < 64 && high >= 64);
    z.zones()[0].allocator().with(|_| {
        let fell_back = z.alloc_with(&[0, 1], |zone| zone.try_alloc(2, 0)).unwrap();
        let next = z.try_alloc(2, 0).unwrap();
        assert!(fell_back >= 64 && next >= 64, "{fell_back} {next}");
        assert_eq!(
            z.alloc_with(&[0], |zone| zone.try_alloc(2, 0)),
            Err(Error::WouldBlock)
        );
        assert_eq!(z.try_free(low, 2, 0), Err(Error::WouldBlock));
        for block in [high, fell_back, next] {
            z.try_free(block, 2, 0).unwrap();
        }
        assert_eq!(z.try_free(high, 2, 0), Err(Error::NotAllocated));
        while z.alloc_with(&[1], |zone| zone.try_alloc(0, 0)).is_ok() {}
        assert_eq!(z.try_alloc(0, 0), Err(Error::WouldBlock));
        assert_eq!(
            z.alloc_with(&[1, 0], |zone| zone.try_alloc(0, 0)),
            Err(Error::WouldBlock)
        );
    });
    assert_eq!(z.free_units(), 60);
    let unheld = z.try_alloc(0, 0).unwrap();
    assert!(unheld < 64, "{unheld}");
    z.try_free(low, 2, 0).unwrap();
    assert_eq!(z.try_alloc(5, 0), Err(Error::BadOrder));
    let stats = z.stats();
    assert_eq!((stats[0].served, stats[1].served), (2, 35));
    assert_eq!(stats[1].fell_back, 1);
}

/// A bulk allocation takes from the zones in order, as whole-space indices, and goes on in
/// the next zone where one runs out.
/// `free_bulk` over blocks of every zone, in runs longer than one zone call takes, frees
/// them all; a block in a gap, a misaligned one or a double free stops it at that block
/// with `free`'s answer, the blocks before it freed and those after it still allocated.
#[test]
fn zones_free_in_bulk_zone_by_zone_and_stop_at_a_bad_block() {
    for name in NAMES {
        let z = zones(name);
        let free = z.free_units();
        let take = |zone: usize, n: usize, order: u32| -> Vec<usize> {
            (0..n)
                .map(|_| z.alloc_from(&[zone], order, 0).unwrap())
                .collect()
        };
        // Runs of 40, 3, 2 and 1 blocks, zone 0 twice.
        let runs = [take(1, 40, 0), take(0, 3, 0), take(2, 2, 0), take(0, 1, 0)];
        z.free_bulk(&runs.concat(), 0, 1).unwrap();
        assert_eq!(z.free_units(), free, "{name}");

        type Bad = fn(&[usize]) -> usize;
        let cases: [(u32, Bad, Error); 3] = [
            (0, |_| 1000, Error::OutOfRange),
            (1, |a| a[0] + 1, Error::Misaligned),
            (0, |a| a[0], Error::NotAllocated),
        ];
        for (order, bad, error) in cases {
            let (a, b) = (take(0, 2, order), take(2, 2, order));
            let bad = bad(&a);
            let blocks = [b[0], a[0], a[1], bad, b[1]];
            assert_eq!(z.free_bulk(&blocks, order, 0), Err((3, error)), "{name}");
            assert_eq!(z.free(bad, order, 0), Err(error), "{name}: free's answer");
            for freed in [b[0], a[1]] {
                assert_eq!(z.free(freed, order, 0), Err(Error::NotAllocated), "{name}");
            }
            z.free(b[1], order, 0).unwrap();
        }
        assert_eq!(z.free_units(), free, "{name}");
    }
}

/// Owned bulk frees reach each zone's `free_bulk_owned` (runs split by zone, indices the
/// zone's: every block freed, each once), `alloc_bulk_continues` holds where every zone's
/// does (LLFree's, not NBBS-4's), and magazines in front of zones spill through them.
#[test]
fn zones_forward_owned_bulk_frees_and_continuing_bulk_allocations() {
    let zones = |continues: [bool; 2]| {
        let zone = |first, continues| {
            let config = Config::new(2048, 9).with_cores(2);
            let inner: Box<dyn Backend> = if continues {
                Box::new(LLFree::new(config).unwrap())
            } else {
                Box::new(Nbbs4::new(config).unwrap())
            };
            Zone::new(first, inner)
        };
        Zones::new([zone(0, continues[0]), zone(4096, continues[1])]).unwrap()
    };
    assert!(zones([true, true]).alloc_bulk_continues());
    assert!(!zones([true, false]).alloc_bulk_continues());
    assert!(!zones([false, true]).alloc_bulk_continues());

    for continues in [[true, true], [false, true]] {
        let z = zones(continues);
        let take = |zone: usize, n: usize| -> Vec<usize> {
            (0..n)
                .map(|_| z.alloc_from(&[zone], 0, 0).unwrap())
                .collect()
        };
        let blocks = [take(1, 40), take(0, 3), take(1, 2)].concat();
        // SAFETY: each block allocated from `z` at order 0, named once, freed only here.
        unsafe { z.free_bulk_owned(&blocks, 0, 1) }.unwrap();
        assert_eq!(z.free_units(), 4096);
        for &b in &blocks {
            assert_eq!(z.free(b, 0, 0), Err(Error::NotAllocated));
        }
    }

    let inner = zones([true, true]);
    let config = Config::new(inner.total_units(), inner.max_order()).with_cores(2);
    let fast = Magazine::new(config, inner).unwrap();
    let burst: Vec<usize> = (0..3000).map(|_| fast.alloc(0, 1).unwrap()).collect();
    assert!(
        burst.iter().any(|&b| b >= 4096),
        "a burst past the first zone"
    );
    burst.iter().for_each(|&b| fast.free(b, 0, 1).unwrap());
    fast.drain();
    assert_eq!(fast.free_units(), 4096);
    assert_eq!(
        fast.inner().free_units(),
        4096,
        "spilled and drained through the zones"
    );
}

#[test]
fn zones_allocate_in_bulk_zone_after_zone() {
    for name in NAMES {
        let z = zones(name);
        let mut out = [0; 8];
        let n = z.alloc_bulk(3, 0, &mut out).unwrap();
        assert!(
            out[..n].iter().all(|&b| b < 1000 && b % 8 == 0),
            "{name}: {out:?}"
        );
        z.free_bulk(&out[..n], 3, 0).unwrap();
        assert_eq!(z.free_bulk(&out[..n], 3, 0), Err((0, Error::NotAllocated)));
        // Leave zone 0 three blocks of order 3.
        let zone0 = z.zones()[0].allocator();
        let full: Vec<usize> = std::iter::from_fn(|| zone0.alloc(3, 0).ok()).collect();
        full[..3].iter().for_each(|&b| zone0.free(b, 3, 0).unwrap());
        assert_eq!(z.alloc_bulk(3, 0, &mut out), Ok(8), "{name}");
        assert!(
            out[..3].iter().all(|&b| b < 1000 && b % 8 == 0),
            "{name}: {out:?}"
        );
        assert!(
            out[3..]
                .iter()
                .all(|&b| (1024..4096).contains(&b) && b % 8 == 0),
            "{name}: {out:?}"
        );
        assert_eq!(z.stats()[1].served, 5, "{name}");
        assert_eq!(z.alloc_bulk(7, 0, &mut out), Err(Error::BadOrder), "{name}");
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
                    Err(Error::OutOfMemory) => {}
                    Err(e) => panic!("{name}: {e}"),
                }
            } else {
                let pick = *live.keys().nth(rng.below(live.len())).unwrap();
                let len = live.remove(&pick).unwrap();
                assert_eq!(heap.order_at(pick), Ok((len / 4096).trailing_zeros()));
                heap.free_at(pick, step % 2).unwrap();
                assert_eq!(heap.free_at(pick, 0), Err(Error::NotAllocated));
            }
        }
        for &addr in live.keys() {
            heap.free_at(addr, 0).unwrap();
        }
        assert_eq!(heap.free_at(base - 4096, 0), Err(Error::Foreign));
        assert_eq!(heap.free_at(base + 1, 0), Err(Error::Misaligned));
        assert_eq!(heap.free_at(base + (4096 << 12), 0), Err(Error::Foreign));
        common::assert_whole(heap.allocator());
    }
    assert!(DeviceHeap::new(4097, 4096, build("nbbs", 64, 3)).is_err());
    assert!(DeviceHeap::new(u64::MAX - 4095, 4096, build("nbbs", 64, 3)).is_err());
}

/// A device heap's allocation and free that never wait: by layout and by address alone,
/// with the answers of `free` to bad frees, and `WouldBlock` (nothing changed) where the
/// allocator's lock is held.
#[test]
fn a_device_heap_allocates_and_frees_without_waiting() {
    let base = 0x40_0000_0000u64;
    let run = Layout::from_size_align(3 * 4096, 4096).unwrap();
    let page = Layout::from_size_align(4096, 4096).unwrap();
    let knuth = Locked::<Knuth>::new(Knuth::new(Config::new(64, 4)).unwrap());
    let heap = DeviceHeap::new(base, 4096, knuth).unwrap();
    let a = heap.try_alloc(run, 0).unwrap();
    assert_eq!(heap.order_at(a), Ok(2));
    let wrong = Err(Error::OrderMismatch);
    assert_eq!(heap.try_free(a, page, 0), wrong);
    assert_eq!(heap.try_free(base - 4096, page, 0), Err(Error::Foreign));
    let would_block = Error::WouldBlock;
    let b = heap.try_alloc(page, 0).unwrap();
    heap.allocator().with(|_| {
        assert_eq!(heap.try_alloc(page, 0), Err(would_block));
        assert_eq!(heap.try_free(a, run, 0), Err(would_block));
        assert_eq!(heap.try_free_at(b, 0), Err(would_block));
    });
    assert_eq!(heap.allocator().free_units(), 59);
    heap.try_free(a, run, 0).unwrap();
    let gone = Err(Error::NotAllocated);
    assert_eq!(heap.try_free(a, run, 0), gone);
    // By address alone: the block's order found without waiting.
    assert_eq!(heap.try_free_at(base - 4096, 0), Err(Error::Foreign));
    assert_eq!(heap.try_free_at(a, 0), gone);
    heap.try_free_at(b, 0).unwrap();
    assert_eq!(heap.try_free_at(b, 0), gone);
    assert_eq!(heap.allocator().free_units(), 64);
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
                    let gone = Err(Error::NotAllocated);
                    assert_eq!(core.free(addr, page), gone, "{name}");
                    assert_eq!(core.free_at(addr), gone, "{name}");
                }
                let wrong = Err(Error::OrderMismatch);
                assert_eq!(core.free(kept, page), wrong, "{name}");
                let inside = Err(Error::NotAllocated);
                assert_eq!(core.free(kept + 4096, page), inside, "{name}");
                assert_eq!(core.free_at(base - 4096), Err(Error::Foreign));
                let misaligned = Err(Error::Misaligned);
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
