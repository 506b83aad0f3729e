//! Builds tests/c/test.c with gcc against this crate's static and dynamic libraries and runs
//! it: every exported function, bad input included, from several pthreads. Then every C
//! block of the README and the C guide, each a whole program, built and run as written.

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

/// Compiles the C file `source` linked as `link` says into an executable named `name`, runs
/// it, and returns its standard output; fails the test if either step fails.
fn build_and_run(name: &str, source: &Path, link: &[&str]) -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = Command::new("gcc")
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(source)
        .args(link)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed to build {name}");
    let out = Command::new(&exe).output().expect("run the C program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} failed: {}", out.status);
    stdout
}

/// The C test program against `link`.
fn run_test_program(name: &str, link: &[&str]) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test.c");
    assert!(build_and_run(name, &source, link).contains("all ok"));
}

/// The fenced C blocks of a Markdown file, each a whole program: a block without a `main`
/// fails the test, so that no C example of the docs goes unbuilt.
fn c_programs(markdown: &str) -> Vec<String> {
    let mut programs = Vec::new();
    let mut block: Option<String> = None;
    for line in markdown.lines() {
        match (&mut block, line.trim_start()) {
            (None, "```c") => block = Some(String::new()),
            (Some(code), "```") => {
                assert!(
                    code.contains("int main("),
                    "a C block without `int main(`, which no test builds:\n{code}"
                );
                programs.push(std::mem::take(code));
                block = None;
            }
            (Some(code), _) => {
                code.push_str(line);
                code.push('\n');
            }
            (None, _) => {}
        }
    }
    programs
}

/// The C programs in the README and the C guide build as written, against the static library,
/// and exit 0: the docs' examples never drift from the header.
#[test]
fn c_examples_in_the_docs_build_and_run() {
    if !gcc_available() {
        eprintln!("SKIPPED: gcc not found; the docs' C examples were not built");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = library("libbuddyfree_c.a");
    let mut built = 0;
    for doc in ["README.md", "docs/c.md"] {
        let Ok(markdown) = std::fs::read_to_string(root.join(doc)) else {
            // The packaged crate has no docs folder; in the repository both files exist.
            assert!(
                !root.join(".git").exists(),
                "{doc} missing from the repository"
            );
            continue;
        };
        for (i, program) in c_programs(&markdown).into_iter().enumerate() {
            let name = format!("doc_{}_{i}", doc.replace(['/', '.'], "_"));
            let source = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.c"));
            std::fs::write(&source, program).unwrap();
            build_and_run(
                &name,
                &source,
                &[lib.to_str().unwrap(), "-ldl", "-lm", "-lrt"],
            );
            built += 1;
        }
    }
    assert!(
        built >= 3 || !root.join(".git").exists(),
        "only {built} C examples found"
    );
}

#[test]
fn c_program_passes_against_the_static_library() {
    if !gcc_available() {
        eprintln!("SKIPPED: gcc not found; the C test program was not built");
        return;
    }
    let lib = library("libbuddyfree_c.a");
    let lib = lib.to_str().unwrap();
    run_test_program("c_test_static", &[lib, "-ldl", "-lm", "-lrt"]);
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
    run_test_program("c_test_shared", &[lib.to_str().unwrap(), &rpath]);
}
