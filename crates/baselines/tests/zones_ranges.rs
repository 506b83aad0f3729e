//! Ranges over zones (issue 46): `reserve_range` and `free_range` on zones whose largest
//! orders differ (an order-0 zone among them), inside one zone, across the boundary of two
//! adjacent zones, across a gap between zones and with ragged ends, against a reference kept
//! zone by zone and by unit.

mod common;

use buddyfree::nbbs::Nbbs4;
use buddyfree::range;
use buddyfree::zones::{Zone, Zones};
use buddyfree::{BlockAlloc, Config, Error, Locked};
use buddyfree_baselines::model::Model;
use buddyfree_baselines::registry::{self, DynAlloc};
use proptest::prelude::*;

/// Zones as `(first, units, max_order)`.
type Layout = [(usize, usize, u32)];

/// Largest orders 6, 2, 0 and 4, ragged zone ends (38 units of order 2, 50 of order 4),
/// two zones that meet (at 64) and two gaps (102..104, 113..128).
const GAPPED: [(usize, usize, u32); 4] = [(0, 64, 6), (64, 38, 2), (104, 9, 0), (128, 50, 4)];

/// No gaps, largest orders rising from 0: a range across a boundary meets a larger zone.
const RISING: [(usize, usize, u32); 3] = [(0, 16, 0), (16, 48, 4), (64, 64, 6)];

/// The issue's layout: an order-6 zone beside an order-10 one.
const ISSUE: [(usize, usize, u32); 2] = [(0, 1024, 10), (1024, 1024, 6)];

/// The registry entries that take a block at a position, each as zones of `layout`.
fn zoned<const N: usize>(
    layout: &[(usize, usize, u32); N],
) -> Vec<(&'static str, Zones<DynAlloc, N>)> {
    let found: Vec<_> = registry::entries()
        .iter()
        .filter(|e| layout.iter().all(|&(_, _, order)| order <= e.max_order))
        .filter_map(|e| {
            let built: Result<Vec<_>, Error> = layout
                .iter()
                .map(|&(first, units, order)| {
                    let config = Config::new(units, order).with_cores(2);
                    Ok(Zone::new(first, (e.build)(config, Default::default())?))
                })
                .collect();
            let zones = Zones::new(built.ok()?.try_into().ok()?).unwrap();
            match zones.alloc_at(0, 0, 0) {
                Err(Error::Unsupported) => None,
                taken => {
                    taken.unwrap();
                    zones.free(0, 0, 0).unwrap();
                    Some((e.name, zones))
                }
            }
        })
        .collect();
    let names: Vec<_> = found.iter().map(|&(name, _)| name).collect();
    for name in ["nbbs4", "nbbs", "knuth-locked", "llfree", "nbbs4-magazine"] {
        assert!(
            names.contains(&name),
            "{name} missing from {names:?} for {layout:?}"
        );
    }
    found
}

/// The two range operations.
#[derive(Clone, Copy, Debug)]
enum Range {
    Reserve,
    Free,
}

use Range::{Free, Reserve};

/// The reference: one model per zone, and the rules of the range operations written by
/// unit. A range that reaches past the last zone or has a unit in no zone is `OutOfRange`;
/// then `reserve_range` wants every unit free (else `Occupied`) and `free_range` every unit
/// allocated (else `NotAllocated`); a refused range changes nothing, and an accepted one
/// is done by each zone's model on its part.
struct Reference {
    zones: Vec<(usize, Locked<Model>)>,
    total: usize,
}

impl Reference {
    fn new(layout: &Layout) -> Self {
        let zones = layout
            .iter()
            .map(|&(first, units, order)| {
                let model = Model::new(Config::new(units, order)).unwrap();
                (first, Locked::<Model>::new(model))
            })
            .collect();
        let &(first, units, _) = layout.last().unwrap();
        Reference {
            zones,
            total: first + units,
        }
    }

    /// The zone of `unit` and its index there.
    fn zone_of(&self, unit: usize) -> Option<(usize, usize)> {
        self.zones
            .iter()
            .enumerate()
            .find_map(|(z, (first, model))| {
                (unit >= *first && unit - first < model.total_units()).then(|| (z, unit - first))
            })
    }

