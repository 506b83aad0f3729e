//! Text tables: rows of cells laid out in aligned columns under a ruled header.

use std::fmt::Write as _;

/// Lays out rows of cells in columns; the first row is the header. Text columns are
/// left-aligned, numeric ones right-aligned.
pub(crate) fn columns(rows: &[Vec<String>], numeric: &[bool]) -> String {
    let n = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..n)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            if numeric[c] {
                let _ = write!(line, "{cell:>w$}", w = widths[c]);
            } else {
                let _ = write!(line, "{cell:<w$}", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            let total = widths.iter().sum::<usize>() + 2 * n.saturating_sub(1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}
