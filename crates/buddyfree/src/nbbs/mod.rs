//! NBBS, the non-blocking buddy system of Marotta, Ianni, Pellegrini and Quaglia
//! ([IEEE TC 2022](crate#references), Sections 3-4): a complete binary tree of node states updated only by
//! CAS, with allocation by reserving a free node and marking its ancestors, and release by
//! marking the ancestors coalescing, clearing the node and unmarking.
//!
//! Two layouts share one implementation, [`Forest`], generic over its cell [`Kind`] (modules
//! `forest`, the cells and the allocation, `release`, the free's protocol, and `cell`, a cell
//! of `K` levels):
//! - [`Nbbs`]: the 1-level tree, one `AtomicU64` per node: 5 state bits and a 59-bit
//!   generation, about 16 bytes per unit (2 nodes per unit; no reverse map: `free` takes the
//!   order): 4 MiB per GiB of 4 KiB units.
//! - [`Nbbs4`]: 4-level bunches (3.6.2), 15 nodes per `AtomicU64` (47 state bits, a guard
//!   and an 11-bit generation, below), so a climb does one CAS per four levels: about 1 MiB
//!   per GiB of 4 KiB units with `max_order` 9, 0.55 MiB with 10 or 18.
//!
//! The managed units form a forest of `ceil(units / 2^max_order)` trees of height `max_order`
//! (the paper's `base_level` is the roots); a last partial tree has its missing units
//! occupied at construction.
//!
//! Beyond the paper:
//! - A node has a sixth state, `ALLOCATED`, set when its allocation completes and taken off
//!   by the CAS that starts its free, so a bad or double free (even racing, even racing a
//!   speculative reservation of the same node) changes nothing. It is kept in the `OCC` bit
//!   of the node's left child, which nothing else can touch while the node is occupied
//!   (module `cell`), leaving room in the word for the generation.
//! - UNMARK is generation-checked. The published UNMARK can unlink a branch holding an
//!   allocated block when a stalled free races a reallocation of its block and a second
//!   free below it: an allocation's mark over an already occupied link leaves no trace, and
//!   the second free's coalescing bit looks like the first one's. Every mark bumps a
//!   per-cell generation; UNMARK clears a link only if the generation is the one it read
//!   before it found the child free, and otherwise re-checks the child (`Forest::unmark`
//!   has the argument). The unit test `stale_unmark_cannot_free_a_reused_branch` and the
//!   loom test `loom_nbbs_stale_unmark` exercise that race.
//!
//!   Equal generations must mean "no mark in between". A 1-level node's 59-bit generation does not
//!   come back to a value within any run of the allocator: the marks of a cell are successful RMWs
//!   on one cache line, which the hardware serialises, at well under one per nanosecond, so 2^59 of
//!   them take over 18 years of back-to-back marking of that cell. A bunch has 47 state bits, and
//!   with a 64-bit word only 17 bits to spare: any generation that fits there (11 bits) wraps
//!   within tens of microseconds of marking, and a free can be descheduled between its reading and
//!   its UNMARK for far longer. A bounded counter alone cannot close the window (whatever value a
//!   stalled UNMARK read, enough marks bring it back), so the bunch adds what the counter lacks:
//!   the cell knows who might still trust an old reading. Its guard is a 5-bit `COUNT` of the
//!   UNMARKs *registered* in the cell (a free registers with the RMW of its coalescing climb that
//!   reads the generation, and leaves with its UNMARK's CAS there, or with an RMW when it stops
//!   below) and an `INVALID` bit:
//!   - a mark that wraps the generation while `COUNT > 0` sets `INVALID`;
//!   - an UNMARK's CAS needs `INVALID` clear, and `INVALID` is cleared only by the last registered
//!     UNMARK to leave.
//!
//!   So a registered UNMARK whose CAS finds the generation it read passes only if no mark came in
//!   between: `2^11` or more marks would include a wrap while it was registered, whose `INVALID` it
//!   would find. While `INVALID` is set nothing registers (the count only drains; so does a 32nd
//!   registration, which sets `INVALID` instead), and an UNMARK that finds it, or cannot register,
//!   stops and leaves its coalescing bit. The last to leave keeps its registration, clears
//!   `INVALID` and *sweeps* the cell: it clears every coalescing link whose child it finds free, in
//!   one CAS checked like an UNMARK's (generation, `INVALID`, and each link still coalescing: one
//!   unlinked since by another UNMARK may already carry the `ALLOCATED` bit of a node allocated
//!   above it, with no mark to move the generation; the loom model
//!   `loom_nbbs_sweep_races_unlink_and_alloc`), and climbs on if the cell is then free (the
//!   coalescing climbs of the frees that stopped here went on above it as usual, so their bits are
//!   there). The fast path
//!   pays a CAS loop where the coalescing climb had a `fetch_or`, nothing more; a wrap with an
//!   UNMARK registered costs one sweep (a check of each coalescing child). What a stall costs: a
//!   free stalled in a cell for `2^11` of its marks postpones that cell's merges (not allocations
//!   or frees, which never wait) until it goes on; no block is ever handed out twice. The unit test
//!   `stale_unmark_replay_passes_a_guarded_narrow_generation` and the loom model
//!   `loom_nbbs_stale_unmark_guarded_*` run the race with a 2-bit generation, which wraps, and
//!   pass; without the guard, the replay and the loom models
//!   `loom_nbbs_stale_unmark_catches_a_narrow_generation_*` catch the wrap (`Narrow` in module
//!   `forest`).
//! - Every refusal of a CAS step is confirmed by an RMW: the paper assumes sequential
//!   consistency, and a stale plain read could make UNMARK give up and strand an occupied
//!   bit (a case the loom tests reach). UNMARK also goes on over a cell that is free even
//!   when its own coalescing bit was consumed by another free.
//! - A rolled-back allocation (Alg. 3, T11) releases like a free, past the last link it
//!   marked, where the paper's FREENODE stops. A free stops its coalescing climb under a
//!   link that is occupied and not coalescing, leaving the links above to that link's
//!   holder, and the holder may be an allocation about to roll back: the ancestor that
//!   failed it was freed, and the branch above reused, meanwhile. Stopping at its own marks,
//!   the rollback would leave such a link occupied over a free sub-tree, and the top block
//!   above it lost (in `Nbbs` and `Nbbs4` alike). Above its
//!   own marks it marks only links that are set and live, and its UNMARK re-checks them.
//!   The unit test `rollback_unlinks_a_cell_emptied_after_reuse` (and the loom test
//!   `loom_nbbs_rollback_after_reuse`) exercise that case.
//! - Full-heap fast path: per-core unit counters (also the `release_count`) answer "fewer
//!   than `2^order` free units" in O(cores) loads after the hinted node fails, instead of a
//!   scan of the level. A heap with enough free units that are all fragmented scans
//!   (skipping occupied sub-trees, and passing taken nodes a cell at a time), once: the
//!   memo's confirmation of the refusal re-reads the counts instead of scanning again, and
//!   the refusal, by the count or by a scan during which no free completed, is remembered,
//!   and answers requests of its order or larger with one load (`refusal.rs`), until a
//!   rolled-back allocation or a free (any free for a refusal by the count; for one by a
//!   scan, a free after which the node of the refused order above the freed block looks
//!   free).
//! - Bulk operations in groups (`alloc_bulk`, `free_bulk`, what per-core magazines refill
//!   and spill with). `2^r` blocks of one order under one node `j` of their cell (`r` up to
//!   the order's row in the cell: with 4-level cells and `max_order` 10, four blocks of
//!   order 0, eight of order 3; none in the 1-level tree) are allocated by one TRYALLOC of
//!   `j` whose last CAS, instead of setting `ALLOCATED(j)`, clears `OCC(j)` and sets `OCC`
//!   and `ALLOCATED` of the blocks' nodes: the state that single allocations of those nodes
//!   leave once their climbs met above `j`, but for the generations, bumped once per cell
//!   rather than once per block. That is sound because UNMARK compares generations for
//!   equality: one mark after its reading refuses it as several would. Between the
//!   reservation and that CAS, `j` is held like any node being allocated, and nothing below
//!   it can be reserved. A bulk free of such a run (the blocks of one node, in any order)
//!   checks and clears them in one CAS that leaves `j` held, the state of a free of `j`
//!   after its claim, and frees `j` from there. Neither step changes whether the cell is
//!   occupied, so no other thread's climb or UNMARK can tell a group from single blocks. A
//!   run with a block that is not allocated at that order fails the CAS and is freed one
//!   block at a time, which gives `free`'s exact answer. A group is taken only where `alloc`
//!   would look first (the node above the core's hint of the blocks' order) and only if it
//!   is free there; otherwise the next block comes from `alloc`. So groups go where single
//!   allocations would, and a fragmented heap costs a bulk allocation one load per miss,
//!   never a scan (searching for free groups instead would break up free blocks while the
//!   holes that frees hint stay empty, raising `frag`'s compaction cost; docs/results.md,
//!   "Does it keep huge frames free"). Model
//!   checked by `loom_nbbs_bulk_*` (a group racing a single allocation of the same leaves;
//!   a group freed while another block is freed and its node allocated), stressed by
//!   `bulk_groups_race_single_operations_on_small_trees`.
//! - Free-slot hints per core and order (3.6.1), scattered initially.
//! - Each level of cells starts one cache line off a power-of-two boundary, so the cells of
//!   a root-to-leaf path do not all fall in one L1 set.

