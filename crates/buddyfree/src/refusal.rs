//! The refusal memo: one atomic word per allocator that remembers "every request of order
//! `k` or more was refused, and nothing that could serve one has been freed since", so that
//! a caller looping on a full (or fragmented) heap gets [`Error::OutOfMemory`] after one
//! load instead of a search.
//!
//! Only a free (or anything else that makes units findable again: a give-back of units an
//! allocation took and could not use, a rollback, a tree brought online, a cache spilling
//! into its backend) can make a refused request succeed; allocations never create free
//! blocks. So a refusal stays true until the next such event. Most events clear the word;
//! a free that says what it may have made findable ([`Refusals::freed_if`]) clears only a
//! refusal of an order it covers: on a fragmented heap, a kernel that frees one 4 KiB frame
//! and asks for a huge frame again, over and over, gets its answer from the memo until a
//! free completes a huge frame, instead of two searches of the heap per try.
//!
//! ```text
//!  63                      10    9         8         7         6        5     0
//! [ sequence number          | TOUCHED | COUNTED | PENDING | REFUSED | order  ]
//!  0: nothing known
//!  REFUSED(k) [+ COUNTED]: a refusal of orders k and up [resting on a count]
//!  PENDING(k, seq) [+ TOUCHED]: a search of order k confirming its failure [seen by a free]
//! ```
//!
//! # Protocol
//!
//! - **Allocation** ([`Refusals::alloc`]): a request of order `k` first loads the
//!   word; a `REFUSED(k')` with `k' <= k` answers at once. Otherwise it runs its allocation;
//!   if that fails it confirms the failure: it stores `PENDING(k, seq)` (the sequence number
//!   makes every store distinct, so a stale compare-and-swap cannot succeed), issues a
//!   `SeqCst` fence, allocates again from scratch and, if that fails too, swaps
//!   `PENDING(k, seq)` for `REFUSED(k)` by a compare-and-swap. The first failure is never
//!   recorded: only an allocation that began after the fence is, or one whose reads after
//!   the fence show that the first search stands for one made after it (NBBS, below:
//!   "Searched"). The attempt says how it
//!   failed ([`Failure`]): after a complete search of the places a block of the order can
//!   be ([`Failure::Searched`]), or because a count of free units, wherever they lie, is
//!   below the order's size ([`Failure::Counted`]); the latter is recorded with `COUNTED`,
//!   and only from a pending word no free has touched.
//! - **Free** ([`Refusals::freed_if`]): after its last state change, a free loads the word
//!   (`SeqCst`); without memory pressure it is 0, so a free costs one load of a line nobody
//!   writes. Otherwise, for the word's order `k`, it asks `covers(k)`: read now, may a block
//!   of order `k` be free where the free's units lie? It clears the word (a `SeqCst`
//!   compare-and-swap) if so, or if the word is a `COUNTED` refusal; marks a pending word it
//!   does not clear `TOUCHED`; leaves a refusal after a search of an order it does not
//!   cover. [`Refusals::freed`] covers every order.
//!
//! # Why a recorded refusal is true (C++20 / Rust memory model)
//!
//! Let a free F make its block findable by writes `w` that are `SeqCst` read-modify-writes
//! (the allocators' free counters, tree entries, per-core counters: on x86-64 and AArch64 the
//! same instructions as `AcqRel` ones), then load the word (`b`, `SeqCst`). Let an allocation
//! S store `PENDING` (`c`), fence (`Y`, `SeqCst`), and read the allocator's state (`d`).
//! Suppose F's load misses the pending store (`b` reads a value before `c` in the word's
//! modification order) and one of S's reads misses `w` (`d` reads a value before `w`). By
//! [atomics.order] p4: `b` is coherence-ordered before `c` and `c` is sequenced before `Y`,
//! so `b` precedes `Y` in the single total order S; `Y` is sequenced before `d` and `d` is
//! coherence-ordered before `w`, so `Y` precedes `w`; and `w` precedes `b` (both `SeqCst`,
//! `w` sequenced first). That is a cycle: so either S's allocation sees every write of F
//! (then it finds the block, or another allocation took it), or F's load sees `PENDING(k,
//! seq)` or a later value, and F acts on it. The same holds for a later allocation S2 whose
//! `PENDING` follows F's clear (`SeqCst`) in the word's order: the clear precedes S2's fence,
//! so S2 sees `w`. A reader that loads `REFUSED` after a free that happened before it reads
//! that free's clear or a later value (coherence), so a refusal never outlives a free that
//! the caller knows of and that acts on it; with frees in flight, the refusal is linearised
//! before them.
//!
//! A free that covers every order clears whatever it sees: that is the whole argument for
//! [`Refusals::freed`].
//!
//! ## Frees that cover
//!
//! Call M the frees whose loads read S's pending word or a later value; every other free
//! S saw whole. A free in M that covers `k` clears the word (S's compare-and-swap then
//! fails, or the refusal is gone before the reader reads it). A free in M that does not
//! leaves it; the argument must show that those frees cannot be what S missed.
//!
//! - **Counted.** A count of free units is raised by a free anywhere, whatever it covers.
//!   A free in M that does not cover `k` either saw the pending word, and marked it
//!   `TOUCHED`, so that S's compare-and-swap for a counted refusal fails (S then clears the
//!   word), or saw S's `REFUSED | COUNTED`, which it clears.
//! - **Searched.** Let block B, of order `k` or more, be free when the reader reads the
//!   refusal, and `w*` the write that last made it free, by a free F* that happened before
//!   the reader (a rollback or give-back clears the memo whatever it covers). `covers(k)`
//!   is read after all of the free's writes, and is true wherever B is free; so if F* is in
//!   M it reads `w*` or later, sees B free (B stays free up to the reader), and clears. If
//!   F* is not in M, S saw `w*` and everything that happened before it; what S may still
//!   have missed are writes of frees in M that `w*` did not wait for. For each allocator:
//!   - NBBS (`nbbs/forest.rs`): its scan refuses only if no free completed during it (the
//!     count of releases read before and after the scan, with acquire, is unchanged), so a
//!     scan that misses B (it read B's node before `w*`) missed F*'s count, and F* is in M
//!     by the cycle above. Its only other refusal, by the count of free units, is counted.
//!     `covers(k)`: the node of order `k` above the freed block looks free, as a scan reads
//!     it. Its confirmation scans again only if the counts changed: it reads, after the
//!     fence, the count of releases and a count of rollbacks, each raised by a `SeqCst`
//!     read-modify-write after the writes that make units findable and before the memo's
//!     load (a rollback's is [`Refusals::released`]), and takes the scan before the fence
//!     for one after it if both are what they were, with acquire, before that scan. A free
//!     or rollback whose load misses the pending word raised its count before the read
//!     after the fence (the cycle above, with that raise for `w`); the counts only rise,
//!     so it had raised it before the read before the scan, whose acquire made its writes
//!     visible to the scan. So the scan saw every write that a scan after the fence must
//!     see, and the argument above holds for it. The loom models
//!     `loom_nbbs_refusal_confirmation_*` check it, and fail without the count of
//!     rollbacks or without the read after the fence.
//!   - LLFree (`llfree/mod.rs`): a search takes a block's units from the counter of its
//!     tree before it reads the frames, and a free raises its frame's child counter before
//!     the tree's; so S may read B's frame whole and its tree's counter short of a free F in
//!     M that credited the tree after F* completed B (and a counter's units belong to no
//!     frame: another allocation may have taken F's frame's units meanwhile). So
//!     `covers(k)` for a huge frame reads every frame of the tree, after the credit, with
//!     `SeqCst` loads (`r`), unless the tree's counters are short ("Short counts" below).
//!     If F's `r` reads B's child entry before `w*`, a `SeqCst` write:
//!     `Y` precedes F's credit (S missed it), which precedes `r`, which precedes `w*`, which
//!     precedes F*'s load `b*` in S; so `b*` follows `Y` and reads the pending word or
//!     later, and F* is in M after all. Else `r` sees B whole and F clears. LLFree's count
//!     of free units sums the trees' counters, so it falls short of B only where B's tree's
//!     counter does, and its refusals are searched ones too. A reserved tree's units split
//!     between its holder's counter and the tree entry are gathered before the search
//!     passes the tree (`LLFree::take_gathered`). Orders below a huge frame are always
//!     covered.
//!
//! ## Short counts
//!
//! An LLFree free may skip reading the frames when its tree's counters, read after its
//! credit, hold fewer units than a huge frame (`LLFree::short_of_huge`): the entry's `cU`
//! and, if the tree is reserved, the `cP` of the reservation the free would credit (any
//! other holder: no skip), read with `SeqCst` loads between two readings of the move
//! counter that show no count in a core's hands (`llfree/moves.rs`). Those counters rise
//! only by credits (frees and give-backs); allocations' takes lower them, and moves keep
//! their sum. Let B, in tree `t`, be free when the reader reads the refusal, S have passed
//! `t`, and C be the last credit to `t` in the single total order among the frees and
//! give-backs that happened before the reader (the refusal is linearised before those in
//! flight).
//!
//! - C read the frames. Its reads follow its credit, which follows F*'s (or is F*'s),
//!   which follows `w*`: C sees B whole and clears if it is in M. If it is not, S saw C's
//!   credit and all before it (the cycle above), so S read at `t` at least what the
//!   counters held at the reader; S passed `t`, so that was short of B's units, and the
//!   next case applies.
//! - C skipped, or the counters at the reader are short of a huge frame: nothing but takes
//!   and moves followed C, so what C read (its loads read the last values in the order) is
//!   at least what they hold at the reader. With B free, the units missing are held by
//!   allocations in flight, so a search at the reader fails there too (the transient
//!   failure near exhaustion above). Each of those ends by claiming them (from B: then B
//!   is no longer free) or by giving them back: a credit followed by a read of the frames,
//!   which comes after C's read of the counters (that missed the credit) and so after
//!   `w*`, sees B whole, and tells the memo ([`Refusals::alloc`]), whatever it says of
//!   the give-backs of a search that recorded its own refusal.
//!
//! A pending word that replaced a refusal of a larger order puts it back after a search
//! that succeeded only if no free touched the word meanwhile: a free that saw a pending
//! word of one order and covered nothing may still have covered the larger one.
//!
//! Where a free's writes are made under a lock that the allocation also takes, the lock
//! orders them instead: either the allocation's critical section comes after the free's
//! (and sees its writes), or before it, and then the fence precedes the free's load in
//! happens-before, so that load sees `PENDING`. Rare give-backs whose writes are neither
//! `SeqCst` nor locked use [`Refusals::released`], which fences first.
//!
//! Loom models `SeqCst` loads and read-modify-writes as acquire/release and only fences as
//! sequentially consistent, so under `cfg(loom)` [`Refusals::freed_if`] issues the fence
//! that the argument above gets, in real builds, from the `SeqCst` accesses (with a fence in
//! every free, the chains above close through [atomics.order] p4's fence rules alone).
//!
//! # What each allocator must do
//!
//! Route every allocation of the default class through [`Refusals::alloc`], where the
//! attempt answers a refusal (a count's, or a search's) only for a
//! failure that is complete (no free block of the order was found by a search that saw
//! every counter; a failure while another core's reservation move was in flight is
//! answered otherwise and not recorded), and call [`Refusals::freed`] (or
//! [`Refusals::released`]) after every event that makes units findable, give-backs of an
//! allocation's own speculative takes included: a stale refusal would otherwise outlive
//! units that are free. A free may call [`Refusals::freed_if`] instead, with a `covers`
//! that the argument above holds for.

