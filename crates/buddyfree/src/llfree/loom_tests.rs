//! Loom model checks of LLFree's protocols on one or two huge frames: the multi-word claim
//! of orders 7 and 8, the paired children of order 10, the spans of whole frames of orders
//! 11 and up (overlapping claims, a claim against an order-0 allocation, racing frees), the
//! claims that serialise racing double frees, the reservation, sync and steal protocol of
//! the upper level, and the classes and states of trees (a steal or a demotion racing a
//! reservation or a free, offlining racing a reservation), and the summary's marks (stale
//! ones of a unit or a huge frame cleared by a refusal, a raise in flight while a
//! reservation is given back).

use loom::sync::Arc;
use loom::thread;

use super::lower::Lower;
use super::{HugeId, LLFree, Options, Policy, TreeState};
use crate::{BlockAlloc, Class, Config, Error};

fn check(f: impl Fn() + Send + Sync + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(f);
}

/// An order-`order` (6, 7 or 8: 2, 4 or 8 words) allocation races an order-0 one on a frame where exactly one
/// group of words is free for it, plus one unit elsewhere (so both pass the child counter).
/// The order-0 search may take a unit of a word the big claim has not reached yet: then the
/// big claim must undo its words and fail, never report the half-claimed block.
fn multiword_against_order0(order: u32) {
    check(move || {
        let lower = Arc::new(Lower::new(512));
        // Frames are set up in 64-unit words here.
        let span = 1 << (order - 6);
        let mut words = [u64::MAX; 8];
        words[..span].fill(0);
        words[7] = !(1 << 63);
        lower.set_frame(HugeId(0), words);
        let big = {
            let lower = lower.clone();
            thread::spawn(move || lower.alloc(HugeId(0), order, 0))
        };
        let small = lower
            .alloc(HugeId(0), 0, 0)
            .expect("the counter promised a unit");
        let big = big.join().unwrap();
        if let Some(b) = big {
            assert_eq!(b, 0);
            assert!(
                small >= 1 << order,
                "order {order} block overlaps unit {small}"
            );
        }
        lower.assert_consistent();
        if let Some(b) = big {
            lower.free(b, order).unwrap();
        }
        lower.free(small, 0).unwrap();
        lower.assert_consistent();
    });
}

#[test]
fn loom_order6_never_reports_a_partial_claim() {
    multiword_against_order0(6);
}

#[test]
fn loom_order7_never_reports_a_partial_claim() {
    multiword_against_order0(7);
}

#[test]
fn loom_order8_never_reports_a_partial_claim() {
    multiword_against_order0(8);
}

/// Two order-7 allocations compete for the one free slot while an order-7 block is freed:
/// at most two blocks live, none overlapping, counters matching the bits.
#[test]
fn loom_order7_claims_exclude_each_other_while_freeing() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        lower.set_frame(
            HugeId(0),
            [
                0,
                0,
                u64::MAX,
                u64::MAX,
                u64::MAX,
                u64::MAX,
                u64::MAX,
                u64::MAX,
            ],
        );
        let held = lower.alloc(HugeId(0), 7, 0).unwrap();
        let other = {
            let lower = lower.clone();
            thread::spawn(move || lower.alloc(HugeId(0), 7, 0))
        };
        lower.free(held, 7).unwrap();
        let mine = lower.alloc(HugeId(0), 7, 0);
        let other = other.join().unwrap();
        assert!(mine.is_some() || other.is_some());
        assert!(mine.is_none() || other.is_none() || mine != other);
        lower.assert_consistent();
    });
}

/// Racing double frees of one block: exactly one wins, the other sees `NotAllocated`, for the
/// four claims (order 3: the word, checked and cleared in one CAS; order 7: the start word,
/// turned FREEING; order 9: child; order 10: child pair).
#[test]
fn loom_double_frees_are_serialised() {
    for order in [3, 7, 9, 10] {
        check(move || {
            let lower = Arc::new(Lower::new(1024));
            let b = lower.alloc(HugeId(0), order, 0).unwrap();
            let other = {
                let lower = lower.clone();
                thread::spawn(move || lower.free(b, order))
            };
            let mine = lower.free(b, order);
            let other = other.join().unwrap();
            assert!(mine.is_ok() != other.is_ok(), "{mine:?} {other:?}");
            assert_eq!(mine.or(other), Ok(()));
            assert_eq!(mine.and(other), Err(Error::NotAllocated));
            lower.assert_consistent();
        });
    }
}

