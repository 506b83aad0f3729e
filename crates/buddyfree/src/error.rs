use core::fmt;

use crate::config::ConfigRule;

/// What went wrong in an allocator operation.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// No free block of the requested order is available.
    OutOfMemory,
    /// The order is above the allocator's maximum order.
    BadOrder,
    /// The block reaches past the end of the managed units.
    OutOfRange,
    /// The index is not aligned to the block size `2^order`.
    Misaligned,
    /// No block is allocated at this index (never allocated, or already freed).
    NotAllocated,
    /// A block is allocated at this index, but with another order.
    OrderMismatch,
    /// The configuration cannot be built; the rule it breaks.
    InvalidConfig(ConfigRule),
    /// A unit of the block asked for by `alloc_at` is not free.
    Occupied,
    /// This allocator does not offer the operation (see [`crate::BlockAlloc`]'s methods).
    Unsupported,
    /// [`crate::BlockAlloc::try_alloc`] would have had to wait (for a lock, or for another
    /// core's operation to finish).
    WouldBlock,
    /// The caller's metadata memory is smaller than `metadata_layout`'s size.
    MetadataTooSmall,
    /// The caller's metadata memory holds `metadata_layout`'s size, but not once its start is
    /// aligned up within it (`metadata_bytes` at any alignment do); for memory kept across
    /// runs, which is not aligned within: its start is not aligned as the layout says.
    MetadataMisaligned,
    /// A unit of the block is held by the boot reservation
    /// ([`crate::BlockAlloc::reserve_range`]), which only
    /// [`crate::BlockAlloc::free_range`] gives back: a free of firmware memory.
    Reserved,
    /// A heap request of zero bytes: there is no block of size zero.
    ZeroSize,
    /// A heap request larger than the largest block.
    TooLarge,
    /// An alignment larger than the heap's region can honour (see
    /// [`Heap::max_align`](crate::heap::Heap::max_align)).
    BadAlign,
    /// A pointer null or outside the heap.
    Foreign,
    /// A heap's region too small for its allocator, or a unit size that is not a power of two.
    BadRegion,
    /// The system refused a heap's mapping
    /// ([`Region::mmap`](crate::heap::Region::mmap)); the OS error number (`errno`).
    Mmap(i32),
    /// A [`StaticHeap`](crate::heap::StaticHeap) was initialised a second time.
    AlreadyInitialized,
}

impl Error {
    /// A short, stable name for the error, as used in reports and the C ABI (the rule of an
    /// [`Error::InvalidConfig`] is in its `Display` and [`ConfigRule::as_str`]).
    pub const fn as_str(self) -> &'static str {
        match self {
            Error::OutOfMemory => "out of memory",
            Error::BadOrder => "order above the maximum order",
            Error::OutOfRange => "index out of range",
            Error::Misaligned => "index not aligned to the block size",
            Error::NotAllocated => "block not allocated",
            Error::OrderMismatch => "block allocated with another order",
            Error::InvalidConfig(_) => "invalid configuration",
            Error::Occupied => "a unit of the block is not free",
            Error::Unsupported => "operation not supported by this allocator",
            Error::WouldBlock => "the operation would have had to wait",
            Error::MetadataTooSmall => "metadata memory too small",
            Error::MetadataMisaligned => "metadata memory misaligned",
            Error::Reserved => "a unit of the block is reserved (release it with free_range)",
            Error::ZeroSize => "zero-sized request",
            Error::TooLarge => "request larger than the largest block",
            Error::BadAlign => "alignment larger than the region can honour",
            Error::Foreign => "pointer null or outside the heap",
            Error::BadRegion => "region too small or unit size not a power of two",
            Error::Mmap(_) => "the system refused the mapping",
            Error::AlreadyInitialized => "the static heap is already initialised",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidConfig(rule) => write!(f, "{}: {rule}", self.as_str()),
            Error::Mmap(errno) => write!(f, "{} (errno {errno})", self.as_str()),
            _ => f.write_str(self.as_str()),
        }
    }
}

impl From<ConfigRule> for Error {
    fn from(rule: ConfigRule) -> Self {
        Error::InvalidConfig(rule)
    }
}

/// In every build, `no_std` included: `core::error::Error` is stable since Rust 1.81, below
/// the crate's MSRV, so a kernel can put it behind `dyn core::error::Error` or `?` it into
/// its own error types as `std` code does.
impl core::error::Error for Error {}

// Checked in every build that compiles the crate, `no_std` ones included (the freestanding
// program's, `--no-default-features`): the public error type is a `core::error::Error`.
const _: () = {
    const fn is_error<E: core::error::Error + Send + Sync + 'static>() {}
    is_error::<Error>();
};
