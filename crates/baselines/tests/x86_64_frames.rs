//! The `x86_64` crate's frame traits over the allocators (`buddyfree::x86_64`): frames of
//! every size are distinct, aligned and inside the region; running out answers `None`;
//! frees give back exactly what was taken; bad frees are counted and change nothing; and a
//! real mapper (`OffsetPageTable`) builds and tears down page tables with them.
#![cfg(feature = "x86_64")]

use std::collections::HashSet;
use std::sync::Mutex;

use buddyfree::llfree::LLFree;
use buddyfree::x86_64::PhysFrames;
use buddyfree::{BlockAlloc, Config, Error, Nbbs};
use buddyfree_baselines::registry;
use x86_64::structures::paging::{
    FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size1GiB, Size2MiB, Size4KiB,
};
use x86_64::PhysAddr;

/// 4 KiB units in a 2 MiB frame.
const HUGE_UNITS: usize = 512;
/// 8 MiB of 4 KiB frames: four 2 MiB frames.
const UNITS: usize = 4 * HUGE_UNITS;
/// 2 MiB aligned but not 1 GiB aligned, and not zero, so that a base left out or added
/// twice shows in the addresses.
const BASE: u64 = 0x1_2340_0000;
/// Bytes of one unit.
const UNIT_BYTES: u64 = Size4KiB::SIZE;

/// Every frame size answers `None` (a refusal changes nothing, so the order of asking does
/// not matter).
fn assert_no_frame_of_any_size<A: BlockAlloc + ?Sized>(frames: &mut PhysFrames<'_, A>) {
    assert_eq!(FrameAllocator::<Size4KiB>::allocate_frame(frames), None);
    assert_eq!(FrameAllocator::<Size2MiB>::allocate_frame(frames), None);
    assert_eq!(FrameAllocator::<Size1GiB>::allocate_frame(frames), None);
}

/// The frames of `alloc` from `base` on, for core 0.
fn frames_at<A: BlockAlloc + ?Sized>(alloc: &A, base: u64) -> PhysFrames<'_, A> {
    // SAFETY: these tests never touch the memory the frames name, only their addresses.
    unsafe { PhysFrames::new(alloc, PhysAddr::new(base), 0) }.unwrap()
}

/// A frame of any size as `(start, bytes)`.
fn span<S: PageSize>(frame: PhysFrame<S>) -> (u64, u64) {
    (frame.start_address().as_u64(), frame.size())
}

/// Allocates `S` frames until the first `None`; at most one more than there are units, so a
/// `frames` that never runs out fails instead of hanging.
fn take_all<S: PageSize, F: FrameAllocator<S>>(frames: &mut F, units: usize) -> Vec<PhysFrame<S>> {
    let mut taken = Vec::new();
    while let Some(frame) = frames.allocate_frame() {
        taken.push(frame);
        assert!(taken.len() <= units, "more frames than units");
    }
    taken
}

/// Checks that every span is aligned to its size, lies in `units` frames from `base`, and
/// overlaps no other.
fn assert_distinct_aligned_inside(spans: &mut [(u64, u64)], base: u64, units: usize) {
    let end = base + units as u64 * UNIT_BYTES;
    for &(start, bytes) in spans.iter() {
        assert_eq!(
            start % bytes,
            0,
            "frame {start:#x} not aligned to {bytes:#x}"
        );
        assert!(
            start >= base && start + bytes <= end,
            "frame {start:#x} outside the region"
        );
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:x?} overlap");
    }
}

/// The first unit not covered by `spans` (which lie in the region from `base`).
fn first_untaken_unit(spans: &[(u64, u64)], base: u64) -> u64 {
    let covered = |addr: u64| spans.iter().any(|&(s, b)| (s..s + b).contains(&addr));
    (0..UNITS as u64)
        .map(|unit| base + unit * UNIT_BYTES)
        .find(|&addr| !covered(addr))
        .unwrap()
}

