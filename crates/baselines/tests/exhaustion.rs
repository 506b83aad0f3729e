//! An exhausted heap answers exactly: after threads fill it with mixed orders and free nothing,
//! a lone thread must get a block of every order wherever an aligned free block exists (a unit
//! map of what was handed out says where), and is refused only where none does. The magazines
//! keep units in per-core caches, remember refusals and claim whole trees; none of that may
//! hide a free unit from a caller that is alone.

use std::sync::Barrier;

use buddyfree::{BlockAlloc, Config, Error};
use buddyfree_baselines::registry::{self, DynAlloc};

/// Marks the block of `order` at `index` in `taken`, which must not hold any of its units.
fn mark(taken: &mut [bool], index: usize, order: u32, who: &str) {
    for unit in &mut taken[index..index + (1 << order)] {
        assert!(
            !*unit,
            "{who}: unit handed out twice (block {index}, order {order})"
        );
        *unit = true;
    }
}

/// Whether some aligned block of `order` has every unit free in `taken`.
fn free_block_exists(taken: &[bool], order: u32) -> bool {
    taken
        .chunks_exact(1 << order)
        .any(|block| block.iter().all(|&t| !t))
}

/// The orders a thread asks for while filling: mostly small, now and then large.
fn fill_order(step: usize, thread: usize, max_order: u32) -> u32 {
    let x = (step * 2654435761 + thread * 40503) >> 7;
    match x % 8 {
        0..=4 => 0,
        5 => (x / 8 % 4) as u32,
        6 => (x / 32 % 10) as u32,
        _ => (x / 64 % (max_order as usize + 1)) as u32,
    }
    .min(max_order)
}

/// Fills `a` from `threads` threads, each until refused at order 0, and returns the blocks.
fn concurrent_fill(a: &DynAlloc, threads: usize, max_order: u32) -> Vec<(usize, u32)> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut held = Vec::new();
                    for step in 0.. {
                        let order = fill_order(step, t, max_order);
                        match a.alloc(order, t) {
                            Ok(i) => held.push((i, order)),
                            Err(Error::OutOfMemory) if order == 0 => break,
                            Err(Error::OutOfMemory) => {}
                            Err(e) => panic!("alloc({order}) = {e:?}"),
                        }
                    }
                    held
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// Probes every order from the largest down on one thread (on `core`), taking every block
/// it gets, and checks each refusal against the unit map.
fn lone_probe(a: &DynAlloc, taken: &mut [bool], core: usize, who: &str) {
    for order in (0..=a.max_order()).rev() {
        loop {
            match a.alloc(order, core) {
                Ok(i) => mark(taken, i, order, who),
                Err(Error::OutOfMemory) => {
                    assert!(
                        !free_block_exists(taken, order),
                        "{who}: alloc({order}) refused while an aligned free block exists \
                         (free_units = {})",
                        a.free_units()
                    );
                    break;
                }
                Err(e) => panic!("{who}: alloc({order}) = {e:?}"),
            }
        }
    }
    assert_eq!(
        a.free_units(),
        0,
        "{who}: units free after a greedy fill of every order"
    );
}

/// Runs `rounds` fills and probes of every registered allocator (`magazine_rounds` of the
/// magazines, whose caches and whole-tree claims race the most) at every largest order from
/// 10 to 14 it accepts. `EXHAUST_ONLY=name` and `EXHAUST_ROUNDS=n` narrow and lengthen a hunt.
fn exhaust(units: usize, cores: usize, threads: usize, rounds: usize, magazine_rounds: usize) {
    let only = std::env::var("EXHAUST_ONLY").ok();
    let more = std::env::var("EXHAUST_ROUNDS")
        .ok()
        .map(|r| r.parse().unwrap());
    for entry in registry::entries() {
        if only.as_deref().is_some_and(|o| o != entry.name) {
            continue;
        }
        let rounds = more.unwrap_or(if entry.name.ends_with("-magazine") {
            magazine_rounds
        } else {
            rounds
        });
        // Under the sanitiser every round costs a hundred times more.
        let rounds = if cfg!(buddyfree_tsan) {
            rounds.div_ceil(100)
        } else {
            rounds
        };
        for max_order in 10..=14u32.min(entry.max_order) {
            if units >> max_order == 0 {
                continue;
            }
            for round in 0..rounds {
                let who = format!("{} at max order {max_order}, round {round}", entry.name);
                let config = Config::new(units, max_order).with_cores(cores);
                let a = (entry.build)(config, Default::default()).unwrap();
                let mut taken = vec![false; units];
                for (i, order) in concurrent_fill(&a, threads, max_order) {
                    mark(&mut taken, i, order, &who);
                }
                lone_probe(&a, &mut taken, round % cores, &who);
            }
        }
    }
}

#[test]
fn a_lone_thread_gets_every_free_block_after_a_concurrent_fill() {
    exhaust(1 << 14, 8, 8, 4, 3000);
}

#[test]
fn one_core_small_heap_after_a_concurrent_fill() {
    exhaust(1 << 11, 1, 4, 10, 3000);
}
