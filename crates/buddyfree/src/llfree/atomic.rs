//! The one compare-and-swap loop of LLFree: every packed entry (bit-field word, child pair,
//! tree entry, per-core entry, start-table word) is updated through [`Atom::try_change`], so
//! each protocol step reads as a pure function from the old value to the new one.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An atomic word that LLFree updates as a whole.
pub(crate) trait Atom {
    /// The plain value.
    type V: Copy + Eq;

    /// Reads the value (acquire: it orders the bit-field and counter reads that follow).
    fn get(&self) -> Self::V;

    /// One weak compare-and-swap (acquire-release on success).
    fn cas(&self, old: Self::V, new: Self::V) -> Result<Self::V, Self::V>;

    /// Replaces the value with `f(old)` atomically, retrying while other threads change it;
    /// gives up as soon as `f` returns `None`. Returns the value it replaced, or the value that
    /// `f` rejected.
    #[inline]
    fn try_change(
        &self,
        mut f: impl FnMut(Self::V) -> Option<Self::V>,
    ) -> Result<Self::V, Self::V> {
        let mut old = self.get();
        loop {
            let new = f(old).ok_or(old)?;
            match self.cas(old, new) {
                Ok(_) => return Ok(old),
                Err(seen) => old = seen,
            }
        }
    }
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
            fn cas(&self, old: $v, new: $v) -> Result<$v, $v> {
                self.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire)
            }
        }
    };
}

atom!(AtomicU32, u32);
atom!(AtomicU64, u64);
