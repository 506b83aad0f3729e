//! The allocators that take caller metadata, behind one interface, so that a test is written
//! once and run on each of them ([`each`]).

#![allow(dead_code)]

use std::alloc::Layout;
use std::mem::MaybeUninit;

use buddyfree::buddy::{Estranged, Knuth};
use buddyfree::llfree::LLFree;
use buddyfree::magazine::Backend;
use buddyfree::{Config, Error, Locked, MetadataMemory, Nbbs, Nbbs4};

/// An allocator built over caller metadata, and its shared form (a `BlockAlloc` that
/// magazines can stand in front of).
pub trait CallerMetadata: Sized {
    /// What the tests run: the allocator itself, or behind a lock for the sequential ones.
    type Shared: Backend;
    const NAME: &'static str;
    fn metadata_layout(config: Config) -> Result<Layout, Error>;
    fn metadata_bytes(config: Config) -> usize;
    fn in_metadata(config: Config, meta: MetadataMemory) -> Result<Self, Error>;
    fn shared(self) -> Self::Shared;
}

macro_rules! caller_metadata {
    ($t:ty, $name:literal, $shared:ty, $wrap:expr) => {
        impl CallerMetadata for $t {
            type Shared = $shared;
            const NAME: &'static str = $name;
            fn metadata_layout(config: Config) -> Result<Layout, Error> {
                <$t>::metadata_layout(config)
            }
            fn metadata_bytes(config: Config) -> usize {
                <$t>::metadata_bytes(config)
            }
            fn in_metadata(config: Config, meta: MetadataMemory) -> Result<Self, Error> {
                <$t>::in_metadata(config, meta)
            }
            fn shared(self) -> $shared {
                $wrap(self)
            }
        }
    };
}

caller_metadata!(Nbbs, "nbbs", Nbbs, |a| a);
caller_metadata!(Nbbs4, "nbbs4", Nbbs4, |a| a);
caller_metadata!(LLFree, "llfree", LLFree, |a| a);
caller_metadata!(Knuth, "knuth", Locked<Knuth>, Locked::new);
caller_metadata!(Estranged, "estranged", Locked<Estranged>, Locked::new);

/// A test generic over the allocator.
pub trait Visit {
    fn visit<A: CallerMetadata>(&mut self);
}

/// Runs `v` on every allocator that takes caller metadata.
pub fn each(v: &mut impl Visit) {
    v.visit::<Nbbs>();
    v.visit::<Nbbs4>();
    v.visit::<LLFree>();
    v.visit::<Knuth>();
    v.visit::<Estranged>();
}

/// `len` bytes aligned to `align`, leaked: caller metadata for the rest of the test.
pub fn leaked(len: usize, align: usize) -> &'static mut [MaybeUninit<u8>] {
    let memory = Box::leak(vec![MaybeUninit::new(0xa5u8); len + align].into_boxed_slice());
    let skip = memory.as_ptr().align_offset(align);
    &mut memory[skip..skip + len]
}

/// `A` over `config`, its metadata leaked.
pub fn build<A: CallerMetadata>(config: Config) -> A::Shared {
    let layout = A::metadata_layout(config).unwrap();
    let meta = leaked(layout.size(), layout.align());
    A::in_metadata(config, MetadataMemory::from_static(meta))
        .unwrap()
        .shared()
}
