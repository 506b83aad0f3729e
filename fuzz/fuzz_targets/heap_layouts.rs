//! Layouts of every size and alignment through `Heap` over every registered allocator:
//! blocks are aligned, inside the heap and disjoint (each is stamped and checked when freed),
//! `order_of` agrees with what `alloc` does, and bad frees (double, foreign, misplaced,
//! another order) are errors that change nothing.
//!
//! Input: one byte picks the allocator, then 4 bytes per operation.

#![no_main]

use std::alloc::Layout;
use std::collections::BTreeMap;

use buddyfree::heap::{Heap, Region};
use buddyfree::Error;
use buddyfree_baselines::registry::{self, DynAlloc};
use libfuzzer_sys::fuzz_target;

const UNIT: usize = 64;
const UNITS: usize = 1024;
const MAX_ORDER: u32 = 6;

/// Fills a block's first and last byte with a stamp of its address.
fn stamp(ptr: *mut u8, size: usize) -> u8 {
    let s = (ptr as usize >> 6) as u8 | 1;
    // SAFETY: `ptr` is a live block of at least `size` bytes handed out by the heap, and no
    // one else writes it.
    unsafe {
        ptr.write(s);
        ptr.add(size - 1).write(s);
    }
    s
}

fn stamped(ptr: *mut u8, size: usize, s: u8) -> bool {
    // SAFETY: as in `stamp`: the block is still live and ours.
    unsafe { ptr.read() == s && ptr.add(size - 1).read() == s }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, ops)) = data.split_first() else {
        return;
    };
    let entries = registry::entries();
    let entry = &entries[usize::from(pick) % entries.len()];
    let max_order = MAX_ORDER.min(entry.max_order);
    let region = Region::mmap(UNITS * UNIT, UNIT << max_order).unwrap();
    let heap: Heap<DynAlloc> = Heap::build(region, UNIT, max_order, 2, |c| {
        (entry.build)(c, Default::default())
    })
    .unwrap();
    // address -> (layout, stamp)
    let mut live: BTreeMap<usize, (Layout, u8)> = BTreeMap::new();
    let mut freed: Vec<(usize, Layout)> = Vec::new();
    for c in ops.chunks_exact(4) {
        let size = usize::from(u16::from_le_bytes([c[1], c[2]])) >> (c[3] & 7);
        let align = 1usize << ((c[3] >> 3) % 16);
        match c[0] % 8 {
            0..=3 => {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                let order = heap.order_of(layout);
                match heap.alloc(layout) {
                    Ok(p) => {
                        let p = p.as_ptr();
                        let order = order.expect("alloc served a layout order_of refuses");
                        assert_eq!(p as usize % align, 0, "misaligned for {layout:?}");
                        assert!((UNIT << order) >= size.max(1));
                        assert!(heap.contains(p) && heap.contains(p.wrapping_add(size.max(1) - 1)));
                        let s = stamp(p, size.max(1));
                        if let Some((&below, &(l, _))) = live.range(..p as usize).next_back() {
                            assert!(below + l.size().max(1) <= p as usize, "overlap");
                        }
                        if let Some((&above, _)) = live.range(p as usize..).next() {
                            assert!(p as usize + size.max(1) <= above, "overlap");
                        }
                        live.insert(p as usize, (layout, s));
                    }
                    Err(Error::OutOfMemory) => assert!(order.is_ok()),
                    Err(e) => assert_eq!(Err(e), order, "alloc and order_of disagree"),
                }
            }
            4 | 5 => {
                let Some((&addr, _)) = live.iter().nth(size % live.len().max(1)) else {
                    continue;
                };
                let (layout, s) = live.remove(&addr).unwrap();
                assert!(
                    stamped(addr as *mut u8, layout.size().max(1), s),
                    "block overwritten"
                );
                heap.free(addr as *mut u8, layout).unwrap();
                freed.push((addr, layout));
            }
            6 => {
                // A second free of a block freed before: an error unless the address was
                // handed out again.
                let Some(&(addr, layout)) = freed.get(size % freed.len().max(1)) else {
                    continue;
                };
                if !live.contains_key(&addr) {
                    assert!(
                        heap.free(addr as *mut u8, layout).is_err(),
                        "double free accepted"
                    );
                }
            }
            _ => {
                // A free at an arbitrary address (inside the heap or not) with an arbitrary
                // layout: accepted only where it names a live block of that order.
                let base = heap.base().as_ptr() as usize;
                let addr = base
                    .wrapping_add(size.wrapping_mul(UNIT >> (c[3] & 3)))
                    .wrapping_sub(UNIT);
                let Ok(layout) = Layout::from_size_align(size.max(1) >> 3, align) else {
                    continue;
                };
                let legit = live.get(&addr).is_some_and(|(l, _)| {
                    heap.order_of(*l).ok().is_some() && heap.order_of(*l) == heap.order_of(layout)
                });
                let got = heap.free(addr as *mut u8, layout);
                assert_eq!(got.is_ok(), legit, "free({addr:#x}, {layout:?}) = {got:?}");
                if legit {
                    live.remove(&addr);
                    freed.push((addr, layout));
                }
            }
        }
        let used: usize = live
            .values()
            .map(|(l, _)| 1usize << heap.order_of(*l).unwrap())
            .sum();
        assert_eq!(
            heap.allocator().free_units() + used,
            heap.allocator().total_units()
        );
    }
    for (addr, (layout, s)) in live {
        assert!(
            stamped(addr as *mut u8, layout.size().max(1), s),
            "block overwritten"
        );
        heap.free(addr as *mut u8, layout).unwrap();
    }
    heap.allocator().drain();
    assert_eq!(
        heap.allocator().free_units(),
        heap.allocator().total_units()
    );
});
