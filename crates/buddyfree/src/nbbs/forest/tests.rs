use super::*;
use crate::nbbs::cell::State;
use crate::nbbs::release::Seen;
use core::ops::RangeInclusive;

/// The parent cell of `cell` and which of its children `cell` is (a [`Climb`]'s step).
fn parent<K: Kind>(cell: usize) -> (usize, u32) {
    let levels = Forest::<K>::LEVELS;
    (cell >> levels, (cell & ((1 << levels) - 1)) as u32)
}

/// A free's UNMARK stalls after its clear while its units are allocated again: V takes
/// unit 0 and starts freeing it, Y takes unit 1 and completes, then V's coalescing mark
/// lands above Y's marks and the stalled UNMARK finds it. The published UNMARK clears
/// the link to Y's branch, making the root look free while Y holds unit 1. Before V,
/// unit 0 is allocated and freed `reallocs` times: with V's and Y's, `reallocs + 2`
/// marks land above X's cell during the stall, which a generation wrapping at that
/// count would not notice.
fn stale_unmark_races_realloc<K: Kind>(units: usize, max_order: u32, reallocs: usize) {
    let f = Forest::<K>::new(Config::new(units, max_order)).unwrap();
    let s = K::SHAPE;
    assert_eq!(f.alloc(1, 0), Ok(0));
    // X: frees the order-1 block at 0 up to its clear (F20), then stalls.
    let x = f.place(Node { order: 1, pos: 0 });
    let stalled = f.free_until_unmark(0, 1);
    for _ in 0..reallocs {
        assert_eq!(f.alloc(0, 0), Ok(0));
        f.free(0, 0, 0).unwrap();
    }
    // V: allocates unit 0 and marks its free coalescing up to X's cell.
    assert_eq!(f.alloc(0, 0), Ok(0));
    let v = f.place(Node { order: 0, pos: 0 });
    let now = try_cas(f.cell(v.level, v.cell), Ordering::Relaxed, |w| {
        s.claim(w, v.j)
    })
    .unwrap();
    let mut v_seen = Seen::new();
    assert!(s.keeps_climbing(now, s.node_bits(v.j)));
    for up in f.climb(v).take(v.level - x.level) {
        let old = Forest::<K>::coalesce(&up, true, &mut v_seen).unwrap();
        assert!(s.keeps_climbing(old, s.child_bits(up.ch)));
    }
    // Y: allocates unit 1, marking the whole path.
    assert_eq!(f.alloc(0, 0), Ok(1));
    // V: marks the link above X's cell coalescing, after Y's mark there, and finishes.
    let up = f.climb(x).next().unwrap();
    Forest::<K>::coalesce(&up, true, &mut v_seen).unwrap();
    let now = f.clear(v);
    f.unmark(f.climb(v), now, &mut v_seen);
    f.count_free(1, Node { order: 0, pos: 0 }, 0);
    // X: its UNMARK resumes.
    f.resume(stalled, 0);
    if let Ok(top) = f.alloc(max_order, 0) {
        panic!("top block {top} allocated while unit 1 is held");
    }
    f.free(1, 0, 0).unwrap();
    assert_eq!(f.free_units(), units);
    let top = f.alloc(max_order, 0).unwrap();
    f.free(top, max_order, 0).unwrap();
}

