//! Zones: several allocators over disjoint ranges of one index space, as a kernel keeps one
//! per NUMA node, or a small DMA32 zone below 4 GiB beside the rest.
//!
//! # Structure
//!
//! ```text
//!  Zones<A, N>
//!  ├── zones: [Zone<A>; N]   ascending, disjoint: zone z's unit i is unit first_z + i
//!  │    └── Zone<A>: first, alloc: A, counters (served, fell back, refused)
//!  └── max_order             the largest of the zones' orders
//!
//!  index space: |zone 0 ....|  (no zone)  |zone 1 ..........|zone 2 ....|
//!               ^ first_0                 ^ first_1         ^ first_2
//! ```
//!
//! # Invariants
//!
//! - Checked by [`Zones::new`]: the zones are in ascending order without overlap, and each
//!   `first` is a multiple of its zone's largest block, so a block that is naturally aligned
//!   in its zone is naturally aligned in the whole space, and a block never straddles two
//!   zones.
//! - Every block belongs to exactly one zone, the one whose range holds its index: frees,
//!   `alloc_at`, `block_of` and the per-block queries are routed by index alone, after the
//!   checks every allocator makes of a block (order, range, alignment) in the whole space.
//!   Indices between zones belong to none and are [`Error::OutOfRange`].
//! - Allocations go by preference ([`Zones::alloc_from`]; as a [`BlockAlloc`], the zones in
//!   order); a refusal is the most telling of the zones' (`WouldBlock` over `OutOfMemory`
//!   over `BadOrder` from a zone too small). Range operations split at the zones' ends, each
//!   part done by its zone.
//! - The counters are statistics, never part of a protocol (relaxed atomics outside loom's
//!   model, so that [`Zone::new`] stays `const`).
//!
//! # Lock order
//!
//! `Zones` takes no lock of its own: each call reaches one zone's allocator at a time, in
//! the preference order, and holds nothing between them. Whatever locks a zone's allocator
//! takes are its own. For that reason [`BlockAlloc::with_core`] is not forwarded to every
//! zone at once (see [`Zones`]): holding a core in several zones while one of them drains
//! its per-core caches could deadlock two callers.

// Statistics only, never part of a protocol, so loom need not model them, and `Zone::new` can
// stay `const` (loom's atomics are not).
use crate::{BlockAlloc, Capabilities, Class, ConfigRule, Error};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Blocks [`Zones`] hands to one zone's `free_bulk` at once (their indices, on the stack).
const RUN: usize = 32;

/// One zone: an allocator whose unit `i` is unit `first + i` of the whole index space.
pub struct Zone<A> {
    first: usize,
    alloc: A,
    served: AtomicUsize,
    fell_back: AtomicUsize,
    refused: AtomicUsize,
}

/// What a zone did since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneStats {
    /// Its first unit in the whole index space.
    pub first: usize,
    /// Its units.
    pub units: usize,
    /// Its free units now.
    pub free: usize,
    /// Allocations it served.
    pub served: usize,
    /// Of those, allocations that preferred another zone (which had no block).
    pub fell_back: usize,
    /// Allocations it was asked for and could not serve.
    pub refused: usize,
}

impl<A> Zone<A> {
    /// The allocator `alloc`, placed at unit `first` of the whole index space.
    pub const fn new(first: usize, alloc: A) -> Self {
        Zone {
            first,
            alloc,
            served: AtomicUsize::new(0),
            fell_back: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        }
    }

    /// The zone's allocator.
    pub fn allocator(&self) -> &A {
        &self.alloc
    }

    /// A block the zone's allocator named, placed in the whole index space.
    fn placed(&self, block: Option<(usize, u32)>) -> Option<(usize, u32)> {
        block.map(|(start, order)| (self.first + start, order))
    }
}

