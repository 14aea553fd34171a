//! `docs/architecture.md` follows every source file: a file it does not
//! name is a file a newcomer finds by accident. Each file is named by its
//! path in backticks, relative to the root of its kind:
//!
//! | files | named as |
//! |---|---|
//! | `src/**/*.rs` | `cpu/keys.rs`, `bin/locus/io.rs`, `lib.rs` |
//! | `shaders/*.wgsl` | `shaders/local_mean.wgsl` |
//! | `python/src/*.rs` | `python/src/ops.rs` |
//! | `python/python/locus/**/*.py`, `*.pyi` | `locus/_base.py`, `locus/distributed/_merge.py` |
//! | `python/docs/*.py`, `python/examples/*.py` | `python/docs/conf.py`, `python/examples/plot_mean_shift.py` |
//!
//! Test modules (`tests.rs`) are named with the module they test, so they
//! are left out.

use std::fs;
use std::path::{Path, PathBuf};

/// What a Sphinx build in place writes into `python/docs/` (ignored by
/// git): generated pages and copies of the gallery's examples, not sources.
const BUILD_OUTPUT: [&str; 3] = ["generated", "auto_examples", "_build"];

/// Every file below `dir` whose name ends with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| BUILD_OUTPUT.contains(&n))
            {
                continue;
            }
            files(&path, exts, out);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
        {
            out.push(path);
        }
    }
}

/// The names the document must hold: each source file's path as its
/// kind's root gives it.
fn wanted(root: &Path) -> Vec<String> {
    let kinds: [(&str, &str, &[&str]); 6] = [
        ("src", "", &["rs"]),
        ("shaders", "shaders/", &["wgsl"]),
        ("python/src", "python/src/", &["rs"]),
        ("python/python/locus", "locus/", &["py", "pyi"]),
        ("python/docs", "python/docs/", &["py"]),
        ("python/examples", "python/examples/", &["py"]),
    ];
    let mut names = Vec::new();
    for (dir, prefix, exts) in kinds {
        let base = root.join(dir);
        let mut found = Vec::new();
        files(&base, exts, &mut found);
        for f in found {
            if f.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let rel = f.strip_prefix(&base).expect("below its root");
            let rel = rel.to_string_lossy().replace('\\', "/");
            names.push(format!("{prefix}{rel}"));
        }
    }
    names.sort();
    names
}

#[test]
fn every_source_file_is_in_the_architecture_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let wanted = wanted(root);
    assert!(
        wanted.len() > 100,
        "found only {} source files",
        wanted.len()
    );
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|name| !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name these files (as `path` in backticks):\n{}",
        missing
            .iter()
            .map(|m| format!("  {m}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_kind_of_source_file_is_checked() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wanted = wanted(root);
    for name in [
        "cpu/keys.rs",
        "lib.rs",
        "shaders/knn.wgsl",
        "python/src/ops.rs",
    ] {
        assert!(
            wanted.iter().any(|w| w == name),
            "{name} not among {wanted:?}"
        );
    }
    assert!(wanted.iter().all(|w| !w.ends_with("tests.rs")));
}
