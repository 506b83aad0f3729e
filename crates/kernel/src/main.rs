//! A small riscv64 kernel that runs on buddyfree, booted by OpenSBI on QEMU's `virt` machine
//! (`scripts/kernel.sh`).
//!
//! With no heap until buddyfree gives it one, the boot hart
//! 1. reads the memory map from the device tree the firmware hands over ([`memmap`]): every
//!    `/memory` range minus `/reserved-memory` (OpenSBI's own region), the header's
//!    reservations, the kernel image with its boot stacks, and the device tree blob;
//! 2. carves from usable memory the metadata of the frame allocators (as much as the
//!    hungriest asks for) and a kernel heap with its metadata, and installs that heap
//!    (`StaticHeap` over LLFree behind per-hart magazines, each hart's id as its core) as the
//!    `#[global_allocator]`;
//! 3. starts every other hart through the firmware's HSM extension;
//! 4. for each allocator the registry can build over caller metadata, in turn: builds it over
//!    the carved metadata, `reserve_all`, `free_range`s the usable ranges, and runs a round on
//!    every hart at once ([`stress`]): mixed orders, owner stamps in every frame, frees of
//!    blocks other harts allocated, Sv39 page tables from its frames ([`paging`]), and timer
//!    interrupts whose handler allocates and frees with `try_alloc`/`try_free` ([`trap`]);
//!    then checks that every frame came back, none outside the map was handed out, and bad
//!    frees get the documented errors.
//!
//! It prints what it checked, `harts: H, interrupt allocations: I, frames stamped: F` and
//! `N passed, M failed`, and powers the machine off through the firmware, which makes QEMU exit
//! non-zero when M is not 0. A hang (a deadlocked handler, say) is caught by the script's
//! time limit.

#![no_std]
#![no_main]

extern crate alloc;

mod console;
mod harts;
mod memmap;
mod paging;
mod report;
mod sbi;
mod stress;
mod trap;

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::arch::global_asm;
use core::ops::Range;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};

use buddyfree::heap::{Heap, Region, StaticHeap};
use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Magazine, Settings};
use buddyfree::registry::{self, CallerMetadata, Entry};
use buddyfree::{range, BlockAlloc, Config, Error};
use fdt::Fdt;

use harts::{this_hart, MAX_HARTS, ROUNDS, STACK};
use memmap::{MemoryMap, FRAME};
use report::Report;
use stress::Round;

// The entry from the firmware (a0 = hart id, a1 = device tree), and the one started harts
// enter (a0 = hart id): a stack per hart id, the id in `tp`, then Rust. The boot hart clears
// `.bss` first, before any other hart runs.
global_asm!(
    r#"
    .section .text.boot
    .globl _start
_start:
    la t0, __bss_start
    la t1, __bss_end
1:  bgeu t0, t1, 2f
    sd zero, 0(t0)
    addi t0, t0, 8
    j 1b
2:  li a2, 1
    j 3f
    .globl _secondary_start
_secondary_start:
    li a2, 0
3:  li t0, {max_harts}
    bgeu a0, t0, 4f
    mv tp, a0
    la sp, BOOT_STACKS
    addi t0, a0, 1
    slli t0, t0, {stack_shift}
    add sp, sp, t0
    call kernel_entry
4:  wfi
    j 4b
"#,
    max_harts = const MAX_HARTS,
    stack_shift = const STACK.trailing_zeros(),
);

extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

/// The kernel heap's bytes, its unit and its largest order (blocks up to 256 KiB).
const HEAP_BYTES: usize = 4 << 20;
const HEAP_UNIT: usize = 256;
const HEAP_ORDER: u32 = 10;

/// The global allocator: built over carved memory in `kmain`; null before.
#[global_allocator]
static HEAP: StaticHeap<Magazine<LLFree>> = StaticHeap::new();

/// The round the harts run now, null between rounds; `DONE` after the last.
static CURRENT: AtomicPtr<Round<'static>> = AtomicPtr::new(core::ptr::null_mut());
const DONE: *mut Round<'static> = core::ptr::dangling_mut();
static TIMEBASE_HZ: AtomicU64 = AtomicU64::new(0);