/// An allocation of unit 0 marks the link above it (in cell C, at the level below
/// P) and finds P occupied; before its rollback, P is freed and unit 1, whose link is
/// C's other one, is allocated (marking P's link to C) and freed. That free stops its
/// coalescing climb at C, whose other link is occupied and not coalescing, leaving
/// P's link to C to whoever empties C last: the rollback.
fn rollback_after_reuse<K: Kind>(units: usize, max_order: u32, p_order: u32) {
    let f = Forest::<K>::new(Config::new(units, max_order)).unwrap();
    let s = K::SHAPE;
    // P: the block of `p_order` at 0, allocated.
    f.alloc_at(0, p_order, 0).unwrap();
    // The allocation of unit 0: reserve, mark C, fail at P.
    let at = f.place(Node { order: 0, pos: 0 });
    assert!(at.level >= 2, "unit 0 needs two cell levels above it");
    let home = f.cell(at.level, at.cell);
    try_cas(home, Ordering::Relaxed, |w| s.reserve(w, at.j).ok()).unwrap();
    let (c, ch) = parent::<K>(at.cell);
    try_cas(f.cell(at.level - 1, c), Ordering::Relaxed, |w| {
        s.mark(w, ch).ok()
    })
    .unwrap();
    let (p, pch) = parent::<K>(c);
    let above = f.cell(at.level - 2, p).load(Ordering::Relaxed);
    assert!(s.mark(above, pch).is_err(), "P is occupied");
    // P is freed; unit 1 is allocated below C's other link, and freed.
    f.free(0, p_order, 0).unwrap();
    let one = f.place(Node { order: 0, pos: 1 });
    assert_eq!(parent::<K>(one.cell), (c, ch ^ 1));
    f.alloc_at(1, 0, 0).unwrap();
    f.free(1, 0, 0).unwrap();
    // The rollback (T11), as `try_alloc` does it.
    let now = home.fetch_or(0, Ordering::Relaxed);
    f.release(at, now, at.level - 1);
    assert_whole(&f);
}

/// The same inside a bunch, where the allocation's first mark fails: unit 1, a node of
/// unit 0's cell, is allocated and freed in between; its free climbs past the held unit
/// 0 (a held node keeps a free climbing), but its UNMARK stops at the cell, which that
/// node still occupies, leaving the links above to the rollback.
fn rollback_in_cell_after_reuse<K: Kind>(units: usize, max_order: u32, p_order: u32) {
    let f = Forest::<K>::new(Config::new(units, max_order)).unwrap();
    let s = K::SHAPE;
    f.alloc_at(0, p_order, 0).unwrap();
    let at = f.place(Node { order: 0, pos: 0 });
    let home = f.cell(at.level, at.cell);
    try_cas(home, Ordering::Relaxed, |w| s.reserve(w, at.j).ok()).unwrap();
    let (p, pch) = parent::<K>(at.cell);
    let above = f.cell(at.level - 1, p).load(Ordering::Relaxed);
    assert!(s.mark(above, pch).is_err(), "P is occupied");
    f.free(0, p_order, 0).unwrap();
    let one = f.place(Node { order: 0, pos: 1 });
    assert_eq!((one.level, one.cell), (at.level, at.cell));
    f.alloc_at(1, 0, 0).unwrap();
    f.free(1, 0, 0).unwrap();
    let now = home.fetch_or(0, Ordering::Relaxed);
    f.release(at, now, at.level);
    assert_whole(&f);
}

/// Everything free: every top block allocatable at once (checked first: an allocation
/// through a stranded link clears it), then every order.
fn assert_whole<K: Kind>(f: &Forest<K>) {
    assert_eq!(f.free_units(), f.units);
    let cells =
        || -> alloc::vec::Vec<_> { f.cells.iter().map(|c| c.load(Ordering::Relaxed)).collect() };
    let tops: alloc::vec::Vec<_> = (0..f.span >> f.max_order)
        .map(|_| {
            f.alloc(f.max_order, 0)
                .unwrap_or_else(|e| panic!("top block: {e}: cells {:x?}", cells()))
        })
        .collect();
    for top in tops {
        f.free(top, f.max_order, 0).unwrap();
    }
    for order in 0..f.max_order {
        let i = f
            .alloc(order, 0)
            .unwrap_or_else(|e| panic!("order {order}: {e}: cells {:x?}", cells()));
        f.free(i, order, 0).unwrap();
    }
}

/// The cells' state bits, without the generations.
fn states<K: Kind>(f: &Forest<K>) -> alloc::vec::Vec<State> {
    f.cells
        .iter()
        .map(|c| K::SHAPE.without_gen(c.load(Ordering::Relaxed)))
        .collect()
}

