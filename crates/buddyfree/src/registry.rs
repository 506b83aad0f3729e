//! Every allocator, registered once by name, so the benchmark tool, the C ABI and the tests
//! can build any of them from a [`Config`] (and, for the per-core caches, their
//! [`Settings`]).

use alloc::boxed::Box;
use core::alloc::Layout;
use core::convert::identity;

use crate::buddy::{Estranged, Knuth};
use crate::llfree::{LLFree, Policy};
use crate::magazine::{Magazine, Settings};
use crate::{
    BlockAlloc, Capabilities, Config, ConfigRule, Error, Locked, MetadataMemory, Nbbs, Nbbs4,
};

/// A boxed allocator that can move between threads.
pub type DynAlloc = Box<dyn BlockAlloc + Send>;

/// One registered allocator: its type's two constructors, [`Entry::build`] (its `new`,
/// metadata on the heap) and, where the design allows it, [`CallerMetadata::build_in`] (its
/// `in_metadata`), each with the per-core caches' [`Settings`]. Users read entries
/// ([`entries`], [`find`]); only this crate makes them, so that fields can be added without
/// breaking anyone:
///
/// ```compile_fail,E0639
/// use buddyfree::registry::Entry;
///
/// let mine = Entry {
///     name: "mine",
///     about: "",
///     max_order: 0,
///     build: |_, _| Err(buddyfree::Error::Unsupported),
///     metadata: None,
///     capabilities: buddyfree::Capabilities::NONE,
/// };
/// ```
#[non_exhaustive]
pub struct Entry {
    /// The name users select it by.
    pub name: &'static str,
    /// One line saying what it is.
    pub about: &'static str,
    /// The largest `Config::max_order` it accepts (a larger one gets
    /// [`Error::InvalidConfig`]); [`ANY_ORDER`] where only `Config::validate` limits it.
    pub max_order: u32,
    /// Builds it over a configuration, its metadata on the heap, with the per-core caches'
    /// [`Settings`] (the `*-magazine` allocators; the others have no caches and ignore
    /// them: pass `Settings::new()`).
    pub build: fn(Config, Settings) -> Result<DynAlloc, Error>,
    /// How to build it with its tables in the caller's memory, for the allocators whose
    /// design allows it.
    pub metadata: Option<CallerMetadata>,
    /// What it offers of [`BlockAlloc`]'s optional operations: the
    /// [`BlockAlloc::capabilities`] of every instance `build` makes, known without making
    /// one.
    pub capabilities: Capabilities,
}

/// Builds an allocator whose tables live in memory the caller provides (the boxed handle
/// itself still comes from the heap): what `metadata_layout` and `in_metadata` are on the
/// concrete types, for code that picks the allocator by name (the C ABI). Made by this crate
/// alone, as [`Entry`] is.
#[non_exhaustive]
#[derive(Clone, Copy)]
pub struct CallerMetadata {
    /// The bytes and alignment of the metadata for a configuration (for a magazine entry,
    /// the allocator's and the magazines' in one piece).
    pub layout: fn(Config) -> Result<Layout, Error>,
    /// Builds the allocator with its metadata in `meta`, with the per-core caches'
    /// [`Settings`] (as [`Entry::build`]): too small or misaligned memory is
    /// [`Error::MetadataTooSmall`] or [`Error::MetadataMisaligned`].
    pub build_in: fn(Config, Settings, MetadataMemory) -> Result<DynAlloc, Error>,
}

/// The [`CallerMetadata`] of `$alloc`, wrapped by `$wrap` (a lock, or `identity`): no
/// per-core caches, so no settings.
macro_rules! caller_metadata {
    ($alloc:ty, $wrap:expr) => {
        Some(CallerMetadata {
            layout: <$alloc>::metadata_layout,
            build_in: |config, _, meta| Ok(Box::new($wrap(<$alloc>::in_metadata(config, meta)?))),
        })
    };
}

/// The entry `$name-magazine`: per-core magazines in front of the entry `$name`, the
/// allocator `$alloc`, both in the caller's memory with [`CallerMetadata`]
/// ([`magazine_layout`]).
macro_rules! magazine_entry {
    ($name:literal, $alloc:ty, $max_order:expr) => {
        Entry {
            name: concat!($name, "-magazine"),
            about: concat!(
                $name,
                " behind per-core magazines of orders 0-9 (the NBBS paper's per-thread cache)"
            ),
            max_order: $max_order,
            build: |c, s| {
                Ok(Box::new(
                    Magazine::new(c, <$alloc>::new(c)?)?.with_settings(s),
                ))
            },
            metadata: Some(CallerMetadata {
                layout: |c| Ok(magazine_layout::<$alloc>(c, <$alloc>::metadata_layout)?.0),
                build_in: |c, s, meta| {
                    let (_, offset) = magazine_layout::<$alloc>(c, <$alloc>::metadata_layout)?;
                    let (inner, own) = meta.take(offset);
                    let inner = <$alloc>::in_metadata(c, inner)?;
                    Ok(Box::new(
                        Magazine::in_metadata(c, inner, own)?.with_settings(s),
                    ))
                },
            }),
            capabilities: Capabilities::ALL,
        }
    };
}

/// The metadata of an allocator whose own is `inner(config)` and of magazines in front of
/// it, in one piece: the allocator's at the start, the magazines' at the offset returned.
fn magazine_layout<A: crate::magazine::Backend>(
    config: Config,
    inner: fn(Config) -> Result<Layout, Error>,
) -> Result<(Layout, usize), Error> {
    let own = Magazine::<A>::metadata_layout(config)?;
    inner(config)?
        .extend(own)
        .map_err(|_| ConfigRule::MetadataOverflow.into())
}

