//! Timing single allocator calls: a clock whose own cost is measured once and subtracted,
//! and a [`Recorder`] that puts each alloc's and free's time into a latency histogram.
//!
//! # Which clock
//! On x86-64 with an invariant TSC (CPUID 0x8000_0007, EDX bit 8: constant rate, running in
//! every power state, which is also what Linux requires to use it as its clocksource) the
//! clock reads the TSC directly, fenced with `lfence` on both sides so that the timed call
//! neither starts before the first reading nor is still running at the second. The tick
//! length is calibrated once against `Instant` over 20 ms. Why not `Instant` itself: on the
//! 2-core development VM its readings come in 10 ns steps and cost 20–30 ns per pair, the
//! same size as a buddy's whole allocation (the TSC: ~10 ns per pair, 0.4 ns resolution).
//! Elsewhere the clock is `Instant`.
//!
//! # Keeping the clock out of the numbers
//! A sample still holds part of the clock: the time from the first reading to the second
//! around nothing at all. [`Clock::calibrate`] measures that as the median of 20 000
//! back-to-back pairs, and every sample loses it (clamped at zero). It is reported with the
//! results. Counting the call (one add) happens inside the timed region and is not removed.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use buddyfree::BlockAlloc;
use hdrhistogram::Histogram;

use crate::workloads::counts::{Counts, Recorder};

/// The longest time a histogram holds exactly enough: 10 s; longer ones saturate there.
const HIGHEST_NS: u64 = 10_000_000_000;
/// Three significant digits: a recorded time is within 0.1% of the true one.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A latency histogram in nanoseconds.
pub fn histogram() -> Histogram<u64> {
    // Constant bounds that `new_with_bounds` accepts (low >= 1, high >= 2 * low, sigfig <= 5).
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("the constant histogram bounds are valid")
}

/// Where the clock's ticks come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source {
    /// The invariant TSC, ticks of `ns_per_tick` nanoseconds.
    Tsc {
        /// Calibrated against `Instant`.
        ns_per_tick: f64,
    },
    /// `std::time::Instant`, ticks of one nanosecond since the clock was made.
    Instant(Instant),
}

/// Times single operations, less the clock's own cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clock {
    source: Source,
    overhead_ticks: u64,
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use std::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 gives the highest extended leaf, so 0x8000_0007 is only asked where
    // it exists.
    __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & 1 << 8 != 0
}

/// Reads the TSC, after every earlier instruction has completed and before any later one
/// starts.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc() -> u64 {
    use std::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: `lfence` (SSE2) and `rdtsc` exist on every x86-64 processor and only read the
    // time-stamp counter or order instructions.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc() -> u64 {
    0
}

impl Clock {
    /// The process's clock, calibrated on first use.
    pub fn get() -> Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        *CLOCK.get_or_init(Clock::calibrate)
    }

    /// Picks the source, measures the TSC's tick against `Instant` (20 ms), then the cost
    /// of one reading pair: the median of 20 000 back-to-back pairs (after 1 000 to warm
    /// up), which a preemption in the middle cannot move.
    pub fn calibrate() -> Clock {
        let source = if invariant_tsc() {
            let (t0, c0) = (Instant::now(), tsc());
            while t0.elapsed() < Duration::from_millis(20) {}
            let (ns, ticks) = (t0.elapsed().as_nanos() as f64, tsc() - c0);
            Source::Tsc {
                ns_per_tick: ns / ticks.max(1) as f64,
            }
        } else {
            Source::Instant(Instant::now())
        };
        let mut clock = Clock {
            source,
            overhead_ticks: 0,
        };
        let mut pairs: Vec<u64> = (0..21_000)
            .map(|_| {
                let start = clock.ticks();
                clock.ticks().saturating_sub(start)
            })
            .skip(1_000)
            .collect();
        pairs.sort_unstable();
        clock.overhead_ticks = pairs[pairs.len() / 2];
        clock
    }

    /// The source in use, for the report: "tsc" or "instant".
    pub fn source_name(&self) -> &'static str {
        match self.source {
            Source::Tsc { .. } => "tsc",
            Source::Instant(_) => "instant",
        }
    }

    /// The cost of one reading pair, subtracted from every sample, in ns.
    pub fn overhead_ns(&self) -> f64 {
        self.ns(self.overhead_ticks)
    }

    #[inline(always)]
    fn ticks(&self) -> u64 {
        match self.source {
            Source::Tsc { .. } => tsc(),
            Source::Instant(origin) => origin.elapsed().as_nanos() as u64,
        }
    }

    #[inline(always)]
    fn ns(&self, ticks: u64) -> f64 {
        match self.source {
            Source::Tsc { ns_per_tick } => ticks as f64 * ns_per_tick,
            Source::Instant(_) => ticks as f64,
        }
    }

    /// Runs `f` and returns its result and its time in nanoseconds (rounded), less the
    /// clock's cost.
    #[inline(always)]
    pub fn time<T>(&self, f: impl FnOnce() -> T) -> (T, u64) {
        let start = self.ticks();
        let r = f();
        let ticks = self.ticks().saturating_sub(start);
        (
            r,
            self.ns(ticks.saturating_sub(self.overhead_ticks)).round() as u64,
        )
    }
}

