//! What a [`Magazine`] needs of the allocator behind it beyond [`BlockAlloc`]: the sealed
//! [`Backend`] trait, and [`Plain`] for any other allocator; and the allocator behind the
//! caches, as they see it: batches that line up with the regions a continuing backend fills.

use super::Magazine;
use crate::{BlockAlloc, Capabilities, Class, Error, HeldCore};

/// Keeps [`Backend`] to this crate's allocators: public, for the bound, but in a private
/// module, so that no other crate can name it.
pub trait Sealed {}

/// An allocator a [`Magazine`](super::Magazine) can stand in front of: a [`BlockAlloc`] with
/// the hooks that let the magazines refill and spill in batches that suit it.
///
/// The hooks are the magazines' business, not part of the allocation interface, so the
/// trait is sealed: this crate's allocators implement it ([`LLFree`](crate::llfree::LLFree)
/// and its persistent zone, [`Nbbs`](crate::Nbbs), [`Nbbs4`](crate::Nbbs4),
/// [`Locked`](crate::Locked), [`Zones`](crate::zones::Zones) of backends, a
/// [`Box`](alloc::boxed::Box) of one), and any other `BlockAlloc` goes behind magazines
/// wrapped in [`Plain`], which takes the defaults below.
///
/// ```
/// use buddyfree::magazine::{Magazine, Plain};
/// use buddyfree::{BlockAlloc, Config, Nbbs4};
///
/// // Nbbs4 is a backend, with its hooks; an allocator of another crate goes in `Plain`,
/// // as this one does here, and its magazines use the defaults.
/// let config = Config::new(1 << 12, 9).with_cores(2);
/// let fast = Magazine::new(config, Nbbs4::new(config)?)?;
/// let plain = Magazine::new(config, Plain(Nbbs4::new(config)?))?;
/// for magazines in [&fast as &dyn BlockAlloc, &plain] {
///     let page = magazines.alloc(0, 0)?;
///     magazines.free(page, 0, 0)?;
///     assert_eq!(magazines.free_units(), 1 << 12);
/// }
/// # Ok::<(), buddyfree::Error>(())
/// ```
///
/// Another crate's allocator cannot implement it:
///
/// ```compile_fail
/// use buddyfree::{BlockAlloc, Error};
///
/// struct Mine;
/// impl BlockAlloc for Mine {
///     fn alloc(&self, _: u32, _: usize) -> Result<usize, Error> { Err(Error::OutOfMemory) }
///     fn free(&self, _: usize, _: u32, _: usize) -> Result<(), Error> { Err(Error::NotAllocated) }
///     fn free_units(&self) -> usize { 0 }
///     fn total_units(&self) -> usize { 0 }
///     fn max_order(&self) -> u32 { 0 }
/// }
/// impl buddyfree::magazine::Backend for Mine {} // the sealed supertrait is missing
/// ```
pub trait Backend: BlockAlloc + Sealed {
    /// [`BlockAlloc::free_bulk`] for a caller that owns `blocks` outright, so that the
    /// allocator may skip the checks that make a bad or racing free an error: the magazines
    /// giving back blocks they got from `self`. The default is `free_bulk`, checks and all;
    /// LLFree clears blocks of orders 6..=8 with plain stores instead of a compare-and-swap
    /// each.
    ///
    /// # Safety
    ///
    /// Every block of `blocks` is allocated from `self` at `order` (a block it handed out,
    /// not freed since), is named once, and nothing frees it, or a block that overlaps it,
    /// while this runs. An allocator that skips its checks may otherwise hand out units twice.
    unsafe fn free_bulk_owned(
        &self,
        blocks: &[usize],
        order: u32,
        core: usize,
    ) -> Result<(), (usize, Error)> {
        self.free_bulk(blocks, order, core)
    }

    /// Whether [`BlockAlloc::alloc_bulk`] carries on where `core`'s last allocation ended
    /// (LLFree: in the huge frame of the core's last allocation, then the next), so that a
    /// batch which finishes a partly used frame goes on into the next one. The magazines end
    /// such a batch at the frame's end and give the rest back at once, which keeps their
    /// batches, and so their spills, whole frames. `false` (the default) where batches are
    /// placed otherwise: there, cutting them only costs frees.
    fn alloc_bulk_continues(&self) -> bool {
        false
    }

    /// Whether [`BlockAlloc::alloc_bulk`] and [`BlockAlloc::free_bulk`] take several blocks
    /// of `order` for less work than as many single calls (LLFree: the free blocks of a
    /// bit-field word in one compare-and-swap; NBBS-4: the blocks under one node of a
    /// cell). The magazines move an order one block at a time where it is `false` (the
    /// default): a batch would cost as many calls, and a burst of single blocks can pass the
    /// magazines by.
    fn alloc_bulk_groups(&self, order: u32) -> bool {
        let _ = order;
        false
    }
}

/// Any [`BlockAlloc`] as a magazine's [`Backend`], with the hooks' defaults: bulk frees
/// with every check, batches cut nowhere, every order moved one block at a time. For
/// allocators of other crates (this crate's implement `Backend` themselves).
#[derive(Debug, Default)]
pub struct Plain<A>(pub A);

impl<A: BlockAlloc> Sealed for Plain<A> {}
impl<A: BlockAlloc> Backend for Plain<A> {}

impl<A: BlockAlloc> BlockAlloc for Plain<A> {
    block_alloc_via_deref!();
}

/// What `Plain` holds, for the forwarding of [`BlockAlloc`] (`**self`).
impl<A> core::ops::Deref for Plain<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.0
    }
}

#[cfg(feature = "alloc")]
impl<A: Backend + ?Sized> Sealed for alloc::boxed::Box<A> {}
#[cfg(feature = "alloc")]
impl<A: Backend + ?Sized> Backend for alloc::boxed::Box<A> {
    unsafe fn free_bulk_owned(
        &self,
        blocks: &[usize],
        order: u32,
        core: usize,
    ) -> Result<(), (usize, Error)> {
        // SAFETY: the caller's promise, for the same allocator.
        unsafe { (**self).free_bulk_owned(blocks, order, core) }
    }
    fn alloc_bulk_continues(&self) -> bool {
        (**self).alloc_bulk_continues()
    }
    fn alloc_bulk_groups(&self, order: u32) -> bool {
        (**self).alloc_bulk_groups(order)
    }
}

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
    let in_one_region = |&next| tail.iter().all(|&b| region(b) == region(next));
    match tail.first() {
        Some(next) if head == rest_of_region && in_one_region(next) => head,
        _ => got.len(),
    }
}
