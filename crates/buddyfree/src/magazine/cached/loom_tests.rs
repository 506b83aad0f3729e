//! The frees of blocks that a cache holds, model-checked through caches whose
//! locks loom sees ([`YieldMutex`] under loom): racing frees from the holder's core and
//! another, a `try_free` racing a free, a free racing the holder's allocations, a refusal
//! after a free of a parked block's buddy, and pinned cores freeing each other's blocks
//! (which must not hold two caches at once).

use alloc::vec::Vec;

use loom::sync::Arc;

use super::states::loom_tests::on_another_thread;
use super::subset::{subset, Subset};
use crate::buddy::Knuth;
use crate::yield_mutex::YieldMutex;
use crate::{BlockAlloc, Config, Error};

type Linux = Subset<YieldMutex>;

/// 16 units on 2 cores, every lock made before any thread is spawned (see
/// `YieldMutex`'s loom lock), and `blocks` order-0 blocks allocated on core 0, whose
/// cache holds them.
fn with_held_blocks(blocks: usize) -> (Arc<Linux>, Vec<usize>) {
    let linux: Linux = subset(Config::new(16, 2).with_cores(2));
    let held = (0..blocks).map(|_| linux.alloc(0, 0).unwrap()).collect();
    linux.drain_core(1);
    (Arc::new(linux), held)
}

/// Frees every block still out and checks that the heap is whole.
fn whole(linux: &Linux, out: &[usize]) {
    for &block in out {
        linux.free(block, 0, 0).unwrap();
    }
    linux.drain();
    assert_eq!(linux.free_units(), 16);
    // Every unit free again, in blocks of the largest order (max_order 2: four of them,
    // whichever the buddy's lists hand out first).
    for _ in 0..4 {
        assert!(linux.alloc(2, 0).is_ok());
    }
}

/// A double free racing from the holder's core and from another: exactly one goes
/// through (under the holder's lock), the other is `NotAllocated`.
#[test]
fn loom_racing_frees_of_a_held_block_let_exactly_one_through() {
    loom::model(|| {
        let (linux, held) = with_held_blocks(1);
        let b = held[0];
        let remote = on_another_thread(&linux, move |l| l.free(b, 0, 1));
        let mine = linux.free(b, 0, 0);
        let remote = remote.join().unwrap();
        assert!(mine.is_ok() != remote.is_ok(), "{mine:?} {remote:?}");
        assert_eq!(mine.and(remote), Err(Error::NotAllocated));
        whole(&linux, &[]);
    });
}

/// A `try_free` from another core races a free of the same held block: never both
/// through; a `WouldBlock` (the holder's cache was busy) changes nothing.
#[test]
fn loom_a_try_free_racing_a_free_of_a_held_block_passes_at_most_once() {
    loom::model(|| {
        let (linux, held) = with_held_blocks(1);
        let b = held[0];
        let tried = on_another_thread(&linux, move |l| l.try_free(b, 0, 1));
        let freed = linux.free(b, 0, 0);
        match (freed, tried.join().unwrap()) {
            (Ok(()), Err(Error::NotAllocated | Error::WouldBlock)) => {}
            (Err(Error::NotAllocated), Ok(())) => {}
            other => panic!("{other:?}"),
        }
        whole(&linux, &[]);
    });
}

/// Another core frees a held block while the holder allocates: the holder never gets a
/// block that is still out (it may get the freed one back, once parked).
#[test]
fn loom_a_free_from_another_core_races_the_holders_allocation() {
    loom::model(|| {
        let (linux, held) = with_held_blocks(2);
        let (b, kept) = (held[0], held[1]);
        let remote = on_another_thread(&linux, move |l| l.free(b, 0, 1));
        let got = linux.alloc(0, 0).unwrap();
        remote.join().unwrap().unwrap();
        assert_ne!(got, kept, "handed out twice");
        whole(&linux, &[got, kept]);
    });
}