/// Order 10 takes both children in one CAS while order 9 and order 0 race for the odd one.
#[test]
fn loom_order10_takes_both_children_or_none() {
    check(|| {
        let lower = Arc::new(Lower::new(1024));
        let pair = {
            let lower = lower.clone();
            thread::spawn(move || lower.alloc(HugeId(0), 10, 0))
        };
        let huge = lower.alloc(HugeId(1), 9, 0);
        let pair = pair.join().unwrap();
        assert!(pair.is_none() || huge.is_none(), "{pair:?} and {huge:?}");
        assert!(pair.is_some() || huge.is_some());
        lower.assert_consistent();
        if let Some(p) = pair {
            assert_eq!(lower.free(p + 512, 9), Err(Error::NotAllocated));
            lower.free(p, 10).unwrap();
        }
        if let Some(h) = huge {
            // An order-9 block starts there: the wrong order, not a free unit.
            assert_eq!(lower.free(h, 10), Err(Error::OrderMismatch));
            lower.free(h, 9).unwrap();
        }
        assert_eq!(lower.child(HugeId(0)), super::child::Child::FREE);
        assert_eq!(lower.child(HugeId(1)), super::child::Child::FREE);
    });
}

/// Allocates, retrying on `OutOfMemory`: a core preempted between reserving a tree and
/// installing it holds that tree's count where no counter shows it, and the fallback waits
/// for it only a bounded number of rounds (8 under loom), so others may still fail until it
/// runs again. A lost count would make this spin until loom gives up.
fn alloc_retry(alloc: &LLFree, order: u32, core: usize) -> usize {
    loop {
        match alloc.alloc(order, core) {
            Ok(index) => return index,
            Err(Error::OutOfMemory) => thread::yield_now(),
            Err(e) => panic!("alloc({order}): {e}"),
        }
    }
}

/// Two huge frames in trees of `tree_children` frames (one tree of both, or two), for
/// `cores` cores.
fn two_frames(tree_children: usize, cores: usize) -> LLFree {
    let options = Options::default().with_tree_children(tree_children);
    LLFree::builder(Config::new(1024, 9).with_cores(cores))
        .options(options)
        .build()
        .unwrap()
}

/// Core 1 needs a huge frame while core 0 holds the only tree: it must steal the reservation
/// (step 4 of §3.2.2) while core 0 allocates from it, and nothing may be lost or shared.
#[test]
fn loom_steal_a_reserved_tree() {
    check(|| {
        let alloc = Arc::new(two_frames(2, 2));
        let small = alloc.alloc(0, 0).unwrap();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || {
                let huge = alloc_retry(&alloc, 9, 1);
                alloc.free(small, 0, 1).unwrap();
                huge
            })
        };
        let mine = alloc_retry(&alloc, 0, 0);
        let huge = other.join().unwrap();
        assert!(mine < huge || mine >= huge + 512, "{mine} inside {huge}");
        alloc.free(mine, 0, 0).unwrap();
        alloc.free(huge, 9, 1).unwrap();
        alloc.assert_consistent();
        alloc.drain();
        assert_eq!(alloc.free_units(), 1024);
        alloc.assert_consistent();
    });
}

/// Core 0's reservation is drained by another thread (a core going offline) while core 0
/// still allocates and frees on it: the count swapped out must reach the tree entry once,
/// whichever side swaps first, and a reservation taken again must not lose or share units.
#[test]
fn loom_drain_a_core_while_it_allocates() {
    check(|| {
        let alloc = Arc::new(two_frames(2, 2));
        let first = alloc.alloc(0, 0).unwrap();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || alloc.drain_core(0))
        };
        let second = alloc_retry(&alloc, 0, 0);
        alloc.free(first, 0, 0).unwrap();
        other.join().unwrap();
        assert_ne!(first, second);
        alloc.free(second, 0, 0).unwrap();
        alloc.assert_consistent();
        alloc.drain();
        assert_eq!(alloc.free_units(), 1024);
        alloc.assert_consistent();
    });
}

/// Two threads share one core's reservation over two trees of one frame: both may reserve
/// and swap, frees from the other core go to the tree counter and are synced back; the
/// counters must add up exactly at the end.
#[test]
fn loom_shared_reservation_and_sync_conserve_counters() {
    check(|| {
        let options = Options {
            tree_children: 1,
            ..Options::default()
        };
        let alloc = Arc::new(
            LLFree::builder(Config::new(1024, 9).with_cores(2))
                .options(options)
                .build()
                .unwrap(),
        );
        let first = alloc.alloc(0, 0).unwrap();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || {
                let a = alloc_retry(&alloc, 0, 0);
                alloc.free(first, 0, 1).unwrap();
                a
            })
        };
        let b = alloc_retry(&alloc, 0, 0);
        let a = other.join().unwrap();
        assert_ne!(a, b);
        alloc.free(a, 0, 0).unwrap();
        alloc.free(b, 0, 1).unwrap();
        assert_eq!(alloc.free_units(), 1024);
        alloc.assert_consistent();
        alloc.drain();
        assert_eq!(alloc.free_units(), 1024);
    });
}

