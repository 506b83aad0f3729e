//! buddyfree: scalable and bounded-time back-end memory allocators.
//!
//! Every allocator here manages one contiguous region of `units` equal units (page frames,
//! heap chunks, offsets into device memory) and hands out naturally aligned blocks of
//! `2^order` units, named by the index of their first unit. They all implement one trait,
//! [`BlockAlloc`], so tests, the benchmark tool and the adapters treat them alike.
//!
//! ```
//! use buddyfree::llfree::LLFree;
//! use buddyfree::{BlockAlloc, Config, Error};
//!
//! // 2^18 units (1 GiB of 4 KiB frames), blocks up to order 9 (2 MiB), 4 cores.
//! let frames = LLFree::new(Config::new(1 << 18, 9).with_cores(4))?;
//! let core = 0; // the calling core; `buddyfree::core_hint()` gives one per thread
//! let huge = frames.alloc(9, core)?; // 512 units, aligned to 512
//! assert_eq!(huge % 512, 0);
//! frames.free(huge, 9, core)?;
//! assert_eq!(frames.free(huge, 9, core), Err(Error::NotAllocated)); // changes nothing
//! # Ok::<(), Error>(())
//! ```
//!
//! Which allocator for which job, and each one's type: the README's table. [`heap`] turns any
//! of them into an allocator of memory (`GlobalAlloc`, `Allocator`).
//!
//! The crate is `#![no_std]`. The `alloc` feature (on by default) puts metadata on the heap
//! (the `new` constructors) and adds what needs a heap (the registry, defragmentation); the
//! `std` feature (on by default, implies `alloc`) adds a thread-local [`core_hint`] and other
//! conveniences; `persist` (opt-in) adds LLFree zones in files (`llfree::persist`).
//!
//! # Metadata from the caller
//!
//! For a kernel at boot, before any heap exists, these allocators also take their metadata
//! in caller memory (a static array, or memory carved from the memory map) and then make no
//! heap allocation at all, even with `default-features = false`:
//! `metadata_layout(config)` gives the bytes and alignment, `metadata_bytes(config)` the
//! length of a byte buffer at any alignment that holds them (both `const fn`s: a static is
//! sized at compile time, and a refused configuration is a compile error), and
//! `in_metadata(config, meta)` builds the allocator in a [`MetadataMemory`]: a
//! `&'static mut [MaybeUninit<u8>]` ([`MetadataMemory::from_static`]) or raw memory
//! (`unsafe` [`MetadataMemory::from_raw`]). Each allocator type is built these two ways,
//! `new(config)` on the heap and `in_metadata(config, meta)` in caller memory; settings
//! beyond the [`Config`] go through [`llfree::LLFree::builder`] and
//! [`magazine::Magazine::with_settings`].
//!
//! ```
//! use core::mem::MaybeUninit;
//! use buddyfree::{llfree::LLFree, BlockAlloc, Config, MetadataMemory};
//!
//! const CONFIG: Config = Config::new(1 << 20, 9).with_cores(4);
//! const BYTES: usize = LLFree::metadata_bytes(CONFIG);
//! static mut META: [MaybeUninit<u8>; BYTES] = [MaybeUninit::uninit(); BYTES];
//!
//! // SAFETY: the one place that borrows `META`.
//! let meta = MetadataMemory::from_static(unsafe { &mut *core::ptr::addr_of_mut!(META) });
//! let frames = LLFree::in_metadata(CONFIG, meta)?;
//! let frame = frames.alloc(0, 0)?;
//! frames.free(frame, 0, 0)?;
//! # Ok::<(), buddyfree::Error>(())
//! ```
//!
//! Memory below the layout's size is [`Error::MetadataTooSmall`], memory that holds it only
//! from an aligned start [`Error::MetadataMisaligned`]. Metadata per GiB of 4 KiB units
//! (262144 units, orders up to 10; the per-core state is padded to cache lines):
//!
//! | allocator | 1 core | 16 cores | alignment | mostly |
//! |---|---|---|---|---|
//! | [`Nbbs`] | 4095 KiB | 4101 KiB | 128 | 16 bytes per unit (two 8-byte nodes: state and generation) |
//! | [`Nbbs4`] | 547 KiB | 552 KiB | 128 | 15 nodes, a guard and an 11-bit generation per 8-byte cell |
//! | [`LLFree`](llfree::LLFree) | 66 KiB | 68 KiB | 128 | 2 bits per unit |
//! | [`Knuth`](buddy::Knuth) | 4352 KiB | 4352 KiB | 8 | links (16 bytes) and a tag per unit |
//! | [`Estranged`](buddy::Estranged) | 4352 KiB | 4352 KiB | 8 | as Knuth's |
//! | [`Magazine`](magazine::Magazine), in front of any of these | 261 KiB | 342 KiB | 128 | a byte per unit and 5.4 KiB per core |
//!
//! The sequential buddies take no per-core state; wrap them in [`Locked`] (no heap either).
//! Per-core magazines take theirs the same way (`Magazine::in_metadata(config, inner, meta)`),
//! in front of an allocator that does; [`MetadataMemory::take`] cuts one piece for both.
//!
//! # When not to use buddyfree
//!
//! - **Requests that are not powers of two.** Every block is `2^order` units, so a request
//!   just above a power of two wastes almost half its block (33 units take 64).
//! - **As a general-purpose `malloc`.** These are back-end allocators of page frames and
//!   arenas; small objects of mixed sizes belong to a front end (a slab or size-class
//!   allocator) over them. [`heap::GlobalHeap`] works, but rounds every request up.
//! - **Defragmentation on a hot path.** [`buddy::defrag`](mod@buddy::defrag) always satisfies a request when
//!   enough units are free, but planning costs `O(units · 2^k)` for order `k`, orders of
//!   magnitude more than an allocation.
//!
//! # References
//!
//! - **NBBS** (`nbbs`, `nbbs4`): Romolo Marotta, Mauro Ianni, Alessandro Pellegrini,
//!   Francesco Quaglia. "NBBS: A Non-Blocking Buddy System for Multi-core Machines". *IEEE
//!   Transactions on Computers* 71(3), 2022 (online 2021). DOI 10.1109/TC.2021.3060393.
//!   Earlier versions: Marotta, Ianni, Andrea Scarselli, Pellegrini, Quaglia, same title,
//!   *19th IEEE/ACM International Symposium on Cluster, Cloud and Grid Computing (CCGRID)*,
//!   2019, pp. 11–20, DOI 10.1109/CCGRID.2019.00011 (the 4-level variant); and "A
//!   Non-blocking Buddy System for Scalable Memory Allocation on Multi-core Machines", *IEEE
//!   International Conference on Cluster Computing (CLUSTER)*, 2018, pp. 164–165,
//!   DOI 10.1109/CLUSTER.2018.00034.
//! - **LLFree** (`llfree`): Lars Wrenger, Florian Rommel, Alexander
//!   Halbuer, Christian Dietrich, Daniel Lohmann. "LLFree: Scalable and
//!   Optionally-Persistent Page-Frame Allocation". *2023 USENIX Annual Technical Conference
//!   (USENIX ATC '23)*, 2023. <https://www.usenix.org/conference/atc23/presentation/wrenger>
//! - **Real-time buddy** (Knuth's and the estranged buddy, defragmentation):
//!   Steven M. Donahue, Matthew P. Hampton, Morgan Deters, Jonathan M. Nye, Ron K. Cytron,
//!   Krishna M. Kavi. "Storage Allocation for Real-Time, Embedded Systems". *Embedded
//!   Software, First International Workshop (EMSOFT 2001)*, LNCS 2211, Springer, 2001,
//!   pp. 131–147. DOI 10.1007/3-540-45449-7_10.
//! - **Knuth's buddy**: Donald E. Knuth. *The Art of Computer Programming, Vol. 1:
//!   Fundamental Algorithms*, 3rd ed., §2.5. Addison-Wesley, 1997.