/// The first and the last cache line of cells stay unused with every unit allocated, at
/// every order: the cells in use share no line with what lies next to the table.
fn edge_lines_stay_unused<K: Kind>(units: usize, max_order: u32) {
    for order in 0..=max_order {
        let f = Forest::<K>::new(Config::new(units, max_order)).unwrap();
        while f.alloc(order, 0).is_ok() {}
        assert_eq!(f.free_units(), 0);
        let cells = states(&f);
        let mut edges = cells[..Forest::<K>::LINE]
            .iter()
            .chain(&cells[cells.len() - Forest::<K>::LINE..]);
        assert!(edges.all(|&c| c == 0), "order {order}: {cells:x?}");
    }
}

#[test]
fn cells_in_use_own_their_cache_lines() {
    edge_lines_stay_unused::<OneLevel>(1 << 8, 5);
    edge_lines_stay_unused::<FourLevel>(1 << 10, 9);
    edge_lines_stay_unused::<FourLevel>(3 << 8, 8);
}

/// With every unit taken but one block of one order, an allocation of that order finds it
/// wherever it lies in its cell and wherever the scan starts (before it, after it, across
/// the wrap), and the next is refused: the scan passes taken cells without missing a node.
fn scan_finds_the_one_free_block<K: Kind>(units: usize, max_order: u32) {
    for order in 0..=max_order {
        for pos in 0..units >> order {
            for core in 0..3 {
                let f = Forest::<K>::new(Config::new(units, max_order).with_cores(3)).unwrap();
                for unit in 0..units {
                    f.alloc_at(unit, 0, 0).unwrap();
                }
                for unit in pos << order..(pos + 1) << order {
                    f.free(unit, 0, 0).unwrap();
                }
                assert_eq!(f.alloc(order, core), Ok(pos << order), "order {order}");
                assert_eq!(f.alloc(order, core), Err(Error::OutOfMemory));
            }
        }
    }
}

#[test]
fn scans_pass_taken_cells_without_missing_a_node() {
    scan_finds_the_one_free_block::<OneLevel>(80, 5);
    scan_finds_the_one_free_block::<FourLevel>(80, 5);
    scan_finds_the_one_free_block::<FourLevel>(200, 6);
}

/// A bulk allocation of a group leaves the cells as single allocations of its blocks
/// would, and a bulk free of it as single frees would: in a root cell, in a cell below
/// one, and with groups of 2, 4 and 8.
#[test]
fn groups_leave_the_states_of_single_operations() {
    for (units, max_order, order, len) in [
        (8, 2, 0, 4),
        (1 << 12, 10, 0, 4),
        (1 << 12, 10, 1, 2),
        (1 << 12, 10, 3, 8),
        (64, 6, 0, 32),
    ] {
        let config = Config::new(units, max_order);
        let bulk = Forest::<FourLevel>::new(config).unwrap();
        let single = Forest::<FourLevel>::new(config).unwrap();
        let mut out = alloc::vec![0; len];
        assert_eq!(bulk.alloc_bulk(order, 0, &mut out), Ok(len));
        for &index in &out {
            single.alloc_at(index, order, 0).unwrap();
        }
        // Something else in the cells, freed last.
        let other = bulk.alloc(order, 0).unwrap();
        single.alloc_at(other, order, 0).unwrap();
        let case = (units, max_order, order, len);
        assert_eq!(states(&bulk), states(&single), "{case:?}");
        assert_eq!(bulk.free_units(), single.free_units(), "{case:?}");
        // Below a root cell, fewer climbs marked (bumped a generation) than single
        // allocations did: the groups took one climb each.
        let marks = |f: &Forest<FourLevel>| -> u64 {
            f.cells
                .iter()
                .map(|c| FourLevel::SHAPE.gen(c.load(Ordering::Relaxed)))
                .sum()
        };
        if max_order - order >= FourLevel::SHAPE.levels {
            assert!(marks(&bulk) < marks(&single), "{case:?}");
        }
        out.reverse();
        assert_eq!(bulk.free_bulk(&out, order, 0), Ok(()));
        for &index in &out {
            single.free(index, order, 0).unwrap();
        }
        assert_eq!(states(&bulk), states(&single), "{case:?}");
        bulk.free(other, order, 0).unwrap();
        assert_whole(&bulk);
    }
}

