//! Every registered allocator, built directly, behind a heap and (where it takes them) over
//! caller metadata, over configurations at and past every limit (cores, units, max order)
//! answers `Ok` or `Err`: it never aborts or panics. Each allocator runs in a child process (this test binary re-executed, see
//! `extreme_child`) limited to 4 GiB of address space, so that a reservation too large for
//! the machine fails there as it would on a small one, instead of being lazily granted.
//!
//! Not built under ThreadSanitizer: its runtime reserves terabytes of shadow address space,
//! so under a 4 GiB limit every later mapping fails, even a 376-byte allocation of its own.
//! The plain test pass runs it; nothing here is concurrent.
#![cfg(all(unix, not(loom), not(buddyfree_tsan)))]

mod metadata;

use std::alloc::Layout;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::Command;
use std::ptr::NonNull;

use buddyfree::heap::{Heap, Region, TypedPool};
use buddyfree::{BlockAlloc, Config, Error, MetadataMemory, MAX_CORES};
use buddyfree_baselines::registry::{self, Entry};
use metadata::{each, CallerMetadata, Visit};
use proptest::prelude::*;
use proptest::test_runner::{Config as Cases, RngAlgorithm, TestRng, TestRunner};

/// Names the allocator a child process checks.
const CHILD_ENV: &str = "BUDDYFREE_EXTREME_ENTRY";
/// The child's address-space limit.
const ADDRESS_SPACE: u64 = 4 << 30;
/// Bytes per unit of the heap built over each configuration.
const UNIT: usize = 64;

/// Values at and on both sides of every limit some allocator has: one unit, the list
/// allocators' `u32` indices, sizes whose metadata exceeds the address-space limit, a
/// persistent zone's `MAX_UNITS`, the top of `usize`.
const UNITS: &[usize] = &[
    1,
    1 << 20,
    u32::MAX as usize - 1,
    u32::MAX as usize,
    1 << 36,
    (1 << 48) + 1,
    usize::MAX,
];
/// The list allocators' 0, LLFree's pair (10), its whole tree of the paper's size (14) and
/// of the largest size (30), one past each, the width of `usize` and past it.
const ORDERS: &[u32] = &[0, 10, 11, 14, 15, 30, 31, 63, 64, u32::MAX];
/// None, one, `MAX_CORES` and one more, and the counts a negative number cast gives.
const CORES: &[usize] = &[
    0,
    1,
    MAX_CORES,
    MAX_CORES + 1,
    u32::MAX as usize,
    usize::MAX,
];

/// The largest caller metadata built in full; past it only the refusal of too little memory
/// is checked, as zeroing gigabytes twice (here and through the registry) buys nothing.
const CALLER_BYTES: usize = 1 << 28;

/// `config` over caller metadata, for the allocator registered as `entry` if it takes any:
/// its layout, then the allocator in memory of that layout, or the refusal of memory too
/// small for it.
struct InCallerMemory<'a> {
    entry: &'a str,
    config: Config,
    outcome: Option<String>,
}

impl Visit for InCallerMemory<'_> {
    fn visit<A: CallerMetadata>(&mut self) {
        if self.entry.trim_end_matches("-locked") != A::NAME {
            return;
        }
        let layout = match A::metadata_layout(self.config) {
            Ok(layout) => layout,
            Err(e) => return self.outcome = Some(format!("err {e}")),
        };
        let small = layout.size() > CALLER_BYTES;
        let len = if small { 1 << 12 } else { layout.size() };
        let memory = Layout::from_size_align(len.max(1), layout.align()).unwrap();
        // SAFETY: the layout is not empty.
        let Some(meta) = NonNull::new(unsafe { std::alloc::alloc(memory) }) else {
            return self.outcome = Some(format!("{len} bytes not granted"));
        };
        // SAFETY: `len` bytes, ours alone until freed below.
        let built = A::in_metadata(self.config, unsafe { MetadataMemory::from_raw(meta, len) });
        self.outcome = Some(match built {
            Ok(_) if small => panic!("{:?} built in {len} bytes of {layout:?}", self.config),
            Ok(a) => format!("ok {} units", a.shared().total_units()),
            Err(e) => {
                assert!(!small || e == Error::MetadataTooSmall, "{e}");
                format!("err {e}")
            }
        });
        // SAFETY: allocated above with this layout; the allocator is gone.
        unsafe { std::alloc::dealloc(meta.as_ptr(), memory) };
    }
}

