//! Which of [`BlockAlloc`](crate::BlockAlloc)'s optional operations an allocator offers.

use core::fmt;

/// The optional operations of [`BlockAlloc`](crate::BlockAlloc) that an allocator offers,
/// from [`BlockAlloc::capabilities`](crate::BlockAlloc::capabilities): a set of flags, so
/// that a caller can tell before it calls whether an operation would answer
/// [`Error::Unsupported`](crate::Error::Unsupported).
///
/// A flag that is set promises that the operation never answers `Unsupported` (it may still
/// refuse a call for another reason: [`Error::WouldBlock`](crate::Error::WouldBlock), a bad
/// block). A flag that is clear means the operation answers `Unsupported`; in front of
/// another allocator that lacks it, per-core caches may still serve some calls themselves
/// (a `try_alloc` from a magazine's list), so a clear flag is a "do not rely on it". The
/// operations that build on these follow them: [`next_block`], [`order_at`] and
/// [`free_range`] need [`BLOCK_OF`](Self::BLOCK_OF), [`try_order_at`] needs
/// [`TRY_BLOCK_OF`](Self::TRY_BLOCK_OF), [`reserve_range`] needs
/// [`ALLOC_AT`](Self::ALLOC_AT), and so does `free_range` where an end of its range cuts a
/// live block. The rest of the trait works on every allocator.
///
/// A plain set of bits (the C ABI's `BUDDYFREE_CAP_*` values are the same bits), so that
/// new operations become new flags without breaking a caller: allocators outside this
/// crate build theirs with [`union`](Self::union) (a `const fn`, as every method here), and
/// a caller tests with [`contains`](Self::contains).
///
/// ```
/// use buddyfree::{registry, BlockAlloc, Capabilities, Config};
///
/// let frames = (registry::find("llfree").unwrap().build)(Config::new(1 << 10, 0), Default::default())?;
/// let caps = frames.capabilities();
/// assert!(caps.contains(Capabilities::TRY_ALLOC.union(Capabilities::BLOCK_OF)));
/// if caps.contains(Capabilities::ALLOC_AT) {
///     frames.alloc_at(5, 0, 0)?; // claims unit 5
/// }
/// # Ok::<(), buddyfree::Error>(())
/// ```
///
/// [`next_block`]: crate::BlockAlloc::next_block
/// [`order_at`]: crate::BlockAlloc::order_at
/// [`try_order_at`]: crate::BlockAlloc::try_order_at
/// [`free_range`]: crate::BlockAlloc::free_range
/// [`reserve_range`]: crate::BlockAlloc::reserve_range
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(u32);

impl Capabilities {
    /// No optional operation: what [`BlockAlloc::capabilities`](crate::BlockAlloc::capabilities)
    /// says by default, for an allocator that has not said otherwise.
    pub const NONE: Capabilities = Capabilities(0);
    /// [`BlockAlloc::try_alloc`](crate::BlockAlloc::try_alloc): allocations that never wait.
    pub const TRY_ALLOC: Capabilities = Capabilities(1 << 0);
    /// [`BlockAlloc::try_free`](crate::BlockAlloc::try_free): frees that never wait.
    pub const TRY_FREE: Capabilities = Capabilities(1 << 1);
    /// [`BlockAlloc::alloc_at`](crate::BlockAlloc::alloc_at): the block at a given unit.
    pub const ALLOC_AT: Capabilities = Capabilities(1 << 2);
    /// [`BlockAlloc::block_of`](crate::BlockAlloc::block_of): the live block containing a
    /// unit (and so frees by address alone).
    pub const BLOCK_OF: Capabilities = Capabilities(1 << 3);
    /// [`BlockAlloc::try_block_of`](crate::BlockAlloc::try_block_of): the same, never waiting.
    pub const TRY_BLOCK_OF: Capabilities = Capabilities(1 << 4);
    /// Every flag this version knows.
    pub const ALL: Capabilities = Capabilities((1 << 5) - 1);

    /// The flags, as bits (the C ABI's).
    #[must_use]
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The flags of `bits` that this version knows; the others are dropped.
    #[must_use]
    pub const fn from_bits_truncate(bits: u32) -> Self {
        Capabilities(bits & Self::ALL.0)
    }

    /// Whether every flag of `other` is set here.
    #[must_use]
    pub const fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of either.
    #[must_use]
    pub const fn union(self, other: Capabilities) -> Self {
        Capabilities(self.0 | other.0)
    }

    /// The flags of both.
    #[must_use]
    pub const fn intersection(self, other: Capabilities) -> Self {
        Capabilities(self.0 & other.0)
    }

    /// These flags without those of `other`.
    #[must_use]
    pub const fn difference(self, other: Capabilities) -> Self {
        Capabilities(self.0 & !other.0)
    }
}

/// Every flag and its name, in the order of the bits.
const NAMES: [(&str, Capabilities); 5] = [
    ("TRY_ALLOC", Capabilities::TRY_ALLOC),
    ("TRY_FREE", Capabilities::TRY_FREE),
    ("ALLOC_AT", Capabilities::ALLOC_AT),
    ("BLOCK_OF", Capabilities::BLOCK_OF),
    ("TRY_BLOCK_OF", Capabilities::TRY_BLOCK_OF),
];

/// The names of the flags set, `NONE` for none: `TRY_ALLOC | BLOCK_OF`.
impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let set = NAMES.iter().filter(|&&(_, flag)| self.contains(flag));
        for (n, (name, _)) in set.enumerate() {
            if n > 0 {
                f.write_str(" | ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_every_flag_once() {
        let all = NAMES
            .iter()
            .fold(Capabilities::NONE, |a, &(_, f)| a.union(f));
        assert_eq!(all, Capabilities::ALL);
        assert_eq!(
            NAMES
                .iter()
                .map(|(_, f)| f.bits().count_ones())
                .sum::<u32>(),
            Capabilities::ALL.bits().count_ones()
        );
        let s = alloc::format!(
            "{:?}",
            Capabilities::TRY_ALLOC.union(Capabilities::BLOCK_OF)
        );
        assert_eq!(s, "TRY_ALLOC | BLOCK_OF");
        assert_eq!(alloc::format!("{:?}", Capabilities::NONE), "NONE");
        assert_eq!(
            Capabilities::from_bits_truncate(u32::MAX),
            Capabilities::ALL
        );
        assert!(Capabilities::ALL.contains(Capabilities::NONE));
        assert!(!Capabilities::ALL
            .difference(Capabilities::ALLOC_AT)
            .contains(Capabilities::ALLOC_AT));
    }
}
