//! Refusals remembered by the allocators (the memo of `refusal.rs`): a request refused on a
//! full or fragmented heap is refused again without a search, but never after a free that
//! makes it possible, whatever the allocator, the order, the class or the core that frees.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use buddyfree::{BlockAlloc, Class, Config, Error};
use buddyfree_baselines::registry::{self, DynAlloc};

const UNITS: usize = 1 << 10;

fn build(entry: &registry::Entry, max_order: u32, cores: usize) -> DynAlloc {
    let max_order = max_order.min(entry.max_order);
    (entry.build)(
        Config::new(UNITS, max_order).with_cores(cores),
        Default::default(),
    )
    .unwrap()
}

/// Allocates blocks of `order` on `core` until the first refusal.
fn fill(a: &DynAlloc, order: u32, core: usize) -> Vec<usize> {
    std::iter::from_fn(|| a.alloc(order, core).ok()).collect()
}

#[test]
fn a_refused_order_succeeds_right_after_a_free() {
    for entry in registry::entries() {
        let name = entry.name;
        let a = build(entry, 4, 2);
        let mut held = fill(&a, 0, 0);
        assert_eq!(held.len(), UNITS, "{name}");
        for _ in 0..3 {
            assert_eq!(a.alloc(0, 0), Err(Error::OutOfMemory), "{name}");
            assert_eq!(a.alloc(0, 1), Err(Error::OutOfMemory), "{name}");
        }
        // Freed on one core, allocated on the other (a magazine parks it in the first).
        let last = held.pop().unwrap();
        a.free(last, 0, 0).unwrap();
        assert_eq!(a.alloc(0, 1), Ok(last), "{name}");
        assert_eq!(a.alloc(0, 1), Err(Error::OutOfMemory), "{name}");
        if a.max_order() == 0 {
            continue;
        }
        // Fragmented: every other unit free, no pair.
        held.push(last);
        held.sort_unstable();
        let (odd, even): (Vec<usize>, Vec<usize>) = held.iter().partition(|&&i| i % 2 == 1);
        for &i in &odd {
            a.free(i, 0, 1).unwrap();
        }
        for _ in 0..3 {
            assert_eq!(a.alloc(1, 0), Err(Error::OutOfMemory), "{name}");
        }
        a.free(even[7], 0, 0).unwrap();
        assert_eq!(
            a.alloc(1, 1),
            Ok(even[7]),
            "{name}: a pair freed on a fragmented heap"
        );
    }
}

/// With classes of trees, a refusal is the complete fallback's, which looks in trees of
/// every class: a request of another class is refused too, and served after a free.
#[test]
fn a_refusal_by_class_hides_no_block_of_another_class() {
    let entry = registry::find("llfree-classes").unwrap();
    let a = build(entry, 4, 2);
    let held: Vec<usize> =
        std::iter::from_fn(|| a.alloc_class(0, Class::MOVABLE, 0).ok()).collect();
    assert_eq!(held.len(), UNITS);
    assert_eq!(a.alloc_class(0, Class::HUGE, 1), Err(Error::OutOfMemory));
    assert_eq!(
        a.alloc_class(0, Class::UNMOVABLE, 0),
        Err(Error::OutOfMemory)
    );
    a.free(held[100], 0, 0).unwrap();
    assert_eq!(a.alloc_class(0, Class::HUGE, 1), Ok(held[100]));
    assert_eq!(a.alloc(0, 0), Err(Error::OutOfMemory));
    a.free(held[200], 0, 1).unwrap();
    assert_eq!(a.alloc_class(0, Class::UNMOVABLE, 0), Ok(held[200]));
}

