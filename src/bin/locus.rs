//! The `locus` command-line tool.
fn main() {}
