//! The heap adapters: layouts to orders, alignment, bad frees, the allocator traits, regions
//! and typed pools — over every registered allocator where the test is about the adapter.

#![cfg_attr(feature = "nightly", feature(allocator_api))]

mod common;

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use buddyfree::buddy::Knuth;
use buddyfree::heap::{GlobalHeap, Heap, Region, TypedPool};
use buddyfree::{BlockAlloc, Config, ConfigRule, Error, Locked};
use buddyfree_baselines::registry::{self, DynAlloc};

/// The registered allocator behind the single-allocator tests below (the tests that loop
/// over `registry::entries()` cover every allocator).
const BACKEND: &str = "nbbs4";

type Backend = DynAlloc;

fn backend(config: Config) -> Result<Backend, Error> {
    let entry = registry::find(BACKEND).expect("BACKEND names a registered allocator");
    (entry.build)(config, Default::default())
}

const UNIT: usize = 64;

/// A heap of `units` units of 64 bytes over a fresh mapping aligned to its largest block.
fn heap(units: usize, max_order: u32) -> Heap<Backend> {
    registry_heap(registry::find(BACKEND).unwrap(), units, max_order)
}

/// The registered allocators that serve blocks up to `max_order` (the list allocators serve
/// order 0 only; `order_0_allocators_serve_one_unit_and_refuse_more` covers them).
fn entries_serving(max_order: u32) -> impl Iterator<Item = &'static registry::Entry> {
    registry::entries()
        .iter()
        .filter(move |e| e.max_order >= max_order)
}

/// The same over the registered allocator `entry`.
fn registry_heap(entry: &registry::Entry, units: usize, max_order: u32) -> Heap<DynAlloc> {
    let region = Region::mmap(units * UNIT, UNIT << max_order).unwrap();
    Heap::build(region, UNIT, max_order, 2, |c| {
        (entry.build)(c, Default::default())
    })
    .unwrap()
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

#[test]
fn orders_follow_size_and_alignment() {
    let h = heap(1024, 6);
    let cases = [
        (1, 1, 0),
        (64, 8, 0),
        (65, 8, 1),
        (128, 64, 1),
        (129, 1, 2),
        (1, 128, 1),
        (1, 256, 2),
        (100, 4096, 6),
        (4096, 4096, 6),
    ];
    for (size, align, order) in cases {
        assert_eq!(h.order_of(layout(size, align)), Ok(order), "{size} {align}");
    }
    assert_eq!(h.max_size(), 4096);
    assert_eq!(h.max_align(), 4096);
    assert_eq!(h.order_of(layout(0, 1)), Err(Error::ZeroSize));
    assert_eq!(h.order_of(layout(4097, 1)), Err(Error::TooLarge));
    assert_eq!(h.order_of(layout(usize::MAX / 2, 1)), Err(Error::TooLarge));
    assert_eq!(h.order_of(layout(1, 8192)), Err(Error::BadAlign));
}

#[test]
fn indices_and_addresses_convert_both_ways() {
    let h = heap(64, 3);
    let base = h.base().as_ptr() as usize;
    assert_eq!(h.ptr_of(0), Some(h.base()));
    assert_eq!(
        h.ptr_of(63).map(|p| p.as_ptr() as usize),
        Some(base + 63 * UNIT)
    );
    assert_eq!(h.ptr_of(64), None);
    assert_eq!(h.ptr_of(usize::MAX), None);
    assert_eq!(h.index_of(h.ptr_of(5).unwrap().as_ptr()), Ok(5));
    assert_eq!(
        h.index_of((base + 64 * UNIT) as *const u8),
        Err(Error::Foreign)
    );
    assert!(h.contains((base + 64 * UNIT - 1) as *const u8));
    assert!(!h.contains((base + 64 * UNIT) as *const u8));
    assert!(!h.contains(std::ptr::null()));
    let (_, p) = h.alloc_index(2).unwrap();
    assert_eq!(h.index_of(p.as_ptr()).map(|i| i % 4), Ok(0));
    h.free_index(h.index_of(p.as_ptr()).unwrap(), 2).unwrap();
}

#[test]
fn every_block_honours_its_alignment_and_stays_in_the_region() {
    let h = heap(2048, 7);
    let end = h.base().as_ptr() as usize + 2048 * UNIT;
    let mut live = Vec::new();
    let mut rng = common::Rng::new(7);
    for i in 0..600 {
        let x = rng.next();
        let size = 1 + (x % 2000) as usize;
        let align = 1 << ((x >> 20) % 14);
        let l = layout(size, align);
        match h.alloc(l) {
            Ok(p) => {
                let a = p.as_ptr() as usize;
                assert_eq!(a % align, 0, "{l:?}");
                assert!(a >= h.base().as_ptr() as usize && a + size <= end);
                // SAFETY: a fresh block of at least `size` bytes.
                unsafe { p.as_ptr().write_bytes(i as u8, size) };
                live.push((p, l, i as u8));
            }
            Err(e) => assert!(
                e == Error::OutOfMemory || align > h.max_align(),
                "{e:?} for {l:?}"
            ),
        }
        if x.is_multiple_of(3) && !live.is_empty() {
            let (p, l, stamp) = live.swap_remove((x as usize / 3) % live.len());
            // SAFETY: still our block of `l.size()` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), l.size()) };
            assert!(bytes.iter().all(|&b| b == stamp), "block overwritten");
            h.free(p.as_ptr(), l).unwrap();
        }
    }
    for (p, l, stamp) in live {
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), l.size()) };
        assert!(bytes.iter().all(|&b| b == stamp), "block overwritten");
        h.free(p.as_ptr(), l).unwrap();
    }
    assert_eq!(h.allocator().free_units(), 2048);
    common::assert_whole(h.allocator());
}

