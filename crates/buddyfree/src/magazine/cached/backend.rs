//! The allocator behind the caches, as they see it: batches that line up with the regions a
//! continuing backend fills.

use crate::magazine::{Backend, Magazine};
use crate::Error;

/// Blocks asked for in one [`alloc_bulk`](crate::BlockAlloc::alloc_bulk) call.
const BULK: usize = 32;

impl<A: Backend> Magazine<A> {
    /// Allocates one block of `order` from the backend and returns it, then up to `more`
    /// others, each passed to `put` (fewer if the backend runs out or, where its bulk
    /// allocations continue from the last ([`Backend::alloc_bulk_continues`]), where the
    /// batch would start a region it cannot finish: [`batch_in_regions`]).
    pub(super) fn alloc_batch(
        &self,
        order: u32,
        core: usize,
        more: usize,
        mut put: impl FnMut(usize),
    ) -> Result<usize, Error> {
        let alloc = &self.backend;
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
                self.free_owned(&got[keep..n], order, core);
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
    pub(super) fn free_owned(&self, mut blocks: &[usize], order: u32, core: usize) {
        // SAFETY: the backend handed out each block at `order` (to a refill, or to a caller
        // whose free the state table let through) and has it allocated; each left its cache
        // once, and `states` has it `Free` (or never recorded it, when a refill was cut), so
        // every free of it by a caller stops at the table, an order the caches keep.
        while let Err((k, e)) = unsafe { self.backend.free_bulk_owned(blocks, order, core) } {
            // A block the backend's own boot reservation holds, adopted by caches built
            // over it afterwards (reserve through the caches instead): it stays reserved.
            assert_eq!(
                e,
                Error::Reserved,
                "the backend refused block {} the per-core caches owned",
                blocks[k]
            );
            blocks = &blocks[k + 1..];
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
/// ([`Backend::alloc_bulk_continues`]) are cut.
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
