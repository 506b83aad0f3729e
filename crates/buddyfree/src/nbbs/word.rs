//! The atomic words that hold cell states, and the one CAS loop every protocol step goes
//! through.
//!
//! A 4-level bunch needs 47 state bits and a 64-bit generation, so its word is 128 bits wide
//! ([`AtomicU128`]), updated only as a whole: every access to a cell is an access of the
//! cell's full width, never of one half.

use super::cell::State;
use crate::sync::atomic::{AtomicU64, Ordering};

/// An atomic word holding one cell's state, seen as a [`State`] whatever its width, so that
/// the protocol is written once for 1-level nodes (`AtomicU64`) and 4-level bunches
/// ([`AtomicU128`]).
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
    /// Whether this word's operations are lock-free on the running CPU: a word that would
    /// fall back to a lock is refused ([`ConfigRule::NoDoubleWidthCas`](crate::ConfigRule)).
    fn is_lock_free() -> bool {
        true
    }
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
    #[inline]
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

/// A 128-bit atomic cell.
///
/// Normally `portable_atomic::AtomicU128`: `cmpxchg16b` on x86_64 (detected at run time when
/// the build does not assume it, loads by `vmovdqa` where AVX makes them atomic), `casp` or
/// `ldxp`/`stxp` on aarch64, and elsewhere, or on a CPU without a double-width CAS, a
/// lock-based fallback, which [`Word::is_lock_free`] reports so that `Nbbs4` is refused there
/// rather than taking locks (an interrupt handler could then spin on the lock of the code it
/// interrupted). `portable-atomic` rather than our own `asm!`: the detection, the
/// `rbx` juggling `cmpxchg16b` needs, and the per-target fallbacks are already written and
/// tested there, and it builds on stable Rust.
///
/// Under loom, and under ThreadSanitizer (`--cfg buddyfree_tsan`, which does not see inside
/// inline assembly and would miss the cell's synchronisation), a value behind a lock that
/// those tools do see. Every operation then orders as a lock does, at least as strongly as
/// asked; the 64-bit cells of [`Nbbs`](super::Nbbs) run the same protocol code on plain
/// atomics, so loom still checks the orderings it chooses.
#[cfg(not(any(loom, buddyfree_tsan)))]
pub struct AtomicU128(portable_atomic::AtomicU128);

/// A 128-bit atomic cell: see the non-loom, non-TSan build for the real one.
#[cfg(any(loom, buddyfree_tsan))]
pub struct AtomicU128(Lock<u128>);

#[cfg(loom)]
type Lock<T> = loom::sync::Mutex<T>;
#[cfg(all(buddyfree_tsan, not(loom)))]
type Lock<T> = spin::Mutex<T>;

#[cfg(not(any(loom, buddyfree_tsan)))]
impl Word for AtomicU128 {
    const BITS: u32 = u128::BITS;
    #[inline]
    fn new(value: State) -> Self {
        AtomicU128(portable_atomic::AtomicU128::new(value))
    }
    fn is_lock_free() -> bool {
        portable_atomic::AtomicU128::is_lock_free()
    }
    #[inline]
    fn load(&self, order: Ordering) -> State {
        self.0.load(order)
    }
    #[inline]
    fn fetch_or(&self, bits: State, order: Ordering) -> State {
        self.0.fetch_or(bits, order)
    }
    #[inline]
    fn fetch_and(&self, bits: State, order: Ordering) -> State {
        self.0.fetch_and(bits, order)
    }
    #[inline]
    fn compare_exchange_weak(
        &self,
        current: State,
        new: State,
        success: Ordering,
        failure: Ordering,
    ) -> Result<State, State> {
        self.0.compare_exchange_weak(current, new, success, failure)
    }
}

#[cfg(any(loom, buddyfree_tsan))]
impl AtomicU128 {
    /// Runs `f` on the value under the lock.
    fn with<R>(&self, f: impl FnOnce(&mut u128) -> R) -> R {
        #[cfg(loom)]
        let mut value = self.0.lock().unwrap();
        #[cfg(not(loom))]
        let mut value = self.0.lock();
        f(&mut value)
    }
}

#[cfg(any(loom, buddyfree_tsan))]
impl Word for AtomicU128 {
    const BITS: u32 = u128::BITS;
    fn new(value: State) -> Self {
        AtomicU128(Lock::new(value))
    }
    fn load(&self, _: Ordering) -> State {
        self.with(|v| *v)
    }
    fn fetch_or(&self, bits: State, _: Ordering) -> State {
        self.with(|v| core::mem::replace(v, *v | bits))
    }
    fn fetch_and(&self, bits: State, _: Ordering) -> State {
        self.with(|v| core::mem::replace(v, *v & bits))
    }
    fn compare_exchange_weak(
        &self,
        current: State,
        new: State,
        _: Ordering,
        _: Ordering,
    ) -> Result<State, State> {
        self.with(|v| {
            if *v == current {
                *v = new;
                Ok(current)
            } else {
                Err(*v)
            }
        })
    }
}