#[test]
fn every_allocator_serves_mixed_frames_distinct_aligned_and_inside_the_region() {
    for entry in registry::entries() {
        let alloc = (entry.build)(
            Config::new(UNITS, entry.max_order.min(9)),
            Default::default(),
        )
        .unwrap();
        let mut frames = frames_at(&*alloc, BASE);
        let mut spans = Vec::new();
        // Two small frames to each huge one, so that huge frames must come from what small
        // ones left whole.
        loop {
            let huge: Option<PhysFrame<Size2MiB>> = frames.allocate_frame();
            let small: [Option<PhysFrame<Size4KiB>>; 2] =
                [frames.allocate_frame(), frames.allocate_frame()];
            spans.extend(huge.map(span));
            spans.extend(small.iter().flatten().copied().map(span));
            if huge.is_none() && small.iter().all(Option::is_none) {
                break;
            }
            assert!(
                spans.len() <= UNITS,
                "{}: more frames than units",
                entry.name
            );
        }
        let bytes: u64 = spans.iter().map(|&(_, b)| b).sum();
        assert_eq!(
            bytes,
            UNITS as u64 * UNIT_BYTES,
            "{}: not all handed out",
            entry.name
        );
        assert_eq!(alloc.free_units(), 0, "{}", entry.name);
        if entry.max_order >= 9 {
            assert!(
                spans.iter().any(|&(_, b)| b == Size2MiB::SIZE),
                "{}",
                entry.name
            );
        }
        assert_distinct_aligned_inside(&mut spans, BASE, UNITS);
        assert_eq!(frames.bad_frees(), 0, "{}", entry.name);
    }
}

#[test]
fn exhausted_allocator_answers_none_for_every_size() {
    let llfree = LLFree::new(Config::new(UNITS, 10)).unwrap();
    let mut frames = frames_at(&llfree, BASE);
    let mut small = take_all::<Size4KiB, _>(&mut frames, UNITS);
    assert_eq!(small.len(), UNITS);
    let mut spans: Vec<_> = small.iter().copied().map(span).collect();
    assert_distinct_aligned_inside(&mut spans, BASE, UNITS);
    for _ in 0..3 {
        assert_no_frame_of_any_size(&mut frames);
    }
    assert_eq!(llfree.free_units(), 0);

    // One frame back serves one small frame, and no huge one.
    let back = small.pop().unwrap();
    // SAFETY: the frame is not in use.
    unsafe { frames.deallocate_frame(back) };
    assert_eq!(
        FrameAllocator::<Size2MiB>::allocate_frame(&mut frames),
        None
    );
    assert_eq!(frames.allocate_frame(), Some(back));
    assert_eq!(frames.bad_frees(), 0);
}

#[test]
fn every_allocator_takes_back_exactly_the_frames_it_gave() {
    for entry in registry::entries() {
        let alloc = (entry.build)(
            Config::new(UNITS, entry.max_order.min(9)),
            Default::default(),
        )
        .unwrap();
        let mut frames = frames_at(&*alloc, BASE);
        let huge = if entry.max_order >= 9 {
            take_all::<Size2MiB, _>(&mut frames, UNITS)
        } else {
            Vec::new()
        };
        assert_eq!(huge.len(), if entry.max_order >= 9 { 4 } else { 0 });
        // Give two huge frames back, as small frames for the next round.
        let mut free = UNITS - huge.len() * HUGE_UNITS;
        for &frame in &huge[..huge.len().min(2)] {
            // SAFETY: the frame is not in use.
            unsafe { frames.deallocate_frame(frame) };
            free += HUGE_UNITS;
            assert_eq!(alloc.free_units(), free, "{}", entry.name);
        }
        let small = take_all::<Size4KiB, _>(&mut frames, UNITS);
        assert_eq!(small.len(), free, "{}", entry.name);
        assert_eq!(alloc.free_units(), 0, "{}", entry.name);

        free = 0;
        for &frame in small.iter().rev() {
            // SAFETY: the frame is not in use.
            unsafe { frames.deallocate_frame(frame) };
            free += 1;
            assert_eq!(alloc.free_units(), free, "{}", entry.name);
        }
        for &frame in huge.iter().skip(2) {
            // SAFETY: the frame is not in use.
            unsafe { frames.deallocate_frame(frame) };
            free += HUGE_UNITS;
            assert_eq!(alloc.free_units(), free, "{}", entry.name);
        }
        assert_eq!(free, UNITS, "{}", entry.name);
        assert_eq!(frames.bad_frees(), 0, "{}", entry.name);

        // Merged again: the whole region as huge frames once more.
        alloc.drain();
        let again = take_all::<Size2MiB, _>(&mut frames, UNITS);
        assert_eq!(again.len(), huge.len(), "{}", entry.name);
    }
}

