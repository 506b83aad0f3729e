//! Caller metadata: the constructors over caller memory and a run of alloc/free on what they
//! build allocate nothing (a global allocator that aborts on any use while armed), and
//! `metadata_layout` is exactly what they need. Without the test harness, whose threads and
//! output capture would allocate alongside.

mod metadata;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use buddyfree::magazine::{Magazine, Plain};
use buddyfree::{range, BlockAlloc, Config, ConfigRule, Error, MetadataMemory, MAX_CORES};
use metadata::{build, each, leaked, CallerMetadata, Visit};

/// Set around the code under test: any allocation or deallocation then aborts.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The system allocator, refusing all use while [`ARMED`]. It aborts rather than panics: a
/// global allocator must not unwind.
struct NoHeap;

impl NoHeap {
    fn check(&self) {
        if ARMED.swap(false, Ordering::SeqCst) {
            let _ = std::io::stderr().write_all(b"heap used while armed: see the last step\n");
            std::process::abort();
        }
    }
}

// SAFETY: forwards to `System` unchanged, when it does not abort.
unsafe impl GlobalAlloc for NoHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.check();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.check();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: NoHeap = NoHeap;

/// Runs `f` with the heap forbidden.
fn without_heap<T>(step: &str, f: impl FnOnce() -> T) -> T {
    println!("  {step}");
    ARMED.store(true, Ordering::SeqCst);
    let out = f();
    ARMED.store(false, Ordering::SeqCst);
    out
}

/// Allocations and frees of every order with a fixed-size record of live blocks (no heap),
/// bad frees included; ends with everything freed and checks the allocator is whole.
fn churn(a: &dyn BlockAlloc, cores: usize) {
    let mut live = [(0usize, 0u32); 64];
    let mut n = 0;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let core = step % cores;
        if n < live.len() && (n == 0 || !x.is_multiple_of(3)) {
            let order = (x >> 8) as u32 % (a.max_order() + 1);
            match a.alloc(order, core) {
                Ok(index) => {
                    live[n] = (index, order);
                    n += 1;
                }
                Err(e) => assert_eq!(e, Error::OutOfMemory),
            }
        } else {
            let k = (x >> 16) as usize % n;
            let (index, order) = live[k];
            live[k] = live[n - 1];
            n -= 1;
            a.free(index, order, core).unwrap();
            assert_eq!(a.free(index, order, core), Err(Error::NotAllocated));
        }
    }
    for &(index, order) in &live[..n] {
        a.free(index, order, 0).unwrap();
    }
    a.drain();
    assert_eq!(a.free_units(), a.total_units());
    let top = a.alloc(a.max_order(), 0).unwrap();
    a.free(top, a.max_order(), 0).unwrap();
}

/// A partial last tree or frame, orders up to 10, one and sixteen cores.
const CONFIGS: [Config; 3] = [
    Config::new((1 << 14) + 300, 10),
    Config::new((1 << 14) + 300, 10).with_cores(16),
    Config::new(1 << 12, 4).with_cores(3),
];

/// Builds over `config` in caller memory (lent both ways: a static borrow and raw memory)
/// and churns, with the heap forbidden from construction to drop.
struct NoAllocation;

impl Visit for NoAllocation {
    fn visit<A: CallerMetadata>(&mut self) {
        println!("{}", A::NAME);
        for config in CONFIGS {
            let layout = A::metadata_layout(config).unwrap();
            let meta = leaked(layout.size(), layout.align());
            let raw = leaked(layout.size(), layout.align());
            let raw = NonNull::new(raw.as_mut_ptr().cast::<u8>()).unwrap();
            without_heap(&format!("{config:?}: in_metadata"), || {
                let meta = MetadataMemory::from_static(meta);
                let a = A::in_metadata(config, meta).unwrap().shared();
                churn(&a, config.cores);
            });
            without_heap(&format!("{config:?}: in_metadata, raw memory"), || {
                // SAFETY: leaked memory of the layout's size, used by nothing else.
                let a = A::in_metadata(config, unsafe { lent(raw, layout.size()) });
                churn(&a.unwrap().shared(), config.cores);
            });
        }
    }
}

/// Fills `meta` with a pattern, so that a refused construction can be seen to write nothing.
fn pattern(meta: &mut [MaybeUninit<u8>]) {
    meta.fill(MaybeUninit::new(0x5a));
}

fn untouched(meta: &[MaybeUninit<u8>]) -> bool {
    // SAFETY: every byte was written by `pattern` or by an allocator's initialisation.
    meta.iter().all(|b| unsafe { b.assume_init() } == 0x5a)
}

