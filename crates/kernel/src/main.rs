//! A small riscv64 kernel that runs on buddyfree, booted by OpenSBI on QEMU's `virt` machine
//! (`scripts/kernel.sh`).
//!
//! With no heap until buddyfree gives it one, the boot hart (whichever hart the firmware
//! chose, whatever its id; index 0 from then on)
//! 1. reads the memory map from the device tree the firmware hands over ([`memmap`]): every
//!    `/memory` range minus `/reserved-memory` (OpenSBI's own region), the header's
//!    reservations, what `/chosen` names (the initrd, held until it is released), the kernel
//!    image with its boot stack, and the device tree blob; every firmware value checked;
//! 2. carves from usable memory the metadata of the frame allocators (as much as the
//!    hungriest asks for), a kernel heap with its metadata and a stack for every other hart
//!    the device tree names, and installs that heap (`StaticHeap` over LLFree behind per-hart
//!    magazines, each hart's index as its core) as the `#[global_allocator]`;
//! 3. starts every other hart through the firmware's HSM extension ([`harts`]);
//! 4. for each allocator the registry can build over caller metadata, in turn: builds it over
//!    the carved metadata, `reserve_all`, `free_range`s the usable ranges, and runs a round on
//!    every hart at once ([`stress`]): mixed orders, owner stamps in every frame, frees of
//!    blocks other harts allocated, Sv39 page tables from its frames ([`paging`]), and timer
//!    interrupts at the period the command line asks for, whose handler allocates and frees
//!    with `try_alloc`/`try_free` ([`trap`]); then checks that every frame came back, none
//!    outside the map was handed out, bad frees get the documented errors, and the initrd,
//!    unchanged, can be released into it and only then allocated.
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
use core::fmt;
use core::ops::Range;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::*};

use buddyfree::heap::{Heap, Region, StaticHeap};
use buddyfree::llfree::LLFree;
use buddyfree::magazine::{Magazine, Settings};
use buddyfree::registry::{self, CallerMetadata, Entry};
use buddyfree::{range, BlockAlloc, Config, ConfigRule, Error, MetadataMemory};
use fdt::Fdt;

use harts::{this_hart, MAX_HARTS, ROUNDS, STACK};
use memmap::{MemoryMap, FRAME};
use report::Report;
use stress::Round;

// The entry from the firmware (a0 = hart id, a1 = device tree), on whichever hart the firmware
// chose, whatever its id: `.bss` cleared before any other hart runs, the boot stack, index 0
// in `tp`, then Rust. The entry started harts take (a0 = hart id, a1 = their `harts::Hart`):
// the stack and index the boot hart gave them, then Rust.
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
2:  la sp, BOOT_STACK
    li t0, {stack}
    add sp, sp, t0
    li tp, 0
    call kernel_entry
    .globl _secondary_start
_secondary_start:
    ld sp, 0(a1)
    ld tp, 8(a1)
    mv a0, a1
    call secondary_entry
"#,
    stack = const STACK,
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

#[no_mangle]
extern "C" fn kernel_entry(hart_id: usize, dtb: usize) -> ! {
    let mut report = Report::default();
    kmain(hart_id, dtb, &mut report);
    println!("{} passed, {} failed", report.passed, report.failed);
    sbi::shutdown(report.failed > 0)
}

/// A started hart: a round whenever the boot hart publishes one, until it says done.
#[no_mangle]
extern "C" fn secondary_entry(hart: &'static harts::Hart) -> ! {
    trap::install();
    harts::online(hart);
    loop {
        ROUNDS.wait();
        let round = CURRENT.load(Acquire);
        if round == DONE {
            park();
        }
        // SAFETY: the boot hart keeps the round alive until every hart has passed the second
        // barrier below.
        stress::run(unsafe { &*round }, hart.index, seed(round));
        ROUNDS.wait();
    }
}

pub fn park() -> ! {
    loop {
        // SAFETY: interrupts are off on this hart, so this waits forever, doing nothing.
        unsafe { core::arch::asm!("wfi") };
    }
}