/// A refusal keeps a parked block whose buddy a caller holds, but not once that caller's
/// free happened before it (here through a flag the free sets after): it sees the buddy's
/// state change and finds the pair, the buddy parked in another core's cache. One that
/// races the free may refuse; the next gives back what it kept and finds the pair.
#[test]
fn loom_a_refusal_sees_a_buddys_free_that_happened_before_it() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        let (linux, held) = with_held_blocks(16);
        // Unit 0 parked in core 0's cache, its buddy (unit 1) out.
        linux.free(0, 0, 0).unwrap();
        let freed = Arc::new(AtomicBool::new(false));
        let flag = freed.clone();
        let remote = on_another_thread(&linux, move |l| {
            l.free(1, 0, 1).unwrap();
            flag.store(true, Ordering::Release);
        });
        let seen = freed.load(Ordering::Acquire);
        let got = linux.alloc(1, 0);
        if seen {
            assert_eq!(
                got,
                Ok(0),
                "a refusal missed a free that happened before it"
            );
        }
        remote.join().unwrap();
        assert_eq!(got.or_else(|_| linux.alloc(1, 0)), Ok(0));
        linux.free(0, 1, 0).unwrap();
        let rest: Vec<usize> = held.into_iter().filter(|&b| b > 1).collect();
        whole(&linux, &rest);
    });
}

/// Two pinned cores each free a block the other's cache holds: each free lets its own
/// cache go while it takes the holder's, so neither waits for the other.
#[test]
fn loom_pinned_cores_free_each_others_blocks_without_deadlock() {
    loom::model(|| {
        let linux: Linux = subset(Config::new(16, 2).with_cores(2));
        let zero = linux.alloc(0, 0).unwrap();
        let one = linux.alloc(0, 1).unwrap();
        let linux = Arc::new(linux);
        let other = on_another_thread(&linux, move |l| {
            let mut freed = Err(Error::WouldBlock);
            l.with_core(1, &mut |held| freed = held.free(zero, 0));
            freed
        });
        let mut freed = Err(Error::WouldBlock);
        linux.with_core(0, &mut |held| freed = held.free(one, 0));
        assert_eq!((freed, other.join().unwrap()), (Ok(()), Ok(())));
        whole(&linux, &[]);
    });
}

/// A free that spills gives its batch back after it lets its cache go, while another
/// core allocates from the empty backend (it may get a block of that batch, or drain)
/// and frees what it got: both frees go through, a double free of a spilled block is
/// refused, and the heap is whole after.
#[test]
fn loom_a_spill_after_the_lock_races_an_allocation_of_its_blocks() {
    use crate::magazine::Magazine;
    use crate::Locked;

    type Fast = Magazine<Locked<Knuth, YieldMutex>>;
    // Two preemptions place the other core's calls at every step of the spill; the
    // unbounded model takes minutes for the spill's many lock and state-table steps.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    // Setting up and draining 32 blocks takes more scheduling points than loom's default allows one execution.
    model.max_branches = 10_000;
    model.check(|| {
        // 32 units on 2 cores: the shortest lists, order 0 spilling 8 blocks above 16.
        let config = Config::new(32, 5).with_cores(2);
        let inner = Locked::new(Knuth::new(config).unwrap());
        let fast = Fast::new(config, inner).unwrap();
        let blocks: Vec<usize> = (0..32).map(|_| fast.alloc(0, 0).unwrap()).collect();
        // Core 0's list at its watermark, `blocks[0]` its oldest; the backend empty.
        for &b in &blocks[..16] {
            fast.free(b, 0, 0).unwrap();
        }
        let oldest = blocks[0];
        let fast = Arc::new(fast);
        let other = on_another_thread(&fast, move |f| -> Result<_, Error> {
            let got = f.alloc(0, 1)?;
            f.free(got, 0, 1)?;
            Ok((got, f.free(oldest, 0, 1)))
        });
        fast.free(blocks[16], 0, 0).unwrap();
        let (got, again) = other.join().unwrap().unwrap();
        assert_eq!(again, Err(Error::NotAllocated), "got {got}");
        for &b in &blocks[17..] {
            fast.free(b, 0, 0).unwrap();
        }
        fast.drain();
        assert_eq!(fast.inner().free_units(), 32);
    });
}