/// `metadata_layout` is exactly what the constructors need: one byte less is refused, and so
/// is memory off the alignment, without writing to it; the exact size works. Bad
/// configurations are refused by all three.
struct LayoutIsExact;

impl Visit for LayoutIsExact {
    fn visit<A: CallerMetadata>(&mut self) {
        println!("{}", A::NAME);
        for config in CONFIGS {
            let layout = A::metadata_layout(config).unwrap();
            assert!(layout.size() > 0 && layout.align().is_power_of_two());
            let meta = leaked(layout.size() + layout.align(), layout.align());
            let base = NonNull::new(meta.as_mut_ptr().cast::<u8>()).unwrap();
            pattern(meta);
            without_heap(&format!("{config:?}: refusals"), || {
                // SAFETY: `meta` is leaked, ours alone, with `layout.size() + layout.align()`
                // bytes from `base`.
                let short = A::in_metadata(config, unsafe { lent(base, layout.size() - 1) });
                assert_eq!(short.err(), Some(Error::MetadataTooSmall));
                if layout.align() > 1 {
                    // SAFETY: as above, one byte in.
                    let misaligned =
                        A::in_metadata(config, unsafe { lent(base.add(1), layout.size()) });
                    assert_eq!(misaligned.err(), Some(Error::MetadataMisaligned));
                }
            });
            assert!(
                untouched(meta),
                "a refused construction wrote to the memory"
            );
            let exact = leaked(layout.size(), layout.align());
            without_heap(&format!("{config:?}: exact size"), || {
                let exact = MetadataMemory::from_static(exact);
                let a = A::in_metadata(config, exact).unwrap().shared();
                assert_eq!(a.free_units(), config.units);
            });
        }
        for (bad, rule) in [
            (Config::new(0, 0), ConfigRule::NoUnits),
            (Config::new(16, 5), ConfigRule::OrderAboveUnits),
            (Config::new(16, 2).with_cores(0), ConfigRule::NoCores),
            (
                Config::new(16, 2).with_cores(MAX_CORES + 1),
                ConfigRule::TooManyCores,
            ),
            (Config::new(usize::MAX, 3), ConfigRule::MetadataOverflow),
        ] {
            let refused = match A::metadata_layout(bad) {
                // Two bits per unit: LLFree's metadata fits the address space for every unit
                // count (about 2^62 bytes for `usize::MAX` units). Its size must not have
                // wrapped, and 4 KiB of memory is then too small for it.
                Ok(layout) if rule == ConfigRule::MetadataOverflow && A::NAME == "llfree" => {
                    assert!(
                        layout.size() >= bad.units / 4,
                        "{bad:?}: {layout:?} wrapped"
                    );
                    Some(Error::MetadataTooSmall)
                }
                layout => {
                    let refused = Some(Error::InvalidConfig(rule));
                    assert_eq!(layout.err(), refused, "{bad:?}");
                    refused
                }
            };
            let meta = leaked(1 << 12, 1 << 8);
            pattern(meta);
            let base = NonNull::new(meta.as_mut_ptr().cast::<u8>()).unwrap();
            // SAFETY: leaked, ours alone, 4096 bytes.
            let r = A::in_metadata(bad, unsafe { lent(base, 1 << 12) });
            assert_eq!(r.err(), refused, "{bad:?}");
            assert!(untouched(meta));
        }
    }
}

/// Magazines in caller memory in front of each allocator in caller memory: no heap use from
/// construction to drop, `metadata_layout` exact (one byte less or off the alignment refused
/// without a write), and bad core counts, a used allocator behind, one larger than the
/// layout's configuration and one other than the magazines' refused without a write.
struct Magazines;

