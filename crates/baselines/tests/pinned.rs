//! Pinned cores of a magazine ([`Magazine::pin`], and [`BlockAlloc::with_core`] behind a
//! `dyn BlockAlloc`) among threads that use the shared path, drain, and pin the same cores:
//! no unit goes to two owners, none is lost, no thread waits forever, and racing double
//! frees through pins are decided exactly once.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use buddyfree::buddy::Knuth;
use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Backend, Magazine, Settings};
use buddyfree::{hold_core, BlockAlloc, Config, Error, HeldCore, Nbbs4};
use buddyfree_baselines::linux::PerCpu;
use buddyfree_baselines::registry::{self, DynAlloc};
use common::{assert_whole, run_threads, stamp, Mailbox, Owners, PinEachCall, Rng};
use proptest::prelude::*;

/// Small enough that the threads run out of units often (every out-of-memory answer drains
/// every magazine, pinned ones included), with orders past the cached 0–9.
const UNITS: usize = 1 << 12;
const MAX_ORDER: u32 = 10;
const THREADS: usize = 4;
/// Fewer cores than threads: pins of one core wait for each other.
const CORES: usize = 2;

/// Magazines over this small heap: with the shortest lists (its default) or the full ones.
fn magazines<A: Backend>(build: fn(Config) -> Result<A, Error>, full: bool) -> Magazine<A> {
    let m = build(Config::new(UNITS, MAX_ORDER).with_cores(CORES))
        .and_then(|inner| Magazine::new(Config::new(UNITS, MAX_ORDER).with_cores(CORES), inner));
    let m = m.unwrap();
    if full {
        m.with_settings(Settings::new().with_parking_limit(usize::MAX))
    } else {
        m
    }
}

/// A random order, small ones more often, now and then a large one: 8 or 9 (parked one
/// block at a time) or 10 (never parked).
fn order(rng: &mut Rng) -> u32 {
    if rng.below(16) == 0 {
        8 + rng.below(3) as u32
    } else {
        (rng.below(8) as u32).min(rng.below(8) as u32)
    }
}