#[test]
#[cfg_attr(miri, ignore = "leaks its buffer on purpose; Miri reports leaks")]
fn alignment_beyond_the_base_is_refused() {
    // A buffer aligned to 4096 whose region starts 64 bytes in: the base is 64-aligned only.
    #[repr(align(4096))]
    struct Aligned([u8; 8192]);
    let buf: &'static mut Aligned = Box::leak(Box::new(Aligned([0; 8192])));
    let region = Region::from_static(&mut buf.0[64..64 + 64 * 64]);
    let h = Heap::build(region, UNIT, 4, 1, backend).unwrap();
    assert_eq!(h.max_align(), 64);
    assert_eq!(h.alloc(layout(1, 128)), Err(Error::BadAlign));
    // Order 1 by size only, at alignment 64: fine.
    let p = h.alloc(layout(128, 64)).unwrap();
    assert_eq!(p.as_ptr() as usize % 64, 0);
    h.free(p.as_ptr(), layout(128, 64)).unwrap();
}

#[test]
fn box_regions_start_at_the_first_unit_boundary() {
    let memory = vec![0u8; 64 * 100 + 63].into_boxed_slice();
    let region = Region::from_box(memory);
    // Whatever the box's alignment, at most 63 bytes are trimmed to reach a unit boundary.
    assert_eq!(Heap::<Backend>::units_fitting(&region, UNIT), Some(100));
    let h = Heap::build(region, UNIT, 5, 1, backend).unwrap();
    assert_eq!(h.base().as_ptr() as usize % 64, 0);
    assert!(h.max_align() >= 64);
    let p = h.alloc(layout(64 * 32, 8)).unwrap();
    h.free(p.as_ptr(), layout(64 * 32, 8)).unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "maps more than Miri can allocate, to see it refused")]