#[no_mangle]
extern "C" fn kernel_entry(hart: usize, dtb: usize, boot: usize) -> ! {
    if boot == 0 {
        secondary_main(hart);
    }
    let mut report = Report::default();
    kmain(hart, dtb, &mut report);
    println!("{} passed, {} failed", report.passed, report.failed);
    sbi::shutdown(report.failed > 0)
}

/// A started hart: a round whenever the boot hart publishes one, until it says done.
fn secondary_main(hart: usize) -> ! {
    trap::install(TIMEBASE_HZ.load(Acquire));
    harts::online();
    loop {
        ROUNDS.wait();
        let round = CURRENT.load(Acquire);
        if round == DONE {
            park();
        }
        // SAFETY: the boot hart keeps the round alive until every hart has passed the second
        // barrier below.
        stress::run(unsafe { &*round }, hart, seed(round));
        ROUNDS.wait();
    }
}

fn park() -> ! {
    loop {
        // SAFETY: interrupts are off on this hart, so this waits forever, doing nothing.
        unsafe { core::arch::asm!("wfi") };
    }
}

fn seed(round: *const Round) -> u64 {
    round as u64 ^ 0x9E37_79B9_7F4A_7C15
}

/// What the boot hart learned from the firmware.
struct Machine {
    map: MemoryMap,
    /// The physical address of frame 0: the lowest memory address.
    base: usize,
    /// Frames from `base` to the end of memory: the allocators' index space.
    frames: usize,
    /// One past the highest hart id: the allocators' cores.
    cores: usize,
    hart_ids: Vec<usize>,
    timebase_hz: u64,
    /// The frame allocators' metadata, carved from usable memory.
    metadata: Range<usize>,
}

impl Machine {
    fn config(&self, entry: &Entry) -> Config {
        allocator_config(entry, self.frames, self.cores)
    }
}

/// The configuration of `entry` over `frames` frames and `cores` harts.
fn allocator_config(entry: &Entry, frames: usize, cores: usize) -> Config {
    Config::new(frames, entry.max_order.min(10)).with_cores(cores)
}

fn kmain(boot: usize, dtb: usize, report: &mut Report) {
    println!("buddyfree kernel on hart {boot}; device tree at {dtb:#x}");
    report.section("boot");
    let Some(machine) = boot_memory(dtb, report) else {
        return;
    };
    trap::install(machine.timebase_hz);
    let harts = harts::start_others(machine.hart_ids.iter().copied(), boot, machine.timebase_hz);
    println!(
        "harts: {:?} in the device tree, {harts} running; timebase {} Hz",
        machine.hart_ids, machine.timebase_hz
    );
    report.check(
        "every hart in the device tree runs",
        harts == machine.hart_ids.len(),
    );

    let mut summaries = BTreeMap::new();
    for (entry, caller_metadata) in kernel_allocators() {
        let summary = run_allocator(entry, caller_metadata, &machine, report);
        summaries.insert(entry.name, summary);
    }
    CURRENT.store(DONE, Release);
    ROUNDS.wait();

    report.section("kernel heap");
    check_heap(report, &summaries);
    let total = summaries
        .values()
        .fold(Summary::default(), |a, s| a.plus(s));
    report.section("interrupts");
    report.check("interrupt handlers allocated", total.irq_allocs > 0);
    report.check(
        "interrupts arrived inside alloc or free",
        total.inside_call > 0,
    );
    println!(
        "harts: {harts}, interrupt allocations: {}, frames stamped: {}",
        total.irq_allocs, total.stamped
    );
}

