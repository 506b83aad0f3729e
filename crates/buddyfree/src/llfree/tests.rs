use alloc::vec::Vec;

use super::lower::Lower;
use super::*;
use crate::Config;

/// xorshift, to stay free of dependencies in unit tests.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Next fit visits every `step`th child of the tree once, from the hint's on, wrapping
/// round to the tree's first; a partial last tree only its own children.
#[test]
fn next_fit_visits_each_child_once_from_the_hint_on() {
    // 8 children a tree; the last of the 3 trees has 5 (units for 21 huge frames).
    let options = Options {
        tree_children: 8,
        ..Options::default()
    };
    let a = LLFree::builder(Config::new(21 * HUGE_UNITS, 10))
        .options(options)
        .build()
        .unwrap();
    let frames = |t: usize, hint_frame: usize, step: usize| -> Vec<usize> {
        a.frames_from(TreeId(t), hint_frame * HUGE_UNITS + 7, step)
            .collect()
    };
    assert_eq!(frames(1, 13, 1), [13, 14, 15, 8, 9, 10, 11, 12]);
    assert_eq!(frames(1, 13, 2), [12, 14, 8, 10]);
    assert_eq!(frames(1, 8, 4), [8, 12]);
    // A hint outside the tree is clamped into it.
    assert_eq!(frames(0, 40, 1), [7, 0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(frames(0, 0, 8), [0]);
    assert_eq!(frames(2, 19, 1), [19, 20, 16, 17, 18]);
    assert_eq!(frames(2, 20, 2), [20, 16, 18]);
    assert_eq!(frames(2, 0, 4), [16, 20]);
}

#[test]
fn counters_match_the_bits_after_every_step() {
    let options = Options {
        tree_children: 2,
        ..Options::default()
    };
    let alloc = LLFree::builder(Config::new(3 * 1024 + 300, 10).with_cores(2))
        .options(options)
        .build()
        .unwrap();
    let mut live: Vec<(usize, u32)> = Vec::new();
    let mut rng = 0x1234_5678_9abc_def1;
    for step in 0..4000 {
        let r = next(&mut rng);
        if live.is_empty() || !r.is_multiple_of(3) {
            let order = (r >> 8) as u32 % 11;
            if let Ok(i) = alloc.alloc(order, (r >> 16) as usize) {
                live.push((i, order));
            }
        } else {
            let (i, o) = live.swap_remove((r >> 8) as usize % live.len());
            alloc.free(i, o, (r >> 16) as usize).unwrap();
        }
        alloc.assert_consistent();
        let taken: usize = live.iter().map(|&(_, o)| 1 << o).sum();
        assert_eq!(
            alloc.free_units() + taken,
            alloc.total_units(),
            "step {step}"
        );
    }
}

fn tiny(cores: usize, tree_children: usize, units: usize) -> LLFree {
    let options = Options {
        tree_children,
        ..Options::default()
    };
    LLFree::builder(Config::new(units, 9).with_cores(cores))
        .options(options)
        .build()
        .unwrap()
}

#[test]
fn a_core_steals_the_only_tree_when_it_needs_it() {
    let alloc = tiny(2, 2, 1024);
    let a = alloc.alloc(0, 0).unwrap();
    assert_eq!(alloc.locals[0].get().tree(), Some(TreeId(0)));
    let b = alloc.alloc(9, 1).unwrap();
    assert_eq!(b, 512);
    assert_eq!(alloc.locals[0].get(), Reservation::NONE);
    assert_eq!(alloc.locals[1].get().tree(), Some(TreeId(0)));
    alloc.free(a, 0, 0).unwrap();
    alloc.free(b, 9, 1).unwrap();
    alloc.assert_consistent();
    assert_eq!(alloc.free_units(), 1024);
}

#[test]
fn draining_a_core_gives_back_its_tree_alone() {
    let alloc = tiny(3, 1, 2048);
    let a = alloc.alloc(0, 0).unwrap();
    let b = alloc.alloc(0, 1).unwrap();
    let (t0, t1) = (alloc.locals[0].get(), alloc.locals[1].get());
    assert!(t0.tree().is_some() && t1.tree().is_some() && t0.tree() != t1.tree());
    // A core hint beyond the cores names core 1, as in every other call.
    alloc.drain_core(4);
    assert_eq!(alloc.locals[1].get(), Reservation::NONE);
    assert_eq!(alloc.locals[0].get(), t0);
    // Core 1's count went back into its tree's entry, which another core can now take.
    assert_eq!(alloc.trees.get(t1.tree().unwrap()).free(), 511);
    assert!(!alloc.trees.get(t1.tree().unwrap()).reserved());
    alloc.assert_consistent();
    alloc.drain_core(2); // no reservation: nothing to give back
    alloc.free(a, 0, 0).unwrap();
    alloc.free(b, 0, 1).unwrap();
    alloc.assert_consistent();
    assert_eq!(alloc.free_units(), 2048);
}

#[test]
fn frees_from_another_core_are_synced_into_the_holder() {
    let alloc = tiny(2, 1, 512);
    let blocks: Vec<usize> = (0..512).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    assert_eq!(alloc.alloc(0, 0), Err(Error::OutOfMemory));
    // Core 1 frees into core 0's tree: the tree entry's counter, not core 0's.
    alloc.free(blocks[7], 0, 1).unwrap();
    assert_eq!(alloc.trees.get(TreeId(0)).free(), 1);
    assert_eq!(alloc.locals[0].get().free(), 0);
    // Core 0 runs short and syncs it (Fig. 14a (1a)).
    assert_eq!(alloc.alloc(0, 0), Ok(blocks[7]));
    assert_eq!(alloc.locals[0].get().tree(), Some(TreeId(0)));
    for b in blocks {
        alloc.free(b, 0, 0).unwrap();
    }
    alloc.assert_consistent();
}

#[test]
fn four_frees_into_a_partial_tree_reserve_it() {
    let alloc = tiny(2, 1, 2048);
    // Core 0 fills tree 0 halfway; core 1, finding it reserved, takes another; then core
    // 0 lets tree 0 go, partial. (Were core 1 to search after that, it would pick the
    // partial tree 0 itself.)
    let mine: Vec<usize> = (0..256).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    let _ = alloc.alloc(0, 1).unwrap();
    alloc.release_all(Some(1));
    let core1 = alloc.locals[1].get().tree();
    assert_ne!(core1, Some(TreeId(0)));
    for (i, &b) in mine.iter().enumerate().take(4) {
        alloc.free(b, 0, 1).unwrap();
        let held = alloc.locals[1].get().tree();
        assert_eq!(held == Some(TreeId(0)), i == 3, "after {} frees", i + 1);
    }
    alloc.assert_consistent();
}

/// On a full heap, allocations are refused through the summary and the cores' counters:
/// no reservation moves (core 0 keeps its tree, the move counter stays as it is), and a
/// unit freed afterwards, into a tree entry or a core's counter, is found.
#[test]
fn a_refusal_on_a_full_heap_moves_no_reservation() {
    let alloc = tiny(2, 1, 1024);
    let blocks: Vec<usize> = (0..1024).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    // The first refusal clears the marks of the trees whose counts went to 0 (a move,
    // so it takes the complete path, which gives every reservation back); core 0 then
    // takes a tree again.
    assert_eq!(alloc.alloc(0, 1), Err(Error::OutOfMemory));
    alloc.free(blocks[0], 0, 0).unwrap();
    assert_eq!(alloc.alloc(0, 0), Ok(blocks[0]));
    let held = alloc.locals[0].get();
    assert!(held.tree().is_some());
    // Refused at once; the first refusal clears the mark core 0's reservation left stale.
    assert_eq!(alloc.alloc(0, 1), Err(Error::OutOfMemory));
    assert_eq!(alloc.locals[0].get(), held);
    let moves = alloc.moves.snapshot();
    for (order, core) in [(0, 0), (0, 1), (9, 0), (3, 1)] {
        assert_eq!(alloc.alloc(order, core), Err(Error::OutOfMemory));
        assert_eq!(alloc.try_alloc(order, core), Err(Error::OutOfMemory));
    }
    assert_eq!(alloc.locals[0].get(), held);
    assert_eq!(alloc.moves.snapshot(), moves);
    alloc.assert_consistent();
    // Into the entry of a tree core 0 does not hold, then into core 0's own counter.
    let (elsewhere, own) = match held.tree() {
        Some(TreeId(0)) => (blocks[700], blocks[7]),
        _ => (blocks[7], blocks[700]),
    };
    for b in [elsewhere, own] {
        alloc.free(b, 0, 0).unwrap();
        alloc.assert_consistent();
        assert_eq!(alloc.alloc(0, 1), Ok(b));
    }
}

#[test]
fn a_multi_word_claim_skips_groups_with_a_taken_unit() {
    let lower = Lower::new(512);
    let mut words = [0; 8];
    words[1] = 1 << 5;
    words[6] = 1;
    lower.set_frame(HugeId(0), words);
    assert_eq!(lower.alloc(HugeId(0), 7, 0), Some(128));
    assert_eq!(lower.alloc(HugeId(0), 8, 0), None);
    assert_eq!(lower.alloc(HugeId(0), 7, 0), Some(256));
    assert_eq!(lower.alloc(HugeId(0), 7, 0), None);
    lower.assert_consistent();
}

#[test]
fn a_bulk_allocation_takes_the_free_blocks_of_the_frame_word_by_word() {
    let alloc = LLFree::new(Config::new(4096, 10).with_cores(2)).unwrap();
    // The first allocation reserves core 1's tree; the bulk claims follow it.
    let first = alloc.alloc(0, 1).unwrap();
    let mut out = [0; 64];
    assert_eq!(alloc.alloc_bulk(0, 1, &mut out[..32]), Ok(32));
    assert!(out[..32].iter().copied().eq(first + 1..first + 33));
    alloc.free_bulk(&out[..32], 0, 1).unwrap();
    for (order, len) in [(0, 7), (2, 9), (3, 64), (4, 2), (5, 3)] {
        assert_eq!(alloc.alloc_bulk(order, 1, &mut out[..len]), Ok(len));
        let blocks = &out[..len];
        let mut sorted = blocks.to_vec();
        sorted.sort_unstable();
        assert!(sorted.windows(2).all(|w| w[0] < w[1]), "{blocks:?}");
        for &b in blocks {
            assert_eq!(alloc.block_of(b), Ok(Some((b, order))));
            if order > 0 {
                assert_eq!(alloc.free(b + 1, 0, 0), Err(Error::NotAllocated));
            }
            assert!(alloc.free(b, order + 1, 0).is_err());
        }
        alloc.assert_consistent();
        // One by one, and in bulk.
        alloc.free(blocks[0], order, 0).unwrap();
        assert_eq!(alloc.free(blocks[0], order, 0), Err(Error::NotAllocated));
        alloc.free_bulk(&blocks[1..], order, 1).unwrap();
        alloc.assert_consistent();
    }
    alloc.free(first, 0, 1).unwrap();
    assert_eq!(alloc.free_units(), 4096);
    assert_eq!(alloc.alloc_bulk(0, 0, &mut []), Ok(0));
    assert_eq!(alloc.free_units(), 4096);
}

/// 64 MiB and two cores: with the paper's 64 MiB trees there would be one tree, and the
/// cores would take its reservation from each other on every allocation.
#[test]
fn a_small_heap_gets_a_tree_for_every_core() {
    let alloc = LLFree::new(Config::new(1 << 14, 10).with_cores(2)).unwrap();
    assert_eq!(alloc.tree_children, 16);
    let tree = |index: usize| index >> alloc.tree_shift;
    let mut trees = [None, None];
    for _ in 0..100 {
        for (core, held) in trees.iter_mut().enumerate() {
            let t = tree(alloc.alloc(0, core).unwrap());
            assert_eq!(
                *held.get_or_insert(t),
                t,
                "core {core} moved to another tree"
            );
        }
    }
    assert_ne!(trees[0], trees[1], "both cores in one tree");
    // The paper's tuning where the heap has room for it.
    let big = Config::new(1 << 18, 10).with_cores(4);
    assert_eq!(Options::for_config(big), Options::default());
    let tiny = Config::new(600, 10).with_cores(8);
    assert_eq!(Options::for_config(tiny).tree_children, 2);
}

#[test]
fn a_bulk_allocation_of_several_words_a_block_takes_whole_groups() {
    let alloc = LLFree::new(Config::new(4096, 10).with_cores(2)).unwrap();
    let first = alloc.alloc(6, 1).unwrap();
    for (order, len) in [(6, 7), (7, 3), (8, 2), (6, 16), (8, 8)] {
        let mut out = [0; 16];
        assert_eq!(alloc.alloc_bulk(order, 1, &mut out[..len]), Ok(len));
        let blocks = &out[..len];
        let mut sorted = blocks.to_vec();
        sorted.sort_unstable();
        assert!(
            sorted.windows(2).all(|w| w[1] - w[0] >= 1 << order),
            "{blocks:?}"
        );
        for &b in blocks {
            assert_eq!(b % (1 << order), 0);
            assert_eq!(alloc.block_of(b + (1 << order) - 1), Ok(Some((b, order))));
            assert_eq!(alloc.free(b, order - 1, 0), Err(Error::OrderMismatch));
            assert_eq!(alloc.free(b + 32, 5, 0), Err(Error::NotAllocated));
        }
        alloc.assert_consistent();
        // A bulk free stops at a block named twice, the blocks before it freed.
        if len >= 3 {
            let [a, b, c] = [blocks[0], blocks[1], blocks[2]];
            let free = alloc.free_units();
            assert_eq!(
                alloc.free_bulk(&[a, b, a, c], order, 0),
                Err((2, Error::NotAllocated))
            );
            assert_eq!(alloc.free_units(), free + (2 << order));
            assert_eq!(alloc.block_of(c), Ok(Some((c, order))));
            alloc.free_bulk(&blocks[2..], order, 1).unwrap();
        } else {
            alloc.free_bulk(blocks, order, 1).unwrap();
        }
        alloc.assert_consistent();
    }
    alloc.free(first, 6, 1).unwrap();
    assert_eq!(alloc.free_units(), 4096);
}

/// A bulk claim whose frame (that of the core's last allocation) has no room for a block
/// goes on to the next frame of the core's tree that has, wrapping around, and takes
/// what that frame has room for in the same call, without a single `alloc` first.
#[test]
fn a_bulk_claim_goes_on_to_the_next_frame_with_room() {
    let alloc = LLFree::new(Config::new(4 * HUGE_UNITS, 10)).unwrap();
    let frame = |index: usize| index / HUGE_UNITS;
    let first = alloc.alloc(0, 0).unwrap();
    assert_eq!(frame(first), 0);
    let claim = |want: usize| {
        let mut out = [0; 2];
        let got = alloc.alloc_near(8, 0, &[], &mut out[..want]);
        out[..got].to_vec()
    };
    // Room for one block left in frame 0: that one alone.
    let half = claim(2);
    assert_eq!(half.iter().map(|&b| frame(b)).collect::<Vec<_>>(), [0]);
    // Frame 0 has no room for another: frames 1, 2 and 3 whole, in turn.
    for f in 1..4 {
        let blocks = claim(2);
        assert_eq!(blocks.iter().map(|&b| frame(b)).collect::<Vec<_>>(), [f, f]);
    }
    alloc.assert_consistent();
    // Around to frame 0 once its first half is free; then no frame has room.
    alloc.free(first, 0, 0).unwrap();
    assert_eq!(claim(2), [0]);
    assert_eq!(claim(2), []);
    alloc.assert_consistent();
    assert_eq!(alloc.free_units(), 0);
}

#[test]
fn a_bulk_free_with_a_bad_block_frees_exactly_those_before_it() {
    let alloc = LLFree::new(Config::new(1024, 10)).unwrap();
    let mut out = [0; 8];
    assert_eq!(alloc.alloc_bulk(0, 0, &mut out), Ok(8));
    let word = out[0] / lower::SLOTS;
    assert!(out.iter().all(|&i| i / lower::SLOTS == word), "one word");
    let never = (word * lower::SLOTS..).find(|i| !out.contains(i)).unwrap();
    let [a, b, c, d, e, f, g, h] = out;
    let free = alloc.free_units();
    // Named twice in one word: the group's check refuses it, one by one stops there.
    assert_eq!(
        alloc.free_bulk(&[a, b, a, c], 0, 0),
        Err((2, Error::NotAllocated))
    );
    assert_eq!(alloc.free_units(), free + 2);
    assert_eq!(alloc.block_of(c), Ok(Some((c, 0))));
    // A wrong order, then a unit never handed out, in the middle of a group.
    let even = [c, d, e, f, g, h].into_iter().find(|i| i % 2 == 0).unwrap();
    assert_eq!(
        alloc.free_bulk(&[even, h], 1, 0),
        Err((0, Error::OrderMismatch))
    );
    assert_eq!(
        alloc.free_bulk(&[c, never, d], 0, 0),
        Err((1, Error::NotAllocated))
    );
    assert_eq!(alloc.free_units(), free + 3);
    assert_eq!(alloc.block_of(d), Ok(Some((d, 0))));
    // Out of range.
    assert_eq!(
        alloc.free_bulk(&[d, 1 << 20], 0, 0),
        Err((1, Error::OutOfRange))
    );
    assert_eq!(alloc.free_bulk(&[e, f, g, h], 0, 0), Ok(()));
    assert_eq!(alloc.free_units(), 1024);
    alloc.assert_consistent();
}
