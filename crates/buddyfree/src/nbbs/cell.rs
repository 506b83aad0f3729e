//! Node states packed into cells: one atomic word per sub-tree of `K` levels.
//!
//! A cell holds the top `K` levels of a sub-tree, `2^K - 1` nodes numbered heap-style inside
//! the cell (`j = 1` its top, `2j` and `2j + 1` the children of `j`), and the links to its
//! `2^K` child cells (child `ch` hangs below bottom node `2^(K-1) + ch/2`, on side `ch & 1`).
//! `K = 1` is the paper's 1-level tree (one node per word, Sections 3.2-3.4); `K = 4` is its
//! 4-level bunch (Section 3.6.2), 15 nodes in one word. Every change inside a cell is one
//! CAS, so the state of the nodes inside a cell is never transient: only the links between
//! cells go through the paper's marking protocol.
//!
//! ```text
//!  bit:  0 .. N        N .. N+C           N+C .. N+2C        G .. G+B
//!        OCC(j)        OCC_CHILD(ch)      COAL_CHILD(ch)     GEN
//!        j = 1..=N     ch = 0..C          ch = 0..C
//!  N = 2^K - 1 nodes, C = 2^K child cells, GEN a B-bit field at bit G >= N + 2C;
//!  K = 1: 5 state bits + a 59-bit GEN at bit 5;
//!  K = 4: 47 state bits, INVALID at bit 47, a 5-bit COUNT at bit 48, an 11-bit GEN at bit 53
//!  (both in a u64)
//!  ALLOCATED(j) = the OCC bit of j's left child: OCC(2j) inside the cell, or for a bottom
//!                 node OCC_CHILD of its left child cell
//! ```
//!
//! - `OCC(j)`: node `j` is reserved, allocated or being freed (the paper's OCC).
//! - `ALLOCATED(j)`: with `OCC(j)`, the allocation of `j` is complete and no free has claimed
//!   it. `OCC` without `ALLOCATED` means a thread *holds* the node: an allocation that has
//!   not finished its climb (and may roll back), or a free in progress. Only a free that
//!   turns `ALLOCATED` off may release a node, so a double free, even one racing the free or
//!   a speculative allocation of the same node, finds nothing to release. This is the one
//!   state beyond the paper's five. It takes no bit of its own: while `OCC(j)` is set,
//!   nothing below `j` can be reserved or marked (both check the in-cell ancestors) and no
//!   free can climb through a link below `j` (one would hold a node below, whose marks keep
//!   that link occupied, so `j` could not have been reserved), so the bit of `j`'s left
//!   child is `j`'s alone until `j` is cleared, and the clear resets both.
//! - `OCC_CHILD(ch)` / `COAL_CHILD(ch)`: the paper's OCC_LEFT/RIGHT and COAL_LEFT/RIGHT of
//!   the bottom node above child cell `ch`: something in that child's sub-tree is allocated,
//!   or a free there is propagating upwards.
//! - `GEN`: a counter bumped by every allocation's mark of one of the cell's links (Alg. 3,
//!   T13). An UNMARK that checked the child sub-tree free clears the link only if no mark
//!   passed the cell since before that check (module `release`, `Forest::unmark`). Equal
//!   generations mean "no mark in between": in a 1-level node because its 59 bits do not
//!   wrap within any run, in a bunch because of its guard.
//! - `INVALID`, `COUNT` (bunches only, the *guard*): how many UNMARKs have read the
//!   generation and may still compare it (registered), and whether a mark wrapped the
//!   generation while one was. The argument is in the module docs of `nbbs`.
//!
//! Every state is handled as a [`State`] (`u64`) whatever the cell; the bits above the
//! cell's width are always zero.
//!
//! The paper's partial-occupancy bits of the inner nodes of a bunch are derived from the
//! nodes below them (Fig. 5) rather than stored.

/// A cell's state, for cells of any width.
pub type State = u64;

/// The masks of a cell of `levels` levels. Built at compile time for each cell kind.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Tree levels per cell (`K`).
    pub levels: u32,
    nodes: u32,
    /// Child cells per cell, `2^K`.
    pub children: u32,
    all_occ: State,
    all_occ_child: State,
    all_coal_child: State,
    /// The `GEN` field and its first bit.
    gen_mask: State,
    gen_at: u32,
    /// The guard (module docs): the `INVALID` bit, the unit of `COUNT` and its largest value
    /// (0: no guard).
    invalid: State,
    count_one: State,
    count_max: u64,
    /// Per node `j`: the bit that says it is allocated (with `OCC(j)`).
    allocated: [State; 16],
    /// Per node `j`: the state that must be clear for `j` to be free: `OCC` of `j` and of its
    /// in-cell descendants, and the links of the child cells below it.
    below: [State; 16],
    /// Per node `j`: `OCC` of its strict in-cell ancestors.
    above: [State; 16],
    /// Per child cell `ch`: `OCC` of the in-cell nodes it hangs below (its ancestors here).
    above_child: [State; 16],
}

