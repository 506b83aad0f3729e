//! The refusal memo: one atomic word per allocator that remembers "every request of order
//! `k` or more was refused, and nothing has been freed since", so that a caller looping on a
//! full (or fragmented) heap gets [`Error::OutOfMemory`] after one load instead of a search.
//!
//! Only a free (or anything else that makes units findable again: a give-back of units an
//! allocation took and could not use, a rollback, a tree brought online, a cache spilling
//! into its backend) can make a refused request succeed; allocations never create free
//! blocks. So a refusal stays true until the next such event, and every such event clears
//! the word.
//!
//! ```text
//!  63                               8  7        6         5      0
//! [ sequence number                  | PENDING | REFUSED | order  ]
//!  0: nothing known
//! ```
//!
//! # Protocol
//!
//! - **Allocation** ([`Refusals::alloc`]): a request of order `k` first loads the word; a
//!   `REFUSED(k')` with `k' <= k` answers at once. Otherwise it runs its allocation; if that
//!   fails it confirms the failure: it stores `PENDING(k, seq)` (the sequence number makes
//!   every store distinct, so a stale compare-and-swap cannot succeed), issues a `SeqCst`
//!   fence, allocates again from scratch and, if that fails too, swaps `PENDING(k, seq)` for
//!   `REFUSED(k)` by a compare-and-swap. The first failure is never recorded: only an
//!   allocation that began after the fence is.
//! - **Free** ([`Refusals::freed`]): after its last state change, a free loads the word
//!   (`SeqCst`) and, only if it is non-zero, clears it (a `SeqCst` swap). Without memory pressure
//!   the word stays 0, so a free costs one load of a line nobody writes.
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
//! seq)` or a later value and clears it, and S's compare-and-swap fails. The same holds for
//! a later allocation S2 whose `PENDING` follows F's clear (`SeqCst`) in the word's order:
//! the clear precedes S2's fence, so S2 sees `w`. A reader that loads `REFUSED` after a
//! free that happened before it reads that free's clear or a later value (coherence), so a
//! refusal never outlives a free that the caller knows of; with frees in flight, the refusal
//! is linearised before them.
//!
//! Where a free's writes are made under a lock that the allocation also takes, the lock
//! orders them instead: either the allocation's critical section comes after the free's
//! (and sees its writes), or before it, and then the fence precedes the free's load in
//! happens-before, so that load sees `PENDING`. Rare give-backs whose writes are neither
//! `SeqCst` nor locked use [`Refusals::released`], which fences first.
//!
//! Loom models `SeqCst` loads and read-modify-writes as acquire/release and only fences as
//! sequentially consistent, so under `cfg(loom)` [`Refusals::freed`] issues the fence that
//! the argument above gets, in real builds, from the `SeqCst` accesses.
//!
//! # What each allocator must do
//!
//! Route every allocation of the default class through [`Refusals::alloc`], where the
//! attempt answers [`Error::OutOfMemory`] only for a failure that is complete (no free
//! block of the order was found by a search that saw every counter; a failure while another
//! core's reservation move was in flight is answered otherwise and not recorded), and call
//! [`Refusals::freed`] (or [`Refusals::released`]) after every event that makes units
//! findable, give-backs of an allocation's own speculative takes included: a stale refusal
//! would otherwise outlive units that are free.

use crate::sync::atomic::{fence, AtomicU64, Ordering};
use crate::Error;

/// The order bits of a memo word.
const ORDER: u64 = 0x3f;
/// A refusal of every order at least the word's.
const REFUSED: u64 = 1 << 6;
/// An allocation confirming its failure; the sequence number is above.
const PENDING: u64 = 1 << 7;
/// Where the sequence number of a pending word starts.
const SEQ_SHIFT: u32 = 8;