/// Reads the memory map from the device tree at `dtb`, carves the allocators' metadata and
/// the kernel heap from usable memory and installs the heap: `None` (the failure reported)
/// where any step fails.
fn boot_memory(dtb: usize, report: &mut Report) -> Option<Machine> {
    // SAFETY: the firmware passes the device tree's address in a1; it stays where it is.
    let fdt = match unsafe { Fdt::from_ptr(dtb as *const u8) } {
        Ok(fdt) => fdt,
        Err(e) => {
            println!("device tree: {e:?}");
            report.check("device tree read", false);
            return None;
        }
    };
    let finisher = fdt
        .find_compatible(&["sifive,test0"])
        .and_then(|n| n.reg()?.next());
    sbi::set_finisher(finisher.map_or(0, |r| r.starting_address as usize));
    // SAFETY: linker symbols; only their addresses are taken.
    let kernel =
        unsafe { &__kernel_start as *const u8 as usize..&__kernel_end as *const u8 as usize };
    let mut map = match memmap::read(&fdt, dtb..dtb + fdt.total_size(), kernel.clone()) {
        Ok(map) => map,
        Err(e) => {
            println!("memory map: {e:?}");
            report.check("memory map read", false);
            return None;
        }
    };
    println!("memory:   {}", map.memory);
    println!("reserved: {} (firmware), {:#x}..{:#x} (kernel and boot stacks), {:#x}..{:#x} (device tree)",
        map.reserved, kernel.start, kernel.end, dtb, dtb + fdt.total_size());
    let timebase_hz = fdt.cpus().next().map_or(0, |c| c.timebase_frequency()) as u64;
    TIMEBASE_HZ.store(timebase_hz, Release);
    let base = map.memory.iter().next().map_or(0, |r| r.start);
    let end = map.memory.iter().last().map_or(0, |r| r.end);
    let frames = (end - base) / FRAME;
    let cores = fdt
        .cpus()
        .map(|c| c.ids().first() + 1)
        .max()
        .unwrap_or(1)
        .min(MAX_HARTS);
    let need = kernel_allocators()
        .filter_map(|(e, m)| (m.layout)(allocator_config(e, frames, cores)).ok())
        .fold(Layout::new::<u8>(), |a, b| {
            Layout::from_size_align(a.size().max(b.size()), a.align().max(b.align())).unwrap()
        });
    let carved = carve(&mut map, need, cores);
    report.check(
        "memory map read, metadata and heap carved from usable memory",
        carved.is_some(),
    );
    let (metadata, heap_metadata, heap_memory) = carved?;
    println!("carved:   {:#x}..{:#x} (allocator metadata), {:#x}..{:#x} (heap metadata), {:#x}..{:#x} (heap)",
        metadata.start, metadata.end, heap_metadata.start, heap_metadata.end, heap_memory.start, heap_memory.end);
    println!(
        "usable:   {} ({} frames)",
        map.usable,
        map.usable.bytes() / FRAME
    );
    report.check("usable memory left", map.usable.bytes() > 0);
    if let Err(e) = install_heap(cores, heap_metadata, heap_memory) {
        println!("kernel heap: {e:?}");
        report.check("kernel heap installed", false);
        return None;
    }
    // From here on there is a heap.
    Some(Machine {
        map,
        base,
        frames,
        cores,
        hart_ids: fdt.cpus().map(|c| c.ids().first()).collect(),
        timebase_hz,
        metadata,
    })
}

/// The allocators a kernel can build over memory it carved itself: the registry's entries
/// with caller metadata.
fn kernel_allocators() -> impl Iterator<Item = (&'static Entry, CallerMetadata)> {
    registry::entries()
        .iter()
        .filter_map(|e| Some((e, e.metadata?)))
}

/// Takes from usable memory the frame allocators' metadata, the heap's metadata and the heap.
fn carve(
    map: &mut MemoryMap,
    need: Layout,
    cores: usize,
) -> Option<(Range<usize>, Range<usize>, Range<usize>)> {
    let whole = |len: usize| len.next_multiple_of(FRAME);
    let metadata = map
        .usable
        .carve(whole(need.size()), need.align().max(FRAME))?;
    let heap_layout = heap_metadata_layout(cores).ok()?;
    let heap_metadata = map
        .usable
        .carve(whole(heap_layout.size()), heap_layout.align().max(FRAME))?;
    let heap = map.usable.carve(HEAP_BYTES, HEAP_UNIT << HEAP_ORDER)?;
    Some((metadata, heap_metadata, heap))
}

fn heap_config(cores: usize) -> Config {
    Config::new(HEAP_BYTES / HEAP_UNIT, HEAP_ORDER).with_cores(cores)
}

fn heap_metadata_layout(cores: usize) -> Result<Layout, Error> {
    let config = heap_config(cores);
    Ok(Magazine::<LLFree>::metadata_layout_with(config, LLFree::metadata_layout(config)?)?.0)
}