/// A group with a block that is not allocated at its order is freed one block at a time:
/// the blocks before the bad one are freed, it and the rest stay as they were.
#[test]
fn a_group_with_a_bad_block_frees_up_to_it() {
    let f = Forest::<FourLevel>::new(Config::new(1 << 12, 10)).unwrap();
    let mut g = [0; 4];
    assert_eq!(f.alloc_bulk(0, 0, &mut g), Ok(4));
    assert_eq!(g[0] % 4, 0, "one group of 4: {g:?}");
    let [a, b, c, d] = g;
    f.free(c, 0, 0).unwrap();
    assert_eq!(
        f.free_bulk(&[b, a, c, d], 0, 0),
        Err((2, Error::NotAllocated))
    );
    assert_eq!(f.free(a, 0, 0), Err(Error::NotAllocated));
    assert_eq!(f.free(b, 0, 0), Err(Error::NotAllocated));
    // Named twice: the group check refuses it, the second naming is the error.
    f.alloc_at(a, 0, 0).unwrap();
    f.alloc_at(b, 0, 0).unwrap();
    f.alloc_at(c, 0, 0).unwrap();
    assert_eq!(
        f.free_bulk(&[a, a, c, d], 0, 0),
        Err((1, Error::NotAllocated))
    );
    // A block of the group's node's order where the group would be.
    f.free_bulk(&[b, c, d], 0, 0).unwrap();
    f.alloc_at(a, 2, 0).unwrap();
    assert_eq!(
        f.free_bulk(&[a, b, c, d], 0, 0),
        Err((0, Error::OrderMismatch))
    );
    f.free(a, 2, 0).unwrap();
    assert_whole(&f);
}

/// Threads allocate and free blocks of random orders (of `orders`) in a small forest whose cells wrap
/// their generation every mark or two and take one registration at a time, so that
/// nearly every UNMARK meets `INVALID`, overflows, gives up or sweeps. Every unit a
/// thread holds is stamped with the thread; a stamp found taken is an overlap. At the
/// end everything must be whole again (a stranded link would lose the top blocks).
fn guard_stress<K: Kind>(units: usize, max_order: u32, orders: RangeInclusive<u32>) {
    use core::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    const THREADS: usize = 4;
    const OPS: usize = 50_000;
    let f = Arc::new(Forest::<K>::new(Config::new(units, max_order).with_cores(THREADS)).unwrap());
    let owner: Arc<alloc::vec::Vec<AtomicUsize>> =
        Arc::new((0..units).map(|_| AtomicUsize::new(0)).collect());
    let workers: alloc::vec::Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, owner, orders) = (f.clone(), owner.clone(), orders.clone());
            std::thread::spawn(move || {
                let mut held: alloc::vec::Vec<(usize, u32)> = alloc::vec::Vec::new();
                let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t as u64 + 1);
                for _ in 0..OPS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if held.len() < 4 && !x.is_multiple_of(3) {
                        let order =
                            orders.start() + (x >> 8) as u32 % orders.clone().count() as u32;
                        if let Ok(i) = f.alloc(order, t) {
                            for u in &owner[i..i + (1 << order)] {
                                let was = u.swap(t + 1, Ordering::Relaxed);
                                assert_eq!(was, 0, "unit held twice");
                            }
                            held.push((i, order));
                        }
                    } else if !held.is_empty() {
                        let (i, order) = held.swap_remove((x >> 16) as usize % held.len());
                        for u in &owner[i..i + (1 << order)] {
                            u.store(0, Ordering::Relaxed);
                        }
                        f.free(i, order, t).unwrap();
                    }
                }
                for (i, order) in held {
                    for u in &owner[i..i + (1 << order)] {
                        u.store(0, Ordering::Relaxed);
                    }
                    f.free(i, order, t).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // Every registration ended, every `INVALID` swept.
    for c in f.cells.iter() {
        let w = c.load(Ordering::Relaxed);
        assert!(K::SHAPE.is_idle(w), "cell left registered: {w:x}");
    }
    assert_whole(&f);
}

#[test]
fn guarded_cells_stay_exact_when_every_mark_wraps() {
    guard_stress::<Guarded<4, 1, 1>>(512, 9, 0..=9);
    guard_stress::<Guarded<4, 1, 2>>(64, 6, 0..=6);
    guard_stress::<Guarded<4, 2, 1>>(32, 5, 0..=5);
    guard_stress::<FourLevel>(512, 9, 0..=9);
}