fn seed(round: *const Round) -> u64 {
    round as u64 ^ 0x9E37_79B9_7F4A_7C15
}

/// What the command line (`/chosen/bootargs`) asks for.
struct Args {
    /// The timer's period.
    timer_ns: u64,
    /// The initrd holds [`initrd_word`]'s pattern: check it word by word.
    initrd_pattern: bool,
}

impl Args {
    fn parse(bootargs: &str) -> Result<Args, &str> {
        let mut args = Args {
            timer_ns: trap::DEFAULT_PERIOD_NS,
            initrd_pattern: false,
        };
        for arg in bootargs.split_whitespace() {
            match arg.split_once('=') {
                Some(("timer-ns", n)) => {
                    args.timer_ns = n.parse().ok().filter(|&n| n > 0).ok_or(arg)?;
                }
                None if arg == "initrd-pattern" => args.initrd_pattern = true,
                _ => return Err(arg),
            }
        }
        Ok(args)
    }
}

/// Word `i` of the pattern `scripts/kernel.sh` writes into the initrd (little endian).
fn initrd_word(i: usize) -> u64 {
    (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1417_2D00_0000_0000
}

/// What the boot hart learned from the firmware.
struct Machine {
    map: MemoryMap,
    /// The physical address of frame 0: the lowest memory address.
    base: usize,
    /// Frames from `base` to the end of memory: the allocators' index space.
    frames: usize,
    /// The ids of the harts the device tree names.
    hart_ids: Vec<usize>,
    timebase_hz: u64,
    args: Args,
    /// The frame allocators' metadata, carved from usable memory.
    metadata: Range<usize>,
    /// A hash of the initrd taken before anything was written, if there is one.
    initrd_hash: Option<u64>,
}

impl Machine {
    fn config(&self, entry: &Entry) -> Config {
        allocator_config(entry, self.frames, self.hart_ids.len())
    }
}

/// The configuration of `entry` over `frames` frames and `cores` harts.
fn allocator_config(entry: &Entry, frames: usize, cores: usize) -> Config {
    Config::new(frames, entry.max_order.min(10)).with_cores(cores)
}

fn kmain(boot_id: usize, dtb: usize, report: &mut Report) {
    println!("buddyfree kernel on hart {boot_id}; device tree at {dtb:#x}");
    report.section("boot");
    let Some(machine) = boot_memory(dtb, boot_id, report) else {
        return;
    };
    trap::install();
    let ticks = trap::set_period(machine.timebase_hz, machine.args.timer_ns);
    let started = harts::start_others(machine.timebase_hz);
    let harts = started.running;
    println!(
        "harts: {} in the device tree (ids {:?}), {harts} running; timebase {} Hz; timer period {} ns ({ticks} ticks)",
        machine.hart_ids.len(), machine.hart_ids, machine.timebase_hz, machine.args.timer_ns
    );
    if !started.late.is_empty() {
        println!(
            "harts {:?} came after the deadline: kept out of the rounds",
            started.late
        );
    }
    report.check(
        "every hart in the device tree runs",
        harts == machine.hart_ids.len() && started.refused.is_empty() && started.late.is_empty(),
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
        "timer: {} ticks, {} of them re-armed later than the period (the handler took longer)",
        total.ticks, total.floored
    );
    println!(
        "harts: {harts}, interrupt allocations: {}, frames stamped: {}",
        total.irq_allocs, total.stamped
    );
}

/// Reads the memory map from the device tree at `dtb`, carves the allocators' metadata, the
/// harts' stacks and the kernel heap from usable memory, installs the heap and builds the
/// table of harts: `None` (the failure reported) where any step fails.
fn boot_memory(dtb: usize, boot_id: usize, report: &mut Report) -> Option<Machine> {
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
    let bootargs = fdt
        .find_node("/chosen")
        .and_then(|c| c.property("bootargs"));
    let args = match Args::parse(bootargs.and_then(|p| p.as_str()).unwrap_or("")) {
        Ok(args) => args,
        Err(arg) => {
            println!("command line: `{arg}` is not `timer-ns=N` (N > 0) or `initrd-pattern`");
            report.check("command line read", false);
            return None;
        }
    };
    // SAFETY: linker symbols; only their addresses are taken.
    let kernel =
        unsafe { &__kernel_start as *const u8 as usize..&__kernel_end as *const u8 as usize };
    let dtb_range = memmap::checked_range("the device tree blob", dtb, fdt.total_size());
    let mut map = match dtb_range.and_then(|dtb| memmap::read(&fdt, dtb, kernel.clone())) {
        Ok(map) => map,
        Err(e) => {
            println!("memory map: {e}");
            report.check("memory map read", false);
            return None;
        }
    };
    println!("memory:   {}", map.memory);
    println!(
        "reserved: {} (firmware), {:#x}..{:#x} (kernel and boot stack), {:#x}..{:#x} (device tree)",
        map.reserved,
        kernel.start,
        kernel.end,
        dtb,
        dtb + fdt.total_size()
    );
    if !map.no_map.is_empty() {
        println!("no-map:   {} (never mapped)", map.no_map);
    }
    if !map.chosen.is_empty() {
        println!("chosen:   {} (handed over in /chosen, kept)", map.chosen);
    }
    // Before anything is written to memory: the initrd as the loader left it.
    let initrd_hash = map.initrd.clone().map(|initrd| {
        println!(
            "initrd:   {:#x}..{:#x} (held until released)",
            initrd.start, initrd.end
        );
        if args.initrd_pattern {
            report.check(
                "the initrd holds the pattern it was loaded with",
                initrd_has_pattern(initrd.clone()),
            );
        }
        hash(initrd)
    });
    let timebase_hz = fdt.cpus().next().map_or(0, |c| c.timebase_frequency()) as u64;
    let base = map.memory.iter().next().map_or(0, |r| r.start);
    let end = map.memory.iter().last().map_or(0, |r| r.end);
    let frames = (end - base) / FRAME;
    if frames > stress::MAX_FRAMES {
        println!(
            "memory map: memory spans {frames} frames from {base:#x}; the stress test names at most {}",
            stress::MAX_FRAMES
        );
        report.check("memory span within the kernel's reach", false);
        return None;
    }
    // No heap yet: the harts are counted here and listed once there is one.
    let hart_ids = || {
        fdt.cpus()
            .filter(|c| c.property("status").and_then(|s| s.as_str()) != Some("disabled"))
            .map(|c| c.ids().first())
    };
    // The boot hart runs whether the device tree names it or not.
    let harts = hart_ids().count() + usize::from(!hart_ids().any(|id| id == boot_id));
    if harts > MAX_HARTS {
        println!(
            "harts: the device tree names {harts} harts; this kernel runs at most {MAX_HARTS}"
        );
        report.check("hart count within the kernel's limit", false);
        return None;
    }
    let need = kernel_allocators()
        .filter_map(|(e, m)| (m.layout)(allocator_config(e, frames, harts)).ok())
        .fold(Layout::new::<u8>(), |a, b| {
            Layout::from_size_align(a.size().max(b.size()), a.align().max(b.align())).unwrap()
        });
    let carved = carve(&mut map, need, harts);
    report.check(
        "memory map read, metadata, stacks and heap carved from usable memory",
        carved.is_ok(),
    );
    let carved = match carved {
        Ok(carved) => carved,
        Err(e) => {
            println!("carve: {e}");
            return None;
        }
    };
    println!("carved:   {:#x}..{:#x} (allocator metadata), {:#x}..{:#x} (heap metadata), {:#x}..{:#x} (heap), {:#x}..{:#x} (stacks of {} harts)",
        carved.metadata.start, carved.metadata.end, carved.heap_metadata.start, carved.heap_metadata.end,
        carved.heap.start, carved.heap.end, carved.stacks.start, carved.stacks.end, harts - 1);
    println!(
        "usable:   {} ({} frames)",
        map.usable,
        map.usable.bytes() / FRAME
    );
    report.check("usable memory left", map.usable.bytes() > 0);
    if let Err(e) = install_heap(harts, carved.heap_metadata, carved.heap) {
        println!("kernel heap: {e:?}");
        report.check("kernel heap installed", false);
        return None;
    }
    // From here on there is a heap.
    harts::init(&hart_ids().collect::<Vec<_>>(), boot_id, carved.stacks);
    Some(Machine {
        map,
        base,
        frames,
        hart_ids: harts::all().iter().map(|h| h.id).collect(),
        timebase_hz,
        args,
        metadata: carved.metadata,
        initrd_hash,
    })
}

/// Whether every word of `initrd` is the pattern's.
fn initrd_has_pattern(initrd: Range<usize>) -> bool {
    initrd.start.is_multiple_of(8)
        && initrd.len().is_multiple_of(8)
        && (0..initrd.len() / 8).all(|i| {
            // SAFETY: inside the initrd, which nothing writes: it is out of the usable map.
            unsafe { ((initrd.start + 8 * i) as *const u64).read_volatile() == initrd_word(i) }
        })
}

/// FNV-1a over the bytes of `range`, a word at a time where it is aligned.
fn hash(range: Range<usize>) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    let mut hash = 0xCBF2_9CE4_8422_2325u64;
    let mut at = range.start;
    while at < range.end {
        let (word, step) = if at.is_multiple_of(8) && range.end - at >= 8 {
            // SAFETY: inside `range`, memory the firmware handed over and nothing writes.
            (unsafe { (at as *const u64).read_volatile() }, 8)
        } else {
            // SAFETY: as above, a byte of it.
            (u64::from(unsafe { (at as *const u8).read_volatile() }), 1)
        };
        hash = (hash ^ word).wrapping_mul(PRIME);
        at += step;
    }
    hash
}