#[test]
fn bad_frees_are_counted_and_change_nothing() {
    let below = PhysFrame::<Size4KiB>::containing_address(PhysAddr::new(BASE - UNIT_BYTES));
    let past_end =
        PhysFrame::<Size4KiB>::from_start_address(PhysAddr::new(BASE + UNITS as u64 * UNIT_BYTES))
            .unwrap();
    let top = PhysFrame::<Size4KiB>::containing_address(PhysAddr::new((1 << 52) - 1));
    let huge_below = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(BASE - 1));
    let mut ran = 0;
    for entry in registry::entries().iter().filter(|e| e.max_order >= 9) {
        let alloc = (entry.build)(Config::new(UNITS, 9), Default::default()).unwrap();
        let mut frames = frames_at(&*alloc, BASE);
        let huge: PhysFrame<Size2MiB> = frames.allocate_frame().unwrap();
        let small: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
        let spare: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
        let taken = [span(huge), span(small), span(spare)];
        let never = PhysFrame::<Size4KiB>::containing_address(PhysAddr::new(first_untaken_unit(
            &taken, BASE,
        )));
        let free = alloc.free_units();
        assert_eq!(free, UNITS - HUGE_UNITS - 2, "{}", entry.name);

        // SAFETY: none of these frames is in use (most are not even this allocator's).
        unsafe {
            frames.deallocate_frame(spare);
            frames.deallocate_frame(spare); // freed twice
            frames.deallocate_frame(never);
            frames.deallocate_frame(below);
            frames.deallocate_frame(huge_below);
            frames.deallocate_frame(past_end);
            frames.deallocate_frame(top);
            // A huge frame's first unit as a small frame, and a small frame's huge frame.
            frames.deallocate_frame(PhysFrame::<Size4KiB>::containing_address(
                huge.start_address(),
            ));
            frames.deallocate_frame(PhysFrame::<Size2MiB>::containing_address(
                small.start_address(),
            ));
        }
        assert_eq!(frames.bad_frees(), 8, "{}", entry.name);
        assert_eq!(alloc.free_units(), free + 1, "{}", entry.name);
        // What was allocated still is, at the size it was allocated.
        for (frame, order) in [(span(huge), 9), (span(small), 0)] {
            let unit = ((frame.0 - BASE) / UNIT_BYTES) as usize;
            match alloc.block_of(unit) {
                Err(Error::Unsupported) => {}
                block => assert_eq!(block, Ok(Some((unit, order))), "{}", entry.name),
            }
        }

        // SAFETY: neither frame is in use.
        unsafe {
            frames.deallocate_frame(small);
            frames.deallocate_frame(huge);
        }
        assert_eq!(frames.bad_frees(), 8, "{}", entry.name);
        assert_eq!(alloc.free_units(), UNITS, "{}", entry.name);
        ran += 1;
    }
    assert!(ran >= 9, "only {ran} allocators ran");
}

#[test]
fn huge_frames_need_max_order_9() {
    let llfree = LLFree::new(Config::new(UNITS, 8)).unwrap();
    let nbbs = Nbbs::new(Config::new(UNITS, 8)).unwrap();
    let allocators: [&dyn BlockAlloc; 2] = [&llfree, &nbbs];
    for alloc in allocators {
        let mut frames = frames_at(alloc, BASE);
        assert_eq!(
            FrameAllocator::<Size2MiB>::allocate_frame(&mut frames),
            None
        );
        assert_eq!(
            FrameAllocator::<Size1GiB>::allocate_frame(&mut frames),
            None
        );
        assert_eq!(alloc.free_units(), UNITS);
        let small: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
        assert_eq!(alloc.free_units(), UNITS - 1);
        // SAFETY: the frame is not in use.
        unsafe { frames.deallocate_frame(small) };
        assert_eq!((alloc.free_units(), frames.bad_frees()), (UNITS, 0));
    }
}

