//! Memory maps: allocators built with every unit reserved, then usable ranges freed with
//! ragged ends (`free_range`), holes reserved (`reserve_range`), blocks taken at a position
//! (`alloc_at`), compared step by step with the model; and stress around reserved ranges.

mod common;

use buddyfree::range::{self, aligned_blocks};
use buddyfree::{BlockAlloc, Config, Error, Locked, SeqBlockAlloc};
use buddyfree_baselines::model::Model;
use buddyfree_baselines::registry::{self, DynAlloc};
use common::{Owners, CONFIGS};
use proptest::prelude::*;

/// The registry entries that can take a block at a given position.
fn positional(config: Config) -> Vec<(&'static str, DynAlloc)> {
    let found: Vec<_> = registry::entries()
        .iter()
        .filter(|e| e.max_order >= config.max_order)
        .filter_map(|e| {
            let alloc = (e.build)(config, Default::default()).ok()?;
            match alloc.alloc_at(0, 0, 0) {
                Err(Error::Unsupported) => None,
                taken => {
                    taken.unwrap();
                    alloc.free(0, 0, 0).unwrap();
                    Some((e.name, alloc))
                }
            }
        })
        .collect();
    let names: Vec<_> = found.iter().map(|&(name, _)| name).collect();
    for name in ["nbbs4", "llfree", "knuth-locked", "llfree-magazine"] {
        assert!(names.contains(&name), "{name} lacks alloc_at: {names:?}");
    }
    found
}

/// Free ranges from cut points: sorted, disjoint, possibly empty, ragged.
fn free_ranges(cuts: &[usize], units: usize) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (units + 1)).collect();
    cuts.sort_unstable();
    cuts.chunks_exact(2).map(|c| (c[0], c[1] - c[0])).collect()
}

/// One step after the map is in place.
#[derive(Clone, Debug)]
enum Step {
    AllocAt(usize, u32),
    Alloc(u32),
    Free(usize),
    FreeRange(usize, usize),
    ReserveRange(usize, usize),
}

fn steps(units: usize, max_order: u32) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (0..units, 0..=max_order + 1).prop_map(|(i, o)| Step::AllocAt(i, o)),
        3 => (0..=max_order).prop_map(Step::Alloc),
        3 => any::<usize>().prop_map(Step::Free),
        1 => (0..units, 0..units / 2).prop_map(|(s, l)| Step::FreeRange(s, l)),
        1 => (0..units, 0..units / 2).prop_map(|(s, l)| Step::ReserveRange(s, l)),
    ];
    proptest::collection::vec(step, 1..60)
}

/// Runs the map and the steps on `alloc` and on the model side by side.
fn check_map(
    name: &str,
    alloc: &dyn BlockAlloc,
    config: Config,
    map: &[(usize, usize)],
    steps: &[Step],
) {
    let model = Locked::<Model>::new(Model::new(config).unwrap());
    range::reserve_all(alloc).unwrap();
    range::reserve_all(&model).unwrap();
    assert_eq!(alloc.free_units(), 0, "{name}: reserved all");
    for &(start, len) in map {
        assert_eq!(
            alloc.free_range(start, len, 0),
            Ok(()),
            "{name}: free_range({start}, {len})"
        );
        model.free_range(start, len, 0).unwrap();
    }
    let usable: usize = map.iter().map(|r| r.1).sum();
    assert_eq!(alloc.free_units(), usable, "{name}: after the map");
    // The model by its unit map, not by the range code under test.
    for &(start, len) in map {
        assert!(
            model.with(|m| m.is_free_range(start, len)),
            "{name}: model map"
        );
    }
    let units = config.units;
    for (n, step) in steps.iter().enumerate() {
        let core = n % 3;
        match *step {
            Step::AllocAt(index, order) => {
                let want = model.alloc_at(index, order, 0);
                assert_eq!(
                    alloc.alloc_at(index, order, core),
                    want,
                    "{name} {n}: alloc_at({index}, {order})"
                );
            }
            Step::Alloc(order) => match alloc.alloc(order, core) {
                Ok(index) => model
                    .alloc_at(index, order, 0)
                    .unwrap_or_else(|e| panic!("{name} {n}: alloc({order}) = {index}: {e}")),
                Err(Error::OutOfMemory) => {
                    assert!(
                        !model.with(|m| m.can_alloc(order)),
                        "{name} {n}: alloc({order}) failed"
                    )
                }
                Err(e) => panic!("{name} {n}: alloc({order}): {e}"),
            },
            Step::Free(p) => {
                let live: Vec<_> = model.with(|m| m.live().collect());
                if let Some(&(index, order)) = live.get(p % live.len().max(1)) {
                    assert_eq!(
                        alloc.order_at(index),
                        Ok(order),
                        "{name} {n}: order_at({index})"
                    );
                    let want = model.free(index, order, 0);
                    // The baselines keep no boot reservation: they free what the published
                    // allocators (and the model) refuse, so those frees are not asked.
                    if want != Err(Error::Reserved) || buddyfree::registry::find(name).is_some() {
                        assert_eq!(alloc.free(index, order, core), want, "{name} {n}");
                    }
                }
            }
            Step::FreeRange(start, len) => {
                let len = len.min(units - start);
                let want = model.free_range(start, len, 0);
                // A refused range changes nothing; a cut range changes the block structure
                // only inside the range and next to its ends, which the model mirrors.
                assert_eq!(
                    alloc.free_range(start, len, core),
                    want,
                    "{name} {n}: free_range({start}, {len})"
                );
            }
            Step::ReserveRange(start, len) => {
                let len = len.min(units - start);
                let want = model.reserve_range(start, len, 0);
                assert_eq!(
                    alloc.reserve_range(start, len, core),
                    want,
                    "{name} {n}: reserve_range({start}, {len})"
                );
            }
        }
        assert_eq!(
            alloc.free_units(),
            model.free_units(),
            "{name} {n}: free units after {step:?}"
        );
        for unit in 0..units {
            assert_eq!(
                alloc.block_of(unit),
                model.block_of(unit),
                "{name} {n}: block_of({unit})"
            );
        }
    }
}

