//! buddyfree where a kernel uses it: no `std`, no heap until it builds one, no C start-up.
//!
//! A static array stands in for physical memory and another for the allocators' metadata.
//! From an e820-style memory map with holes and reserved ranges, the program builds `nbbs`,
//! `nbbs4`, `llfree`, `knuth`, and `llfree` and `nbbs4` behind per-core magazines in turn
//! over caller metadata, reserves every frame, frees
//! the usable ranges (ragged ends included), runs mixed-order allocation and free cycles and
//! allocations at given frames, and checks that no block ever touches a hole or a reserved
//! range and that every frame comes back. Then it installs its `#[global_allocator]`, a
//! `StaticHeap` over LLFree behind magazines with a CPU-number source, and uses `alloc`'s
//! `Vec` and `Box` through it. It prints `N passed, 0 failed` and exits 0, or names each
//! failed check and exits 1.
//!
//! `cargo run --release -p freestanding` (Linux, x86_64).

// `cargo clippy --all-targets` also checks this file as a test harness, with std: then the
// entry, the panic handler and the personality are left out.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(not(test), no_main)]
#![cfg_attr(test, allow(dead_code))]

extern crate alloc;

mod report;
mod sys;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use buddyfree::buddy::Knuth;
use buddyfree::heap::{Heap, Region, StaticHeap};
use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Backend, Magazine, Settings};
use buddyfree::nbbs::{Nbbs, Nbbs4};
use buddyfree::{range, BlockAlloc, Config, Error, Locked, MetadataMemory};
use report::Report;

/// 4 KiB frames of "physical memory".
const FRAMES: usize = 2048;
const FRAME: usize = 4096;

/// What the firmware says about a range of frames.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Usable,
    Reserved,
}

/// The memory map, in frames: the real-mode page, a BIOS hole, the kernel image, ACPI
/// tables, and MMIO at the top; the usable ranges start and end off any block boundary.
const MAP: [(usize, usize, Kind); 9] = [
    (0, 1, Kind::Reserved),
    (1, 158, Kind::Usable),
    (159, 97, Kind::Reserved),
    (256, 44, Kind::Reserved),
    (300, 1200, Kind::Usable),
    (1500, 3, Kind::Reserved),
    (1503, 401, Kind::Usable),
    (1904, 17, Kind::Reserved),
    (1921, 127, Kind::Usable),
];

/// Memory shared with nothing but this single-threaded program.
#[repr(C, align(4096))]
struct Static<const N: usize>(UnsafeCell<[u8; N]>);

// SAFETY: the program has one thread.
unsafe impl<const N: usize> Sync for Static<N> {}

static PHYSICAL: Static<{ FRAMES * FRAME }> = Static(UnsafeCell::new([0; FRAMES * FRAME]));
static METADATA: Static<{ 256 << 10 }> = Static(UnsafeCell::new([0; 256 << 10]));

/// The kernel heap's memory (256 units of 4 KiB) and its allocator's metadata.
static HEAP_MEMORY: Static<{ 256 * FRAME }> = Static(UnsafeCell::new([0; 256 * FRAME]));
static HEAP_METADATA: Static<{ 64 << 10 }> = Static(UnsafeCell::new([0; 64 << 10]));

/// The program's global allocator: `alloc`'s collections work once `global_heap` has
/// installed it (the test harness of `clippy --all-targets` keeps std's).
#[cfg_attr(not(test), global_allocator)]
static HEAP: StaticHeap<Magazine<LLFree>> = StaticHeap::new();

/// The CPU this program pretends to run on, and how often the heap asked for it.
static CPU: AtomicUsize = AtomicUsize::new(0);
static CPU_ASKED: AtomicUsize = AtomicUsize::new(0);

/// The heap's source of the calling CPU's number (a kernel reads its per-CPU area).
fn this_cpu() -> usize {
    CPU_ASKED.fetch_add(1, Ordering::Relaxed);
    CPU.load(Ordering::Relaxed)
}

fn usable(frame: usize) -> bool {
    MAP.iter()
        .any(|&(start, len, kind)| kind == Kind::Usable && (start..start + len).contains(&frame))
}

fn usable_frames() -> usize {
    MAP.iter()
        .filter(|r| r.2 == Kind::Usable)
        .map(|r| r.1)
        .sum()
}

/// The stamp written into a block's first frame: its index and order.
fn stamp(index: usize, order: u32) -> u64 {
    (index as u64) << 8 | order as u64 | 0xB0D5 << 48
}

fn frame_word(frame: usize) -> *mut u64 {
    // SAFETY: `frame < FRAMES`, so the offset stays inside the array.
    unsafe { PHYSICAL.0.get().cast::<u8>().add(frame * FRAME).cast() }
}

