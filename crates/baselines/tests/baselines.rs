//! The battery on the baselines: the Linux-like buddy (per-core caches in front of a locked
//! sequential buddy, here Knuth's), the Linux-like buddy with free lists per migrate type
//! (`linux-migrate`) and the three list allocators.

mod common;

use buddyfree::buddy::Knuth;
use buddyfree::{BlockAlloc, Capabilities, Class, Config, ConfigRule, Error, Locked};
use buddyfree_baselines::linux::PerCpu;
use buddyfree_baselines::list::{CasList, LockedList, PerCoreLists};
use buddyfree_baselines::migrate::{MigrateBuddy, MigrateType};
use proptest::prelude::*;

/// The inner buddy of the Linux-like tests, as in the registry's `linux`.
type Inner = Knuth;

fn linux(config: Config) -> PerCpu<Inner> {
    PerCpu::with_config(config, Inner::new).unwrap()
}

/// Orders 0..=9 need 512 units; 1024 leaves room for two huge blocks. (The differential
/// model is O(units) per operation, so the heap stays small.)
const LINUX: Config = Config::new(1024, 9).with_cores(2);
const LIST: Config = Config::new(64, 0).with_cores(3);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn linux_like_matches_model(ops in common::ops(LINUX.units, LINUX.max_order, 300)) {
        common::check_against_model(&linux(LINUX), LINUX, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn linux_like_matches_model_across_cores(ops in common::ops(LINUX.units, LINUX.max_order, 300)) {
        let config = LINUX.with_cores(3);
        common::check_against_model(&linux(config), config, &ops);
    }
}

/// The registry's `linux-migrate`.
fn migrate(config: Config) -> Locked<MigrateBuddy> {
    Locked::new(MigrateBuddy::new(config).unwrap())
}

/// An allocator whose plain `alloc` asks for a class picked by the core hint (movable,
/// unmovable, huge), so that the battery, which calls `alloc`, mixes migrate types.
struct Mixed<A>(A);

fn class_of(core: usize) -> Class {
    Class::new((core % 3) as u8)
}

impl<A: BlockAlloc> BlockAlloc for Mixed<A> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.0.alloc_class(order, class_of(core), core)
    }
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.0.free(index, order, core)
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
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.0.try_free(index, order, core)
    }
    fn alloc_at(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.0.alloc_at(index, order, core)
    }
    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.0.block_of(index)
    }
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.0.try_block_of(index)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Mixed migrate types, falling back and claiming pageblocks, answer as the model does
    /// (pageblocks of order 4 here, so that a small heap has several).
    #[test]
    fn linux_migrate_matches_model(ops in common::ops(256, 4, 300)) {
        let config = Config::new(256, 4);
        common::check_against_model(&Mixed(migrate(config)), config, &ops);
    }

    #[test]
    fn linux_migrate_matches_model_with_ragged_tails(ops in common::ops(64, 5, 200)) {
        for &(units, max_order) in common::CONFIGS {
            let config = Config::new(units, max_order);
            let ops = common::clamp(&ops, max_order);
            common::check_against_model(&Mixed(migrate(config)), config, &ops);
        }
    }
}

#[test]
fn linux_migrate_survives_stress_with_mixed_types() {
    assert!(common::stress(&Mixed(migrate(Config::new(4096, 10))), 4, 3_000, 10) > 0);
}

#[test]
fn linux_migrate_frees_each_block_once_under_racing_double_frees() {
    for order in [0, 3, 9] {
        let blocks = (1024 >> order).min(128);
        common::double_free_race(&Mixed(migrate(Config::new(1024, 9))), 4, blocks, order);
    }
}

/// One unmovable request in ten, at random, over half the heap: the unmovable frames fill
/// as few pageblocks as they can (each claimed whole), and every pageblock that holds one is
/// unmovable.
#[test]
fn linux_migrate_keeps_unmovable_frames_in_few_pageblocks() {
    const P: usize = 512;
    let alloc = migrate(Config::new(64 * P, 10));
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut unmovable = Vec::new();
    for _ in 0..32 * P {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(10) {
            unmovable.push(alloc.alloc_class(0, Class::UNMOVABLE, 0).unwrap());
        } else {
            alloc.alloc_class(0, Class::MOVABLE, 0).unwrap();
        }
    }
    let mut pageblocks: Vec<usize> = unmovable.iter().map(|&i| i / P).collect();
    pageblocks.sort_unstable();
    pageblocks.dedup();
    assert!(
        pageblocks.len() <= unmovable.len().div_ceil(P),
        "{} unmovable frames over {} pageblocks",
        unmovable.len(),
        pageblocks.len()
    );
    alloc.with(|b| {
        for &p in &pageblocks {
            assert_eq!(b.pageblock_type(p * P), MigrateType::Unmovable);
        }
    });
}

proptest! {
    #[test]
    fn locked_list_matches_model(ops in common::ops(LIST.units, 0, 200)) {
        common::check_against_model(&LockedList::new(LIST).unwrap(), LIST, &ops);
    }

    #[test]
    fn cas_list_matches_model(ops in common::ops(LIST.units, 0, 200)) {
        common::check_against_model(&CasList::new(LIST).unwrap(), LIST, &ops);
    }

    #[test]
    fn per_core_lists_match_model(ops in common::ops(LIST.units, 0, 200)) {
        common::check_against_model(&PerCoreLists::new(LIST).unwrap(), LIST, &ops);
    }
}

