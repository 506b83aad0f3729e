//! Every Rust example of the README and the guides is compiled by `cargo test`: the README
//! and each guide with Rust in it are included as doctests (`src/lib.rs`, through the
//! symlinks in `docs/`), and none of their blocks is left out with `ignore`.

use std::fs;
use std::path::Path;

/// The info strings of the fenced code blocks of `markdown` that open a Rust block
/// (`rust`, `rust,no_run`, ...).
fn rust_blocks(markdown: &str) -> Vec<&str> {
    let mut open = false;
    let mut found = Vec::new();
    for line in markdown.lines() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if !open && info.split(',').next() == Some("rust") {
            found.push(info);
        }
        open = !open;
    }
    found
}

#[test]
fn every_guide_with_rust_is_a_doctest_and_none_is_ignored() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.join("../..");
    let Ok(guides) = fs::read_dir(root.join("docs")) else {
        // The packaged crate has no workspace around it; its copies are still doctests.
        assert!(
            !root.join(".git").exists(),
            "docs/ missing from the repository"
        );
        return;
    };
    let lib = fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap();
    let mut checked = 0;
    let readme = ("README.md".to_string(), root.join("README.md"));
    let guides = guides.map(|entry| {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        (format!("docs/{name}"), path)
    });
    for (name, path) in std::iter::once(readme).chain(guides) {
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let markdown = fs::read_to_string(&path).unwrap();
        let blocks = rust_blocks(&markdown);
        if blocks.is_empty() {
            continue;
        }
        for info in &blocks {
            assert!(
                !info.contains("ignore"),
                "{name}: a ```{info} block is not compiled; hide its setup in `# ` lines"
            );
        }
        let included = format!("include_str!(\"../{name}\")");
        assert!(
            lib.contains(&included),
            "{name} has Rust examples but src/lib.rs has no `#[doc = {included}]`"
        );
        if name != "README.md" {
            assert!(
                crate_dir.join(&name).exists(),
                "crates/buddyfree/{name} missing: a symlink to the guide, shipped in the package"
            );
        }
        checked += blocks.len();
    }
    assert!(checked >= 10, "only {checked} Rust blocks found");
}
