//! The lower level (§3.2.1, §4.2.1): per huge frame a 512-bit bit field and a child entry,
//! plus a start table that tells bad frees apart. It holds no pointers and lives in one
//! contiguous run of cache lines, on the heap or in a file mapping (`persist.rs`; then every
//! change that recovery reads is written back through its [`WriteBack`], see `recover.rs`).
//!
//! ```text
//! line 0                     children_at / 8                 starts_at / 8
//! | bit fields: 8 words per | children: 2 per word, padded | start table: 32 words per  |
//! | huge frame (1 line)     | to a line (16 per line)      | huge frame (4 lines)       |
//! ```
//!
//! The bit fields and child entries are the allocator's state, as in the paper. The start
//! table holds, per unit, a 4-bit entry: `order + 1` where a block of order 1..=8 starts,
//! [`FREEING`] while such a block is being freed, 0 elsewhere. Order-0 blocks write nothing
//! there (they are a taken bit not covered by a larger block), so the hot order-0 path never
//! touches it, and while a frame's `multi` count is 0 order-0 frees do not even read it.
//! It costs 256 bytes per 2 MiB (0.012%).
//!
//! Bad frees are classified exactly when they do not race with an operation on the same
//! units; racing double frees of one block are serialised by one compare-and-swap (the bit
//! for order 0, the start entry for orders 1..=8, the child entry for orders 9 and 10), so
//! exactly one wins and the others see `NotAllocated`.

use super::atomic::Atom;
use super::bitfield::{block_mask, find_run};
use super::child::{Child, ChildPair};
use super::lines::{Lines, LINE_WORDS};
use super::writeback::{Volatile, WriteBack};
use super::{HugeId, HUGE_UNITS};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::Error;

#[cfg(all(feature = "persist", not(loom)))]
mod recover;

/// Bit-field words per huge frame.
pub(crate) const WORDS: usize = HUGE_UNITS / 64;
/// Start-table entries per word.
const STARTS_PER_WORD: usize = 16;
/// Start-table entry of a block of order 1..=8 that a free has claimed but not yet cleared.
const FREEING: u64 = 0xF;
/// Order-0 allocations retry their word search this often before giving the units back; the
/// child counter promises a free bit, so only heavy contention in one frame gets this far.
const ORDER0_PASSES: usize = 64;

/// Bit fields, child entries and the start table of `units` units.
pub(crate) struct Lower<W: WriteBack = Volatile> {
    lines: Lines,
    huges: usize,
    children_at: usize,
    starts_at: usize,
    /// Called after every change that recovery reads (bits, start entries, huge flags);
    /// nothing at all for volatile memory.
    write_back: W,
}

/// Where the parts of a lower level of `units` units lie, in words.
struct Layout {
    huges: usize,
    children_at: usize,
    starts_at: usize,
    lines: usize,
}

impl Layout {
    fn of(units: usize) -> Layout {
        let huges = units.div_ceil(HUGE_UNITS);
        let children_at = huges * WORDS;
        let starts_at = children_at + huges.div_ceil(2).next_multiple_of(LINE_WORDS);
        let words = starts_at + huges * WORDS * 4;
        Layout {
            huges,
            children_at,
            starts_at,
            lines: words / LINE_WORDS,
        }
    }
}

impl Lower {
    /// A lower level with every unit free. Units past `units` in the last huge frame are
    /// marked taken for good (and not counted free), so any `units` works; fails only when
    /// its memory cannot be reserved.
    pub(crate) fn try_new(units: usize) -> Result<Lower, Error> {
        let lower = Lower::on(Lines::zeroed(Layout::of(units).lines)?, units, Volatile);
        lower.format(units);
        Ok(lower)
    }

    /// [`Lower::try_new`] for the small sizes of unit tests.
    #[cfg(test)]
    pub(crate) fn new(units: usize) -> Lower {
        Lower::try_new(units).expect("a test's lower level fits in memory")
    }

    /// Bytes the lower level of `units` units takes (a whole number of cache lines).
    #[cfg(all(feature = "persist", not(loom)))]
    pub(crate) fn bytes(units: usize) -> usize {
        Layout::of(units).lines * core::mem::size_of::<super::lines::Line>()
    }
}

impl<W: WriteBack> Lower<W> {
    /// The lower level of `units` units on `lines` (of the size [`Lower::bytes`] gives),
    /// taken as it is.
    fn on(lines: Lines, units: usize, write_back: W) -> Lower<W> {
        let layout = Layout::of(units);
        debug_assert_eq!(lines.len(), layout.lines);
        Lower {
            lines,
            huges: layout.huges,
            children_at: layout.children_at,
            starts_at: layout.starts_at,
            write_back,
        }
    }

