//! `try_free`, the free that never waits (interrupt context): for every registry allocator
//! that offers it, the same answers as the model gives `free` (a differential run whose
//! every free is a `try_free`), no wait where the calling thread itself holds the core's
//! cache (a kernel's interrupt on a core inside an allocator call), and exactly one winner
//! among threads racing to free the same blocks.

mod common;
mod metadata;

use buddyfree::buddy::Knuth;
use buddyfree::{BlockAlloc, Config, Error, Locked, MetadataMemory};
use buddyfree_baselines::registry::{self, DynAlloc};
use common::TryFrees;
use metadata::leaked;
use proptest::prelude::*;

/// The registry's allocators over `config` (orders clamped to theirs) that offer
/// `try_free`, with their names.
fn with_try_free(units: usize, max_order: u32, cores: usize) -> Vec<(&'static str, DynAlloc)> {
    let found: Vec<_> = registry::entries()
        .iter()
        .filter_map(|entry| {
            let config = Config::new(units, max_order.min(entry.max_order)).with_cores(cores);
            let alloc = (entry.build)(config, Default::default()).ok()?;
            common::offers_try_free(&*alloc).then_some((entry.name, alloc))
        })
        .collect();
    let names: Vec<_> = found.iter().map(|&(name, _)| name).collect();
    for name in [
        "nbbs",
        "nbbs4",
        "llfree",
        "knuth-locked",
        "linux",
        "llfree-magazine",
        "list-cas",
        "list-percore",
    ] {
        assert!(names.contains(&name), "{name} lacks try_free: {names:?}");
    }
    found
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn try_free_answers_as_free(ops in common::ops(100, 5, 300)) {
        for &(units, max_order) in common::CONFIGS {
            for (_, alloc) in with_try_free(units, max_order, 3) {
                let config = Config::new(units, alloc.max_order()).with_cores(3);
                let ops = common::clamp(&ops, config.max_order);
                common::check_against_model(&TryFrees(alloc), config, &ops);
            }
        }
    }
}

/// Inside `with_core`, the calling thread holds the core's cache (where there is one):
/// `try_free` on that core must not wait for it. It frees (straight to the backend, past
/// the held cache), or answers `WouldBlock` and changes nothing; by default a cache holds
/// the blocks it handed out, so their `try_free` answers `WouldBlock` while it is held.
#[test]
fn try_free_never_waits_for_a_core_its_caller_holds() {
    for (name, alloc) in with_try_free(1 << 12, 10, 2) {
        try_frees_inside_with_core(name, &*alloc, false);
    }
}

/// With interrupt-safe frees, the caches hold no blocks: every such `try_free` frees.
#[test]
fn interrupt_safe_frees_never_block_on_a_held_cache() {
    use buddyfree::llfree::LLFree;
    use buddyfree::magazine::{Magazine, Settings};
    use buddyfree::Nbbs4;
    use buddyfree_baselines::linux::PerCpu;

    let config = Config::new(1 << 12, 10).with_cores(2);
    let llfree = Magazine::new(config, LLFree::new(config).unwrap()).unwrap();
    try_frees_inside_with_core(
        "llfree-magazine",
        &llfree.with_settings(Settings::new().with_interrupt_safe_frees()),
        true,
    );
    let nbbs4 = Magazine::new(config, Nbbs4::new(config).unwrap()).unwrap();
    try_frees_inside_with_core(
        "nbbs4-magazine",
        &nbbs4.with_settings(Settings::new().with_interrupt_safe_frees()),
        true,
    );
    let linux =
        PerCpu::<Knuth>::with_config(Config::new(1 << 12, 9).with_cores(2), Knuth::new).unwrap();
    // The Linux-like lists decide every free by a compare-and-swap: no setting needed.
    try_frees_inside_with_core("linux", &linux, true);
}

