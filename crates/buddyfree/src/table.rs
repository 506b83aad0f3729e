//! Metadata tables in memory the allocator owns (the heap) or borrows (caller memory carved
//! at boot, a file mapping).
//!
//! An allocator's metadata is a few tables. A [`Plan`] lays them out one after another, each
//! at its alignment, and yields the [`Layout`] the whole needs; the same plan then places
//! the tables, either in the caller's memory ([`Metadata::new`], lent as a
//! [`MetadataMemory`], the one type every `in_metadata` takes) or each in its own heap
//! allocation (the same, given no memory). Size and placement come from one computation, so
//! `metadata_layout` and the constructors cannot disagree.
//!
//! ```text
//!  caller memory: | table 0 | pad | table 1 | pad | table 2 | ... unused ... |
//!                 ^ aligned to the largest alignment of the tables
//! ```

/// `?` in a `const fn` (the layouts and their checks), where `?` is not allowed.
macro_rules! const_try {
    ($result:expr) => {
        match $result {
            Ok(value) => value,
            Err(e) => return Err(e),
        }
    };
}

use core::alloc::Layout;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use crate::{ConfigRule, Error};

/// `len` values of `T` at a pointer: owned (a heap allocation freed on drop) or borrowed
/// (memory that outlives the table). Either way the hot path indexes it like a boxed slice.
pub(crate) struct Table<T> {
    ptr: NonNull<T>,
    len: usize,
    /// Whether `ptr` is a heap allocation of `Layout::array::<T>(len)` made by this module.
    #[cfg(feature = "alloc")]
    owned: bool,
}

// SAFETY: a table is its values, like a `Box<[T]>`: it hands out references to them only
// through `Deref` and `DerefMut`, and no other table or value aliases its memory.
unsafe impl<T: Send> Send for Table<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Table<T> {}

impl<T> Table<T> {
    /// Writes `len` values made by `make` at `ptr` and takes them as a table.
    ///
    /// # Safety
    /// `ptr` must be aligned for `T` and valid for writes of `len` values, and it must stay
    /// valid, and used by nothing else, for as long as the table lives.
    unsafe fn init(ptr: NonNull<T>, len: usize, mut make: impl FnMut(usize) -> T) -> Table<T> {
        for i in 0..len {
            // SAFETY: `i < len`, within the memory the caller vouches for.
            unsafe { ptr.as_ptr().add(i).write(make(i)) };
        }
        // SAFETY: the values were just written, in memory the caller lends for the table's life
        // and to it alone.
        unsafe { Table::borrowed(ptr, len) }
    }

    /// The `len` values already at `ptr`, borrowed, taken as they are.
    ///
    /// # Safety
    /// `ptr` must be aligned for `T`, valid for reads and writes of `len` initialised values
    /// for as long as the table lives, and accessed by nothing else in this process other than
    /// through shared references of the same type (for atomics: atomic operations).
    pub(crate) unsafe fn borrowed(ptr: NonNull<T>, len: usize) -> Table<T> {
        Table {
            ptr,
            len,
            #[cfg(feature = "alloc")]
            owned: false,
        }
    }

    /// The values' memory, for code that hands parts of it out by pointer (and then uses the
    /// table no more, but to drop it).
    pub(crate) fn as_mut_ptr(&mut self) -> NonNull<T> {
        self.ptr
    }

    /// `len` values made by `make`, in a heap allocation of their own
    /// ([`crate::config::filled`]: a configuration too large fails rather than aborts).
    #[cfg(feature = "alloc")]
    pub(crate) fn filled(len: usize, make: impl FnMut(usize) -> T) -> Result<Table<T>, Error> {
        let values = crate::config::filled(len, make)?;
        // `Box` allocates nothing for no values or values of no size.
        let owned = core::mem::size_of_val::<[T]>(&values) != 0;
        Ok(Table {
            ptr: NonNull::from(alloc::boxed::Box::leak(values)).cast::<T>(),
            len,
            owned,
        })
    }
}

