//! Random alloc / free / double-free / wrong-order / arbitrary-free / one-core-drain
//! sequences on every registered allocator, and again with every allocation and free
//! through a held core (`BlockAlloc::with_core`: the magazines' and `linux`'s pinned path),
//! with every free a `try_free` (where the allocator has it), and with magazines put in
//! front halfway (they adopt the blocks out), each checked step by step against the
//! reference model by the test battery's own checker (`crates/baselines/tests/common`);
//! where the magazines go in, `next_block` from every unit is checked against the model
//! too, before and after.
//!
//! Input: one byte picks the configuration, then 4 bytes per operation.

#![no_main]

use buddyfree::magazine::{Magazine, Plain, Settings};
use buddyfree::{BlockAlloc, Config};
use buddyfree_baselines::registry;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/baselines/tests/common/mod.rs"]
mod common;

use common::{ModelRun, Op, PinEachCall, TryFrees};

/// Enough steps to fill and drain the small configurations, few enough to keep executions
/// fast.
const MAX_OPS: usize = 512;

/// The operation mix of `common::ops`: mostly allocations and frees, some bad frees.
fn decode(bytes: &[u8], units: usize) -> Vec<Op> {
    bytes
        .chunks_exact(4)
        .take(MAX_OPS)
        .map(|c| {
            let (kind, a, b) = (c[0] % 21, usize::from(c[1]), u32::from(c[2]));
            let wide = usize::from(u16::from_le_bytes([c[1], c[3]]));
            let many = usize::from(c[3]) % common::BULK_MAX;
            match kind {
                0..=7 => Op::Alloc(b),
                8..=13 => Op::Free(a),
                14 => Op::DoubleFree(a),
                15 => Op::WrongOrder(a, b),
                16 | 17 => Op::Arbitrary(wide % (units + 4), b),
                18 => Op::AllocBulk(b, many),
                19 => Op::FreeBulk(a, many.max(1), c[2] & 1 == 1),
                _ => Op::DrainCore(a % 4),
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (units, widest) = common::CONFIGS[usize::from(pick) % common::CONFIGS.len()];
    let raw = decode(rest, units);
    for entry in registry::entries() {
        let max_order = widest.min(entry.max_order);
        let config = Config::new(units, max_order).with_cores(3);
        // A configuration the allocator refuses is an error value, which is all we ask.
        let Ok(alloc) = (entry.build)(config, Default::default()) else {
            continue;
        };
        let ops = common::clamp(&raw, max_order);
        common::check_against_model(&alloc, config, &ops);
        // Again, every allocation and free through a held core.
        let build =
            || (entry.build)(config, Default::default()).expect("the configuration built above");
        common::check_against_model(&PinEachCall(build()), config, &ops);
        // Every free a `try_free`.
        let alloc = build();
        if common::offers_try_free(&*alloc) {
            common::check_against_model(&TryFrees(alloc), config, &ops);
        }
        // Magazines put in front halfway (refused only where the blocks cannot be named).
        let (before, after) = ops.split_at(ops.len() / 2);
        let inner = build();
        let mut run = ModelRun::new(config);
        run.run(&*inner, before);
        run.check_next_block(&*inner, entry.name);
        if inner.block_of(0) != Err(buddyfree::Error::Unsupported) {
            // The full lists: this small heap would get the shortest.
            let fast = Magazine::new(config.with_cores(3), Plain(inner))
                .expect("magazines adopt what can be named");
            let fast = fast.with_settings(Settings::new().with_parking_limit(usize::MAX));
            run.run(&fast, after);
            run.check_next_block(&fast, entry.name);
            run.finish(&fast);
        }
    }
});
