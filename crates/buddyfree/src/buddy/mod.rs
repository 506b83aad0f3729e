//! Buddy systems after Knuth and the real-time buddy paper (`papers/realtime-buddy.txt`):
//! Knuth's buddy with eager merging ([`Knuth`]), the estranged buddy with delayed
//! recombination ([`Estranged`]), and on-demand defragmentation for both ([`defrag`]).
//!
//! Both are sequential ([`crate::SeqBlockAlloc`]); [`crate::Locked`] lifts them into a
//! [`crate::BlockAlloc`]. The parallel binary buddy with one lock per level lives in
//! [`crate::locked::per_level`] and shares the free lists and tags defined here.
//!
//! Memory picture shared by all of them: no per-operation heap allocation; every table is
//! indexed by unit and allocated once.
//!
//! ```text
//! unit index   0     1     2     3     4 ...  units-1
//! tags       [F2 ][ -  ][ -  ][ -  ][U0 ] ... : per block start: Free(order) / Used(order) / none
//! next, prev [ .  ][    ][    ][    ][    ] ... : links of the free list the block start is on
//! heads      [order 0][order 1]...[max_order] : first element and length of each list
//! ```

pub mod knuth;
pub(crate) mod lists;
pub(crate) mod tags;

pub use knuth::Knuth;

/// The blocks a region of `units` units starts with: blocks of `max_order` from unit 0, then
/// the tail beyond the last whole one cut into ever smaller aligned blocks (the binary digits
/// of the remainder). Each tail block's buddy would reach past `units`, so none ever merges.
pub(crate) fn initial_blocks(units: usize, max_order: u32) -> impl Iterator<Item = (usize, u32)> {
    let mut index = 0;
    core::iter::from_fn(move || {
        if index >= units {
            return None;
        }
        let fits = (units - index).ilog2();
        let order = fits.min(max_order);
        let block = (index, order);
        index += 1 << order;
        Some(block)
    })
}

/// The buddy of the block of `2^order` units at `index`.
#[inline]
pub(crate) fn buddy_of(index: usize, order: u32) -> usize {
    index ^ (1 << order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn initial_blocks_cover_the_region_aligned() {
        for units in 1..200 {
            for max_order in 0..6 {
                if 1 << max_order > units {
                    continue;
                }
                let blocks: Vec<_> = initial_blocks(units, max_order).collect();
                let mut next = 0;
                for &(i, o) in &blocks {
                    assert_eq!(i, next);
                    assert_eq!(i % (1 << o), 0);
                    assert!(o <= max_order);
                    next += 1 << o;
                }
                assert_eq!(next, units);
            }
        }
    }
}