use crate::sync::atomic::{fence, AtomicU64, Ordering};
use crate::Error;

/// The order bits of a memo word.
const ORDER: u64 = 0x3f;
/// A refusal of every order at least the word's.
const REFUSED: u64 = 1 << 6;
/// An allocation confirming its failure; the sequence number is above.
const PENDING: u64 = 1 << 7;
/// On a refusal: it rests on a count of free units, which a free anywhere raises.
const COUNTED: u64 = 1 << 8;
/// On a pending word: a free that covers nothing of its order has seen it.
const TOUCHED: u64 = 1 << 9;
/// Where the sequence number of a pending word starts.
const SEQ_SHIFT: u32 = 10;

/// Why an attempt of [`Refusals::alloc`] found no block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A count of the free units, wherever they lie, is below the order's size: a free
    /// anywhere may change that, so every free ends such a refusal.
    Counted,
    /// A complete search found no block of the order: only a free that covers the order
    /// ([`Refusals::freed_if`]) may change that.
    Searched,
    /// Another answer than a refusal (never recorded).
    Error(Error),
}

impl Failure {
    /// `OutOfMemory` for a search that failed to find a block (for [`Failure::Searched`]
    /// attempts): any other error as it is.
    #[inline]
    pub(crate) fn searched(e: Error) -> Failure {
        match e {
            Error::OutOfMemory => Failure::Searched,
            e => Failure::Error(e),
        }
    }

