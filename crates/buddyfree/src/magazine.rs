//! A per-core fast path for the scalable allocators: small per-core magazines of recently
//! freed blocks of orders 0–9 in front of any [`BlockAlloc`], the per-thread cache of the
//! NBBS paper (Marotta et al., §3.6.1). The allocator behind is a [`Backend`]: one of this
//! crate's, or any other `BlockAlloc` wrapped in [`Plain`].
//!
//! ```text
//!  Magazine<A>
//!  ├── backend: A                   Nbbs4, LLFree, Nbbs, ... (lock-free)
//!  ├── caches:  [CachePadded<Mutex<YieldMutex, CoreCache>>; cores]
//!  │              per order 0..=9: recently freed blocks (allocated in A), in one
//!  │              fixed array per core
//!  └── states:  [u8; units]         Free | Live | Direct | Owned(core) | Cached
//! ```
//!
//! # Protocol
//!
//! - **The pair.** A free of a block of orders 0–9 parks it in a core's magazine, and an
//!   allocation takes the most recently parked one (cache-hot): one uncontended per-core lock
//!   each way, a list push or pop and one byte of `states`, instead of the backend's search
//!   and its shared cache lines. Orders 10 and up go straight to the backend.
//! - **Refill and spill.** An empty list is refilled with a batch from
//!   [`BlockAlloc::alloc_bulk`]; a list above its watermark gives its oldest batch back
//!   through [`Backend::free_bulk_owned`]. The batches and watermarks per order, and how
//!   they shrink on small heaps, are the `MAGAZINE_STEPS` policies below. Over a backend
//!   whose bulk allocations continue where the core's last one ended
//!   ([`Backend::alloc_bulk_continues`]: LLFree) a batch stops at the end of a region of
//!   one batch's size, so that later batches, and spills, are whole regions (LLFree: one
//!   huge frame, its counters updated once per batch). An order the backend takes in bulk no
//!   cheaper than block by block ([`Backend::alloc_bulk_groups`]) moves one block at a
//!   time.
//! - **Frees.** A block that a magazine handed out is recorded as that magazine's: its free
//!   takes that magazine's lock (the freeing core's own when it is the same core), checks the
//!   byte there and parks the block, so the lock decides racing frees, with no
//!   compare-and-swap on the byte. Any other block's free is decided by one compare-and-swap
//!   on the byte. The `cached` module gives the state machine.
//! - **Refusals.** An allocation the backend refuses gives back every parked block that
//!   may complete a free block of its order (all but those whose buddy a caller holds; a
//!   magazine that kept blocks at the core's last refusal gives all back) and asks once
//!   more (the backend gathers its own per-core state before it refuses), so it fails only
//!   if no free aligned block exists; where every magazine's hint (a flag per core, read
//!   without its lock) says it holds nothing, the backend's refusal stands at once. The
//!   `cached` module's *Refusals* gives the argument.
//! - **Streams.** A core that allocates more blocks of an order than its list holds, with no
//!   free parking one between, hands the rest of that stream out `Direct` for the orders
//!   moved one block at a time (the `cached` module's *Streams*): their frees skip the
//!   magazine (a load and a store of the state byte, then the backend's free). A free on
//!   that core that parks a block of the order, or frees a `Direct` one, ends the stream.
//!
//! # Invariants
//!
//! - A parked block is allocated in the backend and `Cached` in `states`; a block a magazine
//!   handed out is `Owned` by it, and its byte changes only under that magazine's lock.
//! - A double free of a parked block is [`Error::NotAllocated`], a wrong order
//!   [`Error::OrderMismatch`], and a free that errs changes nothing. `states` does not record
//!   blocks of orders 10 and up; the backend answers their frees.
//! - The lists have a fixed room (their watermark and one block more per order), so a
//!   magazine never allocates once built, on the heap ([`Magazine::new`]) or in caller memory
//!   ([`Magazine::in_metadata`]).
//! - Blocks out before the magazines are built (a memory map's holes, a recovered zone's
//!   blocks) are adopted into `states` by a walk with [`BlockAlloc::next_block`]; an
//!   allocator with blocks out that cannot name them is refused
//!   ([`ConfigRule::InnerInUse`]).
//! - [`BlockAlloc::free_units`] counts parked blocks as free; [`BlockAlloc::block_of`]
//!   answers the backend's block, or `None` for a parked one; [`BlockAlloc::alloc_at`] gives
//!   back every magazine first when a parked block overlaps the requested one.
//!
//! # Lock order
//!
//! A magazine's lock, then the backend's (where it has one); never two magazines at once: a
//! pinned core that frees a block another magazine holds lets its own go meanwhile. Waiters
//! spin briefly, then yield the processor in `std` builds; in `no_std` they spin, as a
//! kernel's per-CPU lists expect preemption to be off.
//!
//! # What it trades
//!
//! - **Parked blocks are free but reachable only by their core**, and cannot merge into
//!   larger blocks, until a spill, [`BlockAlloc::drain`] or [`BlockAlloc::drain_core`] (for a
//!   core that goes offline). The watermarks follow the heap's units per core, shorter on
//!   small heaps so that a small machine's huge frames are not held by its lists:
//!   [`Magazine::parking_limit`] says which a magazine has, [`Settings::with_parking_limit`]
//!   (through [`Magazine::with_settings`], by name or from C) picks another, and
//!   [`Magazine::parked_units`] says what a core holds. Shorter lists cost speed where blocks
//!   are large next to them.
//! - **Metadata**: a byte per unit for `states` on top of the backend's, and the lists' room
//!   per core.
//! - **Blocking**: the lock is per core, but a lock. [`BlockAlloc::try_alloc`] answers
//!   [`Error::WouldBlock`] rather than wait for it, after giving back the blocks of every
//!   magazine whose lock is free at once. [`BlockAlloc::try_free`] answers `WouldBlock`
//!   while the magazine that handed the block out is held; for interrupt handlers that
//!   cannot retry, [`Settings::with_interrupt_safe_frees`] decides every free by the
//!   compare-and-swap instead, at one more locked instruction per free. Or keep interrupts
//!   off around magazine calls, as Linux does for its per-CPU lists.
//! - **Streams and bursts**: every free tests the state byte for `Direct` before the lock. A
//!   burst of an order moved one block at a time reuses nothing and pays the magazine on top
//!   of the backend; a stale double free of a `Direct` block racing the block's reuse is
//!   answered by the backend, as without a magazine.
//! - **Placement**: reused blocks come from the magazine, not from where the backend would
//!   place them (LLFree's per-core trees, say).
//! - **Persistent zones**: a parked block is allocated in the zone, so its free is durable
//!   only once the magazine gives it back (a spill, a drain, [`Magazine::into_inner`]); after
//!   a crash, parked blocks come back allocated. Drain before a point that must survive a
//!   crash.
//!
//! What each of these costs, measured with its command and machine: docs/results.md, 'The
//! magazines' fast path'.
//!
//! # Pinned cores
//!
//! Through [`BlockAlloc`], every call takes its core's magazine lock, since `core` is only a
//! hint and two threads may name one core. A caller that owns a core for a while (a kernel
//! with preemption off, a worker thread with a core of its own) can [`Magazine::pin`] it:
//! the handle holds the magazine's lock until it is dropped, and its allocations and frees
//! of orders 0–9 take no lock, leaving the compare-and-swap that keeps double frees exact.
//! Behind a `dyn BlockAlloc` (the registry, the C ABI), [`BlockAlloc::with_core`] holds the
//! magazine for the length of a closure. Bad frees get the same answers either way.

