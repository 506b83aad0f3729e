//! The moves of free counts in flight: the one thing LLFree's complete fallback must know to
//! tell "no block is free" from "the free units were in another core's hands".
//!
//! The free units of a tree live in its entry's `cU` and in the `cP` of the core holding it.
//! A reservation change takes a count out of every counter for a moment: `Trees::search` and
//! `Trees::reserve` move `cU` into the reserving core's hands until `install` publishes it
//! as `cP`; a `Local::swap` moves the old `cP` into the swapping core's hands until
//! `Trees::unreserve` gives it back to `cU`; the sync of Fig. 14a (1a) moves `cU` out until it
//! is credited. A scan that meets such a count nowhere may fail although most units are free.
//!
//! Every such move is bracketed ([`Moves::bracket`]): begun before the count leaves its
//! counter, ended after it is in a counter again. The word counts the moves in flight in its
//! low half and the moves finished in its high half:
//!
//! ```text
//!  63                32 31                 0
//! [ finished (wraps)   ][ in flight         ]
//! ```
//!
//! A scan that read the word as `s0` (nothing in flight) before it and reads `s0` again after
//! it saw every count in a counter whenever it looked: a move whose count it missed began
//! before the counter read that missed it (a begin changes the low half, so `s1 != s0`), or,
//! if it began before `s0`, it was in flight at `s0` (excluded) or ended before `s0`, and
//! then its count was published before the scan looked. The orderings that make this hold:
//!
//! - `begin` may be relaxed: the count leaves its counter by a read-modify-write with release
//!   semantics (`swap`/CAS `AcqRel`) after it, so a scanner whose acquire read of that counter
//!   sees the count gone (that write or a later read-modify-write of its release sequence)
//!   happens after `begin`, and so does its acquire read of `s1`, which by coherence sees
//!   `begin` or a later value.
//! - `end` is a release after the publishing read-modify-write, and the scanner reads `s0` with
//!   acquire: if `s0` includes the end, the scanner's counter reads see the published count.
//!
//! The high half wraps after 2^32 moves; a scan would have to overlap exactly a multiple of
//! 2^32 moves to be fooled.
//!
//! Only reservation changes touch this word: allocation from the core's own `cP` and frees
//! never do. Units taken from a counter for one allocation (until it finds its block or
//! gives them back) are not moves: they belong to that allocation.

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;

/// One move begun (low half).
const BEGUN: u64 = 1;
/// One move finished: in flight - 1, finished + 1.
const FINISHED: u64 = (1 << 32) - 1;

/// A reading of the move counter, taken before a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot(u64);

/// The shared counter of moves (one cache line: it is written only by reservation changes).
pub(crate) struct Moves(CachePadded<AtomicU64>);

impl Moves {
    pub(crate) fn new() -> Moves {
        Moves(CachePadded::new(AtomicU64::new(0)))
    }

    /// Runs `f` as one move, begun before a count may leave every counter and ended after
    /// it is in a counter again; `f` says whether any count left a counter at all (a failed
    /// search moved nothing, and need not send scanners round again).
    #[inline]
    pub(crate) fn bracket<R>(&self, f: impl FnOnce() -> (R, bool)) -> R {
        self.0.fetch_add(BEGUN, Ordering::Relaxed);
        let (r, moved) = f();
        match moved {
            true => self.0.fetch_add(FINISHED, Ordering::Release),
            false => self.0.fetch_sub(BEGUN, Ordering::Release),
        };
        r
    }

    /// Reads the counter before a scan.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot(self.0.load(Ordering::Acquire))
    }

    /// Whether no count was outside every counter at any time since `before` was read: no
    /// move was in flight then and none has begun since.
    pub(crate) fn quiet_since(&self, before: Snapshot) -> bool {
        // The low half: the moves in flight.
        before.0 as u32 == 0 && self.snapshot() == before
    }
}
