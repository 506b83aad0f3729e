//! The workloads of the NBBS paper ([`nbbs`]), the LLFree paper ([`llfree`]) and the real-time
//! buddy paper ([`realtime`]), as the papers and their published code define them (see the References in the
//! repository's README).
//!
//! A workload runs once over one freshly built allocator at one order and thread count and
//! returns its [`Outcome`]: per timed phase the operations done and each thread's time.
//! Allocation failures are counted, never fatal; a failing `free` is an allocator bug and is
//! counted separately.

pub mod crash;
pub mod llfree;
pub mod nbbs;
pub mod realtime;

use std::time::Duration;

use buddyfree::stats::Fragmentation;
use buddyfree::{BlockAlloc, Error};

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
    pub const ALL: [Workload; 14] = [
        Workload::LinuxScalability,
        Workload::ThreadTest,
        Workload::Larson,
        Workload::ConstantOccupancy,
        Workload::Cached,
        Workload::FullHeap,
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
                "not in the papers: fill the heap with blocks of k units, then per thread N allocations of 4K and N of 2M, which fail (fail 4K, fail 2M)"
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
            | Workload::FullHeap => Suite::Nbbs,
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
        !matches!(self, Workload::FullHeap)
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
            Workload::ConstantOccupancy => 4,
            Workload::Latency => realtime::latency::order_span(params),
            Workload::Contrived => 1,
            _ => 0,
        }
    }

    /// The largest order it allocates at `order`: full-heap asks for a huge frame whatever
    /// the blocks filling the heap.
    pub fn top_order(self, order: u32, params: &Params) -> u32 {
        match self {
            Workload::FullHeap => order.max(nbbs::FULL_HEAP_LARGE),
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
        matches!(self.suite(), Suite::Llfree) || matches!(self, Workload::FullHeap)
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
        matches!(self.suite(), Suite::Nbbs | Suite::Llfree) && !self.measures_state()
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
            Workload::Latency => realtime::latency::parameters(p),
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
            Workload::Larson => threads * params.larson_chunks * (k << params.larson_span),
            Workload::ConstantOccupancy => threads * nbbs::POOL_UNITS * k,
            Workload::Cached | Workload::FullHeap => threads * k,
            // The blocks of the work, held at once.
            Workload::Bulk | Workload::Repeat | Workload::Rand => {
                llfree::blocks_per_thread(params, threads, order) * threads * k + threads * k
            }
            Workload::Frag => buddyfree::stats::HUGE_FRAME_UNITS.max(2 * threads),
            Workload::Latency => realtime::latency::units_needed(order, threads, params),
            // At least two blocks and the remainder; the sweep sizes its own heaps.
            Workload::Contrived => realtime::contrived::units_for(2, k),
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
            Workload::FullHeap => 2 * (units >> order) + t + t * 2 * params.full_heap_fails,
            Workload::Bulk | Workload::Rand => 2 * n,
            Workload::Repeat => 4 * n,
            Workload::Frag => {
                let held = units * 9 / 10 / t / 2 * t;
                2 * units * 9 / 10 + 2 * params.frag_rounds * (held / 10)
            }
            Workload::Latency => realtime::latency::timed_ops(threads, params) * 3 / 2,
            Workload::Contrived => {
                // N allocations and N frees, and each request with its free.
                let n = realtime::contrived::blocks_in(units, order);
                2 * n + 2 * params.rt.contrived_requests
            }
            Workload::EstrangedShare => 2 * 2 * params.rt.share_requests,
            // Per order and allocator: fill the heap, free half, one request.
            Workload::Defrag => params.rt.defrag_orders.len() * 3 * params.rt.defrag_units,
        };
        Some(calls as u64)
    }
}

/// When a time-bounded workload (Larson) stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// After this many generations per thread (deterministic; for tests).
    Generations(usize),
    /// After the first generation that ends past this time.
    Time(Duration),
}

