//! The allocators the tool can run: every entry of the library's registry, plus the system
//! allocator adapter.

use buddyfree::registry::{self, DynAlloc, Entry};
use buddyfree::{Config, Error};

use crate::system::SystemAlloc;

/// The default suite's allocators, in table order. Names not in the registry are skipped with
/// a note, so the list may name allocators that are still being written.
pub const DEFAULT_ALLOCS: &[&str] = &[
    "nbbs",
    "nbbs4",
    "knuth-locked",
    "linux",
    "llfree",
    "list-locked",
    "list-cas",
    "list-percore",
    "system",
];

/// Added to the default allocators for the real-time workloads only: the estranged and the
/// per-level buddy, and the first-fit list the real-time paper compares buddies with.
pub const REALTIME_ALLOCS: &[&str] = &["estranged-locked", "perlevel-spin", "first-fit-locked"];

/// The default baseline: the first of these that is in the run (the NBBS paper's spin-locked
/// buddy, then Linux's).
pub const DEFAULT_BASELINES: &[&str] = &["knuth-locked", "linux"];

/// The name of the system allocator adapter.
pub const SYSTEM: &str = "system";

/// An allocator the tool can build.
#[derive(Clone, Copy)]
pub enum AllocSpec {
    /// A registry entry.
    Registry(&'static Entry),
    /// `std::alloc::System` (see [`SystemAlloc`]).
    System,
}

impl AllocSpec {
    /// Every allocator: the registry's, then `system`.
    pub fn all() -> Vec<AllocSpec> {
        registry::entries()
            .iter()
            .map(AllocSpec::Registry)
            .chain([AllocSpec::System])
            .collect()
    }

    /// The allocator named `name`.
    pub fn find(name: &str) -> Option<AllocSpec> {
        if name == SYSTEM {
            return Some(AllocSpec::System);
        }
        registry::find(name).map(AllocSpec::Registry)
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        match self {
            AllocSpec::Registry(e) => e.name,
            AllocSpec::System => SYSTEM,
        }
    }

    /// One line saying what it is.
    pub fn about(&self) -> &'static str {
        match self {
            AllocSpec::Registry(e) => e.about,
            AllocSpec::System => {
                "std::alloc::System (malloc), blocks of 4096<<order bytes; size-based workloads only"
            }
        }
    }

    /// Whether its block indices are positions in `0..units` (false for `system`, whose
    /// indices are addresses).
    pub fn has_region(&self) -> bool {
        matches!(self, AllocSpec::Registry(_))
    }

    /// Builds a fresh instance, with `config.max_order` lowered to the largest the allocator
    /// accepts (the list allocators serve order 0 only); workloads needing more skip it.
    pub fn build(&self, config: Config) -> Result<DynAlloc, Error> {
        match self {
            AllocSpec::Registry(e) => (e.build)(Config {
                max_order: config.max_order.min(e.max_order),
                ..config
            }),
            // SAFETY: the workloads free exactly the blocks they allocated, once, with their
            // orders (checked by the tests' counting allocator).
            AllocSpec::System => Ok(Box::new(unsafe { SystemAlloc::new(config) }?)),
        }
    }
}