    /// The error the caller sees.
    #[inline]
    fn error(self) -> Error {
        match self {
            Failure::Counted | Failure::Searched => Error::OutOfMemory,
            Failure::Error(e) => e,
        }
    }
}

/// A refusal memo (module docs). Shares the line of whatever it is placed beside: it is
/// written only under memory pressure. `default()` knows nothing (not a `const`: loom's
/// atomics are not, and every allocator builds its memo at run time).
#[derive(Default)]
pub(crate) struct Refusals {
    word: AtomicU64,
    seq: AtomicU64,
}

/// A pending confirmation, from [`Refusals::begin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    word: u64,
    /// What the word held before (a refusal of a larger order is put back on success).
    replaced: u64,
}

impl Refusals {
    /// Whether a request of `order` is known to fail: a refusal of `order` or less was
    /// recorded and nothing that could serve it was freed since. Relaxed: it publishes no
    /// data, and coherence alone orders it after any clear that happened before it.
    #[inline]
    pub(crate) fn refuses(&self, order: u32) -> bool {
        let w = self.word.load(Ordering::Relaxed);
        w & REFUSED != 0 && w & ORDER <= u64::from(order)
    }

    /// Runs `attempt` (an allocation of `order`) unless the memo already refuses `order`;
    /// confirms a refusal ([`Failure::Counted`] or [`Failure::Searched`]) by a second attempt
    /// after [`Refusals::begin`], and records it if that fails too: a refusal after a search
    /// is ended only by a free that covers its order, one by the count by any free. Always
    /// inlined, so that a refusal from the memo costs its load and no call, however large
    /// the attempt.
    ///
    /// The attempt also says what units it gave back may have made findable (`None`: it
    /// gave nothing back; `Some(k)`: blocks of orders up to `k`, read after the give-backs
    /// as a free's `covers` is), for an attempt that gives back units it took and could not
    /// use (LLFree's counters) without telling the memo at each give-back: the memo is told
    /// once after it ([`Refusals::freed_if`]), which spares a search its own give-backs.
    /// Telling it at the give-back itself would clear the search's own pending word, and a
    /// search that takes and gives back units tree by tree (a fragmented heap) would never
    /// record its refusal. Told after the attempt, a search that missed those units while
    /// the attempt held them may record a refusal for the moment until the attempt ends and
    /// clears it: the transient failure near exhaustion such an allocator has anyway. An
    /// attempt that gave nothing back (an allocation served from its core's counter) leaves
    /// the memo alone: it made nothing findable, so a reclaim loop that frees a frame and
    /// takes it back keeps its refusal of a huge frame. The attempt's give-backs must be
    /// `SeqCst` writes, as a free's are.
    #[inline(always)]
    pub(crate) fn alloc(
        &self,
        order: u32,
        mut attempt: impl FnMut() -> (Result<usize, Failure>, Option<u32>),
    ) -> Result<usize, Error> {
        if self.refuses(order) {
            return Err(Error::OutOfMemory);
        }
        let (answer, gave) = attempt();
        if let Some(covered) = gave {
            self.freed_if(|k| k <= covered);
        }
        match answer {
            Err(Failure::Counted | Failure::Searched) => self.confirm(order, attempt),
            other => other.map_err(Failure::error),
        }
    }