#![no_std]
#![cfg_attr(feature = "nightly", feature(allocator_api))]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(all(loom, not(feature = "loom")))]
compile_error!(
    "`--cfg loom` model-checks buddyfree with loom's atomics: enable its `loom` feature too"
);

#[cfg(any(feature = "alloc", test))]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

/// The methods of [`BlockAlloc`], each the same method of `**self`: the whole impl for a
/// wrapper that adds nothing to the allocator it holds (a `Box`, the magazines' `Plain`).
macro_rules! block_alloc_via_deref {
    () => {
        block_alloc_via_deref! {
            alloc(order: u32, core: usize) -> Result<usize, Error>;
            alloc_class(order: u32, class: Class, core: usize) -> Result<usize, Error>;
            free(index: usize, order: u32, core: usize) -> Result<(), Error>;
            alloc_bulk(order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error>;
            free_bulk(blocks: &[usize], order: u32, core: usize) -> Result<(), (usize, Error)>;
            capabilities() -> Capabilities;
            free_units() -> usize;
            total_units() -> usize;
            max_order() -> u32;
            drain();
            drain_core(core: usize);
            try_alloc(order: u32, core: usize) -> Result<usize, Error>;
            try_free(index: usize, order: u32, core: usize) -> Result<(), Error>;
            alloc_at(index: usize, order: u32, core: usize) -> Result<(), Error>;
            block_of(index: usize) -> Result<Option<(usize, u32)>, Error>;
            try_block_of(index: usize) -> Result<Option<(usize, u32)>, Error>;
            next_block(from: usize) -> Result<Option<(usize, u32)>, Error>;
            order_at(index: usize) -> Result<u32, Error>;
            try_order_at(index: usize) -> Result<u32, Error>;
            free_range(start: usize, len: usize, core: usize) -> Result<(), Error>;
            reserve_range(start: usize, len: usize, core: usize) -> Result<(), Error>;
            with_core(core: usize, f: &mut dyn FnMut(&mut dyn HeldCore));
        }
    };
    ($($method:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        $(fn $method(&self, $($arg: $ty),*) $(-> $ret)? {
            (**self).$method($($arg),*)
        })*
    };
}

/// [`BlockAlloc::reserve_range`] and [`BlockAlloc::free_range`] for an allocator whose frees
/// refuse the units of its boot reservation, `self.reserved`: the range operations record
/// the ranges there ([`range`]).
macro_rules! ranges_recorded {
    () => {
        fn reserve_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
            crate::range::reserve_range(&self.reserved, &mut crate::OnCore(self, core), start, len)
        }

        fn free_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
            crate::range::free_range(&self.reserved, &mut crate::OnCore(self, core), start, len)
        }
    };
}