/// Builds the kernel heap over carved memory and makes it the global allocator.
fn install_heap(cores: usize, metadata: Range<usize>, memory: Range<usize>) -> Result<(), Error> {
    let config = heap_config(cores);
    let inner = LLFree::metadata_layout(config)?;
    let meta = NonNull::new(metadata.start as *mut u8).ok_or(Error::MetadataTooSmall)?;
    // SAFETY: carved from usable memory for this heap alone, as large as asked for.
    let frames = unsafe {
        Magazine::from_raw_metadata_with(
            config,
            inner,
            LLFree::from_raw_metadata,
            meta,
            metadata.len(),
        )
    }?;
    let start = NonNull::new(memory.start as *mut u8).ok_or(Error::OutOfRange)?;
    // SAFETY: carved from usable memory for this heap alone, and never given back.
    let region = unsafe { Region::from_raw(start, memory.len()) };
    let heap = Heap::new(region, HEAP_UNIT, frames)?;
    HEAP.init(heap.with_core_hint(this_hart))?;
    Ok(())
}

/// What one allocator's round showed.
#[derive(Default, Clone, Copy)]
struct Summary {
    stamped: usize,
    irq_allocs: usize,
    inside_call: usize,
}

impl Summary {
    fn plus(self, o: &Summary) -> Summary {
        Summary {
            stamped: self.stamped + o.stamped,
            irq_allocs: self.irq_allocs + o.irq_allocs,
            inside_call: self.inside_call + o.inside_call,
        }
    }
}

/// The interrupt counters of every hart, summed: (allocations, would-block answers,
/// ticks inside a call, wrong answers).
fn irq_totals() -> [usize; 4] {
    let sum =
        |f: fn(&trap::HartIrq) -> &AtomicUsize| trap::IRQ.iter().map(|i| f(i).load(Relaxed)).sum();
    [
        sum(|i| &i.allocs),
        sum(|i| &i.would_block),
        sum(|i| &i.inside_call),
        sum(|i| &i.wrong),
    ]
}

fn run_allocator(
    entry: &'static Entry,
    caller_metadata: CallerMetadata,
    machine: &Machine,
    report: &mut Report,
) -> Summary {
    let config = machine.config(entry);
    let metadata = &machine.metadata;
    report.section(entry.name);
    let meta = NonNull::new(metadata.start as *mut u8).expect("carved memory is not at 0");
    // Interrupt-safe frees: the timer handler's `try_free`s never wait for a held magazine.
    let settings = Settings::new().with_interrupt_safe_frees();
    // SAFETY: the carved metadata, used by one allocator at a time: the previous one was
    // dropped at the end of its round. Too small or misaligned memory is an error.
    let built = unsafe { (caller_metadata.build_with)(config, settings, meta, metadata.len()) };
    let alloc = match built {
        Ok(alloc) => alloc,
        Err(e) => {
            report.check(&alloc::format!("built over caller metadata: {e}"), false);
            return Summary::default();
        }
    };
    let usable_frames = machine.map.usable.bytes() / FRAME;
    report.check(
        "every frame reserved",
        range::reserve_all(&*alloc).is_ok() && alloc.free_units() == 0,
    );
    let freed = machine.map.usable.iter().all(|r| {
        alloc
            .free_range((r.start - machine.base) / FRAME, r.len() / FRAME, 0)
            .is_ok()
    });
    report.check("usable ranges freed", freed);
    #[cfg(feature = "fault-reserved")]
    for r in machine.map.reserved.iter() {
        let _ = alloc.free_range((r.start - machine.base) / FRAME, r.len() / FRAME, 0);
    }
    report.check(
        "free frames = usable frames",
        alloc.free_units() == usable_frames,
    );

    let round = Box::new(Round::new(
        &*alloc,
        machine.base,
        &machine.map.usable,
        &machine.map.memory,
    ));
    let before = irq_totals();
    let boot = this_hart();
    CURRENT.store((&*round as *const Round).cast_mut().cast(), Release);
    ROUNDS.wait();
    stress::run(&round, boot, seed(&*round));
    ROUNDS.wait();
    CURRENT.store(core::ptr::null_mut(), Release);
    stress::empty_mailbox(&round, boot);
    let after = irq_totals();
    let [irq_allocs, would_block, inside_call, irq_wrong] =
        core::array::from_fn(|i| after[i] - before[i]);
    let stamped = round.stamped.load(Relaxed);
    println!(
        "{}: {} frames stamped, {} page-table round trips, interrupts: {} allocations, {} would-block, {} inside alloc/free",
        entry.name, stamped, round.page_tables.load(Relaxed), irq_allocs, would_block, inside_call
    );
    report.check(
        "no block outside the usable map",
        round.outside.load(Relaxed) == 0,
    );
    report.check(
        "no frame's stamp overwritten (no overlap)",
        round.overwritten.load(Relaxed) == 0,
    );
    report.check(
        "every answer as documented",
        round.wrong.load(Relaxed) == 0 && irq_wrong == 0,
    );
    report.check(
        "page tables built from its frames worked",
        round.page_tables.load(Relaxed) > 0 && round.mapping_wrong.load(Relaxed) == 0,
    );
    report.check("interrupt handlers allocated", irq_allocs > 0);
    report.check("every frame came back", alloc.free_units() == usable_frames);
    bad_frees(&*alloc, report);
    report.check(
        "every frame came back after bad frees",
        alloc.free_units() == usable_frames,
    );
    let reserved_held = machine.map.memory.iter().all(|r| {
        (r.start..r.end).step_by(FRAME).all(|a| {
            let frame = (a - machine.base) / FRAME;
            let usable = machine.map.usable.contains(a..a + FRAME);
            usable || matches!(alloc.block_of(frame), Ok(Some(_)) | Err(Error::Unsupported))
        })
    });
    report.check(
        "frames outside the usable map still allocated",
        reserved_held,
    );
    Summary {
        stamped,
        irq_allocs,
        inside_call,
    }
}