/// A small xorshift generator (there is no `rand` here).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The boot sequence and the checks, on one allocator.
fn exercise(name: &'static str, alloc: &dyn BlockAlloc, report: &mut Report) {
    report.section(name);
    report.check(
        "every frame reserved",
        range::reserve_all(alloc).is_ok() && alloc.free_units() == 0,
    );
    for &(start, len, kind) in &MAP {
        if kind == Kind::Usable {
            report.check(
                "usable range freed",
                alloc.free_range(start, len, 0).is_ok(),
            );
        }
    }
    report.check(
        "free frames = usable frames",
        alloc.free_units() == usable_frames(),
    );
    let reserved_still_held = (0..FRAMES)
        .filter(|&f| !usable(f))
        .all(|f| matches!(alloc.block_of(f), Ok(Some(_))));
    report.check("reserved frames still allocated", reserved_still_held);

    // Mixed-order cycles, every block checked against the map and stamped in memory.
    let max_order = alloc.max_order().min(6);
    let mut live = [(0usize, 0u32); 64];
    let mut count = 0;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut outside = 0;
    let mut corrupted = 0;
    let mut bad_frees = 0;
    for _ in 0..20_000 {
        if count < live.len() && rng.below(2) == 0 {
            let order = rng.below(max_order as usize + 1) as u32;
            if let Ok(index) = alloc.alloc(order, 0) {
                if !(index..index + (1 << order)).all(usable) {
                    outside += 1;
                }
                // SAFETY: a frame of the array; this program alone writes it.
                unsafe { frame_word(index).write(stamp(index, order)) };
                live[count] = (index, order);
                count += 1;
            }
        } else if count > 0 {
            let (index, order) = live[rng.below(count)];
            // SAFETY: as above.
            if unsafe { frame_word(index).read() } != stamp(index, order) {
                corrupted += 1;
            }
            let pos = live[..count]
                .iter()
                .position(|&b| b == (index, order))
                .unwrap_or(0);
            live[pos] = live[count - 1];
            count -= 1;
            if alloc.free(index, order, 0).is_err()
                || alloc.free(index, order, 0) != Err(Error::NotAllocated)
            {
                bad_frees += 1;
            }
        }
    }
    report.check("no block touched a hole or reserved range", outside == 0);
    report.check("no block overlapped another", corrupted == 0);
    report.check("frees exact, double frees refused", bad_frees == 0);
    for &(index, order) in &live[..count] {
        report.check("live block freed", alloc.free(index, order, 0).is_ok());
    }

    // An interrupt on a core inside an allocator call: a free that never waits, even for
    // the core the interrupted code holds (this kernel's magazines are built with
    // interrupt-safe frees, so the block goes straight back rather than `WouldBlock`).
    let page = alloc.alloc(0, 0);
    let mut answer = Err(Error::Unsupported);
    if let Ok(page) = page {
        alloc.with_core(0, &mut |_| answer = alloc.try_free(page, 0, 0));
    }
    report.check("try_free on a held core", answer == Ok(()));
    if let Ok(page) = page {
        report.check(
            "try_free exact",
            alloc.try_free(page, 0, 0) == Err(Error::NotAllocated),
        );
    }

    // Allocation at given frames.
    report.check("alloc_at a free block", alloc.alloc_at(320, 4, 0).is_ok());
    report.check(
        "alloc_at a taken block refused",
        alloc.alloc_at(320, 0, 0) == Err(Error::Occupied),
    );
    report.check(
        "alloc_at in a reserved range refused",
        alloc.alloc_at(160, 0, 0) == Err(Error::Occupied),
    );
    report.check("order known at a block start", alloc.order_at(320) == Ok(4));
    report.check("alloc_at block freed", alloc.free(320, 4, 0).is_ok());
    report.check(
        "every frame came back",
        alloc.free_units() == usable_frames(),
    );
}

/// Builds an allocator over the metadata array, runs `exercise` on it and drops it; `bytes`
/// is what its constructor takes (its `metadata_bytes`).
fn with_metadata<A: BlockAlloc>(
    name: &'static str,
    config: Config,
    report: &mut Report,
    bytes: usize,
    build: impl FnOnce(Config, MetadataMemory) -> Result<A, Error>,
) {
    report.check("metadata fits the static array", bytes <= 256 << 10);
    let meta = NonNull::new(METADATA.0.get().cast::<u8>()).expect("a static");
    // SAFETY: the array is valid for its length and used by one allocator at a time: the
    // previous one was dropped at the end of its call.
    let meta = unsafe { MetadataMemory::from_raw(meta, 256 << 10) };
    match build(config, meta) {
        Ok(alloc) => exercise(name, &alloc, report),
        Err(_) => report.check("built over caller metadata", false),
    }
}

type KnuthLocked = Locked<Knuth, spin::Mutex<()>>;