fn bad_regions_are_refused() {
    let small = Region::from_box(vec![0u8; 64 * 10].into_boxed_slice());
    let alloc = backend(Config::new(64, 4)).unwrap();
    assert_eq!(Heap::new(small, UNIT, alloc).err(), Some(Error::BadRegion));
    let region = Region::from_box(vec![0u8; 4096].into_boxed_slice());
    assert_eq!(
        Heap::build(region, 48, 2, 1, backend).err(),
        Some(Error::BadRegion)
    );
    let tiny = Region::from_box(vec![0u8; 10].into_boxed_slice());
    assert_eq!(
        Heap::build(tiny, UNIT, 0, 1, backend).err(),
        Some(Error::BadRegion)
    );
    // The allocator refuses its configuration: a largest block above the units.
    let region = Region::from_box(vec![0u8; 64 * 20].into_boxed_slice());
    assert_eq!(
        Heap::build(region, UNIT, 5, 1, backend).err(),
        Some(Error::InvalidConfig(ConfigRule::OrderAboveUnits))
    );
    let invalid = |rule| Some(Error::InvalidConfig(rule));
    assert_eq!(
        Region::mmap(0, 4096).err(),
        invalid(ConfigRule::RegionLength)
    );
    assert_eq!(
        Region::mmap(4096, 3).err(),
        invalid(ConfigRule::NotPowerOfTwo)
    );
    assert_eq!(
        Region::mmap(usize::MAX, 4096).err(),
        invalid(ConfigRule::RegionLength)
    );
    // The system's refusal keeps its errno: more than the address space holds.
    assert_eq!(
        Region::mmap(usize::MAX / 2, 4096).err(),
        Some(Error::Mmap(libc::ENOMEM))
    );
}

#[test]
fn mmap_regions_are_aligned_writable_and_unmapped() {
    for align in [1, 4096, 1 << 21] {
        let r = Region::mmap(3 << 20, align).unwrap();
        assert_eq!(r.as_ptr() as usize % align, 0);
        assert_eq!(r.len(), 3 << 20);
        // SAFETY: the mapping is ours and `len` bytes long.
        unsafe { r.as_ptr().write_bytes(0xa5, r.len()) };
    }
}

/// Every bad free the heap can see, on every registered allocator: an error, and nothing
/// changes.
#[test]
fn bad_frees_are_errors_and_change_nothing() {
    for entry in entries_serving(4) {
        let h = registry_heap(entry, 256, 4);
        let l = layout(100, 8);
        let p = h.alloc(l).unwrap().as_ptr();
        let q = h.alloc(layout(64, 64)).unwrap().as_ptr();
        let free = h.allocator().free_units();
        let on_stack = 0u64;
        let name = entry.name;
        let cases: [(*mut u8, Layout, Error); 8] = [
            (std::ptr::null_mut(), l, Error::Foreign),
            (&on_stack as *const u64 as *mut u8, l, Error::Foreign),
            (
                h.base().as_ptr().wrapping_add(256 * UNIT),
                l,
                Error::Foreign,
            ),
            (h.base().as_ptr().wrapping_sub(UNIT), l, Error::Foreign),
            (p.wrapping_add(1), l, Error::Misaligned),
            (p, layout(64, 8), Error::OrderMismatch),
            (p, layout(0, 8), Error::ZeroSize),
            (p, layout(1, 1 << 20), Error::BadAlign),
        ];
        for (ptr, l, e) in cases {
            assert_eq!(h.free(ptr, l), Err(e), "{name}: {ptr:?} {l:?}");
            let tried = h.try_free(ptr, l);
            let unoffered = Err(Error::Unsupported);
            assert!(tried == Err(e) || tried == unoffered, "{name}: {tried:?}");
            assert_eq!(h.allocator().free_units(), free, "{name}");
        }
        // A block never handed out (allocators place blocks anywhere: pick one clear of
        // `p` and `q`), then a double free.
        let taken = |u: usize| [p, q].iter().any(|&b| h.index_of(b).ok() == Some(u));
        let never_unit = (0..256)
            .step_by(2)
            .find(|&u| !taken(u) && !taken(u + 1))
            .unwrap();
        let never = h.base().as_ptr().wrapping_add(never_unit * UNIT);
        assert_eq!(h.free(never, l), Err(Error::NotAllocated), "{name}");
        h.free(p, l).unwrap();
        assert_eq!(h.free(p, l), Err(Error::NotAllocated), "{name}");
        h.free(q, layout(64, 64)).unwrap();
        assert_eq!(h.allocator().free_units(), 256, "{name}");
        // Through `GlobalAlloc`, bad frees are counted and ignored.
        // SAFETY: deliberately bad frees; the heap must not act on them.
        unsafe {
            GlobalAlloc::dealloc(&h, p, l);
            GlobalAlloc::dealloc(&h, std::ptr::null_mut(), l);
        }
        assert_eq!(h.bad_frees(), 2, "{name}");
        assert_eq!(h.allocator().free_units(), 256, "{name}");
        common::assert_whole(h.allocator());
    }
}

