//! How LLFree is built: its tuning ([`Options`]), the layout of its metadata (the lower
//! level's lines, then the tree entries, the per-core reservations and the summary), the
//! checks a configuration must pass, and the constructors over the heap and caller memory.
//! The upper level is always built from the lower level's child counters (`LLFree::on`), so
//! a fresh, a recovered and a reopened lower level take the same path.

#[cfg(not(loom))]
use super::caller::{Init, RecoverError};
use super::local::Local;
use super::lower::{self, Line, Lower};
use super::moves::Moves;
use super::summary::Summary;
use super::trees::{self, Trees};
#[cfg(not(loom))]
use super::Volatile;
use super::{
    Classes, HugeId, LLFree, Policy, TreeId, WriteBack, HUGE_ORDER, HUGE_UNITS, MAX_ORDER,
};
use crate::refusal::Refusals;
use crate::reserved::Reserved;
use crate::sync::atomic::{AtomicU32, AtomicU64};
use crate::sync::CachePadded;
use crate::table::{build, Metadata, Part, Plan};
use crate::{Config, ConfigRule, Error, MetadataMemory};

/// Tuning of the upper level, given to [`Builder::options`]. It may grow fields, so it is
/// made by [`Options::for_config`] (or `default`) and the `with_*` methods, not by a struct
/// literal:
///
/// ```compile_fail,E0639
/// let options = buddyfree::llfree::Options {
///     tree_children: 8,
///     allocated_below_permille: 125,
///     free_above_permille: 875,
///     reserve_on_free: 4,
/// };
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Huge frames per tree (the paper's N = 32: 64 MiB trees). A power of two (trees are
    /// found by shifting), at least the frames of a block of the largest order (2 for order
    /// 10, `2^(order - 9)` above), so that every block lies within one tree.
    pub tree_children: usize,
    /// A tree with less than this share (in thousandths) free is "allocated" (paper: 12.5%).
    pub allocated_below_permille: usize,
    /// A tree with more than this share (in thousandths) free is "free" (paper: 87.5%).
    pub free_above_permille: usize,
    /// Consecutive frees into one tree after which a core reserves it (paper: F = 4); 0
    /// turns reserve-on-free off.
    pub reserve_on_free: u32,
}

impl Default for Options {
    /// The paper's tuning: 64 MiB trees, thresholds 12.5% and 87.5%, reserve after 4 frees.
    fn default() -> Self {
        Options::PAPER
    }
}

impl Options {
    /// [`Options::default`], for `const` code ([`Options::for_config`]).
    const PAPER: Options = Options {
        tree_children: 32,
        allocated_below_permille: 125,
        free_above_permille: 875,
        reserve_on_free: 4,
    };

    /// The same tuning with trees of `huge_frames` huge frames ([`Options::tree_children`]).
    #[must_use]
    pub const fn with_tree_children(mut self, huge_frames: usize) -> Options {
        self.tree_children = huge_frames;
        self
    }

    /// The same tuning with trees "allocated" below `allocated_below` and "free" above
    /// `free_above` thousandths free ([`Options::allocated_below_permille`],
    /// [`Options::free_above_permille`]).
    #[must_use]
    pub const fn with_thresholds(mut self, allocated_below: usize, free_above: usize) -> Options {
        self.allocated_below_permille = allocated_below;
        self.free_above_permille = free_above;
        self
    }

    /// The same tuning with reserve-on-free after `frees` frees in a row into one tree (0:
    /// never; [`Options::reserve_on_free`]).
    #[must_use]
    pub const fn with_reserve_on_free(mut self, frees: u32) -> Options {
        self.reserve_on_free = frees;
        self
    }

    /// The largest order these trees serve: a whole tree (log2 of its units).
    ///
    /// ```
    /// use buddyfree::llfree::{Options, MAX_ORDER};
    ///
    /// assert_eq!(Options::default().max_order(), MAX_ORDER);
    /// ```
    pub const fn max_order(&self) -> u32 {
        match self.tree_children.checked_mul(HUGE_UNITS) {
            Some(0) => 0,
            Some(units) => units.ilog2(),
            None => usize::BITS - 1,
        }
    }