/// Knuth's buddy behind the kernel's lock of choice (here a spinlock).
fn knuth(config: Config, meta: MetadataMemory) -> Result<KnuthLocked, Error> {
    Knuth::in_metadata(config, meta).map(Locked::new)
}

/// An allocator built by `backend` in the first `bytes` of `meta` (its `metadata_bytes`),
/// and magazines with interrupt-safe frees in front of it in the rest.
fn magazines<A: Backend>(
    config: Config,
    meta: MetadataMemory,
    bytes: usize,
    backend: fn(Config, MetadataMemory) -> Result<A, Error>,
) -> Result<Magazine<A>, Error> {
    let (inner, own) = meta.take(bytes);
    let magazines = Magazine::in_metadata(config, backend(config, inner)?, own)?;
    Ok(magazines.with_settings(Settings::new().with_interrupt_safe_frees()))
}

/// Builds the kernel heap over its statics, installs it as the global allocator and uses
/// `Vec` and `Box` on CPU 1.
fn global_heap(report: &mut Report) {
    report.section("global heap");
    let config = Config::new(256, 8).with_cores(2);
    let backend = LLFree::metadata_bytes(config);
    let bytes = backend + Magazine::<LLFree>::metadata_bytes(config);
    report.check("heap metadata fits the static array", bytes <= 64 << 10);
    let meta = NonNull::new(HEAP_METADATA.0.get().cast::<u8>()).expect("a static");
    // SAFETY: the array is valid for its length, and this is its only use.
    let meta = unsafe { MetadataMemory::from_raw(meta, 64 << 10) };
    let Ok(frames) = magazines(config, meta, backend, LLFree::in_metadata) else {
        return report.check("heap allocator built", false);
    };
    // SAFETY: this is the one place that ever borrows the heap's memory.
    let memory: &'static mut [u8] = unsafe { &mut *HEAP_MEMORY.0.get() };
    let Ok(heap) = Heap::new(Region::from_static(memory), FRAME, frames) else {
        return report.check("heap built", false);
    };
    let Ok(heap) = HEAP.init(heap.with_core_hint(this_cpu)) else {
        return report.check("heap installed", false);
    };
    CPU.store(1, Ordering::Relaxed);
    let squares: Vec<u64> = (0..10_000u64).map(|i| i * i).collect();
    let page = Box::new([7u8; FRAME]);
    report.check(
        "Vec and Box served by the heap",
        heap.contains(squares.as_ptr().cast()) && heap.contains(page.as_ptr()),
    );
    report.check(
        "their contents kept",
        squares[9_999] == 9_999 * 9_999 && page.iter().all(|&b| b == 7),
    );
    drop((squares, page));
    report.check(
        "the heap asked for the CPU",
        CPU_ASKED.load(Ordering::Relaxed) >= 4,
    );
    report.check(
        "every unit back, no bad free",
        heap.allocator().free_units() == 256 && heap.bad_frees() == 0,
    );
}

/// Called by `_start` (see `sys.rs`).
extern "C" fn main() -> ! {
    let mut report = Report::default();
    let config = Config::new(FRAMES, 10);
    let r = &mut report;
    with_metadata(
        "nbbs",
        config,
        r,
        Nbbs::metadata_bytes(config),
        Nbbs::in_metadata,
    );
    with_metadata(
        "nbbs4",
        config,
        r,
        Nbbs4::metadata_bytes(config),
        Nbbs4::in_metadata,
    );
    with_metadata(
        "llfree",
        config,
        r,
        LLFree::metadata_bytes(config),
        LLFree::in_metadata,
    );
    with_metadata("knuth", config, r, Knuth::metadata_bytes(config), knuth);
    let (llfree, nbbs4) = (
        LLFree::metadata_bytes(config),
        Nbbs4::metadata_bytes(config),
    );
    let llfree_magazine = |c, m| magazines(c, m, llfree, LLFree::in_metadata);
    let bytes = llfree + Magazine::<LLFree>::metadata_bytes(config);
    with_metadata("llfree-magazine", config, r, bytes, llfree_magazine);
    let nbbs4_magazine = |c, m| magazines(c, m, nbbs4, Nbbs4::in_metadata);
    let bytes = nbbs4 + Magazine::<Nbbs4>::metadata_bytes(config);
    with_metadata("nbbs4-magazine", config, r, bytes, nbbs4_magazine);
    global_heap(&mut report);
    sys::exit(report.finish())
}

/// The precompiled `core` names an unwinding personality; with `panic = "abort"` nothing
/// ever unwinds, so it is never called.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn rust_eh_personality() {}

#[cfg(not(test))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    sys::write(2, b"panic");
    if let Some(location) = info.location() {
        sys::write(2, b" at ");
        sys::write(2, location.file().as_bytes());
    }
    sys::write(2, b"\n");
    sys::exit(101)
}