/// The workloads' size parameters. [`Params::default`] is the papers' definition scaled down
/// so that the default suite stays short; the comment on each field gives the paper's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Linux Scalability: units per burst per thread (paper: 87040, i.e. 340 MiB).
    pub ls_burst_units: usize,
    /// Thread Test: units per burst over all threads (paper: 50000).
    pub tt_burst_units: usize,
    /// Thread Test: repetitions per unit of block size (paper: 500).
    pub tt_repeats: usize,
    /// Larson: blocks each thread holds.
    pub larson_chunks: usize,
    /// Larson: sizes range over `[k, k << span]` units.
    pub larson_span: u32,
    /// Larson: free+alloc steps per thread generation, before a successor takes over.
    pub larson_steps: usize,
    /// Larson: when to stop.
    pub larson_stop: Stop,
    /// Constant Occupancy: free+realloc steps over all threads (paper: 50M).
    pub co_steps: usize,
    /// Cached Allocation: alloc+free pairs per thread (paper: 5M).
    pub cached_pairs: usize,
    /// full-heap: failing allocations per thread of each size (not in the papers).
    pub full_heap_fails: usize,
    /// bulk, repeat, rand: units of work, `P` threads handle `W/P/2/2^order` blocks each
    /// (paper: the heap's units, 125 GiB).
    pub llfree_units: usize,
    /// bulk, repeat, rand: the least blocks over all threads, whatever their order.
    pub llfree_min_blocks: usize,
    /// frag: reallocation rounds (paper: 100).
    pub frag_rounds: usize,
    /// Seed of every random choice, so runs are repeatable.
    pub seed: u64,
    /// Linux Scalability and Thread Test: each burst (its allocations, then its frees) on
    /// a core held for it ([`buddyfree::BlockAlloc::with_core`]), as a kernel that allocates
    /// a burst with preemption off would run it (not in the papers, which call per
    /// operation; off by default).
    pub held_bursts: bool,
    /// The real-time suite's sizes.
    pub rt: realtime::RtParams,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            ls_burst_units: 16384,
            tt_burst_units: 50000,
            tt_repeats: 2,
            larson_chunks: 256,
            larson_span: 3,
            larson_steps: 10_000,
            larson_stop: Stop::Time(Duration::from_millis(20)),
            co_steps: 200_000,
            cached_pairs: 50_000,
            full_heap_fails: 100_000,
            llfree_units: 1 << 18,
            llfree_min_blocks: 1 << 12,
            frag_rounds: 100,
            seed: 0x5eed_b0dd,
            held_bursts: false,
            rt: realtime::RtParams::default(),
        }
    }
}

impl Params {
    /// Tiny sizes, for tests and smoke runs.
    pub fn quick() -> Self {
        Params {
            ls_burst_units: 64,
            tt_burst_units: 128,
            tt_repeats: 2,
            larson_chunks: 8,
            larson_span: 2,
            larson_steps: 64,
            larson_stop: Stop::Generations(3),
            co_steps: 256,
            cached_pairs: 256,
            full_heap_fails: 256,
            llfree_units: 1 << 12,
            llfree_min_blocks: 0,
            frag_rounds: 5,
            seed: 0x5eed_b0dd,
            held_bursts: false,
            rt: realtime::RtParams::quick(),
        }
    }
}

/// One timed phase of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// What one operation is: "op" (an alloc or a free), "get", "put", "get+put", or a
    /// failing allocation of 4 KiB or 2 MiB ("fail 4K", "fail 2M").
    pub name: &'static str,
    /// Operations over all threads.
    pub ops: u64,
    /// Each thread's time for its part.
    pub thread_times: Vec<Duration>,
}

/// What one run of a workload did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The timed phases.
    pub phases: Vec<Phase>,
    /// Allocations attempted, including failed ones.
    pub allocs: u64,
    /// Frees done.
    pub frees: u64,
    /// Allocations that failed.
    pub failures: u64,
    /// Frees the allocator rejected (a bug in it).
    pub bad_frees: u64,
    /// frag only: the fragmentation after the initial phase (round 0) and after each round.
    pub frag: Vec<Fragmentation>,
    /// The real-time workloads' measurements.
    pub realtime: realtime::RtOutcome,
    /// Minor page faults taken inside the timed phases.
    pub faults: u64,
    /// How many times the workload ran to make up this outcome (see [`Outcome::absorb`]).
    pub passes: u32,
}

/// Operation counts of one thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Allocations attempted.
    pub allocs: u64,
    /// Frees done.
    pub frees: u64,
    /// Allocations that failed.
    pub failures: u64,
    /// Frees rejected.
    pub bad_frees: u64,
}

/// Makes allocator calls and records them: [`Counts`] counts them, the real-time suite's
/// recorder also times each one. The workloads shared by both are generic over it.
pub trait Recorder: Send {
    /// Allocates one block; `None` when the allocator failed.
    fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize>;
    /// Frees one block.
    fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize);
    /// The calls made so far.
    fn counts(&self) -> Counts;
}

impl Recorder for Counts {
    #[inline(always)]
    fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize> {
        Counts::alloc(self, a, order, core)
    }

    #[inline(always)]
    fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize) {
        Counts::free(self, a, index, order, core)
    }

    fn counts(&self) -> Counts {
        *self
    }
}

impl Counts {
    /// Allocates one block, counting it; `None` when the allocator failed.
    #[inline(always)]
    pub fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize> {
        self.allocated(a.alloc(order, core))
    }

    /// Frees one block, counting it.
    #[inline(always)]
    pub fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize) {
        self.freed(a.free(index, order, core));
    }

    /// Counts the allocation that answered `answer`; the block, if there is one.
    #[inline(always)]
    pub fn allocated(&mut self, answer: Result<usize, Error>) -> Option<usize> {
        self.allocs += 1;
        answer.inspect_err(|_| self.failures += 1).ok()
    }

    /// Counts the free that answered `answer`.
    #[inline(always)]
    pub fn freed(&mut self, answer: Result<(), Error>) {
        self.frees += 1;
        if answer.is_err() {
            self.bad_frees += 1;
        }
    }

    /// Operations attempted.
    pub fn ops(&self) -> u64 {
        self.allocs + self.frees
    }

    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Counts) {
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.failures += o.failures;
        self.bad_frees += o.bad_frees;
    }
}

