//! A `StaticHeap` as this test binary's `#[global_allocator]`, with the system allocator as
//! its fallback: everything before `init` and everything the heap refuses goes there; after
//! `init`, ordinary allocations come from the heap. Runs without the test harness, whose
//! threads would allocate alongside.

use std::alloc::System;

use buddyfree::heap::{Heap, Region, StaticHeap};
use buddyfree::nbbs::Nbbs4;
use buddyfree::{BlockAlloc, Config, Error};

#[global_allocator]
static HEAP: StaticHeap<Nbbs4, System> = StaticHeap::with_fallback(System);

const UNITS: usize = 1 << 12;
const UNIT: usize = 64;

fn main() {
    // Before init: served by the fallback.
    let early = vec![1u8; 100];
    assert!(HEAP.heap().is_none());
    // One unit more: the heap starts at the first unit-aligned address.
    let memory: &'static mut [u8] = Box::leak(vec![0u8; (UNITS + 1) * UNIT].into_boxed_slice());
    let alloc = Nbbs4::new(Config::new(UNITS, 12)).unwrap();
    let heap = Heap::new(Region::from_static(memory), UNIT, alloc).unwrap();
    assert!(HEAP.init(heap).is_ok());
    let heap = HEAP.heap().unwrap();
    let free = heap.allocator().free_units();
    let mut v: Vec<u64> = Vec::with_capacity(100);
    v.extend(0..100);
    assert!(heap.contains(v.as_ptr().cast()), "served by the heap");
    assert!(heap.allocator().free_units() < free);
    // Larger than the largest block (256 KiB): the fallback.
    let big = vec![0u8; 1 << 20];
    assert!(!heap.contains(big.as_ptr()));
    drop((early, big, v));
    assert_eq!(heap.allocator().free_units(), free);
    assert_eq!(heap.bad_frees(), 0);
    let second = Heap::new(
        Region::from_static(Box::leak(vec![0u8; 128].into_boxed_slice())),
        64,
        Nbbs4::new(Config::new(1, 0)).unwrap(),
    )
    .unwrap();
    // Installed once: the second heap comes back with the error.
    let (error, second) = HEAP.init(second).map(|_| ()).unwrap_err();
    assert_eq!(error.to_string(), "the static heap is already initialised");
    assert_eq!(second.allocator().total_units(), 1);
    let (again, _) = HEAP.init(second).map(|_| ()).unwrap_err();
    assert_eq!(again, Error::AlreadyInitialized);
    println!("static heap: ok");
}
