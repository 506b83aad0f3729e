//! What starts at each unit: nothing, a block handed to a caller, or a block in a cache.
//!
//! The backend sees cached blocks as allocated, so it cannot tell a caller's block from
//! a cached (free) one. This map can, and it alone decides every `free` of a cached order.
//! A block that a cache handed out records that cache as its holder (`Owned`): its state
//! changes only under that cache's lock, so a free takes the holder's lock, checks the
//! state there and ends the block with a plain store, one locked instruction in all (the
//! lock), where a compare-and-swap on the state as well would be a second. A block handed
//! out with no cache held (straight from the backend, or adopted), or held by a cache past
//! the first [`OWNERS`], is `Live`: one CAS from `Live` lets exactly one of racing frees
//! through. Either way the block then goes to a cache or back to the backend. Blocks of
//! orders that are never cached are not recorded: the backend decides their frees.
//!
//! A block handed out while its cache sees a stream of allocations that no free feeds (see
//! *Streams* in the [`cached`](super) module) is `Direct`: its free never parks it, but sends
//! it straight back to the backend, which has it allocated to the caller and no one else, so
//! the backend's own free decides racing frees: exactly one of them finds the block
//! allocated there. The table only names the route, with a plain load, and records the
//! block `Free` with a plain store before the backend has it, so that no later free of it
//! stops anywhere but at the table; no lock and no compare-and-swap of the caches' own.
//! A `Direct` state is written only by the thread that just got the block (from its cache
//! or the backend) and is left only by a free, so a free that reads it has the right
//! route, unless it races the block's free and reuse (a stale double free), where no
//! allocator can tell the old owner's free from the new owner's block.
//!
//! A state names the block's order by its slot in the caches' policy (its list), so that
//! a byte has room for the holders: `Free`, then per slot `Cached`, `Live`, `Direct` and
//! `Owned` by each of [`OWNERS`] caches.

use super::cache::{Policy, MAX_SLOTS};
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::table::Table;
use crate::{BlockAlloc, Error};

/// How many caches (the first, by index) can hold the blocks they hand out; the blocks of
/// the others are `Live`.
pub(crate) const OWNERS: usize = (u8::MAX as usize - 3 * MAX_SLOTS) / MAX_SLOTS;

/// The state of the block of a cached order starting at a unit; the order is named by its
/// slot in the caches' policy. Units inside a block (not its first), units free in the
/// backend and blocks of uncached orders are `Free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// No caller's block of a cached order, and no cached block, starts here.
    Free,
    /// A block of the order at this slot starting here is allocated by a caller; a CAS
    /// from this state decides its free.
    Live(usize),
    /// A block of the order at this slot starting here is allocated by a caller and held by
    /// this cache (by index, below [`OWNERS`]): only the holder of that cache's lock changes
    /// this state.
    Owned(usize, usize),
    /// A block of the order at this slot starting here is allocated by a caller, who got it
    /// in a stream of allocations: its free goes straight to the backend, which decides it.
    Direct(usize),
    /// A block of the order at this slot starting here sits in a per-core cache (free to
    /// callers, allocated in the backend).
    Cached(usize),
}

impl State {
    #[inline]
    fn encode(self) -> u8 {
        let code = match self {
            State::Free => 0,
            State::Cached(slot) => 1 + slot,
            State::Live(slot) => 1 + MAX_SLOTS + slot,
            State::Direct(slot) => 1 + 2 * MAX_SLOTS + slot,
            State::Owned(slot, cache) => 1 + (3 + cache) * MAX_SLOTS + slot,
        };
        debug_assert!(code <= usize::from(u8::MAX), "{self:?}");
        code as u8
    }

    #[inline]
    fn decode(byte: u8) -> State {
        let Some(code) = usize::from(byte).checked_sub(1) else {
            return State::Free;
        };
        let slot = code % MAX_SLOTS;
        match code / MAX_SLOTS {
            0 => State::Cached(slot),
            1 => State::Live(slot),
            2 => State::Direct(slot),
            kind => State::Owned(slot, kind - 3),
        }
    }
}

/// One [`State`] per unit, all `Free` (zero) at first.
pub(crate) struct BlockStates(pub(crate) Table<AtomicU8>);