    /// [`Refusals::alloc`] for an attempt that gives nothing back and takes every
    /// `OutOfMemory` for [`Failure::Counted`], which every free ends: the protocol's plainest
    /// form, which the model tests below drive.
    #[cfg(test)]
    pub(crate) fn alloc_counted(
        &self,
        order: u32,
        mut attempt: impl FnMut() -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        self.alloc(order, || {
            let answer = attempt().map_err(|e| match e {
                Error::OutOfMemory => Failure::Counted,
                e => Failure::Error(e),
            });
            (answer, None)
        })
    }

    /// The second attempt of [`Refusals::alloc`], after the pending store and the fence;
    /// if it gave back units, a word that is no longer this search's own is told after the
    /// attempt, since its give-backs may be what another search missed, and so is any word
    /// where they covered every order (a whole frame free as they were read): a free that
    /// found its counters short while this search held them read no frames ("Short
    /// counts"), and that whole frame may be what this search's own refusal missed.
    #[cold]
    #[inline(never)]
    fn confirm(
        &self,
        order: u32,
        mut attempt: impl FnMut() -> (Result<usize, Failure>, Option<u32>),
    ) -> Result<usize, Error> {
        #[cfg(feature = "testing")]
        CONFIRMATIONS.with(|c| c.set(c.get() + 1));
        let pending = self.begin(order);
        let (answer, gave) = attempt();
        let settled = self.end(pending, answer);
        if let Some(covered) = gave.filter(|&c| !settled || c == u32::MAX) {
            self.freed_if(|k| k <= covered);
        }
        answer.map_err(Failure::error)
    }

    /// Announces a search for a block of `order` that may end in a refusal: every read of
    /// the allocator's state that decides the refusal must come after this.
    pub(crate) fn begin(&self, order: u32) -> Pending {
        // Distinct per begin (it wraps after 2^54, far beyond one search's lifetime).
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let word = seq << SEQ_SHIFT | PENDING | (u64::from(order) & ORDER);
        let replaced = self.word.swap(word, Ordering::Relaxed);
        // Y of the module docs: the search's reads come after this in the single order S.
        fence(Ordering::SeqCst);
        Pending { word, replaced }
    }

    /// Ends a search begun with `pending` whose second attempt answered `answer`: records its
    /// refusal ([`Failure::Counted`]: one that rests on a count), or after any other answer
    /// puts back a refusal that the pending word replaced, since allocations create no
    /// blocks. Neither if anything that covers its order was freed since (such a free
    /// cleared the word) or another search began since (it records its own); a counted
    /// refusal, and a refusal put back, not either once any free has seen the pending word
    /// ([`TOUCHED`]): the word is then cleared. Whether the word was still `pending`'s.
    pub(crate) fn end(&self, pending: Pending, answer: Result<usize, Failure>) -> bool {
        let refused = REFUSED | (pending.word & ORDER);
        let (to, touched) = match answer {
            Err(Failure::Counted) => (refused | COUNTED, 0),
            Err(Failure::Searched) => (refused, refused),
            _ if pending.replaced & REFUSED != 0 => (pending.replaced, 0),
            _ => (0, 0),
        };
        self.replace(pending.word, to) || self.replace(pending.word | TOUCHED, touched)
    }