impl Visit for Magazines {
    fn visit<A: CallerMetadata>(&mut self) {
        println!("{} behind magazines", A::NAME);
        for config in CONFIGS {
            let layout = Magazine::<A::Shared>::metadata_layout(config).unwrap();
            let (size, align) = (layout.size(), layout.align());
            let (first, second) = (build::<A>(config), build::<A>(config));
            let meta = leaked(size, align);
            let raw = NonNull::new(leaked(size, align).as_mut_ptr().cast::<u8>()).unwrap();
            without_heap(&format!("{config:?}: in_metadata"), || {
                let meta = MetadataMemory::from_static(meta);
                let a = Magazine::in_metadata(config, first, meta).unwrap();
                churn(&a, config.cores);
            });
            without_heap(&format!("{config:?}: in_metadata, raw memory"), || {
                // SAFETY: leaked memory of the layout's size, used by nothing else.
                let a = Magazine::in_metadata(config, second, unsafe { lent(raw, size) });
                churn(&a.unwrap(), config.cores);
            });

            let used = build::<A>(config);
            used.alloc(0, 0).unwrap();
            adopts_a_used_allocator::<A>(config);
            // Past the padding after the state table.
            let larger = Config::new(config.units + 256, config.max_order).with_cores(config.cores);
            let refusals = [
                (
                    build::<A>(config),
                    config,
                    0,
                    size - 1,
                    Error::MetadataTooSmall,
                ),
                (
                    build::<A>(config),
                    config,
                    1,
                    size,
                    Error::MetadataMisaligned,
                ),
                (
                    build::<A>(config),
                    config.with_cores(0),
                    0,
                    size,
                    ConfigRule::NoCores.into(),
                ),
                (
                    build::<A>(config),
                    config.with_cores(MAX_CORES + 1),
                    0,
                    size,
                    ConfigRule::TooManyCores.into(),
                ),
                (build::<A>(larger), larger, 0, size, Error::MetadataTooSmall),
                (
                    build::<A>(larger),
                    config,
                    0,
                    size,
                    ConfigRule::InnerUnits.into(),
                ),
            ];
            let memory = leaked(size + align, align);
            let base = NonNull::new(memory.as_mut_ptr().cast::<u8>()).unwrap();
            pattern(memory);
            let answers = without_heap(&format!("{config:?}: refusals"), || {
                refusals.map(|(inner, config, skip, len, error)| {
                    // SAFETY: `memory` is leaked, ours alone, with `size + align` bytes from
                    // `base`, and `skip + len` is at most that.
                    let r =
                        Magazine::in_metadata(config, inner, unsafe { lent(base.add(skip), len) });
                    (r.err(), error)
                })
            });
            // A used allocator that cannot name its blocks.
            let unnamed = without_heap(&format!("{config:?}: used, unnamed"), || {
                // SAFETY: as above, `size` bytes from `base`.
                let memory = unsafe { lent(base, size) };
                Magazine::in_metadata(config, Plain(Unnamed(used)), memory).err()
            });
            assert_eq!(unnamed, Some(ConfigRule::InnerInUse.into()));
            for (answer, error) in answers {
                assert_eq!(answer, Some(error));
            }
            assert!(
                untouched(memory),
                "a refused construction wrote to the memory"
            );
            let exact = leaked(size, align);
            let inner = build::<A>(config);
            without_heap(&format!("{config:?}: exact size"), || {
                let exact = MetadataMemory::from_static(exact);
                let a = Magazine::in_metadata(config, inner, exact).unwrap();
                assert_eq!(a.free_units(), config.units);
            });
            one_piece::<A>(config);
        }
    }
}

/// Magazines in front of an allocator with blocks out (claimed ranges with ragged ends, and a block of each order): each frees once through them, exactly, with no heap
/// use from construction on.
fn adopts_a_used_allocator<A: CallerMetadata>(config: Config) {
    let inner = build::<A>(config);
    let top = config.max_order;
    let ranges = [(3, 97), (1000, 1 << top)];
    // Claimed block by block: a boot reservation made before the magazines would stay the
    // backend's, refused by every free.
    for (start, len) in ranges {
        for (index, order) in range::aligned_blocks(start, len, top) {
            inner.alloc_at(index, order, 0).unwrap();
        }
    }
    let mut each_order = [(0, 0); 11];
    for order in 0..=top {
        each_order[order as usize] = (inner.alloc(order, 0).unwrap(), order);
    }
    let each_order = &each_order[..=top as usize];
    let out: usize = ranges.iter().map(|&(_, len)| len).sum::<usize>() + (2 << top) - 1;
    let layout = Magazine::<A::Shared>::metadata_layout(config).unwrap();
    let meta = leaked(layout.size(), layout.align());
    without_heap(&format!("{config:?}: a used allocator adopted"), || {
        let meta = MetadataMemory::from_static(meta);
        let a = Magazine::in_metadata(config, inner, meta).unwrap();
        assert_eq!(a.free_units(), config.units - out);
        let reserved = ranges
            .iter()
            .flat_map(|&(start, len)| range::aligned_blocks(start, len, top));
        for (index, order) in reserved.chain(each_order.iter().copied()) {
            if order > 0 {
                assert_eq!(a.free(index, order - 1, 1), Err(Error::OrderMismatch));
                assert_eq!(a.free(index + 1, 0, 1), Err(Error::NotAllocated));
            }
            a.free(index, order, 1).unwrap();
            assert_eq!(a.free(index, order, 0), Err(Error::NotAllocated));
        }
        churn(&a, config.cores);
    });
}

