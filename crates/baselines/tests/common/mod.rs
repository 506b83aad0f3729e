//! The test battery every allocator runs: a differential check against the reference
//! [`Model`], and a multi-thread stress test with an ownership map that fails on any overlap
//! or lost block.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use buddyfree::magazine::Backend;
use buddyfree::{hold_core, BlockAlloc, Config, Error, SeqBlockAlloc};
use buddyfree_baselines::model::Model;
use proptest::prelude::*;

/// One step of a random operation sequence.
#[derive(Clone, Debug)]
pub enum Op {
    /// Allocate a block of this order.
    Alloc(u32),
    /// Free the live block picked by this number (modulo the number of live blocks).
    Free(usize),
    /// Free a block that was freed already (picked among the recently freed).
    DoubleFree(usize),
    /// Free the live block picked by this number with the wrong order.
    WrongOrder(usize, u32),
    /// Free an arbitrary (index, order), usually not a live block.
    Arbitrary(usize, u32),
    /// `alloc_bulk` of up to this many blocks (0..BULK_MAX) of this order.
    AllocBulk(u32, usize),
    /// `free_bulk` of up to this many live blocks of one order (the order of the block
    /// picked by the first number, starting there), with the first of them named again at
    /// the end if the flag is set (a double free inside the batch).
    FreeBulk(usize, usize, bool),
    /// `drain_core` of the core hint this number names (one beyond the three cores the
    /// runs use, too): it changes no answer.
    DrainCore(usize),
}

/// The most blocks a bulk operation of the battery names, plus one.
pub const BULK_MAX: usize = 9;

/// Random operation sequences over orders `0..=max_order` (some above, to test `BadOrder`)
/// and indices up to `units` (some past it).
pub fn ops(units: usize, max_order: u32, len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (0..=max_order).prop_map(Op::Alloc),
        1 => (max_order + 1..max_order + 3).prop_map(Op::Alloc),
        6 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::DoubleFree),
        1 => (any::<usize>(), 0..=max_order + 1).prop_map(|(p, o)| Op::WrongOrder(p, o)),
        1 => (0..units + 4, 0..=max_order + 1).prop_map(|(i, o)| Op::Arbitrary(i, o)),
        1 => (0..=max_order, 0..BULK_MAX).prop_map(|(o, n)| Op::AllocBulk(o, n)),
        1 => (any::<usize>(), 1..BULK_MAX, any::<bool>())
            .prop_map(|(p, n, twice)| Op::FreeBulk(p, n, twice)),
        1 => (0..4usize).prop_map(Op::DrainCore),
    ];
    proptest::collection::vec(op, 1..len)
}

/// Configurations the differential tests run: powers of two and ragged tails.
pub const CONFIGS: &[(usize, u32)] = &[(64, 4), (100, 3), (13, 2), (37, 5)];

/// The strategy is built once for the widest configuration; orders above a configuration's
/// `max_order + 2` would only repeat the `BadOrder` case, so fold them back into range.
pub fn clamp(ops: &[Op], max_order: u32) -> Vec<Op> {
    let fold = |o: u32| o % (max_order + 3);
    ops.iter()
        .map(|op| match *op {
            Op::Alloc(o) => Op::Alloc(fold(o)),
            Op::WrongOrder(p, o) => Op::WrongOrder(p, fold(o)),
            Op::Arbitrary(i, o) => Op::Arbitrary(i, fold(o)),
            Op::AllocBulk(o, n) => Op::AllocBulk(fold(o), n),
            ref other => other.clone(),
        })
        .collect()
}

/// Runs `ops` on `alloc` (freshly built over `config`) and on the model side by side, and
/// checks after every step: the same success or error, returned blocks aligned, in range and
/// not overlapping, out-of-memory only when the model has no free block of that order either,
/// and the same free-unit count. The `core` hint rotates over three values, so per-core
/// state (hints, caches, reservations) is exercised, including frees on another core than
/// the allocation's. Ends by freeing everything and checking the allocator is whole again.
pub fn check_against_model(alloc: &dyn BlockAlloc, config: Config, ops: &[Op]) {
    let mut run = ModelRun::new(config);
    run.run(alloc, ops);
    run.finish(alloc);
}

/// The model side of a differential run, which may go on over another allocator holding the
/// same blocks (one wrapped around the first, say).
pub struct ModelRun {
    model: Model,
    /// Blocks freed so far, for the double frees.
    freed: Vec<(usize, u32)>,
}

