//! `examples/fma_ceiling.rs` runs and prints what
//! `benches/compare_torch_faiss.py` reads: a JSON line of positive GFLOP/s
//! (or null for a width the CPU lacks), and refuses a bad thread count.
//! x86-64 only, as the example.
#![cfg(target_arch = "x86_64")]

#[path = "support/examples.rs"]
mod examples;

use std::process::Command;

#[test]
fn the_fma_ceiling_prints_a_json_line_of_gflops() {
    let bin = examples::example_binary("fma_ceiling");
    let out = Command::new(&bin).arg("1").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().last().unwrap();
    let j: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(j["threads"], 1, "{text}");
    let widths = [&j["zmm_gflops"], &j["ymm_gflops"]];
    if std::is_x86_feature_detected!("avx2") {
        assert!(j["ymm_gflops"].as_f64().unwrap() > 0.1, "{text}");
    }
    for w in widths {
        assert!(w.is_null() || w.as_f64().unwrap() > 0.1, "{text}");
    }
    let bad = Command::new(&bin).arg("0").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("THREADS"));
}