    /// The paper's tuning ([`Options::default`]) for `config`, with the trees halved (down
    /// to 2 huge frames) until there is at least one per core. The paper's 64 MiB trees
    /// assume more trees than cores; with fewer, the cores take the reservations from each
    /// other on almost every allocation, which makes an allocation many times dearer, in
    /// the median and in the tail. Heaps of `64 MiB × cores` and more keep 64 MiB trees.
    /// Not two per core: on a nearly full, fragmented heap that would lengthen one core's
    /// tail latency, since more, smaller trees each run out sooner and the core moves its
    /// reservation more often. Never smaller than a block of `config.max_order` needs (a
    /// whole tree for orders above 10); never larger than the paper's, so a `max_order`
    /// above [`MAX_ORDER`] needs larger trees chosen by hand.
    ///
    /// ```
    /// use buddyfree::llfree::Options;
    /// use buddyfree::Config;
    ///
    /// assert_eq!(Options::for_config(Config::new(1 << 22, 10).with_cores(16)).tree_children, 32);
    /// assert_eq!(Options::for_config(Config::new(1 << 14, 10).with_cores(2)).tree_children, 16);
    /// ```
    ///
    /// A `const fn`, as [`LLFree::metadata_layout`] is.
    pub const fn for_config(config: Config) -> Options {
        let paper = Options::PAPER;
        let huges = config.units.div_ceil(HUGE_UNITS);
        let mut children = paper.tree_children;
        let least = match 1usize.checked_shl(config.max_order.saturating_sub(HUGE_ORDER)) {
            Some(least) if least > 2 => least,
            Some(_) => 2,
            None => usize::MAX,
        };
        while children > least && huges.div_ceil(children) < config.cores {
            children /= 2;
        }
        paper.with_tree_children(children)
    }
}

/// What a [`Builder`] was told but where the lower level comes from: the configuration,
/// the tuning and the classes of trees.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) config: Config,
    pub(crate) options: Options,
    pub(crate) policy: Policy,
}

/// Where the tables of LLFree lie in its metadata, and what it is built with.
pub(crate) struct Parts {
    settings: Settings,
    /// The lower level's lines; `None` where the caller keeps them (`caller.rs`).
    lower: Option<Part<Line>>,
    trees: Part<AtomicU32>,
    locals: Part<CachePadded<Local>>,
    summary: Part<AtomicU64>,
}

impl Settings {
    /// Lays out the metadata of LLFree, after the checks of the whole: the lower level's
    /// lines (unless the caller keeps them: `kept`), the tree entries, a reservation per core
    /// and class, and the summary. A `const fn`, for a `const` `metadata_layout`.
    pub(super) const fn plan(&self, kept: bool) -> Result<(Plan, Parts), Error> {
        const_try!(LLFree::check(self.config, self.options));
        let mut plan = Plan::new();
        let lower = match kept {
            true => None,
            false => Some(const_try!(plan.add(lower::lines_of(self.config.units)))),
        };
        let huges = self.config.units.div_ceil(HUGE_UNITS);
        let classes = self.policy.classes() as usize;
        let Some(locals) = self.config.cores.checked_mul(classes) else {
            return Err(Error::InvalidConfig(ConfigRule::MetadataOverflow));
        };
        let trees = huges.div_ceil(self.options.tree_children);
        let parts = Parts {
            settings: *self,
            lower,
            trees: const_try!(plan.add(trees)),
            locals: const_try!(plan.add(locals)),
            summary: const_try!(plan.add(Summary::words(trees))),
        };
        Ok((plan, parts))
    }
}

impl LLFree {
    /// LLFree with the paper's tuning for `config` ([`Options::for_config`]: trees small
    /// enough for one per core) and one class of trees, its metadata on the heap: what
    /// [`LLFree::builder`] builds unless told otherwise.
    #[cfg(feature = "alloc")]
    pub fn new(config: Config) -> Result<LLFree, Error> {
        LLFree::builder(config).build()
    }

    /// LLFree over `config` with other tuning ([`Builder::options`]), classes of trees
    /// ([`Builder::policy`]) or a lower level the caller keeps ([`Builder::kept`]); built
    /// on the heap ([`Builder::build`]) or in caller memory ([`Builder::build_in`]).
    pub const fn builder(config: Config) -> Builder {
        Builder {
            settings: Settings {
                config,
                options: Options::for_config(config),
                policy: Policy::single(),
            },
            lower: Fresh,
        }
    }

