//! What one run measures and what it gave: a [`Case`] (a workload at one order, thread count
//! and heap) and the [`RunSet`] of its repetitions on one allocator. The suite makes them and
//! the report summarises them, so they sit below both.

use crate::workloads::{Outcome, Params, Workload};

/// One workload at one order and thread count over a heap of `units` units (for frag, with
/// one share of unmovable allocations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// The workload.
    pub workload: Workload,
    /// The (smallest) block order it allocates.
    pub order: u32,
    /// Worker threads.
    pub threads: usize,
    /// Units in the heap.
    pub units: usize,
    /// frag: the chance of an unmovable allocation, in percent
    /// ([`Params::frag_unmovable_percent`]); 0 for the other workloads.
    pub unmovable: u32,
}

impl Case {
    /// The workloads' parameters for this case: `params` with its share of unmovable
    /// allocations.
    pub fn params(&self, params: &Params) -> Params {
        Params {
            frag_unmovable_percent: self.unmovable,
            ..params.clone()
        }
    }
}

/// All repetitions of one case on one allocator.
pub struct RunSet {
    /// The allocator's name.
    pub alloc: &'static str,
    /// What ran.
    pub case: Case,
    /// One outcome per repetition.
    pub outcomes: Vec<Outcome>,
}
