//! What starts at each unit: nothing, a block handed to a caller, or a block in a cache.
//!
//! The backend sees cached blocks as allocated, so it cannot tell a caller's block from
//! a cached (free) one. This map can, and it alone decides every `free` of a cached order:
//! one CAS from `Live(order)` lets exactly one of racing frees through, whether the block
//! then goes to a cache or back to the backend. Blocks of orders that are never cached are
//! not recorded: the backend decides their frees.

use crate::sync::atomic::{AtomicU8, Ordering};
use crate::table::Table;
use crate::{BlockAlloc, Error};

/// The state of the block of a cached order starting at a unit. Units inside a block (not
/// its first), units free in the backend and blocks of uncached orders are `Free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// No caller's block of a cached order, and no cached block, starts here.
    Free,
    /// A block of this order starting here is allocated by a caller.
    Live(u32),
    /// A block of this order starting here sits in a per-core cache (free to callers,
    /// allocated in the backend).
    Cached(u32),
}

const LIVE: u8 = 0x40;
const CACHED: u8 = 0x80;
const ORDER: u8 = 0x3f;

impl State {
    fn encode(self) -> u8 {
        // Orders are at most `usize::BITS - 1` (`Config::validate`), so they fit 6 bits.
        match self {
            State::Free => 0,
            State::Live(order) => LIVE | order as u8,
            State::Cached(order) => CACHED | order as u8,
        }
    }

    fn decode(byte: u8) -> State {
        let order = u32::from(byte & ORDER);
        match byte & !ORDER {
            LIVE => State::Live(order),
            CACHED => State::Cached(order),
            _ => State::Free,
        }
    }
}

/// One [`State`] per unit, all `Free` (zero) at first.
pub(crate) struct BlockStates(pub(crate) Table<AtomicU8>);

impl BlockStates {
    /// Records the block at `index`, which the caller owns exclusively (just taken from the
    /// backend or a cache, or about to be given back to the backend).
    pub(crate) fn set(&self, index: usize, state: State) {
        self.0[index].store(state.encode(), Ordering::Release);
    }

    /// The state recorded at `index` (a snapshot).
    pub(crate) fn get(&self, index: usize) -> State {
        State::decode(self.0[index].load(Ordering::Acquire))
    }

    /// Records the blocks `alloc` has out whose order is `cached` as live, so that their
    /// frees are decided here as those of blocks handed out through the caches: one
    /// [`BlockAlloc::next_block`] per block, in address order, until every allocated unit
    /// is accounted for. Only while no one else can reach `alloc` (its answers must hold).
    pub(crate) fn adopt(
        &self,
        alloc: &(impl BlockAlloc + ?Sized),
        cached: impl Fn(u32) -> bool,
    ) -> Result<(), Error> {
        let mut out = alloc.total_units().saturating_sub(alloc.free_units());
        let mut at = 0;
        while out > 0 {
            let Some((start, order)) = alloc.next_block(at)? else {
                break;
            };
            if start >= at && cached(order) {
                self.set(start, State::Live(order));
            }
            // A block never starts before the walk; `max` only keeps a wrong answer from
            // stalling it.
            let end = (start + (1 << order)).max(at + 1);
            out = out.saturating_sub(end - start.max(at));
            at = end;
        }
        Ok(())
    }

    /// Ends the caller's block `(index, order)` by moving it to `to`: `OrderMismatch` if a
    /// caller's block of another order starts there, `NotAllocated` if none does.
    pub(crate) fn release(&self, index: usize, order: u32, to: State) -> Result<(), Error> {
        let live = State::Live(order).encode();
        match self.0[index].compare_exchange(live, to.encode(), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(other) => match State::decode(other) {
                State::Live(_) => Err(Error::OrderMismatch),
                State::Free | State::Cached(_) => Err(Error::NotAllocated),
            },
        }
    }
}

/// The one compare-and-swap that decides every free of a cached order, under racing frees.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// Runs `f` on `states` in another thread.
    fn on_another_thread<T: Send + 'static>(
        states: &Arc<BlockStates>,
        f: impl FnOnce(&BlockStates) -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let states = states.clone();
        thread::spawn(move || f(&states))
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
            let other = on_another_thread(&states, |s| s.release(4, 1, State::Cached(1)));
            let mine = states.release(4, 1, State::Cached(1));
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
            let bad = on_another_thread(&states, |s| s.release(4, 0, State::Cached(0)));
            assert_eq!(states.release(4, 1, State::Cached(1)), Ok(()));
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
            let stale = states.release(4, 0, State::Cached(0));
            reuse.join().unwrap();
            assert!(
                matches!(stale, Err(Error::NotAllocated | Error::OrderMismatch)),
                "{stale:?}"
            );
            assert_eq!(states.get(4), State::Live(1));
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
            let other = on_another_thread(&states, |s| s.release(4, 1, State::Cached(1)));
            let ended = states.release(4, 1, State::Free);
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