mod backend;
mod cached;

use core::alloc::Layout;

use crate::reserved::Reserved;
use crate::sync::CachePadded;
use crate::table::{build, unaligned_bytes, Table};
#[cfg(doc)]
use crate::{BlockAlloc, ConfigRule};
use crate::{Config, Error, MetadataMemory};
pub use cached::PinnedCore;
use cached::{plan, BlockStates, Front, ListLine, Policy, OWNERS};

pub(crate) use backend::Sealed;
pub use backend::{Backend, Plain};

/// The magazines' policies, longest lists first; step `s` gives every list a watermark of
/// `2^-s` of the first step's (at least two blocks) and moves at most half of that at once.
///
/// Step 0, the full lists: orders 0–9. Order 0 is refilled and spilled 32 units at a time,
/// spilling above 128 units; orders 1–5 move 256 units at a time, spilling above 512, since
/// a batch of a larger order holds fewer blocks to spread a backend call over. Orders 6–8
/// move 512 units, one LLFree huge frame (8, 4 and 2 blocks), and spill above twice that
/// (order 8: above 8 blocks): a batch of one whole frame is one that LLFree fills with
/// plain stores when the frame is free as a whole, smaller batches spread a backend call
/// over fewer blocks, and larger ones span two frames; a watermark of two batches, not
/// less, keeps a spill's blocks within one frame. Order 0 stays small: it is what
/// fragments huge frames, and a larger batch would not make its pairs cheaper. Order 9
/// (2 MiB blocks of 4 KiB units, the huge frames) moves one block at a time and keeps up to
/// 8 blocks, so that workloads of mostly huge frames and half-frames (larson at 256 KiB)
/// find enough parked to run faster than a locked buddy allocator (`knuth-locked`); see
/// docs/results.md, 'The magazines' fast path'. In all, a core parks at most 10 880 units;
/// 5 440, 2 720 and 2 256 in the later steps.
static MAGAZINE_STEPS: [Policy; 4] = [
    magazine_policy(0),
    magazine_policy(1),
    magazine_policy(2),
    magazine_policy(3),
];

