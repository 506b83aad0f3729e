//! The workloads by name: what each is, the paper it comes from, how it runs, and what it
//! needs (orders, heap, calls).

use super::params::{Params, Stop};
use super::realtime::{contrived, latency};
use super::{llfree, nbbs, reclaim};

/// Which paper a workload comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// NBBS (Marotta et al.): size-based, from the reference code's `TB_*` benchmarks.
    Nbbs,
    /// LLFree (Wrenger et al.): frame-based, from llfree-rs' `bench`.
    Llfree,
    /// The real-time buddy paper (Defoe et al.) and tail latency: worst cases, not throughput.
    Realtime,
}

impl Suite {
    /// The name users select the whole suite by.
    pub const fn name(self) -> &'static str {
        match self {
            Suite::Nbbs => "nbbs",
            Suite::Llfree => "llfree",
            Suite::Realtime => "realtime",
        }
    }

    /// Every suite.
    pub const ALL: [Suite; 3] = [Suite::Nbbs, Suite::Llfree, Suite::Realtime];
}

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// NBBS: bursts of allocations then frees, `2k` rounds of `burst/k` blocks (`k` = units per block).
    LinuxScalability,
    /// NBBS: Hoard's thread test; bursts shrink with the thread count.
    ThreadTest,
    /// NBBS: Larson & Krishnan; random free+alloc of held blocks, successor threads free them.
    Larson,
    /// NBBS: a fixed pool of mixed sizes, random free and realloc of the same size.
    ConstantOccupancy,
    /// NBBS: alloc immediately followed by free.
    Cached,
    /// Not in the default suite: allocations that fail, on a heap full of blocks of one size.
    FullHeap,
    /// Not in the default suite: the reclaim loop (free, re-take, refused huge request) on a
    /// heap with one free block in every huge frame.
    Reclaim,
    /// LLFree: allocate half the memory, then free it.
    Bulk,
    /// LLFree: with half the memory held, alloc+free pairs.
    Repeat,
    /// LLFree: allocate half the memory, free it in random order across threads.
    Rand,
    /// LLFree: fragment with order 0, reallocate 10% per round, measure huge frames.
    Frag,
    /// Real-time: per-operation latency percentiles on three patterns.
    Latency,
    /// Real-time: §3.1's contrived case, N blocks, every other freed, then a larger request.
    Contrived,
    /// Real-time: share of requests the estranged and Knuth's buddy serve immediately.
    EstrangedShare,
    /// Real-time: moves and time of on-demand defragmentation on the worst-case heap.
    Defrag,
}

impl Workload {
    /// Every workload, in the order the suite runs them.
    pub const ALL: [Workload; 15] = [
        Workload::LinuxScalability,
        Workload::ThreadTest,
        Workload::Larson,
        Workload::ConstantOccupancy,
        Workload::Cached,
        Workload::FullHeap,
        Workload::Reclaim,
        Workload::Bulk,
        Workload::Repeat,
        Workload::Rand,
        Workload::Frag,
        Workload::Latency,
        Workload::Contrived,
        Workload::EstrangedShare,
        Workload::Defrag,
    ];

