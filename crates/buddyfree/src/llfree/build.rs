//! How LLFree is built: its tuning ([`Options`]), the layout of its metadata (the lower
//! level's lines, then the tree entries, the per-core reservations and the summary), the
//! checks a configuration must pass, and the constructors over the heap and caller memory.
//! The upper level is always built from the lower level's child counters (`LLFree::on`), so
//! a fresh, a recovered and a reopened lower level take the same path.

use super::lines::Line;
use super::local::Local;
use super::lower::{self, Lower};
use super::moves::Moves;
use super::summary::Summary;
use super::trees::{self, Trees};
use super::{
    Classes, HugeId, LLFree, Policy, TreeId, WriteBack, HUGE_ORDER, HUGE_UNITS, MAX_ORDER,
};
use crate::refusal::Refusals;
use crate::reserved::Reserved;
use crate::sync::atomic::{AtomicU32, AtomicU64};
use crate::sync::CachePadded;
#[cfg(feature = "alloc")]
use crate::table::build_on_heap;
use crate::table::{Metadata, Part, Plan};
use crate::{Config, ConfigRule, Error};

/// Tuning of the upper level.
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

    /// The largest order these trees serve: a whole tree (log2 of its units).
    ///
    /// ```
    /// use buddyfree::llfree::{Options, MAX_ORDER};
    ///
    /// assert_eq!(Options::default().max_order(), MAX_ORDER);
    /// ```
    pub const fn max_order(&self) -> u32 {
        match self.tree_children.checked_mul(HUGE_UNITS) {
            Some(units) => match units.checked_ilog2() {
                Some(order) => order,
                None => 0,
            },
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
        Options {
            tree_children: children,
            ..paper
        }
    }
}

/// Where the tables of LLFree lie in its metadata, and its tuning.
pub(crate) struct Parts {
    options: Options,
    lower: Part<Line>,
    upper: Upper,
}

/// Where the upper level's tables lie, and the classes of its trees.
pub(crate) struct Upper {
    trees: Part<AtomicU32>,
    locals: Part<CachePadded<Local>>,
    policy: Policy,
    summary: Part<AtomicU64>,
}

impl Upper {
    /// Places the upper level of LLFree over `config` tuned by `options` in `plan`, with one
    /// class of trees.
    #[cfg(not(loom))]
    pub(super) const fn plan(
        plan: &mut Plan,
        config: Config,
        options: Options,
    ) -> Result<Upper, Error> {
        Upper::plan_with(plan, config, options, Policy::single())
    }

    /// Places the upper level as `Upper::plan` does, with the classes of `policy`: a
    /// reservation per core and class. A `const fn` (for a `const` `metadata_layout`):
    /// `match` for `?`.
    const fn plan_with(
        plan: &mut Plan,
        config: Config,
        options: Options,
        policy: Policy,
    ) -> Result<Upper, Error> {
        let huges = config.units.div_ceil(HUGE_UNITS);
        let classes = policy.classes() as usize;
        let Some(locals) = config.cores.checked_mul(classes) else {
            return Err(Error::InvalidConfig(ConfigRule::MetadataOverflow));
        };
        let trees_len = huges.div_ceil(options.tree_children);
        let trees = match plan.add(trees_len) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        let locals = match plan.add(locals) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        let summary = match plan.add(Summary::words(trees_len)) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        Ok(Upper {
            trees,
            locals,
            policy,
            summary,
        })
    }
}

impl LLFree {
    /// LLFree with the paper's tuning for `config` ([`Options::for_config`]: trees small
    /// enough for one per core), its metadata on the heap.
    #[cfg(feature = "alloc")]
    pub fn new(config: Config) -> Result<LLFree, Error> {
        LLFree::with_options(config, Options::for_config(config))
    }

    /// LLFree with the given tuning, its metadata on the heap.
    #[cfg(feature = "alloc")]
    pub fn with_options(config: Config, options: Options) -> Result<LLFree, Error> {
        LLFree::with_policy(config, options, Policy::single())
    }

