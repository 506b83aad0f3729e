//! Persistent LLFree (§3.2.3): a zone whose lower level lives in a file mapping
//! (`MAP_SHARED`), so that its allocations survive the process, with recovery after a crash.
//! The allocator is LLFree over caller memory ([`Builder::kept`](super::Builder::kept)), the mapping
//! being that memory; this module adds the file, its header, its lock and the write-back.
//!
//! ```text
//! file: | header page (4 KiB) | lower level: bit fields | child entries |
//! DRAM: upper level (trees, per-core reservations), rebuilt from the child entries at open
//! ```
//!
//! [`PersistentLLFree::create`] makes a new zone file (never over an existing file),
//! [`PersistentLLFree::open`] opens one, and [`PersistentLLFree::close`] writes everything
//! back, records a checksum of the lower level (and of the header's fixed fields) and marks
//! it clean. Opening a clean zone verifies the lower level against that checksum, then
//! trusts its child counters (the paper's "re-initialisation"); a zone changed after its
//! clean close is refused ([`PersistError::LowerChecksum`]) with the file untouched. The
//! checksum reads the lower level (0.0063% of the zone) once at close and once at open, one
//! pass whose cost is linear in the zone's size (`lower_checksum_cost` in
//! `persist/header.rs` times it). Opening a zone that was not closed (its
//! user crashed, or dropped it) recovers: the bit fields and huge flags are the truth, the
//! counters are rebuilt from them and taken slots that name no block become order-0 blocks
//! (see `lower/recover.rs`), then the trees; a state no run leaves (a block above the
//! header's largest order among them) is refused ([`PersistError::Corrupt`]).
//!
//! # What survives a crash
//! Every allocation and free commits with one atomic change of one word (one cache line):
//! the bits for orders 0..=8, which also name the block's order (orders 6..=8: the words of
//! one line, set one by one, the start word that names the block last), the child's huge
//! flags for orders 9 and 10, and for orders 11 and up (whole frames, `lower/span.rs`) the
//! block's first child entry, which records its order and is set after the others (each
//! written back before the next). After recovery:
//! - every block whose `alloc` returned, and whose `free` was not called, is allocated with
//!   its order (it can be freed as before);
//! - every block whose `free` returned is free;
//! - the block of an operation in flight at the crash is either in its old state, in its new
//!   state, or lost: its taken units are order-0 blocks no one holds, its frames taken whole
//!   order-9 blocks (listed by [`LLFree::blocks`], as a zone is an LLFree). At most one
//!   block per thread is lost (the paper: at most one frame per core), or the blocks of one
//!   bulk call (`alloc_bulk`, `free_bulk`, which
//!   commit a bit-field word at a time); recovery never frees a unit.
//!
//! These are the zone's own operations. Per-core
//! [`Magazine`](crate::magazine::Magazine)s in front of a zone park freed blocks in memory,
//! allocated in the zone until they are given back (a spill, a drain,
//! [`Magazine::into_inner`](crate::magazine::Magazine::into_inner)): after a crash, parked
//! blocks come back allocated. Magazines built in front of a recovered zone adopt its
//! blocks.
//!
//! Which crashes this covers depends on [`Durability`]: with `None` a process crash
//! (SIGKILL, abort) loses nothing, because stores to a shared mapping live in the page cache
//! (or the CPU caches, on DAX) and the kernel writes them back; a power failure needs
//! `CacheLine` on a DAX mapping of persistent memory (the line is written back before the
//! operation goes on), or `Msync` on an ordinary file (the page is written before the
//! operation goes on). A multi-word block's words share one line, and a start word that
//! reaches the medium without its continuation words names nothing: its units are lost,
//! never handed out twice.
//!
//! One process at a time: the file is locked (`flock`) while a zone is open, and opening it
//! again fails with [`PersistError::Locked`]. A child process shares its parent's open files,
//! and with them the lock, from its fork until its exec: a program that starts processes on
//! one thread while it closes and reopens a zone on another can see `Locked` for that moment
//! ([`PersistentLLFree::open`] waits it out, given a wait). Test harnesses fork unasked:
//! ThreadSanitizer starts `llvm-symbolizer` at its first report, suppressed ones included.

#![cfg_attr(docsrs, doc(cfg(feature = "persist")))]

mod flush;
mod header;

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use memmap2::MmapMut;

pub use flush::Durability;
pub use header::VERSION;
use header::{lower_checksum, Header, CLEAN, DIRTY, LOWER_SUM_AT, PAGE, STATE_AT};

use super::caller::{Init, RecoverError};
use super::lower::Lower;
use super::writeback::{sealed, WriteBack};
use super::{LLFree, Options};
use crate::config::check_cores;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::{BlockAlloc, Config, ConfigRule, Error};