impl Shape {
    /// The masks of a guarded cell of `levels` (1 to 4) levels: its state bits, the
    /// `INVALID` bit, a `COUNT` of `count_bits` bits and a generation of `gen_bits` bits, in
    /// that order from bit 0.
    pub const fn guarded(levels: u32, count_bits: u32, gen_bits: u32) -> Shape {
        assert!(count_bits >= 1 && count_bits < 64);
        let at = Self::state_bits(levels);
        let mut s = Self::new(levels, at + 1 + count_bits, gen_bits);
        s.invalid = 1 << at;
        s.count_one = 1 << (at + 1);
        s.count_max = (1 << count_bits) - 1;
        s
    }

    /// The masks of an unguarded cell of `levels` (1 to 4) levels with a generation of
    /// `gen_bits` (at most 64) bits from bit `gen_at` on, above the state bits.
    pub const fn new(levels: u32, gen_at: u32, gen_bits: u32) -> Shape {
        assert!(levels >= 1 && levels <= 4);
        let nodes = (1u32 << levels) - 1;
        let children = 1u32 << levels;
        assert!(Self::state_bits(levels) <= gen_at);
        assert!(gen_bits >= 1 && gen_bits <= 64 && gen_at + gen_bits <= State::BITS);
        let mut s = Shape {
            levels,
            nodes,
            children,
            all_occ: (1 << nodes) - 1,
            all_occ_child: ((1 << children) - 1) << nodes,
            all_coal_child: ((1 << children) - 1) << (nodes + children),
            gen_mask: ((1 << gen_bits) - 1) << gen_at,
            gen_at,
            invalid: 0,
            count_one: 0,
            count_max: 0,
            allocated: [0; 16],
            below: [0; 16],
            above: [0; 16],
            above_child: [0; 16],
        };
        // Each node and each link is below every in-cell node on its way up to node 1.
        let mut j = 1;
        while j <= nodes {
            s.allocated[j as usize] = if 2 * j <= nodes {
                s.occ(2 * j)
            } else {
                s.occ_child(2 * j - children)
            };
            s.below[j as usize] |= s.occ(j);
            let mut a = j >> 1;
            while a >= 1 {
                s.above[j as usize] |= s.occ(a);
                s.below[a as usize] |= s.occ(j);
                a >>= 1;
            }
            j += 1;
        }
        let mut ch = 0;
        while ch < children {
            let mut a = (children + ch) >> 1;
            while a >= 1 {
                s.above_child[ch as usize] |= s.occ(a);
                s.below[a as usize] |= s.occ_child(ch) | s.coal_bit(ch);
                a >>= 1;
            }
            ch += 1;
        }
        s
    }

    /// The state bits of a cell of `levels` levels: `OCC` of its nodes, `OCC_CHILD` and
    /// `COAL_CHILD` of its links.
    pub const fn state_bits(levels: u32) -> u32 {
        (1 << levels) - 1 + 2 * (1 << levels)
    }

    const fn occ(&self, j: u32) -> State {
        1 << (j - 1)
    }

    const fn occ_child(&self, ch: u32) -> State {
        1 << (self.nodes + ch)
    }

    /// Alg. 4, F9: the coalescing bit of child `ch`.
    #[inline]
    pub const fn coal_bit(&self, ch: u32) -> State {
        1 << (self.nodes + self.children + ch)
    }

    /// The highest in-cell node among `occ` bits (ancestors have smaller numbers).
    fn highest(occ: State) -> u32 {
        occ.trailing_zeros() + 1
    }

    /// The cell's generation: how many links allocations have marked in it, modulo the
    /// field's width.
    #[inline]
    pub fn gen(&self, w: State) -> u64 {
        (w & self.gen_mask) >> self.gen_at
    }

    /// Whether node `j` looks free (the paper's IS_FREE, also checking in-cell ancestors).
    #[inline]
    pub fn is_free(&self, w: State, j: u32) -> bool {
        w & (self.below[j as usize] | self.above[j as usize]) == 0
    }