    /// The name users select it by.
    pub const fn name(self) -> &'static str {
        match self {
            Workload::LinuxScalability => "linux-scalability",
            Workload::ThreadTest => "thread-test",
            Workload::Larson => "larson",
            Workload::ConstantOccupancy => "constant-occupancy",
            Workload::Cached => "cached",
            Workload::FullHeap => "full-heap",
            Workload::Reclaim => "reclaim",
            Workload::Bulk => "bulk",
            Workload::Repeat => "repeat",
            Workload::Rand => "rand",
            Workload::Frag => "frag",
            Workload::Latency => "latency",
            Workload::Contrived => "contrived",
            Workload::EstrangedShare => "estranged-share",
            Workload::Defrag => "defrag",
        }
    }

    /// One line saying what it does.
    pub const fn about(self) -> &'static str {
        match self {
            Workload::LinuxScalability => {
                "NBBS: per thread 2k rounds of a burst of B/k allocations of k units, then free them"
            }
            Workload::ThreadTest => {
                "NBBS: per thread bursts of B/P/k allocations then frees, repeated R*k times"
            }
            Workload::Larson => {
                "NBBS: hold C blocks, free a random one and allocate a random size in [k, 8k]; successor threads inherit the blocks; fixed time"
            }
            Workload::ConstantOccupancy => {
                "NBBS: hold 1x16k, 2x8k, 4x4k, 8x2k, 16xk units, then N/P times free a random one and reallocate its size"
            }
            Workload::Cached => "NBBS: per thread N alloc+free pairs of one size",
            Workload::FullHeap => {
                "not in the papers: fill the heap with blocks of k units, then per thread N allocations of 4K and N of 2M, which fail (fail 4K, fail 2M); then free every other block and make up to 2000 allocations of 2k, which fail too (fail 2k: free units, no block of the size)"
            }
            Workload::Reclaim => {
                "not in the papers: fill the heap with blocks of k units, free one in every 2 MiB frame, then per thread one request of 2M (first 2M) and tries of free a block, allocate it again, ask for 2M (re-take), which all fail"
            }
            Workload::Bulk => {
                "LLFree: each thread allocates units/P/2/2^order blocks, barrier, frees them (get and put)"
            }
            Workload::Repeat => {
                "LLFree: each thread holds units/P/2/2^order blocks, then as many alloc+free pairs"
            }
            Workload::Rand => {
                "LLFree: allocate as in bulk, shuffle all blocks across threads, each frees its share (put)"
            }
            Workload::Frag => {
                "LLFree: allocate 90% as order 0, free half at random, then rounds of reallocating 10%; free huge frames and compaction cost per round"
            }
            Workload::Latency => {
                "real-time: p50/p99/p99.9/max ns of each alloc and free on Constant Occupancy, Larson, and a heap ~95% full with mixed orders (k..8k)"
            }
            Workload::Contrived => {
                "real-time (§3.1): N blocks of k units, free every other, then one request of 2k; its time and success, N from the heap"
            }
            Workload::EstrangedShare => {
                "real-time (§3.3): share of requests served immediately, estranged vs Knuth, on a Java-like size mix (16 B units); ns/op"
            }
            Workload::Defrag => {
                "real-time (§2.8): moves and time to satisfy one request of order k on a heap with every other unit busy, Knuth and estranged"
            }
        }
    }

    /// The paper it comes from.
    pub const fn suite(self) -> Suite {
        match self {
            Workload::LinuxScalability
            | Workload::ThreadTest
            | Workload::Larson
            | Workload::ConstantOccupancy
            | Workload::Cached
            | Workload::FullHeap
            | Workload::Reclaim => Suite::Nbbs,
            Workload::Bulk | Workload::Repeat | Workload::Rand | Workload::Frag => Suite::Llfree,
            Workload::Latency
            | Workload::Contrived
            | Workload::EstrangedShare
            | Workload::Defrag => Suite::Realtime,
        }
    }

    /// Whether the default suite runs it (and a suite's name selects it): the ones that are
    /// not would lengthen the default run for a question it does not ask. `all` and its name
    /// select it.
    pub const fn in_default_suite(self) -> bool {
        !matches!(self, Workload::FullHeap | Workload::Reclaim)
    }

    /// The workload named `name`.
    pub fn find(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// How many orders above the base order it allocates (Larson up to 8k, Constant
    /// Occupancy up to 16k units).
    pub fn order_span(self, params: &Params) -> u32 {
        match self {
            Workload::Larson => params.larson_span,
            Workload::ConstantOccupancy => nbbs::POOL_SPAN,
            Workload::Latency => latency::order_span(params),
            Workload::Contrived => 1,
            _ => 0,
        }
    }

    /// The largest order it allocates at `order`: full-heap asks for a huge frame whatever
    /// the blocks filling the heap.
    pub fn top_order(self, order: u32, params: &Params) -> u32 {
        match self {
            Workload::FullHeap => order.max(nbbs::FULL_HEAP_LARGE),
            Workload::Reclaim => order.max(reclaim::LARGE),
            _ => order + self.order_span(params),
        }
    }

    /// Whether it runs once on allocators of its own choosing (Knuth's and the estranged
    /// buddy, built as concrete types to reach their counters) rather than once per allocator
    /// of the run.
    pub const fn standalone(self) -> bool {
        matches!(self, Workload::EstrangedShare | Workload::Defrag)
    }

    /// Whether it reads block indices as positions in the region, or needs a region that
    /// fills up (and so cannot run on an allocator whose indices are addresses: malloc).
    pub const fn needs_region(self) -> bool {
        matches!(self.suite(), Suite::Llfree)
            || matches!(self, Workload::FullHeap | Workload::Reclaim)
    }

    /// Whether it is measured for the memory it leaves usable, not for time: run once per
    /// allocator on a fresh instance, without warm-up or repeated phases.
    pub const fn measures_state(self) -> bool {
        matches!(self, Workload::Frag)
    }

    /// Whether it sizes its own heap (the real-time workloads: the contrived case's heap is
    /// its N, latency's is ~95% full by design) rather than running on the run's heap.
    pub const fn own_heap(self) -> bool {
        matches!(self.suite(), Suite::Realtime)
    }

    /// Whether its timed phases are repeated on the same allocator until each lasts long
    /// enough to time: the throughput workloads, not the ones measuring single operations or
    /// memory state.
    pub const fn repeatable(self) -> bool {
        matches!(self.suite(), Suite::Nbbs | Suite::Llfree)
            && !self.measures_state()
            && !matches!(self, Workload::Reclaim)
    }

    /// Its parameters with their values, for `--list`.
    pub fn parameters(self, p: &Params) -> String {
        match self {
            Workload::LinuxScalability => format!(
                "B = {} units per burst per thread; k = 2^order units per block; 2k rounds of B/k allocations then B/k frees",
                p.ls_burst_units
            ),
            Workload::ThreadTest => format!(
                "B = {} units per burst over all P threads; R = {}; R*k rounds of B/P/k allocations then frees",
                p.tt_burst_units, p.tt_repeats
            ),
            Workload::Larson => format!(
                "C = {} blocks held per thread, sizes k..k*2^{}; a successor thread takes over every {} steps; stops after {}",
                p.larson_chunks,
                p.larson_span,
                p.larson_steps,
                match p.larson_stop {
                    Stop::Time(d) => format!("{} ms", d.as_millis()),
                    Stop::Generations(g) => format!("{g} generations"),
                }
            ),
            Workload::ConstantOccupancy => format!(
                "pool of {} blocks ({} units of k) per thread; N = {} free+realloc steps over all threads",
                nbbs::POOL_BLOCKS,
                nbbs::POOL_UNITS,
                p.co_steps
            ),
            Workload::Cached => format!("N = {} alloc+free pairs per thread", p.cached_pairs),
            Workload::FullHeap => format!(
                "N = {} failing allocations per thread of each size; the heap is filled (untimed) and emptied on every pass, so give it a small --heap (e.g. 1G); needs --max-order 9 or more",
                p.full_heap_fails
            ),
            Workload::Reclaim => format!(
                "up to {} tries per thread; the heap is filled (untimed) and emptied on every repetition; needs --max-order 9 or more",
                reclaim::TRIES
            ),
            Workload::Bulk | Workload::Repeat | Workload::Rand => format!(
                "W = {} units of work ({} MiB; the paper: half the memory); each of P threads handles W/P/2/2^order blocks, at least {}/P",
                p.llfree_units,
                p.llfree_units * 4 / 1024,
                p.llfree_min_blocks
            ),
            Workload::Frag => format!(
                "the whole heap: 90% allocated as 4 KiB, half freed at random, then {} rounds of freeing and reallocating 10%",
                p.frag_rounds
            ),
            Workload::Latency => latency::parameters(p),
            Workload::Contrived => format!(
                "N = {:?} blocks of k units, every other freed; {} requests of 2k",
                p.rt.contrived_blocks, p.rt.contrived_requests
            ),
            Workload::EstrangedShare => {
                format!("{} requests of a Java-like size mix", p.rt.share_requests)
            }
            Workload::Defrag => format!(
                "orders {:?} on a heap of {} units with every other unit busy",
                p.rt.defrag_orders, p.rt.defrag_units
            ),
        }
    }

    /// Units the workload may hold at once at `order` with `threads` threads; the heap must
    /// have at least this many.
    pub fn units_needed(self, order: u32, threads: usize, params: &Params) -> usize {
        let k = 1usize << order;
        match self {
            Workload::LinuxScalability => threads * nbbs::burst(params.ls_burst_units, k) * k,
            Workload::ThreadTest => {
                threads * nbbs::burst(params.tt_burst_units / threads.max(1), k) * k
            }
            Workload::Larson => nbbs::larson_units(order, threads, params),
            Workload::ConstantOccupancy => nbbs::constant_occupancy_units(order, threads),
            Workload::Cached | Workload::FullHeap | Workload::Reclaim => threads * k,
            // The blocks of the work, held at once.
            Workload::Bulk | Workload::Repeat | Workload::Rand => {
                llfree::blocks_per_thread(params, threads, order) * threads * k + threads * k
            }
            Workload::Frag => buddyfree_baselines::stats::HUGE_FRAME_UNITS.max(2 * threads),
            Workload::Latency => latency::units_needed(order, threads, params),
            // At least two blocks and the remainder; the sweep sizes its own heaps.
            Workload::Contrived => contrived::units_for(2, k),
            // They build their own heaps.
            Workload::EstrangedShare | Workload::Defrag => 0,
        }
    }

    /// Allocator calls one run makes over all threads (untimed ones included), or `None` for
    /// a run bounded by time.
    pub fn calls(self, order: u32, threads: usize, units: usize, params: &Params) -> Option<u64> {
        let k = 1usize << order;
        let t = threads;
        let n = llfree::blocks_per_thread(params, t, order) * t;
        let calls = match self {
            Workload::LinuxScalability => t * 2 * k * nbbs::burst(params.ls_burst_units, k) * 2,
            Workload::ThreadTest => {
                t * params.tt_repeats * k * nbbs::burst(params.tt_burst_units / t, k) * 2
            }
            Workload::Larson => match params.larson_stop {
                Stop::Generations(g) => {
                    t * (2 * params.larson_chunks + 2 * g * params.larson_steps)
                }
                Stop::Time(_) => return None,
            },
            Workload::ConstantOccupancy => t * (2 * nbbs::POOL_BLOCKS + 2 * (params.co_steps / t)),
            Workload::Cached => t * params.cached_pairs * 2,
            // Fill until one failure per thread, the failing requests, free the blocks.
            Workload::FullHeap => {
                // One request per reclaim try (its free is the fill's), for every thread
                // that holds enough blocks, and more for the frames it gets.
                let fails = params.full_heap_fails;
                let fragmented = fails.min(nbbs::FRAGMENTED_FAILS);
                let reclaims = if order < nbbs::FULL_HEAP_LARGE {
                    fragmented
                } else {
                    0
                };
                2 * (units >> order) + t + t * (2 * fails + fragmented + reclaims)
            }
            // Fill, free all, one request, three calls per try.
            Workload::Reclaim => 2 * (units >> order) + 2 * t + t * 3 * reclaim::TRIES,
            Workload::Bulk | Workload::Rand => 2 * n,
            Workload::Repeat => 4 * n,
            // Per thread: its share of 90% allocated and freed, and each round a tenth of
            // the half it holds freed and reallocated.
            Workload::Frag => {
                let per_thread = units * 9 / 10 / t;
                t * (2 * per_thread + 2 * params.frag_rounds * (per_thread / 2 / 10))
            }
            Workload::Latency => latency::timed_ops(threads, params) * 3 / 2,
            Workload::Contrived => {
                // N allocations and N frees, and each request with its free.
                let n = contrived::blocks_in(units, order);
                2 * n + 2 * params.rt.contrived_requests
            }
            Workload::EstrangedShare => 2 * 2 * params.rt.share_requests,
            // Per order and allocator: fill the heap, free half, one request.
            Workload::Defrag => params.rt.defrag_orders.len() * 3 * params.rt.defrag_units,
        };
        Some(calls as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for w in Workload::ALL {
            assert_eq!(Workload::find(w.name()), Some(w));
        }
        assert_eq!(Workload::find("nope"), None);
    }
}