#[test]
fn linux_like_survives_stress_with_shared_core_hints() {
    // Four threads on two caches: threads t and t + 2 share one.
    assert!(common::stress(&linux(LINUX), 4, 3_000, 9) > 0);
}

#[test]
fn linux_like_frees_each_block_once_under_racing_double_frees() {
    for order in [0, 3, 4, 9] {
        let blocks = (LINUX.units >> order).min(128);
        common::double_free_race(&linux(LINUX), 4, blocks, order);
    }
}

#[test]
fn linux_like_detects_bad_frees_of_cached_blocks() {
    let alloc = linux(Config::new(1024, 9));
    let a = alloc.alloc(0, 0).unwrap();
    let b = alloc.alloc(3, 0).unwrap();
    alloc.free(a, 0, 0).unwrap();
    alloc.free(b, 3, 0).unwrap();
    // Both now sit in the cache: free to callers, allocated in the buddy.
    assert_eq!(alloc.free_units(), 1024);
    assert_eq!(alloc.free(a, 0, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(a, 1, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(b, 3, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(b, 4, 0), Err(Error::NotAllocated));
    assert_eq!(alloc.free(b & !511, 9, 0), Err(Error::NotAllocated));
    let c = alloc.alloc(3, 0).unwrap();
    assert_eq!(c, b, "the cache hands out its most recent block");
    assert_eq!(alloc.free(c, 0, 0), Err(Error::OrderMismatch));
    alloc.free(c, 3, 0).unwrap();
    common::assert_whole(&alloc);
}

#[test]
fn linux_like_drains_caches_before_reporting_out_of_memory() {
    let alloc = linux(Config::new(1024, 9).with_cores(2));
    // Fill core 1's order-0 cache, then ask core 0 for both huge blocks.
    let small: Vec<usize> = (0..8).map(|_| alloc.alloc(0, 1).unwrap()).collect();
    for &i in &small {
        alloc.free(i, 0, 1).unwrap();
    }
    let huge: Vec<usize> = (0..2).map(|_| alloc.alloc(9, 0).unwrap()).collect();
    assert_eq!(alloc.alloc(0, 1), Err(Error::OutOfMemory));
    for i in huge {
        alloc.free(i, 9, 0).unwrap();
    }
    common::assert_whole(&alloc);
}

#[test]
fn locked_list_survives_stress() {
    assert!(common::stress(&LockedList::new(Config::new(256, 0)).unwrap(), 4, 20_000, 0) > 0);
}

#[test]
fn cas_list_survives_stress() {
    assert!(common::stress(&CasList::new(Config::new(256, 0)).unwrap(), 4, 20_000, 0) > 0);
}

#[test]
fn per_core_lists_survive_stress_with_shared_core_hints() {
    let config = Config::new(256, 0).with_cores(2);
    assert!(common::stress(&PerCoreLists::new(config).unwrap(), 4, 20_000, 0) > 0);
}

#[test]
fn per_core_lists_steal_before_reporting_out_of_memory() {
    let lists = PerCoreLists::new(Config::new(10, 0).with_cores(4)).unwrap();
    let mut got: Vec<usize> = (0..10).map(|_| lists.alloc(0, 3).unwrap()).collect();
    assert_eq!(lists.alloc(0, 0), Err(Error::OutOfMemory));
    got.sort_unstable();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    for i in got {
        lists.free(i, 0, 1).unwrap();
    }
    common::assert_whole(&lists);
}

#[test]
fn lists_free_each_unit_once_under_racing_double_frees() {
    let config = Config::new(256, 0).with_cores(2);
    common::double_free_race(&LockedList::new(config).unwrap(), 4, 256, 0);
    common::double_free_race(&CasList::new(config).unwrap(), 4, 256, 0);
    common::double_free_race(&PerCoreLists::new(config).unwrap(), 4, 256, 0);
}

#[test]
fn lists_refuse_orders_above_0_and_hand_out_order_0_only() {
    let over = Config::new(64, 1);
    let above = Some(Error::InvalidConfig(ConfigRule::OrderAboveAllocator));
    assert_eq!(LockedList::new(over).err(), above);
    assert_eq!(CasList::new(over).err(), above);
    assert_eq!(PerCoreLists::new(over).err(), above);
    let lists: [Box<dyn BlockAlloc>; 3] = [
        Box::new(LockedList::new(Config::new(64, 0)).unwrap()),
        Box::new(CasList::new(Config::new(64, 0)).unwrap()),
        Box::new(PerCoreLists::new(Config::new(64, 0)).unwrap()),
    ];
    for list in lists {
        assert_eq!(list.max_order(), 0);
        assert_eq!(list.alloc(1, 0), Err(Error::BadOrder));
        assert_eq!(list.free(0, 1, 0), Err(Error::BadOrder));
        assert_eq!(list.free(0, 0, 0), Err(Error::NotAllocated));
        assert_eq!(list.free(64, 0, 0), Err(Error::OutOfRange));
    }
    assert_eq!(
        CasList::new(Config::new(0, 0)).err(),
        Some(Error::InvalidConfig(ConfigRule::NoUnits))
    );
    assert_eq!(
        CasList::new(Config::new(4, 0).with_cores(0)).err(),
        Some(Error::InvalidConfig(ConfigRule::NoCores))
    );
}