/// The allocation and free that never wait (by layout, by index and by address alone) serve
/// as `alloc` and `free` do where the
/// allocator offers them, and answer `WouldBlock` (changing nothing) where it would wait:
/// here, a locked allocator whose lock the calling code holds.
#[test]
fn try_alloc_and_try_free_never_wait() {
    let l = layout(200, 64);
    for entry in entries_serving(4) {
        let h = registry_heap(entry, 256, 4);
        let name = entry.name;
        let p = match h.try_alloc(l) {
            Err(Error::Unsupported) => continue,
            p => p.unwrap(),
        };
        assert_eq!(h.allocator().free_units(), 252, "{name}");
        let (i, q) = h.try_alloc_index(0).unwrap();
        assert_eq!(h.ptr_of(i), Some(q));
        let mismatch = Err(Error::OrderMismatch);
        assert_eq!(h.try_free(p.as_ptr(), layout(64, 1)), mismatch, "{name}");
        h.try_free(p.as_ptr(), l).unwrap();
        let gone = Err(Error::NotAllocated);
        assert_eq!(h.try_free(p.as_ptr(), l), gone, "{name}");
        h.allocator().try_free(i, 0, 0).unwrap();
        assert_eq!(h.allocator().try_free(i, 0, 0), gone, "{name}");
        // By address alone: the order found without waiting, as `free_at` finds it.
        let p = h.try_alloc(l).unwrap();
        let inside = p.as_ptr().wrapping_add(UNIT);
        assert_eq!(h.try_free_at(inside), gone, "{name}");
        h.try_free_at(p.as_ptr()).unwrap();
        assert_eq!(h.try_free_at(p.as_ptr()), gone, "{name}");
        assert_eq!(h.free_at(p.as_ptr()), gone, "{name}");
        h.allocator().drain();
        common::assert_whole(h.allocator());
    }
    let region = Region::mmap(256 * UNIT, UNIT << 4).unwrap();
    let knuth = Locked::<Knuth>::new(Knuth::new(Config::new(256, 4)).unwrap());
    let h = Heap::new(region, UNIT, knuth).unwrap();
    let p = h.try_alloc(l).unwrap();
    let would_block = Error::WouldBlock;
    h.allocator().with(|_| {
        assert_eq!(h.try_alloc(l), Err(would_block));
        assert_eq!(h.try_free(p.as_ptr(), l), Err(would_block));
        assert_eq!(h.try_free_at(p.as_ptr()), Err(would_block));
    });
    assert_eq!(h.allocator().free_units(), 252);
    h.try_free_at(p.as_ptr()).unwrap();
    assert_eq!(h.allocator().free_units(), 256);
}

/// An allocator that records, as a bit mask, the `core` of every allocation and free.
struct SeenCores(DynAlloc, AtomicUsize);

impl SeenCores {
    fn saw(&self, core: usize) -> usize {
        self.1.fetch_or(1 << core.min(63), Ordering::Relaxed);
        core
    }
}

impl BlockAlloc for SeenCores {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.0.alloc(order, self.saw(core))
    }
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.0.free(index, order, self.saw(core))
    }
    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.0.try_alloc(order, self.saw(core))
    }
    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.0.try_free(index, order, self.saw(core))
    }
    fn alloc_bulk(&self, order: u32, core: usize, out: &mut [usize]) -> Result<usize, Error> {
        self.0.alloc_bulk(order, self.saw(core), out)
    }
    fn free_bulk(&self, blocks: &[usize], order: u32, core: usize) -> Result<(), (usize, Error)> {
        self.0.free_bulk(blocks, order, self.saw(core))
    }
    common::pass_on!(sizes);
}

