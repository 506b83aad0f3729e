#[cfg(feature = "alloc")]
use alloc::boxed::Box;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;
use core::fmt;

use crate::Error;

/// The most cores any allocator accepts (`Config::cores`). Per-core state costs a few cache
/// lines each; this cap keeps that in the megabytes and turns a nonsense count (a negative
/// number cast to `usize`, `u32::MAX`) into an error rather than an allocation that aborts.
pub const MAX_CORES: usize = 4096;

/// The shape of an allocator: how many units it manages, its largest order, and how many
/// cores share it (for per-core state; `core` hints are taken modulo this).
///
/// What every allocator takes, and nothing more: settings of one design live with it (the
/// per-core magazines' in [`magazine::Settings`](crate::magazine::Settings), LLFree's in
/// `llfree::Options`). It may grow fields, so it is built by [`Config::new`] and the
/// `with_*` builders, not by a struct literal (its fields stay readable, and writable on a
/// value one has):
///
/// ```compile_fail,E0639
/// let config = buddyfree::Config { units: 1 << 12, max_order: 9, cores: 1 };
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Units managed in all.
    pub units: usize,
    /// The largest order that can be allocated; blocks have at most `2^max_order` units.
    pub max_order: u32,
    /// Cores (or threads) with their own per-core state, 1..=[`MAX_CORES`].
    pub cores: usize,
}

impl Config {
    /// A configuration of `units` units, blocks up to `2^max_order` units, and **one core**.
    ///
    /// One core is the choice that is right everywhere, including `const` statics and
    /// `no_std` kernels before they know their core count: every allocator works with it, and
    /// `core` hints are then all the same slot. Allocators with per-core state (`nbbs`'s
    /// hints, LLFree's reservations, the per-core caches and lists) scale only with as many
    /// cores as threads use them, so say how many with [`with_cores`](Config::with_cores)
    /// or, under `std`, [`with_available_cores`](Config::with_available_cores).
    ///
    /// ```
    /// use buddyfree::Config;
    ///
    /// let config = Config::new(1 << 18, 9).with_cores(4);
    /// assert_eq!((config.units, config.max_order, config.cores), (1 << 18, 9, 4));
    /// assert!(config.validate().is_ok());
    /// ```
    #[must_use]
    pub const fn new(units: usize, max_order: u32) -> Self {
        Config {
            units,
            max_order,
            cores: 1,
        }
    }

    /// The same configuration with `cores` cores.
    #[must_use]
    pub const fn with_cores(self, cores: usize) -> Self {
        Config { cores, ..self }
    }

    /// The same configuration with blocks up to `2^max_order` units.
    ///
    /// ```
    /// use buddyfree::{registry, Config};
    ///
    /// // LLFree serves blocks up to a tree: lower the order to what an entry accepts.
    /// let config = Config::new(1 << 16, 16).with_cores(2);
    /// let entry = registry::find("llfree").unwrap();
    /// let frames = (entry.build)(config.with_max_order(config.max_order.min(entry.max_order)), Default::default())?;
    /// assert_eq!(frames.max_order(), 14);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub const fn with_max_order(self, max_order: u32) -> Self {
        Config { max_order, ..self }
    }

    /// The same configuration with as many cores as the machine offers this process
    /// ([`std::thread::available_parallelism`]; one if that is unknown, at most [`MAX_CORES`]).
    ///
    /// ```
    /// let config = buddyfree::Config::new(1 << 14, 9).with_available_cores();
    /// assert!(config.cores >= 1);
    /// ```
    #[cfg(feature = "std")]
    #[cfg_attr(docsrs, doc(cfg(feature = "std")))]
    #[must_use]
    pub fn with_available_cores(self) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.with_cores(cores.min(MAX_CORES))
    }

    /// Checks what every allocator needs: at least one unit, 1..=[`MAX_CORES`] cores, and
    /// room for one block of the largest order. The error names the first rule broken.
    /// A `const fn`, as the metadata layouts built on it are.
    pub const fn validate(&self) -> Result<(), Error> {
        if self.units == 0 {
            return Err(Error::InvalidConfig(ConfigRule::NoUnits));
        }
        const_try!(check_cores(self.cores));
        let fits = self.max_order < usize::BITS && (1usize << self.max_order) <= self.units;
        if !fits {
            return Err(Error::InvalidConfig(ConfigRule::OrderAboveUnits));
        }
        Ok(())
    }
}

