//! One allocated bit per unit, updated atomically so that racing frees agree on a winner.

use alloc::boxed::Box;

use crate::filled;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::Error;

/// A fixed-size set of bits, all clear at first.
pub(super) struct AllocBits(Box<[AtomicU64]>);

impl AllocBits {
    pub(super) fn new(bits: usize) -> Result<Self, Error> {
        Ok(AllocBits(filled(bits.div_ceil(64), |_| AtomicU64::new(0))?))
    }

    /// Sets bit `i`; returns whether it was set already.
    pub(super) fn set(&self, i: usize) -> bool {
        let mask = 1 << (i % 64);
        self.0[i / 64].fetch_or(mask, Ordering::AcqRel) & mask != 0
    }

    /// Clears bit `i`; returns whether it was set.
    pub(super) fn clear(&self, i: usize) -> bool {
        let mask = 1 << (i % 64);
        self.0[i / 64].fetch_and(!mask, Ordering::AcqRel) & mask != 0
    }

    /// The first set bit at or after `from`, below `end` (a snapshot): one read per word.
    pub(super) fn next_set(&self, from: usize, end: usize) -> Option<usize> {
        let mut i = from;
        while i < end {
            let word = self.0[i / 64].load(Ordering::Acquire) >> (i % 64);
            if word != 0 {
                return Some(i + word.trailing_zeros() as usize).filter(|&set| set < end);
            }
            i += 64 - i % 64;
        }
        None
    }

    /// The number of set bits (a sum of per-word snapshots, exact when nothing races).
    pub(super) fn count(&self) -> usize {
        self.0
            .iter()
            .map(|w| w.load(Ordering::Acquire).count_ones() as usize)
            .sum()
    }
}