    /// Puts `to` in the word if it holds `from`; whether it did: the end of a search, which
    /// publishes nothing (Relaxed; the module docs say what orders it).
    fn replace(&self, from: u64, to: u64) -> bool {
        self.word
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// After a free whose writes that make its units findable are `SeqCst` read-modify-writes
    /// (or made under a lock that every search takes): forgets any refusal, and makes any
    /// search pending now fail to record one. One load when nothing is recorded.
    #[inline]
    pub(crate) fn freed(&self) {
        self.freed_if(|_| true);
    }

    /// [`Refusals::freed`] for a free that may not have made a block of every order
    /// findable: `covers(k)` says whether, read now, a block of order `k` may be free where
    /// this free's units lie (module docs: "Frees that cover"). A refusal of an order it does
    /// not cover stays, unless the refusal rests on a count; a pending search of an order it
    /// does not cover is marked [`TOUCHED`], which keeps a counted refusal out. `covers` is
    /// called only when the word is not 0, and must read, after every write of the free,
    /// the state that the allocator's search would find a block of order `k` in.
    #[inline]
    pub(crate) fn freed_if(&self, covers: impl Fn(u32) -> bool) {
        let w = self.remembered();
        if w != 0 {
            self.settle(w, covers);
        }
    }

    /// The word, read as [`Refusals::freed_if`] reads it: not 0 where a refusal or a search
    /// may be remembered. A free that reads 0 here (after its writes) need not call
    /// `freed_if`, nor build its `covers`.
    #[inline]
    pub(crate) fn remembered(&self) -> u64 {
        // Loom models SeqCst accesses as acquire/release: the fence gives its model the
        // order that the SeqCst write and load give in a real build (module docs).
        #[cfg(loom)]
        fence(Ordering::SeqCst);
        self.word.load(Ordering::SeqCst)
    }

    /// After a give-back whose writes are not `SeqCst` (a rolled-back allocation): a fence,
    /// then [`Refusals::freed`]. For rare paths only: a fence costs tens of cycles.
    pub(crate) fn released(&self) {
        fence(Ordering::SeqCst);
        self.freed();
    }

    /// The part of [`Refusals::freed_if`] that runs when the word was `w`, not 0: clears it,
    /// marks it, or leaves it, and again for the value that a failed compare-and-swap
    /// meets. A read-modify-write, not a store: it lands after a refusal recorded since the
    /// load (which read the pending word), as a store must too; loom orders only the former.
    #[cold]
    #[inline(never)]
    fn settle(&self, mut w: u64, covers: impl Fn(u32) -> bool) {
        loop {
            let refused = w & REFUSED != 0;
            let new = if (refused && w & COUNTED != 0) || covers((w & ORDER) as u32) {
                0
            } else if !refused && w & TOUCHED == 0 {
                w | TOUCHED
            } else {
                return;
            };
            match self
                .word
                .compare_exchange(w, new, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) | Err(0) => return,
                Err(now) => w = now,
            }
        }
    }
}