/// A heap given a core source passes its answer as every call's `core`, through every
/// path (`GlobalAlloc` too), from any thread.
#[test]
fn a_core_hint_names_the_core_of_every_call() {
    let build = |config| {
        let inner = (registry::find("llfree-magazine").unwrap().build)(config, Default::default())?;
        Ok(SeenCores(inner, AtomicUsize::new(0)))
    };
    let region = Region::mmap(256 * UNIT, UNIT << 4).unwrap();
    let h = Heap::build(region, UNIT, 4, 8, build)
        .unwrap()
        .with_core_hint(|| 5);
    let l = layout(64, 64);
    // Both threads name core 5, so each may find that core's cache held by the other: the
    // never-waiting calls may then answer `WouldBlock` (changing nothing), as documented. The
    // property checked is which core every call names, whatever each answers.
    common::run_threads(2, |_| {
        let p = h.alloc(l).unwrap();
        h.free(p.as_ptr(), l).unwrap();
        match h.try_alloc(l) {
            Ok(p) => match h.try_free(p.as_ptr(), l) {
                Ok(()) => {}
                Err(Error::WouldBlock) => h.free(p.as_ptr(), l).unwrap(),
                Err(e) => panic!("try_free: {e:?}"),
            },
            Err(Error::WouldBlock) => {}
            Err(e) => panic!("try_alloc: {e:?}"),
        }
        let mut out = [0; 4];
        let n = h.alloc_bulk(0, &mut out).unwrap();
        h.free_bulk(&out[..n], 0).unwrap();
        // SAFETY: a non-zero-sized layout, freed with the same layout.
        unsafe { GlobalAlloc::dealloc(&h, GlobalAlloc::alloc(&h, l), l) };
    });
    assert_eq!(h.allocator().1.load(Ordering::Relaxed), 1 << 5);
    assert_eq!(h.bad_frees(), 0);
}

#[test]
fn requests_the_heap_cannot_serve_are_errors_or_null() {
    let h = heap(64, 4);
    assert_eq!(h.alloc(layout(0, 1)), Err(Error::ZeroSize));
    assert_eq!(h.alloc(layout(64 * 16 + 1, 1)), Err(Error::TooLarge));
    assert_eq!(h.alloc(layout(8, 2048)), Err(Error::BadAlign));
    assert_eq!(h.alloc_index(5), Err(Error::BadOrder));
    let all: Vec<_> = (0..4).map(|_| h.alloc_index(4).unwrap().1).collect();
    assert_eq!(h.alloc(layout(1, 1)), Err(Error::OutOfMemory));
    // SAFETY: valid layouts; null is the expected answer.
    unsafe {
        assert!(GlobalAlloc::alloc(&h, layout(1, 1)).is_null());
        assert!(GlobalAlloc::alloc(&h, layout(1 << 20, 1)).is_null());
        assert!(GlobalAlloc::alloc(&h, layout(1, 1 << 20)).is_null());
    }
    for p in all {
        h.free_index(h.index_of(p.as_ptr()).unwrap(), 4).unwrap();
    }
    assert_eq!(h.allocator().free_units(), 64);
    common::assert_whole(h.allocator());
}

#[test]
fn realloc_keeps_contents_and_stays_in_place_within_a_block() {
    let h = heap(256, 5);
    let l = layout(40, 8);
    // SAFETY: the `GlobalAlloc` contract: live pointers, matching layouts, non-zero sizes.
    unsafe {
        let p = GlobalAlloc::alloc(&h, l);
        assert!(!p.is_null());
        for i in 0..40 {
            p.add(i).write(i as u8);
        }
        let same = GlobalAlloc::realloc(&h, p, l, 64);
        assert_eq!(same, p, "same order: in place");
        let moved = GlobalAlloc::realloc(&h, same, layout(64, 8), 1000);
        assert!(!moved.is_null());
        assert!((0..40).all(|i| *moved.add(i) == i as u8));
        assert!(GlobalAlloc::realloc(&h, moved, layout(1000, 8), 1 << 20).is_null());
        let small = GlobalAlloc::realloc(&h, moved, layout(1000, 8), 10);
        assert!((0..10).all(|i| *small.add(i) == i as u8));
        GlobalAlloc::dealloc(&h, small, layout(10, 8));
    }
    assert_eq!(h.bad_frees(), 0);
    assert_eq!(h.allocator().free_units(), 256);
    common::assert_whole(h.allocator());
}