/// A refusal memo (module docs). Shares the line of whatever it is placed beside: it is
/// written only under memory pressure.
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
    /// A memo that knows nothing.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Refusals {
        Refusals {
            word: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// A memo that knows nothing (loom's atomics are not `const`).
    #[cfg(loom)]
    pub(crate) fn new() -> Refusals {
        Refusals {
            word: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// Whether a request of `order` is known to fail: a refusal of `order` or less was
    /// recorded and nothing was freed since. Relaxed: it publishes no data, and coherence
    /// alone orders it after any clear that happened before it.
    #[inline]
    pub(crate) fn refuses(&self, order: u32) -> bool {
        let w = self.word.load(Ordering::Relaxed);
        w & REFUSED != 0 && w & ORDER <= u64::from(order)
    }

    /// Runs `attempt` (an allocation of `order`) unless the memo already refuses `order`;
    /// confirms an [`Error::OutOfMemory`] by a second attempt after [`Refusals::begin`], and
    /// records it if that fails too. `attempt` answers `OutOfMemory` only for a complete
    /// failure (module docs).
    #[inline]
    pub(crate) fn alloc(
        &self,
        order: u32,
        attempt: impl FnMut() -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        self.run(order, false, attempt)
    }

    /// [`Refusals::alloc`] for an attempt that may give back units it took and could not use
    /// (LLFree's counters) without telling the memo at each give-back: the memo is told once
    /// after each attempt instead, which spares a search its own give-backs. Telling it at
    /// the give-back itself would clear the search's own pending word, and a search that
    /// takes and gives back units tree by tree (a fragmented heap) would never record its
    /// refusal. Told after the attempt, a search that missed those units while the attempt
    /// held them may record a refusal for the moment until the attempt ends and clears it:
    /// the transient failure near exhaustion such an allocator has anyway. The attempt's
    /// give-backs must be `SeqCst` read-modify-writes, as a free's writes.
    #[inline]
    pub(crate) fn alloc_giving_back(
        &self,
        order: u32,
        attempt: impl FnMut() -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        self.run(order, true, attempt)
    }

    /// [`Refusals::alloc`], or [`Refusals::alloc_giving_back`] where `gives_back`.
    #[inline]
    fn run(
        &self,
        order: u32,
        gives_back: bool,
        mut attempt: impl FnMut() -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        if self.refuses(order) {
            return Err(Error::OutOfMemory);
        }
        let answer = attempt();
        if gives_back {
            self.freed();
        }
        match answer {
            Err(Error::OutOfMemory) => self.confirm(order, gives_back, attempt),
            other => other,
        }
    }

    /// The second attempt of [`Refusals::alloc`], after the pending store and the fence;
    /// `gives_back` as for [`Refusals::alloc_giving_back`]: then a word that is no longer
    /// this search's own is cleared after the attempt, since its give-backs may be what
    /// another search missed.
    #[cold]
    #[inline(never)]
    fn confirm(
        &self,
        order: u32,
        gives_back: bool,
        mut attempt: impl FnMut() -> Result<usize, Error>,
    ) -> Result<usize, Error> {
        let pending = self.begin(order);
        let answer = attempt();
        let settled = match answer {
            Err(Error::OutOfMemory) => self.refused(pending),
            _ => self.not_refused(pending),
        };
        if gives_back && !settled {
            self.freed();
        }
        answer
    }

    /// Announces a search for a block of `order` that may end in a refusal: every read of
    /// the allocator's state that decides the refusal must come after this.
    pub(crate) fn begin(&self, order: u32) -> Pending {
        // Distinct per begin (it wraps after 2^56, far beyond one search's lifetime).
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let word = seq << SEQ_SHIFT | PENDING | (u64::from(order) & ORDER);
        let replaced = self.word.swap(word, Ordering::Relaxed);
        // Y of the module docs: the search's reads come after this in the single order S.
        fence(Ordering::SeqCst);
        Pending { word, replaced }
    }

    /// Records the refusal of a search begun with `pending`, unless anything was freed
    /// since (a free cleared the word) or another search began since (it records its own).
    /// Whether the word was still `pending`'s.
    pub(crate) fn refused(&self, pending: Pending) -> bool {
        let refused = REFUSED | (pending.word & ORDER);
        self.word
            .compare_exchange(pending.word, refused, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Ends a search begun with `pending` that did not end in a refusal: a refusal it
    /// replaced is put back if nothing was freed since, since allocations create no blocks.
    /// Whether the word was still `pending`'s.
    pub(crate) fn not_refused(&self, pending: Pending) -> bool {
        let back = match pending.replaced & REFUSED != 0 {
            true => pending.replaced,
            false => pending.word,
        };
        self.word
            .compare_exchange(pending.word, back, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// After a free whose writes that make its units findable are `SeqCst` read-modify-writes
    /// (or made under a lock that every search takes): forgets any refusal, and makes any
    /// search pending now fail to record one. One load when nothing is recorded.
    #[inline]
    pub(crate) fn freed(&self) {
        // Loom models SeqCst accesses as acquire/release: the fence gives its model the
        // order that the SeqCst write and load give in a real build (module docs).
        #[cfg(loom)]
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::SeqCst) != 0 {
            self.clear();
        }
    }

    /// After a give-back whose writes are not `SeqCst` (a rolled-back allocation): a fence,
    /// then [`Refusals::freed`]. For rare paths only: a fence costs tens of cycles.
    pub(crate) fn released(&self) {
        fence(Ordering::SeqCst);
        self.freed();
    }

    #[cold]
    #[inline(never)]
    fn clear(&self) {
        // A read-modify-write, not a store: it lands after a refusal recorded since the load
        // (which read the pending word), as a store must too; loom orders only the former.
        self.word.swap(0, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_covers_its_order_and_larger_until_a_free() {
        let r = Refusals::new();
        assert!(!r.refuses(0));
        let p = r.begin(3);
        r.refused(p);
        assert!(!r.refuses(2));
        assert!(r.refuses(3) && r.refuses(9));
        r.freed();
        assert!(!r.refuses(3) && !r.refuses(9));
    }

    #[test]
    fn a_free_between_begin_and_refusal_keeps_the_refusal_out() {
        let r = Refusals::new();
        let p = r.begin(0);
        r.freed();
        r.refused(p);
        assert!(!r.refuses(0));
        // A stale confirmation cannot land on a later search's pending word either.
        let q = r.begin(0);
        r.refused(p);
        assert!(!r.refuses(0));
        r.refused(q);
        assert!(r.refuses(0));
    }

    #[test]
    fn a_successful_search_puts_back_the_refusal_it_replaced() {
        let r = Refusals::new();
        let p = r.begin(5);
        r.refused(p);
        let q = r.begin(2);
        r.not_refused(q);
        assert!(r.refuses(5) && !r.refuses(4));
        // Unless something was freed meanwhile.
        let q = r.begin(2);
        r.freed();
        r.not_refused(q);
        assert!(!r.refuses(5));
    }

    #[test]
    fn alloc_confirms_before_recording_and_answers_from_the_memo_after() {
        let r = Refusals::new();
        let mut calls = 0;
        let oom = |calls: &mut i32| {
            *calls += 1;
            Err(Error::OutOfMemory)
        };
        assert_eq!(r.alloc(1, || oom(&mut calls)), Err(Error::OutOfMemory));
        assert_eq!(calls, 2);
        assert_eq!(r.alloc(1, || oom(&mut calls)), Err(Error::OutOfMemory));
        assert_eq!(calls, 2);
        // Other errors are not refusals.
        r.freed();
        assert_eq!(
            r.alloc(1, || Err(Error::WouldBlock)),
            Err(Error::WouldBlock)
        );
        assert!(!r.refuses(1));
        assert_eq!(r.alloc(0, || Ok(7)), Ok(7));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The memo over a toy allocator of one unit: a free sets the unit free with a `SeqCst`
    //! read-modify-write, then calls `freed`; an allocation reads the unit and takes it by a
    //! compare-and-swap if it looks free. A recorded refusal while the unit is free (and nobody else holds
    //! it) is the bug the protocol prevents.
    use super::*;
    use loom::sync::atomic::AtomicBool;
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
                memo: Refusals::new(),
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
        free_races_refusal(|toy| toy.memo.alloc(0, || toy.attempt()));
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
                memo: Refusals::new(),
            });
            let freer = {
                let toy = toy.clone();
                // The free without `freed`.
                thread::spawn(move || {
                    toy.free.swap(true, Ordering::SeqCst);
                })
            };
            let got = toy.memo.alloc(0, || toy.attempt());
            freer.join().unwrap();
            if got.is_err() {
                assert_eq!(
                    toy.memo.alloc(0, || toy.attempt()),
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
}