/// `N` zones on disjoint, ascending index ranges. Allocation takes a preference order
/// ([`Zones::alloc_from`]); frees, `alloc_at` and `block_of` are routed by index, and the
/// range operations ([`BlockAlloc::reserve_range`], [`BlockAlloc::free_range`]) split at
/// the zones' ends, each part done by its zone, in blocks of that zone's orders. As a
/// [`BlockAlloc`] (so that memory maps, heaps and the registry's tests apply) it prefers the
/// zones in order; indices between zones belong to none and are out of range.
///
/// Its [`BlockAlloc::with_core`] is the default, plain calls on the core: holding that core
/// in every zone at once could deadlock two callers, since an allocation that finds a zone
/// empty drains that zone's per-core caches (waiting for each, held ones too) while the
/// caller still holds its cores of the other zones. To hold a core, hold one zone's:
/// `zones.zones()[z].allocator().with_core(core, f)`, with indices inside that zone.
///
/// ```
/// use buddyfree::nbbs::Nbbs4;
/// use buddyfree::zones::{Zone, Zones};
/// use buddyfree::{BlockAlloc, Config};
///
/// // Node 0: frames 0..4096 (its first 1024 also the DMA zone), node 1: frames 8192..12288.
/// let zones = Zones::new([
///     Zone::new(0, Nbbs4::new(Config::new(1024, 10))?),
///     Zone::new(1024, Nbbs4::new(Config::new(3072, 10))?),
///     Zone::new(8192, Nbbs4::new(Config::new(4096, 10))?),
/// ])?;
/// let on_node1 = zones.alloc_from(&[2, 1, 0], 3, 0)?;
/// assert!((8192..12288).contains(&on_node1));
/// zones.free(on_node1, 3, 0)?; // routed by index
/// assert_eq!(zones.stats()[2].served, 1);
/// # Ok::<(), buddyfree::Error>(())
/// ```
pub struct Zones<A, const N: usize> {
    zones: [Zone<A>; N],
    max_order: u32,
}

impl<A: BlockAlloc, const N: usize> Zones<A, N> {
    /// The zones, which must be in ascending order of `first` without overlapping, each
    /// `first` a multiple of its zone's largest block, `2^max_order` units, so that the
    /// zone's blocks are naturally aligned in the whole space too ([`ConfigRule::ZoneLayout`]
    /// otherwise, or for no zone at all). A zone whose memory starts elsewhere starts at the
    /// aligned unit below, where no other zone reaches, and reserves the units before its
    /// memory ([`BlockAlloc::reserve_range`]); else it starts at the aligned unit above.
    pub fn new(zones: [Zone<A>; N]) -> Result<Self, Error> {
        // The end of the zones so far, while they are in order and aligned.
        let mut end = Some(0);
        for z in &zones {
            let aligned = 1usize
                .checked_shl(z.alloc.max_order())
                .is_some_and(|block| z.first.is_multiple_of(block));
            end = end
                .filter(|&end| aligned && end <= z.first)
                .and_then(|_| z.first.checked_add(z.alloc.total_units()));
        }
        if N == 0 || end.is_none() {
            return Err(ConfigRule::ZoneLayout.into());
        }
        let max_order = zones.iter().map(|z| z.alloc.max_order()).max().unwrap_or(0);
        Ok(Zones { zones, max_order })
    }

    /// Allocates a block of `order` from the first zone in `preference` that has one;
    /// returns its index in the whole space. [`Error::OutOfMemory`] if none has; a zone
    /// number past `N` is [`Error::OutOfRange`].
    pub fn alloc_from(
        &self,
        preference: &[usize],
        order: u32,
        core: usize,
    ) -> Result<usize, Error> {
        self.alloc_with(preference, |zone| zone.alloc(order, core))
    }

