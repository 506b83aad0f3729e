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

/// The first bit position where an aligned run of `2^order` zero bits starts in `word`
/// (`order <= 6`), if any.
#[inline]
pub(crate) fn find_run(word: u64, order: u32) -> Option<u32> {
    let mut free = !word;
    // After step i, bit p is set iff bits p..p + 2^(i+1) are all zero in `word`.
    for i in 0..order {
        free &= free >> (1u32 << i);
    }
    let starts = free & aligned(order);
    (starts != 0).then(|| starts.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

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