/// An order-0 allocation that took its count before an order-3 block was allocated at unit 0
/// claims unit 0 as soon as that block's free has cleared it: the unit must then be freeable
/// as an order-0 block, and the order-3 free must have succeeded exactly once.
#[test]
fn loom_order0_reuse_of_a_block_start_being_freed() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let mut words = [u64::MAX; 8];
        words[0] = !0xFF;
        words[1] = !1;
        lower.set_frame(HugeId(0), words);
        let big = {
            let lower = lower.clone();
            thread::spawn(move || {
                if let Some(b) = lower.alloc(HugeId(0), 3, 0) {
                    lower.free(b, 3).unwrap();
                }
            })
        };
        let unit = lower
            .alloc(HugeId(0), 0, 0)
            .expect("the counter promised a unit");
        assert_eq!(lower.free(unit, 0), Ok(()));
        big.join().unwrap();
        lower.assert_consistent();
        assert_eq!(lower.child(HugeId(0)).free(), 9);
    });
}

/// Core 1 takes the only tree from core 0 (steals it, reserves it, installs it) while core 0,
/// robbed of its reservation, falls back to the complete scan: the tree's count may be in
/// core 1's hands, in no counter, whenever core 0 looks. Core 0 must wait for the move to
/// finish rather than report `OutOfMemory` on a heap that is all but free.
#[test]
fn loom_fallback_waits_for_a_reservation_in_flight() {
    check(|| {
        let alloc = Arc::new(two_frames(2, 2));
        let first = alloc.alloc(0, 0).unwrap();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || alloc.alloc(0, 1))
        };
        let mine = alloc.alloc(0, 0);
        let theirs = other.join().unwrap();
        let (mine, theirs) = (mine.expect("core 0"), theirs.expect("core 1"));
        assert!(mine != theirs && mine != first && theirs != first);
        for (b, core) in [(first, 0), (mine, 0), (theirs, 1)] {
            alloc.free(b, 0, core).unwrap();
        }
        alloc.drain();
        assert_eq!(alloc.free_units(), 1024);
        alloc.assert_consistent();
    });
}

/// A free of a multi-word block (order 7) races a free of the wrong order at its start (order
/// 6) and an allocation of order 6 that may take the freed words: the right free succeeds,
/// the wrong one never does (it sees the block as order 7, FREEING or gone, or a new order-6
/// block it must not free: then the new block stays whole).
#[test]
fn loom_a_wrong_order_free_races_a_multi_word_free() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let mut words = [u64::MAX; 8];
        words[..2].fill(0);
        lower.set_frame(HugeId(0), words);
        let b = lower.alloc(HugeId(0), 7, 0).unwrap();
        assert_eq!(b, 0);
        let wrong = {
            let lower = lower.clone();
            thread::spawn(move || lower.free(b, 6))
        };
        assert_eq!(lower.free(b, 7), Ok(()));
        let new = lower.alloc(HugeId(0), 6, 0);
        let wrong = wrong.join().unwrap();
        match (new, wrong) {
            // The wrong-order free came after the new block: that is a legal free of it.
            (Some(n), Ok(())) => assert_eq!(n, b),
            (new, Err(e)) => {
                assert!(
                    matches!(e, Error::OrderMismatch | Error::NotAllocated),
                    "{e:?}"
                );
                if let Some(n) = new {
                    assert_eq!(lower.block_of(n + 63), Some((n, 6)));
                    lower.free(n, 6).unwrap();
                }
            }
            (None, Ok(())) => panic!("an order-6 free of an order-7 block succeeded"),
        }
        lower.assert_consistent();
        assert_eq!(lower.child(HugeId(0)).free(), 128);
    });
}

/// A double free of an order-0 unit races its owner's free and an order-2
/// allocation that covers the unit. Exactly one free of the unit succeeds, and the order-2
/// block stays whole.
#[test]
fn loom_a_double_free_never_clears_a_unit_of_a_larger_block() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let i = lower.alloc(HugeId(0), 0, 0).unwrap();
        let double = {
            let lower = lower.clone();
            thread::spawn(move || lower.free(i, 0))
        };
        let mine = lower.free(i, 0);
        let big = lower.alloc(HugeId(0), 2, 0);
        let double = double.join().unwrap();
        assert!(mine.is_ok() != double.is_ok(), "{mine:?} {double:?}");
        lower.assert_consistent();
        if let Some(b) = big {
            assert_eq!(lower.free(b, 2), Ok(()));
        }
        lower.assert_consistent();
    });
}