/// Records protocol steps under loom tests, printed when a check fails.
#[cfg(all(test, loom))]
pub static TRACE: std::sync::Mutex<std::vec::Vec<std::string::String>> =
    std::sync::Mutex::new(std::vec::Vec::new());

macro_rules! trace {
    ($($arg:tt)*) => {
        #[cfg(all(test, loom))]
        $crate::nbbs::TRACE.lock().unwrap().push(std::format!("{:?} {}", loom::thread::current().id(), std::format!($($arg)*)));
    };
}

mod cell;
mod cores;
mod forest;
#[cfg(all(test, loom))]
mod loom_tests;
mod release;
mod word;

pub use forest::{Forest, FourLevel, Kind, OneLevel};

use crate::{Config, Error};

/// NBBS over the 1-level tree: 8 bytes per node (its state and a 59-bit generation).
pub type Nbbs = Forest<OneLevel>;

/// NBBS over 4-level bunches: 15 nodes, a guard and an 11-bit generation per 64-bit cell, one
/// CAS per four levels climbed.
pub type Nbbs4 = Forest<FourLevel>;

caller_metadata!(
    Nbbs,
    Nbbs::plan,
    Nbbs::build,
    example: "Nbbs", "BlockAlloc", "let a", "alloc(3, 0)", "free(block, 3, 0)"
);
caller_metadata!(
    Nbbs4,
    Nbbs4::plan,
    Nbbs4::build,
    example: "Nbbs4", "BlockAlloc", "let a", "alloc(3, 0)", "free(block, 3, 0)"
);