impl ModelRun {
    pub fn new(config: Config) -> Self {
        ModelRun {
            model: Model::new(config).unwrap(),
            freed: Vec::new(),
        }
    }

    /// Runs `ops` on `alloc` and the model, checking as [`check_against_model`] does.
    pub fn run(&mut self, alloc: &dyn BlockAlloc, ops: &[Op]) {
        let ModelRun { model, freed } = self;
        assert_eq!(alloc.total_units(), model.total_units());
        assert_eq!(alloc.max_order(), model.max_order());
        for (step, op) in ops.iter().enumerate() {
            let live: Vec<(usize, u32)> = model.live().collect();
            let pick = |p: usize| live.get(p % live.len().max(1)).copied();
            match *op {
                Op::Alloc(order) => {
                    let got = alloc.alloc(order, core_of(step));
                    match got {
                        Ok(index) => model.take(index, order).unwrap_or_else(|e| {
                            panic!("step {step}: alloc({order}) = {index}: {e}")
                        }),
                        Err(Error::OutOfMemory) => assert!(
                            !model.can_alloc(order),
                            "step {step}: alloc({order}) failed, the model has a free block"
                        ),
                        Err(e) => {
                            let want = model.clone().alloc(order).unwrap_err();
                            assert_eq!(e, want, "step {step}: alloc({order})");
                        }
                    }
                }
                Op::Free(p) => {
                    if let Some((index, order)) = pick(p) {
                        free_both(alloc, model, index, order, step);
                        freed.push((index, order));
                    }
                }
                Op::DoubleFree(p) => {
                    if !freed.is_empty() {
                        let (index, order) = freed[p % freed.len()];
                        free_both(alloc, model, index, order, step);
                    }
                }
                Op::WrongOrder(p, order) => {
                    if let Some((index, _)) = pick(p) {
                        free_both(alloc, model, index, order, step);
                    }
                }
                Op::Arbitrary(index, order) => free_both(alloc, model, index, order, step),
                Op::AllocBulk(order, n) => alloc_bulk_both(alloc, model, order, n, step),
                Op::DrainCore(core) => alloc.drain_core(core),
                Op::FreeBulk(p, n, twice) => {
                    if let Some((_, order)) = pick(p) {
                        let start = p % live.len();
                        let mut blocks: Vec<usize> = live[start..]
                            .iter()
                            .filter(|&&(_, o)| o == order)
                            .take(n)
                            .map(|&(index, _)| index)
                            .collect();
                        if twice {
                            blocks.push(blocks[0]);
                        }
                        let want = blocks
                            .iter()
                            .enumerate()
                            .find_map(|(k, &index)| model.free(index, order).err().map(|e| (k, e)));
                        let got = alloc.free_bulk(&blocks, order, core_of(step.wrapping_add(1)));
                        assert_eq!(
                            got,
                            want.map_or(Ok(()), Err),
                            "step {step}: free_bulk({blocks:?}, {order})"
                        );
                        freed.extend(blocks.iter().map(|&index| (index, order)));
                    }
                }
            }
            assert_eq!(
                alloc.free_units(),
                model.free_units(),
                "step {step}: free units after {op:?}"
            );
        }
    }

    /// `alloc.next_block` from every unit (and past the last) gives the model's answer: the
    /// live block that holds the unit, or else the first one after it. Nothing to check
    /// where `alloc` cannot name its blocks.
    pub fn check_next_block(&self, alloc: &dyn BlockAlloc, name: &str) {
        if alloc.block_of(0) == Err(Error::Unsupported) {
            assert_eq!(alloc.next_block(0), Err(Error::Unsupported), "{name}");
            return;
        }
        let live: Vec<(usize, u32)> = self.model.live().collect();
        let mut ahead = live.iter().copied().peekable();
        for from in 0..alloc.total_units() + 2 {
            while ahead
                .next_if(|&(start, order)| start + (1 << order) <= from)
                .is_some()
            {}
            let expected = ahead.peek().copied();
            assert_eq!(
                alloc.next_block(from),
                Ok(expected),
                "{name}: next_block({from})"
            );
        }
    }