/// The rule a configuration broke, carried by [`Error::InvalidConfig`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigRule {
    /// `units` is 0.
    NoUnits,
    /// `cores` is 0.
    NoCores,
    /// `cores` is above [`MAX_CORES`].
    TooManyCores,
    /// `2^max_order` is more than `units` (or does not fit in a `usize`).
    OrderAboveUnits,
    /// `max_order` is above what this allocator serves (LLFree: a whole tree, 14 with the
    /// paper's trees; the list allocators: 0;
    /// see `registry::Entry::max_order`).
    OrderAboveAllocator,
    /// More units than this allocator can name (the list allocators: below `u32::MAX`; a
    /// persistent LLFree zone: `llfree::persist::MAX_UNITS`).
    TooManyUnits,
    /// LLFree's `Options::tree_children` is not a power of two, is smaller than a block of
    /// the largest order (2 huge frames for order 10, `2^(max_order - 9)` above), or makes
    /// trees of 2^27 units or more.
    TreeChildren,
    /// One of LLFree's `Options` thresholds is above 1000 (they are thousandths).
    Permille,
    /// The size of the metadata overflows `usize`.
    MetadataOverflow,
    /// The memory for the metadata could not be reserved.
    MetadataAlloc,
    /// The allocator to wrap has blocks allocated and cannot name them
    /// ([`BlockAlloc::block_of`](crate::BlockAlloc::block_of) unsupported), so per-core
    /// caches in front could not tell their frees from double frees (`Magazine::new`).
    InnerInUse,
    /// Per-core caches given a configuration of other units than the allocator they wrap
    /// (`Magazine::new`: the configuration is the wrapped allocator's).
    InnerUnits,
    /// A region or mapping of zero bytes, or one too large to map with its alignment.
    RegionLength,
    /// A region alignment or unit size that is not a power of two.
    NotPowerOfTwo,
    /// Zones not in ascending order of their first unit, overlapping, reaching past the
    /// index space, a zone whose first unit is not aligned to its largest block, or none at
    /// all (`zones::Zones::new`).
    ZoneLayout,
    /// An LLFree class policy (`llfree::Policy::new`) with no class or more than 8, or a
    /// class of trees (initial or home) not below its number of classes.
    Classes,
}

impl ConfigRule {
    /// A short, stable description of the rule, for messages and the C ABI.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConfigRule::NoUnits => "zero units",
            ConfigRule::NoCores => "zero cores",
            ConfigRule::TooManyCores => "more cores than MAX_CORES (4096)",
            ConfigRule::OrderAboveUnits => "a block of the largest order is larger than the units",
            ConfigRule::OrderAboveAllocator => "max order above the largest this allocator serves",
            ConfigRule::TooManyUnits => "more units than this allocator can name",
            ConfigRule::TreeChildren => {
                "tree_children not a power of two, smaller than a block of max order, or trees of 2^27 units"
            }
            ConfigRule::Permille => "a threshold above 1000 permille",
            ConfigRule::MetadataOverflow => "metadata size overflows usize",
            ConfigRule::MetadataAlloc => "metadata memory could not be reserved",
            ConfigRule::InnerInUse => {
                "the wrapped allocator has blocks allocated and cannot name them (block_of)"
            }
            ConfigRule::InnerUnits => "units other than the wrapped allocator's",
            ConfigRule::RegionLength => "a region of zero bytes, or too large to map",
            ConfigRule::NotPowerOfTwo => "alignment or unit size not a power of two",
            ConfigRule::ZoneLayout => {
                "zones overlapping, out of order, misaligned, too large, or none"
            }
            ConfigRule::Classes => {
                "a class policy with 0 or over 8 classes, or a class beyond them"
            }
        }
    }
}

impl fmt::Display for ConfigRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks a core count against `1..=MAX_CORES`.
pub(crate) const fn check_cores(cores: usize) -> Result<(), Error> {
    match cores {
        0 => Err(Error::InvalidConfig(ConfigRule::NoCores)),
        1..=MAX_CORES => Ok(()),
        _ => Err(Error::InvalidConfig(ConfigRule::TooManyCores)),
    }
}

/// `len` values made by `make`, or [`ConfigRule::MetadataAlloc`] when the memory for them
/// cannot be had: every constructor reserves its metadata through this, so a configuration
/// too large for the machine fails rather than aborts.
#[cfg(feature = "alloc")]
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
