//! The one CAS loop every protocol step goes through, on the atomic word that holds a cell's
//! state.
//!
//! Both layouts fit a cell in an `AtomicU64` (a 1-level node: 5 state bits and a 59-bit
//! generation; a 4-level bunch: 47 state bits, the guard and an 11-bit generation), a word
//! every 64-bit target updates lock-free.

use super::cell::State;
use crate::sync::atomic::{AtomicU64, Ordering};

/// Applies `step` to the state in `word` until a CAS installs its result: `Ok(new state)`, or
/// `Err(state)` when `step` refuses the state with `None`.
///
/// A refusal is only returned for a state confirmed current by an RMW (a CAS of the state
/// onto itself): a plain load may return a stale state, and the paper's algorithms assume
/// sequential consistency, so e.g. UNMARK giving up on a coalescing bit it read too early
/// would strand an occupied bit forever. `success` orders the installing or confirming
/// RMW; the first read and failed attempts are relaxed, because a step acts only on a
/// state an RMW of its own has read.
#[inline(always)]
pub(super) fn try_cas(
    word: &AtomicU64,
    success: Ordering,
    mut step: impl FnMut(State) -> Option<State>,
) -> Result<State, State> {
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let new = step(current);
        match word.compare_exchange_weak(
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