#[test]
fn large_frames_need_a_base_aligned_to_their_size() {
    // Only 4 KiB aligned: small frames, no huge ones.
    let llfree = LLFree::new(Config::new(UNITS, 10)).unwrap();
    let base = BASE + UNIT_BYTES;
    let mut frames = frames_at(&llfree, base);
    assert_eq!(
        FrameAllocator::<Size2MiB>::allocate_frame(&mut frames),
        None
    );
    assert_eq!(llfree.free_units(), UNITS);
    let small = take_all::<Size4KiB, _>(&mut frames, UNITS);
    let mut spans: Vec<_> = small.iter().copied().map(span).collect();
    assert_distinct_aligned_inside(&mut spans, base, UNITS);
    assert_eq!(spans.len(), UNITS);
    // A 2 MiB frame inside the region is no block of this allocator's.
    let inside = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(BASE + Size2MiB::SIZE));
    // SAFETY: not in use.
    unsafe { frames.deallocate_frame(inside) };
    assert_eq!((llfree.free_units(), frames.bad_frees()), (0, 1));

    // 2 MiB aligned, not 1 GiB aligned: huge frames, no giant ones.
    let nbbs = Nbbs::new(Config::new(1 << 18, 18)).unwrap();
    let mut frames = frames_at(&nbbs, BASE);
    assert_eq!(
        FrameAllocator::<Size1GiB>::allocate_frame(&mut frames),
        None
    );
    assert_eq!(nbbs.free_units(), 1 << 18);
    let huge: PhysFrame<Size2MiB> = frames.allocate_frame().unwrap();
    assert_eq!(huge.start_address().as_u64() % Size2MiB::SIZE, 0);
    assert_eq!(nbbs.free_units(), (1 << 18) - HUGE_UNITS);
}

#[test]
fn giant_frames_are_blocks_of_order_18() {
    let units = 1 << 18;
    let base = 4 << 30;
    let nbbs = Nbbs::new(Config::new(units, 18)).unwrap();
    let mut frames = frames_at(&nbbs, base);
    let giant: PhysFrame<Size1GiB> = frames.allocate_frame().unwrap();
    assert_eq!(giant.start_address().as_u64(), base);
    assert_eq!(nbbs.free_units(), 0);
    assert_no_frame_of_any_size(&mut frames);

    // SAFETY: the frame is not in use.
    unsafe { frames.deallocate_frame(giant) };
    assert_eq!((nbbs.free_units(), frames.bad_frees()), (units, 0));
    // SAFETY: as above; freed twice.
    unsafe { frames.deallocate_frame(giant) };
    assert_eq!((nbbs.free_units(), frames.bad_frees()), (units, 1));

    // An allocator below order 18 has none to give.
    let llfree = LLFree::new(Config::new(units, 10)).unwrap();
    let mut frames = frames_at(&llfree, base);
    assert_eq!(
        FrameAllocator::<Size1GiB>::allocate_frame(&mut frames),
        None
    );
    assert_eq!(llfree.free_units(), units);
}

#[test]
fn new_checks_the_base_and_the_end_of_the_region() {
    let llfree = LLFree::new(Config::new(UNITS, 10)).unwrap();
    let region = UNITS as u64 * UNIT_BYTES;
    let new = |base: u64| {
        // SAFETY: these tests never touch the memory the frames name.
        unsafe { PhysFrames::new(&llfree, PhysAddr::new(base), 3) }.map(|f| f.base())
    };
    assert_eq!(new(BASE + 1).unwrap_err(), Error::Misaligned);
    assert_eq!(new(BASE + UNIT_BYTES / 2).unwrap_err(), Error::Misaligned);
    assert_eq!(
        new((1 << 52) - region + UNIT_BYTES).unwrap_err(),
        Error::OutOfRange
    );
    assert_eq!(new((1 << 52) - UNIT_BYTES).unwrap_err(), Error::OutOfRange);
    assert_eq!(new(0), Ok(PhysAddr::new(0)));

    // A region that ends at the top of the physical address space: every frame is there.
    let base = (1 << 52) - region;
    let mut frames = frames_at(&llfree, base);
    assert_eq!((frames.base().as_u64(), frames.core()), (base, 0));
    let small = take_all::<Size4KiB, _>(&mut frames, UNITS);
    assert_eq!(small.len(), UNITS);
    let top = small.iter().map(|f| f.start_address().as_u64()).max();
    assert_eq!(top, Some((1 << 52) - UNIT_BYTES));
}

