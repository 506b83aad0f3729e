//! The boot reservation: units taken by [`crate::BlockAlloc::reserve_range`] (firmware, the kernel
//! image, an initrd) that only [`crate::BlockAlloc::free_range`] gives back.
//!
//! A reserved block is allocated in the allocator's own tables like any other, cut wherever
//! the usable ranges' edges fell, so the tables alone cannot tell a stray free of a frame the
//! firmware holds from a good free. Each allocator that serves the boot sequence keeps a
//! [`Reserved`] beside its tables, and every free checks it first:
//!
//! ```text
//!  chunks: [AtomicU64; 16]   a bit per chunk of 2^shift units (at most 1024 chunks cover
//!                            the heap; none smaller than the largest block):
//!                            set while some reserved run touches the chunk
//!  runs:   Mutex<Runs>       the reserved runs, sorted, disjoint and not adjacent
//! ```
//!
//! A free loads the word of its chunk bit (a line only the range operations write): clear,
//! and the free goes on; set (a free next to firmware, or a bad one), and it looks the block up
//! in the runs under their lock. So the common free pays one load and a predictable branch.
//!
//! **Invariants.** Every unit of a run is allocated in the allocator's tables; a chunk's bit is
//! set if a run touches it (it may stay set after the runs leave it, which costs only a
//! lookup); the runs change only in the range operations, which, as `range.rs` says, must not
//! race with frees of the units they touch.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

/// The most separate reserved runs an allocator remembers: a memory map's holes, each a run,
/// after every usable range between them was freed. More are refused with
/// [`Error::Unsupported`], changing nothing.
pub const MAX_RESERVED_RUNS: usize = if cfg!(loom) {
    // loom's threads have small stacks, and its models reserve nothing.
    8
} else {
    128
};

/// Words of chunk bits: 1024 chunks.
const CHUNK_WORDS: usize = 16;
const CHUNKS: usize = CHUNK_WORDS * 64;

/// What the boot reservation holds (module docs).
pub(crate) struct Reserved {
    chunks: [AtomicU64; CHUNK_WORDS],
    /// Units per chunk, as a power of two: the least that covers the heap with [`CHUNKS`],
    /// and at least the largest block's.
    shift: u32,
    /// The heap's units.
    units: usize,
    runs: spin::Mutex<Runs>,
}

/// Reserved runs `start..end`, sorted, disjoint and not adjacent.
#[derive(Clone)]
struct Runs {
    len: usize,
    at: [(usize, usize); MAX_RESERVED_RUNS],
}

impl Runs {
    const EMPTY: Runs = Runs {
        len: 0,
        at: [(0, 0); MAX_RESERVED_RUNS],
    };

    fn as_slice(&self) -> &[(usize, usize)] {
        &self.at[..self.len]
    }

    /// The runs with `start..end` added (merged with those it overlaps or touches).
    fn with(&self, start: usize, end: usize) -> Result<Runs, Error> {
        let runs = self.as_slice();
        // Sorted and disjoint: the runs that end before `start`, then those that touch it,
        // then those that start after `end`.
        let before = runs.partition_point(|&(_, e)| e < start);
        let after = runs.partition_point(|&(s, _)| s <= end);
        let merged = runs[before..after]
            .iter()
            .fold((start, end), |(lo, hi), &(s, e)| (lo.min(s), hi.max(e)));
        let mut out = Runs::EMPTY;
        for &(s, e) in runs[..before].iter().chain([&merged]).chain(&runs[after..]) {
            out.push(s, e)?;
        }
        Ok(out)
    }

    /// The runs with `start..end` taken out (splitting the run around it, if any).
    fn without(&self, start: usize, end: usize) -> Result<Runs, Error> {
        let mut out = Runs::EMPTY;
        for &(s, e) in self.as_slice() {
            // What lies before `start` and what lies after `end`, either possibly empty.
            for (s, e) in [(s, e.min(start)), (s.max(end), e)] {
                if s < e {
                    out.push(s, e)?;
                }
            }
        }
        Ok(out)
    }

    fn push(&mut self, start: usize, end: usize) -> Result<(), Error> {
        *self.at.get_mut(self.len).ok_or(Error::Unsupported)? = (start, end);
        self.len += 1;
        Ok(())
    }

