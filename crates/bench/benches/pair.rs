//! The lone order-0 alloc+free pair on one thread: the registry's allocators through the
//! spine trait, and the magazines through a pinned core ([`Magazine::pin`]), in one process.
//!
//! ```text
//! cargo bench -p buddybench --bench pair
//! ```
//!
//! No memory is touched (positions only), the same for every allocator; 2^18 units, blocks up
//! to order 10, one core.

use std::hint::black_box;

use buddyfree::llfree::LLFree;
use buddyfree::magazine::Magazine;
use buddyfree::{registry, BlockAlloc, Config, Error, Nbbs4};
use criterion::{criterion_group, criterion_main, Criterion};

const TRAIT: &[&str] = &[
    "knuth-locked",
    "linux",
    "llfree",
    "nbbs4",
    "llfree-magazine",
    "nbbs4-magazine",
];

fn config() -> Config {
    Config::new(1 << 18, 10).with_cores(1)
}

fn through_the_trait(c: &mut Criterion) {
    for &name in TRAIT {
        let entry = registry::find(name).expect("a registered allocator");
        let a = (entry.build)(config()).expect("builds");
        c.bench_function(name, |b| {
            b.iter(|| {
                let i = a.alloc(0, 0).expect("a free unit");
                a.free(black_box(i), 0, 0).expect("its own block");
            })
        });
    }
}

fn pinned<A: BlockAlloc>(c: &mut Criterion, name: &str, build: fn(Config) -> Result<A, Error>) {
    let m = Magazine::with_config(config(), build).expect("builds");
    let mut core = m.pin(0);
    c.bench_function(name, |b| {
        b.iter(|| {
            let i = core.alloc(0).expect("a free unit");
            core.free(black_box(i), 0).expect("its own block");
        })
    });
}

fn through_a_pinned_core(c: &mut Criterion) {
    pinned(c, "llfree-magazine pinned", LLFree::new);
    pinned(c, "nbbs4-magazine pinned", Nbbs4::new);
}

criterion_group!(pair, through_the_trait, through_a_pinned_core);
criterion_main!(pair);
