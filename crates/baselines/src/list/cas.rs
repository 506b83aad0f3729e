//! A lock-free LIFO list (Treiber stack) whose head carries an ABA tag.

use super::links::Links;
use super::{FreeStack, Unit};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;
use crate::Error;

/// A list head packed with a change counter in one word:
///
/// ```text
///  63            32 31             0
/// +----------------+----------------+
/// |      tag       |  head unit/NIL |
/// +----------------+----------------+
/// ```
///
/// Every successful update bumps the tag. A pop reads the head `u` and `links[u]`, then
/// CASes the head to `links[u]`; if meanwhile `u` was popped and pushed back with another
/// successor (ABA), the head word's tag differs and the stale CAS fails. (A reader stalled
/// across exactly 2^32 updates could still be fooled; that is the usual bound of tagging.)
pub(crate) struct TaggedHead(AtomicU64);

impl TaggedHead {
    /// A head over the list starting at raw unit `first`.
    pub(super) fn new(first: u32) -> Self {
        TaggedHead(AtomicU64::new(u64::from(first)))
    }

    /// Pushes `unit`. Release on success publishes its link to the popper that takes it.
    pub(super) fn push(&self, links: &Links, unit: Unit) {
        // A push always has a new head, so the update cannot fail.
        let _ = self.update(|head| Some(links.push(head, unit)));
    }

    /// Pops the first unit, or `None` if the list was empty when read.
    pub(super) fn pop(&self, links: &Links) -> Option<Unit> {
        let old = self
            .update(|head| links.pop(head).map(|(_, next)| next))
            .ok()?;
        Unit::from_raw(old as u32)
    }

    /// The one CAS loop: applies `step` to the head unit until the CAS succeeds (returning
    /// the old word) or `step` declines (returning `Err`). Acquire on every read, so the
    /// links of the unit read are the ones its pusher wrote.
    fn update(&self, mut step: impl FnMut(u32) -> Option<u32>) -> Result<u64, u64> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                let head = step(word as u32)?;
                let tag = ((word >> 32) as u32).wrapping_add(1);
                Some(u64::from(tag) << 32 | u64::from(head))
            })
    }
}

/// One lock-free list for all cores: every operation contends on the head's cache line.
pub struct CasStack {
    head: CachePadded<TaggedHead>,
    links: Links,
}

impl FreeStack for CasStack {
    const LOCK_FREE: bool = true;

    fn full(units: u32, _cores: usize) -> Result<Self, Error> {
        let links = Links::new(units)?;
        let head = CachePadded::new(TaggedHead::new(links.chain(0..units)));
        Ok(CasStack { head, links })
    }

    fn push(&self, unit: Unit, _core: usize) {
        self.head.push(&self.links, unit);
    }

    fn pop(&self, _core: usize) -> Option<Unit> {
        self.head.pop(&self.links)
    }
}

#[cfg(all(test, loom))]
mod tests {
    use alloc::sync::Arc;
    use alloc::vec::Vec;

    use loom::thread;

    use crate::list::{CasList, PerCoreLists};
    use crate::{BlockAlloc, Config, Error};

    /// Checks `f` under loom, exhaustively or with at most `preemptions` preemptions per
    /// execution (an unbounded run of the heaviest test is too long to run routinely;
    /// bounded, it still covers every interleaving with up to that many forced switches).
    fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = preemptions;
        builder.check(f);
    }

    /// Allocates everything left, checks it is exactly `expect` units (no loss, no
    /// duplicate), and frees it again.
    fn drain_all(alloc: &dyn BlockAlloc, expect: usize) {
        let mut got: Vec<usize> = core::iter::from_fn(|| alloc.alloc(0, 0).ok()).collect();
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), expect, "units left {got:?}");
        assert_eq!(alloc.free_units(), 0);
        for u in got {
            alloc.free(u, 0, 0).unwrap();
        }
    }

    #[test]
    fn loom_cas_two_threads_alloc_and_free_never_share_a_unit() {
        model(Some(3), || {
            let list = Arc::new(CasList::new(Config::new(2, 0)).unwrap());
            let threads: Vec<_> = (0..2)
                .map(|t| {
                    let list = list.clone();
                    thread::spawn(move || {
                        let u = list.alloc(0, t).unwrap();
                        list.free(u, 0, t).unwrap();
                        list.alloc(0, t).unwrap()
                    })
                })
                .collect();
            let got: Vec<usize> = threads.into_iter().map(|h| h.join().unwrap()).collect();
            assert_ne!(got[0], got[1]);
            assert_eq!(list.alloc(0, 0), Err(Error::OutOfMemory));
            for u in got {
                list.free(u, 0, 0).unwrap();
            }
            drain_all(&*list, 2);
        });
    }

    /// The ABA scenario: one thread pops while another pops the same head, pops its
    /// successor and pushes the first back. Without the tag the first thread's CAS would
    /// install the successor, which is allocated, as the head.
    #[test]
    fn loom_cas_aba_pop_does_not_resurrect_an_allocated_unit() {
        model(None, || {
            let list = Arc::new(CasList::new(Config::new(3, 0)).unwrap());
            let slow = {
                let list = list.clone();
                thread::spawn(move || list.alloc(0, 0).unwrap())
            };
            let a = list.alloc(0, 1).unwrap();
            let b = list.alloc(0, 1).unwrap();
            list.free(a, 0, 1).unwrap();
            let s = slow.join().unwrap();
            assert_ne!(s, b);
            // Whatever the interleaving, `s` and `b` are out and exactly one unit is left.
            drain_all(&*list, 1);
            list.free(s, 0, 0).unwrap();
            list.free(b, 0, 0).unwrap();
            drain_all(&*list, 3);
        });
    }

    #[test]
    fn loom_cas_raced_double_free_frees_once() {
        model(None, || {
            let list = Arc::new(CasList::new(Config::new(2, 0)).unwrap());
            let u = list.alloc(0, 0).unwrap();
            let other = {
                let list = list.clone();
                thread::spawn(move || list.free(u, 0, 1))
            };
            let mine = list.free(u, 0, 0);
            let theirs = other.join().unwrap();
            let mut results = [mine, theirs];
            results.sort_by_key(|r| r.is_err());
            assert_eq!(results, [Ok(()), Err(Error::NotAllocated)]);
            drain_all(&*list, 2);
        });
    }

    /// Two threads with the same core hint share one per-core list; a third core's list is
    /// empty and steals.
    #[test]
    fn loom_percore_same_core_and_stealing_never_share_a_unit() {
        model(None, || {
            let lists = Arc::new(PerCoreLists::new(Config::new(2, 0).with_cores(2)).unwrap());
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let lists = lists.clone();
                    thread::spawn(move || lists.alloc(0, 0).unwrap())
                })
                .collect();
            let got: Vec<usize> = threads.into_iter().map(|h| h.join().unwrap()).collect();
            assert_ne!(got[0], got[1]);
            for u in got {
                lists.free(u, 0, 1).unwrap();
            }
            drain_all(&*lists, 2);
        });
    }
}