    /// The first block that `take` gets from the allocators of the zones in `preference`,
    /// counted in their statistics, as an index in the whole space: [`Zones::alloc_from`]
    /// for the other ways to allocate, such as [`BlockAlloc::try_alloc`] in interrupt
    /// context or [`BlockAlloc::alloc_class`] for memory of a kind. If none serves, the
    /// most telling refusal: [`Error::WouldBlock`] where a zone would have waited (it may
    /// have had a block), else [`Error::OutOfMemory`] (a zone too small for the order says
    /// [`Error::BadOrder`] only where every zone does); a zone number past `N` is
    /// [`Error::OutOfRange`].
    ///
    /// ```
    /// use buddyfree::nbbs::Nbbs4;
    /// use buddyfree::zones::{Zone, Zones};
    /// use buddyfree::{BlockAlloc, Class, Config, Error};
    ///
    /// let zones = Zones::new([
    ///     Zone::new(0, Nbbs4::new(Config::new(1024, 10))?),
    ///     Zone::new(1024, Nbbs4::new(Config::new(1024, 10))?),
    /// ])?;
    /// // Never waits, for an interrupt handler: zone 1 first, then zone 0.
    /// let page = zones.alloc_with(&[1, 0], |zone| zone.try_alloc(0, 0))?;
    /// assert!(page >= 1024);
    /// // Memory of a kind, from zone 0 only.
    /// let huge = zones.alloc_with(&[0], |zone| zone.alloc_class(9, Class::HUGE, 0))?;
    /// assert!(huge < 1024);
    /// assert_eq!(zones.alloc_with(&[2], |zone| zone.alloc(0, 0)), Err(Error::OutOfRange));
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn alloc_with(
        &self,
        preference: &[usize],
        take: impl Fn(&A) -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        let mut last = Error::OutOfMemory;
        for (rank, &z) in preference.iter().enumerate() {
            let zone = self.zones.get(z).ok_or(Error::OutOfRange)?;
            match take(&zone.alloc) {
                Ok(index) => {
                    zone.served.fetch_add(1, Ordering::Relaxed);
                    if rank > 0 {
                        zone.fell_back.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(zone.first + index);
                }
                Err(e) => {
                    zone.refused.fetch_add(1, Ordering::Relaxed);
                    last = telling(last, e);
                }
            }
        }
        Err(last)
    }

    /// A block from the first zone that `take` gets one from, in the order of the zones
    /// (each counted as asked first): the [`BlockAlloc`] allocations.
    fn serve_in_order(
        &self,
        order: u32,
        take: impl Fn(&A) -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        let mut last = Error::OutOfMemory;
        for z in 0..N {
            match self.alloc_with(&[z], &take) {
                Ok(index) => return Ok(index),
                Err(e) => last = telling(last, e),
            }
        }
        // Every zone refused an order above all of theirs.
        let too_large = order > self.max_order;
        Err(if too_large { Error::BadOrder } else { last })
    }

    /// The zone holding unit `index` and the unit's index inside it.
    pub fn zone_of(&self, index: usize) -> Result<(usize, usize), Error> {
        // The last zone starting at or before `index`, if it reaches that far.
        let after = self.zones.partition_point(|z| z.first <= index);
        let z = after.checked_sub(1).ok_or(Error::OutOfRange)?;
        let inner = index - self.zones[z].first;
        let inside = inner < self.zones[z].alloc.total_units();
        inside.then_some((z, inner)).ok_or(Error::OutOfRange)
    }

    /// Every zone's counters.
    pub fn stats(&self) -> [ZoneStats; N] {
        core::array::from_fn(|z| {
            let zone = &self.zones[z];
            ZoneStats {
                first: zone.first,
                units: zone.alloc.total_units(),
                free: zone.alloc.free_units(),
                served: zone.served.load(Ordering::Relaxed),
                fell_back: zone.fell_back.load(Ordering::Relaxed),
                refused: zone.refused.load(Ordering::Relaxed),
            }
        })
    }

    /// The zones.
    pub fn zones(&self) -> &[Zone<A>; N] {
        &self.zones
    }

    /// The zone of the block of `order` at `index` and its index there, after the checks
    /// every allocator makes of a block ([`Error::BadOrder`], [`Error::OutOfRange`],
    /// [`Error::Misaligned`]) in the whole space, so that a bad block gets the answer one
    /// allocator of the whole space would give.
    fn locate(&self, index: usize, order: u32) -> Result<(usize, usize), Error> {
        crate::check_block(index, order, self.max_order, self.total_units())?;
        self.zone_of(index)
    }

    /// Runs `f` on the allocator of the zone of the block of `order` at `index`
    /// ([`Self::locate`]), with the index inside it.
    fn routed_block(
        &self,
        index: usize,
        order: u32,
        f: impl FnOnce(&A, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let (z, inner) = self.locate(index, order)?;
        f(&self.zones[z].alloc, inner)
    }

    /// [`BlockAlloc::free_bulk`] by zones, each run handed to its zone's allocator by
    /// `free` (the plain or the owned bulk free).
    fn free_in_runs(
        &self,
        blocks: &[usize],
        order: u32,
        free: impl Fn(&A, &[usize]) -> Result<(), (usize, Error)>,
    ) -> Result<(), (usize, Error)> {
        let mut done = 0;
        while let Some(&first) = blocks.get(done) {
            let (z, _) = self.locate(first, order).map_err(|e| (done, e))?;
            let mut inner = [0; RUN];
            let mut n = 0;
            for &index in blocks[done..].iter().take(RUN) {
                match self.locate(index, order) {
                    Ok((at, i)) if at == z => inner[n] = i,
                    _ => break,
                }
                n += 1;
            }
            free(&self.zones[z].alloc, &inner[..n]).map_err(|(k, e)| (done + k, e))?;
            done += n;
        }
        Ok(())
    }

    /// The parts of `start..start + len` in each zone, in address order, as the zone, the
    /// part's first unit in it and its length: [`Error::OutOfRange`] if the range reaches
    /// past the last zone or has a unit in no zone (between two zones).
    fn parts(
        &self,
        start: usize,
        len: usize,
    ) -> Result<impl Iterator<Item = (&Zone<A>, usize, usize)> + Clone, Error> {
        let end = crate::range::check_range(self.total_units(), start, len)?;
        let parts = self.zones.iter().filter_map(move |zone| {
            let from = start.max(zone.first);
            let to = end.min(zone.first + zone.alloc.total_units());
            (from < to).then(|| (zone, from - zone.first, to - from))
        });
        // Zones do not overlap, so the parts cover the range exactly when no unit of it
        // lies in a gap.
        if parts.clone().map(|(_, _, n)| n).sum::<usize>() != len {
            return Err(Error::OutOfRange);
        }
        Ok(parts)
    }
}

impl<A: BlockAlloc, const N: usize> BlockAlloc for Zones<A, N> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.serve_in_order(order, |a| a.alloc(order, core))
    }