/// A bulk free of two order-0 blocks of one word races a double free of one of them: the
/// word's one compare-and-swap checks both blocks, so exactly one free of the raced block
/// wins. If the double free is first, the bulk free frees neither (the allocator's bulk
/// free then goes one by one and stops at that block); otherwise the double free sees it
/// free.
#[test]
fn loom_a_bulk_free_races_a_double_free_of_one_of_its_blocks() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let a = lower.alloc(HugeId(0), 0, 0).unwrap();
        let b = lower.alloc(HugeId(0), 0, 0).unwrap();
        assert_eq!(a / 32, b / 32, "one word");
        let double = {
            let lower = lower.clone();
            thread::spawn(move || lower.free(b, 0))
        };
        let freed = lower.free_many(&[a, b], 0);
        let double = double.join().unwrap();
        assert!((freed == 2) != double.is_ok(), "{freed} {double:?}");
        if freed == 0 {
            assert_eq!(lower.free(a, 0), Ok(()));
            assert_eq!(lower.free(b, 0), Err(Error::NotAllocated));
        }
        lower.assert_consistent();
        assert_eq!(lower.child(HugeId(0)).free(), 512);
    });
}

/// A bulk claim of `N` blocks of `order` races a single claim of that order in the same
/// frame: they never share a unit, the counter ends exact, and each claimed block frees on
/// its own.
fn a_bulk_claim_races_a_single_claim<const N: usize>(order: u32) {
    check(move || {
        let lower = Arc::new(Lower::new(512));
        let bulk = {
            let lower = lower.clone();
            thread::spawn(move || {
                let mut out = [0; N];
                let got = lower.alloc_many(HugeId(0), order, 0, &mut out, 0);
                (out, got)
            })
        };
        let single = lower.alloc(HugeId(0), order, 0).unwrap();
        let (out, got) = bulk.join().unwrap();
        assert_eq!(got, N, "the frame has room");
        assert!(!out.contains(&single), "{out:?} {single}");
        lower.assert_consistent();
        for i in out {
            assert_eq!(lower.free(i, order), Ok(()));
        }
        assert_eq!(lower.free(single, order), Ok(()));
        lower.assert_consistent();
        assert_eq!(lower.child(HugeId(0)).free(), 512);
    });
}

/// Four order-0 blocks claimed in one word's compare-and-swap.
#[test]
fn loom_a_bulk_claim_and_a_single_claim_share_no_unit() {
    a_bulk_claim_races_a_single_claim::<4>(0);
}

/// Two order-6 blocks, each a group of two words.
#[test]
fn loom_a_bulk_claim_of_word_groups_and_a_single_claim_share_no_unit() {
    a_bulk_claim_races_a_single_claim::<2>(6);
}

/// A bulk free of two order-6 blocks races a double free of the second: exactly one free of
/// it wins, the first block is freed either way, and the counter ends exact.
#[test]
fn loom_a_bulk_free_of_word_groups_races_a_double_free() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let a = lower.alloc(HugeId(0), 6, 0).unwrap();
        let b = lower.alloc(HugeId(0), 6, 0).unwrap();
        let double = {
            let lower = lower.clone();
            thread::spawn(move || lower.free(b, 6))
        };
        let freed = lower.free_many(&[a, b], 6);
        let double = double.join().unwrap();
        assert!(freed >= 1, "the first block is not raced");
        assert!((freed == 2) != double.is_ok(), "{freed} {double:?}");
        assert_eq!(lower.free(a, 6), Err(Error::NotAllocated));
        assert_eq!(lower.free(b, 6), Err(Error::NotAllocated));
        lower.assert_consistent();
        assert_eq!(lower.child(HugeId(0)).free(), 512);
    });
}