// First: its macro is used by the allocators' modules.
#[macro_use]
mod table;

pub mod buddy;
mod caps;
mod class;
mod config;
mod error;
pub mod heap;
pub mod llfree;
pub mod locked;
pub mod magazine;
pub mod nbbs;
pub mod range;
mod refusal;
#[cfg(feature = "alloc")]
pub mod registry;
mod reserved;
pub(crate) mod sync;
#[cfg(feature = "x86_64")]
pub mod x86_64;
mod yield_mutex;
pub mod zones;

pub use caps::Capabilities;
pub use class::Class;
pub use config::{Config, ConfigRule, MAX_CORES};
pub use error::Error;
pub use locked::Locked;
pub use nbbs::{Nbbs, Nbbs4};
/// How many refusals this thread has confirmed by a second search (test machinery, not API).
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use refusal::confirmations as refusal_confirmations;
pub use reserved::MAX_RESERVED_RUNS;
pub use table::MetadataMemory;

/// The README's examples, compiled and run by `cargo test` so that the front door never lies.
/// `../README.md` is the crate's own readme: a symlink to the workspace's in the repository,
/// a copy in the published package, so the doctests run in both.
#[cfg(all(doctest, feature = "std"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guides' Rust examples, compiled and run by `cargo test` as the README's are.
/// `../docs/*.md` are symlinks to the workspace's `docs/` (copies in the package); each guide
/// needs the features its examples use, which the crate's tests turn on (the dev-dependency
/// on itself). `tests/guides.rs` checks that every guide with Rust in it is listed here.
#[cfg(doctest)]
pub mod guide_doctests {
    /// docs/kernel.md (its last example is on the `x86_64` crate's traits).
    #[cfg(all(feature = "alloc", feature = "x86_64"))]
    #[doc = include_str!("../docs/kernel.md")]
    pub struct Kernel;
    /// docs/device-memory.md.
    #[cfg(feature = "std")]
    #[doc = include_str!("../docs/device-memory.md")]
    pub struct DeviceMemory;
    /// docs/persistence.md.
    #[cfg(feature = "persist")]
    #[doc = include_str!("../docs/persistence.md")]
    pub struct Persistence;
}

