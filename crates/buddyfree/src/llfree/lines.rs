//! The cache lines the lower level lives in.

use crate::sync::atomic::AtomicU64;
use crate::table::Table;

/// Words in a cache line.
pub(crate) const LINE_WORDS: usize = 8;

/// One cache line of the lower level.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [AtomicU64; LINE_WORDS]);

impl Line {
    pub(crate) fn zeroed() -> Line {
        Line(core::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// The cache lines of a lower level: a heap allocation it owns (volatile LLFree without
/// caller metadata), the caller's metadata memory, or a file mapping that the persistent
/// zone owns (`persist.rs`).
pub(crate) type Lines = Table<Line>;