#[test]
fn frames_are_distinct_across_adapters_of_one_allocator() {
    let llfree = LLFree::new(Config::new(UNITS, 10).with_cores(2)).unwrap();
    // SAFETY: these tests never touch the memory the frames name.
    let mut first = unsafe { PhysFrames::new(&llfree, PhysAddr::new(BASE), 0) }.unwrap();
    // SAFETY: as above, at the same base.
    let mut second = unsafe { PhysFrames::new(&llfree, PhysAddr::new(BASE), 1) }.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..UNITS / 2 {
        let a: PhysFrame<Size4KiB> = first.allocate_frame().unwrap();
        let b: PhysFrame<Size4KiB> = second.allocate_frame().unwrap();
        assert!(
            seen.insert(a) && seen.insert(b),
            "{a:?} or {b:?} handed out twice"
        );
    }
    assert_eq!(FrameAllocator::<Size4KiB>::allocate_frame(&mut first), None);
    // A frame goes back through either adapter.
    for frame in seen {
        // SAFETY: the frame is not in use.
        unsafe { second.deallocate_frame(frame) };
    }
    assert_eq!(
        (llfree.free_units(), first.bad_frees(), second.bad_frees()),
        (UNITS, 0, 0)
    );
}

/// An allocator that records the orders it is asked for and the blocks it is given back,
/// and answers each allocation `shift` units past where `inner` put it: with a shift, a
/// stand-in for an allocator that strays past its own units.
struct Recording<A> {
    inner: A,
    shift: usize,
    allocs: Mutex<Vec<u32>>,
    frees: Mutex<Vec<(usize, u32)>>,
}

impl<A: BlockAlloc> Recording<A> {
    fn new(inner: A, shift: usize) -> Self {
        Recording {
            inner,
            shift,
            allocs: Mutex::new(Vec::new()),
            frees: Mutex::new(Vec::new()),
        }
    }
}

impl<A: BlockAlloc> BlockAlloc for Recording<A> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.allocs.lock().unwrap().push(order);
        self.inner
            .alloc(order, core)
            .map(|index| index + self.shift)
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.frees.lock().unwrap().push((index, order));
        let index = index.checked_sub(self.shift).ok_or(Error::OutOfRange)?;
        self.inner.free(index, order, core)
    }

    fn free_units(&self) -> usize {
        self.inner.free_units()
    }

    fn total_units(&self) -> usize {
        self.inner.total_units()
    }

    fn max_order(&self) -> u32 {
        self.inner.max_order()
    }
}

#[test]
fn a_base_unaligned_for_a_size_never_asks_for_its_blocks() {
    let recording = Recording::new(Nbbs::new(Config::new(1 << 18, 18)).unwrap(), 0);
    let mut frames = frames_at(&recording, BASE + UNIT_BYTES);
    assert_eq!(
        FrameAllocator::<Size2MiB>::allocate_frame(&mut frames),
        None
    );
    let mut frames = frames_at(&recording, BASE);
    assert_eq!(
        FrameAllocator::<Size1GiB>::allocate_frame(&mut frames),
        None
    );
    assert!(recording.allocs.lock().unwrap().is_empty());
    let huge: Option<PhysFrame<Size2MiB>> = frames.allocate_frame();
    assert!(huge.is_some());
    assert_eq!(*recording.allocs.lock().unwrap(), [9]);
}

#[test]
fn a_block_past_the_allocators_units_goes_back() {
    // Shifted by all its units: every block lies past the end.
    let past = Recording::new(LLFree::new(Config::new(UNITS, 10)).unwrap(), UNITS);
    let mut frames = frames_at(&past, BASE);
    assert_eq!(
        FrameAllocator::<Size4KiB>::allocate_frame(&mut frames),
        None
    );
    assert_eq!(
        FrameAllocator::<Size2MiB>::allocate_frame(&mut frames),
        None
    );
    let frees = past.frees.lock().unwrap().clone();
    assert_eq!(frees.len(), 2);
    assert!(frees.iter().all(|&(index, _)| index >= UNITS), "{frees:?}");
    assert_eq!(
        frees.iter().map(|&(_, order)| order).collect::<Vec<_>>(),
        [0, 9]
    );
    assert_eq!((past.free_units(), frames.bad_frees()), (UNITS, 0));

    // Shifted by half a huge frame: a small block may still lie inside, a huge one never.
    let straddling = Recording::new(LLFree::new(Config::new(UNITS, 10)).unwrap(), 256);
    let mut frames = frames_at(&straddling, BASE);
    let huge = take_all::<Size2MiB, _>(&mut frames, UNITS);
    assert!(huge.is_empty(), "{huge:?}");
    assert_eq!(straddling.free_units(), UNITS);
}