/// An allocator of naturally aligned blocks of `2^order` units, safe to share between threads.
///
/// `core` is a hint naming the calling core (or thread). Allocators with per-core state use it
/// to pick that state; others ignore it. Any value is accepted: allocators reduce it modulo
/// their number of cores. In `std` builds [`core_hint`] gives a stable per-thread value.
///
/// Five methods are required (`alloc`, `free`, `free_units`, `total_units`, `max_order`);
/// the rest have defaults. What per-core magazines need beyond this (owned bulk frees, how
/// bulk allocations are placed) is the sealed [`magazine::Backend`], not part of this trait.
///
/// # Optional operations: flags, not traits
///
/// The never-wait calls ([`try_alloc`](Self::try_alloc), [`try_free`](Self::try_free),
/// [`try_block_of`](Self::try_block_of)), placement ([`alloc_at`](Self::alloc_at) and the
/// range operations built on it) and introspection ([`block_of`](Self::block_of) and those
/// built on it) stay methods of this trait whose support [`capabilities`](Self::capabilities)
/// reports, rather than traits of their own checked at compile time (as the `x86_64`
/// crate's `FrameAllocator` and `FrameDeallocator` are). Allocators are mostly picked at
/// run time, behind a `dyn BlockAlloc`: the registry by name, the C ABI, wrappers over
/// a boxed allocator. Behind a `dyn`, a trait per operation would need an
/// `Option<&dyn TryAlloc>` accessor per trait or a type per combination, and the wrappers
/// ([`Locked`], magazines, [`Zones`](zones::Zones), `Box`) would need an impl per trait
/// and per combination of what they wrap, to answer what the flags answer in one call.
/// And every allocator this crate publishes offers every optional operation
/// ([`Capabilities::ALL`] on each registry entry), so the flags only tell apart
/// allocators written elsewhere, which may leave the defaults ([`Error::Unsupported`]).
pub trait BlockAlloc: Sync {
    /// Allocates a block of `2^order` units aligned to `2^order` and returns the index of its
    /// first unit.
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error>;

    /// Allocates like [`BlockAlloc::alloc`] a block for memory of kind `class` (movable,
    /// unmovable, huge: see [`Class`]), which allocators that place kinds apart use to keep
    /// them apart. The default ignores `class` and calls `alloc`.
    fn alloc_class(&self, order: u32, class: Class, core: usize) -> Result<usize, Error> {
        let _ = class;
        self.alloc(order, core)
    }

    /// Frees the block of `2^order` units starting at `index`.
    ///
    /// A bad request (not allocated, freed twice, wrong order, out of range, misaligned)
    /// returns the matching [`Error`] and leaves the allocator exactly as it was.
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error>;

