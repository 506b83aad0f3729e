use alloc::vec::Vec;

use super::*;
use crate::llfree::LLFree;
use crate::{BlockAlloc, ConfigRule, HeldCore, Nbbs4};

/// Magazines with the full lists, which these small heaps would not get by default.
fn nbbs4(units: usize, cores: usize) -> Magazine<Nbbs4> {
    let config = Config::new(units, 6).with_cores(cores);
    Magazine::new(config, Nbbs4::new(config).unwrap())
        .unwrap()
        .with_settings(Settings::new().with_parking_limit(usize::MAX))
}

/// Zeroed memory of `bytes` (the buffer, which must outlive its use), lent whole.
fn caller_memory(bytes: usize) -> (Vec<u64>, MetadataMemory) {
    let mut meta = alloc::vec![0u64; bytes.div_ceil(8)];
    let base = core::ptr::NonNull::new(meta.as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: the buffer's bytes; the callers keep it alive, and use it for nothing else,
    // until the magazines built in it are dropped.
    (meta, unsafe { MetadataMemory::from_raw(base, bytes) })
}

/// Every list's batch fits the buffer a free's spill takes it into before it lets the
/// cache go (else that spill gives the batch back under the lock).
#[test]
fn every_batch_fits_the_spill_buffer() {
    for policy in &MAGAZINE_STEPS {
        assert!(policy.largest_batch() <= super::cached::SPILL_BUFFER);
    }
}

/// The lists follow the heap per core, built on the heap or in caller memory, and
/// [`Settings::with_parking_limit`] overrides them; each list takes its watermark's worth
/// without a spill, and all of them at their watermarks are the parking limit.
#[test]
fn lists_scale_with_the_heap_per_core() {
    let cases = [
        (1 << 20, 8, 10880, None),
        (1 << 20, 9, 5440, None),
        (1 << 18, 4, 5440, None),
        (1 << 18, 5, 2720, None),
        (1 << 17, 4, 2720, None),
        (1 << 17, 5, 2256, None),
        (1 << 14, 1, 2256, Some((usize::MAX, 10880))),
        (1 << 20, 4, 10880, Some((3000, 2720))),
        (1 << 20, 4, 10880, Some((0, 2256))),
    ];
    for (units, cores, default, chosen) in cases {
        let config = Config::new(units, 9).with_cores(cores);
        let on_heap = Magazine::new(config, LLFree::new(config).unwrap()).unwrap();
        // `meta` outlives the magazines (dropped at the end of the iteration).
        let (meta, lent) = caller_memory(Magazine::<LLFree>::metadata_bytes(config));
        let in_caller = Magazine::in_metadata(config, LLFree::new(config).unwrap(), lent).unwrap();
        for mut m in [on_heap, in_caller] {
            assert_eq!(m.parking_limit(), default, "{units} units on {cores} cores");
            if let Some((limit, got)) = chosen {
                m = m.with_settings(Settings::new().with_parking_limit(limit));
                assert_eq!(m.parking_limit(), got, "a limit of {limit}");
            }
            fill_every_list(&m);
            // New lists for magazines that park blocks: those go back first.
            let m = m.with_settings(Settings::new().with_parking_limit(0));
            assert_eq!(m.inner().free_units(), units);
            fill_every_list(&m);
            m.drain();
            assert_eq!(m.inner().free_units(), units);
        }
        drop(meta);
    }
}

/// [`Settings::parking_limit`] chooses the lists of magazines built from a configuration,
/// on the heap and in caller memory with the allocator (as the registry and the C ABI
/// build them by name); without it they follow the heap per core.
#[test]
fn a_configured_parking_limit_chooses_the_lists() {
    let config = Config::new(1 << 14, 10).with_cores(4);
    for (limit, ceiling) in [(None, 2256), (Some(usize::MAX), 10880), (Some(3000), 2720)] {
        let settings = Settings {
            parking_limit: limit,
            ..Settings::new()
        };
        let on_heap = Magazine::new(config, LLFree::new(config).unwrap())
            .unwrap()
            .with_settings(settings);
        assert_eq!(on_heap.parking_limit(), ceiling, "{limit:?} on the heap");
        let inner = LLFree::metadata_bytes(config);
        let bytes = inner + Magazine::<LLFree>::metadata_bytes(config);
        // `meta` outlives the magazines (dropped first).
        let (meta, lent) = caller_memory(bytes);
        let (backend, magazines) = lent.take(inner);
        let backend = LLFree::in_metadata(config, backend).unwrap();
        let in_caller = Magazine::in_metadata(config, backend, magazines)
            .unwrap()
            .with_settings(settings);
        assert_eq!(
            in_caller.parking_limit(),
            ceiling,
            "{limit:?} in caller memory"
        );
        drop(in_caller);
        drop(meta);
    }
}

/// Frees on core 0 exactly as many blocks of each cached order as its list holds at its
/// watermark (into empty lists), then one more of each, which spills.
fn fill_every_list(m: &Magazine<LLFree>) {
    let policy = &m.policy;
    let blocks: Vec<Vec<usize>> = (policy.orders.iter().enumerate())
        .map(|(slot, &order)| {
            let n = policy.high[slot] + 1;
            (0..n).map(|_| m.alloc(order, 0).unwrap()).collect()
        })
        .collect();
    m.drain();
    let mut parked = 0;
    for (&order, blocks) in policy.orders.iter().zip(&blocks) {
        let high = &blocks[..blocks.len() - 1];
        for &b in high {
            m.free(b, order, 0).unwrap();
        }
        parked += high.len() << order;
        assert_eq!(m.parked_units(0), parked, "order {order}");
    }
    assert_eq!(parked, m.parking_limit());
    for (&order, blocks) in policy.orders.iter().zip(&blocks) {
        m.free(*blocks.last().unwrap(), order, 0).unwrap();
        assert!(m.parked_units(0) <= parked, "order {order} spilled");
    }
}

/// A drained core's blocks go back; the other cores keep theirs and go on serving from
/// them, and a block allocated on the drained core is still freed exactly.
#[test]
fn draining_a_core_gives_back_its_blocks_alone() {
    let alloc = nbbs4(1 << 12, 3);
    let live = alloc.alloc(0, 0).unwrap();
    for (core, order) in [(0, 0), (1, 2), (2, 3)] {
        let b = alloc.alloc(order, core).unwrap();
        alloc.free(b, order, core).unwrap();
    }
    let parked = |core| alloc.parked_units(core);
    let before = [parked(0), parked(1), parked(2)];
    assert!(before.iter().all(|&p| p > 0), "{before:?}");
    // A core hint beyond the cores names core 1, as in every other call.
    alloc.drain_core(4);
    assert_eq!([parked(0), parked(1), parked(2)], [before[0], 0, before[2]]);
    let backend = (1 << 12) - 1 - before[0] - before[2];
    assert_eq!(alloc.inner().free_units(), backend);
    assert_eq!(alloc.free_units(), (1 << 12) - 1);
    // Core 2 takes from its own magazine, not the backend.
    let c = alloc.alloc(3, 2).unwrap();
    assert_eq!(alloc.inner().free_units(), backend);
    alloc.free(c, 3, 2).unwrap();
    alloc.drain_core(0);
    assert_eq!(parked(0), 0);
    assert_eq!(alloc.free(live, 1, 0), Err(Error::OrderMismatch));
    alloc.free(live, 0, 0).unwrap();
    assert_eq!(alloc.free(live, 0, 0), Err(Error::NotAllocated));
    alloc.drain_core(0);
    alloc.drain_core(2);
    assert_eq!(alloc.inner().free_units(), 1 << 12);
}

#[test]
fn a_double_free_of_a_parked_block_is_an_error_and_changes_nothing() {
    let alloc = nbbs4(1024, 2);
    let a = alloc.alloc(0, 0).unwrap();
    let b = alloc.alloc(1, 0).unwrap();
    alloc.free(a, 0, 0).unwrap();
    alloc.free(b, 1, 0).unwrap();
    assert!(alloc.parked_units(0) >= 3, "both parked");
    let free = alloc.free_units();
    // From this core, from another, with the right or a wrong order.
    assert_eq!(alloc.free(a, 0, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(a, 0, 1), Err(Error::NotAllocated));
    assert_eq!(alloc.free(b, 1, 1), Err(Error::NotAllocated));
    assert_eq!(alloc.free(b, 0, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free_units(), free);
    // A live block freed with the wrong order, and a unit never handed out.
    let c = alloc.alloc(2, 1).unwrap();
    assert_eq!(alloc.free(c, 1, 1), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(c + 1, 0, 1), Err(Error::NotAllocated));
    assert_eq!(alloc.order_at(c), Ok(2));
    assert_eq!(alloc.block_of(a), Ok(None), "a parked block is free");
    alloc.free(c, 2, 1).unwrap();
    alloc.drain();
    assert_eq!(alloc.free_units(), 1024);
    assert_eq!(alloc.inner().free_units(), 1024);
}

#[test]
fn out_of_memory_only_after_draining_every_magazine() {
    for cores in [1, 3] {
        let alloc = nbbs4(256, cores);
        // Fill the heap from core 0, park everything in core 0's magazines (of several
        // orders), then ask from another core for blocks no magazine holds.
        let blocks: Vec<usize> = (0..256).map(|_| alloc.alloc(0, 0).unwrap()).collect();
        assert_eq!(alloc.alloc(0, 0), Err(Error::OutOfMemory));
        for &i in blocks.iter().take(100) {
            alloc.free(i, 0, 0).unwrap();
        }
        assert_eq!(alloc.inner().free_units() + 100, alloc.free_units());
        // Order 0 from another core: its magazine is empty, the backend's blocks are
        // parked: found after draining.
        let got = alloc.alloc(0, cores - 1).unwrap();
        alloc.free(got, 0, cores - 1).unwrap();
        // Order 6 (none parked): the parked order-0 blocks must merge first.
        let mut rest = blocks[100..].to_vec();
        for i in rest.drain(..) {
            alloc.free(i, 0, 0).unwrap();
        }
        assert!(alloc.inner().free_units() < 256, "some parked");
        let big = alloc.alloc(6, cores - 1).unwrap();
        alloc.free(big, 6, 0).unwrap();
    }
}

/// A refusal gives back every parked block that may complete a block of the order asked
/// for, wherever it is parked, and keeps only those whose buddy a caller holds (they cannot
/// complete one while the caller holds it); the same core's next refusal gives those back
/// too. Keeping every parked block of a smaller order would refuse the region made whole
/// here.
#[test]
fn a_refusal_keeps_only_blocks_whose_buddy_a_caller_holds() {
    let alloc = nbbs4(1024, 2);
    let blocks: Vec<usize> = (0..1024).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    // The first unit of every other region of order 6, parked in core 0's magazine, each
    // with its buddy out.
    let starts = blocks.iter().filter(|&&b| b % 64 == 0 && b > 0).count();
    for &b in blocks.iter().filter(|&&b| b % 64 == 0 && b > 0) {
        alloc.free(b, 0, 0).unwrap();
    }
    // Region 0, all parked: half in core 0's magazine and half in core 1's.
    for &b in blocks.iter().filter(|&&b| b < 64) {
        alloc.free(b, 0, b % 2).unwrap();
    }
    assert_eq!(alloc.inner().free_units(), 0, "all parked");
    assert_eq!(alloc.alloc(6, 1), Ok(0));
    assert_eq!(
        alloc.parked_units(0),
        starts,
        "kept, as their buddies are out"
    );
    // Another core's first refusal tests them again, and keeps them.
    assert_eq!(alloc.alloc(6, 0), Err(Error::OutOfMemory));
    assert_eq!(alloc.parked_units(0), starts);
    // The blocks a core kept all go back at its next refusal.
    assert_eq!(alloc.alloc(6, 1), Err(Error::OutOfMemory));
    assert_eq!((alloc.parked_units(0), alloc.parked_units(1)), (0, 0));
    alloc.free(0, 6, 1).unwrap();
    for &b in blocks.iter().filter(|&&b| b >= 64 && b % 64 != 0) {
        alloc.free(b, 0, 0).unwrap();
    }
    alloc.drain();
    assert_eq!(alloc.inner().free_units(), 1024);
}

/// Threads free their blocks, a few held back, then all ask for a huge frame at once: every
/// frame whose units were all freed before is found, though its first unit is parked in
/// some magazine and the refusals screen the magazines concurrently; the frames with a
/// block held back are not. Keeping every parked block of a smaller order would refuse
/// frames that are free.
#[test]
fn concurrent_refusals_find_every_frame_freed_before_them() {
    use std::sync::Barrier;
    const THREADS: usize = 4;
    const FRAMES: usize = 6;
    let config = Config::new(FRAMES * 512, 10).with_cores(THREADS);
    let alloc = Magazine::new(config, LLFree::new(config).unwrap())
        .unwrap()
        .with_settings(Settings::new().with_parking_limit(usize::MAX));
    let barrier = Barrier::new(THREADS);
    for round in 0..40 {
        // Frames whose second unit stays out this round.
        let held = |b: usize| b % 512 == 1 && (b / 512 + round).is_multiple_of(3);
        let whole = (0..FRAMES)
            .filter(|f| !(f + round).is_multiple_of(3))
            .count();
        let found: usize = std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|core| {
                    let (alloc, barrier) = (&alloc, &barrier);
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        while let Ok(b) = alloc.alloc(0, core) {
                            mine.push(b);
                        }
                        barrier.wait();
                        // The first units last, so that they stay parked.
                        mine.sort_by_key(|&b| core::cmp::Reverse(b % 512));
                        mine.retain(|&b| {
                            held(b) || alloc.free(b, 0, core).map(|()| false).unwrap()
                        });
                        barrier.wait();
                        let got = alloc.alloc(9, core).ok();
                        barrier.wait();
                        for b in mine.drain(..) {
                            alloc.free(b, 0, core).unwrap();
                        }
                        got.inspect(|&b| alloc.free(b, 9, core).unwrap()).is_some()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| usize::from(w.join().unwrap()))
                .sum()
        });
        assert_eq!(found, whole.min(THREADS), "round {round}");
        alloc.drain();
        assert_eq!(alloc.free_units(), FRAMES * 512);
    }
}

/// On a full heap with nothing parked, a refused allocation takes no other cache's
/// lock: it answers while another cache is held (here by this very thread, which
/// waiting for it would report as a bug); a block parked afterwards is found by the
/// drain.
#[test]
fn a_refusal_with_nothing_parked_takes_no_other_lock() {
    let alloc = nbbs4(256, 2);
    let blocks: Vec<usize> = (0..256).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    assert_eq!(alloc.alloc(0, 0), Err(Error::OutOfMemory));
    let pin = alloc.pin(1);
    for (order, core) in [(0, 0), (3, 0), (0, 2)] {
        assert_eq!(alloc.alloc(order, core), Err(Error::OutOfMemory));
    }
    drop(pin);
    alloc.free(blocks[9], 0, 1).unwrap();
    assert_eq!(alloc.alloc(0, 0), Ok(blocks[9]));
}

/// The figures of the module docs: with the full lists, a core parks at most 128 units
/// of order 0 and 512 of each larger order, however many blocks it frees.
#[test]
fn each_order_parks_at_most_its_watermark() {
    let alloc = LLFree::new(Config::new(1 << 14, 10).with_cores(1))
        .and_then(|inner| Magazine::new(Config::new(1 << 14, 10).with_cores(1), inner))
        .unwrap()
        .with_settings(Settings::new().with_parking_limit(usize::MAX));
    for (order, high_units) in [(0, 128), (1, 512), (3, 512), (7, 1024), (8, 2048)] {
        let blocks: Vec<usize> = (0..3 * (high_units >> order) + 5)
            .map(|_| alloc.alloc(order, 0).unwrap())
            .collect();
        let mut most = 0;
        for &i in &blocks {
            alloc.free(i, order, 0).unwrap();
            most = most.max(alloc.parked_units(0));
        }
        assert_eq!(most, high_units, "order {order}");
        alloc.drain();
        assert_eq!(alloc.inner().free_units(), 1 << 14);
    }
}

#[test]
fn drain_returns_everything() {
    let alloc = LLFree::new(Config::new(1 << 14, 10).with_cores(4))
        .and_then(|inner| Magazine::new(Config::new(1 << 14, 10).with_cores(4), inner))
        .unwrap();
    let mut held = Vec::new();
    for core in 0..4 {
        for order in 0..=4 {
            for _ in 0..20 {
                held.push((alloc.alloc(order, core).unwrap(), order, core));
            }
        }
    }
    for &(i, order, core) in &held {
        alloc.free(i, order, (core + 1) % 4).unwrap();
    }
    assert_eq!(alloc.free_units(), 1 << 14);
    assert!(alloc.inner().free_units() < 1 << 14, "blocks parked");
    alloc.drain();
    for core in 0..4 {
        assert_eq!(alloc.parked_units(core), 0);
    }
    assert_eq!(alloc.inner().free_units(), 1 << 14);
    // Whole again: the largest block can be allocated everywhere.
    for _ in 0..16 {
        alloc.alloc(10, 0).unwrap();
    }
    assert_eq!(alloc.alloc(0, 1), Err(Error::OutOfMemory));
}

#[test]
fn alloc_at_never_takes_a_parked_block() {
    let alloc = nbbs4(64, 2);
    let a = alloc.alloc(0, 0).unwrap();
    alloc.free(a, 0, 0).unwrap();
    alloc.alloc_at(a, 0, 1).unwrap();
    assert_eq!(alloc.order_at(a), Ok(0));
    // The rest of core 0's batch was given back, not handed out again.
    let others: Vec<usize> = (0..63).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    assert!(!others.contains(&a));
    assert_eq!(alloc.alloc(0, 0), Err(Error::OutOfMemory));
}

#[test]
fn a_pinned_core_answers_bad_frees_as_the_shared_path_does() {
    let alloc = LLFree::new(Config::new(1 << 12, 10).with_cores(2))
        .and_then(|inner| Magazine::new(Config::new(1 << 12, 10).with_cores(2), inner))
        .unwrap();
    let mut pin = alloc.pin(1);
    let a = pin.alloc(0).unwrap();
    let b = pin.alloc(3).unwrap();
    let huge = pin.alloc(9).unwrap();
    assert_eq!(pin.alloc(11), Err(Error::BadOrder));
    pin.free(a, 0).unwrap();
    assert_eq!(pin.free(a, 0), Err(Error::NotAllocated), "parked");
    assert_eq!(pin.free(b, 2), Err(Error::OrderMismatch));
    assert_eq!(pin.free(b + 1, 0), Err(Error::NotAllocated));
    assert_eq!(pin.free(huge, 8), Err(Error::OrderMismatch));
    assert_eq!(
        pin.free(huge, 0),
        Err(Error::OrderMismatch),
        "an uncached block"
    );
    assert_eq!(pin.free(1 << 12, 0), Err(Error::OutOfRange));
    // Blocks cross between the pinned core and the shared path of the other.
    let shared = {
        drop(pin);
        alloc.alloc(0, 0).unwrap()
    };
    let mut pin = alloc.pin(1);
    pin.free(shared, 0).unwrap();
    pin.free(b, 3).unwrap();
    pin.free(huge, 9).unwrap();
    assert_eq!(pin.free(huge, 9), Err(Error::NotAllocated));
    drop(pin);
    assert_eq!(alloc.free(b, 3, 0), Err(Error::NotAllocated));
    alloc.drain();
    assert_eq!(alloc.inner().free_units(), 1 << 12);
}

/// An allocation through a pin that the magazines cannot serve drains every magazine,
/// the pinned one included, before it answers `OutOfMemory`.
#[test]
fn a_pinned_core_drains_every_magazine_before_out_of_memory() {
    let alloc = nbbs4(256, 2);
    // Order 0 parked in core 0's magazine and in the pinned core 1's.
    let blocks: Vec<usize> = (0..256).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    for &i in &blocks[..100] {
        alloc.free(i, 0, 0).unwrap();
    }
    let mut pin = alloc.pin(1);
    for &i in &blocks[100..] {
        pin.free(i, 0).unwrap();
    }
    assert!(alloc.inner().free_units() < 256, "some parked");
    // Order 6 is cached but none is parked: the order-0 blocks must merge first.
    let big: Vec<usize> = (0..4).map(|_| pin.alloc(6).unwrap()).collect();
    assert_eq!(pin.alloc(0), Err(Error::OutOfMemory));
    for &i in &big {
        pin.free(i, 6).unwrap();
    }
    // The same through the shared path of the other core while this one stays pinned
    // would wait for the pin; dropped, it drains the pinned core's parked blocks too.
    drop(pin);
    let all: Vec<usize> = (0..256).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    assert_eq!(all.len(), 256);
}

/// Over LLFree, whose batches continue from the frame of the core's last allocation, a
/// refill takes the rest of a partly used frame and not the first block of the next, so
/// that later batches are whole frames again (and spills give whole frames back); at
/// orders 6, 7 and 8 alike, whose batches are a frame each.
#[test]
fn refills_line_up_with_huge_frames_after_a_partly_used_one() {
    let frame = |index: usize| index / crate::llfree::HUGE_UNITS;
    for (order, batch) in [(6, 8), (7, 4), (8, 2)] {
        let config = Config::new(1 << 14, 10);
        let used = LLFree::new(config).unwrap();
        let first = used.alloc(order, 0).unwrap();
        let alloc = Magazine::new(config, used)
            .unwrap()
            .with_settings(Settings::new().with_parking_limit(usize::MAX));
        let rest: Vec<usize> = (1..batch).map(|_| alloc.alloc(order, 0).unwrap()).collect();
        assert!(rest.iter().all(|&b| frame(b) == frame(first)), "{rest:?}");
        assert_eq!(alloc.inner().free_units(), (1 << 14) - 512);
        let mut frames = Vec::from([frame(first)]);
        for _ in 0..3 {
            let got: Vec<usize> = (0..batch).map(|_| alloc.alloc(order, 0).unwrap()).collect();
            assert!(got.iter().all(|&b| frame(b) == frame(got[0])), "{got:?}");
            assert_eq!(alloc.parked_units(0), 0, "order {order}");
            frames.push(frame(got[0]));
        }
        frames.dedup();
        assert_eq!(frames.len(), 4, "order {order}: {frames:?}");
    }
}

/// Only backends whose bulk allocations continue from the core's last allocation have
/// their batches cut, and wrappers pass the answer on.
#[test]
fn llfree_says_its_bulk_allocations_continue_and_nbbs_does_not() {
    let config = Config::new(1 << 12, 10);
    let llfree: alloc::boxed::Box<dyn Backend> =
        alloc::boxed::Box::new(LLFree::new(config).unwrap());
    assert!(llfree.alloc_bulk_continues());
    assert!(!Nbbs4::new(config).unwrap().alloc_bulk_continues());
    assert!(!crate::Nbbs::new(config).unwrap().alloc_bulk_continues());
}

/// The orders a backend takes in bulk no cheaper than block by block move one block at
/// a time (NBBS-4's top row of a cell, every order of NBBS), the others in batches;
/// wrappers pass the answer on.
#[test]
fn orders_without_bulk_groups_move_one_block_at_a_time() {
    fn batches<A: Backend>(inner: A) -> Vec<usize> {
        // The full lists (a heap this small would get short ones, some of a block a
        // batch whatever the backend), chosen after the build: fitted there too.
        let config = Config::new(inner.total_units(), inner.max_order());
        let magazine = Magazine::new(config, inner)
            .unwrap()
            .with_settings(Settings::new().with_parking_limit(usize::MAX));
        let policy = &magazine.policy;
        (0..policy.orders.len())
            .map(|slot| policy.batch[slot])
            .collect()
    }
    let config = Config::new(1 << 12, 10);
    let boxed: alloc::boxed::Box<dyn Backend> =
        alloc::boxed::Box::new(LLFree::new(config).unwrap());
    assert!((0..=8).all(|order| boxed.alloc_bulk_groups(order)));
    assert!(!boxed.alloc_bulk_groups(9));
    let llfree = batches(LLFree::new(config).unwrap());
    assert!(llfree[..9].iter().all(|&batch| batch > 1), "{llfree:?}");
    let nbbs4 = batches(Nbbs4::new(config).unwrap());
    for (order, &batch) in nbbs4.iter().enumerate().take(9) {
        assert_eq!(
            batch == 1,
            order == 2 || order == 6,
            "order {order}: {nbbs4:?}"
        );
    }
    let nbbs = batches(crate::Nbbs::new(config).unwrap());
    assert!(nbbs.iter().all(|&batch| batch == 1), "{nbbs:?}");
}

#[test]
fn adopts_the_blocks_of_a_used_inner_allocator() {
    let config = Config::new(256, 6);
    let used = Nbbs4::new(config).unwrap();
    let small = used.alloc(0, 0).unwrap();
    let cached = used.alloc(3, 0).unwrap();
    for (index, order) in [(100, 2), (104, 3), (112, 3)] {
        used.alloc_at(index, order, 0).unwrap();
    }
    let alloc = Magazine::new(config.with_cores(2), used).unwrap();
    assert_eq!(alloc.free_units(), 256 - 1 - 8 - 20);
    assert_eq!(alloc.free(cached, 2, 0), Err(Error::OrderMismatch));
    assert_eq!(alloc.free(cached + 4, 2, 0), Err(Error::NotAllocated));
    for (index, order) in [(small, 0), (cached, 3), (100, 2), (104, 3), (112, 3)] {
        alloc.free(index, order, 1).unwrap();
        assert_eq!(alloc.free(index, order, 0), Err(Error::NotAllocated));
    }
    assert_eq!(alloc.free_units(), 256);
    assert_eq!(alloc.into_inner().free_units(), 256);
}

#[test]
fn into_inner_gives_every_parked_block_back() {
    let alloc = nbbs4(1024, 3);
    let live: Vec<(usize, u32)> = (0..3)
        .flat_map(|core| (0..=6).map(move |order| (core, order)))
        .map(|(core, order)| (alloc.alloc(order, core).unwrap(), order))
        .collect();
    let parked: Vec<usize> = (0..40).map(|_| alloc.alloc(0, 2).unwrap()).collect();
    for &i in &parked {
        alloc.free(i, 0, 2).unwrap();
    }
    let taken: usize = live.iter().map(|&(_, o)| 1 << o).sum();
    let inner = alloc.into_inner();
    assert_eq!(inner.free_units(), 1024 - taken);
    assert_eq!(inner.free(parked[0], 0, 0), Err(Error::NotAllocated));
    for &(i, order) in &live {
        inner.free(i, order, 0).unwrap();
    }
    assert_eq!(inner.alloc(6, 0).map(|_| ()), Ok(()));
    assert_eq!(inner.free_units(), 1024 - 64);
}

/// A core that allocates past a list's watermark with no free between (a stream) hands
/// the rest out `Direct`: every free path (shared, pinned, `try_free`) gives those
/// straight back to the backend, and refuses bad frees of them exactly, changing
/// nothing; the stream's first blocks park. A free that parks ends the stream, so that
/// alloc+free pairs park again. Streams are of huge frames (order 9, one block a batch,
/// taken from the backend without the cache's lock in a stream); a burst of order 0
/// (batches of 32) parks.
#[test]
fn a_stream_of_allocations_is_freed_straight_to_the_backend() {
    let magazine = || {
        LLFree::new(Config::new(1 << 14, 10).with_cores(2))
            .and_then(|inner| Magazine::new(Config::new(1 << 14, 10).with_cores(2), inner))
            .unwrap()
            .with_settings(Settings::new().with_parking_limit(usize::MAX))
    };
    let m = magazine();
    let burst: Vec<usize> = (0..1024).map(|_| m.alloc(0, 0).unwrap()).collect();
    let back = m.inner().free_units();
    for &block in &burst[1020..] {
        m.free(block, 0, 1).unwrap();
    }
    assert_eq!(m.inner().free_units(), back, "order 0: a burst parks");
    {
        let (order, count) = (9, 24);
        let m = magazine();
        let blocks: Vec<usize> = (0..count).map(|_| m.alloc(order, 0).unwrap()).collect();
        let size = 1 << order;
        let inner = || m.inner().free_units();
        let (free, back) = (m.free_units(), inner());
        // The stream's last blocks, through each free path, from the other core.
        let [.., a, b, c] = blocks[..] else {
            unreachable!()
        };
        m.free(a, order, 1).unwrap();
        m.pin(1).free(b, order).unwrap();
        m.try_free(c, order, 1).unwrap();
        assert_eq!(inner(), back + 3 * size, "order {order}: not straight back");
        assert_eq!(m.free_units(), free + 3 * size);
        // Bad frees of them, and of a live one with the wrong order, change nothing.
        let d = blocks[count - 4];
        let wrong = if order == 0 { 1 } else { 8 };
        for (index, order, core, error) in [
            (a, order, 1, Error::NotAllocated),
            (b, order, 0, Error::NotAllocated),
            (c, order, 1, Error::NotAllocated),
            (d, wrong, 0, Error::OrderMismatch),
        ] {
            if index.is_multiple_of(1 << order) {
                assert_eq!(m.free(index, order, core), Err(error), "({index}, {order})");
                assert_eq!(m.try_free(index, order, core), Err(error));
                assert_eq!(m.pin(core).free(index, order), Err(error));
            }
        }
        assert_eq!(
            (m.free_units(), inner()),
            (free + 3 * size, back + 3 * size)
        );
        // The first block parks, which ends core 0's stream; pairs park after it.
        m.free(blocks[0], order, 0).unwrap();
        assert_eq!(
            inner(),
            back + 3 * size,
            "order {order}: the first block parks"
        );
        for _ in 0..3 * count {
            let pair = m.alloc(order, 0).unwrap();
            m.free(pair, order, 0).unwrap();
        }
        assert_eq!(inner(), back + 3 * size, "order {order}: pairs park");
        for &block in &blocks[1..count - 3] {
            m.free(block, order, 0).unwrap();
        }
        m.drain();
        assert_eq!((m.free_units(), inner()), (1 << 14, 1 << 14));
    }
}

/// `try_free` parks a block while its list has room without a spill, and gives the rest
/// straight back to the backend.
#[test]
fn try_free_gives_back_what_it_cannot_park_without_a_spill() {
    let alloc = LLFree::new(Config::new(1 << 12, 10).with_cores(1))
        .and_then(|inner| Magazine::new(Config::new(1 << 12, 10).with_cores(1), inner))
        .unwrap()
        .with_settings(Settings::new().with_parking_limit(usize::MAX));
    let blocks: Vec<usize> = (0..200).map(|_| alloc.alloc(0, 0).unwrap()).collect();
    alloc.drain();
    for (n, &i) in blocks.iter().enumerate() {
        alloc.try_free(i, 0, 0).unwrap();
        assert_eq!(alloc.parked_units(0), (n + 1).min(128));
        assert_eq!(alloc.try_free(i, 0, 0), Err(Error::NotAllocated));
    }
    assert_eq!(alloc.inner().free_units(), (1 << 12) - 128);
    alloc.drain();
    assert_eq!(alloc.inner().free_units(), 1 << 12);
}

#[test]
fn rejects_zero_cores() {
    let config = Config::new(16, 2);
    let fresh = Nbbs4::new(config).unwrap();
    assert_eq!(
        Magazine::new(config.with_cores(0), fresh).err(),
        Some(Error::InvalidConfig(ConfigRule::NoCores))
    );
    let fresh = Nbbs4::new(config).unwrap();
    assert_eq!(
        Magazine::new(Config::new(32, 2), fresh).err(),
        Some(Error::InvalidConfig(ConfigRule::InnerUnits))
    );
}