    /// LLFree with the given tuning and classes of trees ([`Policy`]), its metadata on the
    /// heap: [`BlockAlloc::alloc_class`] places each class of request in trees of its own.
    ///
    /// ```
    /// use buddyfree::llfree::{LLFree, Options, Policy};
    /// use buddyfree::{BlockAlloc, Class, Config};
    ///
    /// let config = Config::new(1 << 14, 10).with_cores(2);
    /// let options = Options::for_config(config);
    /// let a = LLFree::with_policy(config, options, Policy::unmovable_movable_huge())?;
    /// let page = a.alloc_class(0, Class::UNMOVABLE, 0)?;
    /// let user = a.alloc(0, 0)?; // movable
    /// assert_ne!(page / (1 << 13), user / (1 << 13), "trees of 8192 units, one per class");
    /// assert_eq!(a.free_units_of(Class::UNMOVABLE), (1 << 13) - 1);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn with_policy(config: Config, options: Options, policy: Policy) -> Result<LLFree, Error> {
        build_on_heap(LLFree::plan_with(config, options, policy), |parts, meta| {
            LLFree::build(config, parts, meta)
        })
    }

    /// Lays out the metadata of LLFree over `config` with the paper's tuning for it
    /// ([`Options::for_config`]).
    const fn default_plan(config: Config) -> Result<(Plan, Parts), Error> {
        LLFree::plan(config, Options::for_config(config))
    }

    /// Lays out the metadata of LLFree over `config` tuned by `options`: the lower level's
    /// lines, the tree entries and the per-core state.
    const fn plan(config: Config, options: Options) -> Result<(Plan, Parts), Error> {
        LLFree::plan_with(config, options, Policy::single())
    }

    /// [`LLFree::plan`] with the classes of `policy`.
    const fn plan_with(
        config: Config,
        options: Options,
        policy: Policy,
    ) -> Result<(Plan, Parts), Error> {
        if let Err(e) = LLFree::check(config, options) {
            return Err(e);
        }
        let mut plan = Plan::new();
        let lower = match Lower::plan(&mut plan, config.units) {
            Ok(part) => part,
            Err(e) => return Err(e),
        };
        let upper = match Upper::plan_with(&mut plan, config, options, policy) {
            Ok(upper) => upper,
            Err(e) => return Err(e),
        };
        Ok((
            plan,
            Parts {
                options,
                lower,
                upper,
            },
        ))
    }

    /// LLFree with every unit free, its tables made in `meta` at `parts`.
    fn build(config: Config, parts: Parts, meta: &Metadata) -> Result<LLFree, Error> {
        let lower = Lower::build(meta, parts.lower, config.units)?;
        LLFree::on(config, parts.options, lower, meta, parts.upper)
    }

    /// Rejects configurations LLFree cannot serve.
    /// A `const fn`, as [`LLFree::metadata_layout`] is.
    pub(crate) const fn check(config: Config, options: Options) -> Result<(), Error> {
        const fn refuse(rule: ConfigRule) -> Result<(), Error> {
            Err(Error::InvalidConfig(rule))
        }
        // Before the rest: a largest order above the trees' (and above the paper's trees')
        // is the allocator's limit, even where the units could not hold such a block either.
        let trees = match options.max_order() {
            order if order < lower::SPAN_MAX_ORDER => order,
            _ => lower::SPAN_MAX_ORDER,
        };
        if config.max_order > trees && config.max_order > MAX_ORDER {
            return refuse(ConfigRule::OrderAboveAllocator);
        }
        if let Err(e) = config.validate() {
            return Err(e);
        }
        let children = options.tree_children;
        // Tree counters are 27 bits (the bits above are the flags and the class).
        let too_large = match children.checked_mul(HUGE_UNITS) {
            Some(units) => units >= trees::TREE_UNITS_LIMIT,
            None => true,
        };
        if !children.is_power_of_two() || too_large {
            return refuse(ConfigRule::TreeChildren);
        }
        // Every block lies within one tree: trees smaller than the paper's are too small.
        if config.max_order > options.max_order() {
            return refuse(ConfigRule::TreeChildren);
        }
        // The thresholds are scaled by the tree's units (`LLFree::on`), which must not wrap.
        if options.allocated_below_permille > 1000 || options.free_above_permille > 1000 {
            return refuse(ConfigRule::Permille);
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
    /// the upper level is built at `upper` of `meta` from its child counters, with no
    /// reservations. Fails only when the upper level's memory cannot be had.
    pub(super) fn on(
        config: Config,
        options: Options,
        lower: Lower<W>,
        meta: &Metadata,
        upper: Upper,
    ) -> Result<LLFree<W>, Error> {
        let children = options.tree_children;
        let tree_units = children * HUGE_UNITS;
        let permille = |p: usize| tree_units * p / 1000;
        let huges = lower.huges();
        let classes = Classes::new(upper.policy);
        let trees = Trees::new(
            meta,
            upper.trees,
            (tree_units, config.units),
            |t| {
                (t * children..((t + 1) * children).min(huges))
                    .map(|h| lower.child(HugeId(h)).free())
                    .sum()
            },
            classes.initial(),
            (
                permille(options.allocated_below_permille),
                permille(options.free_above_permille),
            ),
        )?;
        let summary = Summary::new(meta, upper.summary, trees.len(), |t| {
            trees.get(TreeId(t)).free() > 0
        })?;
        Ok(LLFree {
            lower,
            trees,
            summary,
            locals: meta.table(upper.locals, |_| CachePadded::new(Local::new()))?,
            cores: config.cores,
            default_slots: classes.default_class() * config.cores,
            classes,
            units: config.units,
            max_order: config.max_order,
            tree_children: children,
            tree_shift: tree_units.trailing_zeros(),
            reserve_on_free: options.reserve_on_free,
            moves: Moves::new(),
            refusals: Refusals::new(),
            reserved: Reserved::new(config.units, config.max_order),
        })
    }
}