/// A bulk claim that takes every free unit of a frame while another thread's block is in it
/// races that thread freeing the block and allocating again: the frame is not the claim's
/// alone (its counter went to zero, but a unit it did not take is the other thread's), so it
/// must claim by compare-and-swap, never by the plain stores of a frame it holds whole.
/// Frames of two order-8 groups.
#[test]
fn loom_a_frame_with_a_block_of_another_thread_is_not_filled_with_plain_stores() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let theirs = lower.alloc(HugeId(0), 8, 0).unwrap();
        let other = {
            let lower = lower.clone();
            thread::spawn(move || {
                lower.free(theirs, 8).unwrap();
                lower.alloc(HugeId(0), 8, 0)
            })
        };
        let mut out = [0; 1];
        let got = lower.alloc_many(HugeId(0), 8, 0, &mut out, 0);
        let again = other.join().unwrap();
        if let (1, Some(b)) = (got, again) {
            assert_ne!(out[0], b, "one group handed out twice");
        }
        lower.assert_consistent();
        for b in out[..got].iter().copied().chain(again) {
            assert_eq!(lower.free(b, 8), Ok(()));
        }
        assert_eq!(lower.child(HugeId(0)).free(), 512);
    });
}

/// A bulk claim of the rest of a frame after the caller's own single allocation there (the
/// refill's pattern: its plain stores) races order-0 allocations and a free in that frame:
/// either an order-0 unit is held when the bulk claim takes the counter, which then gets
/// nothing, or the bulk claim holds the frame whole and the order-0 allocation that follows
/// fails; a unit held at the end never lies in a block of the claim.
#[test]
fn loom_a_frame_filled_after_the_callers_own_block_shares_no_unit() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let other = {
            let lower = lower.clone();
            thread::spawn(move || {
                if let Some(s) = lower.alloc(HugeId(0), 0, 0) {
                    lower.free(s, 0).unwrap();
                }
                lower.alloc(HugeId(0), 0, 0)
            })
        };
        let first = lower.alloc(HugeId(0), 8, 0);
        let mut out = [0; 1];
        let got = match first {
            Some(_) => lower.alloc_many(HugeId(0), 8, 0, &mut out, 256),
            None => 0,
        };
        let small = other.join().unwrap();
        if let Some(s) = small {
            let overlaps = |b: usize| (b..b + 256).contains(&s);
            assert!(
                !first.is_some_and(overlaps) && !(got == 1 && overlaps(out[0])),
                "unit {s} inside {first:?} / {:?}",
                &out[..got]
            );
        }
        lower.assert_consistent();
        for b in first.into_iter().chain(out[..got].iter().copied()) {
            assert_eq!(lower.free(b, 8), Ok(()));
        }
        if let Some(s) = small {
            assert_eq!(lower.free(s, 0), Ok(()));
        }
        assert_eq!(lower.child(HugeId(0)).free(), 512);
    });
}

/// An owned free of an order-8 block (plain stores) races a free of the same unit at order 7
/// and an allocation of order 8: the wrong-order free is refused whatever it sees (the start
/// word, FREEING or nothing), and the allocation gets the block only once its words are
/// clear.
#[test]
fn loom_an_owned_free_races_a_wrong_order_free_and_a_claim() {
    check(|| {
        let lower = Arc::new(Lower::new(512));
        let kept = lower.alloc(HugeId(0), 8, 0).unwrap();
        let owned = lower.alloc(HugeId(0), 8, 0).unwrap();
        let other = {
            let lower = lower.clone();
            thread::spawn(move || {
                let wrong = lower.free(owned, 7);
                (wrong, lower.alloc(HugeId(0), 8, 0))
            })
        };
        // SAFETY: `owned` is live at order 8 and only this thread frees it at that order.
        unsafe { lower.free_owned(&[owned], 8) };
        let (wrong, again) = other.join().unwrap();
        assert!(
            matches!(wrong, Err(Error::NotAllocated | Error::OrderMismatch)),
            "{wrong:?}"
        );
        if let Some(b) = again {
            assert_eq!(b, owned);
            assert_eq!(lower.free(b, 8), Ok(()));
        }
        lower.assert_consistent();
        assert_eq!(lower.free(kept, 8), Ok(()));
        assert_eq!(lower.child(HugeId(0)).free(), 512);
    });
}

/// Two claims of overlapping spans race: order 12 over frames 0..8 and order 11 over frames
/// 4..8. At most one gets its block, a losing claim leaves no frame taken, and both blocks
/// free again exactly.
#[test]
fn loom_overlapping_span_claims_exclude_each_other() {
    check(|| {
        let lower = Arc::new(Lower::new(8 * 512));
        let big = {
            let lower = lower.clone();
            thread::spawn(move || lower.take_span(HugeId(0), 12))
        };
        let small = lower.take_span(HugeId(4), 11);
        let big = big.join().unwrap();
        assert!(!(big && small), "two spans over frames 4..8");
        if big {
            assert_eq!(lower.block_of(5 * 512), Some((0, 12)));
            lower.free(0, 12).unwrap();
        }
        if small {
            assert_eq!(lower.block_of(5 * 512), Some((4 * 512, 11)));
            assert_eq!(lower.free(0, 12), Err(Error::NotAllocated));
            lower.free(4 * 512, 11).unwrap();
        }
        lower.assert_consistent();
        // Nothing is left half-claimed: the whole level is one span again.
        assert!(lower.take_span(HugeId(0), 12));
    });
}