/// The same with only the orders whose nodes keep their `ALLOCATED` bit in a link: the
/// bottom row of a cell (order 2 in the root cell of a 32-unit tree), over the orders
/// below it, whose frees sweep that cell. A sweep that cleared a link it had found
/// coalescing, after another UNMARK unlinked it and the node above was allocated, would
/// take a live block's `ALLOCATED` bit (the loom model
/// `loom_nbbs_sweep_races_unlink_and_alloc`); its owner's free would be refused.
#[test]
fn guarded_sweeps_keep_the_allocated_bits_in_links() {
    guard_stress::<Guarded<4, 2, 1>>(32, 5, 0..=2);
    guard_stress::<Guarded<4, 3, 1>>(512, 9, 2..=6);
}

#[test]
fn rollback_unlinks_a_cell_emptied_after_reuse() {
    rollback_after_reuse::<OneLevel>(4, 2, 2);
    rollback_after_reuse::<OneLevel>(64, 6, 2);
    rollback_after_reuse::<FourLevel>(512, 8, 5);
    rollback_after_reuse::<FourLevel>(512, 8, 8);
    rollback_in_cell_after_reuse::<FourLevel>(32, 5, 2);
    rollback_in_cell_after_reuse::<FourLevel>(32, 5, 5);
}

#[test]
fn seen_keeps_every_level_climbed() {
    let mut seen = Seen::new();
    seen.set(63, 5);
    seen.set(8, 7);
    seen.set(0, 9);
    assert_eq!(seen.take(63), Some(5));
    assert_eq!(seen.take(63), None);
    assert!(seen.any());
    assert_eq!(seen.take(8), Some(7));
    assert_eq!(seen.take(20), None);
    assert_eq!(seen.take(0), Some(9));
    assert!(!seen.any());
}

#[test]
fn stale_unmark_cannot_free_a_reused_branch() {
    for reallocs in [0, 2, 6, 1000] {
        stale_unmark_races_realloc::<FourLevel>(32, 5, reallocs);
        stale_unmark_races_realloc::<OneLevel>(4, 2, reallocs);
    }
}

/// The replay catches a generation that wraps: with 2 bits, the 4 marks of 2 reallocations
/// and V's and Y's bring it back to X's value.
#[test]
#[should_panic(expected = "allocated while unit 1 is held")]
fn stale_unmark_replay_catches_a_narrow_generation_one_level() {
    stale_unmark_races_realloc::<Narrow<1, 2>>(4, 2, 2);
}

#[test]
#[should_panic(expected = "allocated while unit 1 is held")]
fn stale_unmark_replay_catches_a_narrow_generation_bunch() {
    stale_unmark_races_realloc::<Narrow<4, 2>>(32, 5, 2);
}

/// With the guard, a wrap is harmless: a 2-bit generation (and a count of 1, so that
/// registrations overflow) passes the replay for any number of reallocations, as the real
/// cells do.
#[test]
fn stale_unmark_replay_passes_a_guarded_narrow_generation() {
    for reallocs in [0, 1, 2, 3, 6, 7, 100, 5000] {
        stale_unmark_races_realloc::<Guarded<1, 5, 2>>(4, 2, reallocs);
        stale_unmark_races_realloc::<Guarded<4, 5, 2>>(32, 5, reallocs);
        stale_unmark_races_realloc::<Guarded<4, 1, 2>>(32, 5, reallocs);
        stale_unmark_races_realloc::<Guarded<4, 1, 1>>(512, 9, reallocs);
    }
    stale_unmark_races_realloc::<FourLevel>(32, 5, 5000);
}

/// The generation check is what refuses the stale UNMARK: short of a wrap, the narrow
/// cells pass the replay too.
#[test]
fn narrow_generation_refuses_short_of_a_wrap() {
    for reallocs in [0, 1, 3] {
        stale_unmark_races_realloc::<Narrow<1, 2>>(4, 2, reallocs);
        stale_unmark_races_realloc::<Narrow<4, 2>>(32, 5, reallocs);
    }
}