/// The `max_order` of entries that accept any order `Config::validate` accepts.
pub const ANY_ORDER: u32 = usize::BITS - 1;

/// All registered allocators.
#[must_use]
pub const fn entries() -> &'static [Entry] {
    ENTRIES
}

/// The entry named `name`, if any.
#[must_use]
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.name == name)
}

const ENTRIES: &[Entry] = &[
    Entry {
        name: "nbbs",
        about: "NBBS, the non-blocking buddy system: 1-level tree, 8 bytes per node, per-core hints",
        max_order: ANY_ORDER,
        build: |c, _| Ok(Box::new(Nbbs::new(c)?)),
        metadata: caller_metadata!(Nbbs, identity),
        capabilities: Capabilities::ALL,
    },
    Entry {
        name: "nbbs4",
        about: "NBBS with 4-level bunches: 15 nodes per 64-bit cell, one CAS per 4 levels",
        max_order: ANY_ORDER,
        build: |c, _| Ok(Box::new(Nbbs4::new(c)?)),
        metadata: caller_metadata!(Nbbs4, identity),
        capabilities: Capabilities::ALL,
    },
    magazine_entry!("nbbs", Nbbs, ANY_ORDER),
    magazine_entry!("nbbs4", Nbbs4, ANY_ORDER),
    Entry {
        name: "knuth-locked",
        about: "Knuth's buddy (segregated free lists, eager merge) behind one global spinlock",
        max_order: ANY_ORDER,
        build: |c, _| Ok(Box::new(Locked::<Knuth>::new(Knuth::new(c)?))),
        metadata: caller_metadata!(Knuth, Locked::<Knuth>::new),
        capabilities: Capabilities::ALL,
    },
    Entry {
        name: "estranged-locked",
        about: "the estranged buddy (delayed recombination, 5-step heuristic) behind one spinlock",
        max_order: ANY_ORDER,
        build: |c, _| Ok(Box::new(Locked::<Estranged>::new(Estranged::new(c)?))),
        metadata: caller_metadata!(Estranged, Locked::<Estranged>::new),
        capabilities: Capabilities::ALL,
    },
    Entry {
        name: "llfree",
        about: "LLFree (ATC'23): bit fields per 2 MiB, 64 MiB trees, per-core reservations; orders 0..=14 (up to a whole tree)",
        max_order: crate::llfree::MAX_ORDER,
        build: |c, _| Ok(Box::new(LLFree::new(c)?)),
        metadata: caller_metadata!(LLFree, identity),
        capabilities: Capabilities::ALL,
    },
    Entry {
        name: "llfree-classes",
        about: "llfree with classes of trees: unmovable, movable and huge requests (alloc_class) each in trees of their own",
        max_order: crate::llfree::MAX_ORDER,
        build: |c, _| {
            let policy = Policy::unmovable_movable_huge();
            Ok(Box::new(LLFree::builder(c).policy(policy).build()?))
        },
        metadata: None,
        capabilities: Capabilities::ALL,
    },
    magazine_entry!("llfree", LLFree, crate::llfree::MAX_ORDER),
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
            let config = Config::new(1 << 12, e.max_order.min(9)).with_cores(2);
            let a = (e.build)(config, Settings::new()).unwrap();
            if e.max_order < ANY_ORDER {
                // Units that hold a block of the order, so that the order alone is refused.
                let over = Config::new((1 << 12).max(2 << e.max_order), e.max_order + 1);
                assert_eq!(
                    (e.build)(over, Settings::new()).err(),
                    Some(Error::InvalidConfig(crate::ConfigRule::OrderAboveAllocator)),
                    "{}",
                    e.name
                );
            }
            assert_eq!(a.total_units(), 1 << 12, "{}", e.name);
            assert!(find(e.name).is_some());
        }
        assert!(find("no such allocator").is_none());
    }

    #[test]
    fn entries_with_caller_metadata_build_in_it() {
        use alloc::vec;
        let config = Config::new(1000, 9).with_cores(2);
        let with: alloc::vec::Vec<_> = entries().iter().filter(|e| e.metadata.is_some()).collect();
        assert_eq!(with.len(), 8);
        for e in with {
            let m = e.metadata.unwrap();
            let layout = (m.layout)(config).unwrap();
            // u128 words: aligned for every table (at most 16 bytes, or a cache line below).
            let mut words = vec![0u128; (layout.size() + layout.align()) / 16 + 1];
            let base = words.as_mut_ptr().cast::<u8>();
            let skip = base.align_offset(layout.align());
            // SAFETY: `skip + len` bytes lie inside `words`, which outlives `a` and which
            // nothing else uses while it lives.
            let meta = |len| unsafe {
                MetadataMemory::from_raw(core::ptr::NonNull::new_unchecked(base.add(skip)), len)
            };
            let small = (m.build_in)(config, Settings::new(), meta(layout.size() - 1));
            assert_eq!(small.err(), Some(Error::MetadataTooSmall), "{}", e.name);
            let a = (m.build_in)(config, Settings::new(), meta(layout.size())).unwrap();
            let block = a.alloc(3, 1).unwrap();
            assert_eq!(a.free(block, 2, 1), Err(Error::OrderMismatch), "{}", e.name);
            a.free(block, 3, 1).unwrap();
            assert_eq!(a.free_units(), 1000, "{}", e.name);
            drop(a);
        }
    }
}
