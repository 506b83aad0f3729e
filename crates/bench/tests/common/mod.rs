//! Shared by the bench's integration tests: a wrapper counting every allocator call, and
//! scratch folders.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use buddybench::allocs::{AllocSpec, Lock};
use buddyfree::{BlockAlloc, Class, Config, Error, HeldCore, OnCore};
use buddyfree_baselines::registry::DynAlloc;

/// Counts every call and checks that each free names a live block of the right order.
pub struct Counting {
    inner: DynAlloc,
    allocs: AtomicU64,
    failures: AtomicU64,
    frees: AtomicU64,
    holds: AtomicU64,
    unmovable: AtomicU64,
    pub live: Mutex<HashMap<usize, u32>>,
}

impl Counting {
    pub fn new(name: &str, units: usize, threads: usize) -> Counting {
        Counting::with(name, Config::new(units, 10).with_cores(threads))
    }

    pub fn with(name: &str, config: Config) -> Counting {
        Counting {
            inner: AllocSpec::find(name)
                .unwrap()
                .build(config, Lock::Ticket)
                .unwrap(),
            allocs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            holds: AtomicU64::new(0),
            unmovable: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
        }
    }

    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.allocs.load(Relaxed),
            self.frees.load(Relaxed),
            self.failures.load(Relaxed),
        )
    }

    /// Allocations (counted among all of them) that asked for `Class::UNMOVABLE`.
    pub fn unmovable(&self) -> u64 {
        self.unmovable.load(Relaxed)
    }

    /// Calls of `with_core` so far.
    pub fn holds(&self) -> u64 {
        self.holds.load(Relaxed)
    }

    /// Checks the allocator is whole again: nothing live and, once its caches are drained,
    /// all of its `units` units (its total) free.
    #[track_caller]
    pub fn assert_whole(&self, units: usize) {
        let live = self.live.lock().unwrap();
        assert!(live.is_empty(), "{} blocks still live", live.len());
        drop(live);
        self.drain();
        assert_eq!(self.total_units(), units, "total units");
        assert_eq!(self.free_units(), units, "free units");
    }
}

/// A fresh (removed if left over) scratch folder path named after this process and `name`.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("buddybench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

impl BlockAlloc for Counting {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.alloc_class(order, Class::MOVABLE, core)
    }

    /// Counts and checks as `alloc` does, and passes the class on.
    fn alloc_class(&self, order: u32, class: Class, core: usize) -> Result<usize, Error> {
        self.allocs.fetch_add(1, Relaxed);
        if class == Class::UNMOVABLE {
            self.unmovable.fetch_add(1, Relaxed);
        }
        let r = self.inner.alloc_class(order, class, core);
        match r {
            Ok(i) => assert!(self.live.lock().unwrap().insert(i, order).is_none()),
            Err(_) => {
                self.failures.fetch_add(1, Relaxed);
            }
        }
        r
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.frees.fetch_add(1, Relaxed);
        assert_eq!(
            self.live.lock().unwrap().remove(&index),
            Some(order),
            "free of a block not handed out"
        );
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

    fn drain(&self) {
        self.inner.drain()
    }

    /// Counts the hold; the calls inside are counted and checked as plain ones.
    fn with_core(&self, core: usize, f: &mut dyn FnMut(&mut dyn HeldCore)) {
        self.holds.fetch_add(1, Relaxed);
        f(&mut OnCore(self, core))
    }
}
