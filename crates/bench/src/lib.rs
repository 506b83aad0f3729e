//! buddybench: the NBBS and LLFree papers' workloads, run against every buddyfree allocator
//! (and the system allocator), compared in a table, JSON, CSV and plots.
//!
//! The binary (`src/main.rs`) is a thin command line over [`suite::Plan`]; the pieces are
//! here so the tests can drive them.
//!
//! # Layers
//!
//! Each module uses only modules of the layers above its own, so that no two modules import
//! each other: the report reads the suite's data types ([`case`]), never its runner.
//!
//! 1. [`units`] (sizes), [`runner`] (worker threads and their clock), [`zone`] (persistent
//!    zones);
//! 2. [`system`] (malloc as an allocator), [`machine`] (what measured), [`workloads`];
//! 3. [`allocs`] (the allocators by name), [`case`] (what one run measures and gave);
//! 4. [`report`]: run sets summarised, printed, written and plotted;
//! 5. [`suite`]: a request checked into a [`suite::Plan`], run into a [`report::Report`];
//! 6. the binary: the command line.
//!
//! [`workloads`] and [`report`] are layered inside the same way (see their docs).

#![warn(missing_docs)]

pub mod allocs;
pub mod case;
pub mod machine;
pub mod report;
pub mod runner;
pub mod suite;
pub mod system;
pub mod units;
pub mod workloads;
pub mod zone;
