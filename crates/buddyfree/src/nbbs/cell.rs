//! Node states packed into cells: one atomic word per sub-tree of `K` levels.
//!
//! A cell holds the top `K` levels of a sub-tree, `2^K - 1` nodes numbered heap-style inside
//! the cell (`j = 1` its top, `2j` and `2j + 1` the children of `j`), and the links to its
//! `2^K` child cells (child `ch` hangs below bottom node `2^(K-1) + ch/2`, on side `ch & 1`).
//! `K = 1` is the paper's 1-level tree (one node per word, Sections 3.2-3.4); `K = 4` is its
//! 4-level bunch (Section 3.6.2), 15 nodes in one `u64`. Every change inside a cell is one
//! CAS, so the state of the nodes inside a cell is never transient: only the links between
//! cells go through the paper's marking protocol.
//!
//! ```text
//!  bit:  0 .. N            N .. 2N             2N .. 2N+C            2N+C .. 2N+2C
//!        OCC(j)            ALLOCATED(j)        OCC_CHILD(ch)         COAL_CHILD(ch)
//!        j = 1..=N         j = 1..=N           ch = 0..C             ch = 0..C
//!  N = 2^K - 1 nodes, C = 2^K child cells;  K = 1: 6 bits (a u8),  K = 4: 62 bits (a u64)
//! ```
//!
//! - `OCC(j)`: node `j` is reserved, allocated or being freed (the paper's OCC).
//! - `ALLOCATED(j)`: with `OCC(j)`, the allocation of `j` is complete and no free has claimed
//!   it. `OCC` without `ALLOCATED` means a thread *holds* the node: an allocation that has
//!   not finished its climb (and may roll back), or a free in progress. Only a free that
//!   turns `ALLOCATED` off may release a node, so a double free, even one racing the free or
//!   a speculative allocation of the same node, finds nothing to release. This is the one bit
//!   beyond the paper's five.
//! - `OCC_CHILD(ch)` / `COAL_CHILD(ch)`: the paper's OCC_LEFT/RIGHT and COAL_LEFT/RIGHT of
//!   the bottom node above child cell `ch`: something in that child's sub-tree is allocated,
//!   or a free there is propagating upwards.
//!
//! The paper's partial-occupancy bits of the inner nodes of a bunch are derived from the
//! nodes below them (Fig. 5) rather than stored.

/// The masks of a cell of `levels` levels. Built at compile time for each cell kind.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Tree levels per cell (`K`).
    pub levels: u32,
    nodes: u32,
    children: u32,
    all_occ: u64,
    all_occ_child: u64,
    all_coal_child: u64,
    /// Per node `j`: the state that must be clear for `j` to be free: `OCC` of `j` and of its
    /// in-cell descendants, and the links of the child cells below it.
    below: [u64; 16],
    /// Per node `j`: `OCC` of its strict in-cell ancestors.
    above: [u64; 16],
    /// Per child cell `ch`: `OCC` of the in-cell nodes it hangs below (its ancestors here).
    above_child: [u64; 16],
}

const fn depth(j: u32) -> u32 {
    j.ilog2()
}

impl Shape {
    /// The masks of a cell of `levels` (1 to 4) levels.
    pub const fn new(levels: u32) -> Shape {
        assert!(levels >= 1 && levels <= 4);
        let nodes = (1u32 << levels) - 1;
        let children = 1u32 << levels;
        let mut s = Shape {
            levels,
            nodes,
            children,
            all_occ: (1u64 << nodes) - 1,
            all_occ_child: ((1u64 << children) - 1) << (2 * nodes),
            all_coal_child: ((1u64 << children) - 1) << (2 * nodes + children),
            below: [0; 16],
            above: [0; 16],
            above_child: [0; 16],
        };
        let mut j = 1;
        while j <= nodes {
            let mut a = j >> 1;
            while a >= 1 {
                s.above[j as usize] |= 1 << (a - 1);
                a >>= 1;
            }
            let mut k = j;
            while k <= nodes {
                if depth(k) >= depth(j) && k >> (depth(k) - depth(j)) == j {
                    s.below[j as usize] |= 1 << (k - 1);
                }
                k += 1;
            }
            let mut ch = 0;
            while ch < children {
                if (children + ch) >> (levels - depth(j)) == j {
                    s.below[j as usize] |= s.occ_child(ch) | s.coal_child(ch);
                }
                ch += 1;
            }
            j += 1;
        }
        let mut ch = 0;
        while ch < children {
            let mut a = (children + ch) >> 1;
            while a >= 1 {
                s.above_child[ch as usize] |= 1 << (a - 1);
                a >>= 1;
            }
            ch += 1;
        }
        s
    }

    /// Child cells per cell, `2^K`.
    pub const fn children(&self) -> u32 {
        self.children
    }

    const fn occ(&self, j: u32) -> u64 {
        1 << (j - 1)
    }

    const fn allocated(&self, j: u32) -> u64 {
        1 << (self.nodes + j - 1)
    }

    const fn occ_child(&self, ch: u32) -> u64 {
        1 << (2 * self.nodes + ch)
    }

    const fn coal_child(&self, ch: u32) -> u64 {
        1 << (2 * self.nodes + self.children + ch)
    }

    /// The highest in-cell node among `occ` bits (ancestors have smaller numbers).
    fn highest(occ: u64) -> u32 {
        occ.trailing_zeros() + 1
    }

    /// Whether node `j` looks free (the paper's IS_FREE, also checking in-cell ancestors).
    #[inline]
    pub fn is_free(&self, w: u64, j: u32) -> bool {
        w & (self.below[j as usize] | self.above[j as usize]) == 0
    }

