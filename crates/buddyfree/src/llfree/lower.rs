//! The lower level (§3.2.1, §4.2.1): per huge frame a bit field and a child entry. It holds
//! no pointers and lives in one contiguous run of cache lines, on the heap or in a file
//! mapping (`persist.rs`; then every change that recovery reads is written back through its
//! [`WriteBack`], see `recover.rs`).
//!
//! ```text
//! line 0                        huges * WORDS / 8
//! | bit fields: 16 words per    | children: 2 per word, padded |
//! | huge frame (2 lines)        | to a line (16 per line)      |
//! ```
//!
//! That is 64 KiB of bit fields and 2 KiB of children per GiB of 4 KiB units (llfree-rs, the
//! authors' implementation, keeps one bit per unit: about 41.5 KB). There is no other
//! per-unit table: the bit field gives every unit two bits, a *slot*, and the slots also
//! record where blocks start:
//!
//! | slot | meaning |
//! |------|---------|
//! | `00` | free |
//! | `01` | an order-0 block |
//! | `10` | the first unit of a block of order 1..=5, a marker slot of a multi-word start word, or padding past the last unit |
//! | `11` | any other unit of a block of order 1..=8 |
//!
//! A 64-bit word holds 32 slots (slot `p` in bits `2p + 1` and `2p`, written high bit
//! first below, slot 0 first), so orders 0..=5 lie inside one word and orders 6..=8 take 2,
//! 4 or 8 whole words:
//!
//! ```text
//! orders 1..=5, at slot p:  p: 10, p+1 ..= p+2^k-1: 11       (one word)
//! orders 6..=8, word g:     g: START(k) = 10 10 11 .. with slot 3 (k = 7) or 5 (k = 8) 10
//!                           g+1 ..= g+2^(k-5)-1: all 11      ("continuation words")
//! a multi-word free:        g: FREEING  = 11 10 11 ..        while its words are cleared
//! ```
//!
//! No in-word state has a `10` slot followed by another `10` or starts with `11`, so
//! `START(k)` and `FREEING` are never taken for in-word blocks, and they hold no `01` and no
//! `10` at an even slot followed by `11`, so no order-0 or in-word free ever matches them. An
//! all-`11` word is only ever a continuation word (padding is `10`: as `11`, the slot after
//! a block that ends at the padding would read as a larger block going on).
//!
//! A block's slots are its record of its order, so every free is exact: a free of order
//! `k <= 5` at slot `p` succeeds iff slot `p` is `10` (`01` for order 0), the next
//! `2^k - 1` slots are `11` and the slot after them, if it lies in the word, is not `11` (a
//! block of a larger order would go on with `11` there; after a block of order `k` comes a
//! free unit, another block's first unit or padding, never `11`). That classification and the
//! clearing of the slots are one compare-and-swap on one word, so no allocation can slip
//! between the two (else a raced double free could clear a unit of a new, larger block). A
//! free of order 6..=8 turns the start word from exactly `START(k)` into `FREEING` in one
//! compare-and-swap, then clears the continuation words and last the start word; an
//! allocation writes the continuation words first and publishes the start word last, so a
//! start word names only a block whose words are all set.
//!
//! Racing frees are serialised by one compare-and-swap each: the word for orders 0..=5, the
//! start word for orders 6..=8, the child entry for orders 9 and 10, the first pair word of
//! a span of whole frames for orders 11 and up (`span.rs`); exactly one wins and the others
//! see an error. Two paths write the words of orders 6..=8 with plain stores, in the
//! order above, where no other thread can write them: a bulk claim in a frame whose every
//! unit its caller holds ([`Lower::claim_group`]), and a bulk free by a caller that
//! owns its blocks and promises that no free races it ([`Lower::free_owned`], behind
//! `magazine::Backend::free_bulk_owned`). A bad free changes nothing: the compare-and-swap that
//! would change slots is the one that classified them. Its error is read from the slots
//! after the fact ([`Lower::wrong_free`]): `OrderMismatch` where a block of another order
//! starts at the unit (a `01` slot, an in-word block's `10` or a start word),
//! `NotAllocated` elsewhere.

use super::atomic::Atom;
use super::bitfield::{block_mask, find_run, free_runs, lowest_bits};
use super::child::{Child, ChildPair};
use super::writeback::{Volatile, WriteBack};
use super::{HugeId, HUGE_UNITS};
#[cfg(not(loom))]
use super::{Init, RecoverError};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::table::{Metadata, Part, Table};
use crate::Error;

#[cfg(not(loom))]
mod recover;
mod span;

pub(crate) use span::SPAN_MAX_ORDER;

/// Words in a cache line.
pub(crate) const LINE_WORDS: usize = 8;

/// One cache line of the lower level.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [AtomicU64; LINE_WORDS]);

/// The cache lines of a lower level: a heap allocation it owns (volatile LLFree without
/// caller metadata), the caller's metadata memory, or a file mapping that the persistent
/// zone owns (`persist.rs`).
pub(crate) type Lines = Table<Line>;