#[test]
fn allocator_api2_collections_work_and_return_everything() {
    use allocator_api2::boxed::Box as ABox;
    use allocator_api2::vec::Vec as AVec;
    let h = heap(4096, 10);
    {
        let mut v: AVec<u64, &Heap<Backend>> = AVec::new_in(&h);
        for i in 0..5000 {
            v.push(i);
        }
        assert_eq!(v.iter().sum::<u64>(), 5000 * 4999 / 2);
        let b = ABox::new_in([7u128; 9], &h);
        assert_eq!(b.iter().sum::<u128>(), 63);
        let z = ABox::new_in((), &h);
        let strings: AVec<String, &Heap<Backend>> = {
            let mut s = AVec::new_in(&h);
            s.extend((0..100).map(|i| i.to_string()));
            s
        };
        assert_eq!(strings[99], "99");
        drop(z);
        assert!(h.allocator().free_units() < 4096);
    }
    assert_eq!(h.bad_frees(), 0);
    assert_eq!(h.allocator().free_units(), 4096);
}

/// `core`'s `Allocator` (nightly toolchains, `--features nightly`).
#[cfg(feature = "nightly")]
#[test]
fn core_allocator_collections_work_and_return_everything() {
    let h = heap(1024, 8);
    {
        let mut v: Vec<u32, &Heap<Backend>> = Vec::new_in(&h);
        v.extend(0..3000);
        let b = Box::new_in(v.iter().sum::<u32>(), &h);
        assert_eq!(*b, 3000 * 2999 / 2);
    }
    assert_eq!(h.allocator().free_units(), 1024);
}

/// A `GlobalHeap` used as a plain value: built on first use; what it refuses is null, or
/// `System`'s memory with the fallback, and either kind of pointer goes back where it came
/// from.
#[test]
fn global_heaps_build_lazily_and_refuse_or_fall_back() {
    let config = Config::new(256, 4);
    let strict = GlobalHeap::new(UNIT, config, backend);
    let lenient = GlobalHeap::with_system_fallback(UNIT, config, backend);
    let big = layout(64 * 17, 8);
    let small = layout(100, 64);
    // SAFETY: the `GlobalAlloc` contract: non-zero layouts, pointers freed once with theirs.
    unsafe {
        assert!(strict.alloc(big).is_null());
        let heap = strict.heap().unwrap();
        let p = strict.alloc(small);
        assert!(heap.contains(p) && (p as usize).is_multiple_of(64));
        let q = strict.realloc(p, small, 64 * 16);
        assert!(heap.contains(q));
        assert!(strict.realloc(q, layout(64 * 16, 64), 64 * 17).is_null());
        strict.dealloc(q, layout(64 * 16, 64));
        strict.dealloc(q, layout(64 * 16, 64));
        assert_eq!(heap.bad_frees(), 1);
        assert_eq!(heap.allocator().free_units(), 256);

        let p = lenient.alloc(big);
        let heap = lenient.heap().unwrap();
        assert!(!p.is_null() && !heap.contains(p));
        p.write_bytes(1, big.size());
        lenient.dealloc(p, big);
        let q = lenient.alloc(small);
        assert!(heap.contains(q));
        q.write_bytes(7, 100);
        let r = lenient.realloc(q, small, 64 * 17);
        assert!(!r.is_null() && !heap.contains(r));
        assert!((0..100).all(|i| *r.add(i) == 7));
        lenient.dealloc(r, layout(64 * 17, 64));
        assert!(lenient.fallbacks() >= 2);
        assert_eq!(heap.allocator().free_units(), 256);
        assert_eq!(heap.bad_frees(), 0);
    }
    // A configuration that cannot be built: every request is refused.
    let broken = GlobalHeap::new(48, config, backend);
    assert!(broken.heap().is_none());
    // SAFETY: a valid layout; null is the expected answer.
    assert!(unsafe { broken.alloc(small) }.is_null());
}