    /// Alg. 3, T2: occupies node `j` if it and everything below it is clear and no in-cell
    /// ancestor is occupied; `done` marks it allocated at once (no climb to follow).
    /// Otherwise the node that made it fail: the highest occupied ancestor, or `j`.
    #[inline]
    pub fn reserve(&self, w: u64, j: u32, done: bool) -> Result<u64, u32> {
        let above = w & self.above[j as usize];
        if above != 0 {
            return Err(Self::highest(above));
        }
        if w & self.below[j as usize] != 0 {
            return Err(j);
        }
        let allocated = if done { self.allocated(j) } else { 0 };
        Ok(w | self.occ(j) | allocated)
    }

    /// Completes the allocation of a held node `j`.
    #[inline]
    pub fn allocated_bit(&self, j: u32) -> u64 {
        self.allocated(j)
    }

    /// Alg. 3, T10-T14: marks child `ch` occupied and clears its coalescing bit, unless a node
    /// above it in this cell is occupied: then that node (the highest such).
    #[inline]
    pub fn mark(&self, w: u64, ch: u32) -> Result<u64, u32> {
        let above = w & self.above_child[ch as usize];
        if above != 0 {
            return Err(Self::highest(above));
        }
        Ok((w & !self.coal_child(ch)) | self.occ_child(ch))
    }

    /// Whether node `j` is allocated (occupied, allocation complete, not being freed).
    #[inline]
    pub fn is_allocated(&self, w: u64, j: u32) -> bool {
        let both = self.occ(j) | self.allocated(j);
        w & both == both
    }

    /// Claims allocated node `j` for a free: it stays occupied but is no longer allocated.
    #[inline]
    pub fn claim(&self, w: u64, j: u32) -> Option<u64> {
        self.is_allocated(w, j).then(|| w & !self.allocated(j))
    }

    /// Alg. 4, F20: the bits to keep when clearing node `j`.
    #[inline]
    pub fn clear_mask(&self, j: u32) -> u64 {
        !(self.occ(j) | self.allocated(j))
    }

    /// Alg. 4, F9: the coalescing bit of child `ch`.
    #[inline]
    pub fn coal_bit(&self, ch: u32) -> u64 {
        self.coal_child(ch)
    }

    /// Alg. 4, F15-F17 generalised to a cell: a free coming up through `own` (the bits of its
    /// child link, or of its node's sub-tree) keeps climbing unless the rest of the cell is
    /// occupied and nothing in it is being freed (no coalescing link, no held node). Climbing
    /// further than needed only leaves coalescing bits that later climbs clear; stopping too
    /// early would strand an occupied bit, so any doubt climbs.
    #[inline]
    pub fn keeps_climbing(&self, w: u64, own: u64) -> bool {
        let rest = w & !own;
        let occupied = rest & (self.all_occ | self.all_occ_child);
        let occ = rest & self.all_occ;
        let held = occ & !((rest >> self.nodes) & self.all_occ);
        occupied == 0 || held != 0 || rest & self.all_coal_child != 0
    }

    /// The bits a free of node `j` owns in its cell (for [`Shape::keeps_climbing`]).
    #[inline]
    pub fn node_bits(&self, j: u32) -> u64 {
        self.below[j as usize]
    }

    /// The bits a free coming up from child `ch` owns in its parent cell.
    #[inline]
    pub fn child_bits(&self, ch: u32) -> u64 {
        self.occ_child(ch) | self.coal_child(ch)
    }

    /// Alg. 5, U8-U10: clears child `ch`'s occupied and coalescing bits if it is still
    /// coalescing; `None` if an allocation or another free got there first.
    #[inline]
    pub fn unmark(&self, w: u64, ch: u32) -> Option<u64> {
        (w & self.coal_child(ch) != 0).then(|| w & !self.child_bits(ch))
    }

    /// Whether nothing in the cell is occupied (Alg. 5, U13: the free may merge upwards).
    #[inline]
    pub fn looks_free(&self, w: u64) -> bool {
        w & (self.all_occ | self.all_occ_child) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_level_cell_is_the_papers_node() {
        let s = Shape::new(1);
        assert_eq!(s.below[1], 0b11_1101);
        assert_eq!(s.above[1], 0);
        assert_eq!(s.above_child[0], 1);
        assert_eq!(s.above_child[1], 1);
        let w = s.reserve(0, 1, false).unwrap();
        assert_eq!(s.reserve(w, 1, false), Err(1));
        assert_eq!(s.claim(w, 1), None);
        let w = w | s.allocated_bit(1);
        assert_eq!(s.claim(w, 1), Some(1));
        assert_eq!(s.mark(w, 0), Err(1));
    }

    #[test]
    fn bunch_fits_62_bits_and_derives_inner_nodes() {
        let s = Shape::new(4);
        assert_eq!(s.all_coal_child.leading_zeros(), 2);
        // Node 8 (bottom, leftmost) covers children 0 and 1; node 2 covers children 0..8.
        assert_eq!(s.below[8], 1 << 7 | s.child_bits(0) | s.child_bits(1));
        assert_eq!(s.above[8], 0b1011);
        let w = s.mark(0, 3).unwrap(); // something below node 9
        assert!(!s.is_free(w, 1) && !s.is_free(w, 2) && !s.is_free(w, 4) && !s.is_free(w, 9));
        assert!(s.is_free(w, 3) && s.is_free(w, 5) && s.is_free(w, 8));
        let w = s.reserve(w, 3, true).unwrap();
        assert!(s.is_allocated(w, 3));
        assert_eq!(s.reserve(w, 13, true), Err(3));
        assert_eq!(s.mark(w, 12), Err(3));
        assert!(!s.looks_free(w));
    }
}