    /// `alloc.block_of` and `alloc.try_block_of` (with no lock held, where every allocator
    /// that names its blocks answers it) of every unit give the model's live block that
    /// holds the unit.
    pub fn check_block_of(&self, alloc: &dyn BlockAlloc, name: &str) {
        if alloc.block_of(0) == Err(Error::Unsupported) {
            return;
        }
        let mut live = self.model.live().peekable();
        for unit in 0..alloc.total_units() {
            while live
                .next_if(|&(start, order)| start + (1 << order) <= unit)
                .is_some()
            {}
            let holder = live.peek().copied().filter(|&(start, _)| start <= unit);
            assert_eq!(alloc.block_of(unit), Ok(holder), "{name}: block_of({unit})");
            assert_eq!(
                alloc.try_block_of(unit),
                Ok(holder),
                "{name}: try_block_of({unit})"
            );
        }
    }

    /// Frees every live block through `alloc` and checks that it is whole again.
    pub fn finish(mut self, alloc: &dyn BlockAlloc) {
        let live: Vec<(usize, u32)> = self.model.live().collect();
        for (index, order) in live {
            free_both(alloc, &mut self.model, index, order, usize::MAX);
        }
        assert_whole(alloc);
    }
}

/// `alloc_bulk` of up to `n` blocks of `order` against the model: the blocks it hands out are
/// free in the model, and it stops short only where the model has no free block of `order`
/// left; its errors are `alloc`'s.
fn alloc_bulk_both(alloc: &dyn BlockAlloc, model: &mut Model, order: u32, n: usize, step: usize) {
    let mut out = [0; BULK_MAX];
    match alloc.alloc_bulk(order, core_of(step), &mut out[..n]) {
        Ok(got) => {
            assert!(got <= n && (got > 0 || n == 0), "step {step}: {got} of {n}");
            for &index in &out[..got] {
                model.take(index, order).unwrap_or_else(|e| {
                    panic!("step {step}: alloc_bulk({order}) gave {index}: {e}")
                });
            }
            assert!(
                got == n || !model.can_alloc(order),
                "step {step}: alloc_bulk({order}) gave {got} of {n}, the model has a free block"
            );
        }
        Err(Error::OutOfMemory) => assert!(
            n > 0 && !model.can_alloc(order),
            "step {step}: alloc_bulk({order}) failed, the model has a free block"
        ),
        Err(e) => {
            let want = model.clone().alloc(order).unwrap_err();
            assert_eq!(e, want, "step {step}: alloc_bulk({order})");
        }
    }
}

/// The core hint of step `step` of a differential run.
fn core_of(step: usize) -> usize {
    step % 3
}

fn free_both(alloc: &dyn BlockAlloc, model: &mut Model, index: usize, order: u32, step: usize) {
    let want = model.free(index, order);
    let got = alloc.free(index, order, core_of(step.wrapping_add(1)));
    assert_eq!(got, want, "step {step}: free({index}, {order})");
}

/// Checks that an allocator with nothing allocated is whole: every unit free, every order
/// allocatable, and the whole region coverable by blocks of the largest order (no unit lost).
/// Leaves it empty again.
pub fn assert_whole(alloc: &dyn BlockAlloc) {
    alloc.drain();
    let total = alloc.total_units();
    assert_eq!(
        alloc.free_units(),
        total,
        "units still allocated after freeing everything"
    );
    for order in 0..=alloc.max_order() {
        let index = alloc
            .alloc(order, 0)
            .unwrap_or_else(|e| panic!("order {order} not allocatable on an empty allocator: {e}"));
        alloc.free(index, order, 0).unwrap();
    }
    let top = alloc.max_order();
    let mut blocks = Vec::new();
    while let Ok(index) = alloc.alloc(top, 0) {
        blocks.push(index);
    }
    assert_eq!(
        blocks.len(),
        total >> top,
        "blocks of order {top} on an empty allocator"
    );
    for index in blocks {
        alloc.free(index, top, 0).unwrap();
    }
    alloc.drain();
    assert_eq!(alloc.free_units(), total);
}

/// An ownership map: one word per unit holding the stamp of the block that owns it.
/// Claiming a unit that is owned, or releasing one owned by another block, panics.
pub struct Owners(Vec<AtomicU64>);

impl Owners {
    pub fn new(units: usize) -> Self {
        Owners((0..units).map(|_| AtomicU64::new(0)).collect())
    }