    /// Whether a run overlaps `start..end`.
    fn overlaps(&self, start: usize, end: usize) -> bool {
        let runs = self.as_slice();
        // The first run that ends after `start`.
        let i = runs.partition_point(|&(_, e)| e <= start);
        runs.get(i).is_some_and(|&(s, _)| s < end)
    }
}

impl Reserved {
    /// Nothing reserved, for a heap of `units` with blocks of up to `max_order`.
    pub(crate) const fn new(units: usize, max_order: u32) -> Reserved {
        // Chunks no smaller than the largest block, so that every block lies in one.
        let mut shift = max_order;
        while shift < usize::BITS - 1 && units.div_ceil(1 << shift) > CHUNKS {
            shift += 1;
        }
        Reserved {
            chunks: [const { AtomicU64::new(0) }; CHUNK_WORDS],
            shift,
            units,
            runs: spin::Mutex::new(Runs::EMPTY),
        }
    }

    /// [`Error::Reserved`] if a unit of the block `(index, order)` is reserved: for every
    /// free, before it changes anything. A request that is no block of the heap (out of
    /// range, misaligned) passes, for the allocator to refuse with its own answer. With
    /// `never_wait` (for a `try_free`), [`Error::WouldBlock`] while a range operation holds
    /// the runs.
    ///
    /// The one load of the free path is the chunk bit of `index`: a block of the heap
    /// (aligned, `order` at most the heap's largest) lies in one chunk; any other request is
    /// answered by the allocator's own checks, which refuse it before it changes anything.
    #[inline(always)]
    pub(crate) fn check_free(
        &self,
        index: usize,
        order: u32,
        never_wait: bool,
    ) -> Result<(), Error> {
        let chunk = index >> self.shift;
        if chunk < CHUNKS
            && self.chunks[chunk / 64].load(Ordering::Relaxed) & (1 << (chunk % 64)) != 0
        {
            return self.look_up(index, order, never_wait);
        }
        Ok(())
    }

    /// Frees `blocks` of `order` with `free` up to the first that holds a reserved unit,
    /// which, with the blocks after it, stays as it is: [`crate::BlockAlloc::free_bulk`] for an
    /// allocator that keeps reservations.
    pub(crate) fn free_bulk(
        &self,
        blocks: &[usize],
        order: u32,
        free: impl FnOnce(&[usize]) -> Result<(), (usize, Error)>,
    ) -> Result<(), (usize, Error)> {
        let reserved = |&b: &usize| self.check_free(b, order, false).is_err();
        let Some(i) = blocks.iter().position(reserved) else {
            return free(blocks);
        };
        free(&blocks[..i])?;
        Err((i, Error::Reserved))
    }

    #[cold]
    #[inline(never)]
    fn look_up(&self, index: usize, order: u32, never_wait: bool) -> Result<(), Error> {
        let end = index.saturating_add(1usize.checked_shl(order).unwrap_or(usize::MAX));
        if end > self.units || !index.is_multiple_of(end - index) {
            // Not a block: the allocator's own checks answer.
            return Ok(());
        }
        let runs = if never_wait {
            self.runs.try_lock().ok_or(Error::WouldBlock)?
        } else {
            self.runs.lock()
        };
        if runs.overlaps(index, end) {
            Err(Error::Reserved)
        } else {
            Ok(())
        }
    }

    /// Runs `take` (which allocates every unit of `start..end`) and records the range as
    /// reserved if it succeeds; where the runs would be too many, refuses first.
    pub(crate) fn reserve(
        &self,
        start: usize,
        end: usize,
        take: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        if start == end {
            return take();
        }
        // Not held while `take` runs: a `take` that fails gives back what it took, and those
        // frees may look at the runs.
        self.runs.lock().with(start, end)?;
        take()?;
        let mut runs = self.runs.lock();
        // Only a racing reservation elsewhere can make this fail (the units stay allocated).
        *runs = runs.with(start, end)?;
        self.mark(start, end);
        Ok(())
    }

