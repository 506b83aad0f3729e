//! Every allocator by name: buddyfree's published ones ([`buddyfree::registry`]) and the
//! baselines of this crate, for buddybench and the tests. An [`Entry`] here has the fields
//! of buddyfree's, which makes its own entries alone: so that adding a field there breaks
//! no user, and so that the published crate offers no way to register what it does not
//! publish.

use alloc::boxed::Box;

use buddyfree::buddy::Knuth;
use buddyfree::magazine::Settings;
pub use buddyfree::registry::{CallerMetadata, DynAlloc, ANY_ORDER};
use buddyfree::Locked;

use crate::linux::PerCpu;
use crate::list::{CasList, FirstFit, LockedList, PerCoreLists};
use crate::migrate::MigrateBuddy;
use crate::model::Model;
use crate::per_level::{PerLevelSpin, PerLevelYield};
use crate::{Capabilities, Config, Error};

/// One registered allocator: [`buddyfree::registry::Entry`]'s fields.
#[derive(Clone, Copy)]
pub struct Entry {
    /// The name users select it by.
    pub name: &'static str,
    /// One line saying what it is.
    pub about: &'static str,
    /// The largest `Config::max_order` it accepts; [`ANY_ORDER`] where only
    /// `Config::validate` limits it.
    pub max_order: u32,
    /// Builds it over a configuration with the per-core caches' [`Settings`] (ignored by
    /// allocators without them).
    pub build: fn(Config, Settings) -> Result<DynAlloc, Error>,
    /// How to build it with its tables in the caller's memory, where its design allows it.
    pub metadata: Option<CallerMetadata>,
    /// What it offers of [`BlockAlloc`](buddyfree::BlockAlloc)'s optional operations.
    pub capabilities: Capabilities,
}

impl Entry {
    /// The same entry as buddyfree's `published`.
    const fn from_published(published: &buddyfree::registry::Entry) -> Self {
        Entry {
            name: published.name,
            about: published.about,
            max_order: published.max_order,
            build: published.build,
            metadata: published.metadata,
            capabilities: published.capabilities,
        }
    }

    /// Whether buddyfree publishes it (else it is one of this crate's baselines).
    #[must_use]
    pub fn is_published(&self) -> bool {
        buddyfree::registry::find(self.name).is_some()
    }
}

/// Every allocator: the model first (the reference), then buddyfree's, then the baselines.
#[must_use]
pub fn entries() -> &'static [Entry] {
    &ENTRIES
}

const PUBLISHED: &[buddyfree::registry::Entry] = buddyfree::registry::entries();

/// Built at compile time, not on first use: no lazy initialisation for threads to meet in
/// (whose ordering ThreadSanitizer cannot see inside an uninstrumented `std`).
static ENTRIES: [Entry; MODEL.len() + PUBLISHED.len() + BASELINES.len()] = {
    let mut all = [MODEL[0]; MODEL.len() + PUBLISHED.len() + BASELINES.len()];
    let mut i = 0;
    while i < PUBLISHED.len() {
        all[MODEL.len() + i] = Entry::from_published(&PUBLISHED[i]);
        i += 1;
    }
    let mut i = 0;
    while i < BASELINES.len() {
        all[MODEL.len() + PUBLISHED.len() + i] = BASELINES[i];
        i += 1;
    }
    all
};

/// The entry named `name`, if any.
#[must_use]
pub fn find(name: &str) -> Option<&'static Entry> {
    entries().iter().find(|e| e.name == name)
}

/// `block_of` and `try_block_of`, without the rest.
const BLOCKS_ONLY: Capabilities = Capabilities::BLOCK_OF.union(Capabilities::TRY_BLOCK_OF);
/// The lock-free lists: no `alloc_at`.
const LOCK_FREE_LISTS: Capabilities = BLOCKS_ONLY
    .union(Capabilities::TRY_ALLOC)
    .union(Capabilities::TRY_FREE);

/// An entry of an allocator without per-core caches, which ignores the settings.
macro_rules! entry {
    (
        name: $name:expr,
        about: $about:expr,
        max_order: $max_order:expr,
        build: |$config:ident| $body:expr,
        capabilities: $capabilities:expr $(,)?
    ) => {
        Entry {
            name: $name,
            about: $about,
            max_order: $max_order,
            build: |$config, _| $body,
            metadata: None,
            capabilities: $capabilities,
        }
    };
}

