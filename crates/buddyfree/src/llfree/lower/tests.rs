use std::rc::Rc;
use std::vec;
use std::vec::Vec;

use super::*;

/// An interleaving, forced: a double free of order-0 unit `i` that has just been
/// read by the free, and in its window `i`'s owner frees it and an order-2 allocation
/// covers it. The double free must fail and leave the order-2 block whole.
#[test]
fn a_double_free_raced_by_a_larger_allocation_fails() {
    let lower = Rc::new(Lower::new(512));
    let i = lower.alloc(HugeId(0), 0, 0).unwrap();
    let big = Rc::new(core::cell::Cell::new(None));
    {
        let (lower, big) = (lower.clone(), big.clone());
        window::open_once(move || {
            lower.free(i, 0).unwrap();
            big.set(lower.alloc(HugeId(0), 2, 0));
        });
    }
    let double = lower.free(i, 0);
    let big = big.get().expect("the order-2 allocation");
    assert!(big <= i && i < big + 4, "the test needs {big} to cover {i}");
    assert_eq!(double, Err(Error::OrderMismatch));
    lower.assert_consistent();
    assert_eq!(
        lower.alloc(HugeId(0), 0, 0),
        Some(4),
        "a unit of the live block"
    );
    assert_eq!(lower.free(big, 2), Ok(()));
}

/// The same window for an in-word block of order 3 and a multi-word block of order 7: in
/// the window the owner frees the block and a block of the next order up takes its
/// place (starting at the same unit). The stale free must fail, and leave that block.
#[test]
fn a_stale_free_raced_by_a_reallocation_of_another_order_fails() {
    for order in [3, 7] {
        let lower = Rc::new(Lower::new(512));
        let i = lower.alloc(HugeId(0), order, 0).unwrap();
        let big = Rc::new(core::cell::Cell::new(None));
        {
            let (lower, big) = (lower.clone(), big.clone());
            window::open_once(move || {
                lower.free(i, order).unwrap();
                big.set(lower.alloc(HugeId(0), order + 1, 0));
            });
        }
        let stale = lower.free(i, order);
        assert_eq!(big.get(), Some(i), "order {order}");
        assert_eq!(stale, Err(Error::OrderMismatch), "order {order}");
        lower.assert_consistent();
        assert_eq!(lower.block_of(i + 1), Some((i, order + 1)));
        assert_eq!(lower.free(i, order + 1), Ok(()));
        assert_eq!(lower.child(HugeId(0)), Child::FREE);
    }
}

#[test]
fn slots_spread_and_padding() {
    assert_eq!(spread(0b1011), 0b01_00_01_01);
    assert_eq!(spread(u32::MAX), LOW_BITS);
    assert_eq!(taken_slots(0b11_00_01_11), 3);
    assert_eq!(taken_slots(0b10_00_01_10), 3);
    assert_eq!(padding(512, 15), 0);
    assert_eq!(padding(0, 0), u64::MAX);
    assert_eq!(padding(40, 1), u64::MAX << 16);
    assert_eq!(padding(40, 0), 0);
    assert_eq!(padding(40, 2), u64::MAX);
}

/// A batch's one check ([`are_blocks`]) answers as [`is_block`] on each of its blocks, on
/// words the allocator leaves (random in-word blocks over a random fill, the multi-word
/// words) and on arbitrary ones.
#[test]
fn a_batch_check_answers_as_one_check_per_block() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut words = vec![start_word(6), start_word(8), FREEING, u64::MAX, 0];
    for _ in 0..2000 {
        let mut word = 0u64;
        for _ in 0..next() % 24 {
            let order = (next() % 6) as u32;
            let p = (next() as usize % SLOTS) & !((1 << order) - 1);
            let mask = block_mask(order + 1) << (2 * p);
            if word & mask == 0 {
                word |= slots_of(order) << (2 * p);
            }
        }
        words.push(word);
        words.push(next());
    }
    for &word in &words {
        for order in 0..=WORD_ORDER {
            let starts: Vec<usize> = (0..SLOTS).step_by(1 << order).collect();
            for _ in 0..8 {
                let pick = next();
                let chosen: Vec<usize> = starts
                    .iter()
                    .copied()
                    .filter(|&p| pick >> (p >> order) & 1 != 0)
                    .collect();
                let bits = chosen.iter().fold(0u64, |b, &p| b | 1 << (2 * p));
                let each = chosen.iter().all(|&p| is_block(word, p, order));
                assert_eq!(
                    are_blocks(word, bits, order),
                    each,
                    "{word:#x} {bits:#x} {order}"
                );
            }
            // Exactly the live blocks, all at once: the batch a spill gives back.
            let live: Vec<usize> = starts
                .iter()
                .copied()
                .filter(|&p| is_block(word, p, order))
                .collect();
            let bits = live.iter().fold(0u64, |b, &p| b | 1 << (2 * p));
            assert!(are_blocks(word, bits, order), "{word:#x} {order}");
        }
    }
}

