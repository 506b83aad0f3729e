//! Building magazines in front of an allocator of 1 GiB of 4 KiB units (2^18 units, orders up
//! to 10, 4 cores): fresh, and with blocks out at both ends (a reserved unit at the top and
//! 1000 at the bottom, as a memory map's holes), which the magazines adopt by walking every
//! unit up to the last allocated one.
//!
//! ```text
//! cargo bench -p buddybench --bench adopt
//! ```

use buddyfree::llfree::LLFree;
use buddyfree::magazine::Magazine;
use buddyfree::{BlockAlloc, Config, Error, Nbbs4};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const UNITS: usize = 1 << 18;

fn config() -> Config {
    Config::new(UNITS, 10).with_cores(4)
}

/// `build`'s allocator, with the holes reserved if `used`.
fn inner<A: BlockAlloc>(build: fn(Config) -> Result<A, Error>, used: bool) -> A {
    let a = build(config()).unwrap();
    if used {
        a.reserve_range(UNITS - 1, 1, 0).unwrap();
        a.reserve_range(0, 1000, 0).unwrap();
    }
    a
}

fn bench<A: BlockAlloc>(c: &mut Criterion, name: &str, build: fn(Config) -> Result<A, Error>) {
    for (state, used) in [("fresh", false), ("used", true)] {
        c.bench_function(&format!("magazines/{name}/{state}"), |b| {
            b.iter_batched(
                || inner(build, used),
                |a| Magazine::new(a, 4).unwrap(),
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
