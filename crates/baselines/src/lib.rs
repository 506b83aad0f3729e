//! The workbench of [`buddyfree`]: what the benchmarks and the tests use beside the published
//! allocators, in a crate nobody installs (`publish = false`).
//!
//! - [`model`]: the reference allocator every other is checked against.
//! - The baselines the papers compare with, each built, tested and benchmarked here:
//!   [`list`] (the LLFree paper's list allocators and the real-time paper's first fit),
//!   [`per_level`] (the parallel binary buddy, one lock per level), [`linux`] (Knuth's buddy
//!   behind Linux-like per-CPU lists) and [`migrate`] (Knuth's buddy with Linux's free lists
//!   per migrate type).
//! - [`stats`]: the fragmentation figures of the bench's `frag` workload.
//! - [`crash`]: crash injection into LLFree's persistent zones, for the tests and the bench's
//!   `crash` workload.
//! - [`registry`]: every allocator by name, buddyfree's published ones and the baselines, for
//!   buddybench and the tests.
//!
//! # References
//!
//! - **LLFree** (the list baselines): Lars Wrenger, Florian Rommel, Alexander Halbuer,
//!   Christian Dietrich, Daniel Lohmann. "LLFree: Scalable and Optionally-Persistent
//!   Page-Frame Allocation". *USENIX ATC '23*, 2023.
//! - **Real-time buddy** (first fit): Steven M. Donahue et al. "Storage Allocation for
//!   Real-Time, Embedded Systems". *EMSOFT 2001*, LNCS 2211, pp. 131–147.
//! - **Parallel binary buddy** (`perlevel-*`): "Parallel Binary Buddy: The Friendly Memory
//!   Manager", 2011, <https://quiescent.us/2011/11/parallel-binary-buddy-the-friendly-memory-manager/>;
//!   after Theodore Johnson, Tim Davis. "Space Efficient Parallel Buddy Memory Management".
//!   *Fourth International Conference on Computing and Information (ICCI '92)*, IEEE, 1992.

#![warn(missing_docs)]

extern crate alloc;

mod buddy;
#[cfg(not(loom))]
pub mod crash;
pub mod linux;
pub mod list;
pub mod migrate;
pub mod model;
pub mod per_level;
pub mod registry;
pub mod stats;
mod sync;

use alloc::boxed::Box;
use alloc::vec::Vec;

pub(crate) use buddyfree::{BlockAlloc, Capabilities, Config, ConfigRule, Error, SeqBlockAlloc};

/// Checks the arguments of a `free` that every allocator rejects the same way (buddyfree's
/// rule): an order above `max_order`, a block reaching past `total_units`, or an index not
/// aligned to `2^order`.
pub(crate) fn check_block(
    index: usize,
    order: u32,
    max_order: u32,
    total_units: usize,
) -> Result<(), Error> {
    if order > max_order {
        return Err(Error::BadOrder);
    }
    let size = 1usize << order;
    if index >= total_units || total_units - index < size {
        return Err(Error::OutOfRange);
    }
    if index & (size - 1) != 0 {
        return Err(Error::Misaligned);
    }
    Ok(())
}

/// The rule every allocator applies, after [`check_block`], to `free(index, order)`: `live` is
/// the order of the live block starting at `index`, if any.
#[inline]
pub(crate) fn check_live(live: Option<u32>, order: u32) -> Result<(), Error> {
    match live {
        Some(o) if o == order => Ok(()),
        Some(_) => Err(Error::OrderMismatch),
        None => Err(Error::NotAllocated),
    }
}

/// The slot of `core` hint among `cores` per-core slots.
#[inline]
pub(crate) fn core_slot(core: usize, cores: usize) -> usize {
    if core < cores {
        core
    } else {
        core % cores
    }
}

/// A table of `len` entries made by `make`, or an error where the memory cannot be had.
pub(crate) fn filled<T>(len: usize, make: impl FnMut(usize) -> T) -> Result<Box<[T]>, Error> {
    let bytes = len.checked_mul(core::mem::size_of::<T>());
    if bytes.is_none_or(|b| b > isize::MAX as usize) {
        return Err(Error::InvalidConfig(ConfigRule::MetadataOverflow));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::InvalidConfig(ConfigRule::MetadataAlloc))?;
    v.extend((0..len).map(make));
    Ok(v.into_boxed_slice())
}