/// The encoding's promises: the multi-word words are no in-word state, and no free of
/// order 0..=5 matches them at any unit.
#[test]
fn multi_word_markers_match_no_in_word_free() {
    for word in [
        start_word(6),
        start_word(7),
        start_word(8),
        FREEING,
        u64::MAX,
    ] {
        for p in 0..SLOTS {
            for order in (0..=WORD_ORDER).filter(|&o| p.is_multiple_of(1 << o)) {
                assert!(!is_block(word, p, order), "{word:#x} at {p}, order {order}");
            }
            assert_eq!(in_word_order(word, p), None, "{word:#x} at {p}");
        }
        assert_eq!(taken_slots(word), 32);
    }
    assert_eq!(multi_order(start_word(7)), Some(7));
    assert_eq!(multi_order(FREEING), None);
    assert_eq!(multi_order(u64::MAX), None);
    assert_eq!(slots_of(3), 0xFFFE);
    for order in 1..=WORD_ORDER {
        assert_eq!(in_word_order(slots_of(order), 0), Some(order));
    }
}

/// Every kind of bad free of every order is refused by the slots alone.
#[test]
fn bad_frees_inside_and_across_blocks_are_refused() {
    let lower = Lower::new(1024);
    let a = lower.alloc(HugeId(0), 3, 0).unwrap();
    let b = lower.alloc(HugeId(0), 0, 0).unwrap();
    let c = lower.alloc(HugeId(0), 7, 0).unwrap();
    assert_eq!(lower.free(a + 1, 0), Err(Error::NotAllocated));
    assert_eq!(lower.free(a, 0), Err(Error::OrderMismatch));
    assert_eq!(lower.free(a, 2), Err(Error::OrderMismatch));
    assert_eq!(lower.free(b, 1), Err(Error::OrderMismatch));
    assert_eq!(lower.free(c + 64, 6), Err(Error::NotAllocated));
    assert_eq!(lower.free(c, 8), Err(Error::OrderMismatch));
    assert_eq!(lower.free(512, 0), Err(Error::NotAllocated));
    lower.assert_consistent();
    for (i, o) in [(a, 3), (b, 0), (c, 7)] {
        assert_eq!(lower.free(i, o), Ok(()));
        assert_eq!(lower.free(i, o), Err(Error::NotAllocated));
    }
    assert_eq!(lower.child(HugeId(0)), Child::FREE);
}

/// Frees of `(i, o)` for every aligned `i` in `units` and every order `o` that fits,
/// with the error each must give: `OrderMismatch` where one of `blocks` starts at `i`,
/// else `NotAllocated`. `blocks` are all live; none of these frees may change a thing.
fn refuse_all_bad_frees(lower: &Lower, units: core::ops::Range<usize>, blocks: &[(usize, u32)]) {
    let before: Vec<u64> = (0..lower.huges() * WORDS)
        .map(|w| lower.word(w).get())
        .collect();
    for order in 0..=10 {
        for i in units.clone().filter(|i| i.is_multiple_of(1 << order)) {
            if i + (1 << order) > units.end || blocks.contains(&(i, order)) {
                continue;
            }
            let want = if blocks.iter().any(|&(s, _)| s == i) {
                Error::OrderMismatch
            } else {
                Error::NotAllocated
            };
            assert_eq!(
                lower.free(i, order),
                Err(want),
                "free({i}, {order}) of {blocks:?}"
            );
        }
    }
    let after: Vec<u64> = (0..lower.huges() * WORDS)
        .map(|w| lower.word(w).get())
        .collect();
    assert_eq!(before, after, "a bad free changed a slot");
    for &(s, o) in blocks {
        for u in s..s + (1 << o) {
            assert_eq!(lower.block_of(u), Some((s, o)), "unit {u}");
        }
    }
    lower.assert_consistent();
}

