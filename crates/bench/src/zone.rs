//! `llfree-zone-*`: persistent LLFree zones ([`PersistentLLFree`]) over a zone file in the
//! system's temporary folder, one per instance, so that the workloads measure what each
//! write-back mode costs against the volatile `llfree` in the same run.
//!
//! The file is created with the instance and, when it is dropped, the zone is closed (as a
//! user would: everything written back, marked clean) and the file removed.

use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use buddyfree::llfree::persist::{Durability, PersistError, PersistentLLFree};
use buddyfree::llfree::Options;
use buddyfree::{BlockAlloc, Config, Error};

/// The most allocator calls of one run on an `msync` zone: each is a system call and a page
/// write (40 µs to 2 ms on an ordinary file of a virtual disk), so this keeps a run to
/// seconds, and still lets bulk (at least 4096 blocks) run.
pub const MSYNC_MAX_CALLS: u64 = 1 << 14;

/// A zone the tool can run.
pub struct Mode {
    /// The name users select it by.
    pub name: &'static str,
    /// One line saying what it is.
    pub about: &'static str,
    /// Its write-back per operation.
    pub durability: Durability,
}

/// The zones, one per write-back mode, named with the crash workload's `--durability` names.
pub const MODES: [Mode; 3] = [
    Mode {
        name: "llfree-zone-none",
        about: "persistent LLFree zone over a file in the temp folder (removed after), no write-back per operation",
        durability: Durability::None,
    },
    Mode {
        name: "llfree-zone-line",
        about: "persistent LLFree zone, each operation's cache line written back (clwb, else clflushopt, else clflush)",
        durability: Durability::CacheLine,
    },
    Mode {
        name: "llfree-zone-msync",
        about: "persistent LLFree zone, msync of the page per operation: runs only cases of at most 16384 calls (bulk 4K: --work 64M or less)",
        durability: Durability::Msync,
    },
];

impl Mode {
    /// The most allocator calls one run may make on it (see [`MSYNC_MAX_CALLS`]).
    pub fn max_calls(&self) -> Option<u64> {
        (self.durability == Durability::Msync).then_some(MSYNC_MAX_CALLS)
    }
}

/// Zone files made by this process so far, so that each gets its own name.
static ZONES: AtomicU64 = AtomicU64::new(0);

/// A persistent zone over a file of its own, closed and removed on drop.
pub struct ZoneAlloc {
    zone: ManuallyDrop<PersistentLLFree>,
    path: PathBuf,
}

impl ZoneAlloc {
    /// Creates a zone file for `config` in the temporary folder and opens it.
    pub fn new(config: Config, durability: Durability) -> Result<ZoneAlloc, PersistError> {
        let path = std::env::temp_dir().join(format!(
            "buddybench-{}-{}.zone",
            std::process::id(),
            ZONES.fetch_add(1, Ordering::Relaxed)
        ));
        match PersistentLLFree::create(&path, config, Options::for_config(config), durability) {
            Ok(zone) => Ok(ZoneAlloc {
                zone: ManuallyDrop::new(zone),
                path,
            }),
            Err(e) => {
                // `create` never overwrites, so a file there is a half-made zone of ours.
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Where its zone file is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for ZoneAlloc {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and `self.zone` is not touched after this.
        let zone = unsafe { ManuallyDrop::take(&mut self.zone) };
        if let Err(e) = zone.close() {
            eprintln!("warning: closing zone {}: {e}", self.path.display());
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl BlockAlloc for ZoneAlloc {
    #[inline]
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        self.zone.alloc(order, core)
    }

    #[inline]
    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        self.zone.free(index, order, core)
    }

    fn free_units(&self) -> usize {
        self.zone.free_units()
    }

    fn total_units(&self) -> usize {
        self.zone.total_units()
    }

    fn max_order(&self) -> u32 {
        self.zone.max_order()
    }

    fn drain(&self) {
        self.zone.drain()
    }
}
