//! The machine and build a run measured on, recorded in its JSON so that results can be
//! compared only with results from the same setup.

use serde::Serialize;

/// What identifies the measuring setup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// The CPU's model name.
    pub cpu_model: String,
    /// The cores this process may run on.
    pub cores: usize,
    /// The kernel: system name and release.
    pub kernel: String,
    /// The compiler that built the tool.
    pub rustc: String,
    /// The git commit of the working tree the tool ran in, `-dirty` if it had changes.
    pub commit: String,
    /// When the run started, UTC, ISO 8601.
    pub date: String,
}

impl Machine {
    /// The current machine, build and time.
    pub fn current() -> Machine {
        Machine {
            cpu_model: cpu_model(),
            cores: crate::runner::usable_cpus().len(),
            kernel: kernel(),
            rustc: env!("BUDDYBENCH_RUSTC").to_string(),
            commit: commit(),
            date: utc_now().iso(),
        }
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn kernel() -> String {
    let read = |f: &str| std::fs::read_to_string(f).map(|s| s.trim().to_string());
    match (
        read("/proc/sys/kernel/ostype"),
        read("/proc/sys/kernel/osrelease"),
    ) {
        (Ok(t), Ok(r)) => format!("{t} {r}"),
        _ => std::env::consts::OS.to_string(),
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn commit() -> String {
    match git(&["rev-parse", "HEAD"]) {
        Some(c) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        None => "unknown (not run in a git checkout)".into(),
    }
}

/// A UTC time to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    /// Year, month (1-12), day (1-31), hour, minute, second.
    pub parts: [u64; 6],
}

impl Utc {
    /// `2026-01-31T12:00:00Z`.
    pub fn iso(self) -> String {
        let [y, mo, d, h, mi, s] = self.parts;
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }

    /// `2026-01-31-120000`: sorts by time and is safe in a file name.
    pub fn folder(self) -> String {
        let [y, mo, d, h, mi, s] = self.parts;
        format!("{y:04}-{mo:02}-{d:02}-{h:02}{mi:02}{s:02}")
    }
}

/// The time now.
pub fn utc_now() -> Utc {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_of(secs)
}

/// The civil UTC time `secs` after the Unix epoch (Howard Hinnant's days-to-civil).
pub fn utc_of(secs: u64) -> Utc {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    Utc {
        parts: [
            y as u64,
            m as u64,
            d as u64,
            rem / 3600,
            rem / 60 % 60,
            rem % 60,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(utc_of(0).iso(), "1970-01-01T00:00:00Z");
        assert_eq!(utc_of(951_782_400).iso(), "2000-02-29T00:00:00Z");
        assert_eq!(utc_of(1_700_000_000).folder(), "2023-11-14-221320");
    }
}