    pub fn claim(&self, index: usize, order: u32, stamp: u64) {
        for unit in index..index + (1 << order) {
            if let Err(owner) =
                self.0[unit].compare_exchange(0, stamp, Ordering::AcqRel, Ordering::Acquire)
            {
                panic!("overlap: unit {unit} of block ({index}, order {order}) is owned by stamp {owner:#x}");
            }
        }
    }

    /// Whether a block owns `unit` now.
    pub fn owned(&self, unit: usize) -> bool {
        self.0[unit].load(Ordering::Acquire) != 0
    }

    pub fn release(&self, index: usize, order: u32, stamp: u64) {
        for unit in index..index + (1 << order) {
            let owner = self.0[unit].swap(0, Ordering::AcqRel);
            assert_eq!(
                owner, stamp,
                "unit {unit} of block ({index}, order {order}) changed owner"
            );
        }
    }
}

/// A small fast generator (xorshift64*), so threads need no shared random state.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The stamp the stress tests claim a block with in the ownership map.
pub fn stamp(index: usize, order: u32) -> u64 {
    (index as u64) << 8 | order as u64 | 1 << 63
}

/// Slots through which threads hand blocks to each other, so that blocks are freed by a
/// thread (and core) other than the one that allocated them.
pub struct Mailbox(Vec<AtomicUsize>);

impl Mailbox {
    const EMPTY: usize = usize::MAX;

    pub fn new(slots: usize) -> Self {
        Mailbox((0..slots).map(|_| AtomicUsize::new(Self::EMPTY)).collect())
    }