impl BlockStates {
    /// Records the block at `index`, which the caller owns exclusively (just taken from the
    /// backend or a cache, or about to be given back to the backend), or whose state is
    /// `Owned` by the cache the caller holds.
    #[inline]
    pub(crate) fn set(&self, index: usize, state: State) {
        self.0[index].store(state.encode(), Ordering::Release);
    }

    /// The state recorded at `index` (a snapshot).
    #[inline]
    pub(crate) fn get(&self, index: usize) -> State {
        State::decode(self.0[index].load(Ordering::Acquire))
    }

    /// Whether a caller's block starts at `index` (`Live`, `Owned` or `Direct`; false past
    /// the table): a state that is set only once the block is the caller's and left before
    /// it reaches a cache or the backend.
    #[inline]
    pub(crate) fn is_held(&self, index: usize) -> bool {
        self.0.get(index).is_some_and(|byte| {
            byte.load(Ordering::Acquire) > State::Cached(MAX_SLOTS - 1).encode()
        })
    }

    /// Moves the block at `index` from `from` to `to` with a plain load and store; false
    /// (nothing changed) if the state is anything else. Only for a state that no one but the
    /// caller leaves meanwhile: a block `Owned` by the cache whose lock the caller holds, or
    /// the caller's `Direct` block, whose free the backend decides next (see the module
    /// docs). One comparison of the byte, without decoding it.
    #[inline]
    pub(crate) fn end(&self, index: usize, from: State, to: State) -> bool {
        let found = self.0[index].load(Ordering::Acquire) == from.encode();
        if found {
            self.set(index, to);
        }
        found
    }

    /// Records the blocks `alloc` has out whose order `policy` caches as live, so that their
    /// frees are decided here as those of blocks handed out through the caches: one
    /// [`BlockAlloc::next_block`] per block, in address order, until every allocated unit is
    /// accounted for. Only while no one else can reach `alloc` (its answers must hold).
    pub(crate) fn adopt(&self, alloc: &impl BlockAlloc, policy: &Policy) -> Result<(), Error> {
        let mut out = alloc.total_units().saturating_sub(alloc.free_units());
        let mut at = 0;
        while out > 0 {
            let Some((start, order)) = alloc.next_block(at)? else {
                break;
            };
            if let Some(slot) = policy.slot(order).filter(|_| start >= at) {
                self.set(start, State::Live(slot));
            }
            // A block never starts before the walk; `max` only keeps a wrong answer from
            // stalling it.
            let end = (start + (1 << order)).max(at + 1);
            out = out.saturating_sub(end - start.max(at));
            at = end;
        }
        Ok(())
    }

    /// The slot of the order of the `Direct` block at `index`, if one is recorded there
    /// (`None` also for an `index` past the table): one load and one comparison, without
    /// the caller's order, so that a free that is not of a `Direct` block pays only this.
    /// Where it is `Some`, a block of that order was handed out at `index`, so `index` is in
    /// range and aligned for it.
    #[inline]
    pub(crate) fn direct_at(&self, index: usize) -> Option<usize> {
        let byte = self.0.get(index)?.load(Ordering::Acquire);
        let slot = usize::from(byte.wrapping_sub(State::Direct(0).encode()));
        (slot < MAX_SLOTS).then_some(slot)
    }

    /// Ends the caller's `Live` block at `index` of the order at `slot` by moving it to
    /// `to`; else the state found there. A state read as anything but that `Live` one is
    /// answered without a compare-and-swap (a held block's free goes on under its holder's
    /// lock).
    #[inline]
    pub(crate) fn release(&self, index: usize, slot: usize, to: State) -> Result<(), State> {
        let (live, byte) = (State::Live(slot).encode(), &self.0[index]);
        match byte.load(Ordering::Acquire) {
            found if found != live => Err(State::decode(found)),
            _ => byte
                .compare_exchange(live, to.encode(), Ordering::AcqRel, Ordering::Acquire)
                .map(drop)
                .map_err(State::decode),
        }
    }
}

