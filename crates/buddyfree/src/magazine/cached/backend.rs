//! The allocator behind the caches, as they see it: single operations, and batches that
//! line up with the regions a continuing backend fills.

use crate::magazine::{self, Backend as _};
use crate::{BlockAlloc, Error};

/// Blocks asked for in one [`BlockAlloc::alloc_bulk`] call.
const BULK: usize = 32;

/// What the caches need of the allocator behind them: a [`BlockAlloc`] with the magazines'
/// hooks ([`magazine::Backend`]), and batches.
pub(crate) trait Backend {
    /// The allocator.
    type Alloc: magazine::Backend + ?Sized;

    /// The allocator, for single operations.
    fn shared(&self) -> &Self::Alloc;

    /// Whether a batch of `order` costs the backend less than as many single operations,
    /// so that the caches move the order in batches ([`Policy::one_at_a_time_unless`]).
    fn takes_in_bulk(&self, order: u32) -> bool;

    /// Allocates one block of `order` and returns it, then up to `more` others, each passed
    /// to `put` (fewer if the backend runs out or, where its bulk allocations continue from
    /// the last ([`magazine::Backend::alloc_bulk_continues`]), where the batch would start a region
    /// it cannot finish: [`batch_in_regions`]).
    fn alloc_batch(
        &self,
        order: u32,
        core: usize,
        more: usize,
        mut put: impl FnMut(usize),
    ) -> Result<usize, Error> {
        let alloc = self.shared();
        if more == 0 {
            return alloc.alloc(order, core);
        }
        let mut got = [0; BULK];
        let mut n = alloc.alloc_bulk(order, core, &mut got[..(more + 1).min(BULK)])?;
        // Only a batch that one call fetches whole is cut: the longer ones (orders 1 and 2,
        // in chunks) span several regions by design.
        if more < BULK && alloc.alloc_bulk_continues() {
            let keep = batch_in_regions(&got[..n], order, more + 1);
            if keep < n {
                self.give_back(&got[keep..n], order, core);
                n = keep;
            }
        }
        got[1..n].iter().for_each(|&index| put(index));
        let first = got[0];
        // In chunks of `BULK`; a short one means the backend has no more.
        let mut want = more + 1 - n;
        let mut last = n;
        while want > 0 && last == BULK {
            last = alloc
                .alloc_bulk(order, core, &mut got[..want.min(BULK)])
                .unwrap_or(0);
            got[..last].iter().for_each(|&index| put(index));
            want -= last;
        }
        Ok(first)
    }

    /// Frees `blocks` of `order`, which left every cache and which the backend has
    /// allocated, in bulk.
    fn give_back(&self, blocks: &[usize], order: u32, core: usize) {
        let mut rest = blocks;
        loop {
            // SAFETY: the backend handed out each block at `order` (to a refill, or to a caller
            // whose free the state table let through) and has it allocated; each left its cache
            // once, and `states` has it `Free` (or never recorded it, when a refill was cut),
            // so every free of it by a caller stops at the table, an order the caches keep.
            let Err((k, e)) = (unsafe { self.shared().free_bulk_owned(rest, order, core) }) else {
                return;
            };
            // A block the backend's own boot reservation holds, adopted by caches built
            // over it afterwards (reserve through the caches instead): it stays reserved.
            assert_eq!(
                e,
                Error::Reserved,
                "the backend refused block {} the per-core caches owned",
                rest[k]
            );
            rest = &rest[k + 1..];
        }
    }
}

/// How many of `got`, a refill's blocks of `order` in the order the backend gave them, to
/// keep, for batches of `batch` blocks (a power of two): all of them, unless they finish a
/// partly used region of one batch (`batch` blocks aligned to their size) and go on into the
/// next, which they leave unfinished; then only the first region's.
///
/// A backend that continues where its last allocation ended (LLFree's bulk claims from the
/// frame of the core's last allocation) would otherwise hand out every later batch astride
/// two regions once one is partly used (7 blocks of one huge frame and 1 of the next, say),
/// and the spills, which give back a batch at a time, would leave both partly free, so the
/// backend's next batches straddle again. Cut at the region's end, the next refill starts a
/// fresh region, batches line up with regions again, and spills give back whole ones. NBBS
/// places its next batch elsewhere, so cutting its batches would only add frees and slow
/// its bursts: only backends that say they continue
/// ([`magazine::Backend::alloc_bulk_continues`]) are cut.
pub(super) fn batch_in_regions(got: &[usize], order: u32, batch: usize) -> usize {
    let Some(&first) = got.first() else {
        return 0;
    };
    if !batch.is_power_of_two() {
        return got.len();
    }
    let region = |index: usize| index >> (order + batch.trailing_zeros());
    let head = got
        .iter()
        .take_while(|&&b| region(b) == region(first))
        .count();
    let rest_of_region = batch - ((first >> order) & (batch - 1));
    let tail = &got[head..];
    match tail.first() {
        Some(&next)
            if head == rest_of_region && tail.iter().all(|&b| region(b) == region(next)) =>
        {
            head
        }
        _ => got.len(),
    }
}

/// A thread-safe allocator as a backend: batches are single operations in a row.
pub(crate) struct Direct<A>(pub(crate) A);

impl<A: magazine::Backend> Backend for Direct<A> {
    type Alloc = A;

    #[inline]
    fn shared(&self) -> &A {
        &self.0
    }

    fn takes_in_bulk(&self, order: u32) -> bool {
        self.0.alloc_bulk_groups(order)
    }
}