/// The most units a zone may have (2^48 frames of 4 KiB, 1 EiB): sizes stay far from
/// overflow.
pub const MAX_UNITS: usize = 1 << 48;

/// Why a zone file cannot be created or opened. A file that is not a zone, or a damaged one,
/// is reported, never reinitialised.
#[non_exhaustive]
#[derive(Debug)]
pub enum PersistError {
    /// The file system said no (includes `AlreadyExists` from `create`).
    Io(io::Error),
    /// Another open zone (in this or another process) holds the file.
    Locked,
    /// `create` with a configuration LLFree rejects (or more than [`MAX_UNITS`]), `open`
    /// with cores outside `1..=MAX_CORES`, or metadata that cannot be reserved.
    Config(Error),
    /// The file is shorter than its header (or than a header page).
    Truncated {
        /// Bytes the zone needs.
        expected: u64,
        /// Bytes the file has.
        found: u64,
    },
    /// The file is longer than the zone its header describes.
    WrongSize {
        /// Bytes the zone needs.
        expected: u64,
        /// Bytes the file has.
        found: u64,
    },
    /// The file does not start with the zone magic: not a zone file.
    BadMagic,
    /// A zone of a layout version this code does not read.
    BadVersion {
        /// The file's version.
        found: u32,
    },
    /// The header's checksum does not match: a damaged header.
    BadChecksum,
    /// A header field that no zone can have (despite a good checksum).
    BadHeader(&'static str),
    /// The zone was closed cleanly, but its lower level (or a header field, its own
    /// checksum made good) no longer matches the checksum written at that close: it was
    /// damaged since. Nothing is trusted or written.
    LowerChecksum,
    /// Recovery found a state no run of the allocator leaves (a damaged lower level).
    Corrupt {
        /// The huge frame.
        frame: usize,
        /// What is wrong with it.
        what: &'static str,
    },
}

impl core::fmt::Display for PersistError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PersistError::Io(e) => write!(f, "zone file: {e}"),
            PersistError::Locked => f.write_str("zone file is open elsewhere"),
            PersistError::Config(e) => write!(f, "zone configuration: {e}"),
            PersistError::Truncated { expected, found } => write!(
                f,
                "zone file truncated: {found} bytes, the zone needs {expected}"
            ),
            PersistError::WrongSize { expected, found } => write!(
                f,
                "zone file has {found} bytes, its header describes {expected}"
            ),
            PersistError::BadMagic => f.write_str("not an LLFree zone file (bad magic)"),
            PersistError::BadVersion { found } => write!(
                f,
                "LLFree zone file of version {found}, this build reads version {VERSION}"
            ),
            PersistError::BadChecksum => f.write_str("LLFree zone header damaged (checksum)"),
            PersistError::BadHeader(what) => write!(f, "LLFree zone header invalid: {what}"),
            PersistError::LowerChecksum => f.write_str(
                "LLFree zone damaged after its clean close (lower level checksum mismatch)",
            ),
            PersistError::Corrupt { frame, what } => {
                write!(f, "LLFree zone damaged at huge frame {frame}: {what}")
            }
        }
    }
}

impl std::error::Error for PersistError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PersistError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// A lower level LLFree could not take, as the error of the zone that holds it.
impl From<RecoverError> for PersistError {
    fn from(e: RecoverError) -> Self {
        match e {
            RecoverError::Config(e) => PersistError::Config(e),
            RecoverError::Corrupt { frame, what } => PersistError::Corrupt { frame, what },
        }
    }
}

impl From<io::Error> for PersistError {
    fn from(e: io::Error) -> Self {
        PersistError::Io(e)
    }
}

/// What opening a zone found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The zone had been closed cleanly, so its metadata was verified against the checksum
    /// written at close and trusted; else it was recovered.
    pub clean: bool,
    /// Units allocated.
    pub allocated_units: usize,
    /// Time to rebuild the metadata (lower level and trees; not the mapping).
    pub elapsed: Duration,
}

/// An LLFree zone over a file: LLFree whose lower level lies in the file's mapping, which
/// its write-back ([`Durable`]) holds open, and the file locked, while the zone lives. See
/// the [module documentation](self).
pub type PersistentLLFree = LLFree<Durable>;

/// The write-back of a persistent zone's lower level, chosen at open (see [`Durability`]),
/// and the file mapping that lower level lies in: dropped with the lower level, after its
/// lines.
#[derive(Debug)]
pub struct Durable {
    flush: Option<flush::Flush>,
    map: MmapMut,
    /// The start of the mapping, for the header's words (the lower level has its own view).
    base: NonNull<u8>,
    /// Holds the lock on the file while the zone is open.
    _file: File,
}

