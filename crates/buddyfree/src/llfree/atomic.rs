//! The one compare-and-swap loop of LLFree: every packed entry (bit-field word, child pair,
//! tree entry, per-core entry) is updated through [`Atom::try_change`], so each protocol
//! step reads as a pure function from the old value to the new one. The exceptions need no
//! loop: a counter credited by a plain add that cannot carry out of its field, and a word
//! claimed by one compare-and-swap from the free value its caller has just read.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An atomic word that LLFree updates as a whole.
pub(crate) trait Atom {
    /// The plain value.
    type V: Copy + Eq;

    /// Reads the value (acquire: it orders the bit-field and counter reads that follow).
    fn get(&self) -> Self::V;

    /// Replaces the value with `f(old)` atomically, retrying while other threads change it;
    /// gives up as soon as `f` returns `None`. Returns the value it replaced, or the value that
    /// `f` rejected. (The atomics' own `fetch_update`: acquire reads, sequentially consistent
    /// on success: on x86-64 and AArch64 the same instructions as acquire-release, and it puts
    /// every change of a counter, which a free's credit is, in the single order that the
    /// refusal memo's argument needs: `refusal.rs`.)
    fn try_change(&self, f: impl FnMut(Self::V) -> Option<Self::V>) -> Result<Self::V, Self::V>;
}

macro_rules! atom {
    ($atomic:ty, $v:ty) => {
        impl Atom for $atomic {
            type V = $v;

            #[inline]
            fn get(&self) -> $v {
                self.load(Ordering::Acquire)
            }

            #[inline]
            fn try_change(&self, f: impl FnMut($v) -> Option<$v>) -> Result<$v, $v> {
                self.fetch_update(Ordering::SeqCst, Ordering::Acquire, f)
            }
        }
    };
}

atom!(AtomicU32, u32);
atom!(AtomicU64, u64);