    /// Alg. 3, T2: holds node `j` (occupied, not yet allocated: [`Shape::complete`] ends its
    /// allocation) if it and everything below it is clear and no in-cell ancestor is
    /// occupied. Otherwise the node that made it fail: the highest occupied ancestor, or `j`.
    #[inline]
    pub fn reserve(&self, w: State, j: u32) -> Result<State, u32> {
        let above = w & self.above[j as usize];
        if above != 0 {
            return Err(Self::highest(above));
        }
        if w & self.below[j as usize] != 0 {
            return Err(j);
        }
        Ok(w | self.occ(j))
    }

    /// Completes the allocation of a held node `j`.
    #[inline]
    pub fn allocated_bit(&self, j: u32) -> State {
        self.allocated[j as usize]
    }

    /// The bits of the in-cell nodes `rows` rows below `j`, each allocated: their `OCC` and
    /// `ALLOCATED` bits. `j`'s row plus `rows` must be a row of the cell.
    #[inline]
    fn group(&self, j: u32, rows: u32) -> State {
        debug_assert!(
            ((j + 1) << rows) - 1 <= self.nodes,
            "node {j} has no row {rows} below"
        );
        let mut bits = 0;
        for k in j << rows..(j + 1) << rows {
            bits |= self.occ(k) | self.allocated[k as usize];
        }
        bits
    }

    /// Completes the allocation of a held node `j` (one the caller reserved): allocated
    /// itself (`rows == 0`), or handed out as its `2^rows` descendants `rows` rows down, each
    /// allocated and `j` cleared (a bulk allocation). The latter is the state that single
    /// allocations of those nodes leave, their climbs having met above `j` (the module docs of
    /// `nbbs` on bulk operations).
    #[inline]
    pub fn complete(&self, w: State, j: u32, rows: u32) -> State {
        if rows == 0 {
            w | self.allocated[j as usize]
        } else {
            (w & !self.occ(j)) | self.group(j, rows)
        }
    }

    /// The reverse of [`Shape::complete`] for a bulk free: if all `2^rows` nodes `rows` rows
    /// below `j` are allocated, clears them and leaves `j` held, as a free of `j` would
    /// after its claim; `None` if any of them is not allocated.
    #[inline]
    pub fn join(&self, w: State, j: u32, rows: u32) -> Option<State> {
        let group = self.group(j, rows);
        (w & group == group).then(|| (w & !group) | self.occ(j))
    }

    /// Alg. 3, T10-T14: marks child `ch` occupied, clears its coalescing bit and bumps the
    /// generation, unless a node above it in this cell is occupied: then that node (the
    /// highest such).
    #[inline]
    pub fn mark(&self, w: State, ch: u32) -> Result<State, u32> {
        let above = w & self.above_child[ch as usize];
        if above != 0 {
            return Err(Self::highest(above));
        }
        let w = (w & !self.coal_bit(ch)) | self.occ_child(ch);
        // A generation in the top bits wraps by itself: the carry leaves the word.
        let w = if self.gen_mask >> (State::BITS - 1) != 0 {
            w.wrapping_add(1 << self.gen_at)
        } else {
            (w & !self.gen_mask) | (w.wrapping_add(1 << self.gen_at) & self.gen_mask)
        };
        // A wrap while an UNMARK is registered could bring the generation back to the value
        // it read: it can no longer trust any generation it read before.
        if self.gen(w) == 0 && self.count(w) != 0 {
            return Ok(w | self.invalid);
        }
        Ok(w)
    }

    /// Whether node `j` is allocated (occupied, allocation complete, not being freed).
    #[inline]
    pub fn is_allocated(&self, w: State, j: u32) -> bool {
        let both = self.occ(j) | self.allocated[j as usize];
        w & both == both
    }

    /// Claims allocated node `j` for a free: it stays occupied but is no longer allocated.
    #[inline]
    pub fn claim(&self, w: State, j: u32) -> Option<State> {
        self.is_allocated(w, j)
            .then(|| w & !self.allocated[j as usize])
    }

    /// Alg. 4, F20: the bits to keep when clearing node `j`.
    #[inline]
    pub fn clear_mask(&self, j: u32) -> State {
        !(self.occ(j) | self.allocated[j as usize])
    }

