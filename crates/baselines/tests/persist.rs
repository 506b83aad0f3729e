//! Persistent LLFree: bad and foreign files, clean and unclean reopening, the battery on a
//! zone over a file, and crash injection (a worker process killed with SIGKILL; this test
//! binary re-executes itself as the worker, see `worker_entry`).
#![cfg(not(loom))]

mod common;

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use buddyfree::llfree::persist::{Durability, PersistError, PersistentLLFree, Recovery};
use buddyfree::llfree::Options;
use buddyfree::magazine::{Backend, Magazine};
use buddyfree::{BlockAlloc, Config, Error};
use buddyfree_baselines::crash::{self, Form, Injector, Plan, Run};
use common::{Owners, Rng};
use proptest::prelude::*;

/// A fresh folder under the system's temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("buddyfree-persist-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Opens a zone this test closed: waits out the lock a forked child may share for a moment
/// (`crash_injections` starts workers; ThreadSanitizer starts its symbolizer).
fn open_when_unlocked(
    path: impl AsRef<Path>,
    cores: usize,
    durability: Durability,
) -> Result<(PersistentLLFree, Recovery), PersistError> {
    PersistentLLFree::open(path, cores, durability, Duration::from_secs(10))
}

/// Trees of 4 huge frames, so small zones have several.
fn options() -> Options {
    Options::default().with_tree_children(4)
}

fn create(path: &Path, units: usize, durability: Durability) -> PersistentLLFree {
    let config = Config::new(units, 10).with_cores(2);
    PersistentLLFree::create(path, config, options(), durability).unwrap()
}

/// Magazines for two cores in front of `zone`, over its configuration.
fn magazines(zone: PersistentLLFree) -> Magazine<PersistentLLFree> {
    let config = Config::new(zone.total_units(), zone.max_order()).with_cores(2);
    Magazine::new(config, zone).unwrap()
}

/// Allocates random blocks of orders 0..=10 until `n` calls were made; returns them.
fn fill(zone: &PersistentLLFree, n: usize, seed: u64) -> Vec<(usize, u32)> {
    let mut rng = Rng::new(seed);
    let mut live = Vec::new();
    for _ in 0..n {
        let order = (rng.below(11) as u32).min(rng.below(11) as u32);
        if let Ok(i) = zone.alloc(order, rng.below(2)) {
            live.push((i, order));
        }
        if rng.below(4) == 0 && !live.is_empty() {
            let (i, o) = live.swap_remove(rng.below(live.len()));
            zone.free(i, o, 0).unwrap();
        }
    }
    live.sort_unstable();
    live
}

fn free_all(zone: &PersistentLLFree, blocks: &[(usize, u32)]) {
    for &(i, o) in blocks {
        zone.free(i, o, 1).unwrap();
    }
}

#[test]
fn a_clean_close_and_open_keeps_every_block() {
    let dir = TempDir::new("clean");
    let path = dir.file("zone");
    let zone = create(&path, 9000, Durability::None);
    let live = fill(&zone, 400, 1);
    let taken: usize = live.iter().map(|&(_, o)| 1 << o).sum();
    assert_eq!(zone.blocks(), live);
    zone.close().unwrap();
    let (zone, recovery) = open_when_unlocked(&path, 3, Durability::None).unwrap();
    assert!(recovery.clean);
    assert_eq!(recovery.allocated_units, taken);
    assert_eq!(zone.free_units(), 9000 - taken);
    assert_eq!(zone.blocks(), live);
    free_all(&zone, &live);
    common::assert_whole(&zone);
    zone.close().unwrap();
}

