//! Shared by the bench's integration tests: a wrapper counting every allocator call.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use buddybench::allocs::AllocSpec;
use buddyfree::registry::DynAlloc;
use buddyfree::{BlockAlloc, Config, Error};

/// Counts every call and checks that each free names a live block of the right order.
pub struct Counting {
    inner: DynAlloc,
    allocs: AtomicU64,
    failures: AtomicU64,
    frees: AtomicU64,
    pub live: Mutex<HashMap<usize, u32>>,
}

impl Counting {
    pub fn new(name: &str, units: usize, threads: usize) -> Counting {
        Counting::with(name, Config::new(units, 10).with_cores(threads))
    }

    pub fn with(name: &str, config: Config) -> Counting {
        Counting {
            inner: AllocSpec::find(name).unwrap().build(config).unwrap(),
            allocs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            frees: AtomicU64::new(0),
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
}

impl BlockAlloc for Counting {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.allocs.fetch_add(1, Relaxed);
        let r = self.inner.alloc(order, core);
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
}