    /// Whether the link to child `ch` is live: no node above it in the cell is occupied.
    /// A free climbing through `ch` always finds it live (see `ALLOCATED` in the module docs).
    #[inline]
    pub fn link_live(&self, w: State, ch: u32) -> bool {
        w & self.above_child[ch as usize] == 0
    }

    /// Alg. 4, F15-F17 generalised to a cell: a free coming up through `own` (the bits of its
    /// child link, or of its node's sub-tree) keeps climbing unless the rest of the cell is
    /// occupied and nothing in it is being freed (no coalescing link, no held node). Climbing
    /// further than needed only leaves coalescing bits that later climbs clear; stopping too
    /// early would strand an occupied bit, so any doubt climbs.
    #[inline]
    pub fn keeps_climbing(&self, w: State, own: State) -> bool {
        let rest = w & !own;
        if rest & (self.all_occ | self.all_occ_child) == 0 || rest & self.all_coal_child != 0 {
            return true;
        }
        let mut occ = rest & self.all_occ;
        while occ != 0 {
            let j = Self::highest(occ);
            if rest & self.allocated[j as usize] == 0 {
                return true;
            }
            occ &= occ - 1;
        }
        false
    }

    /// The bits of node `j`'s sub-tree in its cell: `j`, the nodes below it in the cell and
    /// the links of the child cells below it. A free of `j` owns them (for
    /// [`Shape::keeps_climbing`]); none of them is set where nothing in the sub-tree is taken
    /// (its ancestors may be).
    #[inline]
    pub fn node_bits(&self, j: u32) -> State {
        self.below[j as usize]
    }

    /// The bits a free coming up from child `ch` owns in its parent cell.
    #[inline]
    pub fn child_bits(&self, ch: u32) -> State {
        self.occ_child(ch) | self.coal_bit(ch)
    }

    /// Whether child `ch` is coalescing (U8).
    #[inline]
    pub fn coalescing(&self, w: State, ch: u32) -> bool {
        w & self.coal_bit(ch) != 0
    }

    /// Alg. 5, U8-U10 with a generation check: clears child `ch`'s occupied and coalescing
    /// bits if it is still coalescing and no allocation has marked a link of this cell since
    /// generation `expect` was seen; `None` otherwise (or when `expect` is unknown).
    #[inline]
    pub fn unmark(&self, w: State, ch: u32, expect: Option<u64>) -> Option<State> {
        (self.coalescing(w, ch) && !self.invalid(w) && expect == Some(self.gen(w))).then(|| {
            debug_assert!(self.link_live(w, ch), "coalescing below a node: {w:x} {ch}");
            (w & !self.child_bits(ch)) - self.count_one
        })
    }

    /// Whether the cell has a guard (module docs). Without one, registering and leaving
    /// change nothing.
    #[inline]
    pub const fn is_guarded(&self) -> bool {
        self.count_max != 0
    }

    /// Whether a generation read by a registered UNMARK may have wrapped since (`INVALID`).
    #[inline]
    pub fn invalid(&self, w: State) -> bool {
        w & self.invalid != 0
    }

    /// How many UNMARKs are registered (`COUNT`; 0 in an unguarded cell, whose `count_max` is 0).
    #[inline]
    fn count(&self, w: State) -> u64 {
        (w / self.count_one.max(1)) & self.count_max
    }

    /// Registers an UNMARK that reads this cell's generation, if it may: `(state, whether
    /// registered)`. Not while `INVALID` is set (the count must drain), nor past the largest
    /// count, which sets `INVALID` so that the last to leave sweeps. Unguarded cells need no
    /// registration.
    #[inline]
    pub fn register(&self, w: State) -> (State, bool) {
        if !self.is_guarded() {
            (w, true)
        } else if self.invalid(w) {
            (w, false)
        } else if self.count(w) == self.count_max {
            (w | self.invalid, false)
        } else {
            (w + self.count_one, true)
        }
    }

    /// Unregisters an UNMARK: `(state, whether the caller sweeps)`. The last to leave while
    /// `INVALID` is set stays registered, clears `INVALID` and sweeps the cell.
    #[inline]
    pub fn leave(&self, w: State) -> (State, bool) {
        debug_assert!(self.count(w) > 0, "leaving an unregistered cell: {w:x}");
        if self.invalid(w) && self.count(w) == 1 {
            (w & !self.invalid, true)
        } else {
            (w - self.count_one, false)
        }
    }

