//! Pure bit tricks on one 64-bit word: runs of zero bits (free units' slots in LLFree's bit
//! fields, where a unit has two bits).

/// Bits at the positions a block of `2^order` units may start at (multiples of `2^order`),
/// for `order <= 6`.
const fn aligned(order: u32) -> u64 {
    match order {
        0 => u64::MAX,
        1 => 0x5555_5555_5555_5555,
        2 => 0x1111_1111_1111_1111,
        3 => 0x0101_0101_0101_0101,
        4 => 0x0001_0001_0001_0001,
        5 => 0x0000_0001_0000_0001,
        _ => 1,
    }
}

/// The mask of a block of `2^order` units (`order <= 6`) starting at bit 0.
#[inline]
pub(crate) const fn block_mask(order: u32) -> u64 {
    if order >= 6 {
        u64::MAX
    } else {
        (1u64 << (1u32 << order)) - 1
    }
}

/// The bit positions where aligned runs of `2^order` zero bits start in `word`
/// (`order <= 6`), one set bit per run.
#[inline]
pub(crate) fn free_runs(word: u64, order: u32) -> u64 {
    let mut free = !word;
    // After step i, bit p is set iff bits p..p + 2^(i+1) are all zero in `word`.
    for i in 0..order {
        free &= free >> (1u32 << i);
    }
    free & aligned(order)
}

/// The first bit position where an aligned run of `2^order` zero bits starts in `word`
/// (`order <= 6`), if any.
#[inline]
pub(crate) fn find_run(word: u64, order: u32) -> Option<u32> {
    let starts = free_runs(word, order);
    (starts != 0).then(|| starts.trailing_zeros())
}

/// The lowest `n` set bits of `bits` (all of them if it has fewer).
#[inline]
pub(crate) fn lowest_bits(mut bits: u64, n: usize) -> u64 {
    let mut taken = 0;
    for _ in 0..n {
        if bits == 0 {
            break;
        }
        let low = bits & bits.wrapping_neg();
        taken |= low;
        bits ^= low;
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_lowest_bits() {
        assert_eq!(lowest_bits(0, 3), 0);
        assert_eq!(lowest_bits(0b1011_0100, 0), 0);
        assert_eq!(lowest_bits(0b1011_0100, 3), 0b11_0100);
        assert_eq!(lowest_bits(0b1011_0100, 9), 0b1011_0100);
        assert_eq!(lowest_bits(u64::MAX, 64), u64::MAX);
        assert_eq!(lowest_bits(1 << 63, 1), 1 << 63);
    }

    #[test]
    fn finds_every_aligned_free_run() {
        // Bits 0 and 5..=15 free: aligned runs of 8 at 8, of 4 at 8 and 12, of 2 from 6 on.
        let word = 0b1_1110 | !0xFFFF;
        assert_eq!(free_runs(word, 0), 1 | 0xFFE0);
        assert_eq!(free_runs(word, 1), 0b0101_0101_0100_0000);
        assert_eq!(free_runs(word, 2), 1 << 8 | 1 << 12);
        assert_eq!(free_runs(word, 3), 1 << 8);
        assert_eq!(free_runs(word, 4), 0);
        assert_eq!(free_runs(0, 6), 1);
        assert_eq!(free_runs(0, 5), 1 | 1 << 32);
        assert_eq!(free_runs(u64::MAX, 0), 0);
    }

    #[test]
    fn finds_only_aligned_free_runs() {
        assert_eq!(find_run(0, 6), Some(0));
        assert_eq!(find_run(1, 6), None);
        assert_eq!(find_run(1, 0), Some(1));
        assert_eq!(find_run(u64::MAX, 0), None);
        // Bits 1..=4 free is not an aligned run of 4; 8..12 is.
        assert_eq!(find_run(!0b1111_0001_1110u64, 2), Some(8));
        assert_eq!(find_run(0xFFFF_FFFF, 5), Some(32));
        assert_eq!(find_run(0xFFFF_FFFE_FFFF_FFFF, 5), None);
        for order in 0..=6 {
            for p in (0..64).step_by(1 << order) {
                let word = !(block_mask(order) << p);
                assert_eq!(find_run(word, order), Some(p), "order {order} at {p}");
            }
        }
    }
}