/// Bad frees answer the documented errors and change nothing.
fn bad_frees(alloc: &dyn BlockAlloc, report: &mut Report) {
    let free_before = alloc.free_units();
    let Ok(block) = alloc.alloc(1, 0) else {
        return report.check("an order-1 block for the bad frees", false);
    };
    let cases = [
        (
            "wrong order",
            alloc.free(block, 0, 0),
            Err(Error::OrderMismatch),
        ),
        (
            "misaligned",
            alloc.free(block + 1, 1, 0),
            Err(Error::Misaligned),
        ),
        (
            "out of range",
            alloc.free(alloc.total_units(), 0, 0),
            Err(Error::OutOfRange),
        ),
        (
            "order too large",
            alloc.free(block, alloc.max_order() + 1, 0),
            Err(Error::BadOrder),
        ),
        ("good free", alloc.free(block, 1, 0), Ok(())),
        (
            "double free",
            alloc.free(block, 1, 0),
            Err(Error::NotAllocated),
        ),
        (
            "double try_free",
            alloc.try_free(block, 1, 0),
            Err(Error::NotAllocated),
        ),
    ];
    for (what, got, want) in cases {
        if got != want {
            println!("  {what}: {got:?}, documented {want:?}");
        }
        report.check(what, got == want);
    }
    report.check(
        "bad frees changed nothing",
        alloc.free_units() == free_before,
    );
}

fn check_heap(report: &mut Report, summaries: &BTreeMap<&'static str, Summary>) {
    let Some(heap) = HEAP.heap() else {
        return report.check("installed", false);
    };
    let names: Vec<&str> = summaries.keys().copied().collect();
    let boxed = Box::new([0xA5u8; 3000]);
    report.check(
        "Vec, Box and BTreeMap live in the heap",
        heap.contains(names.as_ptr().cast()) && heap.contains(boxed.as_ptr()),
    );
    report.check(
        "their contents kept",
        names.len() == summaries.len() && boxed.iter().all(|&b| b == 0xA5),
    );
    drop((names, boxed));
    report.check("no bad free", heap.bad_frees() == 0);
    println!(
        "kernel heap: {} of {} units free",
        heap.allocator().free_units(),
        heap.allocator().total_units()
    );
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    console::print_unlocked(format_args!(
        "FAILED: panic on hart {}: {info}\n",
        this_hart()
    ));
    sbi::shutdown(true)
}