/// Units per bit-field word (two bits each).
pub(crate) const SLOTS: usize = 32;
/// Bit-field words per huge frame.
pub(crate) const WORDS: usize = HUGE_UNITS / SLOTS;
/// A free unit's slot.
const FREE_SLOT: u64 = 0b00;
/// The slot of an order-0 block.
const ORDER0_SLOT: u64 = 0b01;
/// The slot of the first unit of a block of order 1..=5 (and of the padding past the last
/// unit, and the marker slots of [`start_word`] and [`FREEING`]).
const START_SLOT: u64 = 0b10;
/// The low bit of every slot.
const LOW_BITS: u64 = 0x5555_5555_5555_5555;
/// The high bit of every slot (every slot `10`: padding).
const HIGH_BITS: u64 = 0xAAAA_AAAA_AAAA_AAAA;
/// The highest order claimed inside one word.
pub(crate) const WORD_ORDER: u32 = 5;
/// The largest order kept in the bit fields (2, 4 or 8 words from order 6 up); orders 9 and
/// 10 are flags of the child entries.
pub(crate) const BITS_ORDER: u32 = 8;
/// The start word of a block of order 6..=8 that a free has claimed but not yet cleared:
/// slot 1 `10`, every other slot `11`.
const FREEING: u64 = !(1 << 2);
/// Order-0 allocations retry their word search this often before giving the units back; the
/// child counter promises a free slot, so only heavy contention in one frame gets this far.
const ORDER0_PASSES: usize = 64;

/// Calls `f` with the words of a block of `order` (6..=8), 2, 4 or 8, as a constant in
/// each arm, so that the compiler can unroll the loops over a block's words: under a mix of
/// orders they then cost one branch on the order, not a loop exit that the order makes hard
/// to predict.
#[inline(always)]
fn with_span<R>(order: u32, f: impl FnOnce(usize) -> R) -> R {
    debug_assert!((6..=BITS_ORDER).contains(&order));
    match order {
        6 => f(2),
        7 => f(4),
        _ => f(8),
    }
}

// A frame's words fit the 16-bit masks of `Lower::free_groups`.
const _: () = assert!(WORDS == 16);

/// The start word of a live block of order 6..=8: slots 0 and 1 `10` (no in-word block
/// starts so), slot 3 `10` for order 7 or slot 5 `10` for order 8 (odd slots, where no
/// block of order 1..=5 can start), every other slot `11`.
const fn start_word(order: u32) -> u64 {
    let marker = !(1u64 | 1 << 2);
    match order {
        6 => marker,
        7 => marker & !(1 << 6),
        _ => marker & !(1 << 10),
    }
}

/// The order of the multi-word block whose start word is `word`, if it is one.
#[inline]
fn multi_order(word: u64) -> Option<u32> {
    (6..=8).find(|&order| word == start_word(order))
}

/// Whether a live block of exactly `order` (0..=5) starts at every slot of `word` whose low
/// bit is set in `starts` (slots at multiples of `2^order`).
#[inline(always)]
fn are_blocks(word: u64, starts: u64, order: u32) -> bool {
    // The blocks are disjoint, so the products have no carries.
    let mine = starts.wrapping_mul(block_mask(order + 1));
    if word & mine != starts.wrapping_mul(slots_of(order)) {
        return false;
    }
    // The slot after each block, where the word goes on, must not be `11`.
    let after = starts.checked_shl(2 << order).unwrap_or(0);
    order == 0 || word & word >> 1 & after == 0
}

/// The slot of unit `p` (0..32) in `word`.
#[inline]
const fn slot_in(word: u64, p: usize) -> u64 {
    word >> (2 * p) & 0b11
}

/// Whether a live block of exactly `order` (0..=5) starts at slot `p` of `word`: slot `p` is
/// `01` (order 0), or `10` followed by `2^order - 1` slots `11` and, where the word goes on,
/// a slot that is not `11` (a larger block would go on with `11`). `p` is a multiple of
/// `2^order`. Exact on every state the allocator leaves: a block of another order, a unit
/// inside a block, a free unit, a multi-word start word or continuation word all fail.
///
/// [`are_blocks`] for one start.
#[inline(always)]
fn is_block(word: u64, p: usize, order: u32) -> bool {
    are_blocks(word, 1 << (2 * p), order)
}

/// The order of the in-word block (1..=5) that starts at slot `p` of `word`, if one does.
#[cfg(any(test, not(loom)))]
fn in_word_order(word: u64, p: usize) -> Option<u32> {
    // Slot `p` `10` and slot `p + 1` `11`: the cheap part every order shares.
    if !p.is_multiple_of(2) || word >> (2 * p) & 0b1111 != 0b1110 {
        return None;
    }
    (1..=WORD_ORDER).find(|&order| p.is_multiple_of(1 << order) && is_block(word, p, order))
}

/// A test's way into the window between what a free reads and what it changes: the hook set
/// on a thread runs once, at the first [`window::pass`] of that thread.
pub(crate) mod window {
    #[cfg(all(test, feature = "std", not(loom)))]
    std::thread_local! {
        static HOOK: core::cell::RefCell<Option<std::boxed::Box<dyn FnOnce()>>> =
            const { core::cell::RefCell::new(None) };
    }

    /// Runs `hook` at this thread's next pass through the window.
    #[cfg(all(test, feature = "std", not(loom)))]
    pub(crate) fn open_once(hook: impl FnOnce() + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(std::boxed::Box::new(hook)));
    }

    #[inline(always)]
    pub(crate) fn pass() {
        #[cfg(all(test, feature = "std", not(loom)))]
        if let Some(hook) = HOOK.with(|h| h.borrow_mut().take()) {
            hook();
        }
    }
}

/// Bit fields and child entries of `units` units.
pub(crate) struct Lower<W: WriteBack = Volatile> {
    lines: Lines,
    /// Huge frames; their child entries start at word `huges * WORDS`.
    huges: usize,
    /// Called after every change that recovery reads (bits, huge flags); nothing at all for
    /// volatile memory.
    pub(super) write_back: W,
}