    /// Lays out the metadata of LLFree over `config` with the paper's tuning for it
    /// ([`Options::for_config`]) and one class of trees.
    const fn default_plan(config: Config) -> Result<(Plan, Parts), Error> {
        LLFree::builder(config).settings.plan(false)
    }

    /// LLFree with every unit free, its tables made in `meta` at `parts` (a plan with the
    /// lower level).
    fn build(config: Config, parts: Parts, meta: &Metadata) -> Result<LLFree, Error> {
        let part = parts.lower.expect("a plan places a lower level not kept");
        LLFree::on(Lower::build(meta, part, config.units)?, meta, parts)
    }

    /// Rejects configurations LLFree cannot serve.
    /// A `const fn`, as [`LLFree::metadata_layout`] is.
    pub(crate) const fn check(config: Config, options: Options) -> Result<(), Error> {
        // Before the rest: a largest order above the trees' (and above the paper's trees')
        // is the allocator's limit, even where the units could not hold such a block either.
        let order = config.max_order;
        if (order > options.max_order() || order > lower::SPAN_MAX_ORDER) && order > MAX_ORDER {
            return Err(Error::InvalidConfig(ConfigRule::OrderAboveAllocator));
        }
        const_try!(config.validate());
        let children = options.tree_children;
        // Tree counters are 27 bits (the bits above are the flags and the class); every block
        // lies within one tree, so trees smaller than the paper's are too small for order 14.
        // Compared in huge frames (the limit is a whole number of them): no product to wrap.
        let fits = children < trees::TREE_UNITS_LIMIT / HUGE_UNITS;
        if !children.is_power_of_two() || !fits || order > options.max_order() {
            return Err(Error::InvalidConfig(ConfigRule::TreeChildren));
        }
        // The thresholds are scaled by the tree's units (`LLFree::on`), which must not wrap.
        if options.allocated_below_permille > 1000 || options.free_above_permille > 1000 {
            return Err(Error::InvalidConfig(ConfigRule::Permille));
        }
        Ok(())
    }
}

caller_metadata!(
    LLFree,
    LLFree::default_plan,
    LLFree::build,
    example: "llfree::LLFree", "BlockAlloc", "let a", "alloc(3, 0)", "free(block, 3, 0)"
);

impl<W: WriteBack> LLFree<W> {
    /// LLFree over a checked configuration and a lower level (fresh, recovered or reopened):
    /// the upper level is built at `upper`'s places in `meta` from its child counters, with
    /// no reservations. Fails only when the upper level's memory cannot be had.
    pub(super) fn on(lower: Lower<W>, meta: &Metadata, upper: Parts) -> Result<LLFree<W>, Error> {
        let (config, options) = (upper.settings.config, upper.settings.options);
        let tree_units = options.tree_children * HUGE_UNITS;
        let permille = |p: usize| tree_units * p / 1000;
        let allocated_below = permille(options.allocated_below_permille);
        let thresholds = (allocated_below, permille(options.free_above_permille));
        let class = upper.settings.policy.initial().number();
        let units = (tree_units, config.units);
        let llfree = LLFree {
            lower,
            trees: Trees::new(meta, upper.trees, units, class, thresholds)?,
            summary: Summary::new(meta, upper.summary)?,
            locals: meta.table(upper.locals, |_| CachePadded::new(Local::new()))?,
            cores: config.cores,
            classes: Classes::new(upper.settings.policy),
            units: config.units,
            max_order: config.max_order,
            tree_children: options.tree_children,
            tree_shift: tree_units.trailing_zeros(),
            reserve_on_free: options.reserve_on_free,
            moves: Moves::new(),
            refusals: Refusals::default(),
            reserved: Reserved::new(config.units, config.max_order),
        };
        // Each tree's free units are its frames', credited as a free credits them (its
        // summary marks set with them).
        for t in (0..llfree.trees.len()).map(TreeId) {
            let frames = llfree
                .children(t)
                .map(|h| llfree.lower.child(HugeId(h)).free());
            llfree.add_to_tree(t, frames.sum());
        }
        Ok(llfree)
    }
}