#[test]
fn an_unclosed_zone_is_recovered_with_every_block() {
    let dir = TempDir::new("unclean");
    let path = dir.file("zone");
    let zone = create(&path, 1 << 14, Durability::CacheLine);
    let live = fill(&zone, 600, 2);
    let taken: usize = live.iter().map(|&(_, o)| 1 << o).sum();
    // Dropped without close: as after a crash with no operation in flight.
    drop(zone);
    // Damage what recovery must not trust: the counters of every child entry (the 16 words
    // after the bit fields, 32 frames of 128 bytes from the header page on), keeping the
    // huge flags (bits 19 and 20), which are the truth.
    let children_at = 4096 + 32 * 128;
    let bytes = fs::read(&path).unwrap();
    let damaged: Vec<u8> = bytes[children_at..children_at + 128]
        .chunks(4)
        .flat_map(|c| {
            let v = u32::from_le_bytes(c.try_into().unwrap());
            (v & !0x7FFFF | 0x5_5555).to_le_bytes()
        })
        .collect();
    patch(&path, children_at as u64, &damaged);
    let (zone, recovery) = open_when_unlocked(&path, 2, Durability::None).unwrap();
    assert!(!recovery.clean);
    assert_eq!(recovery.allocated_units, taken);
    assert_eq!(zone.free_units(), (1 << 14) - taken);
    assert_eq!(zone.blocks(), live);
    // A block of each order still frees with its order, and nothing else is free.
    free_all(&zone, &live);
    common::assert_whole(&zone);
    zone.close().unwrap();
    let (zone, recovery) = open_when_unlocked(&path, 2, Durability::None).unwrap();
    assert_eq!((recovery.clean, recovery.allocated_units), (true, 0));
    zone.close().unwrap();
}

/// A magazine in front of a zone keeps its frees in memory until it gives the blocks back:
/// parked blocks are still allocated in the zone if it is dropped without a drain (as in a
/// crash). Magazines in front of the recovered zone adopt its blocks, and `into_inner` gives
/// the parked ones back so that the zone closes cleanly.
#[test]
fn a_magazine_makes_frees_durable_when_it_gives_the_blocks_back() {
    let dir = TempDir::new("magazine");
    let path = dir.file("zone");
    let fast = magazines(create(&path, 1 << 12, Durability::None));
    // As LLFree's, so the magazine lines its batches up with the zone's frames.
    assert!(fast.inner().alloc_bulk_continues());
    let kept = fast.alloc(2, 0).unwrap();
    let parked = fast.alloc(0, 1).unwrap();
    fast.free(parked, 0, 1).unwrap();
    let parked_units = (1 << 12) - 4 - fast.inner().free_units();
    assert!(fast.inner().blocks().contains(&(parked, 0)));
    drop(fast);
    let (zone, recovery) = open_when_unlocked(&path, 2, Durability::None).unwrap();
    assert!(!recovery.clean);
    assert_eq!(recovery.allocated_units, 4 + parked_units);

    let fast = magazines(zone);
    for (i, order) in fast.inner().blocks() {
        if i != kept {
            if i % (2 << order) == 0 {
                assert_eq!(fast.free(i, order + 1, 1), Err(Error::OrderMismatch));
            }
            fast.free(i, order, 1).unwrap();
            assert_eq!(fast.free(i, order, 0), Err(Error::NotAllocated));
        }
    }
    let zone = fast.into_inner();
    assert_eq!(zone.blocks(), [(kept, 2)]);
    zone.close().unwrap();
    let (zone, recovery) = open_when_unlocked(&path, 2, Durability::None).unwrap();
    assert_eq!((recovery.clean, recovery.allocated_units), (true, 4));
    zone.close().unwrap();
}

