//! Results: per-repetition outcomes summarised into a [`Report`] of [`Record`]s, then written
//! as a table ([`table`]), JSON and CSV ([`json`]) and plots ([`plot`]).
//!
//! Layers, each using only those above it: [`Stat`], the column layout and the chart drawing;
//! the real-time tables ([`latency`]); the [`Report`] and its summary; the table, the JSON and
//! CSV files and the plots of a report; this module, which writes them all.

mod chart;
mod columns;
pub mod json;
pub mod latency;
pub mod plot;
mod stat;
mod summary;
pub mod table;

use std::path::{Path, PathBuf};

pub use stat::Stat;
pub use summary::{
    summarize, FragRecord, FragRound, Record, Report, RunMeta, Sample, FAULTS_PER_OP_LIMIT,
    RATIO_RULE,
};

/// The files written for a report.
pub struct Written {
    /// Every file, in the order written.
    pub files: Vec<PathBuf>,
}

/// Writes the JSON, CSV and plots of `report` into `dir` (created if missing).
pub fn write_all(report: &Report, dir: &Path, plots: bool) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    let mut files = json::write(report, dir)?;
    if plots {
        files.extend(plot::write(report, dir)?);
    }
    Ok(Written { files })
}