trait ModelExt {
    fn is_free_range(&self, start: usize, len: usize) -> bool;
}

impl ModelExt for Model {
    fn is_free_range(&self, start: usize, len: usize) -> bool {
        aligned_blocks(start, len, 0).all(|(i, _)| self.is_free(i, 0))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn memory_maps_free_ranges_and_alloc_at_match_the_model(
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        steps in steps(100, 6),
        which in 0..CONFIGS.len(),
    ) {
        let (units, max_order) = CONFIGS[which];
        let config = Config::new(units, max_order).with_cores(2);
        let map = free_ranges(&cuts, units);
        let steps: Vec<Step> = steps
            .into_iter()
            .map(|s| match s {
                Step::AllocAt(i, o) => Step::AllocAt(i % units, o.min(max_order + 1)),
                Step::Alloc(o) => Step::Alloc(o.min(max_order)),
                Step::FreeRange(s, l) => Step::FreeRange(s % units, l),
                Step::ReserveRange(s, l) => Step::ReserveRange(s % units, l),
                other => other,
            })
            .collect();
        for (name, alloc) in positional(config) {
            check_map(name, &*alloc, config, &map, &steps);
        }
    }
}

#[test]
fn every_scalable_and_bounded_time_allocator_takes_blocks_at_a_position() {
    let config = Config::new(1 << 12, 10).with_cores(2);
    let names: Vec<_> = positional(config).into_iter().map(|(n, _)| n).collect();
    for want in [
        "model",
        "nbbs",
        "nbbs4",
        "knuth-locked",
        "estranged-locked",
        "llfree",
        "linux",
        "nbbs-magazine",
        "nbbs4-magazine",
        "llfree-magazine",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
}

/// Reserved ranges under stress: threads allocate, free and pass blocks around a heap whose
/// holes are claimed in the ownership map; a reserved unit handed out fails the claim.
#[test]
fn stress_never_hands_out_a_reserved_unit() {
    let config = Config::new(5000, 8).with_cores(2);
    let holes = [(0, 3), (700, 129), (2048, 1), (4090, 910)];
    for (name, alloc) in positional(config) {
        let owners = Owners::new(config.units);
        let reserved: usize = holes.iter().map(|h| h.1).sum();
        for &(start, len) in &holes {
            alloc.reserve_range(start, len, 0).unwrap();
            for (index, order) in aligned_blocks(start, len, 0) {
                owners.claim(index, order, u64::MAX);
            }
        }
        common::stress_with(&*alloc, &owners, 2, 4000, 6);
        alloc.drain();
        assert_eq!(alloc.free_units(), config.units - reserved, "{name}");
        for &(start, len) in &holes {
            alloc.free_range(start, len, 0).unwrap();
        }
        common::assert_whole(&*alloc);
    }
}

#[test]
fn a_refused_range_changes_nothing() {
    for (name, alloc) in positional(Config::new(256, 4)) {
        let index = alloc.alloc(0, 0).unwrap();
        let before: Vec<_> = (0..256).map(|u| alloc.block_of(u).unwrap()).collect();
        assert_eq!(
            alloc.reserve_range(index & !63, 64, 0),
            Err(Error::Occupied),
            "{name}"
        );
        assert_eq!(
            alloc.free_range(index, 2, 0),
            Err(Error::NotAllocated),
            "{name}"
        );
        assert_eq!(
            alloc.free_range(250, 7, 0),
            Err(Error::OutOfRange),
            "{name}"
        );
        let after: Vec<_> = (0..256).map(|u| alloc.block_of(u).unwrap()).collect();
        assert_eq!(before, after, "{name}");
        assert_eq!(alloc.order_at(index), Ok(0));
        assert_eq!(alloc.order_at(index + 1), Err(Error::NotAllocated));
        assert_eq!(alloc.order_at(256), Err(Error::OutOfRange));
    }
}

#[test]
fn try_alloc_never_waits_for_a_held_lock() {
    let knuth = registry::find("knuth-locked").unwrap();
    let alloc = (knuth.build)(Config::new(64, 3), Default::default()).unwrap();
    assert!(alloc.try_alloc(0, 0).is_ok());
    let locked = Locked::<buddyfree::buddy::Knuth>::new(
        buddyfree::buddy::Knuth::new(Config::new(64, 3)).unwrap(),
    );
    let inner = locked.with(|_| locked.try_alloc(0, 0));
    assert_eq!(inner, Err(Error::WouldBlock));
    for name in ["nbbs", "nbbs4", "llfree"] {
        let alloc =
            (registry::find(name).unwrap().build)(Config::new(4096, 10), Default::default())
                .unwrap();
        // Without waiting, every block is found while one is free.
        for _ in 0..64 {
            alloc.try_alloc(3, 0).unwrap();
        }
        while alloc.free_units() > 0 {
            alloc.try_alloc(0, 0).unwrap();
        }
        assert_eq!(alloc.try_alloc(0, 0), Err(Error::OutOfMemory), "{name}");
    }
}

#[allow(dead_code)]
fn _seq_is_object_safe(_: &dyn SeqBlockAlloc) {}
