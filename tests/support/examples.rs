//! Where `cargo test` (or `cargo build --example NAME`) puts the crate's
//! examples: beside the running executable's profile directory
//! (`target/<profile>/examples/NAME`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The path of example `name`'s executable (it may not exist).
pub fn example_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/examples/<name>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Example `name`'s executable, which `cargo test` builds.
pub fn example_binary(name: &str) -> PathBuf {
    let bin = example_path(name);
    assert!(
        bin.exists(),
        "{} is missing: `cargo test` builds the examples; with a target filter run \
         `cargo build --example {name}` (same profile) first",
        bin.display()
    );
    bin
}