/// The error a free answers where it finds `found`, not a caller's block of its order, as
/// far as the table knows: a caller's block of another order, or none.
pub(crate) fn refusal(found: State) -> Error {
    match found {
        State::Live(_) | State::Owned(..) | State::Direct(_) => Error::OrderMismatch,
        State::Free | State::Cached(_) => Error::NotAllocated,
    }
}

/// The one compare-and-swap that decides every free of a cached order, under racing frees.
#[cfg(all(test, loom))]
pub(super) mod loom_tests {
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// Runs `f` on `shared` in another thread.
    pub(in crate::magazine::cached) fn on_another_thread<
        S: Send + Sync + 'static,
        T: Send + 'static,
    >(
        shared: &Arc<S>,
        f: impl FnOnce(&S) -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let shared = shared.clone();
        thread::spawn(move || f(&shared))
    }

    /// A free of the `Live` block at `index` of the order at `slot`, answered as `Cached`
    /// answers it (no block here is `Owned`, which `Cached` sends to its holder).
    fn end(states: &BlockStates, index: usize, slot: usize, to: State) -> Result<(), Error> {
        states.release(index, slot, to).map_err(refusal)
    }

    /// A table of 8 units with a block of `state` at unit 4.
    fn states_with(state: State) -> Arc<BlockStates> {
        let states = BlockStates(Table::filled(8, |_| AtomicU8::new(0)).unwrap());
        states.set(4, state);
        Arc::new(states)
    }

    /// Two frees of one caller's block race (a double free from two cores): exactly one goes
    /// through, whichever comes first, and the block is parked once.
    #[test]
    fn loom_racing_frees_of_one_block_let_exactly_one_through() {
        loom::model(|| {
            let states = states_with(State::Live(1));
            let other = on_another_thread(&states, |s| end(s, 4, 1, State::Cached(1)));
            let mine = end(&states, 4, 1, State::Cached(1));
            let theirs = other.join().unwrap();
            assert!(mine.is_ok() != theirs.is_ok(), "{mine:?} {theirs:?}");
            assert_eq!(mine.and(theirs), Err(Error::NotAllocated));
            assert_eq!(states.get(4), State::Cached(1));
        });
    }

    /// A free with the wrong order races the good one: the good one always goes through, the
    /// wrong one is refused (`OrderMismatch` while the block is live, `NotAllocated` once it
    /// is parked).
    #[test]
    fn loom_a_wrong_order_free_never_passes_a_good_one() {
        loom::model(|| {
            let states = states_with(State::Live(1));
            let bad = on_another_thread(&states, |s| end(s, 4, 0, State::Cached(0)));
            assert_eq!(end(&states, 4, 1, State::Cached(1)), Ok(()));
            let bad = bad.join().unwrap();
            assert!(
                matches!(bad, Err(Error::OrderMismatch | Error::NotAllocated)),
                "{bad:?}"
            );
            assert_eq!(states.get(4), State::Cached(1));
        });
    }

    /// A stale double free of a parked order-0 block races its spill and reuse: the parking
    /// core gives it back (`Free`) and it is handed out again as an order-1 block
    /// (`Live(1)`). The stale free is refused at every point, so it can neither free the new
    /// owner's block nor park it: the ABA that the order in the state byte rules out.
    #[test]
    fn loom_a_stale_free_never_frees_the_block_reused_at_another_order() {
        loom::model(|| {
            let states = states_with(State::Cached(0));
            let reuse = on_another_thread(&states, |s| {
                s.set(4, State::Free);
                s.set(4, State::Live(1));
            });
            let stale = end(&states, 4, 0, State::Cached(0));
            reuse.join().unwrap();
            assert!(
                matches!(stale, Err(Error::NotAllocated | Error::OrderMismatch)),
                "{stale:?}"
            );
            assert_eq!(states.get(4), State::Live(1));
        });
    }

    /// A free as `Cached` makes it of the block at `index` of the order at `slot`: straight
    /// to `backend` (allocated: `true`; its free a swap, as a backend's free decides racing
    /// frees with one atomic step) where the table has the block `Direct`, else through
    /// the table's CAS, parking it.
    fn free_via(
        states: &BlockStates,
        backend: &AtomicBool,
        index: usize,
        slot: usize,
    ) -> Result<(), Error> {
        if states.end(index, State::Direct(slot), State::Free) {
            return match backend.swap(false, Ordering::AcqRel) {
                true => Ok(()),
                false => Err(Error::NotAllocated),
            };
        }
        end(states, index, slot, State::Cached(slot))
    }

