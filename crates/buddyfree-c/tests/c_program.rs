//! Builds tests/c/test.c with gcc against this crate's static and dynamic libraries and runs
//! it: every exported function, bad input included, from several pthreads.

use std::path::{Path, PathBuf};
use std::process::Command;

/// This crate's library `file` as cargo built it for this test run: beside the test binary
/// in `<target>/<profile>/deps/` (where `cargo test` leaves it), else uplifted one level up
/// (where `cargo build` puts it). Found from the running binary, so `CARGO_TARGET_DIR` and
/// the profile need no guessing.
fn library(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().expect("test binary in a directory");
    let found = [Some(deps), deps.parent()]
        .into_iter()
        .flatten()
        .map(|dir| dir.join(file))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("{file} not found beside {}", exe.display()));
    found
}

fn gcc_available() -> bool {
    Command::new("gcc").arg("--version").output().is_ok()
}

/// Compiles the C test linked to `lib` (plus `extra` flags) and runs it.
fn build_and_run(name: &str, link: &[&str]) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = Command::new("gcc")
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/test.c"))
        .args(link)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed to build {name}");
    let out = Command::new(&exe).output().expect("run the C test");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} failed: {}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("all ok"));
}

#[test]
fn c_program_passes_against_the_static_library() {
    if !gcc_available() {
        eprintln!("SKIPPED: gcc not found; the C test program was not built");
        return;
    }
    let lib = library("libbuddyfree_c.a");
    let lib = lib.to_str().unwrap();
    build_and_run("c_test_static", &[lib, "-ldl", "-lm", "-lrt"]);
}

#[test]
fn c_program_passes_against_the_shared_library() {
    if !gcc_available() {
        eprintln!("SKIPPED: gcc not found; the C test program was not built");
        return;
    }
    let lib = library("libbuddyfree_c.so");
    let dir = lib.parent().unwrap().to_str().unwrap();
    let rpath = format!("-Wl,-rpath,{dir}");
    build_and_run("c_test_shared", &[lib.to_str().unwrap(), &rpath]);
}
