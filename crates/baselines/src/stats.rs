//! Huge-frame fragmentation metrics (LLFree, ATC'23, §5.6).
//!
//! The region is cut into huge frames of [`HUGE_FRAME_UNITS`] units (2 MiB of 4 KiB frames).
//! Given how many units are free in each huge frame, two numbers describe fragmentation:
//!
//! - *free huge frames*: huge frames with every unit free, which a huge allocation can take
//!   after all caches are drained, without compaction;
//! - *compaction cost*: the least number of single-unit moves (4 KiB copies) that frees the
//!   largest possible number of huge frames, `floor(total free / HUGE_FRAME_UNITS)`.
//!
//! The paper computes the cost by sorting the per-frame free counts and emptying the fullest
//! (most free) frames into the emptiest ones; that is what [`fragmentation`] does.

use alloc::vec::Vec;

/// Units in one huge frame: 2 MiB of 4 KiB units.
pub const HUGE_FRAME_UNITS: usize = 512;

/// The fragmentation of a region of huge frames, after LLFree §5.6.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fragmentation {
    /// Huge frames considered.
    pub frames: usize,
    /// Free units over all of them.
    pub free_units: usize,
    /// Huge frames with every unit free.
    pub free_frames: usize,
    /// Huge frames that could be freed by compaction: `free_units / frame_units`.
    pub possible_frames: usize,
    /// The least number of unit moves that frees `possible_frames` huge frames.
    pub compaction_cost: usize,
}

/// Fragmentation of huge frames of [`HUGE_FRAME_UNITS`] units; `free_per_frame[i]` is the
/// number of free units in huge frame `i`. Counts above the frame size are taken as a whole
/// free frame.
#[must_use]
pub fn huge_fragmentation(free_per_frame: &[usize]) -> Fragmentation {
    fragmentation(free_per_frame, HUGE_FRAME_UNITS)
}

/// Fragmentation of frames of `frame_units` units each (see [`huge_fragmentation`]).
///
/// Freeing `k` frames means moving every allocated unit out of them, so the cheapest `k`
/// frames to free are the `k` with the most free units, and the cost is their allocated
/// units. The moved units always fit elsewhere: the other frames hold
/// `free_units - (k * frame_units - cost)` free units, which is at least `cost` because
/// `k * frame_units <= free_units`.
#[must_use]
pub fn fragmentation(free_per_frame: &[usize], frame_units: usize) -> Fragmentation {
    if frame_units == 0 {
        return Fragmentation {
            frames: free_per_frame.len(),
            ..Fragmentation::default()
        };
    }
    let mut free: Vec<usize> = free_per_frame.iter().map(|&f| f.min(frame_units)).collect();
    let free_units: usize = free.iter().sum();
    let possible_frames = free_units / frame_units;
    free.sort_unstable_by(|a, b| b.cmp(a));
    let compaction_cost = free[..possible_frames]
        .iter()
        .map(|&f| frame_units - f)
        .sum();
    Fragmentation {
        frames: free.len(),
        free_units,
        free_frames: free.iter().filter(|&&f| f == frame_units).count(),
        possible_frames,
        compaction_cost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: usize = HUGE_FRAME_UNITS;

    #[test]
    fn empty_region_has_nothing() {
        assert_eq!(huge_fragmentation(&[]), Fragmentation::default());
    }

    #[test]
    fn all_free_costs_nothing() {
        let f = huge_fragmentation(&[H, H, H]);
        assert_eq!(
            (f.free_frames, f.possible_frames, f.compaction_cost),
            (3, 3, 0)
        );
        assert_eq!(f.free_units, 3 * H);
    }

    #[test]
    fn all_allocated_has_no_possible_frame() {
        let f = huge_fragmentation(&[0, 0]);
        assert_eq!(
            (f.free_frames, f.possible_frames, f.compaction_cost),
            (0, 0, 0)
        );
    }

    #[test]
    fn two_half_frames_make_one_by_moving_half_a_frame() {
        let f = huge_fragmentation(&[H / 2, H / 2]);
        assert_eq!(f.free_frames, 0);
        assert_eq!(f.possible_frames, 1);
        assert_eq!(f.compaction_cost, H / 2);
    }

    #[test]
    fn the_fullest_frames_are_emptied() {
        // free 500 + 300 + 200 + 100 + 12 = 1112 -> 2 possible frames; empty the frames with
        // 500 and 300 free: moves 12 + 212 = 224.
        let f = huge_fragmentation(&[100, 500, 12, 300, 200]);
        assert_eq!(f.free_units, 1112);
        assert_eq!(f.possible_frames, 2);
        assert_eq!(f.compaction_cost, 12 + 212);
        assert_eq!(f.free_frames, 0);
    }

    #[test]
    fn free_frames_count_toward_possible_frames_at_no_cost() {
        // 512 + 511 + 1 = 1024 -> 2 frames: the free one (0 moves) and the 511 one (1 move).
        let f = huge_fragmentation(&[1, H, H - 1]);
        assert_eq!(
            (f.free_frames, f.possible_frames, f.compaction_cost),
            (1, 2, 1)
        );
    }

    #[test]
    fn scattered_free_units_below_one_frame_cost_nothing() {
        let f = huge_fragmentation(&[H - 1, 0, 0]);
        assert_eq!(
            (f.free_frames, f.possible_frames, f.compaction_cost),
            (0, 0, 0)
        );
    }

    #[test]
    fn counts_above_the_frame_size_saturate() {
        let f = huge_fragmentation(&[H + 7, 0]);
        assert_eq!((f.free_units, f.free_frames, f.compaction_cost), (H, 1, 0));
    }

    #[test]
    fn small_frames_by_hand() {
        // Frames of 4 units: free 3, 3, 2, 0 -> 8 free -> 2 frames; empty the two with 3 free.
        let f = fragmentation(&[3, 0, 2, 3], 4);
        assert_eq!(
            (f.free_frames, f.possible_frames, f.compaction_cost),
            (0, 2, 2)
        );
        let f = fragmentation(&[1; 8], 4);
        assert_eq!((f.possible_frames, f.compaction_cost), (2, 6));
    }

    #[test]
    fn zero_frame_size_is_harmless() {
        let f = fragmentation(&[1, 2], 0);
        assert_eq!(f.frames, 2);
        assert_eq!(f.compaction_cost, 0);
    }
}
