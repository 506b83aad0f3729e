//! The lone order-0 alloc+free pair on one thread: the registry's allocators through the
//! spine trait, through a core held by [`BlockAlloc::with_core`], the magazines through a
//! pinned core ([`Magazine::pin`]), and `llfree-magazine` through the C ABI (plain calls, and
//! inside `buddyfree_with_core`), in one process.
//!
//! ```text
//! cargo bench -p buddybench --bench pair
//! ```
//!
//! No memory is touched (positions only), the same for every allocator; 2^18 units, blocks up
//! to order 10, one core.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;

use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Backend, Magazine};
use buddyfree::{BlockAlloc, Config, Error, HeldCore, Nbbs4};
use buddyfree_baselines::registry;
use buddyfree_c::{
    buddyfree_alloc_order, buddyfree_core_alloc_order, buddyfree_core_free_order, buddyfree_create,
    buddyfree_destroy, buddyfree_free_order, buddyfree_with_core, Buddyfree, BuddyfreeConfig,
    BuddyfreeCore, BuddyfreeStatus,
};
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
        let a = (entry.build)(config(), Default::default()).expect("builds");
        c.bench_function(name, |b| {
            b.iter(|| {
                let i = a.alloc(0, 0).expect("a free unit");
                a.free(black_box(i), 0, 0).expect("its own block");
            })
        });
    }
}

/// The pair on a held core: `dyn` behind the trait, the concrete type from a pin.
fn held_pairs<H: HeldCore + ?Sized>(c: &mut Criterion, name: &str, held: &mut H) {
    c.bench_function(name, |b| {
        b.iter(|| {
            let i = held.alloc(0).expect("a free unit");
            held.free(black_box(i), 0).expect("its own block");
        })
    });
}

fn through_a_held_core(c: &mut Criterion) {
    for &name in TRAIT {
        let entry = registry::find(name).expect("a registered allocator");
        let a = (entry.build)(config(), Default::default()).expect("builds");
        a.with_core(0, &mut |held| held_pairs(c, &format!("{name} held"), held));
    }
}

fn pinned<A: Backend>(c: &mut Criterion, name: &str, build: fn(Config) -> Result<A, Error>) {
    let m = build(config())
        .and_then(|inner| Magazine::new(config(), inner))
        .expect("builds");
    held_pairs(c, name, &mut m.pin(0));
}

fn through_a_pinned_core(c: &mut Criterion) {
    pinned(c, "llfree-magazine pinned", LLFree::new);
    pinned(c, "nbbs4-magazine pinned", Nbbs4::new);
}

/// `llfree-magazine` as a C caller builds it: the same units, orders and core as above
/// (64-byte units over an internal mapping; no memory is touched).
fn c_instance() -> *mut Buddyfree {
    let c = BuddyfreeConfig {
        unit_size: 64,
        units: config().units,
        max_order: config().max_order,
        cores: 1,
        allocator: c"llfree-magazine".as_ptr(),
        parking_limit: 0,
        interrupt_safe_frees: 0,
    };
    let mut bf = ptr::null_mut();
    // SAFETY: a valid configuration and out pointer; no caller region.
    let status = unsafe { buddyfree_create(&c, ptr::null_mut(), 0, &mut bf) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    bf
}

/// The held pair, run from inside `buddyfree_with_core`'s callback (`arg`: the Criterion).
///
/// # Safety
/// `held` must be the callback's held core and `arg` a `Criterion` lent for the call.
unsafe extern "C" fn c_held_pairs(held: *mut BuddyfreeCore, arg: *mut c_void) {
    // SAFETY: the bench's `Criterion`, lent for this call.
    let c = unsafe { &mut *arg.cast::<Criterion>() };
    c.bench_function("llfree-magazine C held", |b| {
        b.iter(|| {
            c_pair(
                // SAFETY: `held` is held for this callback; `i` is writable.
                |i| unsafe { buddyfree_core_alloc_order(held, 0, i, ptr::null_mut()) },
                // SAFETY: as above.
                |i| unsafe { buddyfree_core_free_order(held, i, 0) },
            )
        })
    });
}

/// One order-0 pair through C entry points: `alloc` writes the block's index, `free` frees
/// it; both must succeed.
#[inline(always)]
fn c_pair(
    alloc: impl FnOnce(&mut usize) -> BuddyfreeStatus,
    free: impl FnOnce(usize) -> BuddyfreeStatus,
) {
    let mut i = 0;
    assert_eq!(alloc(&mut i), BuddyfreeStatus::Ok);
    assert_eq!(free(black_box(i)), BuddyfreeStatus::Ok);
}

fn through_the_c_abi(c: &mut Criterion) {
    let bf = c_instance();
    c.bench_function("llfree-magazine C", |b| {
        b.iter(|| {
            c_pair(
                // SAFETY: a live instance; `i` is writable.
                |i| unsafe { buddyfree_alloc_order(bf, 0, i, ptr::null_mut()) },
                // SAFETY: a live instance.
                |i| unsafe { buddyfree_free_order(bf, i, 0) },
            )
        })
    });
    let arg = ptr::from_mut(c).cast::<c_void>();
    // SAFETY: a live instance; the callback is safe with `arg`, the Criterion lent to it.
    let status = unsafe { buddyfree_with_core(bf, 0, Some(c_held_pairs), arg) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    // SAFETY: the last call on the instance.
    unsafe { buddyfree_destroy(bf) };
}

criterion_group!(
    pair,
    through_the_trait,
    through_a_held_core,
    through_a_pinned_core,
    through_the_c_abi
);
criterion_main!(pair);