impl<T> Deref for Table<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised values for our lifetime (owned, or by the
        // contract of the constructor that borrowed it).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for Table<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`; `&mut self` makes this the only access.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        let values = core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: the values are initialised and ours; nothing reads them after this.
        unsafe { core::ptr::drop_in_place(values) };
        #[cfg(feature = "alloc")]
        if let (true, Ok(layout)) = (self.owned, Layout::array::<T>(self.len)) {
            // SAFETY: an owned `ptr` is a leaked `Box<[T]>` of `len` values (`Table::filled`),
            // which the global allocator allocated with this layout; freed only here, once.
            unsafe { alloc::alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

/// Where one table lies in a [`Plan`]: its offset in bytes and its length in values.
pub(crate) struct Part<T> {
    offset: usize,
    len: usize,
    kind: PhantomData<fn() -> T>,
}

// Not derived: a part is two numbers whatever `T` is.
impl<T> Clone for Part<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Part<T> {}

/// The layout of an allocator's metadata: tables one after another, each at its alignment.
///
/// Every method is a `const fn`, so that each allocator's `metadata_layout` is one too (a
/// kernel sizes its static metadata buffer at compile time): no `?`, no `Layout::array`.
pub(crate) struct Plan {
    size: usize,
    align: usize,
}

/// [`ConfigRule::MetadataOverflow`], as the `Err` of a `const fn` (no `?` and no `From`
/// there).
const OVERFLOW: Error = Error::InvalidConfig(ConfigRule::MetadataOverflow);

impl Plan {
    pub(crate) const fn new() -> Plan {
        Plan { size: 0, align: 1 }
    }

    /// Places a table of `len` values of `T` after the ones placed so far;
    /// [`ConfigRule::MetadataOverflow`] if the metadata would not fit in the address space.
    pub(crate) const fn add<T>(&mut self, len: usize) -> Result<Part<T>, Error> {
        let align = core::mem::align_of::<T>();
        let (Some(bytes), Some(offset)) = (
            core::mem::size_of::<T>().checked_mul(len),
            self.size.checked_next_multiple_of(align),
        ) else {
            return Err(OVERFLOW);
        };
        match offset.checked_add(bytes) {
            // As `Layout::array`: the table's bytes within `isize::MAX`.
            Some(end) if bytes <= isize::MAX as usize => self.size = end,
            _ => return Err(OVERFLOW),
        }
        if align > self.align {
            self.align = align;
        }
        Ok(Part {
            offset,
            len,
            kind: PhantomData,
        })
    }

    /// The bytes and alignment the tables need in caller memory.
    pub(crate) const fn layout(&self) -> Result<Layout, Error> {
        match Layout::from_size_align(self.size, self.align) {
            Ok(layout) => Ok(layout),
            Err(_) => Err(OVERFLOW),
        }
    }
}

/// The bytes of a byte buffer, at any alignment, that holds `layout` once its start is
/// aligned up (`size + align - 1`): what every `metadata_bytes` returns. An `Err` (a
/// configuration the allocator refuses) panics, with its rule: in `const` context, a
/// compile error.
pub(crate) const fn unaligned_bytes(layout: Result<Layout, Error>) -> usize {
    match layout {
        // No overflow: a layout's size rounded up to its alignment is within `isize::MAX`.
        Ok(layout) => layout.size() + (layout.align() - 1),
        Err(Error::InvalidConfig(rule)) => panic!("{}", rule.as_str()),
        Err(e) => panic!("{}", e.as_str()),
    }
}

/// Memory lent for an allocator's metadata: what every caller-metadata constructor
/// (`in_metadata`) takes. Made safely from a `'static` exclusive borrow
/// ([`MetadataMemory::from_static`]: a static array, memory carved at boot), or from raw
/// memory ([`MetadataMemory::from_raw`], whose contract carries the unsafety the
/// constructors then need not). It is moved into the allocator it builds, so one piece of
/// memory serves one allocator; [`MetadataMemory::take`] cuts it in two for two (an
/// allocator and its magazines).
///
/// Any alignment will do: a constructor aligns its tables up within the memory, so
/// `metadata_bytes(config)` bytes at any address hold them.
#[derive(Debug)]
pub struct MetadataMemory {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is lent exclusively (both constructors' contracts), like a
// `&'static mut [u8]`, which is `Send` and `Sync`.
unsafe impl Send for MetadataMemory {}
// SAFETY: as above; `&MetadataMemory` reads nothing through the pointer.
unsafe impl Sync for MetadataMemory {}

impl MetadataMemory {
    /// The memory of a `'static` exclusive borrow, the allocator's for good.
    pub fn from_static(memory: &'static mut [MaybeUninit<u8>]) -> MetadataMemory {
        let len = memory.len();
        // SAFETY: an exclusive `'static` borrow: valid, and the allocator's alone, for good.
        unsafe { MetadataMemory::from_raw(NonNull::from(memory).cast(), len) }
    }

    /// The `len` bytes at `base`.
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes, used by nothing else, for as
    /// long as the allocator built in them (or, unused, this value) lives; the memory is free
    /// again once that allocator is dropped.
    pub const unsafe fn from_raw(base: NonNull<u8>, len: usize) -> MetadataMemory {
        MetadataMemory { base, len }
    }

    /// Its length in bytes.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `bytes` (all of it, if it is shorter) and the rest, two pieces that do not
    /// overlap: for an allocator and the magazines in front of it, say, the first
    /// `metadata_bytes` of the allocator's and the rest for the magazines'. A piece too
    /// short fails its constructor ([`Error::MetadataTooSmall`]), nothing written.
    #[must_use]
    pub fn take(self, bytes: usize) -> (MetadataMemory, MetadataMemory) {
        let first = bytes.min(self.len);
        // SAFETY: `first <= len`: the first `first` bytes and the rest (from within, or one
        // past, the lent memory), which do not overlap, each lent as the whole was.
        unsafe {
            (
                Self::from_raw(self.base, first),
                Self::from_raw(self.base.add(first), self.len - first),
            )
        }
    }

    /// The pointer and length, for code that lays tables out itself (the contract of
    /// [`MetadataMemory::from_raw`] holds for them).
    pub(crate) fn into_raw(self) -> (NonNull<u8>, usize) {
        (self.base, self.len)
    }
}

/// The memory a [`Plan`]'s tables are made in.
pub(crate) struct Metadata {
    /// The caller's memory, checked against the plan; `None`: a heap allocation per table.
    base: Option<NonNull<u8>>,
}

impl Metadata {
    /// Each table in a heap allocation of its own (for tests of one table).
    #[cfg(test)]
    pub(crate) const fn heap() -> Metadata {
        Metadata { base: None }
    }

    /// The memory of `plan`'s tables: with `None`, a heap allocation per table, for the same
    /// configurations as in caller memory (none whose metadata the address space cannot
    /// hold, even though each table is allocated on its own); else the caller's memory, if
    /// it holds the plan's layout once its start is aligned up within it:
    /// [`Error::MetadataTooSmall`] if it is below the layout's size (no alignment would do),
    /// [`Error::MetadataMisaligned`] if it holds the size but not the padding that aligns it
    /// (as many bytes, aligned, or `align - 1` more would do). So a byte buffer of
    /// `metadata_bytes` at any address does.
    ///
    /// The tables made in the caller's memory take it for as long as they live, as
    /// [`MetadataMemory::from_raw`]'s contract lends it.
    pub(crate) fn new(plan: &Plan, memory: Option<MetadataMemory>) -> Result<Self, Error> {
        let layout = plan.layout()?;
        let Some(memory) = memory else {
            return Ok(Metadata { base: None });
        };
        let (base, len) = memory.into_raw();
        if len < layout.size() {
            return Err(Error::MetadataTooSmall);
        }
        let pad = (base.as_ptr() as usize).wrapping_neg() & (layout.align() - 1);
        if len - layout.size() < pad {
            return Err(Error::MetadataMisaligned);
        }
        // SAFETY: `pad <= len`: within the caller's memory.
        let base = unsafe { base.add(pad) };
        Ok(Metadata { base: Some(base) })
    }

    /// The table `part` of the plan this memory was checked against, its values made by
    /// `make` in place.
    pub(crate) fn table<T>(
        &self,
        part: Part<T>,
        make: impl FnMut(usize) -> T,
    ) -> Result<Table<T>, Error> {
        match self.base {
            Some(base) => {
                // SAFETY: `part` lies inside the plan's layout at an offset aligned for `T`,
                // and `base` holds that layout (aligned up in `Metadata::new`); the plan's
                // parts do not overlap, so this table's memory is its own.
                Ok(unsafe { Table::init(base.add(part.offset).cast::<T>(), part.len, make) })
            }
            #[cfg(feature = "alloc")]
            None => Table::filled(part.len, make),
            #[cfg(not(feature = "alloc"))]
            None => unreachable!("heap metadata needs the `alloc` feature"),
        }
    }
}

/// The constructor over caller memory of an allocator `$name`, written once: an associated
/// `metadata_layout`, `metadata_bytes` and `in_metadata`, from the allocator's
/// `$plan(config) -> Result<(Plan, Parts), Error>` and `$build(config, parts, &Metadata)`.
/// The rest shapes the doc example: the allocator's path in the crate, its trait, how the
/// example binds the allocator, and its alloc and free calls.
macro_rules! caller_metadata {
    (
        $name:ident, $plan:path, $build:path,
        example: $path:expr, $trait:literal, $bind:literal, $alloc:literal, $free:literal
    ) => {
        impl $name {
            /// The bytes and alignment of the metadata for `config`, for
            /// [`in_metadata`](Self::in_metadata); [`Error::InvalidConfig`] for a configuration
            /// that cannot be built. A `const fn`, as is
            /// [`metadata_bytes`](Self::metadata_bytes), which sizes a static buffer.
            pub const fn metadata_layout(config: Config) -> Result<core::alloc::Layout, Error> {
                let (plan, _) = const_try!($plan(config));
                plan.layout()
            }

            /// The bytes of metadata memory, at any alignment, that
            /// [`in_metadata`](Self::in_metadata) takes for `config`:
            /// [`metadata_layout`](Self::metadata_layout)'s size and the padding that aligns
            /// its start (it aligns it within the memory): the length of a static buffer, as
            /// [`in_metadata`](Self::in_metadata)'s example shows.
            ///
            /// # Panics
            /// If `config` cannot be built ([`metadata_layout`](Self::metadata_layout)'s
            /// error): in a `const`, a compile error.
            #[must_use]
            pub const fn metadata_bytes(config: Config) -> usize {
                $crate::table::unaligned_bytes(Self::metadata_layout(config))
            }

            /// As `new` (feature `alloc`), with the metadata in `meta` (at least
            /// [`metadata_bytes`](Self::metadata_bytes) bytes at any alignment, or
            /// [`metadata_layout`](Self::metadata_layout)'s size at its alignment: the start is
            /// aligned up within `meta`; the memory is free again once the allocator is
            /// dropped): no heap allocation at all. Memory below the layout's size is
            /// [`Error::MetadataTooSmall`], memory that holds it only at an aligned start
            /// [`Error::MetadataMisaligned`], with nothing written.
            ///
            /// ```
            /// use core::mem::MaybeUninit;
            #[doc = concat!("use buddyfree::{", $trait, ", Config, MetadataMemory};")]
            #[doc = concat!("use buddyfree::", $path, ";")]
            ///
            /// // At boot: a static array (or memory carved from the memory map,
            /// // `MetadataMemory::from_raw`).
            /// const CONFIG: Config = Config::new(1 << 14, 10).with_cores(4);
            #[doc = concat!("const BYTES: usize = ", stringify!($name), "::metadata_bytes(CONFIG);")]
            /// static mut META: [MaybeUninit<u8>; BYTES] = [MaybeUninit::uninit(); BYTES];
            ///
            /// // SAFETY: the one place that borrows the array.
            /// let meta = MetadataMemory::from_static(unsafe { &mut *core::ptr::addr_of_mut!(META) });
            #[doc = concat!($bind, " = ", stringify!($name), "::in_metadata(CONFIG, meta)?;")]
            #[doc = concat!("let block = a.", $alloc, "?;")]
            #[doc = concat!("a.", $free, "?;")]
            /// # Ok::<(), buddyfree::Error>(())
            /// ```
            pub fn in_metadata(config: Config, meta: $crate::MetadataMemory) -> Result<Self, Error> {
                $crate::table::build($plan(config), Some(meta), |parts, meta| {
                    $build(config, parts, meta)
                })
            }
        }
    };
}

/// Builds an allocator by `build` from its `plan` (its tables' layout and places), its
/// tables in the caller's `memory` once it is checked to hold the layout, or with `None`
/// each on the heap: the body of every `in_metadata` and every convenience `new`.
pub(crate) fn build<P, A>(
    plan: Result<(Plan, P), Error>,
    memory: Option<MetadataMemory>,
    build: impl FnOnce(P, &Metadata) -> Result<A, Error>,
) -> Result<A, Error> {
    let (plan, parts) = plan?;
    build(parts, &Metadata::new(&plan, memory)?)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::boxed::Box;

    #[test]
    fn plan_aligns_each_table_and_checks_the_memory() {
        let mut plan = Plan::new();
        let bytes = plan.add::<u8>(3).unwrap();
        let words = plan.add::<u64>(2).unwrap();
        assert_eq!((bytes.offset, words.offset), (0, 8));
        let layout = plan.layout().unwrap();
        assert_eq!((layout.size(), layout.align()), (24, 8));
        let mut memory = Box::new([0u64; 4]);
        let base = NonNull::from(&mut *memory).cast::<u8>();
        // SAFETY: `memory` outlives every use below, `base + 31` is within it.
        let lent = |start: usize, len| unsafe { MetadataMemory::from_raw(base.add(start), len) };
        assert!(matches!(
            Metadata::new(&plan, Some(lent(0, 23))),
            Err(Error::MetadataTooSmall)
        ));
        // 24 bytes hold the layout, but not once aligned up from `base + 1`: 7 more do.
        assert!(matches!(
            Metadata::new(&plan, Some(lent(1, 30))),
            Err(Error::MetadataMisaligned)
        ));
        {
            let meta = Metadata::new(&plan, Some(lent(0, 24))).unwrap();
            let t = meta.table(words, |i| i as u64 + 7).unwrap();
            assert_eq!(*t, [7, 8]);
        }
        assert_eq!(memory[1..3], [7, 8]);
    }

    #[test]
    fn caller_memory_is_aligned_up_within_unaligned_bytes() {
        let mut plan = Plan::new();
        plan.add::<u8>(3).unwrap();
        let words = plan.add::<u64>(2).unwrap();
        let bytes = unaligned_bytes(plan.layout());
        assert_eq!(bytes, 24 + 7);
        let mut memory = Box::new([0u64; 8]);
        for start in 0..8 {
            // Taken anew each round: the reads and the `fill` below end the last one's borrow.
            let base = NonNull::from(&mut *memory).cast::<u8>();
            // SAFETY: `start + bytes` is within `memory`, which outlives every use below.
            let lent = |len| unsafe { MetadataMemory::from_raw(base.add(start), len) };
            {
                let meta = Metadata::new(&plan, Some(lent(bytes))).unwrap();
                let t = meta.table(words, |i| i as u64 + 1).unwrap();
                assert_eq!(*t, [1, 2]);
                let short = Metadata::new(&plan, Some(lent(23)));
                assert!(matches!(short, Err(Error::MetadataTooSmall)));
            }
            // The table is found at the next multiple of 8 from `start` (at `start` if it is one).
            let first = start.div_ceil(8) + 1;
            assert_eq!(memory[first..first + 2], [1, 2]);
            memory.fill(0);
        }
    }

    #[test]
    fn plan_refuses_tables_past_the_address_space() {
        let mut plan = Plan::new();
        assert!(plan.add::<u64>(usize::MAX / 4).is_err());
        plan.add::<u8>(usize::MAX / 2).unwrap();
        assert!(plan.add::<u8>(usize::MAX / 2 + 2).is_err());
    }
}