/// Builds `config` with `entry`, directly, as a heap with a typed pool over a fresh mapping,
/// and over caller metadata; any result is fine, only an abort or a panic is not.
fn build(entry: &Entry, config: Config) -> String {
    let direct = match (entry.build)(config, Default::default()) {
        Ok(a) => format!("ok {} units", a.total_units()),
        Err(e) => format!("err {e}"),
    };
    let heap = config
        .units
        .checked_mul(UNIT)
        .ok_or("region size overflows".to_string())
        .and_then(|bytes| Region::mmap(bytes, UNIT).map_err(|e| e.to_string()))
        .and_then(|region| {
            let build = |config| (entry.build)(config, Default::default());
            Heap::build(region, UNIT, config.max_order, config.cores, build)
                .map_err(|e| e.to_string())
        })
        .and_then(|heap| TypedPool::<u64, _>::new(heap).map_err(|e| e.to_string()));
    let mut caller = InCallerMemory {
        entry: entry.name,
        config,
        outcome: None,
    };
    each(&mut caller);
    let caller = caller.outcome.unwrap_or_else(|| "-".into());
    let heap = if heap.is_ok() { "ok" } else { "err" };
    format!("{direct}; heap {heap}; caller metadata {caller}")
}

/// Log-uniform sizes over the whole range, so that every power of two is as likely.
fn any_size(bits: u32) -> impl Strategy<Value = usize> {
    (0..=bits).prop_flat_map(|b| match b {
        0 => Just(0).boxed(),
        b if b >= usize::BITS => Just(usize::MAX).boxed(),
        b => ((1usize << (b - 1))..=(1usize << b) - 1).boxed(),
    })
}

/// Runs in the child: the limit, then every edge combination and random ones. Each case is
/// printed before it is tried, so the parent can name the one that killed the child.
fn check_entry(entry: &Entry) {
    let limit = libc::rlimit {
        rlim_cur: ADDRESS_SPACE,
        rlim_max: ADDRESS_SPACE,
    };
    // SAFETY: `setrlimit` reads a valid `rlimit`; lowering our own limit affects only this
    // process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
    let try_one = |config: Config| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "case {config:?}").unwrap();
        out.flush().unwrap();
        let outcome = build(entry, config);
        writeln!(out, "  -> {outcome}").unwrap();
    };
    // Each pair of dimensions at its edges with the third one ordinary: every limit is met
    // alone and next to each other one. (The full product adds only repeats of a refusal,
    // and each success at 2^32 units costs LLFree seconds of zeroing.)
    let mut edges = BTreeSet::new();
    for &units in UNITS {
        for &max_order in ORDERS {
            edges.insert((units, max_order, 1));
        }
        for &cores in CORES {
            edges.insert((units, 0, cores));
        }
    }
    for &max_order in ORDERS {
        for &cores in CORES {
            edges.insert((1 << 20, max_order, cores));
        }
    }
    for (units, max_order, cores) in edges {
        try_one(Config::new(units, max_order).with_cores(cores));
    }
    let cases = Cases {
        cases: 48,
        failure_persistence: None,
        ..Cases::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(cases, rng);
    let configs = (any_size(64), 0..=66u32, any_size(33))
        .prop_map(|(units, order, cores)| Config::new(units, order).with_cores(cores));
    runner
        .run(&configs, |config| {
            try_one(config);
            Ok(())
        })
        .unwrap();
    println!("done");
}

/// The child's entry point: does nothing unless started by the parent test.
#[test]
fn extreme_child() {
    if let Ok(name) = std::env::var(CHILD_ENV) {
        check_entry(registry::find(&name).expect("the parent names a registered allocator"));
    }
}

#[test]
fn extreme_configurations_are_errors_never_aborts() {
    let exe = std::env::current_exe().unwrap();
    for entry in registry::entries() {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "extreme_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, entry.name)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last_case = stdout.lines().rfind(|l| l.starts_with("case "));
        assert!(
            out.status.success() && stdout.lines().any(|l| l == "done"),
            "{}: the child ended with {} after {:?}\n{}",
            entry.name,
            out.status,
            last_case,
            String::from_utf8_lossy(&out.stderr),
        );
    }
}
