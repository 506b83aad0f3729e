//! Building magazines in front of an allocator of 1 GiB of 4 KiB units (2^18 units, orders up
//! to 10, 4 cores): fresh; with blocks out at both ends (a reserved unit at the top and 1000
//! at the bottom, as a memory map's holes); and with a unit out in every 16 (16 384 blocks
//! scattered over the whole range). The magazines adopt the blocks out with one
//! `next_block` per block.
//!
//! ```text
//! cargo bench -p buddybench --bench adopt
//! ```

use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Backend, Magazine};
use buddyfree::{BlockAlloc, Config, Error, Nbbs4};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const UNITS: usize = 1 << 18;

fn config() -> Config {
    Config::new(UNITS, 10).with_cores(4)
}

/// What is out of the allocator when the magazines are built.
#[derive(Clone, Copy)]
enum Out {
    Nothing,
    Holes,
    Scattered,
}

/// `build`'s allocator with `out` taken.
fn inner<A: BlockAlloc>(build: fn(Config) -> Result<A, Error>, out: Out) -> A {
    let a = build(config()).unwrap();
    match out {
        Out::Nothing => {}
        Out::Holes => {
            a.reserve_range(UNITS - 1, 1, 0).unwrap();
            a.reserve_range(0, 1000, 0).unwrap();
        }
        Out::Scattered => (0..UNITS)
            .step_by(16)
            .for_each(|unit| a.alloc_at(unit, 0, 0).unwrap()),
    }
    a
}

fn bench<A: Backend>(c: &mut Criterion, name: &str, build: fn(Config) -> Result<A, Error>) {
    for (state, out) in [
        ("fresh", Out::Nothing),
        ("used", Out::Holes),
        ("scattered", Out::Scattered),
    ] {
        c.bench_function(&format!("magazines/{name}/{state}"), |b| {
            b.iter_batched(
                || inner(build, out),
                |a| {
                    let config = Config::new(a.total_units(), a.max_order()).with_cores(4);
                    Magazine::new(config, a).unwrap()
                },
                BatchSize::LargeInput,
            )
        });
    }
}

fn adopt(c: &mut Criterion) {
    bench(c, "llfree", LLFree::new);
    bench(c, "nbbs4", Nbbs4::new);
}

criterion_group!(benches, adopt);
criterion_main!(benches);