/// The allocators a kernel can build over memory it carved itself: the registry's entries
/// with caller metadata.
fn kernel_allocators() -> impl Iterator<Item = (&'static Entry, CallerMetadata)> {
    registry::entries()
        .iter()
        .filter_map(|e| Some((e, e.metadata?)))
}

/// What `carve` took from usable memory.
struct Carved {
    metadata: Range<usize>,
    heap_metadata: Range<usize>,
    heap: Range<usize>,
    /// The stacks of every hart but the boot hart.
    stacks: Range<usize>,
}

/// Why `carve` could not take what it needed.
struct CarveError {
    /// The piece that did not fit, its bytes and alignment.
    what: &'static str,
    len: usize,
    align: usize,
    /// The largest usable range left when it was tried.
    largest: usize,
    /// Every piece's bytes, and the usable bytes before any was taken.
    needed: usize,
    usable: usize,
}

impl fmt::Display for CarveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs {} bytes aligned to {:#x}; the largest usable range left has {} bytes \
             (needed in all: {} bytes; usable: {} bytes)",
            self.what, self.len, self.align, self.largest, self.needed, self.usable
        )
    }
}

/// Takes from usable memory the frame allocators' metadata, the heap's metadata, the heap
/// and the stacks of `harts - 1` harts.
fn carve(map: &mut MemoryMap, need: Layout, harts: usize) -> Result<Carved, CarveError> {
    let whole = |len: usize| len.checked_next_multiple_of(FRAME).unwrap_or(usize::MAX);
    let heap_layout = heap_metadata_layout(harts).unwrap_or(Layout::new::<u8>());
    let pieces = [
        (
            "the allocator metadata",
            whole(need.size()),
            need.align().max(FRAME),
        ),
        (
            "the heap metadata",
            whole(heap_layout.size()),
            heap_layout.align().max(FRAME),
        ),
        ("the kernel heap", HEAP_BYTES, HEAP_UNIT << HEAP_ORDER),
        (
            "the harts' stacks",
            (harts - 1).saturating_mul(STACK),
            FRAME,
        ),
    ];
    let needed = pieces.iter().fold(0usize, |a, p| a.saturating_add(p.1));
    let usable = map.usable.bytes();
    let mut taken = [0..0, 0..0, 0..0, 0..0];
    for (slot, &(what, len, align)) in taken.iter_mut().zip(&pieces) {
        let largest = map.usable.iter().map(|r| r.len()).max().unwrap_or(0);
        *slot = map.usable.carve(len, align).ok_or(CarveError {
            what,
            len,
            align,
            largest,
            needed,
            usable,
        })?;
    }
    let [metadata, heap_metadata, heap, stacks] = taken;
    Ok(Carved {
        metadata,
        heap_metadata,
        heap,
        stacks,
    })
}

