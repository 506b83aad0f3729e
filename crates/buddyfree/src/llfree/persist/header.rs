//! The zone's header page: what the file holds and whether it was shut down cleanly.
//!
//! ```text
//! offset  0  magic "LLFreeZn"        offset 40  free_above_permille u32
//!         8  version u32                    44  reserve_on_free u32
//!        12  max_order u32                  48  lower_bytes u64
//!        16  units u64                      56  checksum u64 (FNV-1a of bytes 0..56)
//!        24  tree_children u64              64  state u64: CLEAN or DIRTY (own cache line)
//!        32  allocated_below_permille u32   72  lower_sum u64: checksum of the lower level
//!        (36: 4 bytes zero)                         written at the last clean close
//! ```
//! The fixed fields are written once, at creation, and checked by the checksum; the state
//! word and the lower level's checksum change at every close and are outside it.

use super::PersistError;
use crate::llfree::Options;

/// Bytes of the header page (the lower level starts here).
pub(crate) const PAGE: usize = 4096;
/// Identifies a zone file.
pub(crate) const MAGIC: [u8; 8] = *b"LLFreeZn";
/// The layout version this code reads and writes: 2 gave the bit fields two bits per unit,
/// 3 added the lower level's checksum, without which a clean zone of version 2 cannot be
/// verified, 4 dropped the start table (block starts are encoded in the slots: a lower level
/// a third the size, read differently), so a zone of version 3 is refused as such.
pub const VERSION: u32 = 4;
/// Offset of the state word.
pub(crate) const STATE_AT: usize = 64;
/// Offset of the lower level's checksum, on the state word's cache line.
pub(crate) const LOWER_SUM_AT: usize = 72;
/// State of a zone closed with `close` (its counters are complete).
pub(crate) const CLEAN: u64 = u64::from_le_bytes(*b"clean\0\0\0");
/// State of a zone in use, or of one whose user crashed.
pub(crate) const DIRTY: u64 = u64::from_le_bytes(*b"dirty\0\0\0");
const CHECKED: usize = 56;

/// The fixed fields of the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) units: usize,
    pub(crate) max_order: u32,
    pub(crate) options: Options,
    pub(crate) lower_bytes: usize,
}

impl Header {
    /// The file size the header asks for.
    pub(crate) fn file_bytes(&self) -> u64 {
        (PAGE + self.lower_bytes) as u64
    }