/// `OffsetPageTable`, the mapper of the "Writing an OS in Rust" blog, over host memory that
/// stands for the region: its page tables come from and go back to the allocator.
#[cfg(target_pointer_width = "64")]
#[test]
fn offset_page_table_maps_and_cleans_up_with_these_frames() {
    use x86_64::structures::paging::mapper::CleanUp;
    use x86_64::structures::paging::{
        Mapper, OffsetPageTable, Page, PageTable, PageTableFlags, Translate,
    };
    use x86_64::VirtAddr;

    const TABLES: usize = 64;
    let base = 2 << 20;
    let mut memory: Vec<PageTable> = (0..TABLES).map(|_| PageTable::new()).collect();
    let phys_offset = VirtAddr::new(memory.as_mut_ptr() as u64 - base);
    let mut level_4 = Box::new(PageTable::new());
    let llfree = LLFree::new(Config::new(TABLES, 6)).unwrap();
    let mut frames = frames_at(&llfree, base);

    // SAFETY: `phys_offset` plus a frame of the region is that frame's table in `memory`,
    // which nothing else refers to while the mapper lives; `level_4` is empty.
    let mut mapper = unsafe { OffsetPageTable::new(&mut level_4, phys_offset) };
    let data: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    let pages = [0x1000_0000_0000u64, 0x2000_0000_0000]
        .map(|addr| Page::<Size4KiB>::containing_address(VirtAddr::new(addr)));
    let flags = PageTableFlags::PRESENT | PageTableFlags::WRITABLE;
    for page in pages {
        // SAFETY: the pages are not otherwise mapped and the frame is not in use.
        unsafe { mapper.map_to(page, data, flags, &mut frames) }
            .unwrap()
            .ignore();
        let addr = page.start_address() + 0x123;
        assert_eq!(
            mapper.translate_addr(addr),
            Some(data.start_address() + 0x123)
        );
    }
    // Two pages in different 512 GiB regions: a level 3, 2 and 1 table each.
    assert_eq!(llfree.free_units(), TABLES - 1 - 6);

    for page in pages {
        mapper.unmap(page).unwrap().1.ignore();
    }
    // SAFETY: every table frame came from `frames` and is used by this page table alone.
    unsafe { mapper.clean_up(&mut frames) };
    assert_eq!((llfree.free_units(), frames.bad_frees()), (TABLES - 1, 0));
    // SAFETY: nothing maps the frame any more.
    unsafe { frames.deallocate_frame(data) };
    assert_eq!(llfree.free_units(), TABLES);
}

/// The frames of a real x86_64 bootloader's map under QEMU that were never usable (the
/// kernel's stack just below the first usable frame, the page tables and the kernel image
/// in 2 MiB frames) are refused after the documented boot sequence, counted, and change
/// nothing; the usable frames all allocate.
#[test]
fn frames_the_firmware_keeps_are_refused_after_boot() {
    let llfree = LLFree::new(Config::new(0x7fe0, 9)).unwrap();
    buddyfree::range::reserve_all(&llfree).unwrap();
    for (start, end) in [(0x2c1, 0x400), (0x8ff, 0x7fe0)] {
        llfree.free_range(start, end - start, 0).unwrap();
    }
    let usable = llfree.free_units();
    let mut frames = frames_at(&llfree, 0);
    for addr in [0x2c_0000u64, 0x8f_e000] {
        let frame = PhysFrame::<Size4KiB>::containing_address(PhysAddr::new(addr));
        // SAFETY: a stray free the allocator must refuse; no memory is touched.
        unsafe { FrameDeallocator::<Size4KiB>::deallocate_frame(&mut frames, frame) };
    }
    for addr in [0u64, 0x40_0000] {
        let frame = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(addr));
        // SAFETY: as above.
        unsafe { FrameDeallocator::<Size2MiB>::deallocate_frame(&mut frames, frame) };
    }
    assert_eq!(frames.bad_frees(), 4);
    assert_eq!(llfree.free_units(), usable);
    assert_eq!(take_all::<Size4KiB, _>(&mut frames, usable).len(), usable);
}