fn heap_config(cores: usize) -> Config {
    Config::new(HEAP_BYTES / HEAP_UNIT, HEAP_ORDER).with_cores(cores)
}

/// The heap's metadata: LLFree's at the start (at its alignment), then the magazines',
/// aligned up within the rest.
fn heap_metadata_layout(cores: usize) -> Result<Layout, Error> {
    let config = heap_config(cores);
    let inner = LLFree::metadata_layout(config)?;
    let own = Magazine::<LLFree>::metadata_layout(config)?;
    let size = inner.size() + own.size() + (own.align() - 1);
    Layout::from_size_align(size, inner.align()).map_err(|_| ConfigRule::MetadataOverflow.into())
}

/// Builds the kernel heap over carved memory and makes it the global allocator.
fn install_heap(cores: usize, metadata: Range<usize>, memory: Range<usize>) -> Result<(), Error> {
    let config = heap_config(cores);
    let meta = NonNull::new(metadata.start as *mut u8).ok_or(Error::MetadataTooSmall)?;
    // SAFETY: carved from usable memory for this heap alone, as large as asked for.
    let meta = unsafe { MetadataMemory::from_raw(meta, metadata.len()) };
    let (inner, own) = meta.take(LLFree::metadata_layout(config)?.size());
    let frames = Magazine::in_metadata(config, LLFree::in_metadata(config, inner)?, own)?;
    let start = NonNull::new(memory.start as *mut u8).ok_or(Error::OutOfRange)?;
    // SAFETY: carved from usable memory for this heap alone, and never given back.
    let region = unsafe { Region::from_raw(start, memory.len()) };
    let heap = Heap::new(region, HEAP_UNIT, frames)?;
    HEAP.init(heap.with_core_hint(this_hart))
        .map_err(|(e, _)| e)?;
    Ok(())
}