#[cfg(feature = "testing")]
std::thread_local! {
    /// How many confirming searches this thread has run, for tests that check that a memo
    /// was not cleared (feature `testing`: not API).
    static CONFIRMATIONS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// The number of refusals this thread has confirmed by a second search, through any memo
/// (a refusal answered from a memo runs none). Test machinery (feature `testing`), not API.
#[cfg(feature = "testing")]
pub fn confirmations() -> u64 {
    CONFIRMATIONS.with(std::cell::Cell::get)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_covers_its_order_and_larger_until_a_free() {
        let r = Refusals::default();
        assert!(!r.refuses(0));
        let p = r.begin(3);
        r.end(p, Err(Failure::Searched));
        assert!(!r.refuses(2));
        assert!(r.refuses(3) && r.refuses(9));
        r.freed();
        assert!(!r.refuses(3) && !r.refuses(9));
    }

    #[test]
    fn a_free_between_begin_and_refusal_keeps_the_refusal_out() {
        let r = Refusals::default();
        let p = r.begin(0);
        r.freed();
        r.end(p, Err(Failure::Searched));
        assert!(!r.refuses(0));
        // A stale confirmation cannot land on a later search's pending word either.
        let q = r.begin(0);
        r.end(p, Err(Failure::Searched));
        assert!(!r.refuses(0));
        r.end(q, Err(Failure::Searched));
        assert!(r.refuses(0));
    }

    #[test]
    fn a_successful_search_puts_back_the_refusal_it_replaced() {
        let r = Refusals::default();
        let p = r.begin(5);
        r.end(p, Err(Failure::Searched));
        let q = r.begin(2);
        r.end(q, Ok(0));
        assert!(r.refuses(5) && !r.refuses(4));
        // Unless something was freed meanwhile.
        let q = r.begin(2);
        r.freed();
        r.end(q, Ok(0));
        assert!(!r.refuses(5));
    }

    #[test]
    fn alloc_confirms_before_recording_and_answers_from_the_memo_after() {
        let r = Refusals::default();
        let mut calls = 0;
        let oom = |calls: &mut i32| {
            *calls += 1;
            Err(Error::OutOfMemory)
        };
        assert_eq!(
            r.alloc_counted(1, || oom(&mut calls)),
            Err(Error::OutOfMemory)
        );
        assert_eq!(calls, 2);
        assert_eq!(
            r.alloc_counted(1, || oom(&mut calls)),
            Err(Error::OutOfMemory)
        );
        assert_eq!(calls, 2);
        // Other errors are not refusals.
        r.freed();
        assert_eq!(
            r.alloc_counted(1, || Err(Error::WouldBlock)),
            Err(Error::WouldBlock)
        );
        assert!(!r.refuses(1));
        assert_eq!(r.alloc_counted(0, || Ok(7)), Ok(7));
    }

    #[test]
    fn a_free_ends_a_searched_refusal_only_if_it_covers_its_order() {
        let r = Refusals::default();
        let p = r.begin(9);
        assert!(r.end(p, Err(Failure::Searched)));
        r.freed_if(|k| k <= 8);
        assert!(r.refuses(9) && !r.refuses(8));
        r.freed_if(|k| k <= 9);
        assert!(!r.refuses(9));
        // A counted refusal ends at any free.
        let p = r.begin(9);
        assert!(r.end(p, Err(Failure::Counted)));
        assert!(r.refuses(9));
        r.freed_if(|_| false);
        assert!(!r.refuses(9));
    }

    #[test]
    fn a_free_that_sees_a_pending_word_keeps_a_counted_refusal_out() {
        let r = Refusals::default();
        // Seen by a free that covers nothing: a search still records its refusal...
        let p = r.begin(9);
        r.freed_if(|_| false);
        assert!(r.end(p, Err(Failure::Searched)));
        assert!(r.refuses(9));
        // ...a count does not, and leaves nothing behind for the next free to look at.
        let q = r.begin(4);
        r.freed_if(|_| false);
        assert!(r.end(q, Err(Failure::Counted)));
        assert!(!r.refuses(9));
        assert_eq!(r.word.load(Ordering::Relaxed), 0);
        // A free that covers the order clears the pending word: nothing is recorded.
        let p = r.begin(9);
        r.freed_if(|k| k == 9);
        assert!(!r.end(p, Err(Failure::Searched)));
        assert!(!r.refuses(9));
    }

    #[test]
    fn a_search_that_succeeds_after_a_free_puts_back_no_refusal() {
        let r = Refusals::default();
        let p = r.begin(9);
        r.end(p, Err(Failure::Counted));
        let q = r.begin(2);
        r.freed_if(|_| false);
        assert!(r.end(q, Ok(0)));
        assert_eq!(r.word.load(Ordering::Relaxed), 0);
        // Nothing freed: the refusal comes back, and a successful search leaves no word.
        let p = r.begin(9);
        r.end(p, Err(Failure::Searched));
        let q = r.begin(2);
        assert!(r.end(q, Ok(0)));
        assert!(r.refuses(9));
        r.freed();
        let q = r.begin(2);
        assert!(r.end(q, Ok(0)));
        assert_eq!(r.word.load(Ordering::Relaxed), 0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The memo over a toy allocator of one unit: a free sets the unit free with a `SeqCst`
    //! read-modify-write, then calls `freed`; an allocation reads the unit and takes it by a
    //! compare-and-swap if it looks free. A recorded refusal while the unit is free (and nobody else holds
    //! it) is the bug the protocol prevents.
    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicUsize};
    use loom::sync::Arc;
    use loom::thread;

    struct Toy {
        free: AtomicBool,
        memo: Refusals,
    }

    impl Toy {
        /// A search: reads the unit, and takes it only if it looks free.
        fn attempt(&self) -> Result<usize, Error> {
            if !self.free.load(Ordering::Acquire) {
                return Err(Error::OutOfMemory);
            }
            match self
                .free
                .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => Ok(0),
                Err(_) => Err(Error::OutOfMemory),
            }
        }

        fn free(&self) {
            self.free.swap(true, Ordering::SeqCst);
            self.memo.freed();
        }
    }

    /// One thread frees the unit (allocated at the start) while another allocates and gets
    /// refused: after both, a request must find the unit unless the allocator holds it.
    fn free_races_refusal(alloc: impl Fn(&Toy) -> Result<usize, Error> + Send + Sync + 'static) {
        let alloc = std::sync::Arc::new(alloc);
        loom::model(move || {
            let toy = Arc::new(Toy {
                free: AtomicBool::new(false),
                memo: Refusals::default(),
            });
            let freer = {
                let toy = toy.clone();
                thread::spawn(move || toy.free())
            };
            let got = alloc(&toy);
            freer.join().unwrap();
            if got.is_err() {
                // The unit is free now: the memo must not answer for it.
                assert_eq!(alloc(&toy), Ok(0), "a stale refusal outlived the free");
            }
        });
    }

    #[test]
    fn loom_refusal_never_outlives_a_free() {
        free_races_refusal(|toy| toy.memo.alloc_counted(0, || toy.attempt()));
    }

    /// Without the pending store (the failure recorded by a plain compare-and-swap from
    /// "nothing known"), a free that completed during the search is missed.
    #[test]
    #[should_panic(expected = "stale refusal")]
    fn loom_refusal_without_pending_fails() {
        free_races_refusal(|toy| {
            if toy.memo.refuses(0) {
                return Err(Error::OutOfMemory);
            }
            let seen = toy.memo.word.load(Ordering::Relaxed);
            let answer = toy.attempt();
            if answer.is_err() && seen & REFUSED == 0 {
                let _ = toy.memo.word.compare_exchange(
                    seen,
                    REFUSED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            answer
        });
    }

    /// Without the free's clear, the refusal recorded before the free stays.
    #[test]
    #[should_panic(expected = "stale refusal")]
    fn loom_refusal_without_the_free_clear_fails() {
        loom::model(|| {
            let toy = Arc::new(Toy {
                free: AtomicBool::new(false),
                memo: Refusals::default(),
            });
            let freer = {
                let toy = toy.clone();
                // The free without `freed`.
                thread::spawn(move || {
                    toy.free.swap(true, Ordering::SeqCst);
                })
            };
            let got = toy.memo.alloc_counted(0, || toy.attempt());
            freer.join().unwrap();
            if got.is_err() {
                assert_eq!(
                    toy.memo.alloc_counted(0, || toy.attempt()),
                    Ok(0),
                    "a stale refusal outlived the free"
                );
            }
        });
    }

    /// Without the fence after the pending store, the search may read the unit's old state
    /// while the free's load misses the pending store.
    #[test]
    #[should_panic(expected = "stale refusal")]
    fn loom_refusal_without_the_fence_fails() {
        free_races_refusal(|toy| {
            if toy.memo.refuses(0) {
                return Err(Error::OutOfMemory);
            }
            let word = PENDING | 1 << SEQ_SHIFT;
            toy.memo.word.store(word, Ordering::SeqCst);
            let answer = toy.attempt();
            if answer.is_err() {
                let _ = toy.memo.word.compare_exchange(
                    word,
                    REFUSED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            answer
        });
    }

    /// Two units that make one block of order 1 (a "huge frame"), with a counter of the
    /// frame (the child counter) and a counter that a search reads first (a tree counter,
    /// LLFree's, or NBBS's count of free units): a free sets its unit free, then raises the
    /// frame's counter, then the tree's, each a `SeqCst` read-modify-write, then tells the
    /// memo what it covers. A search of order 1 reads the tree counter, then takes the frame
    /// if its counter says every unit is free.
    struct Frame {
        units: [AtomicBool; 2],
        child: AtomicUsize,
        tree: AtomicUsize,
        memo: Refusals,
    }

    /// How a free of [`Frame`] decides what it covers.
    #[derive(Clone, Copy)]
    enum Covers {
        /// Order 0 always; order 1 if the frame's counter, read after the tree counter's
        /// change, says every unit is free (the allocators' rule).
        Reread,
        /// As `Reread`, but from the frame counter's own change: whether this free was the
        /// one that completed the frame. Wrong: the other free's raise of the tree counter
        /// may be what the search missed.
        AtChange,
    }

    impl Frame {
        fn new(free: [bool; 2]) -> Frame {
            let n = free.iter().filter(|&&f| f).count();
            Frame {
                units: free.map(AtomicBool::new),
                child: AtomicUsize::new(n),
                tree: AtomicUsize::new(n),
                memo: Refusals::default(),
            }
        }

        fn free(&self, unit: usize, covers: Covers) {
            assert!(!self.units[unit].swap(true, Ordering::SeqCst));
            let whole = self.child.fetch_add(1, Ordering::SeqCst) + 1 == 2;
            self.tree.fetch_add(1, Ordering::SeqCst);
            self.memo.freed_if(|k| match covers {
                Covers::Reread => k == 0 || self.child.load(Ordering::SeqCst) == 2,
                Covers::AtChange => k == 0 || whole,
            });
        }

        /// A search for the block of order 1.
        fn attempt(&self) -> Result<usize, Failure> {
            if self.tree.load(Ordering::SeqCst) < 2 {
                return Err(Failure::Searched);
            }
            match self
                .child
                .compare_exchange(2, 0, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.tree.fetch_sub(2, Ordering::SeqCst);
                    for u in &self.units {
                        assert!(u.swap(false, Ordering::Relaxed));
                    }
                    Ok(0)
                }
                Err(_) => Err(Failure::Searched),
            }
        }

        fn alloc(&self) -> Result<usize, Error> {
            self.memo.alloc(1, || (self.attempt(), None))
        }
    }

    /// Both units of the frame are freed at once, one on each thread, while the main thread
    /// (after its free) asks for the frame: after both, the frame is free, so the memo must
    /// not refuse it.
    fn frees_complete_a_frame(covers: Covers) {
        loom::model(move || {
            let frame = Arc::new(Frame::new([false, false]));
            let freer = {
                let frame = frame.clone();
                thread::spawn(move || frame.free(1, covers))
            };
            frame.free(0, covers);
            let got = frame.alloc();
            freer.join().unwrap();
            if got.is_err() {
                assert_eq!(frame.alloc(), Ok(0), "a stale refusal outlived the frees");
            }
        });
    }

    #[test]
    fn loom_refusal_frees_that_complete_a_frame_end_it() {
        frees_complete_a_frame(Covers::Reread);
    }

    /// The free that completes the frame may tell the memo before the search begins, and
    /// the other free, whose raise of the tree counter the search missed, then sees the
    /// refusal but did not complete the frame itself.
    #[test]
    #[should_panic(expected = "stale refusal")]
    fn loom_refusal_covers_read_at_the_change_fails() {
        frees_complete_a_frame(Covers::AtChange);
    }

    /// A free of a unit outside the frame covers only order 0: a refusal of the frame (one
    /// unit of it is still taken) stays, whether the free comes before the refusal, during
    /// its confirmation or after it, and it is true.
    #[test]
    fn loom_refusal_a_small_free_keeps_a_big_refusal() {
        loom::model(|| {
            let frame = Arc::new(Frame::new([true, false]));
            let other = Arc::new(AtomicBool::new(false));
            let freer = {
                let (frame, other) = (frame.clone(), other.clone());
                thread::spawn(move || {
                    other.store(true, Ordering::SeqCst);
                    // Counted in the tree, as a unit of another frame of the tree is.
                    frame.tree.fetch_add(1, Ordering::SeqCst);
                    frame.memo.freed_if(|k| k == 0);
                })
            };
            assert_eq!(frame.alloc(), Err(Error::OutOfMemory));
            freer.join().unwrap();
            assert!(
                frame.memo.refuses(1),
                "a free that covers nothing ended a refusal"
            );
            assert!(!frame.memo.refuses(0));
            assert_eq!(
                frame.attempt(),
                Err(Failure::Searched),
                "the refusal is true"
            );
        });
    }

    /// A unit and a count of free units: a search refuses by the count alone. A free of
    /// the unit covers nothing (as a free elsewhere in the heap would not), so only the
    /// count's kind of refusal ([`Failure::Counted`]) keeps the refusal from outliving it.
    fn count_races_free(kind: Failure) {
        loom::model(move || {
            let unit = Arc::new((
                AtomicBool::new(false),
                AtomicUsize::new(0),
                Refusals::default(),
            ));
            let freer = {
                let unit = unit.clone();
                thread::spawn(move || {
                    unit.0.store(true, Ordering::SeqCst);
                    unit.1.fetch_add(1, Ordering::SeqCst);
                    unit.2.freed_if(|_| false);
                })
            };
            let attempt = || {
                if unit.1.load(Ordering::SeqCst) == 0 {
                    return Err(kind);
                }
                match unit.0.swap(false, Ordering::SeqCst) {
                    true => Ok(0),
                    false => Err(kind),
                }
            };
            let got = unit.2.alloc(0, || (attempt(), None));
            freer.join().unwrap();
            if got.is_err() {
                assert_eq!(
                    unit.2.alloc(0, || (attempt(), None)),
                    Ok(0),
                    "a stale refusal outlived the free"
                );
            }
        });
    }

    #[test]
    fn loom_refusal_a_counted_refusal_ends_at_any_free() {
        count_races_free(Failure::Counted);
    }

    /// The same refusal recorded as a search's: the free, which covers nothing, leaves it.
    #[test]
    #[should_panic(expected = "stale refusal")]
    fn loom_refusal_a_count_taken_for_a_search_fails() {
        count_races_free(Failure::Searched);
    }
}
