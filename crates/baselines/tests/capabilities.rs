//! `BlockAlloc::capabilities` tells the truth: for every registry entry, every operation it
//! claims never answers `Unsupported`, and every operation it does not claim always does;
//! the entry's constant is what its instances say, built on the heap or in caller memory;
//! and wrappers pass on what the allocators behind them offer.

mod common;

use std::ptr::NonNull;

use buddyfree::buddy::Knuth;
use buddyfree::magazine::{Magazine, Plain, Settings};
use buddyfree::zones::{Zone, Zones};
use buddyfree::{BlockAlloc, Capabilities, Config, Error, Locked, MetadataMemory};
use buddyfree_baselines::linux::PerCpu;
use buddyfree_baselines::list::{CasList, FirstFit};
use buddyfree_baselines::model::Model;
use buddyfree_baselines::per_level::PerLevelSpin;
use buddyfree_baselines::registry::{self, DynAlloc};

const UNITS: usize = 256;

/// Whether `got` is what an operation that `claimed` (or not) may answer: never
/// `Unsupported` if claimed, always `Unsupported` if not.
fn honest<T: std::fmt::Debug>(name: &str, what: &str, claimed: bool, got: &Result<T, Error>) {
    if claimed {
        assert_ne!(
            got.as_ref().err(),
            Some(&Error::Unsupported),
            "{name}: {what} claimed"
        );
    } else {
        assert_eq!(
            got.as_ref().err(),
            Some(&Error::Unsupported),
            "{name}: {what} not claimed, answered {got:?}"
        );
    }
}

/// Calls every optional operation of `a` with good arguments (blocks it has out, units that
/// are free) and checks each answer against `a.capabilities()`; leaves `a` as it found it
/// (every unit free).
fn check_answers(name: &str, a: &dyn BlockAlloc) {
    let caps = a.capabilities();
    let has = |flag| caps.contains(flag);
    let units = a.total_units();
    assert_eq!(a.free_units(), units, "{name}: starts empty");

    let got = a.try_alloc(0, 0);
    honest(name, "try_alloc", has(Capabilities::TRY_ALLOC), &got);
    if let Ok(index) = got {
        a.free(index, 0, 0).unwrap();
    }

    let block = a.alloc(0, 1).unwrap();
    let got = a.try_free(block, 0, 1);
    honest(name, "try_free", has(Capabilities::TRY_FREE), &got);
    if got.is_err() {
        a.free(block, 0, 1).unwrap();
    }

    let block = a.alloc(0, 0).unwrap();
    let got = a.block_of(block);
    honest(name, "block_of", has(Capabilities::BLOCK_OF), &got);
    if let Ok(found) = got {
        assert_eq!(found, Some((block, 0)), "{name}");
    }
    let got = a.order_at(block);
    honest(name, "order_at", has(Capabilities::BLOCK_OF), &got);
    let got = a.next_block(0);
    honest(name, "next_block", has(Capabilities::BLOCK_OF), &got);
    let got = a.try_block_of(block);
    honest(name, "try_block_of", has(Capabilities::TRY_BLOCK_OF), &got);
    let got = a.try_order_at(block);
    honest(name, "try_order_at", has(Capabilities::TRY_BLOCK_OF), &got);
    // A range of one whole live block: nothing to cut, so `block_of` alone is needed.
    let got = a.free_range(block, 1, 0);
    honest(name, "free_range", has(Capabilities::BLOCK_OF), &got);
    if got.is_err() {
        a.free(block, 0, 0).unwrap();
    }

    a.drain();
    let last = units - 1;
    let got = a.alloc_at(last, 0, 0);
    honest(name, "alloc_at", has(Capabilities::ALLOC_AT), &got);
    if got.is_ok() {
        a.free(last, 0, 0).unwrap();
    }
    let got = a.reserve_range(units - 3, 3, 0);
    honest(name, "reserve_range", has(Capabilities::ALLOC_AT), &got);
    if got.is_ok() {
        a.free_range(units - 3, 3, 0).unwrap();
    }
    a.drain();
    assert_eq!(a.free_units(), units, "{name}: left as it was");
}