/// A span claim races an order-0 allocation in one of its frames: exactly one of them gets
/// its block (the order-0 allocation takes the frame's counter first, the claim needs it
/// whole), and they never share a unit.
#[test]
fn loom_a_span_claim_races_an_order0_allocation_in_its_frame() {
    check(|| {
        let lower = Arc::new(Lower::new(4 * 512));
        let span = {
            let lower = lower.clone();
            thread::spawn(move || lower.take_span(HugeId(0), 11))
        };
        let small = lower.alloc(HugeId(2), 0, 0);
        let span = span.join().unwrap();
        assert!(span != small.is_some(), "span {span}, order 0 {small:?}");
        lower.assert_consistent();
        if span {
            lower.free(0, 11).unwrap();
        }
        if let Some(unit) = small {
            lower.free(unit, 0).unwrap();
        }
        assert!(lower.take_span(HugeId(0), 11));
    });
}

/// Racing frees of one span, one of them of the wrong order: the right one wins, the other
/// is refused, and the span's frames are free afterwards.
#[test]
fn loom_span_frees_are_serialised() {
    check(|| {
        let lower = Arc::new(Lower::new(8 * 512));
        assert!(lower.take_span(HugeId(0), 11));
        let other = {
            let lower = lower.clone();
            thread::spawn(move || (lower.free(0, 11), lower.free(0, 12)))
        };
        let mine = lower.free(0, 11);
        let (theirs, wrong) = other.join().unwrap();
        assert!(mine.is_ok() != theirs.is_ok(), "{mine:?} {theirs:?}");
        assert!(matches!(mine.and(theirs).err(), Some(Error::NotAllocated)));
        assert!(matches!(wrong, Err(Error::NotAllocated)));
        lower.assert_consistent();
        assert!(lower.take_span(HugeId(0), 12));
    });
}

/// Trees of two frames under the unmovable/movable/huge policy, `trees` of them, for `cores`.
fn classed_trees(trees: usize, cores: usize) -> LLFree {
    let options = Options {
        tree_children: 2,
        ..Options::default()
    };
    let config = Config::new(1024 * trees, 9).with_cores(cores);
    LLFree::builder(config)
        .options(options)
        .policy(Policy::unmovable_movable_huge())
        .build()
        .unwrap()
}

/// Both trees movable and in use, no core holding either: an unmovable request finds no
/// tree of its class and none free, so it steals a unit from a tree's counter, while another
/// core's movable request reserves a tree (moving that counter out). The steal's take and
/// the reservation's compare-and-swap are on one word: neither may hand out a unit twice or
/// lose one, and the stolen-from tree keeps its class.
#[test]
fn loom_a_steal_races_a_reservation() {
    check(|| {
        let alloc = Arc::new(classed_trees(2, 2));
        let a = alloc.alloc(0, 0).unwrap();
        let b = alloc.alloc(0, 1).unwrap();
        assert_ne!(a / 1024, b / 1024);
        alloc.drain();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || {
                let mut stolen = alloc.alloc_class(0, Class::UNMOVABLE, 1);
                while stolen == Err(Error::OutOfMemory) {
                    thread::yield_now();
                    stolen = alloc.alloc_class(0, Class::UNMOVABLE, 1);
                }
                stolen.unwrap()
            })
        };
        let mine = alloc_retry(&alloc, 0, 0);
        let stolen = other.join().unwrap();
        let all = [a, b, mine, stolen];
        for (i, x) in all.iter().enumerate() {
            assert!(!all[..i].contains(x), "{all:?}");
        }
        for t in 0..2 {
            assert_eq!(alloc.tree_state(t), Ok(TreeState::Online(Class::MOVABLE)));
        }
        alloc.assert_consistent();
        for x in all {
            alloc.free(x, 0, 0).unwrap();
        }
        alloc.drain();
        assert_eq!(alloc.free_units(), 2048);
        alloc.assert_consistent();
    });
}