/// How an LLFree is built beyond its [`Config`], from [`LLFree::builder`]: its tuning
/// ([`Builder::options`]), its classes of trees ([`Builder::policy`]) and, last, a lower
/// level the caller keeps across runs ([`Builder::kept`]); then [`Builder::build`] puts the
/// metadata on the heap, [`Builder::build_in`] in caller memory. What it is not told is
/// [`LLFree::new`]'s: the paper's tuning for the configuration, one class.
///
/// ```
/// use buddyfree::llfree::{LLFree, Options, Policy};
/// use buddyfree::{BlockAlloc, Class, Config};
///
/// let config = Config::new(1 << 14, 10).with_cores(2);
/// let a = LLFree::builder(config).policy(Policy::unmovable_movable_huge()).build()?;
/// let page = a.alloc_class(0, Class::UNMOVABLE, 0)?;
/// let user = a.alloc(0, 0)?; // movable
/// assert_ne!(page / (1 << 13), user / (1 << 13), "trees of 8192 units, one per class");
/// assert_eq!(a.free_units_of(Class::UNMOVABLE), (1 << 13) - 1);
///
/// // Its metadata size is known at compile time, settings included.
/// const SMALL_TREES: usize = LLFree::builder(Config::new(1 << 14, 10))
///     .options(Options::for_config(Config::new(1 << 14, 10)).with_tree_children(4))
///     .metadata_bytes();
/// # Ok::<(), buddyfree::Error>(())
/// ```
#[must_use]
#[derive(Debug)]
pub struct Builder<L = Fresh> {
    pub(crate) settings: Settings,
    /// Where the lower level comes from ([`Fresh`] or [`Kept`]); only the kept one is read,
    /// and it does not exist under loom.
    #[cfg_attr(loom, allow(dead_code))]
    lower: L,
}

/// A [`Builder`] whose lower level is built with the rest, every unit free.
#[derive(Clone, Copy, Debug)]
pub struct Fresh;

/// A [`Builder`] over a lower level the caller keeps ([`Builder::kept`]).
#[cfg(not(loom))]
#[derive(Debug)]
pub struct Kept {
    lower: MetadataMemory,
    init: Init,
}

impl Builder {
    /// The same builder with the tuning `options` (by default [`Options::for_config`]).
    pub const fn options(mut self, options: Options) -> Builder {
        self.settings.options = options;
        self
    }

    /// The same builder with the classes of trees of `policy` (by default one class):
    /// [`BlockAlloc::alloc_class`](crate::BlockAlloc::alloc_class) places each class of
    /// request in trees of its own.
    pub const fn policy(mut self, policy: Policy) -> Builder {
        self.settings.policy = policy;
        self
    }

    /// The bytes and alignment of the metadata [`Builder::build_in`] takes;
    /// [`Error::InvalidConfig`] for a configuration that cannot be built. A `const fn`, as
    /// is [`Builder::metadata_bytes`].
    pub const fn metadata_layout(&self) -> Result<core::alloc::Layout, Error> {
        const_try!(self.settings.plan(false)).0.layout()
    }

    /// The bytes of metadata memory, at any alignment, that [`Builder::build_in`] takes: as
    /// [`LLFree::metadata_bytes`] for these settings.
    ///
    /// # Panics
    /// If the configuration cannot be built: in a `const`, a compile error.
    #[must_use]
    pub const fn metadata_bytes(&self) -> usize {
        crate::table::unaligned_bytes(self.metadata_layout())
    }

    /// Builds it with its metadata on the heap.
    #[cfg(feature = "alloc")]
    pub fn build(self) -> Result<LLFree, Error> {
        let config = self.settings.config;
        build(self.settings.plan(false), None, |parts, meta| {
            LLFree::build(config, parts, meta)
        })
    }

    /// Builds it with its metadata in `meta` (as [`LLFree::in_metadata`] does, at least
    /// [`Builder::metadata_bytes`] at any alignment).
    pub fn build_in(self, meta: MetadataMemory) -> Result<LLFree, Error> {
        let config = self.settings.config;
        build(self.settings.plan(false), Some(meta), |parts, meta| {
            LLFree::build(config, parts, meta)
        })
    }