/// The cache lines of a lower level of `units` units (the lower level's part of a plan).
pub(crate) const fn lines_of(units: usize) -> usize {
    let huges = units.div_ceil(HUGE_UNITS);
    huges * WORDS / LINE_WORDS + huges.div_ceil(2).div_ceil(LINE_WORDS)
}

impl Lower {
    /// A lower level with every unit free, on the heap.
    #[cfg(test)]
    pub(crate) fn new(units: usize) -> Lower {
        let part = crate::table::Plan::new()
            .add(lines_of(units))
            .expect("a test's lower level");
        Lower::build(&Metadata::heap(), part, units).expect("a test's lower level")
    }

    /// A lower level with every unit free at `part` of `meta`. Units past `units` in the last
    /// huge frame are marked taken for good (and not counted free), so any `units` works.
    pub(crate) fn build(meta: &Metadata, part: Part<Line>, units: usize) -> Result<Lower, Error> {
        let lines = meta.table(part, |_| Line(core::array::from_fn(|_| AtomicU64::new(0))))?;
        let lower = Lower::on(lines, units, Volatile);
        lower.format(units, false);
        Ok(lower)
    }

    /// Bytes the lower level of `units` units takes (a whole number of cache lines).
    #[cfg(not(loom))]
    pub(crate) const fn bytes(units: usize) -> usize {
        lines_of(units) * core::mem::size_of::<Line>()
    }
}

impl<W: WriteBack> Lower<W> {
    /// The lower level of `units` units on `lines` (of the size [`Lower::bytes`] gives),
    /// taken as it is.
    fn on(lines: Lines, units: usize, write_back: W) -> Lower<W> {
        debug_assert_eq!(lines.len(), lines_of(units));
        Lower {
            lines,
            huges: units.div_ceil(HUGE_UNITS),
            write_back,
        }
    }

    /// The lower level of `units` units (blocks up to `max_order`) in the memory at `at`,
    /// taken as `init` says (`None`: as it is, counters trusted).
    ///
    /// # Safety
    /// As for [`Table::borrowed`](crate::table::Table::borrowed), for
    /// [`Lower::bytes`]`(units)` bytes at `at`, which hold atomics (any bit pattern).
    #[cfg(not(loom))]
    pub(crate) unsafe fn in_place(
        at: core::ptr::NonNull<Line>,
        (units, max_order): (usize, u32),
        init: Option<Init>,
        write_back: W,
    ) -> Result<Lower<W>, RecoverError> {
        // SAFETY: passed on to our caller.
        let lines = unsafe { Lines::borrowed(at, lines_of(units)) };
        let lower = Lower::on(lines, units, write_back);
        match init {
            Some(Init::Recover) => _ = lower.recover(units, max_order)?,
            Some(init) => lower.format(units, init == Init::Allocated),
            None => {}
        }
        Ok(lower)
    }