    /// The lower level of `units` units in the memory at `at`, taken as it is (`fresh`:
    /// zeroed memory, formatted here to every unit free).
    ///
    /// # Safety
    /// As for [`Lines::borrowed`], for [`Lower::bytes`]`(units)` bytes at `at`.
    #[cfg(all(feature = "persist", not(loom)))]
    pub(crate) unsafe fn in_place(
        at: core::ptr::NonNull<super::lines::Line>,
        units: usize,
        fresh: bool,
        write_back: W,
    ) -> Lower<W> {
        // SAFETY: passed on to our caller.
        let lines = unsafe { Lines::borrowed(at, Layout::of(units).lines) };
        let lower = Lower::on(lines, units, write_back);
        if fresh {
            lower.format(units);
        }
        lower
    }

    /// Sets zeroed memory to every unit free.
    fn format(&self, units: usize) {
        for h in 0..self.huges.next_multiple_of(2) {
            let real = units.saturating_sub(h * HUGE_UNITS).min(HUGE_UNITS);
            let half = h % 2;
            let word = self.pair_word(HugeId(h));
            let pair = ChildPair(word.load(Ordering::Relaxed)).set(half, Child::with_free(real));
            word.store(pair.0, Ordering::Relaxed);
            // A partial last frame: its missing units are taken for good. (A missing odd
            // frame has only its child entry, with nothing free.)
            if h < self.huges {
                for unit in real..HUGE_UNITS {
                    let word = self.bits(HugeId(h), unit / 64);
                    word.fetch_or(1 << (unit % 64), Ordering::Relaxed);
                }
            }
        }
    }