/// Threads allocate, stamp, check and free through one heap per registered allocator,
/// freeing some blocks on another thread; any overlap breaks a stamp.
#[test]
#[cfg_attr(miri, ignore = "stress: 4 threads, 6000 operations per allocator")]
fn threads_share_a_heap_without_overlap() {
    const THREADS: usize = 4;
    for entry in entries_serving(6) {
        let h = registry_heap(entry, 2048, 6);
        // Blocks handed to other threads to check and free. A spinlock rather than a channel:
        // its synchronisation is visible to ThreadSanitizer (std is not instrumented).
        let mailbox = spin::Mutex::new(Vec::<(usize, Layout, u8)>::new());
        common::run_threads(THREADS, |t| {
            let h = &h;
            let stamp = t as u8 + 1;
            let mut rng = common::Rng::new(t as u64 + 1);
            let mut mine = Vec::new();
            for _ in 0..1500 {
                let x = rng.next();
                let l = layout(1 + (x % 700) as usize, 1 << ((x >> 32) % 8));
                if let Ok(p) = h.alloc(l) {
                    // SAFETY: a fresh block of `l.size()` bytes.
                    unsafe { p.as_ptr().write_bytes(stamp, l.size()) };
                    mine.push((p.as_ptr() as usize, l));
                }
                if mine.len() > 20 || x.is_multiple_of(4) {
                    if let Some((a, l)) = mine.pop() {
                        if x.is_multiple_of(8) {
                            mailbox.lock().push((a, l, stamp));
                        } else {
                            check_and_free(h, a, l, stamp);
                        }
                    }
                }
                let handed = mailbox.lock().pop();
                if let Some((a, l, stamp)) = handed {
                    check_and_free(h, a, l, stamp);
                }
            }
            for (a, l) in mine {
                check_and_free(h, a, l, stamp);
            }
        });
        for (a, l, stamp) in mailbox.into_inner() {
            check_and_free(&h, a, l, stamp);
        }
        common::assert_whole(h.allocator());
    }
}

fn check_and_free<A: BlockAlloc>(h: &Heap<A>, addr: usize, l: Layout, stamp: u8) {
    // SAFETY: a live block of `l.size()` bytes owned by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, l.size()) };
    assert!(bytes.iter().all(|&b| b == stamp), "block overwritten");
    h.free(addr as *mut u8, l).unwrap();
}

// ---- typed pools ----

static DROPS: AtomicUsize = AtomicUsize::new(0);

/// Counts its drops in `DROPS` (only the pool test that reads `DROPS` creates these).
struct Counted(u64);

impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

#[repr(align(512))]
struct OverAligned(u8);

#[test]
fn pool_boxes_drop_their_values_and_return_memory() {
    let pool = TypedPool::<Counted, _>::new(heap(256, 6)).unwrap();
    {
        let mut a = pool.alloc(Counted(1)).map_err(|e| e.0).unwrap();
        let b = pool.alloc(Counted(2)).map_err(|e| e.0).unwrap();
        a.0 += 10;
        assert_eq!(a.0 + b.0, 13);
        assert_eq!(DROPS.load(Ordering::SeqCst), 0);
        drop(a);
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);
        let v = b.into_inner();
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);
        assert_eq!(v.0, 2);
    }
    assert_eq!(DROPS.load(Ordering::SeqCst), 2);
    {
        let s = pool.alloc_slice(100, |i| Counted(i as u64)).unwrap();
        assert_eq!(s.len(), 100);
        assert_eq!(s.iter().map(|c| c.0).sum::<u64>(), 4950);
        assert_eq!(s.as_ptr() as usize % std::mem::align_of::<Counted>(), 0);
    }
    assert_eq!(DROPS.load(Ordering::SeqCst), 102);
    // A panic half way through the initialiser drops what was made and returns the block.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.alloc_slice(10, |i| if i == 6 { panic!("boom") } else { Counted(0) })
    }));
    assert!(r.is_err());
    assert_eq!(DROPS.load(Ordering::SeqCst), 108);
    // Full: the value comes back.
    let held: Vec<_> = (0..256)
        .map_while(|i| pool.alloc(Counted(i)).ok())
        .collect();
    assert_eq!(held.len(), 256);
    let (e, back) = pool.alloc(Counted(999)).err().unwrap();
    assert_eq!(e, Error::OutOfMemory);
    assert_eq!(back.0, 999);
    drop(back);
    drop(held);
    assert_eq!(DROPS.load(Ordering::SeqCst), 108 + 257);
    assert_eq!(pool.heap().allocator().free_units(), 256);
    assert_eq!(pool.heap().bad_frees(), 0);
}