    /// A registered sweep's unlink of those of the links `drop` (their
    /// [`Shape::child_bits`]) that are still coalescing in `w`, if the generation is still
    /// `expect` and not invalid; it leaves the cell.
    ///
    /// The sweep found `drop` coalescing over free children in an earlier reading, and the
    /// generation only says that no mark came since. A link may have been unlinked since
    /// (by another UNMARK, which needs no mark) and the node above it reserved and allocated
    /// (a reservation marks no link of its own cell): the link's `OCC_CHILD` is then that
    /// node's `ALLOCATED` bit. So, as a single UNMARK's CAS does ([`Shape::unmark`]), each
    /// link is cleared only while its coalescing bit is set, which nothing sets again
    /// without a mark (the loom model `loom_nbbs_sweep_races_unlink_and_alloc`).
    #[inline]
    pub fn sweep(&self, w: State, expect: u64, drop: State) -> Option<State> {
        (!self.invalid(w) && self.gen(w) == expect).then(|| {
            let coal = drop & w & self.all_coal_child;
            // `COAL_CHILD(ch)` lies `C` bits above `OCC_CHILD(ch)`.
            (w & !(coal | coal >> self.children)) - self.count_one
        })
    }

    /// Whether no UNMARK is registered in `w` and it is not `INVALID`.
    #[cfg(test)]
    pub fn is_idle(&self, w: State) -> bool {
        self.count(w) == 0 && !self.invalid(w)
    }

    /// The state bits of `w`, its generation cleared.
    #[cfg(test)]
    pub fn without_gen(&self, w: State) -> State {
        w & !(self.gen_mask | self.invalid | (self.count_one * self.count_max))
    }