/// What one allocator's round showed.
#[derive(Default, Clone, Copy)]
struct Summary {
    stamped: usize,
    irq_allocs: usize,
    inside_call: usize,
    ticks: usize,
    floored: usize,
}

impl Summary {
    fn plus(self, o: &Summary) -> Summary {
        Summary {
            stamped: self.stamped + o.stamped,
            irq_allocs: self.irq_allocs + o.irq_allocs,
            inside_call: self.inside_call + o.inside_call,
            ticks: self.ticks + o.ticks,
            floored: self.floored + o.floored,
        }
    }
}

/// The interrupt counters of every hart, summed: (allocations, would-block answers,
/// ticks inside a call, wrong answers, ticks, ticks re-armed later than the period).
fn irq_totals() -> [usize; 6] {
    let sum = |f: fn(&trap::HartIrq) -> &AtomicUsize| {
        harts::all().iter().map(|h| f(&h.irq).load(Relaxed)).sum()
    };
    [
        sum(|i| &i.allocs),
        sum(|i| &i.would_block),
        sum(|i| &i.inside_call),
        sum(|i| &i.wrong),
        sum(|i| &i.ticks),
        sum(|i| &i.floored),
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
    let meta = unsafe { MetadataMemory::from_raw(meta, metadata.len()) };
    let built = (caller_metadata.build_in)(config, settings, meta);
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
        &machine.map.no_map,
        harts::all().len(),
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
    let [irq_allocs, would_block, inside_call, irq_wrong, ticks, floored] =
        core::array::from_fn(|i| after[i] - before[i]);
    let stamped = round.stamped.load(Relaxed);
    println!(
        "{}: {} frames stamped, {} page-table round trips, interrupts: {} ticks, {} allocations, {} would-block, {} inside alloc/free",
        entry.name, stamped, round.page_tables.load(Relaxed), ticks, irq_allocs, would_block, inside_call
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
    // Memory past Sv39's one-to-one reach cannot be mapped by these tables: said, not failed.
    let out_of_reach = round.out_of_reach.load(Relaxed) > 0;
    if out_of_reach {
        println!("{}: memory reaches past 256 GiB, which Sv39 cannot map one-to-one: no page-table round trips", entry.name);
    }
    report.check(
        "page tables built from its frames worked",
        (round.page_tables.load(Relaxed) > 0 || out_of_reach)
            && round.mapping_wrong.load(Relaxed) == 0,
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
    if let (Some(initrd), Some(hash_at_boot)) = (&machine.map.initrd, machine.initrd_hash) {
        release_initrd(&*alloc, machine, initrd.clone(), hash_at_boot, report);
    }
    Summary {
        stamped,
        irq_allocs,
        inside_call,
        ticks,
        floored,
    }
}

/// The kernel is done with the initrd: checks it is as the loader left it, then frees its
/// frames into `alloc` with `free_range`, and shows they were not allocatable before and are
/// after.
fn release_initrd(
    alloc: &dyn BlockAlloc,
    machine: &Machine,
    initrd: Range<usize>,
    hash_at_boot: u64,
    report: &mut Report,
) {
    report.check(
        "the initrd unchanged until released",
        hash(initrd.clone()) == hash_at_boot,
    );
    let frames = match machine.map.releasable(initrd) {
        Ok(frames) => frames,
        Err(e) => {
            println!("initrd: {e}");
            return report.check("the initrd's frames found", false);
        }
    };
    let count = frames.bytes() / FRAME;
    let usable_frames = machine.map.usable.bytes() / FRAME;
    let in_initrd = |blocks: &[(usize, u32)]| {
        blocks
            .iter()
            .flat_map(|&(index, order)| index..index + (1 << order))
            .filter(|&f| {
                let a = machine.base + f * FRAME;
                frames.contains(a..a + FRAME)
            })
            .count()
    };
    let before = take_everything(alloc);
    report.check(
        "no initrd frame allocatable before its release",
        before.as_ref().is_ok_and(|b| in_initrd(b) == 0),
    );
    give_back_all(alloc, before, report);
    let freed = frames.iter().all(|r| {
        alloc
            .free_range((r.start - machine.base) / FRAME, r.len() / FRAME, 0)
            .is_ok()
    });
    report.check(
        "the initrd freed with free_range",
        freed && alloc.free_units() == usable_frames + count,
    );
    let after = take_everything(alloc);
    report.check(
        "every initrd frame allocatable after its release",
        after.as_ref().is_ok_and(|b| in_initrd(b) == count),
    );
    give_back_all(alloc, after, report);
    println!(
        "{} frames of the initrd released after the checks, and allocated",
        count
    );
}

/// Allocates every free frame, the largest blocks first.
fn take_everything(alloc: &dyn BlockAlloc) -> Result<Vec<(usize, u32)>, Error> {
    let mut blocks = Vec::new();
    for order in (0..=alloc.max_order()).rev() {
        loop {
            match alloc.alloc(order, this_hart()) {
                Ok(index) => blocks.push((index, order)),
                Err(Error::OutOfMemory) => break,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(blocks)
}

fn give_back_all(
    alloc: &dyn BlockAlloc,
    blocks: Result<Vec<(usize, u32)>, Error>,
    report: &mut Report,
) {
    let freed = blocks.is_ok_and(|blocks| {
        blocks
            .iter()
            .all(|&(index, order)| alloc.free(index, order, this_hart()).is_ok())
    });
    report.check("every frame taken freed again", freed);
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