// SAFETY: `base` points into the mapping the zone owns, and is used only for the header
// words, through atomics or while the zone is exclusively borrowed (`create`).
unsafe impl Send for Durable {}
// SAFETY: as above; shared access to the mapping goes through atomics only.
unsafe impl Sync for Durable {}

impl sealed::Sealed for Durable {}

impl WriteBack for Durable {
    const ACTIVE: bool = true;

    #[inline(always)]
    fn write_back(&self, word: &AtomicU64) {
        if let Some(flush) = self.flush {
            flush(word);
        }
    }
}

impl Durable {
    /// Sets the header word at `at` (the shutdown marker or the lower level's checksum) and
    /// writes the header page to the file.
    fn write_header_word(&self, at: usize, value: u64) -> Result<(), PersistError> {
        debug_assert!(at == STATE_AT || at == LOWER_SUM_AT);
        // SAFETY: both words are 8 bytes at an offset that is a multiple of 8 inside the
        // page-aligned mapping's header page, so aligned and in bounds; they are only ever
        // accessed through atomics (the bytes read at open come from the file, not here).
        let word = unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(at).cast::<u64>()) };
        word.store(value, Ordering::Release);
        Ok(self.map.flush_range(0, PAGE)?)
    }
}

impl PersistentLLFree {
    /// Creates a zone file at `path` (which must not exist) with every unit free, with the
    /// tuning `options` (kept in the header; [`Options::for_config`] is the paper's tuning
    /// for `config`), and opens it.
    ///
    /// ```
    /// use buddyfree::llfree::persist::{Durability, PersistentLLFree};
    /// use buddyfree::llfree::Options;
    /// use buddyfree::Config;
    ///
    /// let path = std::env::temp_dir().join(format!("buddyfree-create-{}.zone", std::process::id()));
    /// let config = Config::new(1 << 14, 10);
    /// let options = Options::for_config(config);
    /// let zone = PersistentLLFree::create(&path, config, options, Durability::None)?;
    /// zone.close()?;
    /// std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create(
        path: impl AsRef<Path>,
        config: Config,
        options: Options,
        durability: Durability,
    ) -> Result<PersistentLLFree, PersistError> {
        if config.units > MAX_UNITS {
            return Err(PersistError::Config(ConfigRule::TooManyUnits.into()));
        }
        LLFree::check(config, options).map_err(PersistError::Config)?;
        let file = open_locked(path.as_ref(), true)?;
        let header = Header {
            units: config.units,
            max_order: config.max_order,
            options,
            lower_bytes: Lower::bytes(config.units),
        };
        file.set_len(header.file_bytes())?;
        let zone =
            PersistentLLFree::mapped(file, config, options, durability, |_| Ok(Some(Init::Free)))?;
        let file = &zone.lower.write_back;
        // The magic goes in last, after the formatted lower level is on the medium: a file
        // whose creation was cut short is not taken for a zone.
        file.map.flush()?;
        let bytes = header.to_bytes();
        // SAFETY: bytes 0..STATE_AT of the mapping are ours and nothing else views them
        // (the lower level starts at PAGE, the state word at STATE_AT).
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), file.base.as_ptr(), STATE_AT) };
        file.write_header_word(STATE_AT, DIRTY)?;
        Ok(zone)
    }

    /// Opens the zone file at `path` with `cores` per-core reservations, recovering it if it
    /// was not closed cleanly. While it is [`PersistError::Locked`] it tries again every
    /// millisecond for up to `wait` ([`Duration::ZERO`]: not at all). For a program that
    /// starts processes: a child holds its parent's lock from its fork until its exec, so a
    /// zone this process has just closed can still read as locked for that moment. A zone
    /// held open for longer (by another process) is still answered `Locked` once `wait` has
    /// passed.
    ///
    /// ```
    /// use buddyfree::llfree::persist::{Durability, PersistentLLFree};
    /// use buddyfree::llfree::Options;
    /// use buddyfree::Config;
    /// use std::time::Duration;
    ///
    /// let path = std::env::temp_dir().join(format!("buddyfree-open-{}.zone", std::process::id()));
    /// let config = Config::new(1 << 14, 10);
    /// let options = Options::for_config(config);
    /// PersistentLLFree::create(&path, config, options, Durability::None)?.close()?;
    /// let (zone, recovery) = PersistentLLFree::open(&path, 2, Durability::None, Duration::ZERO)?;
    /// assert!(recovery.clean);
    /// zone.close()?;
    /// std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(
        path: impl AsRef<Path>,
        cores: usize,
        durability: Durability,
        wait: Duration,
    ) -> Result<(PersistentLLFree, Recovery), PersistError> {
        let deadline = Instant::now() + wait;
        loop {
            match PersistentLLFree::open_now(path.as_ref(), cores, durability) {
                Err(PersistError::Locked) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                opened => return opened,
            }
        }
    }

    /// One try of [`open`](Self::open).
    fn open_now(
        path: &Path,
        cores: usize,
        durability: Durability,
    ) -> Result<(PersistentLLFree, Recovery), PersistError> {
        check_cores(cores).map_err(PersistError::Config)?;
        let mut file = open_locked(path, false)?;
        let found = file.metadata()?.len();
        let truncated = |expected| PersistError::Truncated { expected, found };
        let mut page = [0; PAGE];
        if found < PAGE as u64 {
            return Err(truncated(PAGE as u64));
        }
        file.read_exact(&mut page)?;
        let header = Header::parse(&page)?;
        if header.units > MAX_UNITS {
            return Err(PersistError::BadHeader("unit count"));
        }
        let config = Config::new(header.units, header.max_order).with_cores(cores);
        LLFree::check(config, header.options)
            .map_err(|_| PersistError::BadHeader("configuration"))?;
        if header.lower_bytes != Lower::bytes(header.units) {
            return Err(PersistError::BadHeader("lower level size"));
        }
        let expected = header.file_bytes();
        if found < expected {
            return Err(truncated(expected));
        }
        if found > expected {
            return Err(PersistError::WrongSize { expected, found });
        }
        let word_at = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().unwrap());
        let state = word_at(STATE_AT);
        if state != CLEAN && state != DIRTY {
            return Err(PersistError::BadHeader("shutdown marker"));
        }
        let started = Instant::now();
        let zone = PersistentLLFree::mapped(file, config, header.options, durability, |map| {
            // Before anything is trusted or written: a clean zone is taken as it is, so it
            // must be exactly as it was closed.
            match state {
                CLEAN if lower_checksum(map) != word_at(LOWER_SUM_AT) => {
                    Err(PersistError::LowerChecksum)
                }
                CLEAN => Ok(None),
                _ => Ok(Some(Init::Recover)),
            }
        })?;
        let recovery = Recovery {
            clean: state == CLEAN,
            allocated_units: zone.total_units() - zone.free_units(),
            elapsed: started.elapsed(),
        };
        // From here on a crash must be seen as one.
        zone.lower.write_back.write_header_word(STATE_AT, DIRTY)?;
        Ok((zone, recovery))
    }

    /// Writes the whole zone back to the file, records the lower level's checksum and marks
    /// it clean. On an error it stays unclean, and the next open recovers it.
    pub fn close(self) -> Result<(), PersistError> {
        let file = &self.lower.write_back;
        file.map.flush()?;
        // `self` is owned, so no operation runs: the lower level is still. Its checksum is
        // on the medium before the marker that makes the next open rely on it.
        file.write_header_word(LOWER_SUM_AT, lower_checksum(&file.map))?;
        file.write_header_word(STATE_AT, CLEAN)
    }

    /// Maps `file` (locked, of the header's size) and builds LLFree over the lower level in
    /// the mapping, taken as `init` says after reading the mapping, its upper level on the
    /// heap.
    fn mapped(
        file: File,
        config: Config,
        options: Options,
        durability: Durability,
        init: impl FnOnce(&MmapMut) -> Result<Option<Init>, PersistError>,
    ) -> Result<PersistentLLFree, PersistError> {
        // SAFETY: the file is locked against other zones, and its size was checked (or
        // set). Another process writing or truncating it regardless is outside what this
        // type can defend against (as for any `MAP_SHARED` mapping).
        let mut map = unsafe { MmapMut::map_mut(&file)? };
        let base = NonNull::new(map.as_mut_ptr()).expect("a mapping is never at null");
        let init = init(&map)?;
        // SAFETY: the lower level starts at PAGE, inside the mapping.
        let lower = (unsafe { base.add(PAGE) }, map.len() - PAGE);
        let settings = LLFree::builder(config).options(options).settings;
        let write_back = Durable {
            flush: durability.flush(),
            map,
            base,
            _file: file,
        };
        // SAFETY: the mapping is page-aligned and `PAGE + Lower::bytes(units)` long, so the
        // lines past the header page are 64-aligned and in bounds; it is locked against
        // other zones, and moves into the lower level as its write-back, which is dropped
        // after the lines over it.
        Ok(unsafe { LLFree::over_raw(settings, init, lower, write_back, None) }?)
    }
}

/// Opens the zone file at `path` (a new one, which must not exist, for `create`) and locks
/// it against other zones.
fn open_locked(path: &Path, create: bool) -> Result<File, PersistError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(PersistError::Locked),
        Err(TryLockError::Error(e)) => Err(PersistError::Io(e)),
    }
}
