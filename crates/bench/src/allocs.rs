//! The allocators the tool can run: every entry of the workbench's registry (buddyfree's
//! allocators and the baselines), plus the system allocator adapter and persistent LLFree
//! zones over temporary files.

use buddyfree::buddy::Knuth;
use buddyfree::magazine::Settings;
use buddyfree::{Config, Error, Locked};
use buddyfree_baselines::linux::PerCpu;
use buddyfree_baselines::migrate::MigrateBuddy;
use buddyfree_baselines::registry::{self, DynAlloc, Entry};

use crate::system::SystemAlloc;
use crate::zone::{Mode, ZoneAlloc, MODES};

/// The default suite's allocators, in table order. Names not in the registry are skipped with
/// a note, so the list may name allocators that are still being written.
pub const DEFAULT_ALLOCS: &[&str] = &[
    "nbbs",
    "nbbs4",
    "nbbs4-magazine",
    "knuth-locked",
    "linux",
    "llfree",
    "llfree-magazine",
    "list-locked",
    "list-cas",
    "list-percore",
    "system",
];

/// Added to the default allocators for the real-time workloads only: the estranged and the
/// per-level buddy, and the first-fit list the real-time paper compares buddies with.
pub const REALTIME_ALLOCS: &[&str] = &["estranged-locked", "perlevel-spin", "first-fit-locked"];

/// The default baseline: the first of these that is in the run (the NBBS paper's spin-locked
/// buddy, then Linux's).
pub const DEFAULT_BASELINES: &[&str] = &["knuth-locked", "linux"];

/// The name of the system allocator adapter.
pub const SYSTEM: &str = "system";

/// The lock of the locked baselines; `--lock` takes its values' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Lock {
    /// A ticket lock: waiters are served in arrival order, as by Linux's queued zone lock.
    Ticket,
    /// A test-and-set spinlock (the registry's): whoever wins the race gets it, so one core
    /// can starve the others and a baseline looks better or worse than a fair lock would.
    #[value(name = "tas", alias = "test-and-set")]
    TestAndSet,
}

impl Lock {
    /// Its name on the command line and in the table.
    pub const fn name(self) -> &'static str {
        match self {
            Lock::Ticket => "ticket",
            Lock::TestAndSet => "test-and-set",
        }
    }
}

type Ticket = spin::mutex::TicketMutex<()>;

/// The registry's allocators that `--lock ticket` builds behind a ticket lock instead of the
/// registry's test-and-set spinlock; every other one is built as the registry builds it
/// (list-locked keeps its test-and-set lock: the LLFree paper's ListLocked is one).
/// Builds an allocator over a configuration, as a registry entry does.
type Build = fn(Config, Settings) -> Result<DynAlloc, Error>;

const TICKET_BUILDS: &[(&str, Build)] = &[
    ("knuth-locked", |c, _| {
        Ok(Box::new(Locked::<Knuth, Ticket>::new(Knuth::new(c)?)))
    }),
    ("linux-migrate", |c, _| {
        Ok(Box::new(Locked::<MigrateBuddy, Ticket>::new(
            MigrateBuddy::new(c)?,
        )))
    }),
    ("linux", |c, s| {
        Ok(Box::new(
            PerCpu::<Knuth, Ticket>::with_config(c, Knuth::new)?.with_settings(s),
        ))
    }),
];

/// Whether `--lock` changes how the allocator named `name` is built.
pub fn lock_applies(name: &str) -> bool {
    TICKET_BUILDS.iter().any(|(n, _)| *n == name)
}

/// An allocator the tool can build.
#[derive(Clone, Copy)]
pub enum AllocSpec {
    /// A registry entry.
    Registry(&'static Entry),
    /// `std::alloc::System` (see [`SystemAlloc`]).
    System,
    /// A persistent LLFree zone (see [`ZoneAlloc`]).
    Zone(&'static Mode),
}

impl AllocSpec {
    /// Every allocator: the registry's, then `system`, then the persistent zones.
    pub fn all() -> Vec<AllocSpec> {
        registry::entries()
            .iter()
            .map(AllocSpec::Registry)
            .chain([AllocSpec::System])
            .chain(MODES.iter().map(AllocSpec::Zone))
            .collect()
    }

    /// The allocator named `name`.
    pub fn find(name: &str) -> Option<AllocSpec> {
        if name == SYSTEM {
            return Some(AllocSpec::System);
        }
        if let Some(m) = MODES.iter().find(|m| m.name == name) {
            return Some(AllocSpec::Zone(m));
        }
        registry::find(name).map(AllocSpec::Registry)
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        match self {
            AllocSpec::Registry(e) => e.name,
            AllocSpec::System => SYSTEM,
            AllocSpec::Zone(m) => m.name,
        }
    }

    /// One line saying what it is.
    pub fn about(&self) -> &'static str {
        match self {
            AllocSpec::Registry(e) => e.about,
            AllocSpec::System => {
                "std::alloc::System (malloc), blocks of 4096<<order bytes; size-based workloads only"
            }
            AllocSpec::Zone(m) => m.about,
        }
    }

    /// Whether its block indices are positions in `0..units` (false for `system`, whose
    /// indices are addresses).
    pub fn has_region(&self) -> bool {
        !matches!(self, AllocSpec::System)
    }

    /// The most allocator calls one run may make on it, where each is slow enough (a system
    /// call) that a run of the usual size would take minutes.
    pub fn max_calls(&self) -> Option<u64> {
        match self {
            AllocSpec::Zone(m) => m.max_calls(),
            _ => None,
        }
    }

    /// Builds a fresh instance, with `config.max_order` lowered to the largest the allocator
    /// accepts (the list allocators serve order 0 only); workloads needing more skip it. The
    /// locked baselines get `lock`. The error says why it cannot be built.
    pub fn build(&self, config: Config, lock: Lock) -> Result<DynAlloc, String> {
        self.build_with(config, Settings::new(), lock)
    }

    /// [`AllocSpec::build`] with the per-core caches' `settings`.
    pub fn build_with(
        &self,
        config: Config,
        settings: Settings,
        lock: Lock,
    ) -> Result<DynAlloc, String> {
        let lowered = |max: u32| config.with_max_order(config.max_order.min(max));
        match self {
            AllocSpec::Registry(e) => {
                let config = lowered(e.max_order);
                let ticket = TICKET_BUILDS.iter().find(|(n, _)| *n == e.name);
                match (lock, ticket) {
                    (Lock::Ticket, Some((_, build))) => build(config, settings),
                    _ => (e.build)(config, settings),
                }
                .map_err(|e| e.to_string())
            }
            AllocSpec::System => {
                // SAFETY: the workloads free exactly the blocks they allocated, once, with
                // their orders (checked by the tests' counting allocator).
                let system = unsafe { SystemAlloc::new(config) }.map_err(|e| e.to_string())?;
                Ok(Box::new(system))
            }
            AllocSpec::Zone(m) => {
                // A zone takes the orders the volatile LLFree takes.
                let max = registry::find("llfree").map_or(config.max_order, |e| e.max_order);
                match ZoneAlloc::new(lowered(max), m.durability) {
                    Ok(z) => Ok(Box::new(z)),
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }
}