/// Every registry entry, built each way it can be: its constant is its instances' answer,
/// and their answers match it.
#[test]
fn every_entry_claims_exactly_what_it_answers() {
    let mut differ = std::collections::BTreeSet::new();
    for entry in registry::entries() {
        let name = entry.name;
        let config = Config::new(UNITS, entry.max_order.min(4)).with_cores(2);
        let safe = Settings::new().with_interrupt_safe_frees();
        let mut built: Vec<(&str, DynAlloc)> = vec![
            ("build", (entry.build)(config, Settings::new()).unwrap()),
            (
                "build, interrupt-safe",
                (entry.build)(config, safe).unwrap(),
            ),
        ];
        if let Some(metadata) = entry.metadata {
            let layout = (metadata.layout)(config).unwrap();
            for (how, settings) in [
                ("build_in", Settings::new()),
                ("build_in, interrupt-safe", safe),
            ] {
                let meta = leaked(layout.size(), layout.align());
                // SAFETY: `layout.size()` bytes at its alignment, leaked (they outlive the
                // allocator) and used by nothing else.
                let meta = unsafe { MetadataMemory::from_raw(meta, layout.size()) };
                let a = (metadata.build_in)(config, settings, meta);
                built.push((how, a.unwrap()));
            }
        }
        for (how, a) in &built {
            assert_eq!(a.capabilities(), entry.capabilities, "{name} by {how}");
            check_answers(&format!("{name} by {how}"), &**a);
        }
        differ.insert(entry.capabilities.bits());
    }
    assert!(differ.len() >= 3, "entries that differ: {differ:?}");
}

/// Zones offer what all of their zones offer; a `Box`, a lock and the per-core caches pass
/// on what is behind them.
#[test]
fn wrappers_pass_on_what_is_behind_them() {
    let build = |name: &str, units| {
        let entry = registry::find(name).unwrap();
        (entry.build)(
            Config::new(units, entry.max_order.min(4)),
            Default::default(),
        )
        .unwrap()
    };
    let zones = Zones::new([
        Zone::new(0, build("llfree", 128)),
        Zone::new(128, build("list-cas", 128)),
    ])
    .unwrap();
    let lists = registry::find("list-cas").unwrap().capabilities;
    assert_eq!(zones.capabilities(), lists.intersection(Capabilities::ALL));
    check_answers("llfree and list-cas zones", &zones);

    let first_fit = Locked::<FirstFit>::new(FirstFit::new(Config::new(UNITS, 4)).unwrap());
    assert_eq!(
        first_fit.capabilities(),
        Capabilities::ALL.difference(Capabilities::ALLOC_AT)
    );
    let model = Locked::<Model>::new(Model::new(Config::new(UNITS, 4)).unwrap());
    assert_eq!(model.capabilities(), Capabilities::ALL);

    let config = Config::new(UNITS, 4).with_cores(2);
    let linux = PerCpu::<Knuth>::with_config(config, Knuth::new).unwrap();
    assert_eq!(linux.capabilities(), Capabilities::ALL);
    let per_level = Magazine::new(config, Plain(PerLevelSpin::new(config).unwrap())).unwrap();
    let claimed = Capabilities::BLOCK_OF.union(Capabilities::TRY_BLOCK_OF);
    assert_eq!(per_level.capabilities(), claimed);
    let config = Config::new(UNITS, 0);
    let lists = Magazine::new(config, Plain(CasList::new(config).unwrap())).unwrap();
    assert_eq!(
        lists.capabilities(),
        CasList::new(Config::new(UNITS, 0)).unwrap().capabilities()
    );
    let boxed: Box<dyn BlockAlloc> = Box::new(per_level);
    assert_eq!(boxed.capabilities(), claimed);
}

/// An allocator from outside the crate that says nothing claims nothing.
#[test]
fn the_default_claims_nothing() {
    struct Plain(DynAlloc);
    impl BlockAlloc for Plain {
        fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
            self.0.alloc(order, core)
        }
        fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
            self.0.free(index, order, core)
        }
        common::pass_on!(sizes);
    }
    let plain = Plain(
        (registry::find("nbbs").unwrap().build)(Config::new(UNITS, 4), Default::default()).unwrap(),
    );
    assert_eq!(plain.capabilities(), Capabilities::NONE);
    check_answers("a plain allocator", &plain);
}

/// `len` bytes aligned to `align`, leaked.
fn leaked(len: usize, align: usize) -> NonNull<u8> {
    let memory = Box::leak(vec![0u8; len + align].into_boxed_slice());
    let skip = memory.as_ptr().align_offset(align);
    NonNull::from(&mut memory[skip])
}
