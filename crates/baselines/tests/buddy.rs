//! The battery on the buddy systems: Knuth's and the estranged buddy behind a global lock,
//! the parallel binary buddy with a lock per level (spinlock and spin-then-yield variants).

mod common;

use buddyfree::{Config, Error};
use buddyfree_baselines::per_level::PerLevelSpin;
use buddyfree_baselines::registry::{self, DynAlloc};
use proptest::prelude::*;

/// Every buddy of this file, by registry name, for the shared battery below.
const ALLOCS: &[&str] = &[
    "knuth-locked",
    "estranged-locked",
    "perlevel-spin",
    "perlevel-yield",
];

/// The registered allocator `name` over `config`.
fn build(name: &str, config: Config) -> Result<DynAlloc, Error> {
    (registry::find(name).expect("registered").build)(config, Default::default())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]
    #[test]
    fn every_buddy_matches_model(
        which in 0..ALLOCS.len(),
        config in 0..common::CONFIGS.len(),
        ops in common::ops(100, 5, 200),
    ) {
        let (units, max_order) = common::CONFIGS[config];
        let config = Config::new(units, max_order);
        let ops = common::clamp(&ops, max_order);
        let alloc = build(ALLOCS[which], config).unwrap();
        common::check_against_model(&*alloc, config, &ops);
    }
}

#[test]
fn every_buddy_survives_stress() {
    for &name in ALLOCS {
        for (units, max_order, threads) in [(1000, 6, 4), (256, 4, 6)] {
            let alloc = build(name, Config::new(units, max_order)).unwrap();
            let allocs = common::stress(&*alloc, threads, 20_000, max_order);
            assert!(allocs > 0, "{name}");
        }
    }
}

#[test]
fn every_buddy_frees_each_block_once_under_racing_double_frees() {
    for &name in ALLOCS {
        let alloc = build(name, Config::new(300, 4)).unwrap();
        common::double_free_race(&*alloc, 4, 150, 1);
    }
}

#[test]
fn per_level_counts_lock_waits_consistently() {
    let alloc = PerLevelSpin::new(Config::new(1024, 6)).unwrap();
    let threads = 4;
    common::stress(&alloc, threads, 20_000, 6);
    let stats = alloc.level_stats();
    assert_eq!(stats.len(), 7);
    assert!(stats.iter().all(|s| s.acquired > 0));
    for s in &stats {
        assert!(s.waits <= s.acquired, "{s:?}");
        assert!(s.pending_high_water <= threads, "{s:?}");
        assert_eq!(s.pending_high_water == 0, s.waits == 0, "{s:?}");
    }
    // Whole again: every unit is on the top level's list.
    assert_eq!(stats[6].free_blocks, 1024 >> 6);
    alloc.reset_stats();
    assert!(alloc
        .level_stats()
        .iter()
        .all(|s| s.acquired == 0 && s.waits == 0));
}

// On-demand defragmentation (§2.8), on Knuth's and the estranged buddy.

mod defragmentation {
    use super::common::Rng;
    use buddyfree::buddy::{alloc_or_defrag, defrag, Defrag, Estranged, Knuth, Move};
    use buddyfree::{Config, Error};
    use std::collections::BTreeMap;

    /// What the allocator says about one unit: the live block containing it, the free entry
    /// covering it.
    type UnitView = (Result<Option<(usize, u32)>, Error>, Option<(usize, u32)>);

    /// An allocator with a memory of one word per unit: every live block's units hold its
    /// stamp, free units hold 0. Moves copy the words, so lost or mixed contents show.
    struct Heap<A> {
        alloc: A,
        memory: Vec<u64>,
        live: BTreeMap<usize, (u32, u64)>,
        next_stamp: u64,
    }

    impl<A: Defrag> Heap<A> {
        fn new(build: fn(Config) -> Result<A, Error>, units: usize, max_order: u32) -> Self {
            Heap {
                alloc: build(Config::new(units, max_order)).unwrap(),
                memory: vec![0; units],
                live: BTreeMap::new(),
                next_stamp: 1,
            }
        }

        fn fill(&mut self, index: usize, order: u32) {
            let stamp = self.next_stamp;
            self.next_stamp += 1;
            self.memory[index..index + (1 << order)].fill(stamp);
            self.live.insert(index, (order, stamp));
        }

        /// Places a live block exactly at `index`.
        fn place(&mut self, index: usize, order: u32) {
            self.alloc.alloc_at(index, order).unwrap();
            self.fill(index, order);
        }