/// Threads free and allocate on a nearly full heap, so that most requests are refused while
/// frees land in between; after joining, every free unit must still be allocatable one by
/// one (a stale refusal would refuse one) and no unit may have gone to two owners.
#[test]
fn no_refusal_outlives_a_free_under_threads() {
    const THREADS: usize = 2;
    const STEPS: usize = 3000;
    for entry in registry::entries().iter().filter(|e| e.name != "model") {
        let name = entry.name;
        let a = build(entry, 3, THREADS);
        let owned: Vec<AtomicBool> = (0..UNITS).map(|_| AtomicBool::new(false)).collect();
        let units = |i: usize, order: u32| owned[i..i + (1 << order)].iter().zip(i..);
        let claim = |i: usize, order: u32| {
            for (unit, u) in units(i, order) {
                assert!(
                    !unit.swap(true, Ordering::Relaxed),
                    "{name}: unit {u} twice"
                );
            }
        };
        let release = |i: usize, order: u32| {
            for (unit, _) in units(i, order) {
                unit.store(false, Ordering::Relaxed);
            }
        };
        let start = Barrier::new(THREADS);
        let held: Vec<Vec<(usize, u32)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (a, start) = (&a, &start);
                    s.spawn(move || {
                        let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                        let mut next = move || {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            rng
                        };
                        let mut held: Vec<(usize, u32)> = Vec::new();
                        start.wait();
                        // Each thread fills its share; the heap ends full.
                        while let Ok(i) = a.alloc(0, t) {
                            claim(i, 0);
                            held.push((i, 0));
                        }
                        for _ in 0..STEPS {
                            if !held.is_empty() && next() % 3 != 0 {
                                let (i, o) = held.swap_remove(next() as usize % held.len());
                                release(i, o);
                                a.free(i, o, t).unwrap();
                            }
                            let order = (next() % u64::from(a.max_order() + 1).min(3)) as u32;
                            for _ in 0..2 {
                                match a.alloc(order, t) {
                                    Ok(i) => {
                                        claim(i, order);
                                        held.push((i, order));
                                    }
                                    Err(Error::OutOfMemory) => {}
                                    Err(e) => panic!("{name}: {e}"),
                                }
                            }
                        }
                        held
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let free = a.free_units();
        let held_units: usize = held.iter().flatten().map(|&(_, o)| 1usize << o).sum();
        assert_eq!(free + held_units, UNITS, "{name}");
        let rest = fill(&a, 0, 0);
        for &i in &rest {
            claim(i, 0);
        }
        assert_eq!(
            rest.len(),
            free,
            "{name}: free units refused after the threads joined"
        );
    }
}

/// The allocators whose frees end a refusal of a huge frame only if they may have made one
/// (LLFree, NBBS, and the magazines over them).
const BY_ORDER: [&str; 7] = [
    "llfree",
    "llfree-classes",
    "llfree-magazine",
    "nbbs",
    "nbbs4",
    "nbbs-magazine",
    "nbbs4-magazine",
];

/// Units in one huge frame; the heaps below hold `FRAMES` of them.
const FRAME: usize = 512;
const FRAMES: usize = 4;

/// A heap of `FRAMES` huge frames, filled with single units, and those units.
fn filled(name: &str, max_order: u32) -> (DynAlloc, Vec<usize>) {
    let entry = registry::find(name).unwrap();
    let a = (entry.build)(
        Config::new(FRAMES * FRAME, max_order).with_cores(2),
        Default::default(),
    )
    .unwrap();
    let held = fill(&a, 0, 0);
    assert_eq!(held.len(), FRAMES * FRAME, "{name}");
    (a, held)
}

/// The kernel's reclaim loop: on a fragmented heap (every frame has a unit taken), free one
/// unit, ask for a huge frame again. Each free that completes no frame leaves the refusal
/// as it was: the request is answered without a search (no confirmation runs). The free
/// that completes a frame ends it: the request after it gets that frame.
#[test]
fn a_free_that_completes_no_huge_frame_keeps_the_refusal() {
    for name in BY_ORDER {
        let (a, held) = filled(name, 9);
        // Two units of each frame kept: 0 and 1.
        for &i in held.iter().filter(|&&i| i % FRAME > 1) {
            a.free(i, 0, 0).unwrap();
        }
        assert_eq!(a.alloc(9, 0), Err(Error::OutOfMemory), "{name}");
        // The magazines confirm their own refusal once per request after a free (the free
        // parked a block in a cache); the memo of the allocator behind them answers.
        let most = if name.ends_with("-magazine") { 1 } else { 0 };
        for f in 0..FRAMES {
            let before = buddyfree::refusal_confirmations();
            a.free(f * FRAME + 1, 0, f % 2).unwrap();
            for core in 0..2 {
                assert_eq!(
                    a.alloc(9, core),
                    Err(Error::OutOfMemory),
                    "{name} frame {f}"
                );
            }
            let searched = buddyfree::refusal_confirmations() - before;
            assert!(
                searched <= most,
                "{name} frame {f}: {searched} searches confirmed a refusal after a free that completes no frame"
            );
        }
        // The reclaim loop that takes back what it freed: a free, an allocation of the
        // unit again (from the core's counter, giving nothing back), a huge request. The
        // refusal stays through both.
        for f in 0..FRAMES {
            let core = f % 2;
            let unit = a.alloc(0, core).unwrap();
            a.free(unit, 0, core).unwrap();
            let again = a.alloc(0, core).unwrap();
            let before = buddyfree::refusal_confirmations();
            assert_eq!(
                a.alloc(9, core),
                Err(Error::OutOfMemory),
                "{name} frame {f}"
            );
            let searched = buddyfree::refusal_confirmations() - before;
            assert!(
                searched <= most,
                "{name} frame {f}: {searched} searches confirmed a refusal after a free and re-take"
            );
            a.free(again, 0, core).unwrap();
        }
        // A smaller request still finds its units.
        let i = a.alloc(8, 0).unwrap();
        a.free(i, 8, 0).unwrap();
        assert_eq!(a.alloc(9, 1), Err(Error::OutOfMemory), "{name}");
        // The last unit of frame 2: a whole frame is free.
        a.free(2 * FRAME, 0, 1).unwrap();
        assert_eq!(a.alloc(9, 0), Ok(2 * FRAME), "{name}: the completed frame");
        assert_eq!(a.alloc(9, 1), Err(Error::OutOfMemory), "{name}");
        a.free(3 * FRAME, 0, 0).unwrap();
        assert_eq!(a.alloc(9, 1), Ok(3 * FRAME), "{name}: the completed frame");
    }
}

/// Two frames completed by frees on two threads at once while the main thread asks for
/// huge frames (and pairs of them) in a loop; then every free frame must be allocatable:
/// a refusal recorded meanwhile must not outlive the free that completed a frame. Either
/// every frame keeps units 0 and 1 and the threads free those of frames 1 and 2, or frames
/// 1 and 2 are wholly taken and the threads free all their units (half each): then the
/// first half of the frees leaves the heap's counters short of a huge frame (LLFree's frees
/// skip reading the frames there: `refusal.rs`, "Short counts").
#[test]
fn no_refusal_of_a_huge_frame_outlives_the_free_that_completes_it() {
    const ROUNDS: usize = 40;
    for name in BY_ORDER {
        for round in 0..ROUNDS {
            let whole = round % 2 == 1;
            let (a, held) = filled(name, 10);
            if !whole {
                for &i in held.iter().filter(|&&i| i % FRAME > 1) {
                    a.free(i, 0, 0).unwrap();
                }
            }
            // Thread t frees its units of frames 1 and 2.
            let units = |t: usize| -> Vec<usize> {
                match whole {
                    false => vec![FRAME + t, 2 * FRAME + t],
                    true => (FRAME..3 * FRAME).filter(|u| u % 2 == t).collect(),
                }
            };
            assert_eq!(a.alloc(9, 0), Err(Error::OutOfMemory), "{name}");
            let start = Barrier::new(3);
            let got: Vec<(usize, u32)> = std::thread::scope(|s| {
                let freeing: Vec<_> = (0..2)
                    .map(|t| {
                        let (a, start, mut units) = (&a, &start, units(t));
                        // In an order that varies.
                        if (round / 2 + t) % 2 == 1 {
                            units.reverse();
                        }
                        s.spawn(move || {
                            start.wait();
                            for u in units {
                                a.free(u, 0, t).unwrap();
                            }
                        })
                    })
                    .collect();
                let mut got = Vec::new();
                start.wait();
                for n in 0..200 {
                    let order = 9 + (n % 2) as u32;
                    if let Ok(i) = a.alloc(order, n % 2) {
                        got.push((i, order));
                    }
                }
                // Joined, not dropped: ThreadSanitizer sees a join, but not the fence with
                // which the standard library's (uninstrumented) thread packet is freed.
                for thread in freeing {
                    thread.join().unwrap();
                }
                got
            });
            let taken: usize = got.iter().map(|&(_, o)| 1usize << o).sum();
            // Frames 1 and 2 are free unless the loop took them; 0 and 3 are not.
            let rest = fill(&a, 9, 0);
            assert_eq!(
                taken + rest.len() * FRAME,
                2 * FRAME,
                "{name} round {round}: a free huge frame refused after the threads joined \
                 (took {got:?}, then {rest:?})"
            );
        }
    }
}