    /// Runs `give` (which frees every unit of `start..end`, cutting the blocks across its
    /// ends, whose outer parts stay allocated) with every run within `cut_start..cut_end`
    /// (the blocks across the ends) lifted, so that its frees pass; then the runs are the old
    /// ones less `start..end`, or the old ones if `give` failed.
    pub(crate) fn release(
        &self,
        start: usize,
        end: usize,
        cut_start: usize,
        cut_end: usize,
        give: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut runs = self.runs.lock();
        if !runs.overlaps(cut_start, cut_end) {
            // Let go first: the frees may look at the runs (a chunk they share with a run).
            drop(runs);
            return give();
        }
        let old = runs.clone();
        let after = old.without(start, end)?;
        *runs = old.without(cut_start, cut_end)?;
        // The frees below take the lock only where a chunk bit is set; the bits stay set
        // while they run, so they would wait for this lock: let it go meanwhile (range
        // operations do not race frees of their units).
        drop(runs);
        let given = give();
        let mut runs = self.runs.lock();
        *runs = if given.is_ok() { after } else { old };
        self.remark(&runs);
        given
    }

    /// Sets the chunk bits of `start..end`.
    fn mark(&self, start: usize, end: usize) {
        for c in start >> self.shift..=(end - 1) >> self.shift {
            self.chunks[c / 64].fetch_or(1 << (c % 64), Ordering::Relaxed);
        }
    }

    /// Sets the chunk bits to those of `runs` exactly.
    fn remark(&self, runs: &Runs) {
        for word in &self.chunks {
            word.store(0, Ordering::Relaxed);
        }
        for &(s, e) in runs.as_slice() {
            self.mark(s, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_split_and_answer_overlaps() {
        let r = Runs::EMPTY.with(10, 20).unwrap().with(30, 40).unwrap();
        assert_eq!(r.as_slice(), [(10, 20), (30, 40)]);
        assert_eq!(r.with(20, 30).unwrap().as_slice(), [(10, 40)]);
        assert_eq!(
            r.with(0, 5).unwrap().as_slice(),
            [(0, 5), (10, 20), (30, 40)]
        );
        assert_eq!(
            r.without(12, 15).unwrap().as_slice(),
            [(10, 12), (15, 20), (30, 40)]
        );
        assert_eq!(r.without(0, 35).unwrap().as_slice(), [(35, 40)]);
        for (s, e, hit) in [
            (0, 10, false),
            (0, 11, true),
            (20, 30, false),
            (39, 50, true),
        ] {
            assert_eq!(r.overlaps(s, e), hit, "{s}..{e}");
        }
        let mut full = Runs::EMPTY;
        for i in 0..MAX_RESERVED_RUNS {
            full = full.with(3 * i, 3 * i + 1).unwrap();
        }
        assert_eq!(full.with(1000, 1001).err(), Some(Error::Unsupported));
        assert_eq!(full.without(0, 1).unwrap().len, MAX_RESERVED_RUNS - 1);
    }

    #[test]
    fn a_free_is_refused_only_where_a_run_lies() {
        let r = Reserved::new(1 << 20, 9);
        r.reserve(0, 1 << 20, || Ok(())).unwrap();
        r.release(0x2c1, 0x400, 0x200, 0x400, || Ok(())).unwrap();
        assert_eq!(r.check_free(0x2c0, 0, false), Err(Error::Reserved));
        assert_eq!(r.check_free(0x200, 7, false), Err(Error::Reserved));
        assert_eq!(r.check_free(0x2c1, 0, false), Ok(()));
        assert_eq!(r.check_free(0x300, 8, false), Ok(()));
        assert_eq!(r.check_free(0x400, 0, false), Err(Error::Reserved));
        assert_eq!(r.check_free(0, 9, false), Err(Error::Reserved));
        // A release of a range with no run, next to one (a chunk they share): its frees may
        // look the runs up, which must not wait for the release itself.
        let looked = r.release(0x2c1, 0x2d1, 0x2c1, 0x2d1, || r.check_free(0x2c1, 0, false));
        assert_eq!(looked, Ok(()));
        // A failed release changes nothing.
        let failed = r.release(0x400, 0x800, 0x400, 0x800, || Err(Error::NotAllocated));
        assert_eq!(failed, Err(Error::NotAllocated));
        assert_eq!(r.check_free(0x500, 0, false), Err(Error::Reserved));
    }
}