    /// Writes the word `word` finds back to persistent memory, where the zone asks for it.
    /// A closure, so that volatile memory does not even compute the address.
    #[inline(always)]
    fn persist<'a>(&'a self, word: impl FnOnce() -> &'a AtomicU64) {
        if W::ACTIVE {
            self.write_back.write_back(word());
        }
    }

    /// Huge frames (the last one may be partial).
    pub(crate) fn huges(&self) -> usize {
        self.huges
    }

    /// The child entry of huge frame `h`.
    pub(crate) fn child(&self, h: HugeId) -> Child {
        ChildPair(self.pair_word(h).get()).get(h.0 % 2)
    }

    /// Allocates a block of `order` (0..=10) in huge frame `h` (order 10: the aligned pair
    /// starting at `h`), starting the bit-field search at word `hint`. Returns its first unit.
    pub(crate) fn alloc(&self, h: HugeId, order: u32, hint: usize) -> Option<usize> {
        let index = match order {
            0..=8 => self.alloc_small(h, order, hint),
            9 => self
                .update_child(h, |c| (c == Child::FREE).then_some(Child::HUGE))
                .ok()
                .map(|_| h.first_unit()),
            _ => {
                // §4.2.1: order 10 takes two whole, aligned children in one CAS.
                let free = ChildPair::new(Child::FREE, Child::FREE).0;
                let taken = ChildPair::new(Child::PAIR, Child::PAIR).0;
                (h.0.is_multiple_of(2) && h.0 + 1 < self.huges)
                    .then(|| {
                        self.pair_word(h)
                            .try_change(|p| (p == free).then_some(taken))
                    })?
                    .ok()
                    .map(|_| h.first_unit())
            }
        };
        if order > 8 && index.is_some() {
            // The huge flags are the truth for orders 9 and 10 (§3.2.3).
            self.persist(|| self.pair_word(h));
        }
        index
    }

    /// Frees the block of `order` at `index` (already checked for range and alignment).
    pub(crate) fn free(&self, index: usize, order: u32) -> Result<(), Error> {
        let h = HugeId(index / HUGE_UNITS);
        match order {
            0..=8 => self.free_small(h, index, order),
            9 => match self.update_child(h, |c| (c == Child::HUGE).then_some(Child::FREE)) {
                Ok(_) => {
                    self.persist(|| self.pair_word(h));
                    Ok(())
                }
                Err(c) => Err(self.wrong_free(h, index, c)),
            },
            _ => {
                let free = ChildPair::new(Child::FREE, Child::FREE).0;
                let taken = ChildPair::new(Child::PAIR, Child::PAIR).0;
                match self
                    .pair_word(h)
                    .try_change(|p| (p == taken).then_some(free))
                {
                    Ok(_) => {
                        self.persist(|| self.pair_word(h));
                        Ok(())
                    }
                    Err(p) => Err(self.wrong_free(h, index, ChildPair(p).get(0))),
                }
            }
        }
    }

    /// Fig. 14a (2a) for orders 0..=8: take the units from the child counter first (this
    /// settles races for the last free units), then claim the bits, else give them back.
    fn alloc_small(&self, h: HugeId, order: u32, hint: usize) -> Option<usize> {
        let n = 1 << order;
        let multi = order > 0;
        self.update_child(h, |c| c.take(n, multi)).ok()?;
        let claimed = if order <= 6 {
            self.claim_in_word(h, order, hint)
        } else {
            self.claim_words(h, order)
        };
        let Some(index) = claimed else {
            let _ = self.update_child(h, |c| Some(c.give(n, multi)));
            return None;
        };
        // The frame's bit field is one cache line; it must be written back before the start
        // entry that names the block (recovery trusts an entry only over taken bits).
        self.persist(|| self.bits(h, 0));
        if multi {
            let _ = self.update_start(index, |_| Some(order as u64 + 1));
        } else if self.child(h).multi() > 0 && self.start(index) == FREEING {
            // A larger block starting here was freed and its free has not yet cleared the
            // entry; clear it so that our order-0 block is not mistaken for it being freed.
            // The child is read after our bit claim: if `multi` is 0 by then, that free
            // has finished (it clears the entry before it decrements `multi`).
            let _ = self.update_start(index, |s| (s == FREEING).then_some(0));
        }
        Some(index)
    }

    /// Orders 0..=6: one CAS on one word setting an aligned run of zero bits.
    fn claim_in_word(&self, h: HugeId, order: u32, hint: usize) -> Option<usize> {
        let passes = if order == 0 { ORDER0_PASSES } else { 1 };
        for _ in 0..passes {
            for i in 0..WORDS {
                let w = (hint + i) % WORDS;
                let mut bit = 0;
                let claim = |v: u64| {
                    bit = find_run(v, order)?;
                    Some(v | block_mask(order) << bit)
                };
                if self.bits(h, w).try_change(claim).is_ok() {
                    return Some(h.first_unit() + w * 64 + bit as usize);
                }
            }
        }
        None
    }

    /// Orders 7 and 8: 2 or 4 whole words, set one after the other. If a racing allocation
    /// took a unit of a word we have not set yet, every word we set is cleared again and the
    /// group counts as taken (§4.2.1); success is reported only once all words are ours.
    fn claim_words(&self, h: HugeId, order: u32) -> Option<usize> {
        let span = 1 << (order - 6);
        'group: for g in (0..WORDS).step_by(span) {
            if (g..g + span).any(|w| self.bits(h, w).get() != 0) {
                continue;
            }
            for w in g..g + span {
                if self
                    .bits(h, w)
                    .try_change(|v| (v == 0).then_some(u64::MAX))
                    .is_err()
                {
                    for set in g..w {
                        // We own these whole words: nothing else writes a word it did not
                        // find with a zero bit.
                        self.bits(h, set).store(0, Ordering::Release);
                    }
                    self.persist(|| self.bits(h, g));
                    continue 'group;
                }
            }
            return Some(h.first_unit() + g * 64);
        }
        None
    }

    /// Fig. 14b (1)–(3) for orders 0..=8, after classifying the request.
    fn free_small(&self, h: HugeId, index: usize, order: u32) -> Result<(), Error> {
        let child = self.child(h);
        if child.huge() {
            return Err(self.wrong_free(h, index, child));
        }
        match self.start_order(index, child) {
            Some(o) if o == order => {}
            Some(_) => return Err(Error::OrderMismatch),
            None => return Err(Error::NotAllocated),
        }
        let (word, shift) = self.bit_of(index);
        if order == 0 {
            // The bit itself is the claim: of racing frees exactly one clears it.
            word.try_change(|v| (v >> shift & 1 == 1).then_some(v & !(1 << shift)))
                .map_err(|_| Error::NotAllocated)?;
            self.persist(|| word);
        } else {
            // The start entry is the claim. It stays FREEING (not 0) until the bits are
            // clear, so that a losing double free never mistakes the still-taken units for
            // order-0 blocks.
            self.update_start(index, |s| (s == order as u64 + 1).then_some(FREEING))
                .map_err(|_| Error::NotAllocated)?;
            if order <= 6 {
                word.fetch_and(!(block_mask(order) << shift), Ordering::AcqRel);
            } else {
                let first = (index % HUGE_UNITS) / 64;
                for w in first..first + (1 << (order - 6)) {
                    self.bits(h, w).store(0, Ordering::Release);
                }
            }
            self.persist(|| word);
            // A new block may already have reused the entry; then it is no longer ours.
            let _ = self.update_start(index, |s| (s == FREEING).then_some(0));
        }
        let _ = self.update_child(h, |c| Some(c.give(1 << order, order > 0)));
        Ok(())
    }

    /// The error for a free whose order does not match what the frame holds: a block of
    /// another order starts at `index` (`OrderMismatch`) or none does (`NotAllocated`).
    fn wrong_free(&self, h: HugeId, index: usize, child: Child) -> Error {
        let starts = if child.huge() {
            // A whole frame starts at its first unit; the odd half of a pair starts nothing.
            index == h.first_unit() && !(child.pair() && h.0 % 2 == 1)
        } else {
            self.start_order(index, child).is_some()
        };
        if starts {
            Error::OrderMismatch
        } else {
            Error::NotAllocated
        }
    }

    /// The order (0..=8) of the live block of the bit field that starts at `index`, if any.
    fn start_order(&self, index: usize, child: Child) -> Option<u32> {
        // With no block of order >= 1 in the frame (and none being freed: a free clears its
        // entry before it decrements `multi`), the start table is all zero here.
        let start = if child.multi() == 0 {
            0
        } else {
            self.start(index)
        };
        match start {
            FREEING => None,
            0 => {
                let (word, shift) = self.bit_of(index);
                let taken = word.get() >> shift & 1 == 1;
                (taken && (child.multi() == 0 || !self.covered(index))).then_some(0)
            }
            s => Some(s as u32 - 1),
        }
    }

    /// Whether `index` lies inside a block of order >= 1 starting before it.
    fn covered(&self, index: usize) -> bool {
        (1..=8u64).any(|j| {
            let start = index & !((1 << j) - 1);
            let s = self.start(start);
            start != index && s != FREEING && s > j
        })
    }

    fn start(&self, index: usize) -> u64 {
        let (word, shift) = self.start_of(index);
        word.get() >> shift & 0xF
    }

    fn update_start(
        &self,
        index: usize,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> Result<u64, u64> {
        let (word, shift) = self.start_of(index);
        let changed =
            word.try_change(|v| f(v >> shift & 0xF).map(|s| v & !(0xF << shift) | s << shift));
        if changed.is_ok() {
            self.persist(|| word);
        }
        changed
    }

    fn update_child(
        &self,
        h: HugeId,
        mut f: impl FnMut(Child) -> Option<Child>,
    ) -> Result<Child, Child> {
        let half = h.0 % 2;
        self.pair_word(h)
            .try_change(|p| f(ChildPair(p).get(half)).map(|c| ChildPair(p).set(half, c).0))
            .map(|p| ChildPair(p).get(half))
            .map_err(|p| ChildPair(p).get(half))
    }

    fn word(&self, w: usize) -> &AtomicU64 {
        &self.lines[w / LINE_WORDS].0[w % LINE_WORDS]
    }

    fn bits(&self, h: HugeId, w: usize) -> &AtomicU64 {
        self.word(h.0 * WORDS + w)
    }

    fn bit_of(&self, index: usize) -> (&AtomicU64, u32) {
        (self.word(index / 64), (index % 64) as u32)
    }

    fn pair_word(&self, h: HugeId) -> &AtomicU64 {
        self.word(self.children_at + h.0 / 2)
    }

    fn start_of(&self, index: usize) -> (&AtomicU64, u32) {
        let word = self.word(self.starts_at + index / STARTS_PER_WORD);
        (word, (index % STARTS_PER_WORD) as u32 * 4)
    }

    /// Checks that every child counter matches its bit field (quiescent state only).
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        for h in (0..self.huges).map(HugeId) {
            let c = self.child(h);
            let taken: u32 = (0..WORDS).map(|w| self.bits(h, w).get().count_ones()).sum();
            if c.huge() {
                assert_eq!((taken, c.free()), (0, 0), "huge frame {h:?} with bits");
            } else {
                assert_eq!(c.free(), HUGE_UNITS - taken as usize, "frame {h:?}");
            }
        }
    }

    /// Sets the bit field of frame `h` to `words` (taken units as order-0 blocks) and its
    /// counter to match (test set-up).
    #[cfg(test)]
    pub(crate) fn set_frame(&self, h: HugeId, words: [u64; WORDS]) {
        let mut taken = 0;
        for (w, &v) in words.iter().enumerate() {
            self.bits(h, w).store(v, Ordering::Relaxed);
            taken += v.count_ones() as usize;
        }
        let _ = self.update_child(h, |_| Some(Child::with_free(HUGE_UNITS - taken)));
    }
}
