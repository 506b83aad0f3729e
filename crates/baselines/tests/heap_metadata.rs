//! The heap each registered allocator keeps for a GiB of 4 KiB units (262 144 units, orders
//! up to 10, one core), counted by a global allocator that sums what is allocated and not
//! yet freed. Where an allocator can also take caller memory, the heap it keeps is that
//! layout give or take the boxed handle and the padding between tables; LLFree's must stay within its
//! two-bit floor (64 KiB) plus its child and tree entries.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use buddyfree::Config;
use buddyfree_baselines::registry;

/// Bytes allocated and not yet freed, by anyone in the process.
static LIVE: AtomicUsize = AtomicUsize::new(0);

struct Counting;

// SAFETY: forwards to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The boxed handle (with its boot-reservation tables, 2 KiB each: a magazine and its
/// backend keep one each), the small tables (per-core entries) beside the big ones, and the
/// padding a caller layout has between its tables.
const HANDLE_SLACK: usize = 6144;

fn main() {
    let config = Config::new(1 << 18, 10).with_cores(1);
    println!("heap bytes kept per GiB of 4 KiB units (1 core):");
    for entry in registry::entries() {
        if entry.max_order < config.max_order {
            continue;
        }
        let before = LIVE.load(Ordering::Relaxed);
        let alloc = (entry.build)(config, Default::default()).unwrap();
        let kept = LIVE.load(Ordering::Relaxed) - before;
        let layout = entry.metadata.map(|m| (m.layout)(config).unwrap().size());
        println!(
            "  {:18} {kept:>9} bytes ({:.1} KiB){}",
            entry.name,
            kept as f64 / 1024.0,
            layout.map_or(String::new(), |l| format!(", caller layout {l}"))
        );
        if let Some(layout) = layout {
            assert!(
                kept.abs_diff(layout) <= HANDLE_SLACK,
                "{}: {kept} bytes on the heap, {layout} over caller memory",
                entry.name
            );
        }
        if entry.name == "llfree" {
            let floor = (1 << 18) * 2 / 8;
            assert!(
                (floor..=floor + 4096 + HANDLE_SLACK).contains(&kept),
                "llfree: {kept} bytes, the two-bit floor is {floor}"
            );
        }
        drop(alloc);
    }
    println!("heap_metadata: ok");
}