/// Step `step` of [`MAGAZINE_STEPS`]: every watermark of the full lists shifted right by
/// `step`, and every batch at most half of its watermark.
const fn magazine_policy(step: u32) -> Policy {
    let mut policy = Policy::new(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 0, 0);
    let mut order = 0;
    while order < 10 {
        // The full lists: units moved at once and the watermark in units.
        let (batch, high) = match order {
            0 => (32, 128),
            1..=5 => (256, 512),
            6 | 7 => (512, 1024),
            8 => (512, 2048),
            _ => (512, 4096),
        };
        let high = high >> step;
        let batch = if batch <= high / 2 { batch } else { high / 2 };
        policy = policy.with_units(order, batch, high);
        order += 1;
    }
    policy
}

/// Units per core from which magazines get the full lists by default (512 MiB of 4 KiB
/// units); below it, the lists halve with every halving of the heap per core, to the
/// shortest below 2^15 (128 MiB). At the start of each step a core parks at most 7–8.3% of
/// its share of the heap, as Linux scales its per-CPU lists with the zone's size.
const FULL_LISTS_FROM: usize = 1 << 17;

/// The longest lists whose ceiling is at most `units` per core, else the shortest.
fn policy_within(units: usize) -> &'static Policy {
    MAGAZINE_STEPS
        .iter()
        .find(|policy| policy.ceiling() <= units)
        .unwrap_or(&MAGAZINE_STEPS[MAGAZINE_STEPS.len() - 1])
}

/// The policy for magazines on `cores` cores in front of an allocator of `units` units: the
/// longest lists that park at most the part of the heap per core that the full lists park
/// of [`FULL_LISTS_FROM`] units. The steps' ceilings halve (but the last's), so the lists
/// halve where the heap per core does.
fn policy(units: usize, cores: usize) -> &'static Policy {
    let share = units / cores.max(1);
    policy_within(share.saturating_mul(MAGAZINE_STEPS[0].ceiling()) / FULL_LISTS_FROM)
}

/// What per-core caches may be told beyond their [`Config`]: how much each core's magazine
/// parks and how frees are decided. [`Magazine::with_settings`] applies it to magazines one
/// has; the registry's `build` (`registry::Entry::build`) builds its `*-magazine`
/// allocators with it, for code that picks its allocator by name (the C ABI's
/// `parking_limit` and `interrupt_safe_frees` arrive here). Allocators without per-core
/// caches have nothing to set and ignore it.
///
/// Settings of the caches alone, kept out of the [`Config`] that every allocator takes. It
/// may grow fields, so it is built by [`Settings::new`] (or `default`) and the `with_*`
/// builders, not by a struct literal:
///
/// ```compile_fail,E0639
/// let settings = buddyfree::magazine::Settings { parking_limit: None, interrupt_safe_frees: true };
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Settings {
    /// The most units each core's magazine may park (free blocks reachable only by that core
    /// until a spill or a drain), as [`Settings::with_parking_limit`] sets it. `None` (the
    /// default): the lists follow the heap per core ([`Magazine::parking_limit`]).
    pub parking_limit: Option<usize>,
    /// Whether every free of a cached order is decided by a compare-and-swap on the block's
    /// state byte, never under the lock of the cache that handed the block out, so that
    /// [`BlockAlloc::try_free`] from an interrupt handler never answers
    /// [`Error::WouldBlock`] because that cache is held
    /// ([`Settings::with_interrupt_safe_frees`]). `false` (the default): frees under the
    /// holder's lock, one locked instruction fewer per free.
    pub interrupt_safe_frees: bool,
}

