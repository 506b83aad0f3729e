//! Opening a corrupted persistent LLFree zone: any damage to the file (header fields with or
//! without a fixed-up checksum, the lower level's bit fields and counters, the length) is
//! either refused with an error or recovered into a zone that is consistent: its recovered
//! blocks match its count, free cleanly, and then every unit is free again.
//!
//! Both kinds of zone are damaged, in the header and in the lower level. A crashed zone is
//! rebuilt from its bit fields. A zone closed cleanly is trusted only while its lower level
//! matches the checksum written at that close, so damage there must never open as clean
//! (it once did: a bit field flipped after a clean close opened without an error).
//!
//! Input: a flags byte (base zone clean or crashed, fix the header checksum, truncate),
//! then 3 bytes per patch: a 16-bit offset (below 0x8000 into the header page, from 0x8000
//! into the lower level) and a value XORed in there.

#![no_main]

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use buddyfree::llfree::persist::{Durability, PersistentLLFree};
use buddyfree::llfree::Options;
use buddyfree::{BlockAlloc, Config};
use libfuzzer_sys::fuzz_target;

/// The header's checksum: FNV-1a of bytes 0..56, stored at 56.
const SUM_AT: usize = 56;
const PAGE: usize = 4096;

/// A clean and a crashed zone, made once per process: (clean bytes, crashed bytes).
fn bases() -> &'static (Vec<u8>, Vec<u8>) {
    static BASES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    BASES.get_or_init(|| {
        let path = scratch("base");
        let _ = fs::remove_file(&path);
        let config = Config::new(1 << 14, 10);
        let zone =
            PersistentLLFree::create(&path, config, Options::for_config(config), Durability::None)
                .unwrap();
        for order in [0, 3, 9, 10, 0, 1] {
            zone.alloc(order, 0).unwrap();
        }
        zone.close().unwrap();
        let clean = fs::read(&path).unwrap();
        let (zone, _) = PersistentLLFree::open(&path, 1, Durability::None, Duration::ZERO).unwrap();
        let index = zone.alloc(5, 0).unwrap();
        zone.free(index, 5, 0).unwrap();
        zone.alloc(2, 0).unwrap();
        drop(zone); // not closed: as if the process had crashed
        let crashed = fs::read(&path).unwrap();
        fs::remove_file(&path).unwrap();
        (clean, crashed)
    })
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("buddyfree-fuzz-{}-{name}.zone", std::process::id()))
}

fn checksum(head: &[u8]) -> u64 {
    head[..SUM_AT]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, patches)) = data.split_first() else {
        return;
    };
    let (clean, crashed) = bases();
    let crash = flags & 1 != 0;
    let mut bytes = if crash {
        crashed.clone()
    } else {
        clean.clone()
    };
    for p in patches.chunks_exact(3) {
        let offset = usize::from(u16::from_le_bytes([p[0], p[1]]));
        // Low offsets hit the header page, high ones the lower level that follows it.
        let at = if offset < 0x8000 {
            offset % PAGE
        } else {
            PAGE + offset % (bytes.len() - PAGE)
        };
        bytes[at] ^= p[2];
    }
    let base = if crash { crashed } else { clean };
    let lower_damaged = bytes[PAGE..] != base[PAGE..];
    if flags & 2 != 0 {
        let sum = checksum(&bytes);
        bytes[SUM_AT..SUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
    }
    if flags & 4 != 0 {
        let keep = bytes.len() - usize::from(flags >> 3) * 64;
        bytes.truncate(keep);
    }
    let path = scratch("zone");
    fs::write(&path, &bytes).unwrap();
    if let Ok((zone, recovery)) = PersistentLLFree::open(&path, 2, Durability::None, Duration::ZERO)
    {
        // Only a recovery may take a damaged lower level (a state word patched to dirty
        // makes one); a clean open trusts the counters, which the damage may contradict.
        assert!(
            !(recovery.clean && lower_damaged),
            "a lower level damaged after its clean close was trusted"
        );
        let blocks = zone.blocks();
        let held: usize = blocks.iter().map(|&(_, order)| 1usize << order).sum();
        assert_eq!(
            held, recovery.allocated_units,
            "recovered blocks and count disagree"
        );
        assert_eq!(zone.free_units() + held, zone.total_units());
        for (index, order) in blocks {
            zone.free(index, order, 0).unwrap();
        }
        assert_eq!(zone.free_units(), zone.total_units());
        let order = zone.max_order();
        let index = zone.alloc(order, 1).unwrap();
        zone.free(index, order, 1).unwrap();
        zone.close().unwrap();
    }
    fs::remove_file(&path).unwrap();
});