    /// Overwrites the whole lower level: every unit free, or (`allocated`) every unit an
    /// order-0 block.
    /// Units past `units` in the last huge frame are taken for good (and not counted free),
    /// as `10` slots that no free matches (a `10` followed by `10`), so that no free can
    /// clear them. Not `11`: the slot after a block of order 1..=4 would then read as a
    /// larger block going on. A missing odd frame has only its child entry, with nothing
    /// free.
    fn format(&self, units: usize, allocated: bool) {
        for word in self.lines.iter().flat_map(|line| &line.0) {
            word.store(0, Ordering::Relaxed);
        }
        for h in (0..self.huges.next_multiple_of(2)).map(HugeId) {
            let real = units.saturating_sub(h.first_unit()).min(HUGE_UNITS);
            let free = if allocated { 0 } else { real };
            let word = self.pair_word(h);
            let pair = ChildPair(word.load(Ordering::Relaxed)).set(h.0 % 2, Child::with_free(free));
            word.store(pair.0, Ordering::Relaxed);
            for w in (0..WORDS).filter(|_| h.0 < self.huges) {
                let padding = padding(real, w);
                let order0 = if allocated { LOW_BITS & !padding } else { 0 };
                // Zero words stay as the clearing above left them (fewer steps in loom models).
                let bits = padding & HIGH_BITS | order0;
                if bits != 0 {
                    self.bits(h, w).store(bits, Ordering::Relaxed);
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

    /// Whether a frame of `frames` is free as a whole (its child entry [`Child::FREE`]),
    /// each pair word read with a `SeqCst` load: the check after a free that the refusal
    /// memo's argument needs (`refusal.rs`), ordered after the free's writes and against
    /// the `SeqCst` writes that make a frame free.
    pub(crate) fn any_free_frame(&self, frames: core::ops::Range<usize>) -> bool {
        (frames.start / 2..frames.end.div_ceil(2)).any(|p| {
            let pair = ChildPair(self.word(self.huges * WORDS + p).load(Ordering::SeqCst));
            (0..2).any(|half| frames.contains(&(2 * p + half)) && pair.get(half) == Child::FREE)
        })
    }

    /// Allocates a block of `order` in huge frame `h` (orders 10 and up: the aligned run of
    /// frames starting at `h`), starting the bit-field search at word `hint`. Returns its
    /// first unit.
    pub(crate) fn alloc(&self, h: HugeId, order: u32, hint: usize) -> Option<usize> {
        self.alloc_in(h, order, Search::From(hint))
    }

    /// Allocates the block of `order` at `index` (already checked for range and alignment)
    /// if all its units are free.
    pub(crate) fn alloc_at(&self, index: usize, order: u32) -> bool {
        let h = HugeId(index / HUGE_UNITS);
        self.alloc_in(h, order, Search::At(index)).is_some()
    }

    /// [`Lower::alloc`] and [`Lower::alloc_at`]: a huge frame or more in the child entries,
    /// inline (one CAS), smaller blocks in the bit field ([`Lower::alloc_bits`]).
    #[inline(always)]
    fn alloc_in(&self, h: HugeId, order: u32, search: Search) -> Option<usize> {
        match order {
            0..=8 => self.alloc_bits(h, order, search),
            9 | 10 => self.flip_huge(h, order, true).then(|| h.first_unit()),
            _ => self.take_span(h, order).then(|| h.first_unit()),
        }
    }

    /// Orders 0..=8, Fig. 14a (2a): take the units from the child counter first (this settles
    /// races for the last free units), then claim the slots, else give them back.
    #[inline(never)]
    fn alloc_bits(&self, h: HugeId, order: u32, search: Search) -> Option<usize> {
        let n = 1 << order;
        self.update_child(h, |c| c.take(n)).ok()?;
        let claimed = match search {
            Search::At(index) => self.claim_at(h, index, order).then_some(index),
            Search::From(hint) if order <= WORD_ORDER => self.claim_in_word(h, order, hint),
            Search::From(hint) => self.claim_words(h, order, hint),
        };
        let Some(index) = claimed else {
            self.give_child(h, n);
            return None;
        };
        // The words of a multi-word block share the start word's cache line, so this one
        // write-back takes the whole block to the medium.
        self.persist(|| self.bit_of(index).0);
        Some(index)
    }

    /// Orders 0..=5: one CAS on one word, writing the slots of an aligned run of free units
    /// (`01` for order 0; `10` and then `11` for orders 1..=5).
    fn claim_in_word(&self, h: HugeId, order: u32, hint: usize) -> Option<usize> {
        let passes = if order == 0 { ORDER0_PASSES } else { 1 };
        let slots = slots_of(order);
        for _ in 0..passes {
            for i in 0..WORDS {
                let w = (hint + i) % WORDS;
                let mut bit = 0;
                // A run of `2^order` free slots is a run of `2^(order + 1)` zero bits.
                let claim = |v: u64| {
                    bit = find_run(v, order + 1)?;
                    Some(v | slots << bit)
                };
                if self.bits(h, w).try_change(claim).is_ok() {
                    return Some(h.first_unit() + w * SLOTS + bit as usize / 2);
                }
            }
        }
        None
    }

    /// The block of `order` at `index` exactly, if all its units are free.
    fn claim_at(&self, h: HugeId, index: usize, order: u32) -> bool {
        if order <= WORD_ORDER {
            let (word, shift) = self.bit_of(index);
            let mask = block_mask(order + 1) << shift;
            word.try_change(|v| (v & mask == 0).then_some(v | slots_of(order) << shift))
                .is_ok()
        } else {
            let g = (index % HUGE_UNITS) / SLOTS;
            with_span(order, |span| group_free(self.frame(h), g, span))
                && self.claim_group(h, g, order, false)
        }
    }

    /// Orders 6..=8: the first group of [`Lower::free_groups`] that [`Lower::claim_group`]
    /// takes. Kept out of line, so that the order-0 path it shares `alloc_in` with stays
    /// small.
    #[inline(never)]
    fn claim_words(&self, h: HugeId, order: u32, hint: usize) -> Option<usize> {
        let mut groups = self.free_groups(h, order, hint);
        let g = groups.find(|&g| self.claim_group(h, g, order, false))?;
        Some(h.first_unit() + g * SLOTS)
    }

    /// The first words of the groups of 2, 4 or 8 whole free words that blocks of `order`
    /// (6..=8) take in frame `h`, from the group holding word `hint` on (the frame's last
    /// allocation: the groups before it are likely taken), wrapping around. The frame's
    /// words are read once, each group's tested as one union: a group taken
    /// meanwhile fails its claim, one freed meanwhile is passed over, as a search that had
    /// passed it already would.
    #[inline(always)]
    fn free_groups(&self, h: HugeId, order: u32, hint: usize) -> impl Iterator<Item = usize> {
        with_span(order, |span| {
            // Bit `g` set where the words `g..g + span` of a group are all free.
            let words = self.frame(h);
            let groups = (0..WORDS).step_by(span).fold(0u32, |free, g| {
                free | u32::from(group_free(words, g, span)) << g
            });
            // Rotated so that the group holding `hint` is bit 0.
            let from = (hint % WORDS) & !(span - 1);
            let mut rest = (groups >> from | groups << (WORDS - from)) & 0xFFFF;
            core::iter::from_fn(move || {
                let i = rest.trailing_zeros() as usize;
                rest &= rest.wrapping_sub(1);
                (i < WORDS).then(|| (from + i) % WORDS)
            })
        })
    }

    /// The words of a block of `order` (6..=8) from word `g`, a group just read free, set
    /// one after the other: the continuation words, then the start word, which publishes the
    /// block (a free matches only a start word, so none can take a block whose words are
    /// not all set). If a racing allocation took a unit of a word not set yet, every word
    /// set is cleared again and the group counts as taken (§4.2.1); success is reported
    /// only once all words are ours.
    ///
    /// `plain`: the caller holds every unit of the frame (the counter it took was all that
    /// was left, and the rest are blocks it has just allocated, which no one frees). No
    /// other thread can then write a word of the frame (an allocation needs units of the
    /// counter, a free a block it has), so the words are written with plain stores, in the
    /// same order: two compare-and-swaps fewer per order-6 block, which is most of what a
    /// magazine adds to a burst of them (docs/results.md, "The magazines' fast path").
    #[inline(always)]
    fn claim_group(&self, h: HugeId, g: usize, order: u32, plain: bool) -> bool {
        // One compare-and-swap from free, no read first: the caller has just read the
        // group free, and a word that is not is no longer ours to take.
        let words = self.frame(h);
        let set = |w: usize, value: u64| {
            let word = frame_word(words, w);
            if plain {
                word.store(value, Ordering::Release);
                return true;
            }
            word.compare_exchange(0, value, Ordering::SeqCst, Ordering::Acquire)
                .is_ok()
        };
        let undo = |taken: core::ops::Range<usize>| {
            for w in taken {
                // We own these whole continuation words: nothing else writes a word it did
                // not find with a free slot, and no free clears a continuation word without
                // the start word we have not written.
                frame_word(words, w).store(0, Ordering::Release);
            }
            self.persist(|| frame_word(words, g));
            false
        };
        // Inlined into each span's arm, so that the words are set by unrolled code.
        with_span(
            order,
            #[inline(always)]
            |span| {
                for w in g + 1..g + span {
                    if !set(w, u64::MAX) {
                        return undo(g + 1..w);
                    }
                }
                if !set(g, start_word(order)) {
                    return undo(g + 1..g + span);
                }
                true
            },
        )
    }

    /// Orders 9 and 10: the child entry, or for order 10 the pair word of two whole,
    /// aligned children (§4.2.1: one CAS for both), from free to taken (`take`) or back.
    #[inline(always)]
    fn flip_huge(&self, h: HugeId, order: u32, take: bool) -> bool {
        let taken = if order == 9 { Child::HUGE } else { Child::PAIR };
        let (from, to) = match take {
            true => (Child::FREE, taken),
            false => (taken, Child::FREE),
        };
        let flipped = if order == 9 {
            self.update_child(h, |c| (c == from).then_some(to)).is_ok()
        } else {
            let (from, to) = (ChildPair::new(from, from).0, ChildPair::new(to, to).0);
            h.0.is_multiple_of(2)
                && h.0 + 1 < self.huges
                && self
                    .pair_word(h)
                    .try_change(|p| (p == from).then_some(to))
                    .is_ok()
        };
        if flipped {
            // The huge flags are the truth for orders 9 and 10 (§3.2.3).
            self.persist(|| self.pair_word(h));
        }
        flipped
    }

    /// Allocates up to `out.len()` blocks of `order` (0..=8) in huge frame `h`, writing
    /// their first units to `out`; returns how many. The child counter is taken once for all
    /// of them (what is not found goes back once); from word `hint` on, each bit-field word
    /// gives every free aligned block of orders 0..=5 it has that is still wanted in one
    /// compare-and-swap, and each group of free words one block of orders 6..=8, claimed as a
    /// single allocation claims it, or, where the frame is the caller's alone, written with
    /// plain stores. Each block is freed on its own, as if allocated alone.
    ///
    /// `ours`: units of `h` in blocks the caller has just allocated and not handed out yet
    /// (so that no free of them can race this one), 0 if none.
    pub(crate) fn alloc_many(
        &self,
        h: HugeId,
        order: u32,
        hint: usize,
        out: &mut [usize],
        ours: usize,
    ) -> usize {
        debug_assert!(order <= BITS_ORDER && out.len() << order <= HUGE_UNITS);
        let n = 1 << order;
        let taken = out.len() * n;
        let Ok(before) = self.update_child(h, |c| c.take(taken)) else {
            return 0;
        };
        let got = if order <= WORD_ORDER {
            self.claim_in_words(h, order, hint, out)
        } else {
            // The counter taken was all the frame had left, and the rest is the caller's.
            let alone = before.free() == taken && taken + ours == HUGE_UNITS;
            let groups = self.free_groups(h, order, hint);
            let claimed = groups.filter(|&g| self.claim_group(h, g, order, alone));
            let mut got = 0;
            for (slot, g) in out.iter_mut().zip(claimed) {
                // The block's words share the start word's line (as in `alloc_in`).
                self.persist(|| self.bits(h, g));
                *slot = h.first_unit() + g * SLOTS;
                got += 1;
            }
            got
        };
        if got < out.len() {
            self.give_child(h, (out.len() - got) * n);
        }
        got
    }

    /// [`Lower::alloc_many`]'s claims for orders 0..=5, the child counter taken.
    fn claim_in_words(&self, h: HugeId, order: u32, hint: usize, out: &mut [usize]) -> usize {
        let mut got = 0;
        for i in 0..WORDS {
            if got == out.len() {
                break;
            }
            let w = (hint + i) % WORDS;
            // The low bits of the first slots of the blocks claimed in this word.
            let mut claimed = 0;
            let claim = |v: u64| {
                claimed = lowest_bits(free_runs(v, order + 1), out.len() - got);
                // One block's slots per claimed bit; the blocks are disjoint, so no carries.
                (claimed != 0).then(|| v | claimed.wrapping_mul(slots_of(order)))
            };
            let word = self.bits(h, w);
            if word.try_change(claim).is_err() {
                continue;
            }
            self.persist(|| word);
            let first = h.first_unit() + w * SLOTS;
            while claimed != 0 {
                out[got] = first + claimed.trailing_zeros() as usize / 2;
                claimed &= claimed - 1;
                got += 1;
            }
        }
        got
    }

    /// The live block that contains unit `index` (in range), as `(first unit, order)`.
    /// Reads one word, or a continuation word and then its start word.
    pub(crate) fn block_of(&self, index: usize) -> Option<(usize, u32)> {
        let h = HugeId(index / HUGE_UNITS);
        let child = self.child(h);
        if child.span() {
            return self.span_of(h);
        }
        if child.huge() {
            return Some(if child.pair() {
                (HugeId(h.0 & !1).first_unit(), 10)
            } else {
                (h.first_unit(), 9)
            });
        }
        let (word, _) = self.bit_of(index);
        let v = word.get();
        let p = index % SLOTS;
        let first = index - p;
        match slot_in(v, p) {
            FREE_SLOT => None,
            ORDER0_SLOT => Some((index, 0)),
            _ => {
                if let Some(order) = multi_order(v) {
                    return Some((first, order));
                }
                if v == u64::MAX {
                    // A continuation word: its block starts at an aligned word before it.
                    let w = (index % HUGE_UNITS) / SLOTS;
                    return (6..=8).find_map(|order| {
                        let g = w & !((1 << (order - WORD_ORDER)) - 1);
                        (g != w && self.bits(h, g).get() == start_word(order))
                            .then(|| (h.first_unit() + g * SLOTS, order))
                    });
                }
                (1..=WORD_ORDER).find_map(|order| {
                    let start = p & !((1 << order) - 1);
                    is_block(v, start, order).then_some((first + start, order))
                })
            }
        }
    }

    /// The live block that contains unit `from` or, where it is free, the first after it,
    /// among the units below `end`. Passes a free huge frame in one read of its child
    /// entry and a free stretch of a bit-field word in one read of the word.
    pub(crate) fn next_block(&self, from: usize, end: usize) -> Option<(usize, u32)> {
        let mut at = from;
        while at < end {
            let h = HugeId(at / HUGE_UNITS);
            let child = self.child(h);
            // A frame taken whole starts a block (a frame of a span being claimed or freed
            // none); a free one holds none.
            if child.huge() || child.free() == HUGE_UNITS {
                let block = child.huge().then(|| self.block_of(at)).flatten();
                if block.is_some() {
                    return block;
                }
                at = h.first_unit() + HUGE_UNITS;
                continue;
            }
            // The slots from `at`'s on; every slot of a live block is non-zero.
            let p = at % SLOTS;
            let taken = self.bit_of(at).0.get() >> (2 * p);
            if taken == FREE_SLOT {
                at += SLOTS - p;
                continue;
            }
            let first = at + (taken.trailing_zeros() / 2) as usize;
            // Past `end` only the padding of the last frame is taken.
            return (first < end).then(|| self.block_of(first)).flatten();
        }
        None
    }

    /// Frees the block of `order` at `index` (already checked for range and alignment). The
    /// order-0 arm, with its constant order, compiles to its own one-slot check.
    pub(crate) fn free(&self, index: usize, order: u32) -> Result<(), Error> {
        let h = HugeId(index / HUGE_UNITS);
        // Orders 0..=8: the units are back in the bit field (Fig. 14b (3)).
        let counted = |cleared: bool| {
            if cleared {
                self.give_child(h, 1 << order);
            }
            cleared
        };
        let freed = match order {
            0 => counted(self.clear_in_word(&[index], 0)),
            1..=WORD_ORDER => counted(self.clear_in_word(&[index], order)),
            6..=8 => counted(self.clear_words(h, index, order, false)),
            9 | 10 => self.flip_huge(h, order, false),
            _ => self.free_span(h, order),
        };
        match freed {
            true => Ok(()),
            false => Err(self.wrong_free(index)),
        }
    }

    /// Frees blocks of `order` (0..=8, checked for range and alignment) that all lie in one
    /// huge frame, in order, with the child counter updated once for all: for orders 0..=5
    /// the blocks that follow each other in `blocks` and share a bit-field word with one
    /// compare-and-swap that checks each as [`Lower::free`] would; for orders 6..=8 each
    /// block's words as [`Lower::free`] clears them. Stops before the first such group that
    /// has a block that is not a live block of `order`, or one named twice (that group
    /// unchanged); returns how many blocks it freed.
    pub(crate) fn free_many(&self, blocks: &[usize], order: u32) -> usize {
        self.free_blocks(blocks, order, false)
    }

    /// [`Lower::free_many`] for a caller that owns every block: orders 6..=8 set each start
    /// word to [`FREEING`] with a plain store instead of the compare-and-swap that decides
    /// racing frees, then clear the block as a free does, so a crash leaves the same states;
    /// orders 0..=5 as `free_many`.
    ///
    /// # Safety
    ///
    /// Each block is a live block of `order` (in range, aligned), named once, and nothing
    /// else frees it while this runs: no racing free is told apart here.
    pub(crate) unsafe fn free_owned(&self, blocks: &[usize], order: u32) -> usize {
        self.free_blocks(blocks, order, true)
    }

    /// [`Lower::free_many`], and with `owned` [`Lower::free_owned`], whose promise the
    /// caller then keeps.
    fn free_blocks(&self, blocks: &[usize], order: u32, owned: bool) -> usize {
        debug_assert!(order <= BITS_ORDER);
        let in_word = order <= WORD_ORDER;
        let mut done = 0;
        for group in blocks.chunk_by(|a, b| in_word && a / SLOTS == b / SLOTS) {
            let cleared = match in_word {
                true => self.clear_in_word(group, order),
                false => self.clear_words(HugeId(group[0] / HUGE_UNITS), group[0], order, owned),
            };
            if !cleared {
                break;
            }
            done += group.len();
        }
        if done > 0 {
            self.give_child(HugeId(blocks[0] / HUGE_UNITS), done << order);
        }
        done
    }

    /// Fig. 14b for orders 0..=5: clears the blocks of `order`, all in one bit-field word,
    /// with one compare-and-swap that checks each ([`are_blocks`]), so the answer cannot go
    /// stale before it takes effect: false, and nothing changed, if one is not a live block
    /// of `order` or one is named twice. The child counter is the caller's. Inlined, so that
    /// a single block of order 0 compiles to its own one-slot check.
    #[inline(always)]
    fn clear_in_word(&self, blocks: &[usize], order: u32) -> bool {
        let (word, _) = self.bit_of(blocks[0]);
        // The low bits of the blocks' first slots (aligned blocks overlap only if equal).
        let mut starts = 0u64;
        for &index in blocks {
            let start = 1 << (index % SLOTS * 2);
            if starts & start != 0 {
                return false;
            }
            starts |= start;
        }
        let keep = !starts.wrapping_mul(block_mask(order + 1));
        let freed = word.try_change(|v| {
            window::pass();
            are_blocks(v, starts, order).then_some(v & keep)
        });
        if freed.is_err() {
            return false;
        }
        self.persist(|| word);
        true
    }

    /// Fig. 14b (1)–(3) for orders 6..=8, but for the child counter, which is the caller's.
    /// The start word is the claim: of racing frees of one block exactly one turns it into
    /// [`FREEING`]. It stays FREEING (no free slot, no match for any free) until the
    /// continuation words are clear, so that a losing double free never sees the block as
    /// free yet taken, and no allocation can take the start word while a word of the block
    /// is still set. `owned`: the caller owns the block and no free races it
    /// ([`Lower::free_owned`]), so a plain store makes the start word FREEING. Out of line,
    /// so that the order-0 path it shares `free` with stays small.
    #[inline(never)]
    fn clear_words(&self, h: HugeId, index: usize, order: u32, owned: bool) -> bool {
        let g = (index % HUGE_UNITS) / SLOTS;
        let words = self.frame(h);
        let start = frame_word(words, g);
        if owned {
            debug_assert_eq!(start.get(), start_word(order), "not a live block");
            start.store(FREEING, Ordering::Release);
        } else {
            window::pass();
            if start
                .try_change(|v| (v == start_word(order)).then_some(FREEING))
                .is_err()
            {
                return false;
            }
        }
        with_span(order, |span| {
            for w in g + 1..g + span {
                // Ours since the claim: a continuation word is changed by nothing else.
                frame_word(words, w).store(0, Ordering::Release);
            }
        });
        start.store(0, Ordering::Release);
        // One line holds all the block's words (a crash before this write-back leaves the
        // block allocated, or its remaining words orphans: see `recover.rs`).
        self.persist(|| start);
        true
    }

    /// The error for a free that found no block of its order at `index`: a block of another
    /// order starts there (`OrderMismatch`: [`Lower::block_of`] names it) or none does
    /// (`NotAllocated`). Read after the fact, so a racing change may tip it from one to the
    /// other, never to success.
    fn wrong_free(&self, index: usize) -> Error {
        match self.block_of(index) {
            Some((first, _)) if first == index => Error::OrderMismatch,
            _ => Error::NotAllocated,
        }
    }

    /// Counts `units` of frame `h` free again in its child counter (always succeeds). One
    /// add to the pair word, no compare-and-swap loop: the counter is the lowest field of its
    /// half, and a give never carries out of it (the units were taken from it, so the sum is
    /// at most [`HUGE_UNITS`], which the counter's 10 bits hold).
    fn give_child(&self, h: HugeId, units: usize) {
        let before = self
            .pair_word(h)
            .fetch_add(ChildPair::free_units(h.0 % 2, units), Ordering::SeqCst);
        // `Child::give` checks that the frame is not taken whole and the sum fits.
        let _ = ChildPair(before).get(h.0 % 2).give(units);
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

    /// The cache lines of huge frame `h`'s bit field (one bounds check for all its words).
    #[inline]
    fn frame(&self, h: HugeId) -> &[Line; WORDS / LINE_WORDS] {
        let first = h.0 * (WORDS / LINE_WORDS);
        let lines: &[Line] = &self.lines[first..first + WORDS / LINE_WORDS];
        lines.try_into().expect("a frame's lines")
    }

    fn word(&self, w: usize) -> &AtomicU64 {
        &self.lines[w / LINE_WORDS].0[w % LINE_WORDS]
    }

    fn bits(&self, h: HugeId, w: usize) -> &AtomicU64 {
        frame_word(self.frame(h), w)
    }

    /// The bit-field word of unit `index` and the shift of its slot.
    fn bit_of(&self, index: usize) -> (&AtomicU64, u32) {
        (self.word(index / SLOTS), (index % SLOTS) as u32 * 2)
    }

    fn pair_word(&self, h: HugeId) -> &AtomicU64 {
        self.word(self.huges * WORDS + h.0 / 2)
    }

    /// The bit-field words of frame `h` (one read each: meaningful with no operation in
    /// flight).
    #[cfg(any(test, not(loom)))]
    fn frame_words(&self, h: HugeId) -> [u64; WORDS] {
        core::array::from_fn(|w| self.bits(h, w).load(Ordering::Acquire))
    }

    /// Checks that every child counter matches its bit field and every taken slot belongs
    /// to a block its slots name in full (quiescent state only).
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        for h in (0..self.huges).map(HugeId) {
            let c = self.child(h);
            let words = self.frame_words(h);
            let taken: u32 = words.iter().map(|&v| taken_slots(v)).sum();
            if c.huge() {
                assert_eq!((taken, c.free()), (0, 0), "huge frame {h:?} with bits");
            } else {
                assert_eq!(c.free(), HUGE_UNITS - taken as usize, "frame {h:?}");
                // The padding is `10` and counted taken; real units end at the first word
                // that is all padding, or inside the last one.
                let real = (0..HUGE_UNITS)
                    .find(|&u| {
                        let v = words[u / SLOTS];
                        let rest = u64::MAX.checked_shl(2 * (u % SLOTS) as u32).unwrap_or(0);
                        v & rest == HIGH_BITS & rest
                    })
                    .unwrap_or(HUGE_UNITS);
                frame_blocks(&words, real, |unit, order, named| {
                    assert!(
                        named,
                        "frame {h:?}: unit {unit} taken by no block (order {order})"
                    )
                });
            }
        }
    }

    /// Sets frame `h` to the taken units of `taken` (one bit per unit, 64 units a word), as
    /// order-0 blocks, and its counter to match (test set-up).
    #[cfg(test)]
    pub(crate) fn set_frame(&self, h: HugeId, taken: [u64; HUGE_UNITS / 64]) {
        let mut count = 0;
        for (w, &v) in taken.iter().enumerate() {
            self.bits(h, 2 * w)
                .store(spread(v as u32), Ordering::Relaxed);
            self.bits(h, 2 * w + 1)
                .store(spread((v >> 32) as u32), Ordering::Relaxed);
            count += v.count_ones() as usize;
        }
        let _ = self.update_child(h, |_| Some(Child::with_free(HUGE_UNITS - count)));
    }
}

/// Where [`Lower::alloc_in`] looks for a block.
#[derive(Clone, Copy)]
enum Search {
    /// Anywhere in the frame, from this bit-field word on.
    From(usize),
    /// Exactly at this unit.
    At(usize),
}

/// Word `w` (0..16) of a frame's bit field ([`Lower::frame`]): a block's words read and
/// written with one bounds check for the frame, not one per word.
#[inline(always)]
fn frame_word(frame: &[Line; WORDS / LINE_WORDS], w: usize) -> &AtomicU64 {
    &frame[w / LINE_WORDS].0[w % LINE_WORDS]
}

/// Whether the words `g..g + span` of `frame` are all free: one test of their union.
#[inline(always)]
fn group_free(frame: &[Line; WORDS / LINE_WORDS], g: usize, span: usize) -> bool {
    (g..g + span).fold(0, |any, w| any | frame_word(frame, w).get()) == 0
}

/// The slots of a block of `order` (0..=5) at bit 0 of a word: `01` for order 0, else `10`
/// and then `11`.
const fn slots_of(order: u32) -> u64 {
    if order == 0 {
        ORDER0_SLOT
    } else {
        block_mask(order + 1) & !0b11 | START_SLOT
    }
}

/// Calls `f(unit, order, named)` for every block among the first `real` units of a frame
/// whose bit-field words are `words`, in address order: blocks of orders 1..=8 where their
/// slots name them in full (`named`), `01` slots as order-0 blocks (`named`), and every
/// other taken slot as an order-0 block that nothing names (`!named`: what an operation cut
/// off by a crash leaves, or damage). Units past `real` are padding and skipped.
#[cfg(any(test, not(loom)))]
fn frame_blocks(words: &[u64; WORDS], real: usize, mut f: impl FnMut(usize, u32, bool)) {
    let mut w = 0;
    while w < WORDS && w * SLOTS < real {
        let v = words[w];
        let first = w * SLOTS;
        if let Some(order) = multi_order(v) {
            let span = 1 << (order - WORD_ORDER);
            let whole = w % span == 0
                && w + span <= WORDS
                && first + span * SLOTS <= real
                && words[w + 1..w + span].iter().all(|&c| c == u64::MAX);
            if whole {
                f(first, order, true);
                w += span;
                continue;
            }
        }
        let end = (real - first).min(SLOTS);
        // The low bit of every taken slot: free slots are skipped a run at a time.
        let taken = (v | v >> 1) & LOW_BITS;
        let mut p = 0;
        while p < end {
            p += (taken >> (2 * p)).trailing_zeros() as usize / 2;
            if p >= end {
                break;
            }
            // An orphan (a taken slot no block names) is reported as order 0.
            let named = match slot_in(v, p) {
                ORDER0_SLOT => Some(0),
                _ => in_word_order(v, p).filter(|&o| p + (1 << o) <= end),
            };
            let order = named.unwrap_or(0);
            f(first + p, order, named.is_some());
            p += 1 << order;
        }
        w += 1;
    }
}

/// The number of taken (not free) slots in a bit-field word.
#[cfg(any(test, not(loom)))]
fn taken_slots(word: u64) -> u32 {
    ((word | word >> 1) & LOW_BITS).count_ones()
}

/// The slots of word `w` of a frame with `real` units that lie past its end (a mask of both
/// bits of each).
fn padding(real: usize, w: usize) -> u64 {
    let units = real.saturating_sub(w * SLOTS).min(SLOTS) as u32;
    u64::MAX.checked_shl(2 * units).unwrap_or(0)
}

/// The order-0 slots (`01`) of the units whose bits are set in `units`.
#[cfg(test)]
fn spread(units: u32) -> u64 {
    let mut x = units as u64;
    x = (x | x << 16) & 0x0000_FFFF_0000_FFFF;
    x = (x | x << 8) & 0x00FF_00FF_00FF_00FF;
    x = (x | x << 4) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | x << 2) & 0x3333_3333_3333_3333;
    (x | x << 1) & LOW_BITS
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests;