/// The summary of a latency histogram, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Operations recorded.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// The longest, exactly.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// The percentiles of `h`, with `max` the exact longest time recorded into it. The
    /// percentiles are the histogram's (within 0.1%), capped at `max` so that they never
    /// exceed it by the histogram's rounding.
    pub fn of(h: &Histogram<u64>, max: u64) -> Percentiles {
        let q = |q: f64| h.value_at_quantile(q).min(max);
        Percentiles {
            count: h.len(),
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max,
            mean: h.mean(),
        }
    }
}

/// A histogram and the exact longest time recorded into it.
#[derive(Clone, Debug)]
pub struct Latencies {
    /// The times.
    pub hist: Histogram<u64>,
    /// The longest.
    pub max: u64,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            hist: histogram(),
            max: 0,
        }
    }
}

impl Latencies {
    /// Records one time.
    #[inline(always)]
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns);
        self.max = self.max.max(ns);
    }

    /// Adds `other`'s times (another thread's) to these.
    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides, so no value can fall outside.
        self.hist
            .add(&other.hist)
            .expect("histograms of equal bounds add");
        self.max = self.max.max(other.max);
    }

    /// The summary.
    pub fn percentiles(&self) -> Percentiles {
        Percentiles::of(&self.hist, self.max)
    }
}

/// Counts every call like [`Counts`] and records each one's time: allocations (failed ones
/// included: a real-time caller waits for those too) and frees apart.
#[derive(Clone, Debug)]
pub struct Timed {
    clock: Clock,
    counts: Counts,
    /// The allocations' times.
    pub alloc: Latencies,
    /// The frees' times.
    pub free: Latencies,
}

impl Timed {
    /// A recorder timing with `clock`.
    pub fn new(clock: Clock) -> Timed {
        Timed {
            clock,
            counts: Counts::default(),
            alloc: Latencies::default(),
            free: Latencies::default(),
        }
    }

    /// Adds another thread's counts and times to these.
    pub fn merge(&mut self, other: &Timed) {
        self.counts.add(&other.counts);
        self.alloc.merge(&other.alloc);
        self.free.merge(&other.free);
    }
}

impl Recorder for Timed {
    #[inline(always)]
    fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize> {
        // The counting is inside the timed region: one add and one compare, well below the
        // clock's resolution.
        let (r, ns) = self.clock.time(|| self.counts.alloc(a, order, core));
        self.alloc.record(ns);
        r
    }

    #[inline(always)]
    fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize) {
        let ((), ns) = self.clock.time(|| self.counts.free(a, index, order, core));
        self.free.record(ns);
    }

    fn counts(&self) -> Counts {
        self.counts
    }
}
