//! The command line: bad names and impossible parameters are clear errors (non-zero exit, a
//! message, no panic), and a `--quick` run writes the table, JSON, CSV and plots.

mod common;

use std::process::{Command, Output};

use common::temp_dir;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_buddybench"))
        .args(args)
        .output()
        .expect("run buddybench")
}

/// Runs with `args` into a scratch folder and checks it fails cleanly mentioning `needle`.
fn rejects(args: &[&str], needle: &str) {
    let out_dir = temp_dir("rejected");
    let mut all = vec!["--quick", "--out", out_dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = bench(&all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected `{needle}` in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(!out_dir.exists(), "{args:?} ran anyway");
}

#[test]
fn bad_names_and_impossible_parameters_are_errors() {
    rejects(&["--alloc", "no-such"], "unknown allocator `no-such`");
    rejects(&["--workload", "no-such"], "unknown workload `no-such`");
    rejects(&["--baseline", "no-such"], "unknown baseline");
    rejects(&["--alloc", "model", "--threads", "0"], "thread count 0");
    rejects(&["--alloc", "model", "--threads", "x"], "invalid value");
    rejects(&["--alloc", "model", "--threads", "1,100000"], "above 1024");
    rejects(&["--alloc", "model", "--reps", "0"], "--reps 0");
    rejects(
        &["--alloc", "model", "--order", "11"],
        "above the maximum order",
    );
    rejects(
        &["--alloc", "model", "--workload", "larson", "--order", "9"],
        "above the maximum order",
    );
    rejects(&["--alloc", "model", "--size", "3K"], "not a power of two");
    rejects(&["--alloc", "model", "--size", "4Q"], "unknown unit");
    rejects(
        &["--alloc", "model", "--heap", "1M"],
        "smaller than one block",
    );
    rejects(
        &[
            "--alloc",
            "model",
            "--workload",
            "nbbs",
            "--heap",
            "8M",
            "--threads",
            "64",
        ],
        "too small",
    );
    rejects(
        &["--alloc", "model", "--size", "4K", "--order", "0"],
        "cannot be used with",
    );
}

#[test]
fn list_names_every_allocator_and_workload() {
    let out = bench(&["--list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "model",
        "system",
        "linux-scalability",
        "larson",
        "bulk",
        "frag",
    ] {
        assert!(text.contains(name), "{name} missing from --list");
    }
}

#[test]
fn list_spells_out_every_workloads_parameters() {
    let out = bench(&["--list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let params = text
        .lines()
        .filter(|l| l.trim_start().starts_with("parameters:"))
        .count();
    assert_eq!(params, buddybench::workloads::Workload::ALL.len(), "{text}");
    assert!(
        text.contains("B = 16384 units per burst per thread"),
        "{text}"
    );
}

#[test]
fn a_run_in_which_nothing_runs_fails() {
    let dir = temp_dir("nothing");
    // system hands out addresses, which the LLFree workloads cannot use: nothing can run.
    let out = bench(&[
        "--quick",
        "--alloc",
        "system",
        "--workload",
        "bulk",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("nothing ran"), "{stderr}");
    assert!(stderr.contains("system x"), "{stderr}");
    assert!(!dir.join("latest").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_run_gets_its_own_folder_and_latest_points_at_the_last() {
    let dir = temp_dir("folders");
    let args = |d: &str| {
        [
            "--quick",
            "--alloc",
            "model",
            "--workload",
            "cached",
            "--threads",
            "1",
            "--no-plots",
            "--out",
        ]
        .into_iter()
        .map(String::from)
        .chain([d.to_string()])
        .collect::<Vec<_>>()
    };
    let d = dir.to_str().unwrap();
    for _ in 0..2 {
        let a = args(d);
        let out = bench(&a.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success());
    }
    let runs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "latest")
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let latest = std::fs::read_link(dir.join("latest")).unwrap();
    assert_eq!(latest.to_str().unwrap(), runs.iter().max().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quick_run_writes_table_json_csv_and_plots() {
    let out_dir = temp_dir("quick");
    let out = bench(&[
        "--quick",
        "--alloc",
        "model,system",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let dir = out_dir.join("latest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for w in ["linux-scalability", "cached", "bulk", "frag"] {
        assert!(stdout.contains(w), "{w} missing from the table:\n{stdout}");
    }
    assert!(stdout.contains("vs model"));
    assert!(stdout.contains("page fault"), "the ratio rule is stated");
    assert!(stdout.contains("ticket lock"), "the lock is stated");
    // The skipped combinations come as one line.
    assert_eq!(stdout.matches("skipped").count(), 1, "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("buddybench.json")).unwrap())
            .unwrap();
    // One heap for every case but the real-time workloads', the one the JSON states.
    let heap = json["meta"]["heap_units"].as_u64().unwrap();
    assert_eq!(heap, 1 << 14);
    for r in json["records"].as_array().unwrap() {
        assert_eq!(r["heap_units"].as_u64(), Some(heap), "{r}");
    }
    for f in json["frag"].as_array().unwrap() {
        assert_eq!(f["heap_units"].as_u64(), Some(heap));
    }
    // The machine, the build and every repetition's samples.
    let m = &json["machine"];
    for key in ["cpu_model", "kernel", "rustc", "commit", "date"] {
        assert!(!m[key].as_str().unwrap().is_empty(), "machine.{key}");
    }
    assert!(m["cores"].as_u64().unwrap() >= 1);
    assert!(m["rustc"].as_str().unwrap().starts_with("rustc "));
    assert!(json["args"].as_array().unwrap().len() > 1);
    for r in json["records"].as_array().unwrap() {
        let samples = r["samples"].as_array().unwrap();
        assert_eq!(samples.len() as u64, r["reps"].as_u64().unwrap());
        assert!(samples
            .iter()
            .all(|s| s["ns_per_op"].as_f64().unwrap() > 0.0));
    }
    let records = json["records"].as_array().unwrap();
    assert!(records.iter().any(|r| r["alloc"] == "system"));
    assert!(records
        .iter()
        .all(|r| r["failures"] == 0 && r["bad_frees"] == 0));
    assert!(!json["frag"].as_array().unwrap().is_empty());
    let csv = std::fs::read_to_string(dir.join("buddybench.csv")).unwrap();
    assert_eq!(csv.lines().count(), records.len() + 1);
    assert!(std::fs::read_to_string(dir.join("frag.csv"))
        .unwrap()
        .starts_with("alloc,threads"));
    for plot in [
        "cached-op-4K",
        "bulk-get-2M",
        "frag-free-huge",
        "frag-compaction-cost",
    ] {
        let svg = std::fs::read_to_string(dir.join("plots").join(format!("{plot}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{plot}.svg");
        let png = std::fs::read(dir.join("plots").join(format!("{plot}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{plot}.png");
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// The colour of each legend entry of an SVG plot: the legend, right of the plot (x from
/// 900 - 190 pixels), draws a line in the series' colour, its marker, then its name.
fn legend_colours(svg: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = svg.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(3) {
        let legend_line = lines[i - 3];
        let x = legend_line
            .split("points=\"")
            .nth(1)
            .and_then(|p| p.split(',').next())
            .and_then(|x| x.parse::<u32>().ok());
        if lines[i - 1].starts_with("<text")
            && legend_line.contains("stroke-width=\"2\"")
            && x.is_some_and(|x| x >= 900 - 190)
        {
            if let Some(at) = legend_line.find("stroke=\"#") {
                let colour = &legend_line[at + 8..at + 15];
                out.push((l.trim().to_string(), colour.to_string()));
            }
        }
    }
    out
}

#[test]
fn an_allocator_has_one_colour_in_every_plot() {
    let out_dir = temp_dir("colours");
    // system runs only the size-based workloads, so model and knuth-locked sit at different
    // places in the NBBS plots than in the LLFree ones.
    let out = bench(&[
        "--quick",
        "--alloc",
        "system,model,knuth-locked",
        "--workload",
        "cached,bulk",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let plots = out_dir.join("latest").join("plots");
    let mut seen: std::collections::HashMap<String, String> = Default::default();
    let mut svgs = 0;
    for e in std::fs::read_dir(&plots).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "svg") {
            svgs += 1;
            let legend = legend_colours(&std::fs::read_to_string(&path).unwrap());
            assert!(!legend.is_empty(), "{} has no legend", path.display());
            for (name, colour) in legend {
                let first = seen.entry(name.clone()).or_insert(colour.clone());
                assert_eq!(*first, colour, "{name} in {}", path.display());
            }
        }
    }
    assert!(svgs >= 4);
    let colours: std::collections::HashSet<_> = seen.values().collect();
    assert_eq!(
        colours.len(),
        seen.len(),
        "distinct allocators share a colour: {seen:?}"
    );
    assert_eq!(seen.len(), 3, "{seen:?}");
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn full_heap_and_zones_run_when_named() {
    let dir = temp_dir("full-heap");
    let out = bench(&[
        "--quick",
        "--alloc",
        "nbbs,llfree-zone-none",
        "--workload",
        "full-heap",
        "--threads",
        "1",
        "--no-plots",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for needle in ["full-heap", "fail 4K", "fail 2M", "llfree-zone-none"] {
        assert!(stdout.contains(needle), "{needle} missing:\n{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