impl Settings {
    /// The defaults: lists that follow the heap per core, frees under the holder's lock.
    #[must_use]
    pub const fn new() -> Self {
        Settings {
            parking_limit: None,
            interrupt_safe_frees: false,
        }
    }

    /// The same settings with magazines that park at most `units` per core: the longest
    /// lists within it (the shortest if none is; `usize::MAX` for the longest whatever the
    /// heap), chosen when the settings are applied ([`Magazine::with_settings`], every
    /// parked block given back first). For a kernel that knows
    /// better than its heap's size how much each core may keep from the others, including
    /// one that builds its allocator by name (the registry, the C ABI's `parking_limit`).
    ///
    /// ```
    /// use buddyfree::magazine::Settings;
    /// use buddyfree::{registry, Config};
    ///
    /// // 64 MiB of 4 KiB units on 4 cores would get the shortest lists (2 256 units a core).
    /// let config = Config::new(1 << 14, 10).with_cores(4);
    /// let settings = Settings::new().with_parking_limit(usize::MAX);
    /// let fast = (registry::find("llfree-magazine").unwrap().build)(config, settings)?;
    /// let page = fast.alloc(0, 3)?;
    /// fast.free(page, 0, 3)?; // parked in core 3's magazine, which may keep 10 880 units
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub const fn with_parking_limit(mut self, units: usize) -> Self {
        self.parking_limit = Some(units);
        self
    }

    /// The same settings with per-core caches whose frees never wait for the cache that
    /// handed a block out ([`Settings::interrupt_safe_frees`]): for a kernel whose interrupt
    /// handlers free through [`BlockAlloc::try_free`] and that builds its allocator by name
    /// (the registry, the C ABI's `interrupt_safe_frees`).
    ///
    /// ```
    /// use buddyfree::magazine::Settings;
    /// use buddyfree::{registry, BlockAlloc, Config, Error};
    ///
    /// let config = Config::new(1 << 14, 10).with_cores(2);
    /// for (settings, in_handler) in [
    ///     (Settings::new(), Err(Error::WouldBlock)),
    ///     (Settings::new().with_interrupt_safe_frees(), Ok(())),
    /// ] {
    ///     let frames = (registry::find("llfree-magazine").unwrap().build)(config, settings)?;
    ///     let page = frames.alloc(0, 1)?;
    ///     // Core 1's magazine, which handed the page out, is held by interrupted code.
    ///     frames.with_core(1, &mut |_| assert_eq!(frames.try_free(page, 0, 1), in_handler));
    /// }
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub const fn with_interrupt_safe_frees(mut self) -> Self {
        self.interrupt_safe_frees = true;
        self
    }
}

/// Per-core magazines of free blocks of orders 0–9 in front of the allocator `A`: see the
/// [module documentation](self) for what it trades.
pub struct Magazine<A> {
    backend: A,
    /// The policy the caches were given, fitted to the backend.
    policy: Policy,
    caches: Table<CachePadded<Front>>,
    /// The caches' lists, `LINES` lines per core; used only through the caches.
    _lists: Table<ListLine>,
    states: BlockStates,
    /// The caches (the first, by index) that hold the blocks they hand out (`Owned` in
    /// `states`); 0 for frees that never need the cache that handed a block out
    /// ([`Settings::interrupt_safe_frees`]).
    holders: usize,
    /// Whether caches that see a stream of allocations hand its blocks out `Direct` (the
    /// `cached` module's *Streams*).
    streams: bool,
    /// Units of the boot reservation, which frees refuse (`reserved.rs`): the caches park
    /// blocks the backend never sees freed, so the backend's own cannot answer for them.
    reserved: Reserved,
}

