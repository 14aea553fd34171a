#!/usr/bin/env bash
# The static checks CI runs before the tests:
#   1. formatting (cargo fmt --check);
#   2. lints, warnings as errors, every target of the workspace (clippy);
#   3. the API docs, rustdoc warnings (broken links) as errors;
#   4. the library alone, without the CLI's dependencies
#      (--no-default-features), as a service embedding it builds it, and
#      free of the `serve` feature's runtime (tokio, axum, hyper) and of its
#      Arrow and Parquet crates;
#   5. the benchmarks compile (cargo bench --no-run).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (release, all targets, -D warnings)"
cargo clippy --release --workspace --all-targets -- -D warnings

step "cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace

step "library without default features"
cargo build --release --lib --no-default-features
if cargo tree --no-default-features -e normal --prefix none | grep -E '^(tokio|axum|hyper|hyper-util|toml|tokio-rustls|rustls|arrow-[a-z]+|parquet) '; then
    echo "the library without default features depends on the service's crates" >&2
    exit 1
fi

step "benchmarks compile"
cargo bench --no-run

echo
echo "checks: ok"