/// Per order 1..=8 (in-word and multi-word): a block with its buddy allocated as the same
/// order, as order 0 units or free, and the block after it of every kind, then every bad
/// free over them: double frees, smaller and larger orders at a block start, frees inside
/// a block, frees at a unit covered by a neighbour and frees spanning two blocks.
#[test]
fn every_bad_free_of_every_order_gets_its_exact_error() {
    for order in 1..=8u32 {
        let n = 1usize << order;
        for neighbour in 0..4 {
            let lower = Lower::new(1024);
            // The block at `n` (the upper buddy in a run of `2n`), and one at `4n` (a lower
            // buddy, aligned to `2n`, so a larger block could start there).
            let mut blocks = Vec::new();
            for at in [n, 4 * n].into_iter().filter(|&at| at + n <= 512) {
                assert!(lower.alloc_at(at, order), "order {order} at {at}");
                blocks.push((at, order));
            }
            // Its neighbours: the buddy below `n` and the run after `4n`.
            let others: Vec<(usize, u32)> = match neighbour {
                0 => Vec::new(),
                1 => [(0, order), (5 * n, order)].into(),
                2 => [(0, 0), (n - 1, 0), (5 * n, 0)].into(),
                _ => [(0, order - 1), (5 * n, order - 1), (6 * n, order + 1)].into(),
            };
            for (at, o) in others {
                if at + (1 << o) <= 512 {
                    assert!(lower.alloc_at(at, o), "order {o} at {at}");
                    blocks.push((at, o));
                }
            }
            refuse_all_bad_frees(&lower, 0..1024, &blocks);
            for &(s, o) in &blocks {
                assert_eq!(lower.free(s, o), Ok(()), "free({s}, {o})");
                assert_eq!(
                    lower.free(s, o),
                    Err(Error::NotAllocated),
                    "double ({s}, {o})"
                );
            }
            assert_eq!(lower.child(HugeId(0)), Child::FREE);
            lower.assert_consistent();
        }
    }
}

/// Huge frames next to blocks of every order: a free of any order inside or at the
/// start of a huge frame gets the child entry's answer.
#[test]
fn bad_frees_around_huge_frames_get_their_exact_error() {
    let lower = Lower::new(2048);
    assert!(lower.alloc_at(0, 9));
    assert!(lower.alloc_at(1024, 10));
    assert!(lower.alloc_at(512, 8));
    assert!(lower.alloc_at(768, 5));
    refuse_all_bad_frees(&lower, 0..2048, &[(0, 9), (1024, 10), (512, 8), (768, 5)]);
}

/// A single allocation of orders 6..=8 takes the first free group from the hint's group
/// on, then wraps to the frame's start.
#[test]
fn multi_word_blocks_are_sought_from_the_hint_on_then_from_the_start() {
    let lower = Lower::new(HUGE_UNITS);
    let h = HugeId(0);
    for order in 6..=8 {
        let span = 1usize << (order - WORD_ORDER);
        // Word 9 lies in the group that starts at word 8 for every span.
        assert_eq!(lower.alloc(h, order, 9), Some(8 * SLOTS), "order {order}");
        let mut got = vec![8 * SLOTS];
        // The groups after it, then the ones before it, lowest first.
        let rest = (8 + span..WORDS).chain(0..8).step_by(span);
        for g in rest {
            assert_eq!(lower.alloc(h, order, 9), Some(g * SLOTS), "order {order}");
            got.push(g * SLOTS);
        }
        assert_eq!(lower.alloc(h, order, 9), None);
        for index in got {
            assert_eq!(lower.free(index, order), Ok(()));
        }
        lower.assert_consistent();
    }
}

/// A block ends where the padding of a partial last frame begins: the slot after it is
/// padding (`10`), so its free is not mistaken for a part of a larger block.
#[test]
fn a_block_against_the_padding_frees() {
    for units in [2, 34, 36, 40, 48, 96, 520] {
        let lower = Lower::new(units);
        let last = units - 1;
        let mut blocks = Vec::new();
        for order in (0..=5).rev() {
            let at = (units & !((1 << order) - 1)).saturating_sub(1 << order);
            if at + (1 << order) == units && lower.alloc_at(at, order) {
                blocks.push((at, order));
            }
        }
        assert!(!blocks.is_empty(), "{units}");
        assert_eq!(lower.block_of(last).map(|b| b.0 + (1 << b.1)), Some(units));
        refuse_all_bad_frees(&lower, 0..units, &blocks);
        for (at, order) in blocks {
            assert_eq!(lower.free(at, order), Ok(()), "{units}: ({at}, {order})");
        }
        lower.assert_consistent();
        assert_eq!(
            lower.child(HugeId((units - 1) / 512)).free(),
            (units - 1) % 512 + 1
        );
    }
}

/// A multi-word block whose free has claimed its start word (FREEING) is no block: frees
/// of it and inside it are `NotAllocated`, `block_of` finds nothing, no claim takes it.
#[test]
fn a_block_being_freed_is_no_block() {
    let lower = Lower::new(512);
    let b = lower.alloc(HugeId(0), 7, 0).unwrap();
    lower
        .bits(HugeId(0), b / SLOTS)
        .store(FREEING, Ordering::Relaxed);
    for order in [0, 1, 5, 6, 7, 8] {
        assert_eq!(
            lower.free(b, order),
            Err(Error::NotAllocated),
            "order {order}"
        );
    }
    assert_eq!(lower.free(b + 32, 5), Err(Error::NotAllocated));
    assert_eq!(lower.block_of(b), None);
    assert_eq!(lower.block_of(b + 100), None);
    assert!(!lower.alloc_at(b, 7));
    assert!(!lower.alloc_at(b + 1, 0));
}
