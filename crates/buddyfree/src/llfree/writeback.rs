//! Whether the lower level writes its changes back to a persistent medium, decided by a type
//! parameter: volatile LLFree ([`Volatile`]) compiles the write-back away, so its hot path
//! has no branch for it; persistent zones choose their write-back at run time.

use crate::sync::atomic::AtomicU64;

/// How the lower level writes back the cache line of each change that recovery reads.
/// Sealed: [`Volatile`] and the persistent zone's `Durable` are the only kinds.
pub trait WriteBack: Send + Sync + sealed::Sealed {
    /// Whether [`WriteBack::write_back`] can do anything (a constant, so that volatile code
    /// does not even compute the address it would be given).
    const ACTIVE: bool;

    /// Writes back the cache line holding `word`.
    fn write_back(&self, word: &AtomicU64);
}

/// Volatile memory: nothing to write back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Volatile;

impl WriteBack for Volatile {
    const ACTIVE: bool = false;

    #[inline(always)]
    fn write_back(&self, _: &AtomicU64) {}
}

pub(crate) mod sealed {
    /// Keeps [`super::WriteBack`] to the kinds of this crate.
    pub trait Sealed {}

    impl Sealed for super::Volatile {}
}
