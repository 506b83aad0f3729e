//! What starts at each unit: nothing, a block handed to a caller, or a block in a cache.
//!
//! The backend sees cached blocks as allocated, so it cannot tell a caller's block from
//! a cached (free) one. This map can, and it alone decides every `free` of a cached order:
//! one CAS from `Live(order)` lets exactly one of racing frees through, whether the block
//! then goes to a cache or back to the backend. Blocks of orders that are never cached are
//! not recorded: the backend decides their frees.

use crate::sync::atomic::{AtomicU8, Ordering};
use crate::table::Table;
use crate::Error;

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