    /// A free running on another thread.
    type Freeing = thread::JoinHandle<Result<(), Error>>;

    /// A `Direct` block at unit 4 of the order at slot 1, allocated in its backend, with a
    /// [`free_via`] of it as a block of the order at `slot` begun on another thread.
    fn direct_block_freed_elsewhere(slot: usize) -> (Arc<BlockStates>, Arc<AtomicBool>, Freeing) {
        let states = states_with(State::Direct(1));
        let backend = Arc::new(AtomicBool::new(true));
        let free = {
            let (states, backend) = (states.clone(), backend.clone());
            thread::spawn(move || free_via(&states, &backend, 4, slot))
        };
        (states, backend, free)
    }

    /// Two frees of one `Direct` block race (a double free from two cores), with no lock
    /// and no compare-and-swap on the table: exactly one goes through, the backend has the
    /// block back, and the table has it `Free`, never parked.
    #[test]
    fn loom_racing_frees_of_a_direct_block_let_exactly_one_through() {
        loom::model(|| {
            let (states, backend, theirs) = direct_block_freed_elsewhere(1);
            let mine = free_via(&states, &backend, 4, 1);
            let theirs = theirs.join().unwrap();
            assert!(mine.is_ok() != theirs.is_ok(), "{mine:?} {theirs:?}");
            assert_eq!(mine.and(theirs), Err(Error::NotAllocated));
            assert!(!backend.load(Ordering::Acquire), "the backend has it back");
            assert_eq!(states.get(4), State::Free);
        });
    }

    /// A free with the wrong order races the good free of a `Direct` block: the good one
    /// always goes through, to the backend; the wrong one is refused (`OrderMismatch` while
    /// the block is live, `NotAllocated` once it is ended) and changes nothing.
    #[test]
    fn loom_a_wrong_order_free_never_passes_a_direct_free() {
        loom::model(|| {
            let (states, backend, bad) = direct_block_freed_elsewhere(0);
            assert_eq!(free_via(&states, &backend, 4, 1), Ok(()));
            let bad = bad.join().unwrap();
            assert!(
                matches!(bad, Err(Error::OrderMismatch | Error::NotAllocated)),
                "{bad:?}"
            );
            assert!(!backend.load(Ordering::Acquire));
            assert_eq!(states.get(4), State::Free);
        });
    }

    /// A `try_free` that ends a live block (`Free`, on its way straight to the backend)
    /// and then backs out because the backend would wait (`Live` again, and the caller told
    /// `WouldBlock`) races a free of the same block: that free either parks the block, or,
    /// inside the window, is refused and leaves it live, to be freed later. Never both
    /// refused with the block ended, never parked and live.
    #[test]
    fn loom_a_backed_out_try_free_leaves_the_block_live() {
        loom::model(|| {
            let states = states_with(State::Live(1));
            let other = on_another_thread(&states, |s| end(s, 4, 1, State::Cached(1)));
            let ended = end(&states, 4, 1, State::Free);
            if ended.is_ok() {
                states.set(4, State::Live(1));
            }
            match other.join().unwrap() {
                Ok(()) => assert_eq!(states.get(4), State::Cached(1)),
                Err(e) => {
                    assert_eq!((e, ended), (Error::NotAllocated, Ok(())));
                    assert_eq!(states.get(4), State::Live(1));
                }
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Every state fits its byte and reads back as itself, and no two share a byte.
    #[test]
    fn every_state_has_its_own_byte() {
        let mut states = alloc::vec![State::Free];
        for slot in 0..MAX_SLOTS {
            states.extend([State::Cached(slot), State::Live(slot), State::Direct(slot)]);
            states.extend((0..OWNERS).map(|cache| State::Owned(slot, cache)));
        }
        let mut bytes: alloc::vec::Vec<u8> = states.iter().map(|s| s.encode()).collect();
        for (&state, &byte) in states.iter().zip(&bytes) {
            assert_eq!(State::decode(byte), state);
        }
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), states.len());
    }
}