    /// Whether nothing in the cell is occupied (Alg. 5, U13: the free may merge upwards).
    #[inline]
    pub fn looks_free(&self, w: State) -> bool {
        w & (self.all_occ | self.all_occ_child) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_level_cell_is_the_papers_node() {
        let s = Shape::new(1, 5, 59);
        assert_eq!(s.below[1], 0b1_1111);
        assert_eq!(s.above[1], 0);
        assert_eq!(s.above_child[0], 1);
        assert_eq!(s.above_child[1], 1);
        assert_eq!(s.gen_mask, 0xffff_ffff_ffff_ffe0);
        assert_eq!(s.gen_mask.leading_zeros(), 0);
        let w = s.reserve(0, 1).unwrap();
        assert_eq!(s.reserve(w, 1), Err(1));
        assert_eq!(s.claim(w, 1), None);
        let w = w | s.allocated_bit(1);
        assert_eq!(s.claim(w, 1), Some(1));
        assert_eq!(s.mark(w, 0), Err(1));
        // A held node is what keeps a free climbing; an allocated one is not.
        assert!(s.keeps_climbing(1, s.child_bits(0)));
        assert!(!s.keeps_climbing(w, s.child_bits(1)));
    }

    #[test]
    fn bunch_fits_47_bits_and_derives_inner_nodes() {
        let s = Shape::guarded(4, 5, 11);
        assert_eq!(State::BITS - s.all_coal_child.leading_zeros(), 47);
        assert_eq!(Shape::state_bits(4), 47);
        assert_eq!(s.invalid, 1 << 47);
        assert_eq!(s.count_one, 1 << 48);
        assert_eq!(s.gen_mask, 0x7ff << 53);
        assert_eq!(s.gen_mask.leading_zeros(), 0);
        // Node 8 (bottom, leftmost) covers children 0 and 1; node 2 covers children 0..8.
        assert_eq!(s.below[8], 1 << 7 | s.child_bits(0) | s.child_bits(1));
        assert_eq!(s.above[8], 0b1011);
        let w = s.mark(0, 3).unwrap(); // something below node 9
        assert!(!s.is_free(w, 1) && !s.is_free(w, 2) && !s.is_free(w, 4) && !s.is_free(w, 9));
        assert!(s.is_free(w, 3) && s.is_free(w, 5) && s.is_free(w, 8));
        let w = s.complete(s.reserve(w, 3).unwrap(), 3, 0);
        assert!(s.is_allocated(w, 3));
        assert!(!s.is_allocated(w, 6) && !s.is_allocated(w, 7));
        assert_eq!(s.reserve(w, 13), Err(3));
        assert_eq!(s.reserve(w, 6), Err(3));
        assert_eq!(s.mark(w, 12), Err(3));
        assert!(!s.looks_free(w));
        let w = w & s.clear_mask(3);
        assert!(s.is_free(w, 3) && !s.is_free(w, 9));
        // Bottom node 15 keeps its ALLOCATED in the link to child 14.
        let w = s.complete(s.reserve(w, 15).unwrap(), 15, 0);
        assert!(s.is_allocated(w, 15) && !s.is_free(w, 7));
        assert_eq!(s.mark(w, 14), Err(15));
        assert_eq!(w & s.clear_mask(15), s.mark(0, 3).unwrap());
    }

    #[test]
    fn marks_bump_the_generation_and_stale_unmarks_refuse() {
        for (s, bits) in [
            (Shape::new(1, 5, 59), 59),
            (Shape::guarded(4, 5, 11), 11),
            (Shape::new(1, 5, 2), 2),
            (Shape::new(4, 47, 2), 2),
            (Shape::guarded(4, 1, 2), 2),
        ] {
            // Registered, as every UNMARK of a guarded cell is.
            let w = s.register(s.mark(0, 1).unwrap() | s.coal_bit(1)).0;
            let g = s.gen(w);
            assert_eq!(s.unmark(w, 1, Some(g)), Some(w & s.gen_mask));
            assert_eq!(g, 1);
            assert_eq!(s.unmark(w, 1, None), None);
            // A mark that changes no state bit still changes the word.
            let again = s.mark(s.mark(w, 1).unwrap(), 1).unwrap() | s.coal_bit(1);
            assert_ne!(again, w);
            assert_eq!(s.unmark(again, 1, Some(g)), None);
            // The generation wraps inside its field, leaving the state bits alone.
            let top = s.without_gen(w) | s.gen_mask;
            let wrapped = s.mark(top, 0).unwrap();
            assert_eq!(s.gen(wrapped), 0);
            assert_eq!(
                s.without_gen(wrapped),
                s.without_gen(s.mark(s.without_gen(w), 0).unwrap())
            );
            assert_eq!(s.gen_mask.count_ones(), bits);
            // In a guarded cell, a wrap with an UNMARK registered invalidates what it read:
            // equal generations no longer unmark, until the last to leave sweeps.
            let wrapped = s.mark(w | s.gen_mask, 0).unwrap();
            assert_eq!(s.invalid(wrapped), s.is_guarded());
            if s.is_guarded() {
                let back = (wrapped & !s.gen_mask) | (w & s.gen_mask);
                assert_eq!(s.unmark(back, 1, Some(g)), None);
                let (left, sweeps) = s.leave(back);
                assert!(sweeps && !s.invalid(left));
                let swept = s.sweep(left, g, s.child_bits(1)).unwrap();
                assert_eq!(swept & s.child_bits(1), 0);
                assert_eq!(s.count(swept), 0);
                assert_eq!(s.sweep(left, g + 1, s.child_bits(1)), None);
                // Registrations beyond the count are refused, and invalidate.
                let mut full = w;
                for _ in 1..s.count_max {
                    full = s.register(full).0;
                }
                let (over, registered) = s.register(full);
                assert!(!registered && s.invalid(over));
                assert!(!s.register(over).1);
            }
        }
    }

    /// A sweep found link 0 coalescing over a free child; since, another UNMARK unlinked it
    /// and the node above it was allocated, whose `ALLOCATED` bit is that link's `OCC_CHILD`.
    /// No mark came, so the generation is the sweep's: the sweep must leave that bit.
    #[test]
    fn sweeps_clear_only_links_still_coalescing() {
        for s in [
            Shape::guarded(4, 5, 11),
            Shape::guarded(1, 5, 2),
            Shape::guarded(4, 2, 1),
        ] {
            let above = 1 << (s.levels - 1);
            let read = s.register(s.mark(0, 0).unwrap() | s.coal_bit(0)).0;
            let g = s.gen(read);
            let other = s.register(read).0;
            let unlinked = s.unmark(other, 0, Some(g)).unwrap();
            let taken = s.complete(s.reserve(unlinked, above).unwrap(), above, 0);
            assert!(s.is_allocated(taken, above));
            let swept = s.sweep(taken, g, s.child_bits(0)).unwrap();
            assert!(s.is_allocated(swept, above), "{swept:x}");
            assert!(s.is_idle(swept));
            // Still coalescing: cleared, with the other links left alone.
            let both = s.register(read | s.mark(0, 1).unwrap() & !s.gen_mask).0;
            let swept = s.sweep(both, g, s.child_bits(0)).unwrap();
            assert_eq!(swept & s.child_bits(0), 0);
            assert_eq!(swept & s.child_bits(1), s.occ_child(1));
        }
    }
}
