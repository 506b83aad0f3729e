//! LLFree over a lower level in memory the caller owns: a kernel that keeps the bit fields
//! and child entries in memory it mapped itself (persistent memory, or memory that survives
//! a warm reboot) builds the allocator over them at every boot, and after a crash rebuilds
//! it from what they hold (§3.2.3 of the LLFree paper).
//!
//! ```text
//! caller's memory (kept): | bit fields: 16 words per huge frame | child entries | (64-aligned)
//! heap or caller memory:  | tree entries | per-core reservations |  (rebuilt every time)
//! ```
//!
//! The lower level holds no pointers and no per-run state, so its bytes mean the same to
//! every run over the same number of units ([`LLFree::lower_layout`] depends on nothing
//! else). How it is taken is an [`Init`]: overwritten with every unit free or every unit
//! allocated, or recovered: the bit fields and huge flags are the truth, the child counters
//! are rebuilt from them, and what an operation cut off by a crash left taken but named by
//! no block becomes order-0 blocks (or order-9 blocks, for whole frames) that nobody holds
//! (`lower/recover.rs`). The upper level (tree counters, reservations) is always built anew
//! from the child counters.
//!
//! The constructor is [`Builder::kept`](super::Builder::kept) (a policy, tuning and the
//! upper level's place as for every LLFree); the file-backed zone
//! ([`persist`](super::persist)) is the same path over a file mapping, with a header, a lock
//! and a write-back per operation around it.
//!
//! # Safety contract
//! The memory must stay valid, and be read or written by nothing else (no other allocator,
//! thread, device or process), for as long as the allocator lives; once it is dropped the
//! memory holds the lower level as the allocator left it (what [`Init::Recover`] reads at
//! the next build). Any bytes are memory-safe: recovery checks every frame before it changes
//! any, and a state no run of the allocator leaves is [`RecoverError::Corrupt`] with the
//! memory untouched.

use core::alloc::Layout;
use core::ptr::NonNull;

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

use super::build::Settings;
use super::lower::{Line, Lower};
use super::{LLFree, WriteBack};
use crate::table::Metadata;
use crate::{Config, Error, MetadataMemory};

/// How [`Builder::kept`](super::Builder::kept) takes the caller's lower level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// Every unit free: the memory is overwritten, whatever it held.
    Free,
    /// Every unit allocated, each as an order-0 block (free what is free with
    /// `free_bulk` of order 0, a bit-field word at a time): the memory is overwritten.
    Allocated,
    /// The memory holds the lower level of an earlier allocator over the same number of
    /// units, cleanly dropped or cut off by a crash at any instruction: every block whose
    /// allocation returned and whose free was not called is allocated with its order; the
    /// block of an operation in flight may be lost (listed by [`LLFree::blocks`] as order-0
    /// blocks, or order-9 blocks for frames taken whole, to be freed as such).
    Recover,
}

/// Why LLFree cannot be built over the caller's lower level.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoverError {
    /// A configuration LLFree refuses, memory too small or misaligned
    /// ([`Error::MetadataTooSmall`], [`Error::MetadataMisaligned`]), or no memory for the
    /// upper level; nothing was written.
    Config(Error),
    /// [`Init::Recover`] found a state no run of the allocator leaves (damage, or a lower
    /// level of another size); nothing was written.
    Corrupt {
        /// The huge frame.
        frame: usize,
        /// What is wrong with it.
        what: &'static str,
    },
}

impl From<Error> for RecoverError {
    fn from(e: Error) -> Self {
        RecoverError::Config(e)
    }
}

impl core::fmt::Display for RecoverError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RecoverError::Config(e) => write!(f, "LLFree over caller memory: {e}"),
            RecoverError::Corrupt { frame, what } => write!(
                f,
                "LLFree lower level damaged at huge frame {frame}: {what}"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RecoverError {}

/// The alignment of the lower level: a cache line.
const LOWER_ALIGN: usize = core::mem::align_of::<Line>();

impl LLFree {
    /// The bytes and alignment (64) of the lower level of LLFree over `config`, for
    /// [`Builder::kept`](super::Builder::kept): bit fields and child entries, 66 KiB per GiB of 4 KiB
    /// units. Depends on `config.units` alone.
    ///
    /// ```
    /// use buddyfree::llfree::LLFree;
    /// use buddyfree::Config;
    ///
    /// let layout = LLFree::lower_layout(Config::new(1 << 18, 10))?;
    /// assert_eq!((layout.size(), layout.align()), (66 << 10, 64));
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub const fn lower_layout(config: Config) -> Result<Layout, Error> {
        const_try!(config.validate());
        match Layout::from_size_align(Lower::bytes(config.units), LOWER_ALIGN) {
            Ok(layout) => Ok(layout),
            Err(_) => Err(Error::InvalidConfig(crate::ConfigRule::MetadataOverflow)),
        }
    }
}

impl<W: WriteBack> LLFree<W> {
    /// The constructor behind [`Builder::kept`](super::Builder::kept) and the file-backed
    /// zone: checks the configuration and the memory, takes the lower level as `init` says
    /// (`None`: the file-backed zone's clean open, after its checksum matched: exactly as a
    /// clean shutdown left it, child counters trusted; writing back through `write_back`),
    /// then builds the upper level in `upper` or, `None`, on the heap. Nothing is written
    /// before every check passed.
    ///
    /// # Safety
    /// `lower` must be valid for reads and writes of `len` bytes (initialised, unless
    /// `init` overwrites them), and read or written by nothing else for as long as the
    /// allocator lives.
    pub(crate) unsafe fn over_raw(
        settings: Settings,
        init: Option<Init>,
        (lower, len): (NonNull<u8>, usize),
        write_back: W,
        upper: Option<MetadataMemory>,
    ) -> Result<LLFree<W>, RecoverError> {
        let (plan, parts) = settings.plan(true)?;
        let config = settings.config;
        // The lower level must hold its layout where it starts: it is found at the same
        // place again, so no alignment inside may shift it.
        let layout = LLFree::lower_layout(config)?;
        if !(lower.as_ptr() as usize).is_multiple_of(layout.align()) {
            return Err(Error::MetadataMisaligned.into());
        }
        if len < layout.size() {
            return Err(Error::MetadataTooSmall.into());
        }
        let meta = Metadata::new(&plan, upper)?;
        let at = lower.cast::<Line>();
        let units = (config.units, config.max_order);
        // SAFETY: checked above to be 64-aligned (as `Line` is) and at least
        // `Lower::bytes(units)` long; valid and ours alone by our caller's contract.
        let lower = unsafe { Lower::in_place(at, units, init, write_back) }?;
        Ok(LLFree::on(lower, &meta, parts)?)
    }

    /// Every block the lower level holds, as `(index, order)`, in address order (the
    /// walk [`BlockAlloc::next_block`](crate::BlockAlloc::next_block) does one block at a
    /// time). After [`Init::Recover`] this is how a user finds the units lost by operations
    /// in flight at a crash (those its own records do not hold), to free them. Only
    /// meaningful while no operation is running.
    #[cfg(feature = "alloc")]
    #[must_use]
    pub fn blocks(&self) -> Vec<(usize, u32)> {
        let next = |at: usize| self.lower.next_block(at, self.units);
        core::iter::successors(next(0), |&(i, o)| next(i + (1 << o))).collect()
    }
}