    /// The zones in order, each asked with its `alloc_class`.
    fn alloc_class(&self, order: u32, class: Class, core: usize) -> Result<usize, Error> {
        self.serve_in_order(order, |a| a.alloc_class(order, class, core))
    }

    /// The first zone with a free block gives it, unless one before it would wait: then
    /// the next zone is asked, as when it has none.
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.serve_in_order(order, |a| a.try_alloc(order, core))
    }

    /// Each zone in turn fills what the zones before it left of `out`.
    fn alloc_bulk(&self, order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error> {
        let mut got = 0;
        let mut last = Error::OutOfMemory;
        for zone in &self.zones {
            if got == out.len() {
                return Ok(got);
            }
            match zone.alloc.alloc_bulk(order, core, &mut out[got..]) {
                Ok(n) => {
                    zone.served.fetch_add(n, Ordering::Relaxed);
                    out[got..got + n]
                        .iter_mut()
                        .for_each(|index| *index += zone.first);
                    got += n;
                }
                Err(e) => {
                    zone.refused.fetch_add(1, Ordering::Relaxed);
                    last = telling(last, e);
                }
            }
        }
        match got {
            0 if order > self.max_order => Err(Error::BadOrder),
            0 => Err(last),
            _ => Ok(got),
        }
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.routed_block(index, order, |a, inner| a.free(inner, order, core))
    }

    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.routed_block(index, order, |a, inner| a.try_free(inner, order, core))
    }

    /// Blocks that come one after another in `blocks` and lie in one zone go to that zone's
    /// `free_bulk` together (up to 32 at a time, their indices turned into the zone's
    /// on the stack), so that a zone frees them as it frees a batch (LLFree: one counter
    /// update per huge frame). A block that is bad in the whole space stops it there, with
    /// the answer `free` would give.
    fn free_bulk(&self, blocks: &[usize], order: u32, core: usize) -> Result<(), (usize, Error)> {
        self.free_in_runs(blocks, order, |a, run| a.free_bulk(run, order, core))
    }

    fn free_units(&self) -> usize {
        self.zones.iter().map(|z| z.alloc.free_units()).sum()
    }

    /// The end of the last zone (units between zones are counted, though never free).
    fn total_units(&self) -> usize {
        self.zones
            .last()
            .map_or(0, |z| z.first + z.alloc.total_units())
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    /// What every zone offers: a call is routed to one zone (or asks them in turn), so an
    /// operation one zone lacks answers `Unsupported` there.
    fn capabilities(&self) -> Capabilities {
        self.zones.iter().fold(Capabilities::ALL, |caps, z| {
            caps.intersection(z.alloc.capabilities())
        })
    }

    fn drain(&self) {
        self.zones.iter().for_each(|z| z.alloc.drain());
    }

    fn drain_core(&self, core: usize) {
        self.zones.iter().for_each(|z| z.alloc.drain_core(core));
    }

    /// Each zone frees its part of the range with its own `free_range` (a locked zone does
    /// its part under its lock): one walk over the whole space would look for a block to
    /// cut at the range's end, and where a gap begins there, get `OutOfRange` instead. A
    /// range with a unit in no zone is [`Error::OutOfRange`], whatever else is wrong with
    /// it, as one allocator checks its range's bounds first; and every part is found
    /// allocated before any is freed, so that a refused range changes nothing, as for one
    /// allocator.
    fn free_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
        let parts = self.parts(start, len)?;
        // The first part's zone checks its part before it frees anything; a later zone
        // could refuse only after the zones before it freed theirs, which no one can undo
        // (another thread may take those units at once). So those are checked here.
        for (zone, at, n) in parts.clone().skip(1) {
            crate::range::allocated_throughout(&crate::OnCore(&zone.alloc, core), at, at + n)?;
        }
        for (zone, at, n) in parts {
            zone.alloc.free_range(at, n, core)?;
        }
        Ok(())
    }

    /// Each zone reserves its part of the range with its own `reserve_range`, as the
    /// largest blocks that zone has: blocks of the largest zone's order would be refused by
    /// a smaller zone ([`Error::BadOrder`]) although every unit is free. A range with a unit
    /// in no zone is [`Error::OutOfRange`] before anything is taken, as for
    /// [`Zones::free_range`](BlockAlloc::free_range). Where a zone refuses its part
    /// ([`Error::Occupied`]), the parts of the zones before it are given back: a refused
    /// range changes nothing.
    fn reserve_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
        let parts = self.parts(start, len)?;
        for (k, (zone, at, n)) in parts.clone().enumerate() {
            if let Err(e) = zone.alloc.reserve_range(at, n, core) {
                // By the zone's own free_range, whatever blocks its reserve_range chose: a
                // range just reserved whole is freed without cutting a block, so this
                // cannot fail nor race with other callers, but for an allocator without
                // `block_of` (none in this crate has `alloc_at` without it), whose
                // `free_range` answers `Unsupported`: that answer is returned, and the
                // earlier parts stay reserved.
                for (zone, at, n) in parts.take(k) {
                    zone.alloc.free_range(at, n, core)?;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.routed_block(index, order, |a, inner| a.alloc_at(inner, order, core))
    }

    /// Zone after zone from `from`'s, passing the gaps between them.
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        for zone in &self.zones {
            if zone.first + zone.alloc.total_units() <= from {
                continue;
            }
            let inner = from.saturating_sub(zone.first);
            if let Some(block) = zone.placed(zone.alloc.next_block(inner)?) {
                return Ok(Some(block));
            }
        }
        Ok(None)
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        let (z, inner) = self.zone_of(index)?;
        Ok(self.zones[z].placed(self.zones[z].alloc.block_of(inner)?))
    }

    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        let (z, inner) = self.zone_of(index)?;
        Ok(self.zones[z].placed(self.zones[z].alloc.try_block_of(inner)?))
    }
}