    /// Every unit of the range by zone: `(zone, its index, units)` for each zone's part.
    fn parts(&self, start: usize, len: usize) -> Result<Vec<(usize, usize, usize)>, Error> {
        let end = start.checked_add(len).ok_or(Error::OutOfRange)?;
        if end > self.total {
            return Err(Error::OutOfRange);
        }
        let mut parts: Vec<(usize, usize, usize)> = Vec::new();
        for unit in start..end {
            let (z, inner) = self.zone_of(unit).ok_or(Error::OutOfRange)?;
            match parts.last_mut() {
                Some((at, _, n)) if *at == z => *n += 1,
                _ => parts.push((z, inner, 1)),
            }
        }
        Ok(parts)
    }

    fn allocated(&self, z: usize, inner: usize) -> bool {
        self.zones[z].1.block_of(inner).unwrap().is_some()
    }

    fn reserve_range(&self, start: usize, len: usize) -> Result<(), Error> {
        self.range(start, len, Error::Occupied, true, |model, at, n| {
            model.reserve_range(at, n, 0)
        })
    }

    fn free_range(&self, start: usize, len: usize) -> Result<(), Error> {
        self.range(start, len, Error::NotAllocated, false, |model, at, n| {
            model.free_range(at, n, 0)
        })
    }