    /// The same builder over a lower level (bit fields and child entries) in `lower`, which
    /// the caller keeps across runs (persistent memory, memory that survives a warm reboot;
    /// its bytes hold no pointers, so they mean the same to every run over as many units),
    /// taken as `init` says: at least
    /// [`LLFree::lower_layout`]'s size, starting 64-aligned (it must be found at the same
    /// place again, so it is not aligned within); else [`Error::MetadataMisaligned`] or
    /// [`Error::MetadataTooSmall`] at the build, nothing written. The rest of the metadata
    /// (the upper level, rebuilt every time) goes where the build puts it.
    ///
    /// ```
    /// use buddyfree::llfree::{Init, LLFree};
    /// use buddyfree::{BlockAlloc, Config, MetadataMemory};
    ///
    /// let config = Config::new(1 << 12, 10).with_cores(2);
    /// let layout = LLFree::lower_layout(config)?;
    /// // Memory the caller keeps (persistent memory, say); here from the system allocator.
    /// // SAFETY: the layout is not empty.
    /// let lower = std::ptr::NonNull::new(unsafe { std::alloc::alloc(layout) }).unwrap();
    /// // SAFETY: `layout.size()` bytes, ours alone until freed below, and the allocators
    /// // built in them dropped before; written (`Init::Free`) before they are recovered.
    /// let kept = |init| unsafe {
    ///     LLFree::builder(config).kept(MetadataMemory::from_raw(lower, layout.size()), init)
    /// };
    /// let a = kept(Init::Free).build()?;
    /// let block = a.alloc(3, 0)?;
    /// drop(a); // as a crash would leave it: the block is still allocated
    /// let a = kept(Init::Recover).build()?;
    /// assert_eq!(a.block_of(block + 1)?, Some((block, 3)));
    /// a.free(block, 3, 0)?;
    /// drop(a);
    /// // SAFETY: allocated above with this layout; the allocator is gone.
    /// unsafe { std::alloc::dealloc(lower.as_ptr(), layout) };
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Safety
    /// For [`Init::Recover`], `lower`'s bytes must be initialised (any values: recovery
    /// checks every frame before it changes any, and a state no run leaves is
    /// [`RecoverError::Corrupt`]); [`Init::Free`] and [`Init::Allocated`] overwrite them. No
    /// device or process other than the allocator may read or write them while it lives;
    /// once it is dropped they hold the lower level as it left it.
    #[cfg(not(loom))]
    pub unsafe fn kept(self, lower: MetadataMemory, init: Init) -> Builder<Kept> {
        Builder {
            settings: self.settings,
            lower: Kept { lower, init },
        }
    }
}

#[cfg(not(loom))]
impl Builder<Kept> {
    /// The bytes and alignment of the upper level (tree entries, per-core reservations)
    /// that [`Builder::build_in`] takes: the kept lower level is not part of it.
    pub fn metadata_layout(&self) -> Result<core::alloc::Layout, Error> {
        self.settings.plan(true)?.0.layout()
    }

    /// Builds it over the kept lower level, its upper level on the heap, built from the
    /// lower level with no reservations.
    #[cfg(feature = "alloc")]
    pub fn build(self) -> Result<LLFree, RecoverError> {
        self.over(None)
    }

    /// Builds it over the kept lower level, its upper level in `meta` (at least
    /// [`Builder::metadata_layout`]'s size at its alignment; aligned up within `meta`): no
    /// heap at all.
    pub fn build_in(self, meta: MetadataMemory) -> Result<LLFree, RecoverError> {
        self.over(Some(meta))
    }

    /// The build over the kept lower level, the upper level in `upper` or on the heap.
    fn over(self, upper: Option<MetadataMemory>) -> Result<LLFree, RecoverError> {
        let Kept { lower, init } = self.lower;
        // SAFETY: the memory is lent by `MetadataMemory`'s contract, and initialised for
        // `Init::Recover` by `Builder::kept`'s.
        unsafe { LLFree::over_raw(self.settings, Some(init), lower.into_raw(), Volatile, upper) }
    }
}