    /// Allocates up to `out.len()` blocks of `order` and writes their first units to the front
    /// of `out`; returns how many (at least one for a non-empty `out`), fewer than asked only
    /// where [`BlockAlloc::alloc`] would have failed. Fails as `alloc` does when not even one
    /// block can be had. Each block is freed on its own, as if `alloc` had returned it. The
    /// default calls `alloc` for each; allocators that claim several blocks in one step
    /// override it (LLFree: the free blocks of orders 0..=8 in the huge frame of the core's
    /// last allocation, one update of each counter for all, and one compare-and-swap per
    /// bit-field word for orders 0..=5; NBBS-4: groups of 2 to 8
    /// blocks under one node of a cell, one climb per group), which is what per-core caches
    /// refill with.
    fn alloc_bulk(&self, order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error> {
        for (n, slot) in out.iter_mut().enumerate() {
            match self.alloc(order, core) {
                Ok(index) => *slot = index,
                Err(e) if n == 0 => return Err(e),
                Err(_) => return Ok(n),
            }
        }
        Ok(out.len())
    }

    /// Frees `blocks`, each of `order`, as [`BlockAlloc::free`] would one after the other,
    /// stopping at the first one refused: its position in `blocks` and the error (it and the
    /// blocks after it stay as they were). The default calls `free` for each; allocators that
    /// free several blocks in one step override it (LLFree: blocks of orders 0..=8 that come
    /// one after another in `blocks` and lie in one huge frame, one update of each counter
    /// for all, and one compare-and-swap per bit-field word for orders 0..=5; NBBS-4: runs
    /// that are exactly the blocks under one node of a cell, one climb per run), which is
    /// what per-core caches spill with.
    fn free_bulk(&self, blocks: &[usize], order: u32, core: usize) -> Result<(), (usize, Error)> {
        free_each(self, blocks, order, core)
    }

    /// Units not handed out to callers (blocks held in internal caches count as free).
    #[must_use]
    fn free_units(&self) -> usize;

    /// Units managed in all.
    #[must_use]
    fn total_units(&self) -> usize;

    /// The largest order that can be allocated.
    #[must_use]
    fn max_order(&self) -> u32;

    /// Returns blocks held in per-core or per-thread caches to the shared pool, so that
    /// they can merge into larger blocks. Allocators without caches do nothing.
    fn drain(&self) {}

    /// Returns what core `core` alone holds (its per-core cache, its reserved share of the
    /// memory) to the shared pool, and nothing of the other cores': for a core that goes
    /// offline, or one about to idle for long. Waits, like [`BlockAlloc::drain`], for that
    /// core's cache if another thread holds it. Allocators whose caches are not per core
    /// drain them all; allocators without caches do nothing.
    fn drain_core(&self, core: usize) {
        let _ = core;
        self.drain();
    }

    /// Which of the optional operations this allocator offers ([`BlockAlloc::try_alloc`],
    /// [`BlockAlloc::try_free`], [`BlockAlloc::alloc_at`], [`BlockAlloc::block_of`],
    /// [`BlockAlloc::try_block_of`] and those built on them), so that a caller can tell
    /// before it calls one whether it would answer [`Error::Unsupported`]: see
    /// [`Capabilities`] for what a flag promises. The same answer for the allocator's whole
    /// life. The default, [`Capabilities::NONE`], claims nothing, which is right (if
    /// modest) for any allocator; every allocator of this crate says what it offers, and
    /// wrappers ([`Box`](alloc::boxed::Box), [`Locked`], magazines, [`Zones`](zones::Zones))
    /// pass on what the allocators behind them offer.
    ///
    /// ```
    /// use buddyfree::{registry, BlockAlloc, Capabilities, Config, Error};
    ///
    /// for entry in registry::entries() {
    ///     let a = (entry.build)(Config::new(1 << 10, entry.max_order.min(4)), Default::default())?;
    ///     let page = a.alloc(0, 0)?;
    ///     // An interrupt handler frees where it can, and leaves the rest for later.
    ///     if a.capabilities().contains(Capabilities::TRY_FREE) {
    ///         assert_ne!(a.try_free(page, 0, 0), Err(Error::Unsupported), "{}", entry.name);
    ///     } else {
    ///         assert_eq!(a.try_free(page, 0, 0), Err(Error::Unsupported), "{}", entry.name);
    ///     }
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    /// Allocates like [`BlockAlloc::alloc`] but never waits, for interrupt or atomic
    /// context: where `alloc` would wait for a lock or for another core's operation to
    /// finish, this answers [`Error::WouldBlock`]. Its worst case is a bounded number of steps
    /// (see the README's table of worst cases). Allocators with no such guarantee answer
    /// [`Error::Unsupported`].
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        let _ = (order, core);
        Err(Error::Unsupported)
    }