impl Outcome {
    /// Adds another pass of the same workload to this one: per phase the operations and each
    /// thread's time add up, as if the pass had been part of the phase.
    pub fn absorb(&mut self, o: Outcome) {
        for (p, q) in self.phases.iter_mut().zip(o.phases) {
            p.ops += q.ops;
            for (t, u) in p.thread_times.iter_mut().zip(q.thread_times) {
                *t += u;
            }
        }
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.failures += o.failures;
        self.bad_frees += o.bad_frees;
        self.faults += o.faults;
        self.passes += o.passes;
    }

    /// The shortest phase's time: its slowest thread's.
    pub fn shortest_phase(&self) -> Duration {
        self.phases
            .iter()
            .map(|p| p.thread_times.iter().copied().max().unwrap_or_default())
            .min()
            .unwrap_or_default()
    }

    /// Adds up the counts of the threads.
    pub fn count(&mut self, counts: &[Counts]) {
        let mut total = Counts::default();
        for c in counts {
            total.add(c);
        }
        self.allocs += total.allocs;
        self.frees += total.frees;
        self.failures += total.failures;
        self.bad_frees += total.bad_frees;
    }
}

/// Runs `workload` once on `alloc` (built for `threads` cores over its whole region).
/// [`Workload::standalone`] workloads ignore `alloc`, `order` and `threads`.
pub fn run(
    workload: Workload,
    alloc: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    params: &Params,
) -> Outcome {
    let faults = crate::runner::timed_faults();
    let mut out = run_once(workload, alloc, order, threads, params);
    out.faults = crate::runner::timed_faults() - faults;
    out.passes = 1;
    out
}

/// Runs `workload` on `alloc` again and again until its shortest phase has lasted `min` in
/// total (at most `max_passes` times): a phase of a few microseconds measures the clock and
/// the barrier, not the allocator. The workloads leave the allocator empty, so each pass
/// starts where the first did (with the allocator's caches warm).
pub fn run_for(
    workload: Workload,
    alloc: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    params: &Params,
    min: Duration,
    max_passes: u32,
) -> Outcome {
    let mut out = run(workload, alloc, order, threads, params);
    if !workload.repeatable() {
        return out;
    }
    while out.shortest_phase() < min && out.passes < max_passes {
        out.absorb(run(workload, alloc, order, threads, params));
    }
    out
}

fn run_once(
    workload: Workload,
    alloc: &dyn BlockAlloc,
    order: u32,
    threads: usize,
    params: &Params,
) -> Outcome {
    match workload {
        Workload::LinuxScalability => nbbs::linux_scalability(alloc, order, threads, params),
        Workload::ThreadTest => nbbs::thread_test(alloc, order, threads, params),
        Workload::Larson => nbbs::larson(alloc, order, threads, params),
        Workload::ConstantOccupancy => nbbs::constant_occupancy(alloc, order, threads, params),
        Workload::Cached => nbbs::cached(alloc, order, threads, params),
        Workload::FullHeap => nbbs::full_heap(alloc, order, threads, params),
        Workload::Bulk => llfree::bulk(alloc, order, threads, params),
        Workload::Repeat => llfree::repeat(alloc, order, threads, params),
        Workload::Rand => llfree::rand(alloc, order, threads, params),
        Workload::Frag => llfree::frag(alloc, threads, params),
        Workload::Latency => realtime::latency::run(alloc, order, threads, params),
        Workload::Contrived => realtime::contrived::run(alloc, order, params),
        Workload::EstrangedShare | Workload::Defrag => realtime::run_standalone(workload, params),
    }
}

/// A small fast generator (xorshift64*), so random choices cost next to nothing in the timed
/// loops and are the same on every run.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for stream `stream` of seed `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        // splitmix64 of the pair, so nearby streams start far apart; never zero.
        let mut z = seed ^ stream.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`), by multiply-shift (Lemire's, without the rejection step:
    /// the bias is below `n / 2^64`).
    #[inline(always)]
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Shuffles `v` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// The phase built from each thread's `(counts, time)`: the operations they attempted.
pub(crate) fn phase(name: &'static str, parts: &[(Counts, Duration)]) -> Phase {
    Phase {
        name,
        ops: parts.iter().map(|(c, _)| c.ops()).sum(),
        thread_times: parts.iter().map(|&(_, t)| t).collect(),
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

    #[test]
    fn rng_below_stays_in_range_and_shuffle_permutes() {
        let mut r = Rng::new(1, 2);
        assert!((0..10_000).all(|_| r.below(7) < 7));
        let mut v: Vec<usize> = (0..100).collect();
        r.shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }
}
