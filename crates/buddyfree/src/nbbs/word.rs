//! The atomic words that hold cell states, and the one CAS loop every protocol step goes
//! through.
//!
//! Both layouts fit a cell in an `AtomicU64` (a 1-level node: 5 state bits and a 59-bit
//! generation; a 4-level bunch: 47 state bits, the guard and an 11-bit generation), a word
//! every 64-bit target updates lock-free.

use super::cell::State;
use crate::sync::atomic::{AtomicU64, Ordering};

/// An atomic word holding one cell's state, seen as a [`State`] whatever its width, so that
/// the protocol is written once for any cell width.
pub trait Word: Send + Sync {
    /// The word's width: a cell's [`Shape::width`](super::cell::Shape::width) must fit.
    const BITS: u32;
    /// A word holding `value`.
    fn new(value: State) -> Self;
    /// Atomic load.
    fn load(&self, order: Ordering) -> State;
    /// Atomic OR, returning the previous state.
    fn fetch_or(&self, bits: State, order: Ordering) -> State;
    /// Atomic AND, returning the previous state.
    fn fetch_and(&self, bits: State, order: Ordering) -> State;
    /// Weak compare-and-swap.
    fn compare_exchange_weak(
        &self,
        current: State,
        new: State,
        success: Ordering,
        failure: Ordering,
    ) -> Result<State, State>;

    /// Applies `step` to the state until a CAS installs its result: `Ok(new state)`, or
    /// `Err(state)` when `step` refuses the state with `None`.
    ///
    /// A refusal is only returned for a state confirmed current by an RMW (a CAS of the state
    /// onto itself): a plain load may return a stale state, and the paper's algorithms assume
    /// sequential consistency, so e.g. UNMARK giving up on a coalescing bit it read too early
    /// would strand an occupied bit forever. `success` orders the installing or confirming
    /// RMW; the first read and failed attempts are relaxed, because a step acts only on a
    /// state an RMW of its own has read.
    #[inline(always)]
    fn try_update(
        &self,
        success: Ordering,
        mut step: impl FnMut(State) -> Option<State>,
    ) -> Result<State, State> {
        let mut current = self.load(Ordering::Relaxed);
        loop {
            let new = step(current);
            match self.compare_exchange_weak(
                current,
                new.unwrap_or(current),
                success,
                Ordering::Relaxed,
            ) {
                Ok(_) => return new.ok_or(current),
                Err(seen) => current = seen,
            }
        }
    }
}

macro_rules! word {
    ($atomic:ty, $int:ty) => {
        impl Word for $atomic {
            const BITS: u32 = <$int>::BITS;
            #[inline]
            fn new(value: State) -> Self {
                <$atomic>::new(value as $int)
            }
            #[inline]
            fn load(&self, order: Ordering) -> State {
                <$atomic>::load(self, order) as State
            }
            #[inline]
            fn fetch_or(&self, bits: State, order: Ordering) -> State {
                <$atomic>::fetch_or(self, bits as $int, order) as State
            }
            #[inline]
            fn fetch_and(&self, bits: State, order: Ordering) -> State {
                <$atomic>::fetch_and(self, bits as $int, order) as State
            }
            #[inline]
            fn compare_exchange_weak(
                &self,
                current: State,
                new: State,
                success: Ordering,
                failure: Ordering,
            ) -> Result<State, State> {
                <$atomic>::compare_exchange_weak(
                    self,
                    current as $int,
                    new as $int,
                    success,
                    failure,
                )
                .map(|v| v as State)
                .map_err(|v| v as State)
            }
        }
    };
}

word!(AtomicU64, u64);