        fn alloc(&mut self, order: u32) -> Option<usize> {
            let index = self.alloc.alloc(order).ok()?;
            self.fill(index, order);
            Some(index)
        }

        fn free(&mut self, index: usize) {
            let (order, _) = self.live.remove(&index).unwrap();
            self.alloc.free(index, order).unwrap();
            self.memory[index..index + (1 << order)].fill(0);
        }

        /// Defragments for `order` and checks every move as it is made: from a live block of
        /// that order, to units that are all free.
        fn defrag(&mut self, order: u32) -> Result<Vec<Move>, Error> {
            let (memory, live) = (&mut self.memory, &mut self.live);
            let mut seen = Vec::new();
            let result = defrag(&mut self.alloc, order, |from, to, o| {
                let (lo, stamp) = live
                    .remove(&from)
                    .expect("move from a block that is not live");
                assert_eq!(lo, o, "move of ({from}, {o}) changes the order");
                let size = 1 << o;
                assert!(
                    memory[to..to + size].iter().all(|&w| w == 0),
                    "move to a busy block"
                );
                assert!(memory[from..from + size].iter().all(|&w| w == stamp));
                memory.copy_within(from..from + size, to);
                memory[from..from + size].fill(0);
                live.insert(to, (o, stamp));
                seen.push(Move { from, to, order: o });
            });
            if let Ok(moves) = &result {
                assert_eq!(moves, &seen, "returned moves differ from the calls");
            } else {
                assert!(seen.is_empty(), "a failed defragmentation moved blocks");
            }
            result
        }

        /// Every live block still holds its stamp and the allocator agrees it is live (it frees
        /// it); afterwards the allocator is whole.
        fn check_and_empty(mut self) {
            let live: Vec<_> = self.live.iter().map(|(&i, &(o, s))| (i, o, s)).collect();
            for (index, order, stamp) in live {
                assert!(self.memory[index..index + (1 << order)]
                    .iter()
                    .all(|&w| w == stamp));
                self.free(index);
            }
            assert_eq!(self.alloc.free_units(), self.alloc.total_units());
            let top = self.alloc.max_order();
            let blocks = std::iter::from_fn(|| self.alloc.alloc(top).ok()).count();
            assert_eq!(blocks, self.alloc.total_units() >> top);
        }

        /// What the allocator says about every unit, to compare states.
        fn snapshot(&self) -> Vec<UnitView> {
            (0..self.memory.len())
                .map(|u| (self.alloc.block_of(u), self.alloc.free_entry(u)))
                .collect()
        }
    }

    fn both(test: impl Fn(&dyn Fn(usize, u32) -> Box<dyn Check>)) {
        test(&|units, max_order| Box::new(Heap::new(Knuth::new, units, max_order)));
        test(&|units, max_order| Box::new(Heap::new(Estranged::new, units, max_order)));
    }

    /// The heap operations the tests use, object-safe so one test body runs on both buddies.
    trait Check {
        fn place(&mut self, index: usize, order: u32);
        fn alloc(&mut self, order: u32) -> Option<usize>;
        fn free(&mut self, index: usize);
        fn defrag(&mut self, order: u32) -> Result<Vec<Move>, Error>;
        fn free_units(&self) -> usize;
        fn live(&self) -> Vec<usize>;
        fn snapshot(&self) -> Vec<UnitView>;
        fn alloc_or_defrag(&mut self, order: u32) -> Result<(usize, usize), Error>;
        fn check_and_empty(self: Box<Self>);
    }

    impl<A: Defrag> Check for Heap<A> {
        fn place(&mut self, index: usize, order: u32) {
            Heap::place(self, index, order)
        }
        fn alloc(&mut self, order: u32) -> Option<usize> {
            Heap::alloc(self, order)
        }
        fn free(&mut self, index: usize) {
            Heap::free(self, index)
        }
        fn defrag(&mut self, order: u32) -> Result<Vec<Move>, Error> {
            Heap::defrag(self, order)
        }
        fn free_units(&self) -> usize {
            self.alloc.free_units()
        }
        fn live(&self) -> Vec<usize> {
            self.live.keys().copied().collect()
        }
        fn snapshot(&self) -> Vec<UnitView> {
            Heap::snapshot(self)
        }
        fn alloc_or_defrag(&mut self, order: u32) -> Result<(usize, usize), Error> {
            let mut moved = 0;
            let memory = &mut self.memory;
            let live = &mut self.live;
            let (index, moves) = alloc_or_defrag(&mut self.alloc, order, |from, to, o| {
                let entry = live.remove(&from).unwrap();
                memory.copy_within(from..from + (1 << o), to);
                memory[from..from + (1 << o)].fill(0);
                live.insert(to, entry);
                moved += 1;
            })?;
            assert_eq!(moves.len(), moved);
            self.fill(index, order);
            Ok((index, moved))
        }
        fn check_and_empty(self: Box<Self>) {
            Heap::check_and_empty(*self)
        }
    }

