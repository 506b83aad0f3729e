//! The atomic words that hold cell states, and the one CAS loop every protocol step goes
//! through.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An atomic word holding one cell's state, seen as a `u64` whatever its width, so that the
/// protocol is written once for 1-level nodes (`AtomicU32`) and 4-level bunches (`AtomicU64`).
pub trait Word: Send + Sync {
    /// A word holding `value`.
    fn new(value: u64) -> Self;
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic OR, returning the previous state.
    fn fetch_or(&self, bits: u64, order: Ordering) -> u64;
    /// Atomic AND, returning the previous state.
    fn fetch_and(&self, bits: u64, order: Ordering) -> u64;
    /// Weak compare-and-swap.
    fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;

    /// Applies `step` to the state until a CAS installs its result: `Ok(new state)`, or
    /// `Err(state)` when `step` refuses the state with `None`.
    ///
    /// A refusal is only returned for a state confirmed current by an RMW (a CAS of the state
    /// onto itself): a plain load may return a stale state, and the paper's algorithms assume
    /// sequential consistency, so e.g. UNMARK giving up on a coalescing bit it read too early
    /// would strand an occupied bit forever. `success` orders the installing or confirming
    /// RMW; the first read and failed attempts are relaxed, because a step acts only on a
    /// state an RMW of its own has read.
    #[inline]
    fn try_update(
        &self,
        success: Ordering,
        mut step: impl FnMut(u64) -> Option<u64>,
    ) -> Result<u64, u64> {
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
            #[inline]
            fn new(value: u64) -> Self {
                <$atomic>::new(value as $int)
            }
            #[inline]
            fn load(&self, order: Ordering) -> u64 {
                <$atomic>::load(self, order) as u64
            }
            #[inline]
            fn fetch_or(&self, bits: u64, order: Ordering) -> u64 {
                <$atomic>::fetch_or(self, bits as $int, order) as u64
            }
            #[inline]
            fn fetch_and(&self, bits: u64, order: Ordering) -> u64 {
                <$atomic>::fetch_and(self, bits as $int, order) as u64
            }
            #[inline]
            fn compare_exchange_weak(
                &self,
                current: u64,
                new: u64,
                success: Ordering,
                failure: Ordering,
            ) -> Result<u64, u64> {
                <$atomic>::compare_exchange_weak(
                    self,
                    current as $int,
                    new as $int,
                    success,
                    failure,
                )
                .map(|v| v as u64)
                .map_err(|v| v as u64)
            }
        }
    };
}

word!(AtomicU32, u32);
word!(AtomicU64, u64);