/// Blocks of orders 6–8 claimed in bulk where a whole frame is the caller's (plain stores)
/// and given back by an owned bulk free (plain stores) reach the file as single operations
/// would: an unclean reopen finds exactly the claimed blocks, and after the owned free a
/// clean one finds none.
#[test]
fn whole_frames_claimed_in_bulk_and_freed_owned_are_durable() {
    let dir = TempDir::new("owned");
    let path = dir.file("zone");
    for order in 6..=8u32 {
        let zone = create(&path, 1 << 12, Durability::CacheLine);
        let mut out = vec![0; 512 >> order];
        assert_eq!(zone.alloc_bulk(order, 0, &mut out), Ok(out.len()));
        drop(zone);
        let (zone, recovery) = open_when_unlocked(&path, 2, Durability::CacheLine).unwrap();
        assert!(!recovery.clean);
        assert_eq!(recovery.allocated_units, 512, "order {order}");
        let mut blocks: Vec<(usize, u32)> = out.iter().map(|&i| (i, order)).collect();
        blocks.sort_unstable();
        assert_eq!(zone.blocks(), blocks);
        // SAFETY: the zone handed these blocks out at `order`, each once, and nothing else
        // frees them.
        unsafe { zone.free_bulk_owned(&out, order, 1) }.unwrap();
        assert_eq!(zone.free(out[0], order, 0), Err(Error::NotAllocated));
        zone.close().unwrap();
        let (zone, recovery) = open_when_unlocked(&path, 2, Durability::CacheLine).unwrap();
        assert_eq!((recovery.clean, recovery.allocated_units), (true, 0));
        zone.close().unwrap();
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn create_never_overwrites_a_file() {
    let dir = TempDir::new("exists");
    let path = dir.file("zone");
    fs::write(&path, b"precious").unwrap();
    let config = Config::new(4096, 9);
    let err =
        PersistentLLFree::create(&path, config, Options::for_config(config), Durability::None)
            .err()
            .unwrap();
    assert!(matches!(&err, PersistError::Io(e) if e.kind() == ErrorKind::AlreadyExists));
    assert_eq!(fs::read(&path).unwrap(), b"precious");
    // Above the whole tree of the paper's trees (14).
    let config = Config::new(1 << 16, 15);
    let err = PersistentLLFree::create(
        dir.file("z2"),
        config,
        Options::for_config(config),
        Durability::None,
    )
    .err()
    .unwrap();
    assert!(matches!(err, PersistError::Config(_)), "{err}");
}

/// Opens a damaged copy of a closed zone, expecting an error and the file unchanged.
fn open_damaged(dir: &TempDir, name: &str, damage: impl FnOnce(&Path)) -> PersistError {
    let path = dir.file(name);
    create(&path, 5000, Durability::None).close().unwrap();
    damage(&path);
    let before = fs::read(&path).unwrap();
    let err = open_when_unlocked(&path, 1, Durability::None)
        .err()
        .unwrap_or_else(|| panic!("{name}: a damaged zone opened"));
    assert_eq!(fs::read(&path).unwrap(), before, "{name}: the file changed");
    assert!(!err.to_string().is_empty());
    err
}

fn patch(path: &Path, at: u64, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, at).unwrap();
}

/// Patches a header field and recomputes the header checksum (FNV-1a of bytes 0..56).
fn patch_field(path: &Path, at: u64, bytes: &[u8]) {
    patch(path, at, bytes);
    let head = fs::read(path).unwrap();
    let sum = head[..56].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    patch(path, 56, &sum.to_le_bytes());
}

fn resize(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn bad_and_foreign_files_give_named_errors_and_stay_untouched() {
    let dir = TempDir::new("bad");
    let len = |p: &Path| fs::metadata(p).unwrap().len();
    let err = open_damaged(&dir, "empty", |p| resize(p, 0));
    assert!(
        matches!(
            err,
            PersistError::Truncated {
                expected: 4096,
                found: 0
            }
        ),
        "{err}"
    );
    let err = open_damaged(&dir, "foreign", |p| {
        let mut f = fs::File::create(p).unwrap();
        f.write_all(&[b'#'; 10000]).unwrap();
    });
    assert!(matches!(err, PersistError::BadMagic), "{err}");
    let err = open_damaged(&dir, "version", |p| patch(p, 8, &[7]));
    assert!(
        matches!(err, PersistError::BadVersion { found: 7 }),
        "{err}"
    );
    // A zone of the previous layout (version 3, with a start table), its header intact: the
    // error names both versions.
    let err = open_damaged(&dir, "version 3", |p| {
        patch_field(p, 8, &3u32.to_le_bytes())
    });
    assert!(
        matches!(err, PersistError::BadVersion { found: 3 }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("version 3, this build reads version 4"),
        "{err}"
    );
    let err = open_damaged(&dir, "checksum", |p| patch(p, 16, &[0xFF]));
    assert!(matches!(err, PersistError::BadChecksum), "{err}");
    let err = open_damaged(&dir, "truncated", |p| resize(p, len(p) - 64));
    assert!(matches!(err, PersistError::Truncated { .. }), "{err}");
    let err = open_damaged(&dir, "grown", |p| resize(p, len(p) + 4096));
    assert!(matches!(err, PersistError::WrongSize { .. }), "{err}");
    // Fields no zone can have, under a correct checksum.
    let err = open_damaged(&dir, "units", |p| {
        patch_field(p, 16, &(1u64 << 60).to_le_bytes())
    });
    assert!(matches!(err, PersistError::BadHeader(_)), "{err}");
    // Above any tree's whole-tree order (30).
    let err = open_damaged(&dir, "order", |p| patch_field(p, 12, &31u32.to_le_bytes()));
    assert!(matches!(err, PersistError::BadHeader(_)), "{err}");
    let err = open_damaged(&dir, "marker", |p| patch(p, 64, b"??"));
    assert!(matches!(err, PersistError::BadHeader(_)), "{err}");
    // A free unit past the end of the partial last frame: recovery refuses it and changes
    // nothing, though frame 0's counter (damaged too, flags kept) would need rebuilding.
    let err = open_damaged(&dir, "lower", |p| {
        patch(p, 64, b"dirty");
        patch(p, 4096 + 10 * 128, &[0x33, 0x01]);
        patch(p, 4096 + 9 * 128 + 127, &[0]);
    });
    assert!(
        matches!(err, PersistError::Corrupt { frame: 9, .. }),
        "{err}"
    );
    let err = open_when_unlocked(dir.file("missing"), 1, Durability::None)
        .err()
        .unwrap();
    assert!(matches!(&err, PersistError::Io(e) if e.kind() == ErrorKind::NotFound));
}

/// A header damaged with its checksum made good so that it claims a smaller largest order
/// than blocks the zone holds (which could then never be freed): a clean zone is refused by
/// the checksum written at its close, which covers the header's fields, and a crashed one by
/// recovery; either way untouched.
#[test]
fn a_header_claiming_a_smaller_largest_order_is_refused() {
    let dir = TempDir::new("order");
    let path = dir.file("zone");
    let zone = create(&path, 4096, Durability::None);
    let blocks = [
        (zone.alloc(10, 0).unwrap(), 10),
        (zone.alloc(3, 0).unwrap(), 3),
    ];
    zone.close().unwrap();
    let clean = fs::read(&path).unwrap();
    let refused = |what: &str| {
        let before = fs::read(&path).unwrap();
        let err = open_when_unlocked(&path, 1, Durability::None)
            .err()
            .unwrap_or_else(|| panic!("{what}: opened"));
        assert_eq!(fs::read(&path).unwrap(), before, "{what}: the file changed");
        err
    };
    patch_field(&path, 12, &6u32.to_le_bytes());
    let err = refused("clean");
    assert!(matches!(err, PersistError::LowerChecksum), "{err}");
    patch(&path, 64, b"dirty");
    let err = refused("crashed");
    assert!(
        matches!(
            err,
            PersistError::Corrupt {
                what: "a block above the largest order",
                ..
            }
        ),
        "{err}"
    );
    fs::write(&path, &clean).unwrap();
    let (zone, recovery) = open_when_unlocked(&path, 1, Durability::None).unwrap();
    assert!(recovery.clean);
    free_all(&zone, &blocks);
    zone.close().unwrap();
}

/// Opens the zone at `path` (a damaged copy of a clean zone holding `held`): it must fail
/// and leave the file byte-identical, or open into a consistent state that hands out no
/// block past the end or over a held unit. Returns whether it opened.
fn refused_or_consistent(path: &Path, units: usize, held: &[(usize, u32)], what: &str) -> bool {
    let before = fs::read(path).unwrap();
    let (zone, _) = match open_when_unlocked(path, 2, Durability::None) {
        Err(e) => {
            assert_eq!(
                fs::read(path).unwrap(),
                before,
                "{what}: refused ({e}) but changed"
            );
            return false;
        }
        Ok(opened) => opened,
    };
    let owners = Owners::new(units);
    for &(i, o) in held {
        owners.claim(i, o, 1);
    }
    // Every block the zone will still hand out, largest first: none past the end, none over
    // a held unit (`claim` panics on an overlap).
    let mut got = Vec::new();
    for order in (0..=10).rev() {
        while let Ok(i) = zone.alloc(order, 0) {
            assert!(
                i + (1 << order) <= units,
                "{what}: block ({i}, {order}) past the end"
            );
            owners.claim(i, order, 2);
            got.push((i, order));
        }
    }
    for &(i, o) in &got {
        zone.free(i, o, 0).unwrap();
    }
    true
}

#[test]
fn a_zone_damaged_after_a_clean_close_is_refused_untouched_or_consistent() {
    let dir = TempDir::new("damaged-clean");
    let path = dir.file("zone");
    // A partial last frame, so that "past the end" exists.
    let units = 5000;
    let zone = create(&path, units, Durability::None);
    let held = fill(&zone, 300, 7);
    zone.close().unwrap();
    let clean = fs::read(&path).unwrap();
    let restore = || fs::write(&path, &clean).unwrap();
    let lower = 4096..clean.len();
    // The header's fields and state line, a few bytes of the page nothing reads, then one
    // bit of every byte of the lower level.
    let flips = (0..128).chain([200, 1000, 4095]).chain(lower.clone());
    let mut opened = 0;
    for at in flips {
        restore();
        patch(&path, at as u64, &[clean[at] ^ (1 << (at % 8))]);
        opened += refused_or_consistent(&path, units, &held, &format!("flip at {at}")) as usize;
    }
    // Only the flips in bytes nothing reads open (and the state word's own flips do not).
    assert_eq!(opened, 3 + (128 - 80), "flips that opened");
    for len in [
        0,
        8,
        4095,
        4096,
        4096 + 64,
        clean.len() as u64 - 64,
        clean.len() as u64 - 1,
    ] {
        restore();
        resize(&path, len);
        assert!(!refused_or_consistent(
            &path,
            units,
            &held,
            &format!("cut to {len}")
        ));
    }
    let mut rng = Rng::new(0x5CA9);
    for _ in 0..300 {
        restore();
        let (a, b) = (
            lower.start + rng.below(lower.len()),
            lower.start + rng.below(lower.len()),
        );
        let width = if rng.below(2) == 0 { 1 } else { 8 };
        let (a, b) = (a.min(clean.len() - width), b.min(clean.len() - width));
        if a.abs_diff(b) < width || clean[a..a + width] == clean[b..b + width] {
            continue;
        }
        patch(&path, a as u64, &clean[b..b + width]);
        patch(&path, b as u64, &clean[a..a + width]);
        let what = format!("swap of {width} bytes at {a} and {b}");
        assert!(
            !refused_or_consistent(&path, units, &held, &what),
            "{what} opened"
        );
    }
    // The undamaged zone still opens, clean, with every block.
    restore();
    let (zone, recovery) = open_when_unlocked(&path, 2, Durability::None).unwrap();
    assert!(recovery.clean);
    assert_eq!(zone.blocks(), held);
    zone.close().unwrap();
}

#[test]
fn an_open_zone_is_locked() {
    let dir = TempDir::new("locked");
    let path = dir.file("zone");
    let zone = create(&path, 4096, Durability::None);
    let err = PersistentLLFree::open(&path, 1, Durability::None, Duration::ZERO)
        .err()
        .unwrap();
    assert!(matches!(err, PersistError::Locked), "{err}");
    let waited = Instant::now();
    let err = PersistentLLFree::open(&path, 1, Durability::None, Duration::from_millis(50))
        .err()
        .unwrap();
    assert!(matches!(err, PersistError::Locked), "{err}");
    assert!(waited.elapsed() >= Duration::from_millis(50));
    // Closed on another thread while this one waits: the wait ends in an open zone. Joined
    // explicitly: ThreadSanitizer does not see the fence in the join handle's drop (std is
    // not instrumented), and would report the packet's free as a race.
    let closer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        zone.close().unwrap();
    });
    let opened = PersistentLLFree::open(&path, 1, Durability::None, Duration::from_secs(60));
    closer.join().unwrap();
    let (zone, recovery) = opened.unwrap();
    assert!(recovery.clean);
    zone.close().unwrap();
    let err = open_when_unlocked(&path, 0, Durability::None)
        .err()
        .unwrap();
    assert!(matches!(err, PersistError::Config(_)), "{err}");
    open_when_unlocked(&path, 1, Durability::None)
        .unwrap()
        .0
        .close()
        .unwrap();
}

#[test]
fn stress_on_zones_with_each_durability() {
    let dir = TempDir::new("stress");
    for (name, durability, steps) in [
        ("none", Durability::None, 3000),
        ("line", Durability::CacheLine, 3000),
        ("msync", Durability::Msync, 200),
    ] {
        let zone = create(&dir.file(name), 1 << 13, durability);
        common::stress(&zone, 2, steps, 10);
        common::double_free_race(&zone, 2, 20, 3);
        zone.close().unwrap();
    }
}

/// The persistent zone shares LLFree's lower level: its bad frees must be as exact under
/// races with allocations of other orders.
#[test]
fn raced_double_frees_on_a_zone_never_free_a_block_of_another_order() {
    let dir = TempDir::new("double");
    let path = dir.file("zone");
    let zone = PersistentLLFree::create(
        &path,
        Config::new(512, 4).with_cores(2),
        options(),
        Durability::CacheLine,
    )
    .unwrap();
    for order in [0, 2] {
        common::double_free_against_other_orders(&zone, 2, 100_000, order);
    }
    zone.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn a_zone_matches_the_model(ops in common::ops(3000, 10, 300)) {
        let dir = TempDir::new("model");
        let config = Config::new(3000, 10);
        let zone = PersistentLLFree::create(dir.file("zone"), config, options(), Durability::None).unwrap();
        common::check_against_model(&zone, config, &ops);
    }
}

/// The worker of the crash injections: does nothing unless this binary was started as one.
#[test]
fn worker_entry() {
    crash::run_worker_if_asked();
}

fn worker_command() -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "worker_entry", "--test-threads=1"]);
    cmd
}