    /// Frees like [`BlockAlloc::free`] but never waits, for interrupt or atomic context
    /// (where the interrupted code may hold the lock `free` would wait for): where `free`
    /// would wait, this answers [`Error::WouldBlock`] and changes nothing. The lock-free
    /// designs free as `free` does; allocators with no such guarantee answer
    /// [`Error::Unsupported`].
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        let _ = (index, order, core);
        Err(Error::Unsupported)
    }

    /// Allocates the block of `2^order` units at `index`, if every unit in it is free:
    /// [`Error::Occupied`] (changing nothing) if one is not, and for a bad block the errors
    /// `free` gives ([`Error::BadOrder`], [`Error::OutOfRange`], [`Error::Misaligned`]). Allocators that cannot choose the position answer [`Error::Unsupported`].
    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        let _ = (index, order, core);
        Err(Error::Unsupported)
    }

    /// The live block that contains unit `index`, as `(first unit, order)`, or `None` when
    /// the unit is free. [`Error::Unsupported`] where the allocator does not record it.
    /// A snapshot: a racing operation on that unit may change the answer at once.
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        let _ = index;
        Err(Error::Unsupported)
    }

    /// [`BlockAlloc::block_of`] that never waits, for interrupt context (a free by address
    /// alone there): [`Error::WouldBlock`] where the answer needs a lock that is held.
    /// The lock-free designs, the lists and the per-level buddy read their state as
    /// `block_of` does; the locked allocators take their lock only if it is free at once;
    /// the default is [`Error::Unsupported`].
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        let _ = index;
        Err(Error::Unsupported)
    }

    /// The live block that contains unit `from` or, where `from` is free, the first live
    /// block after it, as `(first unit, order)`; `None` if every unit from `from` on is free
    /// (or `from` is past the last unit). A snapshot, as [`BlockAlloc::block_of`], and
    /// [`Error::Unsupported`] where that is. The default asks `block_of` unit by unit;
    /// NBBS and LLFree skip what is free (a free sub-tree, a free huge frame or bit-field
    /// word at a time), so that a walk over every live block (the adoption of an
    /// allocator's blocks by magazines) costs steps per block rather than per unit.
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        next_by_units(from, self.total_units(), |index| self.block_of(index))
    }

    /// The order of the live block that starts at `index`, for a free without the order
    /// (device memory, a C caller that kept only the offset): [`Error::NotAllocated`] when
    /// no block starts there.
    fn order_at(&self, index: usize) -> Result<u32, Error> {
        order_starting_at(self.total_units(), index, |index| self.block_of(index))
    }

    /// [`BlockAlloc::order_at`] that never waits, through [`BlockAlloc::try_block_of`].
    fn try_order_at(&self, index: usize) -> Result<u32, Error> {
        order_starting_at(self.total_units(), index, |index| self.try_block_of(index))
    }

    /// Frees every unit of `start..start + len`, which must all be allocated (reserved at
    /// boot, say), as the largest aligned blocks: see [`range`] for the rules and the cost.
    fn free_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
        range::free_range(None, &mut crate::OnCore(self, core), start, len)
    }

    /// Allocates every unit of `start..start + len` as the largest aligned blocks, if all are
    /// free; [`Error::Occupied`] and nothing changed otherwise. See [`range`].
    fn reserve_range(&self, start: usize, len: usize, core: usize) -> Result<(), Error> {
        range::reserve_range(None, &mut crate::OnCore(self, core), start, len)
    }

    /// Calls `f` once with `core` held for the caller: what `f` allocates and frees through
    /// its [`HeldCore`] goes to that core's per-core state without taking its lock each
    /// time. The pin of allocators behind a `dyn BlockAlloc` (the registry, the C ABI):
    /// [`Magazine`](magazine::Magazine) holds the core's cache
    /// for the whole call, as [`Magazine::pin`](magazine::Magazine::pin) does, so a pair
    /// costs no lock; other callers that need that cache wait until `f` returns. So `f` must
    /// not call this allocator's own methods: calls naming `core`, and those that take every
    /// core's cache ([`BlockAlloc::drain`], [`BlockAlloc::free_units`], an allocation that
    /// finds the backend empty, [`BlockAlloc::alloc_at`] and the range operations over a
    /// parked block), would wait for `f` forever (with `std` they panic instead, naming the
    /// cause). Calls from `f` on another instance can deadlock too, where another thread
    /// holds one of that instance's cores and calls this one: a call of either that drains
    /// waits for every core of its instance, held ones included (so
    /// [`Zones`](zones::Zones) keeps the default). Bad frees get the same answers as through
    /// [`BlockAlloc::free`]. The default, for allocators without a per-core lock to hold,
    /// hands `f` plain [`BlockAlloc::alloc`] and [`BlockAlloc::free`] calls on `core`.
    /// Implementations call `f` exactly once; [`hold_core`] wraps it for a closure that
    /// returns a value.
    fn with_core(&self, core: usize, f: &mut dyn FnMut(&mut dyn HeldCore)) {
        f(&mut OnCore(self, core));
    }
}

/// The operations of a core held by [`BlockAlloc::with_core`].
pub trait HeldCore {
    /// Allocates a block of `2^order` units, as [`BlockAlloc::alloc`] on the held core.
    fn alloc(&mut self, order: u32) -> Result<usize, Error>;

    /// Frees the block `(index, order)`, as [`BlockAlloc::free`] on the held core: a bad or
    /// double free is an error and changes nothing, whichever core the block came from.
    fn free(&mut self, index: usize, order: u32) -> Result<(), Error>;
}