const MODEL: &[Entry] = &[entry! {
    name: "model",
    about: "the reference model (first-fit unit map) behind a spinlock; O(units) per allocation",
    max_order: ANY_ORDER,
    build: |c| Ok(Box::new(Locked::<Model>::new(Model::new(c)?))),
    capabilities: Capabilities::ALL,
}];

const BASELINES: &[Entry] = &[
    Entry {
        name: "linux",
        about: "Linux-like: Knuth's buddy behind a spinlock plus per-core lists (orders 0-3, 9)",
        max_order: ANY_ORDER,
        build: |c, s| {
            Ok(Box::new(
                PerCpu::<Knuth>::with_config(c, Knuth::new)?.with_settings(s),
            ))
        },
        metadata: None,
        capabilities: Capabilities::ALL,
    },
    entry! {
        name: "linux-migrate",
        about: "Linux-like grouping by mobility: Knuth's buddy with free lists per migrate type, order-9 pageblocks and Linux's fallback, behind a spinlock (no per-CPU lists)",
        max_order: ANY_ORDER,
        build: |c| Ok(Box::new(Locked::<MigrateBuddy>::new(MigrateBuddy::new(c)?))),
        capabilities: Capabilities::ALL,
    },
    entry! {
        name: "perlevel-spin",
        about: "parallel binary buddy (Johnson & Davis): one spinlock per level",
        max_order: ANY_ORDER,
        build: |c| Ok(Box::new(PerLevelSpin::new(c)?)),
        capabilities: BLOCKS_ONLY,
    },
    entry! {
        name: "perlevel-yield",
        about: "parallel binary buddy: one spin-then-yield lock per level (the mutex variant)",
        max_order: ANY_ORDER,
        build: |c| Ok(Box::new(PerLevelYield::new(c)?)),
        capabilities: BLOCKS_ONLY,
    },
    entry! {
        name: "list-locked",
        about: "a singly linked free list behind a spinlock (LLFree paper's ListLocked); order 0 only",
        max_order: 0,
        build: |c| Ok(Box::new(LockedList::new(c)?)),
        capabilities: BLOCKS_ONLY,
    },
    entry! {
        name: "list-cas",
        about: "a lock-free LIFO free list with an ABA-tagged head (LLFree paper's ListCAS); order 0 only",
        max_order: 0,
        build: |c| Ok(Box::new(CasList::new(c)?)),
        capabilities: LOCK_FREE_LISTS,
    },
    entry! {
        name: "list-percore",
        about: "lock-free per-core free lists, stealing when empty (LLFree paper's ListLocal); order 0 only",
        max_order: 0,
        build: |c| Ok(Box::new(PerCoreLists::new(c)?)),
        capabilities: LOCK_FREE_LISTS,
    },
    entry! {
        name: "first-fit-locked",
        about: "first-fit over an address-ordered free list of extents, behind a spinlock (real-time paper's unstructured-list baseline); O(extents) per allocation",
        max_order: ANY_ORDER,
        build: |c| Ok(Box::new(Locked::<FirstFit>::new(FirstFit::new(c)?))),
        capabilities: Capabilities::ALL.difference(Capabilities::ALLOC_AT),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_entry_builds() {
        for (i, e) in entries().iter().enumerate() {
            assert!(
                entries()[..i].iter().all(|o| o.name != e.name),
                "{} twice",
                e.name
            );
            let a = (e.build)(
                Config::new(1 << 12, e.max_order.min(9)).with_cores(2),
                Default::default(),
            )
            .unwrap();
            if e.max_order < ANY_ORDER {
                let over = Config::new((1 << 12).max(2 << e.max_order), e.max_order + 1);
                assert_eq!(
                    (e.build)(over, Default::default()).err(),
                    Some(Error::InvalidConfig(
                        buddyfree::ConfigRule::OrderAboveAllocator
                    )),
                    "{}",
                    e.name
                );
            }
            assert_eq!(a.total_units(), 1 << 12, "{}", e.name);
            assert_eq!(a.capabilities(), e.capabilities, "{}", e.name);
            assert!(find(e.name).is_some());
        }
        assert_eq!(
            entries().iter().filter(|e| e.is_published()).count(),
            buddyfree::registry::entries().len()
        );
        assert!(find("no such allocator").is_none());
    }
}