/// The last block of a movable tree is freed (by a core not holding it: into the tree's
/// counter) while an unmovable request looks at that tree: if the free came first the tree
/// is entirely free and is demoted (re-classed in the reservation's compare-and-swap),
/// else the request steals from it and it stays movable. Either way the units add up, the
/// free succeeds once, and a reserved tree has its reservation's class.
#[test]
fn loom_a_demotion_races_a_free() {
    check(|| {
        let alloc = Arc::new(classed_trees(1, 2));
        let last = alloc.alloc(0, 0).unwrap();
        alloc.drain();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || alloc.free(last, 0, 1))
        };
        let mut got = alloc.alloc_class(0, Class::UNMOVABLE, 0);
        while got == Err(Error::OutOfMemory) {
            thread::yield_now();
            got = alloc.alloc_class(0, Class::UNMOVABLE, 0);
        }
        let got = got.unwrap();
        assert_eq!(other.join().unwrap(), Ok(()));
        alloc.assert_consistent();
        let class = match alloc.tree_state(0) {
            Ok(TreeState::Online(class)) => class,
            state => panic!("{state:?}"),
        };
        assert!(class == Class::MOVABLE || class == Class::UNMOVABLE);
        let of = |c| alloc.free_units_of(c);
        assert_eq!(of(Class::MOVABLE) + of(Class::UNMOVABLE), 1023);
        alloc.free(got, 0, 0).unwrap();
        alloc.drain();
        assert_eq!(alloc.free_units(), 1024);
        alloc.assert_consistent();
    });
}

/// Tree 0 is taken offline while a core's first allocation reserves a tree, tree 0 first:
/// the offlining's and the reservation's compare-and-swaps on tree 0's entry decide. If the
/// tree went offline, the block comes from tree 1; if the core reserved it first, the
/// offlining is refused (the tree is held, or in use).
#[test]
fn loom_offlining_races_a_reservation() {
    check(|| {
        let alloc = Arc::new(classed_trees(2, 1));
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || alloc.set_tree_state(0..1, TreeState::Offline))
        };
        let block = alloc_retry(&alloc, 0, 0);
        let offline = other.join().unwrap();
        match offline {
            Ok(()) => {
                assert!(block >= 1024, "unit {block} of the offline tree");
                assert_eq!(alloc.tree_state(0), Ok(TreeState::Offline));
                assert_eq!(alloc.free_units(), 1023);
            }
            Err((0, Error::WouldBlock | Error::Occupied)) => {
                assert!(block < 1024, "{block}");
            }
            Err(e) => panic!("{e:?}"),
        }
        alloc.assert_consistent();
        alloc.free(block, 0, 0).unwrap();
        alloc.drain();
        assert_eq!(alloc.free_units() + alloc.offline_units(), 2048);
        alloc.assert_consistent();
    });
}

/// Two trees (a huge frame, and 4 units) full, both summary marks stale (their counts went
/// to 0 when core 0 reserved them). Core 1 frees a unit into the second tree (raising its
/// entry from 0, marking it) while core 0's allocation of two units is refused through the
/// summary and clears the stale marks: whatever the order, the mark of a tree with units is
/// never lost (`assert_consistent` checks it), and an allocation after both finds the unit.
#[test]
fn loom_a_stale_mark_cleared_by_a_refusal_never_hides_a_free() {
    check(|| {
        let options = Options {
            tree_children: 1,
            ..Options::default()
        };
        let alloc = Arc::new(
            LLFree::builder(Config::new(516, 9).with_cores(2))
                .options(options)
                .build()
                .unwrap(),
        );
        alloc.alloc(9, 0).unwrap();
        let small: [usize; 4] = core::array::from_fn(|_| alloc.alloc(0, 0).unwrap());
        alloc.drain();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || alloc.free(small[2], 0, 1).unwrap())
        };
        assert_eq!(alloc.alloc(1, 0), Err(Error::OutOfMemory));
        other.join().unwrap();
        alloc.assert_consistent();
        assert_eq!(alloc.alloc(0, 0), Ok(small[2]));
        assert_eq!(alloc.alloc(0, 1), Err(Error::OutOfMemory));
    });
}

/// Two trees of a huge frame each, both taken; core 0 holds the second. Core 1 freed its
/// frame into the tree entry (marking it at the huge level) and core 0 took it back by a
/// sync, leaving that mark stale. Core 1 frees the frame again (raising the entry from 0 to
/// a huge frame's units, marking it) while core 0 asks for a huge frame, which a refusal
/// through the summary's huge level, clearing the stale mark, may answer: whatever the
/// order, the mark of a tree with a huge frame's units is never lost (`assert_consistent`),
/// and the frame is found by the request or by the next one.
#[test]
fn loom_a_stale_huge_mark_cleared_by_a_refusal_never_hides_a_free() {
    check(|| {
        let alloc = Arc::new(two_frames(1, 2));
        alloc.alloc(9, 0).unwrap();
        let frame = alloc.alloc(9, 0).unwrap();
        alloc.free(frame, 9, 1).unwrap();
        assert_eq!(alloc.alloc(9, 0), Ok(frame));
        found_now_or_next(&alloc, frame, move |alloc| alloc.free(frame, 9, 1).unwrap());
        assert_eq!(alloc.alloc(9, 1), Err(Error::OutOfMemory));
    });
}