/// [`BlockAlloc::with_core`] for a closure that returns something: runs `f` on `core` held
/// by `alloc` and returns its answer.
///
/// ```
/// use buddyfree::{hold_core, registry, Config, Error};
///
/// let fast = (registry::find("llfree-magazine").unwrap().build)(Config::new(1 << 12, 10), Default::default())?;
/// let pages = hold_core(&*fast, 0, |core| -> Result<_, Error> {
///     let pages = [core.alloc(0)?, core.alloc(0)?];
///     core.free(pages[1], 0)?;
///     Ok(pages)
/// })?;
/// assert_eq!(fast.free(pages[1], 0, 0), Err(Error::NotAllocated));
/// fast.free(pages[0], 0, 0)?;
/// # Ok::<(), Error>(())
/// ```
pub fn hold_core<A: BlockAlloc + ?Sized, R>(
    alloc: &A,
    core: usize,
    f: impl FnOnce(&mut dyn HeldCore) -> R,
) -> R {
    let mut f = Some(f);
    let mut answer = None;
    alloc.with_core(core, &mut |held| answer = f.take().map(|f| f(held)));
    answer.expect("BlockAlloc::with_core calls its closure once")
}

/// An allocator's plain calls naming one core, as a [`HeldCore`]: the default
/// [`BlockAlloc::with_core`] hands `f` one, and code written once for a held core can run
/// on the plain calls through it.
///
/// ```
/// use buddyfree::llfree::LLFree;
/// use buddyfree::{BlockAlloc, Config, HeldCore, OnCore};
///
/// fn burst(calls: &mut impl HeldCore) -> Result<(), buddyfree::Error> {
///     let page = calls.alloc(0)?;
///     calls.free(page, 0)
/// }
/// let frames = LLFree::new(Config::new(1 << 12, 10))?;
/// burst(&mut OnCore(&frames, 0))?;
/// assert_eq!(frames.free_units(), 1 << 12);
/// # Ok::<(), buddyfree::Error>(())
/// ```
pub struct OnCore<'a, A: ?Sized>(pub &'a A, pub usize);

impl<A: BlockAlloc + ?Sized> HeldCore for OnCore<'_, A> {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        self.0.alloc(order, self.1)
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        self.0.free(index, order, self.1)
    }
}

/// The plain calls naming one core as a sequential allocator, so that code written once
/// for both (the range operations) runs on shared allocators too.
impl<A: BlockAlloc + ?Sized> SeqBlockAlloc for OnCore<'_, A> {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        self.0.alloc(order, self.1)
    }
    fn alloc_class(&mut self, order: u32, class: Class) -> Result<usize, Error> {
        self.0.alloc_class(order, class, self.1)
    }
    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        self.0.free(index, order, self.1)
    }
    fn free_units(&self) -> usize {
        self.0.free_units()
    }
    fn total_units(&self) -> usize {
        self.0.total_units()
    }
    fn max_order(&self) -> u32 {
        self.0.max_order()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn alloc_at(&mut self, index: usize, order: u32) -> Result<(), Error> {
        self.0.alloc_at(index, order, self.1)
    }
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.0.block_of(index)
    }
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        self.0.next_block(from)
    }
}

/// [`BlockAlloc::next_block`] and [`SeqBlockAlloc::next_block`] by one `block_of` per unit
/// from `from` up to `total`.
fn next_by_units(
    from: usize,
    total: usize,
    block_of: impl Fn(usize) -> Result<Option<(usize, u32)>, Error>,
) -> Result<Option<(usize, u32)>, Error> {
    // The first unit whose answer is a block or an error.
    (from..total)
        .find_map(|index| block_of(index).transpose())
        .transpose()
}

/// The order of the block that `block_of` finds starting at `index` (of `units`):
/// [`Error::NotAllocated`] when none starts there.
fn order_starting_at(
    units: usize,
    index: usize,
    block_of: impl FnOnce(usize) -> Result<Option<(usize, u32)>, Error>,
) -> Result<u32, Error> {
    if index >= units {
        return Err(Error::OutOfRange);
    }
    match block_of(index)? {
        Some((start, order)) if start == index => Ok(order),
        _ => Err(Error::NotAllocated),
    }
}

/// [`BlockAlloc::free_bulk`] by one [`BlockAlloc::free`] per block.
pub(crate) fn free_each<A: BlockAlloc + ?Sized>(
    a: &A,
    blocks: &[usize],
    order: u32,
    core: usize,
) -> Result<(), (usize, Error)> {
    for (k, &index) in blocks.iter().enumerate() {
        a.free(index, order, core).map_err(|e| (k, e))?;
    }
    Ok(())
}