/// Kills a worker (3 threads allocating and freeing on a zone of 2^14 units) at a random
/// moment, 100 times with orders 0..=11 (11: a whole tree of 4 frames) and 30 times with
/// order 0 only on a zone file, and 60 times with orders 0..=11 on LLFree over caller memory
/// (a mapped file holding the lower level alone, recovered with `Init::Recover`); after each:
/// recovery succeeds, every block the worker had recorded is allocated with its order, at
/// most the blocks of its operations in flight are lost (order 0: at most one frame per
/// thread), a stress with an ownership map holding the worker's blocks hands out no unit
/// twice, and once everything is freed the zone is whole.
#[test]
fn crash_injections() {
    let dir = TempDir::new("crash");
    let mut rng = Rng::new(0xC4A5);
    let mut in_flight_somewhere = 0;
    let mut bulk_in_flight = 0;
    let forms = [
        ("mixed", Form::Zone, 11, 100),
        ("order0", Form::Zone, 0, 30),
        ("memory", Form::CallerMemory, 11, 60),
    ];
    for (name, form, max_order, rounds) in forms {
        let threads = 3;
        let plan = Plan {
            threads,
            slots: 48,
            max_order,
        };
        let sub = dir.file(name);
        fs::create_dir(&sub).unwrap();
        // One zone for all rounds, each starting from the clean close of the last.
        let config = Config::new(1 << 14, 11);
        let injector = Injector::with_form(&sub, config, options(), plan, form).unwrap();
        let mut lost_somewhere = 0;
        for round in 0..rounds {
            let run = Run {
                durability: if round % 2 == 0 {
                    Durability::None
                } else {
                    Durability::CacheLine
                },
                seed: rng.next(),
                kill_after: Duration::from_millis(1 + rng.below(20) as u64),
            };
            let got = injector
                .inject(worker_command(), run)
                .unwrap_or_else(|e| panic!("{name} round {round}: {e}"));
            let allocated = got.recovery.allocated_units;
            let committed = got.committed_units();
            let bound = got.in_flight_units;
            assert!(
                committed <= allocated && allocated <= committed + bound,
                "{name} round {round}: {allocated} units allocated, {committed} committed, {} in flight",
                got.in_flight_units
            );
            lost_somewhere += (got.lost_units() > 0) as usize;
            in_flight_somewhere += (got.in_flight_ops > 0) as usize;
            bulk_in_flight += got.in_flight_bulk;
            let owners = Owners::new(1 << 14);
            let held: Vec<(usize, u32)> = got.held.iter().chain(&got.orphans).copied().collect();
            for &(i, o) in &held {
                owners.claim(i, o, 1);
            }
            // Two threads allocate and free at random while the worker's blocks stay claimed.
            common::stress_with(&*got.zone, &owners, 2, 300, 11);
            for &(i, o) in &held {
                owners.release(i, o, 1);
                got.zone.free(i, o, 0).unwrap();
            }
            common::assert_whole(&*got.zone);
            got.zone.close().unwrap();
        }
        eprintln!("{name}: {lost_somewhere} of {rounds} injections lost units");
    }
    eprintln!("kills in the middle of a bulk operation: {bulk_in_flight}");
    // Not an assertion about the allocator: checks that the kills hit operations.
    assert!(in_flight_somewhere > 10, "kills never hit an operation");
}