impl<A: crate::magazine::Backend, const N: usize> crate::magazine::Sealed for Zones<A, N> {}

/// Zones of backends are one: each hook asks the zones a block or a batch lies in.
impl<A: crate::magazine::Backend, const N: usize> crate::magazine::Backend for Zones<A, N> {
    /// As [`Zones::free_bulk`](BlockAlloc::free_bulk), each run through its zone's
    /// `free_bulk_owned`.
    ///
    /// # Safety
    /// As for [`Backend::free_bulk_owned`](crate::magazine::Backend::free_bulk_owned): a
    /// block allocated from these zones is allocated from its zone at the same order.
    unsafe fn free_bulk_owned(
        &self,
        blocks: &[usize],
        order: u32,
        core: usize,
    ) -> Result<(), (usize, Error)> {
        self.free_in_runs(blocks, order, |a, run| {
            // SAFETY: our caller's promise for `blocks`, each turned into its own zone's
            // index, which its zone handed out at `order`.
            unsafe { a.free_bulk_owned(run, order, core) }
        })
    }

    /// Whether every zone's `alloc_bulk` carries on where the core's last allocation ended:
    /// then [`Zones::alloc_bulk`](BlockAlloc::alloc_bulk), which asks the zones in order,
    /// does as well.
    fn alloc_bulk_continues(&self) -> bool {
        self.zones.iter().all(|z| z.alloc.alloc_bulk_continues())
    }

    fn alloc_bulk_groups(&self, order: u32) -> bool {
        self.zones.iter().all(|z| z.alloc.alloc_bulk_groups(order))
    }
}

/// The more telling of two refusals of one request by different zones: a zone too small for
/// the order says [`Error::BadOrder`], and out of memory says less than a zone that would
/// have waited (it may have had a block), or that cannot answer at all.
fn telling(last: Error, e: Error) -> Error {
    match e {
        Error::BadOrder => last,
        Error::OutOfMemory if last != Error::OutOfMemory => last,
        _ if last == Error::WouldBlock => last,
        _ => e,
    }
}