    /// A range operation that `refused` answers where a unit is `allocated` (or not), and
    /// `each` does on each zone's part otherwise.
    fn range(
        &self,
        start: usize,
        len: usize,
        refused: Error,
        allocated: bool,
        each: impl Fn(&Locked<Model>, usize, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let parts = self.parts(start, len)?;
        for &(z, at, n) in &parts {
            if (at..at + n).any(|u| self.allocated(z, u) == allocated) {
                return Err(refused);
            }
        }
        for &(z, at, n) in &parts {
            each(&self.zones[z].1, at, n).unwrap();
        }
        Ok(())
    }

    fn free_units(&self) -> usize {
        self.zones.iter().map(|(_, m)| m.free_units()).sum()
    }

    /// `block_of` as the zones answer it: in the whole space, `OutOfRange` in a gap.
    fn block_of(&self, unit: usize) -> Result<Option<(usize, u32)>, Error> {
        let (z, inner) = self.zone_of(unit).ok_or(Error::OutOfRange)?;
        let (first, model) = &self.zones[z];
        Ok(model
            .block_of(inner)?
            .map(|(at, order)| (first + at, order)))
    }

    /// Every unit's block as the zones see it.
    fn assert_same(&self, zones: &dyn BlockAlloc, what: &str) {
        assert_eq!(zones.free_units(), self.free_units(), "{what}: free units");
        for unit in 0..self.total + 2 {
            let want = if unit < self.total {
                self.block_of(unit)
            } else {
                Err(Error::OutOfRange)
            };
            assert_eq!(zones.block_of(unit), want, "{what}: block_of({unit})");
        }
    }
}

/// Every zone whole again (the zones together have no whole blocks of the largest order).
fn each_whole<A: BlockAlloc, const N: usize>(zones: &Zones<A, N>) {
    for zone in zones.zones() {
        common::assert_whole(zone.allocator());
    }
}

/// `op` on the zones and on the reference, with the same answer, and after it the same
/// block at every unit: the zones' answer.
fn range_both(
    zones: &dyn BlockAlloc,
    reference: &Reference,
    (op, start, len): (Range, usize, usize),
    core: usize,
    what: &str,
) -> Result<(), Error> {
    let (got, want) = match op {
        Reserve => (
            zones.reserve_range(start, len, core),
            reference.reserve_range(start, len),
        ),
        Free => (
            zones.free_range(start, len, core),
            reference.free_range(start, len),
        ),
    };
    let what = format!("{what}: {op:?}({start}, {len})");
    assert_eq!(got, want, "{what}");
    reference.assert_same(zones, &what);
    got
}

/// Each of `steps` on the zones and the reference: the answer written beside it from both.
fn ranges_in_turn(
    name: &str,
    zones: &dyn BlockAlloc,
    reference: &Reference,
    steps: &[(Range, usize, usize, Result<(), Error>)],
) {
    for (n, &(op, start, len, answer)) in steps.iter().enumerate() {
        let what = format!("{name} step {n}");
        let got = range_both(zones, reference, (op, start, len), n % 3, &what);
        assert_eq!(got, answer, "{what}: {op:?}({start}, {len})");
    }
}

/// The issue's examples: ranges inside the order-6 zone, all free, are reserved.
#[test]
fn a_free_range_in_a_smaller_zone_is_reserved() {
    let zones = Zones::new([
        Zone::new(0, Nbbs4::new(Config::new(1024, 10)).unwrap()),
        Zone::new(1024, Nbbs4::new(Config::new(1024, 6)).unwrap()),
    ])
    .unwrap();
    assert_eq!(zones.reserve_range(1030, 50, 0), Ok(()));
    assert_eq!(zones.free_range(1030, 50, 0), Ok(()));
    assert_eq!(zones.reserve_range(1024, 256, 0), Ok(()));
    assert_eq!(zones.reserve_range(1536, 300, 0), Ok(()));
    assert_eq!(zones.reserve_range(1030, 50, 0), Err(Error::Occupied));
    assert_eq!(zones.free_units(), 2048 - 256 - 300);
    // The order-6 zone's largest blocks, in the whole space.
    assert_eq!(zones.block_of(1100), Ok(Some((1088, 6))));
    assert_eq!(zones.block_of(1835), Ok(Some((1832, 2))));
    for (start, len) in [(1024, 256), (1536, 300)] {
        assert_eq!(zones.free_range(start, len, 0), Ok(()));
    }
    assert_eq!(zones.free_units(), 2048);
    // All of it, then all of it back.
    assert_eq!(range::reserve_all(&zones), Ok(()));
    assert_eq!(zones.free_units(), 0);
    assert_eq!(zones.free_range(0, 2048, 0), Ok(()));
    each_whole(&zones);
}

/// Ranges inside one zone, across the boundary of two zones and with ragged ends, on every
/// positional allocator: refused ranges change nothing.
#[test]
fn ranges_across_zones_of_unequal_orders_match_the_reference() {
    for (name, zones) in zoned(&ISSUE) {
        let reference = Reference::new(&ISSUE);
        let (occupied, unallocated) = (Err(Error::Occupied), Err(Error::NotAllocated));
        ranges_in_turn(
            name,
            &zones,
            &reference,
            &[
                (Reserve, 1024, 256, Ok(())),
                (Reserve, 1536, 300, Ok(())),
                (Reserve, 1030, 50, occupied),
                (Reserve, 1000, 100, occupied),
                (Reserve, 3, 1021, Ok(())),
                (Reserve, 2023, 25, Ok(())),
                // Cuts a block of order 9 in one zone and one of order 6 in the other.
                (Free, 1000, 100, Ok(())),
                (Reserve, 1020, 4, Ok(())),
                (Free, 1023, 2, unallocated),
                (Reserve, 0, 2048, occupied),
                (Free, 3, 2044, unallocated),
                (Free, 1500, 40, unallocated),
                (Free, 1536, 300, Ok(())),
                (Free, 3, 997, Ok(())),
                (Free, 1020, 4, Ok(())),
                (Free, 2023, 25, Ok(())),
                (Free, 1100, 180, Ok(())),
            ],
        );
        assert_eq!(zones.free_units(), 2048, "{name}");
        each_whole(&zones);
    }
}

/// An order-0 zone beside larger ones, gaps between zones: a range with a unit in a gap is
/// `OutOfRange` and changes nothing, whether its units in zones are free or allocated
/// (before any other refusal, as a range past the end), and a zone's range up to a gap
/// frees and reserves.
#[test]
fn ranges_over_a_gap_are_out_of_range_and_change_nothing() {
    for (name, zones) in zoned(&GAPPED) {
        let reference = Reference::new(&GAPPED);
        let outside = Err(Error::OutOfRange);
        ranges_in_turn(
            name,
            &zones,
            &reference,
            &[
                (Reserve, 100, 6, outside),
                (Reserve, 110, 20, outside),
                (Reserve, 0, 178, outside),
                (Reserve, 110, 0, Ok(())),
                (Reserve, 0, 102, Ok(())),
                (Free, 60, 44, outside),
                (Free, 100, 2, Ok(())),
                (Free, 0, 102, Err(Error::NotAllocated)),
                // Unit 100 is free too, but the gap answers.
                (Free, 44, 59, outside),
                (Reserve, 104, 9, Ok(())),
                (Free, 104, 10, outside),
                (Free, 104, 9, Ok(())),
                (Reserve, 105, 3, Ok(())),
                (Reserve, 128, 51, outside),
                (Reserve, 128, 50, Ok(())),
                (Reserve, 178, 0, Ok(())),
                (Reserve, 179, 0, outside),
                (Free, 0, usize::MAX, outside),
            ],
        );
        assert_eq!(range::reserve_all(&zones), outside, "{name}");
        // Free: 100 and 101 (order 2's ragged end), 104 and 108..113 (order 0).
        assert_eq!(zones.free_units(), 8, "{name}");
    }
}

/// A range whose part in a later zone is refused gives back what it took in the zones
/// before, and a free refused there frees nothing in them: nothing changed.
#[test]
fn a_range_refused_in_a_later_zone_changes_nothing_in_the_earlier_ones() {
    for (name, zones) in zoned(&RISING) {
        let reference = Reference::new(&RISING);
        zones.alloc_at(100, 0, 0).unwrap();
        reference.zones[2].1.alloc_at(36, 0, 0).unwrap();
        let unallocated = Err(Error::NotAllocated);
        ranges_in_turn(
            name,
            &zones,
            &reference,
            &[
                (Reserve, 3, 100, Err(Error::Occupied)),
                (Reserve, 3, 97, Ok(())),
                // Unit 2 is free: the first zone refuses.
                (Free, 2, 99, unallocated),
                // Unit 101 is: the last zone would refuse after the first two freed.
                (Free, 3, 99, unallocated),
                (Free, 3, 98, Ok(())),
            ],
        );
        assert_eq!(zones.free_units(), 128, "{name}");
        each_whole(&zones);
    }
}

/// One step of the differential run.
#[derive(Clone, Debug)]
enum Step {
    /// `alloc_at` of a block inside a zone: zone, unit and order, each folded into range.
    AllocAt(usize, usize, u32),
    /// Free the live block this number picks.
    Free(usize),
    /// A range inside one zone: zone, start and length, folded.
    InZone(Range, usize, usize, usize),
    /// Any range of the whole space (some past its end).
    Anywhere(Range, usize, usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let op = || prop_oneof![Just(Reserve), Just(Free)];
    let step = prop_oneof![
        3 => (any::<usize>(), any::<usize>(), 0..7u32)
            .prop_map(|(z, u, o)| Step::AllocAt(z, u, o)),
        2 => any::<usize>().prop_map(Step::Free),
        3 => (op(), any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(op, z, s, l)| Step::InZone(op, z, s, l)),
        3 => (op(), 0..190usize, 0..140usize).prop_map(|(op, s, l)| Step::Anywhere(op, s, l)),
    ];
    proptest::collection::vec(step, 1..40)
}

/// Runs `steps` on `zones` and the reference side by side, every unit's block compared
/// after each step.
fn check(name: &str, zones: &dyn BlockAlloc, layout: &Layout, steps: &[Step]) {
    let reference = Reference::new(layout);
    for (n, step) in steps.iter().enumerate() {
        let core = n % 3;
        let what = format!("{name} step {n}: {step:?}");
        match *step {
            Step::AllocAt(z, unit, order) => {
                let (first, units, max_order) = layout[z % layout.len()];
                let order = order % (max_order + 1);
                let inner = (unit % units) & !((1 << order) - 1);
                if inner + (1 << order) <= units {
                    let model = &reference.zones[z % layout.len()].1;
                    let want = model.alloc_at(inner, order, 0);
                    assert_eq!(zones.alloc_at(first + inner, order, core), want, "{what}");
                }
            }
            Step::Free(pick) => {
                let live: Vec<(usize, u32)> = reference
                    .zones
                    .iter()
                    .flat_map(|(first, model)| {
                        let live: Vec<_> = model.with(|m| m.live().collect());
                        live.into_iter().map(move |(at, order)| (first + at, order))
                    })
                    .collect();
                if let Some(&(index, order)) = live.get(pick % live.len().max(1)) {
                    let (z, inner) = reference.zone_of(index).unwrap();
                    let want = reference.zones[z].1.free(inner, order, 0);
                    // The baselines keep no boot reservation: they free what the published
                    // allocators (and the model) refuse, so those frees are not asked.
                    if want != Err(Error::Reserved) || buddyfree::registry::find(name).is_some() {
                        assert_eq!(zones.free(index, order, core), want, "{what}");
                    }
                }
            }
            Step::InZone(op, z, start, len) => {
                let (first, units, _) = layout[z % layout.len()];
                let start = start % units;
                let len = len % (units - start + 1);
                let _ = range_both(zones, &reference, (op, first + start, len), core, &what);
            }
            Step::Anywhere(op, start, len) => {
                let _ = range_both(zones, &reference, (op, start, len), core, &what);
            }
        }
        reference.assert_same(zones, &what);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Zones of unequal largest orders, with and without gaps, on every positional
    /// allocator: every answer, `free_units` and every unit's block as the reference's.
    #[test]
    fn zone_ranges_match_a_zone_by_zone_reference(steps in steps()) {
        for (name, zones) in zoned(&GAPPED) {
            check(name, &zones, &GAPPED, &steps);
        }
        for (name, zones) in zoned(&RISING) {
            check(name, &zones, &RISING, &steps);
        }
    }
}