    #[test]
    fn every_other_unit_freed_then_a_large_request() {
        // The paper's contrived case (§3.1): N small blocks, every other one freed.
        both(|heap| {
            let mut h = heap(64, 6);
            let units: Vec<_> = (0..64).map(|_| h.alloc(0).unwrap()).collect();
            for &u in units.iter().step_by(2) {
                h.free(u);
            }
            assert_eq!(h.alloc(5), None);
            let moves = h.defrag(5).unwrap();
            assert_eq!(
                moves.len(),
                16,
                "exactly the 16 live units of one half move"
            );
            assert!(h.alloc(5).is_some());
            h.check_and_empty();
        });
    }

    #[test]
    fn cascades_when_no_hole_of_the_moved_size_exists() {
        // Four blocks of 8: each has a live block of 4 and one live unit, 3 units free. Emptying
        // any of them needs a free block of 4 elsewhere, which must itself be made first.
        both(|heap| {
            let mut h = heap(32, 5);
            for p in (0..32).step_by(8) {
                h.place(p, 2);
                h.place(p + 4, 0);
            }
            assert_eq!(h.free_units(), 12);
            assert_eq!(h.alloc(3), None);
            let moves = h.defrag(3).unwrap();
            assert!(!moves.is_empty() && moves.len() <= 7, "{moves:?}");
            assert!(h.alloc(3).is_some());
            h.check_and_empty();
        });
    }

    #[test]
    fn failure_moves_nothing_and_changes_nothing() {
        both(|heap| {
            let mut h = heap(32, 5);
            for p in (0..32).step_by(4) {
                h.place(p, 1);
                h.place(p + 2, 0);
            }
            // 8 units free, one per block of 4: no block of 16 can be emptied.
            let before = h.snapshot();
            assert_eq!(h.defrag(4), Err(Error::OutOfMemory));
            assert_eq!(h.defrag(6), Err(Error::BadOrder));
            assert_eq!(h.snapshot(), before);
            assert_eq!(h.alloc_or_defrag(4), Err(Error::OutOfMemory));
            assert_eq!(h.snapshot(), before);
            // 8 free units are enough for a block of 8. Any block of 8 holds 4 live blocks
            // (two of 2 units, two of 1); no free block of 2 exists anywhere, so each block of 2
            // needs one made by one extra move of a unit: 6 moves is the fewest possible.
            let moves = h.defrag(3).unwrap();
            assert_eq!(moves.len(), 6, "{moves:?}");
            h.check_and_empty();
        });
    }

    #[test]
    fn random_fragmented_heaps_defragment_whenever_enough_units_are_free() {
        both(|heap| {
            let (mut defragmented, mut failed) = (0, 0);
            for seed in 1..60 {
                let mut rng = Rng::new(seed);
                let mut h = heap(256, 7);
                while h
                    .alloc((rng.below(4) as u32).min(rng.below(4) as u32))
                    .is_some()
                {}
                let live = h.live();
                for &index in &live {
                    if rng.below(2) == 0 {
                        h.free(index);
                    }
                }
                let order = 3 + rng.below(5) as u32;
                let free = h.free_units();
                match h.alloc_or_defrag(order) {
                    Ok((_, moved)) => {
                        assert!(moved < 1 << order, "{moved} moves for order {order}");
                        defragmented += usize::from(moved > 0);
                    }
                    Err(e) => {
                        assert_eq!(e, Error::OutOfMemory);
                        assert!(
                            free < 1 << order,
                            "seed {seed}: {free} units free, order {order}"
                        );
                        failed += 1;
                    }
                }
                h.check_and_empty();
            }
            // The heaps must exercise both outcomes, or the test proves nothing.
            assert!(defragmented > 10 && failed > 0, "{defragmented} {failed}");
        });
    }
}