impl<A: Backend> Magazine<A> {
    /// Puts magazines for `config.cores` cores in front of the allocator `inner`, built over
    /// the same `config` (its `units`: [`ConfigRule::InnerUnits`] otherwise), adopting the
    /// blocks it has out (see the [module documentation](self)), with the default
    /// [`Settings`] (lists that follow the heap per core; [`Magazine::with_settings`] for
    /// others). Fails with [`Error::InvalidConfig`] for a configuration that cannot be
    /// built, or if `inner` has blocks out and cannot name them.
    ///
    /// ```
    /// use buddyfree::magazine::Magazine;
    /// use buddyfree::{BlockAlloc, Config, Nbbs4};
    ///
    /// let config = Config::new(1 << 12, 9).with_cores(2);
    /// let fast = Magazine::new(config, Nbbs4::new(config)?)?;
    /// let page = fast.alloc(0, 1)?; // refills core 1's magazine with a batch
    /// fast.free(page, 0, 1)?; // parked in core 1's magazine
    /// assert_eq!(fast.free(page, 0, 1), Err(buddyfree::Error::NotAllocated));
    /// fast.drain(); // every parked block back to the backend
    /// assert_eq!(fast.free_units(), 1 << 12);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn new(config: Config, inner: A) -> Result<Self, Error> {
        Self::assemble(config, inner, None)
    }

    /// The body of [`Magazine::new`] (`meta` `None`: the tables on the heap) and
    /// [`Magazine::in_metadata`].
    fn assemble(config: Config, inner: A, meta: Option<MetadataMemory>) -> Result<Self, Error> {
        build(plan(config, inner.total_units()), meta, |parts, meta| {
            Self::build(inner, policy(config.units, config.cores), parts, meta)
        })
    }

    /// The same magazines with `settings`: the lists [`Settings::parking_limit`] asks for,
    /// if it does (every parked block given back first, as
    /// [`Settings::with_parking_limit`] says; else the lists stay as they are), and the
    /// frees [`Settings::interrupt_safe_frees`] chooses.
    ///
    /// ```
    /// use buddyfree::llfree::LLFree;
    /// use buddyfree::magazine::{Magazine, Settings};
    /// use buddyfree::Config;
    ///
    /// let config = Config::new(1 << 14, 10).with_cores(4);
    /// let fast = Magazine::new(config, LLFree::new(config)?)?;
    /// assert_eq!(fast.parking_limit(), 2256); // 64 MiB of 4 KiB units on 4 cores
    /// let settings = Settings::new().with_parking_limit(3000).with_interrupt_safe_frees();
    /// let fast = fast.with_settings(settings);
    /// assert_eq!(fast.parking_limit(), 2720);
    /// assert_eq!(fast.with_settings(Settings::new().with_parking_limit(usize::MAX)).parking_limit(), 10880);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        if let Some(units) = settings.parking_limit {
            // Every step caches the same orders, so the state table's slots stay right; the
            // lists move within each core's room, so they are emptied first.
            let policy = policy_within(units);
            assert_eq!(policy.orders, self.policy.orders);
            self.drain_caches(0);
            self.policy = policy.fitted(&self.backend);
            for front in self.caches.iter_mut() {
                front.lock.get_mut().lay_out(&self.policy);
            }
        }
        // Blocks handed out before keep their state; either way their frees stay exact.
        self.holders = match settings.interrupt_safe_frees {
            true => 0,
            false => self.caches.len().min(OWNERS),
        };
        self
    }

    /// The bytes and alignment of the magazines' own metadata for `config.cores` cores in
    /// front of an allocator of `config.units` units, for [`Magazine::in_metadata`]: the
    /// state table (a byte per unit) and a fixed-size
    /// cache per core (5.4 KiB; lists that never grow, so a magazine never allocates). The
    /// allocator behind has its own (its `metadata_layout`). [`Error::InvalidConfig`] for a
    /// configuration that cannot be built. A `const fn`, as is
    /// [`Magazine::metadata_bytes`], which sizes a static buffer.
    pub const fn metadata_layout(config: Config) -> Result<Layout, Error> {
        const_try!(plan(config, config.units)).0.layout()
    }

    /// The bytes of memory, at any alignment, that [`Magazine::in_metadata`] takes for the
    /// magazines of `config`: the size of [`Magazine::metadata_layout`] and the padding that
    /// aligns its start (it aligns it within the memory). The allocator behind takes its own
    /// (its `metadata_bytes`), so this does not depend on `A`; one buffer of both sums holds
    /// both, cut in two by [`MetadataMemory::take`](crate::MetadataMemory::take) (see
    /// [`Magazine::in_metadata`]).
    ///
    /// # Panics
    /// If `config` cannot be built ([`Magazine::metadata_layout`]'s error): in a `const`, a
    /// compile error.
    ///
    /// ```compile_fail,E0080
    /// use buddyfree::{llfree::LLFree, magazine::Magazine, Config};
    ///
    /// const NO_CORES: usize = Magazine::<LLFree>::metadata_bytes(Config::new(1 << 14, 9).with_cores(0));
    /// static META: [u8; NO_CORES] = [0; NO_CORES];
    /// ```
    #[must_use]
    pub const fn metadata_bytes(config: Config) -> usize {
        unaligned_bytes(Self::metadata_layout(config))
    }

    /// As [`Magazine::new`] (feature `alloc`), with the magazines' metadata in `meta` (at
    /// least [`Magazine::metadata_bytes`] at any alignment, or
    /// [`Magazine::metadata_layout`]'s size at its alignment: the start is aligned up within
    /// `meta`; the memory is free again once the magazine is dropped): with an allocator
    /// behind that is itself in caller memory, no heap allocation at all, for a kernel at
    /// boot. Memory below the layout's size is [`Error::MetadataTooSmall`], memory that holds
    /// it only at an aligned start [`Error::MetadataMisaligned`], a bad `config` (or blocks
    /// out that `inner` cannot name) [`Error::InvalidConfig`], with nothing written. At boot,
    /// the memory map's holes may be reserved ([`crate::range::reserve_all`]) before or
    /// after: blocks `inner` has out are adopted, at the cost of a walk over its blocks (the
    /// [module documentation](self)).
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use buddyfree::llfree::LLFree;
    /// use buddyfree::magazine::Magazine;
    /// use buddyfree::{BlockAlloc, Config, MetadataMemory};
    ///
    /// // At boot: one static array (or memory carved from the memory map) for both.
    /// const CONFIG: Config = Config::new(1 << 14, 10).with_cores(4);
    /// const BACKEND: usize = LLFree::metadata_bytes(CONFIG);
    /// const BYTES: usize = BACKEND + Magazine::<LLFree>::metadata_bytes(CONFIG);
    /// static mut META: [MaybeUninit<u8>; BYTES] = [MaybeUninit::uninit(); BYTES];
    ///
    /// // SAFETY: the one place that borrows the array.
    /// let meta = MetadataMemory::from_static(unsafe { &mut *core::ptr::addr_of_mut!(META) });
    /// let (backend, magazines) = meta.take(BACKEND);
    /// let fast = Magazine::in_metadata(CONFIG, LLFree::in_metadata(CONFIG, backend)?, magazines)?;
    /// let page = fast.alloc(0, 3)?;
    /// fast.free(page, 0, 3)?; // parked in core 3's magazine
    /// assert_eq!(fast.free(page, 0, 3), Err(buddyfree::Error::NotAllocated));
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn in_metadata(config: Config, inner: A, meta: MetadataMemory) -> Result<Self, Error> {
        Self::assemble(config, inner, Some(meta))
    }

    /// The allocator behind the magazines.
    pub fn inner(&self) -> &A {
        &self.backend
    }

    /// The most units one core's magazine keeps parked (every list at its watermark). By
    /// default it follows the heap per core: 10 880 units from 2^17 units per core (512 MiB
    /// of 4 KiB units) on, 5 440 from 2^16, 2 720 from 2^15 and 2 256 below (two blocks each of
    /// the larger orders, whatever the heap); [`Settings::with_parking_limit`] (through
    /// [`Magazine::with_settings`], or where the magazines are built by name) chooses
    /// otherwise.
    pub fn parking_limit(&self) -> usize {
        self.policy.ceiling()
    }

    /// Units parked in core `core`'s magazine now (free, but reachable only by that core
    /// until a spill or a drain): what [`BlockAlloc::drain_core`] would give back. Waits for
    /// the magazine if another thread holds that core.
    pub fn parked_units(&self, core: usize) -> usize {
        self.cache(core).lock().units(&self.policy)
    }

    /// Gives every parked block back to the allocator behind the magazines and returns it:
    /// its free blocks are then all its own, and the blocks still allocated through the
    /// magazines are allocated in it (free them there). For example, to close a persistent
    /// zone, whose frees a magazine keeps in memory until they are given back (see the
    /// [module documentation](self)).
    ///
    /// ```
    /// use buddyfree::llfree::LLFree;
    /// use buddyfree::magazine::Magazine;
    /// use buddyfree::{BlockAlloc, Config};
    ///
    /// let config = Config::new(1 << 12, 10);
    /// let fast = Magazine::new(config, LLFree::new(config)?)?;
    /// let kept = fast.alloc(3, 0)?;
    /// let page = fast.alloc(0, 0)?;
    /// fast.free(page, 0, 0)?; // parked
    /// let llfree = fast.into_inner();
    /// assert_eq!(llfree.free_units(), (1 << 12) - 8);
    /// llfree.free(kept, 3, 0)?;
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn into_inner(self) -> A {
        self.drain_caches(0);
        self.backend
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