/// `Settings::with_interrupt_safe_frees` gives the same caches to allocators built by name
/// (`Entry::build`), on the heap and in caller memory (`CallerMetadata::build_in`, as the C
/// ABI builds them); without it, some of those `try_free`s answer `WouldBlock`.
#[test]
fn configured_interrupt_safe_frees_reach_the_registry() {
    use buddyfree::magazine::Settings;

    for name in ["llfree-magazine", "nbbs4-magazine", "nbbs-magazine"] {
        let entry = registry::find(name).unwrap();
        let config = Config::new(1 << 12, entry.max_order.min(10)).with_cores(2);
        let plain = (entry.build)(config, Default::default()).unwrap();
        let blocked = try_frees_inside_with_core(name, &*plain, false);
        assert!(blocked > 0, "{name}: the plain build holds its blocks");
        let safe = Settings::new().with_interrupt_safe_frees();
        for (settings, all_free) in [(Settings::new(), false), (safe, true)] {
            let on_heap = (entry.build)(config, settings).unwrap();
            let blocked = try_frees_inside_with_core(name, &*on_heap, all_free);
            // Without the setting, the held cache is what a `try_free` waits for.
            assert_eq!(blocked > 0, !all_free, "{name}: {blocked} blocked");
            let Some(metadata) = entry.metadata else {
                continue;
            };
            let layout = (metadata.layout)(config).unwrap();
            for with_settings in [false, true] {
                let meta = leaked(layout.size(), layout.align());
                let meta = MetadataMemory::from_static(meta);
                let settings = if with_settings {
                    settings
                } else {
                    Settings::new()
                };
                let in_caller = (metadata.build_in)(config, settings, meta).unwrap();
                let all_free = all_free && with_settings;
                let blocked = try_frees_inside_with_core(name, &*in_caller, all_free);
                assert_eq!(
                    blocked > 0,
                    !all_free,
                    "{name} in caller memory: {blocked} blocked"
                );
                drop(in_caller);
            }
        }
    }
}

/// Blocks of orders 0, 3 and 9 allocated on core 1 and `try_free`d on core 1 while the
/// caller holds it: each answer `Ok` (the block freed once) or `WouldBlock` (nothing
/// changed); all `Ok` if `all_free`. How many answered `WouldBlock`.
fn try_frees_inside_with_core(name: &str, alloc: &dyn BlockAlloc, all_free: bool) -> usize {
    let mut blocked = 0;
    for order in [0, 3, 9].into_iter().filter(|&o| o <= alloc.max_order()) {
        // Half the heap: more than a magazine parks, for its spills.
        let n = ((1 << 12) >> order).min(600) / 2;
        let blocks: Vec<usize> = (0..n).map(|_| alloc.alloc(order, 1).unwrap()).collect();
        let free = alloc.free_units();
        let mut answers = Vec::new();
        alloc.with_core(1, &mut |held| {
            let mine = held.alloc(0).unwrap();
            answers = blocks
                .iter()
                .map(|&b| alloc.try_free(b, order, 1))
                .collect();
            held.free(mine, 0).unwrap();
        });
        let freed = answers.iter().filter(|a| a.is_ok()).count();
        blocked += blocks.len() - freed;
        assert_eq!(
            alloc.free_units(),
            free + (freed << order),
            "{name} order {order}"
        );
        for (&b, answer) in blocks.iter().zip(&answers) {
            match answer {
                Ok(()) => assert_eq!(alloc.free(b, order, 0), Err(Error::NotAllocated)),
                Err(Error::WouldBlock) => alloc.free(b, order, 0).unwrap(),
                Err(e) => panic!("{name}: try_free of a live block of order {order}: {e}"),
            }
        }
        if all_free {
            assert_eq!(
                freed,
                blocks.len(),
                "{name}: the held cache blocked a try_free"
            );
        }
        alloc.drain();
        assert_eq!(alloc.free_units(), alloc.total_units(), "{name}");
    }
    blocked
}

/// A held lock of a locked allocator: `WouldBlock`, nothing changed.
#[test]
fn try_free_under_the_callers_own_lock_would_block() {
    let alloc = Locked::<Knuth>::new(Knuth::new(Config::new(64, 4)).unwrap());
    let block = alloc.alloc(2, 0).unwrap();
    let answer = alloc.with(|_| alloc.try_free(block, 2, 0));
    assert_eq!(answer, Err(Error::WouldBlock));
    assert_eq!(alloc.free_units(), 60);
    alloc.try_free(block, 2, 0).unwrap();
    assert_eq!(alloc.try_free(block, 2, 0), Err(Error::NotAllocated));
}

#[test]
fn racing_try_frees_of_one_block_let_exactly_one_through() {
    for (_, alloc) in with_try_free(1 << 12, 10, 4) {
        let alloc = TryFrees(alloc);
        for order in [0, 2, 8].into_iter().filter(|&o| o <= alloc.max_order()) {
            let n = ((1 << 12) >> order).min(512) / 2;
            common::double_free_race(&alloc, 4, n, order);
        }
    }
}