/// One tree of two huge frames, held by core 0 (its entry's count went to 0 and its marks
/// were cleared when core 0 reserved it). Core 1 frees a unit into the entry, raising it
/// from 0, while core 0 gives its reservation back, raising it by its whole count: once core
/// 0 is done, core 2, which holds nothing, finds a unit through the summary, whether or not
/// core 1's free has reached its mark yet.
#[test]
fn loom_a_reservation_given_back_is_marked_whatever_a_raise_in_flight_does() {
    check(|| {
        let alloc = Arc::new(two_frames(2, 3));
        let unit = alloc.alloc(0, 0).unwrap();
        let other = {
            let alloc = alloc.clone();
            thread::spawn(move || alloc.free(unit, 0, 1).unwrap())
        };
        alloc.drain_core(0);
        assert!(alloc.alloc(0, 2).is_ok(), "1022 units free, none found");
        other.join().unwrap();
        alloc.assert_consistent();
    });
}

/// One tree of two huge frames, the first taken, two units of the second taken. They are
/// freed one after the other (by core 0, which holds the tree's reservation, or, with
/// `drained`, by core 1 into the entry of a tree nobody holds) while core 0 asks for a huge
/// frame through the refusal memo: the first free leaves the tree's counters short of a huge
/// frame, the second completes it. Whatever the order, the frame is found by the request or
/// by the next one.
fn a_short_count_never_keeps_a_stale_refusal(drained: bool) {
    check(move || {
        let alloc = Arc::new(two_frames(2, 2));
        alloc.alloc(9, 0).unwrap();
        let units = [alloc.alloc(0, 0).unwrap(), alloc.alloc(0, 0).unwrap()];
        let frame = units[0] / 512 * 512;
        if drained {
            alloc.drain();
        }
        let core = usize::from(drained);
        found_now_or_next(&alloc, frame, move |alloc| {
            for u in units {
                alloc.free(u, 0, core).unwrap();
            }
        });
    });
}

#[test]
fn loom_a_short_count_in_a_reservation_never_keeps_a_stale_refusal() {
    a_short_count_never_keeps_a_stale_refusal(false);
}

#[test]
fn loom_a_short_count_in_a_tree_entry_never_keeps_a_stale_refusal() {
    a_short_count_never_keeps_a_stale_refusal(true);
}

/// One tree of two huge frames, nobody holding it, with a huge frame's worth of free units
/// but no frame free as a whole: one unit free in the first frame, one unit `last` taken in
/// the second. Core 1 frees `last` while core 0 asks for a huge frame, whose searches take
/// the tree's units from its entry, find no frame, and give them back: a free while they
/// hold them finds the counters short and reads no frames ("Short counts" in
/// `refusal.rs`), so the search's own give-back, seeing the frame whole, must end its
/// refusal. The frame is found by the request or by the next one.
#[test]
fn loom_a_search_holding_the_units_of_a_frame_freed_meanwhile_keeps_no_refusal() {
    check(|| {
        let alloc = Arc::new(two_frames(2, 2));
        let first = [8, 7, 6, 5, 4, 3, 2, 1, 0, 0].map(|order| alloc.alloc(order, 0).unwrap());
        let last = alloc.alloc(0, 0).unwrap();
        assert!(first.iter().all(|&b| b < 512) && last >= 512);
        alloc.free(first[9], 0, 0).unwrap();
        alloc.drain();
        found_now_or_next(&alloc, 512, move |alloc| alloc.free(last, 0, 1).unwrap());
    });
}

/// Core 0 asks for a huge frame while another thread runs `free`, which makes `frame` free:
/// the request either got it or was refused, and then the next request gets it (no refusal
/// outlives the free).
fn found_now_or_next(
    alloc: &Arc<LLFree>,
    frame: usize,
    free: impl FnOnce(&LLFree) + Send + 'static,
) {
    let other = {
        let alloc = alloc.clone();
        thread::spawn(move || free(&alloc))
    };
    let got = alloc.alloc(9, 0);
    other.join().unwrap();
    alloc.assert_consistent();
    match got {
        Ok(index) => assert_eq!(index, frame),
        Err(e) => {
            assert_eq!(e, Error::OutOfMemory);
            assert_eq!(alloc.alloc(9, 0), Ok(frame));
        }
    }
}