/// An allocator that cannot name its blocks: `block_of` is left unsupported.
struct Unnamed<A>(A);

impl<A: BlockAlloc> BlockAlloc for Unnamed<A> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.0.alloc(order, core)
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
}

/// The `len` bytes at `base`, lent.
///
/// # Safety
/// As for `MetadataMemory::from_raw`.
unsafe fn lent(base: NonNull<u8>, len: usize) -> MetadataMemory {
    // SAFETY: passed on to our caller.
    unsafe { MetadataMemory::from_raw(base, len) }
}

/// `A` and magazines in front of it in one piece of memory, cut in two
/// (`MetadataMemory::take`) at `A`'s `metadata_bytes`: either part below its layout's size
/// refused without a write; the sum of both `metadata_bytes` churned without heap use, at
/// any alignment.
fn one_piece<A: CallerMetadata>(config: Config) {
    let inner = A::metadata_bytes(config);
    let whole = inner + Magazine::<A::Shared>::metadata_bytes(config);
    let memory = leaked(whole + 64, 64);
    let base = NonNull::new(memory.as_mut_ptr().cast::<u8>()).unwrap();
    pattern(memory);
    let build = |skip, len| {
        // SAFETY: `memory` is leaked, ours alone, with `whole + 64` bytes from `base`, and
        // `skip + len` is at most that.
        let (backend, magazines) = unsafe { lent(base.add(skip), len) }.take(inner);
        let backend = A::in_metadata(config, backend)?.shared();
        Magazine::in_metadata(config, backend, magazines)
    };
    let backend_size = A::metadata_layout(config).unwrap().size();
    let magazines_size = Magazine::<A::Shared>::metadata_layout(config)
        .unwrap()
        .size();
    // The backend's refusal writes nothing; the magazines' comes after the backend was
    // built in its part (and is dropped with the error), and writes nothing in theirs.
    let refused = without_heap(&format!("{config:?}: one piece, refusals"), || {
        build(0, backend_size - 1).err()
    });
    assert_eq!(refused, Some(Error::MetadataTooSmall));
    assert!(
        untouched(memory),
        "a refused construction wrote to the memory"
    );
    let refused = without_heap(&format!("{config:?}: one piece, magazines refused"), || {
        build(1, inner + magazines_size - 1).err()
    });
    assert_eq!(refused, Some(Error::MetadataTooSmall));
    assert!(
        untouched(&memory[1 + inner..]),
        "refused magazines wrote to their part of the memory"
    );
    for skip in [0, 1, 7, 63] {
        without_heap(&format!("{config:?}: one piece at +{skip}"), || {
            churn(&build(skip, whole).unwrap(), config.cores);
        });
    }
}

/// Prints the metadata each allocator needs per GiB of 4 KiB units (orders up to 10), for the
/// crate documentation.
struct Sizes;

impl Visit for Sizes {
    fn visit<A: CallerMetadata>(&mut self) {
        let per_gib = |cores| {
            let units = (1 << 30) / 4096;
            let one = A::metadata_layout(Config::new(units, 10).with_cores(cores)).unwrap();
            let four = A::metadata_layout(Config::new(4 * units, 10).with_cores(cores)).unwrap();
            (one.size(), four.size() / 4, one.align())
        };
        let magazines = |cores| {
            let units = (1 << 30) / 4096;
            let config = Config::new(units, 10).with_cores(cores);
            Magazine::<A::Shared>::metadata_layout(config)
                .unwrap()
                .size()
        };
        println!(
            "{:10} 1 core: {:?}, 16 cores: {:?}; magazines in front: {}, {} bytes",
            A::NAME,
            per_gib(1),
            per_gib(16),
            magazines(1),
            magazines(16)
        );
    }
}

fn main() {
    println!("no heap use:");
    each(&mut NoAllocation);
    println!("layouts:");
    each(&mut LayoutIsExact);
    println!("magazines:");
    each(&mut Magazines);
    println!("metadata per GiB of 4 KiB units (1 GiB, per GiB of 4 GiB, align):");
    each(&mut Sizes);
    println!("caller_metadata: ok");
}