#[cfg(feature = "alloc")]
impl<A: BlockAlloc + ?Sized> BlockAlloc for alloc::boxed::Box<A> {
    block_alloc_via_deref!();
}

/// A sequential allocator: the same operations on `&mut self`. [`Locked`] lifts one into a
/// [`BlockAlloc`] behind a lock.
pub trait SeqBlockAlloc: Send {
    /// See [`BlockAlloc::alloc`].
    fn alloc(&mut self, order: u32) -> Result<usize, Error>;
    /// See [`BlockAlloc::alloc_class`]: the default ignores `class` and calls `alloc`.
    fn alloc_class(&mut self, order: u32, class: Class) -> Result<usize, Error> {
        let _ = class;
        self.alloc(order)
    }
    /// See [`BlockAlloc::free`].
    fn free(&mut self, index: usize, order: u32) -> Result<(), Error>;
    /// See [`BlockAlloc::free_units`].
    #[must_use]
    fn free_units(&self) -> usize;
    /// See [`BlockAlloc::total_units`].
    #[must_use]
    fn total_units(&self) -> usize;
    /// See [`BlockAlloc::max_order`].
    #[must_use]
    fn max_order(&self) -> u32;
    /// Which of the optional operations of this trait it offers:
    /// [`Capabilities::ALLOC_AT`] and [`Capabilities::BLOCK_OF`] (the others are for
    /// [`Locked`] to say). The default claims neither, as [`BlockAlloc::capabilities`]'s
    /// does.
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }
    /// See [`BlockAlloc::alloc_at`].
    fn alloc_at(&mut self, index: usize, order: u32) -> Result<(), Error> {
        let _ = (index, order);
        Err(Error::Unsupported)
    }
    /// See [`BlockAlloc::block_of`].
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        let _ = index;
        Err(Error::Unsupported)
    }
    /// See [`BlockAlloc::next_block`].
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        next_by_units(from, self.total_units(), |index| self.block_of(index))
    }
}

/// [`Error::BadOrder`] for an order above `max_order`: the first check of every call that
/// names an order.
#[inline]
pub(crate) fn check_order(order: u32, max_order: u32) -> Result<(), Error> {
    if order > max_order {
        return Err(Error::BadOrder);
    }
    Ok(())
}

/// Checks the arguments of a `free` that every allocator rejects the same way: an order
/// above `max_order`, a block reaching past `total_units`, or an index not aligned to
/// `2^order`.
pub(crate) fn check_block(
    index: usize,
    order: u32,
    max_order: u32,
    total_units: usize,
) -> Result<(), Error> {
    check_order(order, max_order)?;
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
/// the order of the live block starting at `index`, if any. The same order frees it; another
/// order is [`Error::OrderMismatch`]; no live block is [`Error::NotAllocated`].
#[inline]
pub(crate) fn check_live(live: Option<u32>, order: u32) -> Result<(), Error> {
    match live {
        Some(o) if o == order => Ok(()),
        Some(_) => Err(Error::OrderMismatch),
        None => Err(Error::NotAllocated),
    }
}

/// [`BlockAlloc::block_of`] over `units` units: of the aligned starts at or below `index`,
/// order 0 up to `max_order`, the first that `live(start, order)` says starts a held block
/// of that order.
pub(crate) fn live_block_at(
    index: usize,
    (units, max_order): (usize, u32),
    live: impl Fn(usize, u32) -> bool,
) -> Result<Option<(usize, u32)>, Error> {
    if index >= units {
        return Err(Error::OutOfRange);
    }
    Ok((0..=max_order)
        .map(|order| (index & !((1 << order) - 1), order))
        .find(|&(start, order)| live(start, order)))
}

/// The slot of `core` hint among `cores` per-core slots: the hint modulo `cores`, with no
/// division on the usual path where callers pass a core below `cores`.
#[inline]
pub(crate) fn core_slot(core: usize, cores: usize) -> usize {
    if core < cores {
        core
    } else {
        core % cores
    }
}

/// A stable small number for the calling thread, to pass as the `core` hint.
///
/// Threads are numbered in the order they first ask, so `n` threads get `0..n`.
#[cfg(all(feature = "std", not(loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
#[must_use]
pub fn core_hint() -> usize {
    use core::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static CORE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    CORE.with(|c| *c)
}
