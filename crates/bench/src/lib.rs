//! buddybench: the NBBS and LLFree papers' workloads, run against every buddyfree allocator
//! (and the system allocator), compared in a table, JSON, CSV and plots.
//!
//! The binary (`src/main.rs`) is a thin command line over [`suite::Plan`]; the pieces are
//! here so the tests can drive them.

#![warn(missing_docs)]

pub mod allocs;
pub mod machine;
pub mod report;
pub mod runner;
pub mod suite;
pub mod system;
pub mod workloads;
pub mod zone;