#[test]
fn pools_align_over_aligned_types_and_refuse_what_cannot_fit() {
    let pool = TypedPool::<OverAligned, _>::new(heap(256, 6)).unwrap();
    let boxes: Vec<_> = (0..20)
        .map(|i| pool.alloc(OverAligned(i)).map_err(|e| e.0).unwrap())
        .collect();
    for (i, b) in boxes.iter().enumerate() {
        assert_eq!(b.as_ptr() as usize % 512, 0);
        assert_eq!(b.0, i as u8);
    }
    // 512 bytes at 64 per unit: order 3, eight units each.
    assert_eq!(pool.heap().allocator().free_units(), 256 - 20 * 8);
    let arr = pool.alloc_slice(3, |i| OverAligned(i as u8)).unwrap();
    assert_eq!(arr.as_ptr() as usize % 512, 0);
    drop(arr);
    drop(boxes);
    assert_eq!(pool.heap().allocator().free_units(), 256);
    // Too large for the heap, too aligned for the region, or too long an array.
    assert_eq!(
        TypedPool::<[u8; 1 << 20], _>::new(heap(64, 4)).err(),
        Some(Error::TooLarge)
    );
    let low = Region::from_box(vec![0u8; 64 * 65].into_boxed_slice());
    let h = Heap::build(low, UNIT, 6, 1, backend).unwrap();
    if h.max_align() < 512 {
        assert_eq!(
            TypedPool::<OverAligned, _>::new(h).err(),
            Some(Error::BadAlign)
        );
    }
    let pool = TypedPool::<u64, _>::new(heap(64, 4)).unwrap();
    assert_eq!(
        pool.alloc_slice(usize::MAX / 4, |_| 0).err(),
        Some(Error::TooLarge)
    );
    assert_eq!(pool.alloc_slice(1000, |_| 0).err(), Some(Error::TooLarge));
}

#[test]
fn pools_of_zero_sized_types_use_no_memory() {
    thread_local!(static UNITS: Cell<usize> = const { Cell::new(0) });
    struct Zst;
    impl Drop for Zst {
        fn drop(&mut self) {
            UNITS.set(UNITS.get() + 1);
        }
    }
    let pool = TypedPool::<Zst, _>::new(heap(16, 2)).unwrap();
    let a = pool.alloc(Zst).map_err(|e| e.0).unwrap();
    let s = pool.alloc_slice(1000, |_| Zst).unwrap();
    assert_eq!(pool.heap().allocator().free_units(), 16);
    drop((a, s));
    assert_eq!(UNITS.get(), 1001);
    let empty = pool.alloc_slice(0, |_| Zst).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn pool_boxes_move_between_threads() {
    let pool = TypedPool::<Vec<u32>, _>::new(heap(512, 5)).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let pool = &pool;
                s.spawn(move || {
                    (0..30)
                        .map(|i| pool.alloc(vec![t, i]).map_err(|e| e.0).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let all: Vec<_> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(all.len(), 120);
        let mut seen: Vec<_> = all.iter().map(|b| (b[0], b[1])).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 120);
    });
    assert_eq!(pool.heap().allocator().free_units(), 512);
}

#[test]
fn order_0_allocators_serve_one_unit_and_refuse_more() {
    for entry in registry::entries().iter().filter(|e| e.max_order == 0) {
        let region = Region::mmap(16 * UNIT, UNIT).unwrap();
        assert_eq!(
            Heap::build(region, UNIT, 1, 2, |c| (entry.build)(c, Default::default())).err(),
            Some(Error::InvalidConfig(ConfigRule::OrderAboveAllocator)),
            "{}",
            entry.name
        );
        let h = registry_heap(entry, 16, 0);
        let p = h.alloc(layout(UNIT, 8)).unwrap().as_ptr();
        assert_eq!(h.alloc(layout(UNIT + 1, 8)).err(), Some(Error::TooLarge));
        assert_eq!(h.alloc(layout(8, 2 * UNIT)).err(), Some(Error::BadAlign));
        assert_eq!(h.free(p, layout(UNIT, 8)), Ok(()));
        assert_eq!(h.free(p, layout(UNIT, 8)), Err(Error::NotAllocated));
        assert_eq!(h.allocator().free_units(), 16, "{}", entry.name);
    }
}