    /// The first [`STATE_AT`] bytes of the page (the state word is written apart).
    pub(crate) fn to_bytes(self) -> [u8; STATE_AT] {
        let mut b = [0; STATE_AT];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.max_order.to_le_bytes());
        b[16..24].copy_from_slice(&(self.units as u64).to_le_bytes());
        b[24..32].copy_from_slice(&(self.options.tree_children as u64).to_le_bytes());
        let permille = |p: usize| (p as u32).to_le_bytes();
        b[32..36].copy_from_slice(&permille(self.options.allocated_below_permille));
        b[40..44].copy_from_slice(&permille(self.options.free_above_permille));
        b[44..48].copy_from_slice(&self.options.reserve_on_free.to_le_bytes());
        b[48..56].copy_from_slice(&(self.lower_bytes as u64).to_le_bytes());
        let sum = checksum(&b[..CHECKED]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Reads a header page, checking identity, version and checksum (in that order, so that
    /// a foreign file is reported as such rather than as a damaged zone).
    pub(crate) fn parse(b: &[u8; PAGE]) -> Result<Header, PersistError> {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        if b[0..8] != MAGIC {
            return Err(PersistError::BadMagic);
        }
        if u32_at(8) != VERSION {
            return Err(PersistError::BadVersion { found: u32_at(8) });
        }
        if u64_at(56) != checksum(&b[..CHECKED]) {
            return Err(PersistError::BadChecksum);
        }
        let size = |v: u64| usize::try_from(v).map_err(|_| PersistError::BadHeader("size"));
        Ok(Header {
            units: size(u64_at(16))?,
            max_order: u32_at(12),
            options: Options {
                tree_children: size(u64_at(24))?,
                allocated_below_permille: u32_at(32) as usize,
                free_above_permille: u32_at(40) as usize,
                reserve_on_free: u32_at(44),
            },
            lower_bytes: size(u64_at(48))?,
        })
    }
}

/// FNV-1a, 64 bits: enough to tell a damaged or foreign header from ours.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The checksum of the lower level of the zone file `zone` (the bytes from [`PAGE`] on, a
/// whole number of cache lines), a word at a time, after the header's fixed fields and their
/// checksum (bytes 0..[`STATE_AT`]; the state word changes between close and open and is
/// left out). A clean zone is trusted as a whole, so the header must be as it was at close
/// too: one damaged with its own checksum made good (a smaller `max_order`, say, below
/// blocks the lower level holds) is caught here. Each step,
/// `h -> ((h ^ word) * K) ^ (.. >> 29)`, is a bijection of `h` for a given word and of the
/// word for a given `h`, so damage confined to one word always changes the result; other
/// damage (swapped words, several flips) escapes only by a 64-bit collision. It costs a
/// dependent multiply per word, linear in the lower level's size (66 KiB for a 1 GiB zone;
/// `lower_checksum_cost` below times it).
pub(crate) fn lower_checksum(zone: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let lower = &zone[PAGE..];
    let words = zone[..STATE_AT]
        .chunks_exact(8)
        .chain(lower.chunks_exact(8));
    words.fold(lower.len() as u64, |h, w| {
        let h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(K);
        h ^ (h >> 29)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn a_header_round_trips_and_each_damage_is_named() {
        let h = Header {
            units: 12345,
            max_order: 10,
            options: Options::default(),
            lower_bytes: 640,
        };
        let mut page = [0; PAGE];
        page[..STATE_AT].copy_from_slice(&h.to_bytes());
        assert_eq!(Header::parse(&page).unwrap(), h);
        let damaged = |at: usize, value: u8| {
            let mut bad = page;
            bad[at] = value;
            Header::parse(&bad).unwrap_err()
        };
        assert!(matches!(damaged(17, 0xFF), PersistError::BadChecksum));
        assert!(matches!(
            damaged(8, 2),
            PersistError::BadVersion { found: 2 }
        ));
        // A zone of version 3 (with the start table) is refused before anything else is read.
        assert!(matches!(
            damaged(8, 3),
            PersistError::BadVersion { found: 3 }
        ));
        assert!(matches!(damaged(0, b'X'), PersistError::BadMagic));
    }

    #[test]
    fn the_lower_checksum_sees_every_one_word_change_and_swaps() {
        let zone: Vec<u8> = (0..PAGE as u32 + 4096)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let sum = lower_checksum(&zone);
        // The header's fixed fields and the lower level; not the state word after them.
        let covered = (0..STATE_AT).chain(PAGE..zone.len());
        for at in covered {
            let mut flipped = zone.clone();
            flipped[at] ^= 1 << (at % 8);
            assert_ne!(lower_checksum(&flipped), sum, "flip at {at}");
        }
        for at in STATE_AT..PAGE {
            let mut flipped = zone.clone();
            flipped[at] ^= 0xFF;
            assert_eq!(lower_checksum(&flipped), sum, "flip at {at}");
        }
        let mut swapped = zone.clone();
        swapped.swap(PAGE + 8, PAGE + 4000);
        assert_ne!(lower_checksum(&swapped), sum);
        assert_ne!(
            lower_checksum(&[0; PAGE + 64]),
            lower_checksum(&[0; PAGE + 128])
        );
    }

    /// The cost stated in the module docs of `persist`.
    #[test]
    #[ignore = "a measurement: cargo test --release -p buddyfree --lib lower_checksum_cost -- --ignored --nocapture"]
    fn lower_checksum_cost() {
        use crate::llfree::lower::Lower;
        use std::time::Instant;
        for gib in [1usize, 16, 256] {
            // 4 KiB units.
            let bytes = Lower::bytes(gib << 18);
            let zone: Vec<u8> = (0..PAGE + bytes).map(|i| (i * 31 % 253) as u8).collect();
            let reps = 50;
            let started = Instant::now();
            let mut acc = 0u64;
            for _ in 0..reps {
                acc = acc.wrapping_add(lower_checksum(std::hint::black_box(&zone)));
            }
            let each = started.elapsed() / reps;
            std::println!(
                "{gib:>4} GiB zone: lower level {bytes} bytes, checksum {each:?} ({acc:x})"
            );
        }
    }
}