/// How a thread calls the magazine: through a held core, or the shared way on its core.
enum Via<'p, 'm, A> {
    Held(&'p mut dyn HeldCore),
    Shared(&'m Magazine<A>, usize),
}

impl<A: Backend> Via<'_, '_, A> {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        match self {
            Via::Held(held) => held.alloc(order),
            Via::Shared(m, core) => m.alloc(order, *core),
        }
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        match self {
            Via::Held(held) => held.free(index, order),
            Via::Shared(m, core) => m.free(index, order, *core),
        }
    }
}

/// What the threads share: who owns each unit, blocks handed between threads, and how often
/// the heap ran out.
struct Shared {
    owners: Owners,
    mailbox: Mailbox,
    out_of_memory: AtomicUsize,
}

impl Shared {
    /// One random step of a thread holding `mine`: allocate, free one of its blocks, post
    /// one to the mailbox, or free a posted one (another thread's, from another core).
    fn step<A: Backend>(&self, via: &mut Via<A>, rng: &mut Rng, mine: &mut Vec<(usize, u32)>) {
        match rng.below(8) {
            0..=3 => {
                let o = order(rng);
                match via.alloc(o) {
                    Ok(index) => {
                        self.owners.claim(index, o, stamp(index, o));
                        mine.push((index, o));
                    }
                    Err(Error::OutOfMemory) => {
                        self.out_of_memory.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("alloc({o}): {e}"),
                }
            }
            4 | 5 if !mine.is_empty() => {
                let (index, o) = mine.swap_remove(rng.below(mine.len()));
                self.owners.release(index, o, stamp(index, o));
                via.free(index, o).unwrap();
            }
            6 if !mine.is_empty() => {
                let (index, o) = mine[mine.len() - 1];
                if self.mailbox.post(rng, index, o) {
                    mine.pop();
                }
            }
            _ => {
                if let Some((index, o)) = self.mailbox.take(rng) {
                    self.owners.release(index, o, stamp(index, o));
                    via.free(index, o).unwrap();
                }
            }
        }
    }
}

/// Each thread alternates bursts through a pin of its core (a [`Magazine::pin`], or
/// [`BlockAlloc::with_core`] through `dyn BlockAlloc`) with shared calls, hands blocks to the
/// others through a mailbox (freed from another core, pinned or not), and sometimes drains
/// all cores or another one.
fn pinned_and_shared_callers<A: Backend>(m: &Magazine<A>, rounds: usize) {
    let shared = Shared {
        owners: Owners::new(UNITS),
        mailbox: Mailbox::new(16),
        out_of_memory: AtomicUsize::new(0),
    };
    run_threads(THREADS, |t| {
        let core = t % CORES;
        let mut rng = Rng::new(t as u64 + 7);
        let mut mine = Vec::new();
        for round in 0..rounds {
            let burst = 1 + rng.below(64);
            if round % 3 == 0 {
                let mut pin = m.pin(core);
                assert_eq!(pin.core(), core);
                for _ in 0..burst {
                    shared.step(&mut Via::<A>::Held(&mut pin), &mut rng, &mut mine);
                }
            } else if round % 3 == 1 {
                let dyn_m: &dyn BlockAlloc = m;
                dyn_m.with_core(core, &mut |held| {
                    for _ in 0..burst {
                        shared.step(&mut Via::<A>::Held(held), &mut rng, &mut mine);
                    }
                });
            } else {
                for _ in 0..burst {
                    shared.step(&mut Via::Shared(m, core), &mut rng, &mut mine);
                }
                if round % 7 == 0 {
                    m.drain();
                } else if round % 5 == 0 {
                    // Another core's magazine, maybe while that core holds it.
                    m.drain_core(core + 1);
                }
            }
        }
        for (index, o) in mine {
            shared.owners.release(index, o, stamp(index, o));
            m.free(index, o, core).unwrap();
        }
    });
    for (index, o) in shared.mailbox.take_all() {
        shared.owners.release(index, o, stamp(index, o));
        m.free(index, o, 0).unwrap();
    }
    assert!(
        shared.out_of_memory.into_inner() > 0,
        "the heap never ran out: the drains were not exercised"
    );
    assert_whole(m);
}

#[test]
fn pinned_cores_share_no_unit_and_lose_none_over_llfree() {
    pinned_and_shared_callers(&magazines(LLFree::new, true), 3_000);
}

#[test]
fn pinned_cores_share_no_unit_and_lose_none_over_nbbs4() {
    pinned_and_shared_callers(&magazines(Nbbs4::new, false), 3_000);
}

/// Every thread frees the same blocks, each free through a pin of its own core (threads of
/// one core interleave between pins): one free of each block succeeds, the others are
/// `NotAllocated`.
#[test]
fn racing_double_frees_through_pins_succeed_once() {
    for order in [0, 3, 9] {
        let blocks = (UNITS >> order).min(256);
        common::double_free_race(
            &PinEachCall(magazines(LLFree::new, true)),
            THREADS,
            blocks,
            order,
        );
    }
}

proptest! {
    /// The battery's differential check against the model, every allocation and free
    /// through a pin: the same answers as the model's, bad frees included.
    #[test]
    fn pinned_cores_match_the_model(pick in 0..common::CONFIGS.len(), ops in common::ops(100, 5, 300)) {
        let (units, max_order) = common::CONFIGS[pick];
        let config = Config::new(units, max_order).with_cores(3);
        let ops = common::clamp(&ops, max_order);
        // Through the registry's `Box<dyn BlockAlloc>`, as the C ABI holds a core.
        let over_llfree = PinEachCall((registry::find("llfree-magazine").unwrap().build)(config, Default::default()).unwrap());
        common::check_against_model(&over_llfree, config, &ops);
        let over_nbbs4 = PinEachCall(Magazine::new(config, Nbbs4::new(config).unwrap()).unwrap());
        common::check_against_model(&over_nbbs4, config, &ops);
        let linux = PinEachCall(PerCpu::<Knuth>::with_config(config, Knuth::new).unwrap());
        common::check_against_model(&linux, config, &ops);
    }
}

/// [`BlockAlloc::with_core`] through the registry's `Box<dyn BlockAlloc>` really holds the
/// core's cache where there is one: another thread's allocation on that core waits until the
/// call returns (it has 100 ms to get through if the core is not held). Allocators without a
/// per-core cache hold nothing; every one answers a pinned free exactly.
#[test]
fn a_core_held_through_the_trait_is_held() {
    for entry in registry::entries() {
        let config = Config::new(UNITS, MAX_ORDER.min(entry.max_order)).with_cores(CORES);
        let Ok(a) = (entry.build)(config, Default::default()) else {
            continue;
        };
        let cached = entry.name.ends_with("-magazine") || entry.name == "linux";
        let free = a.free_units();
        let done = AtomicBool::new(false);
        let (mine, theirs, through_while_held) = std::thread::scope(|s| {
            // The `Box`, as the C ABI's heap holds it: its `with_core` must reach the cache's.
            let (mine, waiter, through) = hold_core(&a, 1, |held| {
                let mine = held.alloc(0).unwrap();
                let waiter = s.spawn(|| {
                    let theirs = a.alloc(0, 1).unwrap();
                    done.store(true, Ordering::Release);
                    theirs
                });
                std::thread::sleep(std::time::Duration::from_millis(100));
                (mine, waiter, done.load(Ordering::Acquire))
            });
            (mine, waiter.join().unwrap(), through)
        });
        if cached {
            assert!(!through_while_held, "{}: core 1 was not held", entry.name);
        }
        a.free(theirs, 0, 0).unwrap();
        assert_eq!(hold_core(&*a, 1, |held| held.free(mine, 0)), Ok(()));
        assert_eq!(
            hold_core(&*a, 0, |held| held.free(mine, 0)),
            Err(Error::NotAllocated),
            "{}",
            entry.name
        );
        a.drain();
        assert_eq!(a.free_units(), free, "{}", entry.name);
    }
}

/// A call inside a held core that needs that core's cache is a bug that would wait forever;
/// it panics instead, naming the cause (within 20 s, or the test fails). The panic lets the
/// core go: it can be held again.
#[test]
fn a_call_that_waits_for_its_own_held_core_panics() {
    type Call = (&'static str, fn(&dyn BlockAlloc));
    let calls: [Call; 4] = [
        ("alloc on the held core", |a| {
            let _ = a.alloc(0, 1);
        }),
        ("drain", |a| a.drain()),
        ("drain_core of the held core", |a| a.drain_core(1)),
        ("free_units", |a| {
            let _ = a.free_units();
        }),
    ];
    // The magazines name the cause; the Linux-like baseline, as Linux, just waits.
    for name in ["llfree-magazine"] {
        let entry = registry::find(name).unwrap();
        let a: &'static DynAlloc = Box::leak(Box::new(
            (entry.build)(
                Config::new(UNITS, MAX_ORDER).with_cores(CORES),
                Default::default(),
            )
            .unwrap(),
        ));
        for (what, call) in calls {
            let (done, waited) = std::sync::mpsc::channel();
            let caller = std::thread::spawn(move || {
                let held = std::panic::AssertUnwindSafe(|| hold_core(a, 1, |_| call(a)));
                let answer = std::panic::catch_unwind(held);
                let message = answer.err().and_then(|m| m.downcast_ref::<&str>().copied());
                done.send(message).unwrap();
            });
            let message = waited
                .recv_timeout(std::time::Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("{name}, {what}: still waiting for itself"));
            // Joined (ThreadSanitizer sees `pthread_join`): it has sent its answer.
            caller.join().unwrap();
            let message = message.unwrap_or_else(|| panic!("{name}, {what}: no panic"));
            assert!(
                message.contains("holds itself"),
                "{name}, {what}: {message:?}"
            );
            // A pin on another core is another lock: no panic.
            let other = hold_core(a, 0, |held| held.alloc(0)).unwrap();
            assert_eq!(hold_core(a, 1, |held| held.free(other, 0)), Ok(()));
        }
        assert_whole(a);
    }
}