    /// Posts the block `(index, order)` to a random slot; whether that slot was empty (if
    /// not, the block stays the caller's).
    pub fn post(&self, rng: &mut Rng, index: usize, order: u32) -> bool {
        self.0[rng.below(self.0.len())]
            .compare_exchange(
                Self::EMPTY,
                index << 6 | order as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Takes the block in a random slot, if there is one.
    pub fn take(&self, rng: &mut Rng) -> Option<(usize, u32)> {
        Self::unpack(self.0[rng.below(self.0.len())].swap(Self::EMPTY, Ordering::AcqRel))
    }

    /// Takes every block posted.
    pub fn take_all(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.0
            .iter()
            .filter_map(|slot| Self::unpack(slot.swap(Self::EMPTY, Ordering::AcqRel)))
    }

    fn unpack(packed: usize) -> Option<(usize, u32)> {
        (packed != Self::EMPTY).then_some((packed >> 6, (packed & 63) as u32))
    }
}

/// Releases waiting threads together. Unlike `std::sync::Barrier` it is built from atomics in
/// this (instrumented) crate, so ThreadSanitizer sees its happens-before edges even though the
/// standard library is not built with the sanitizer.
pub struct StartGate {
    waiting: AtomicUsize,
}

impl StartGate {
    pub fn new(threads: usize) -> Self {
        StartGate {
            waiting: AtomicUsize::new(threads),
        }
    }

    pub fn wait(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        while self.waiting.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
    }
}

/// Runs `body(t)` on `threads` scoped threads released together by a [`StartGate`], joining
/// each explicitly (ThreadSanitizer sees `pthread_join`, not the scope's own uninstrumented
/// wait). A panic in any thread is re-raised.
pub fn run_threads(threads: usize, body: impl Fn(usize) + Sync) {
    let gate = StartGate::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (gate, body) = (&gate, &body);
                s.spawn(move || {
                    gate.wait();
                    body(t)
                })
            })
            .collect();
        for handle in handles {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// Multi-thread stress: `threads` threads, released together, each doing `steps` random
/// operations over orders `0..=max_order` (smaller orders more often): allocate and claim
/// in the ownership map, free one of its own blocks, hand a block to a shared mailbox, or
/// free a block another thread left there (cross-thread frees). At the end everything is
/// freed and the allocator must be whole. Returns the number of successful allocations.
///
/// Double frees are not mixed in here: once freed, a block may be reallocated by another
/// thread, and then a second free is a legal free of that thread's block. See
/// [`double_free_race`].
pub fn stress(alloc: &dyn BlockAlloc, threads: usize, steps: usize, max_order: u32) -> usize {
    let owners = Owners::new(alloc.total_units());
    let allocs = stress_with(alloc, &owners, threads, steps, max_order);
    assert_whole(alloc);
    allocs
}

/// The body of [`stress`] over a caller's ownership map (which may hold blocks claimed
/// beforehand, left alone here): runs the threads and frees every block they allocated,
/// including those left in the mailbox, without checking that the allocator is whole.
/// Returns the number of successful allocations.
pub fn stress_with(
    alloc: &dyn BlockAlloc,
    owners: &Owners,
    threads: usize,
    steps: usize,
    max_order: u32,
) -> usize {
    let mailbox = Mailbox::new(threads * 4);
    let allocs = AtomicUsize::new(0);
    run_threads(threads, |t| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut mine: Vec<(usize, u32)> = Vec::new();
        let mut ok = 0;
        for _ in 0..steps {
            match rng.below(10) {
                0..=4 => {
                    let order = (rng.below(max_order as usize + 1) as u32)
                        .min(rng.below(max_order as usize + 1) as u32);
                    if let Ok(index) = alloc.alloc(order, t) {
                        owners.claim(index, order, stamp(index, order));
                        mine.push((index, order));
                        ok += 1;
                    }
                }
                5..=7 if !mine.is_empty() => {
                    let (index, order) = mine.swap_remove(rng.below(mine.len()));
                    owners.release(index, order, stamp(index, order));
                    alloc.free(index, order, t).unwrap();
                }
                8 if !mine.is_empty() => {
                    let (index, order) = mine[mine.len() - 1];
                    if mailbox.post(&mut rng, index, order) {
                        mine.pop();
                    }
                }
                _ => {
                    if let Some((index, order)) = mailbox.take(&mut rng) {
                        owners.release(index, order, stamp(index, order));
                        alloc.free(index, order, t).unwrap();
                    }
                }
            }
        }
        for (index, order) in mine {
            owners.release(index, order, stamp(index, order));
            alloc.free(index, order, t).unwrap();
        }
        allocs.fetch_add(ok, Ordering::Relaxed);
    });
    for (index, order) in mailbox.take_all() {
        owners.release(index, order, stamp(index, order));
        alloc.free(index, order, 0).unwrap();
    }
    allocs.into_inner()
}

/// Threads mixing `alloc_bulk` and `free_bulk` with single operations of
/// orders up to `max_order` (mostly at most 3, one step in four any), freeing in bulk both
/// their own blocks and blocks other threads handed them, under the ownership map; the
/// allocator must be whole at the end. Bulk allocations come out in runs that bulk frees
/// then name together, so allocators that take or give back several blocks in one step
/// (LLFree's words and whole frames, NBBS-4's groups under one node) race those steps
/// against single operations on the same words and cells.
pub fn bulk_stress(alloc: &dyn BlockAlloc, threads: usize, steps: usize, max_order: u32) {
    bulk_stress_with(alloc, None, threads, steps, max_order);
}

/// [`bulk_stress`] over a magazine's backend, whose owned bulk frees
/// ([`Backend::free_bulk_owned`]) take the place of half the bulk frees.
pub fn bulk_stress_owned<A: Backend>(alloc: &A, threads: usize, steps: usize, max_order: u32) {
    bulk_stress_with(alloc, Some(alloc), threads, steps, max_order);
}

fn bulk_stress_with(
    alloc: &dyn BlockAlloc,
    backend: Option<&dyn Backend>,
    threads: usize,
    steps: usize,
    max_order: u32,
) {
    let owners = Owners::new(alloc.total_units());
    // Blocks left for another thread to free, in bulk.
    // A spin lock: built from atomics, so ThreadSanitizer sees its edges.
    let handoff: spin::Mutex<Vec<(usize, u32)>> = spin::Mutex::new(Vec::new());
    let free_all = |blocks: &mut Vec<(usize, u32)>, core: usize, owned: bool| {
        for order in 0..=max_order {
            let same: Vec<usize> = blocks
                .iter()
                .filter(|&&(_, o)| o == order)
                .map(|&(b, _)| b)
                .collect();
            for &b in &same {
                owners.release(b, order, stamp(b, order));
            }
            if let (true, Some(backend)) = (owned, backend) {
                // SAFETY: each block came from `alloc` at `order` and is named once; the
                // ownership map gave it to this thread alone, and it has just let it go.
                unsafe { backend.free_bulk_owned(&same, order, core) }.unwrap();
            } else {
                alloc.free_bulk(&same, order, core).unwrap();
            }
        }
        blocks.clear();
    };
    run_threads(threads, |t| {
        let mut rng = Rng::new(t as u64 + 7);
        let mut mine: Vec<(usize, u32)> = Vec::new();
        let mut out = [0; 32];
        for _ in 0..steps {
            let any = rng.below(max_order as usize + 1) as u32;
            let order = if rng.below(4) == 0 { any } else { any.min(3) };
            match rng.below(8) {
                0..=2 => {
                    let len = 1 + rng.below(32);
                    if let Ok(n) = alloc.alloc_bulk(order, t, &mut out[..len]) {
                        for &b in &out[..n] {
                            owners.claim(b, order, stamp(b, order));
                            mine.push((b, order));
                        }
                    }
                }
                3 => {
                    if let Ok(b) = alloc.alloc(order, t) {
                        owners.claim(b, order, stamp(b, order));
                        mine.push((b, order));
                    }
                }
                4 if !mine.is_empty() => {
                    let (b, order) = mine.swap_remove(rng.below(mine.len()));
                    owners.release(b, order, stamp(b, order));
                    alloc.free(b, order, t).unwrap();
                }
                5 => free_all(&mut mine, t, rng.below(2) == 0),
                6 => handoff.lock().append(&mut mine),
                _ => {
                    let mut theirs = std::mem::take(&mut *handoff.lock());
                    free_all(&mut theirs, t, rng.below(2) == 0);
                }
            }
        }
        free_all(&mut mine, t, true);
    });
    free_all(&mut handoff.lock(), 0, false);
    assert_whole(alloc);
}

/// Raced double frees against allocations of other orders over the same units. Thread 0
/// alone allocates blocks of `order`; it frees each one and then frees it again. The other
/// threads fill the allocator with blocks of the other orders (up to `max_order`, at most 3),
/// free them all and repeat, so that a block of theirs often covers the unit thread 0 has
/// just freed. As nobody else allocates `order`, every second free must fail, and the
/// ownership map catches any unit handed out twice. The allocator must be whole at the end.
pub fn double_free_against_other_orders(
    alloc: &dyn BlockAlloc,
    threads: usize,
    rounds: usize,
    order: u32,
) {
    use std::sync::atomic::AtomicBool;
    let others: Vec<u32> = (0..=alloc.max_order().min(3))
        .filter(|&o| o != order)
        .collect();
    assert!(!others.is_empty(), "needs a second order");
    let owners = Owners::new(alloc.total_units());
    let done = AtomicBool::new(false);
    let stamp_of = |index: usize, order: u32, t: usize| {
        (index as u64) << 16 | (order as u64) << 8 | t as u64 | 1 << 63
    };
    run_threads(threads, |t| {
        if t == 0 {
            // Set even if this thread panics, so that the others stop and the panic shows.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _done = Done(&done);
            for _ in 0..rounds {
                let Ok(index) = alloc.alloc(order, t) else {
                    continue;
                };
                owners.claim(index, order, stamp_of(index, order, t));
                owners.release(index, order, stamp_of(index, order, t));
                alloc.free(index, order, t).unwrap();
                match alloc.free(index, order, t) {
                    Err(Error::NotAllocated | Error::OrderMismatch) => {}
                    other => panic!("second free of ({index}, order {order}) gave {other:?}"),
                }
            }
            return;
        }
        let mut mine = Vec::new();
        let mut round = t;
        while !done.load(Ordering::Acquire) {
            let o = others[round % others.len()];
            round += 1;
            while let Ok(index) = alloc.alloc(o, t) {
                owners.claim(index, o, stamp_of(index, o, t));
                mine.push((index, o));
                if done.load(Ordering::Relaxed) {
                    break;
                }
            }
            for (index, o) in mine.drain(..) {
                owners.release(index, o, stamp_of(index, o, t));
                alloc.free(index, o, t).unwrap();
            }
        }
    });
    assert_whole(alloc);
}

/// Stress at scale: rounds of [`stress`] (ownership-checked, cross-thread frees, the
/// allocator whole after each) alternating with a [`double_free_race`] (orders cycling
/// through `0..=max_order`), until at least `ops` allocator operations were made. Every
/// successful allocation is freed exactly once, so two operations are counted for each;
/// failed allocations and rejected double frees come on top. Returns the operations counted.
pub fn stress_rounds(alloc: &dyn BlockAlloc, threads: usize, ops: usize, max_order: u32) -> usize {
    /// Steps per thread and round: long enough to fill the allocator and churn it, short
    /// enough that double-free races come often.
    const ROUND_STEPS: usize = 100_000;
    let steps = ROUND_STEPS.min(ops.div_ceil(threads)).max(1);
    let mut done = 0;
    let mut round = 0u32;
    while done < ops {
        done += 2 * stress(alloc, threads, steps, max_order);
        let order = round % (max_order + 1);
        let blocks = (alloc.total_units() >> order).min(256);
        double_free_race(alloc, threads, blocks, order);
        done += 2 * blocks;
        round += 1;
    }
    done
}

/// Raced double frees: `threads` threads all free the same `blocks` blocks of `order`, in
/// the same order, while nothing else allocates. Each block must be freed exactly once (one
/// `Ok`, the rest `NotAllocated`), and the allocator must be whole afterwards.
pub fn double_free_race(alloc: &dyn BlockAlloc, threads: usize, blocks: usize, order: u32) {
    let live: Vec<usize> = (0..blocks)
        .map_while(|_| alloc.alloc(order, 0).ok())
        .collect();
    assert_eq!(live.len(), blocks, "could not allocate the blocks to free");
    double_free_race_of(alloc, threads, &live, order);
}

/// [`double_free_race`] over the live blocks `live` of `order`, which are all `alloc` has
/// out.
pub fn double_free_race_of(alloc: &dyn BlockAlloc, threads: usize, live: &[usize], order: u32) {
    let wins: Vec<AtomicUsize> = live.iter().map(|_| AtomicUsize::new(0)).collect();
    run_threads(threads, |t| {
        for (index, won) in live.iter().zip(&wins) {
            match alloc.free(*index, order, t) {
                Ok(()) => {
                    won.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => assert_eq!(e, Error::NotAllocated, "double free of {index}"),
            }
        }
    });
    for (index, won) in live.iter().zip(&wins) {
        assert_eq!(
            won.load(Ordering::Relaxed),
            1,
            "block {index} freed {won:?} times"
        );
    }
    assert_whole(alloc);
}

/// The methods a test wrapper `Self(A)` passes on to its allocator unchanged: all but
/// `alloc`, `free` and the bulk operations, or with `sizes` only the three it must have.
macro_rules! pass_on {
    (sizes) => {
        fn free_units(&self) -> usize {
            self.0.free_units()
        }
        fn total_units(&self) -> usize {
            self.0.total_units()
        }
        fn max_order(&self) -> u32 {
            self.0.max_order()
        }
    };
    () => {
        pass_on!(sizes);
        fn drain(&self) {
            self.0.drain();
        }
        fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
            self.0.try_alloc(order, core)
        }
        fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
            self.0.alloc_at(index, order, core)
        }
        fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
            self.0.block_of(index)
        }
        fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
            self.0.next_block(from)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use pass_on;

/// An allocator whose allocations and frees each go through a core held for the one call
/// ([`BlockAlloc::with_core`]: a magazine's or `PerCpu`'s pin), everything else through the
/// shared path: the battery's checks, run over the pinned path.
pub struct PinEachCall<A>(pub A);

impl<A: BlockAlloc> BlockAlloc for PinEachCall<A> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        hold_core(&self.0, core, |held| held.alloc(order))
    }
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        hold_core(&self.0, core, |held| held.free(index, order))
    }
    pass_on!();
}

/// An allocator whose frees are its `try_free`s, retried while they would wait: the
/// battery's checks, run over the free that never waits.
pub struct TryFrees<A>(pub A);

impl<A: BlockAlloc> BlockAlloc for TryFrees<A> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.0.alloc(order, core)
    }
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        loop {
            match self.0.try_free(index, order, core) {
                Err(Error::WouldBlock) => std::hint::spin_loop(),
                other => return other,
            }
        }
    }
    pass_on!();
}

/// Whether `alloc` offers `try_free` (probed with a block of order 0, freed again).
pub fn offers_try_free(alloc: &dyn BlockAlloc) -> bool {
    let probe = alloc.alloc(0, 0).expect("a free unit to probe with");
    match alloc.try_free(probe, 0, 0) {
        Err(Error::Unsupported) => {
            alloc.free(probe, 0, 0).unwrap();
            false
        }
        answer => {
            assert_eq!(answer, Ok(()), "try_free of a live block");
            true
        }
    }
}
