//! The measurement surface of the command-line tool: `locus bench` sizes,
//! op selection, CPU skipping with row checks, kernel times; adapter choice
//! through `LOCUS_ADAPTER` / `LOCUS_REQUIRE_HARDWARE`; `locus info`'s
//! adapter indices; cold and warm start, and the pipeline cache it
//! measures (`LOCUS_PIPELINE_CACHE`).

mod common;

use assert_cmd::Command;
use serde_json::Value;

fn locus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.env("NODEVICE_SELECT", "1")
        .env_remove("LOCUS_ADAPTER")
        .env_remove("LOCUS_REQUIRE_HARDWARE");
    c
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn have_gpu() -> bool {
    common::gpu().is_some()
}

fn software_only() -> bool {
    let a = locus::Engine::adapters();
    !a.is_empty() && a.iter().all(locus::BackendInfo::is_software)
}

#[test]
fn bench_tiny_selects_ops_and_reports_kernel_time() {
    let out = locus()
        .args([
            "bench",
            "--size",
            "tiny",
            "--ops",
            "knn,attention",
            "--json",
        ])
        .output()
        .unwrap();
    let j = json_of(&out);
    assert_eq!(j["size"], "tiny");
    let results = j["results"].as_array().unwrap();
    let families: Vec<&str> = results
        .iter()
        .map(|r| r["family"].as_str().unwrap())
        .collect();
    assert_eq!(
        families,
        ["Knn", "Attention", "Attention", "Attention", "Attention"],
        "{families:?}"
    );
    // New queries against keys sent every call, then prepared once.
    assert_eq!(results[4]["params"]["prepared"], true, "{}", results[4]);
    for r in results {
        assert!(r["cpu"]["seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["pairs"].as_f64().unwrap() > 0.0);
        if have_gpu() {
            let g = &r["gpu"];
            assert!(g["seconds"].as_f64().unwrap() > 0.0, "{r}");
            assert!(g["calls"].as_u64().unwrap() >= 1);
            assert!(g["best_seconds"].as_f64().unwrap() <= g["seconds"].as_f64().unwrap());
            if j["gpu"]["kernel_timing"] == true {
                let k = g["kernel_seconds"].as_f64().unwrap();
                assert!(k > 0.0, "{r}");
                assert!(g["kernel_pairs_per_second"].as_f64().unwrap() > 0.0);
            }
            assert_eq!(r["check"]["rows"], "all");
            assert_eq!(r["check"]["deviation"]["ok"], true, "{r}");
        }
    }
    if have_gpu() {
        assert!(j["gpu"]["limits"]["max_buffer_size"].as_u64().unwrap() > 0);
        assert!(j["gpu"]["adapter"]["name"].is_string());
    }
}

#[test]
fn bench_overrides_sizes_and_checks_rows_when_the_cpu_is_skipped() {
    let out = locus()
        .args([
            "bench",
            "--size",
            "tiny",
            "--ops",
            "local-mean",
            "--m",
            "77",
            "--n",
            "130",
            "--d",
            "5",
            "--cpu-max-work",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    let j = json_of(&out);
    let results = j["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(r["sizes"]["M"], 77);
        assert_eq!(r["sizes"]["N"], 130);
        assert_eq!(r["sizes"]["d"], 5);
        let why = r["cpu"]["error"].as_str().unwrap();
        assert!(why.starts_with("skipped: work"), "{why}");
        if have_gpu() {
            // The first rows were recomputed on the CPU and compared.
            assert_eq!(r["check"]["rows"], 77, "{r}");
            assert_eq!(r["check"]["deviation"]["ok"], true, "{r}");
            assert!(r["speedup"].is_null());
        } else {
            assert_eq!(r["check"]["rows"], 0);
        }
    }
}

#[test]
fn bench_cpu_only_and_bad_options() {
    let out = locus()
        .args([
            "bench",
            "--size",
            "tiny",
            "--ops",
            "kde",
            "--backends",
            "cpu",
            "--json",
        ])
        .output()
        .unwrap();
    let j = json_of(&out);
    let r = &j["results"][0];
    assert!(
        r["gpu"]["error"]
            .as_str()
            .unwrap()
            .contains("not asked for")
    );
    assert!(r["cpu"]["seconds"].as_f64().unwrap() > 0.0);
    for bad in [
        vec!["--ops", "nonsense"],
        vec!["--size", "huge"],
        vec!["--m", "0"],
        vec!["--budget", "-1"],
        vec!["--quick", "--size", "tiny"],
    ] {
        let out = locus().arg("bench").args(&bad).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn hardware_required_refuses_a_software_adapter_everywhere() {
    if !software_only() {
        eprintln!("SKIPPED: needs a machine whose only adapters are software ones");
        return;
    }
    let out = locus()
        .env("LOCUS_REQUIRE_HARDWARE", "1")
        .args([
            "bench",
            "--size",
            "tiny",
            "--ops",
            "kde",
            "--backends",
            "gpu",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("software rasterizer"), "{err}");
    // Without --backends the table says why there is no GPU, and the CPU runs.
    let out = locus()
        .env("LOCUS_REQUIRE_HARDWARE", "1")
        .args(["bench", "--size", "tiny", "--ops", "kde", "--json"])
        .output()
        .unwrap();
    let j = json_of(&out);
    assert!(j["gpu"].is_null());
    assert!(
        j["gpu_unavailable"]
            .as_str()
            .unwrap()
            .contains("software rasterizer")
    );
    // And the compute subcommands.
    let dir = tempfile::TempDir::new().unwrap();
    let keys = dir.path().join("k.csv");
    std::fs::write(&keys, "0,0\n1,0\n0,1\n").unwrap();
    let out = locus()
        .env("LOCUS_REQUIRE_HARDWARE", "1")
        .args([
            "local-mean",
            "--backend",
            "gpu",
            "--bandwidth",
            "1",
            "--output",
        ])
        .arg(dir.path().join("o.csv"))
        .arg("--keys")
        .arg(&keys)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.path().join("o.csv").exists());
}

#[test]
fn adapter_environment_is_checked_and_listed() {
    let dir = tempfile::TempDir::new().unwrap();
    let keys = dir.path().join("k.csv");
    std::fs::write(&keys, "0,0\n1,0\n0,1\n").unwrap();
    let run = |var: &str, value: &str, backend: &str| {
        locus()
            .env(var, value)
            .args([
                "local-mean",
                "--bandwidth",
                "1",
                "--backend",
                backend,
                "--output",
            ])
            .arg(dir.path().join("o.csv"))
            .arg("--keys")
            .arg(&keys)
            .output()
            .unwrap()
    };
    // An index past the list, a name no adapter has, a flag that is not one:
    // usage errors (exit 2) naming the variable or listing the adapters.
    for (var, value) in [
        ("LOCUS_ADAPTER", "999"),
        ("LOCUS_ADAPTER", "no such adapter"),
        ("LOCUS_REQUIRE_HARDWARE", "maybe"),
    ] {
        for backend in ["auto", "gpu"] {
            let out = run(var, value, backend);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{var}={value} --backend {backend}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains("adapters found") || err.contains(var),
                "{var}={value}: {err}"
            );
        }
    }
    // The CPU backend does not look at adapters.
    assert!(run("LOCUS_ADAPTER", "999", "cpu").status.success());
    // info numbers the adapters and shows the variables that are set.
    let j = json_of(
        &locus()
            .env("LOCUS_ADAPTER", "0")
            .args(["info", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(j["env"]["LOCUS_ADAPTER"], "0");
    for (i, a) in j["adapters"].as_array().unwrap().iter().enumerate() {
        assert_eq!(a["index"], i);
    }
    if have_gpu() {
        // Index 0 is taken, by auto too.
        let out = run("LOCUS_ADAPTER", "0", "auto");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("backend: gpu"), "{text}");
        let out = locus().arg("info").output().unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("  0: gpu:"));
    }
}

#[test]
fn bench_cold_start_reports_cold_and_warm_start() {
    let mut args = vec!["bench", "--size", "tiny", "--ops", "knn", "--json"];
    // Without the flag the field is there, empty.
    let j = json_of(
        &locus()
            .args(&args)
            .args(["--backends", "cpu"])
            .output()
            .unwrap(),
    );
    assert!(j["cold_start"].is_null(), "{}", j["cold_start"]);
    args.push("--cold-start");
    if have_gpu() {
        args.extend(["--backends", "gpu"]);
    }
    let j = json_of(&locus().args(&args).output().unwrap());
    let c = &j["cold_start"];
    if !have_gpu() {
        assert!(c["error"].is_string(), "{c}");
        return;
    }
    for run in ["cold", "warm"] {
        let s = &c[run];
        assert!(s["seconds"].as_f64().unwrap() > 0.0, "{c}");
        assert!(s["open_seconds"].as_f64().unwrap() > 0.0, "{c}");
        assert!(s["first_calls_seconds"].as_f64().unwrap() > 0.0, "{c}");
        assert!(s["start_overhead_seconds"].as_f64().unwrap() >= 0.0, "{c}");
    }
    assert_eq!(c["first_calls"], 1, "{c}");
    assert!(c["steady_calls_seconds"].as_f64().unwrap() > 0.0, "{c}");
    assert!(c["speedup"].as_f64().unwrap() > 0.0, "{c}");
    match c["pipeline_cache"]["status"].as_str().unwrap() {
        // The warm run loaded what the cold run wrote.
        "active" => {
            assert!(c["cache_file_bytes"].as_u64().unwrap() > 0, "{c}");
            assert!(
                c["pipeline_cache"]["loaded_bytes"].as_u64().unwrap() > 0,
                "{c}"
            );
            assert!(c["pipeline_cache"]["ignored"].is_null(), "{c}");
        }
        "unsupported" => assert!(c["pipeline_cache"]["reason"].is_string()),
        other => panic!("pipeline cache {other}: {c}"),
    }
    // The text report has its line.
    let out = locus()
        .args([
            "bench",
            "--size",
            "tiny",
            "--ops",
            "knn",
            "--backends",
            "gpu",
        ])
        .arg("--cold-start")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cold start: "), "{text}");
}

#[test]
fn the_pipeline_cache_persists_across_processes_and_the_env_var_turns_it_off() {
    if !have_gpu() {
        eprintln!("SKIPPED: no GPU adapter");
        return;
    }
    let cache = |v: &Value| v["gpu"]["pipeline_cache"].clone();
    let off = json_of(
        &locus()
            .env("LOCUS_PIPELINE_CACHE", "")
            .args(["info", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(cache(&off)["status"], "off", "{}", cache(&off));
    assert_eq!(off["env"]["LOCUS_PIPELINE_CACHE"], "");

    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("made on first write");
    let info = || {
        json_of(
            &locus()
                .env("LOCUS_PIPELINE_CACHE", &sub)
                .args(["info", "--json"])
                .output()
                .unwrap(),
        )
    };
    let before = cache(&info());
    if before["status"] == "unsupported" {
        eprintln!("SKIPPED: the adapter keeps no pipeline cache: {before}");
        return;
    }
    assert_eq!(before["status"], "active", "{before}");
    assert_eq!(before["loaded_bytes"], 0, "{before}");
    assert!(
        before["path"]
            .as_str()
            .unwrap()
            .starts_with(sub.to_str().unwrap()),
        "{before}"
    );
    // Opening a device writes nothing.
    assert!(!sub.exists());
    // A process that builds pipelines writes the file; the next loads it.
    let out = locus()
        .env("LOCUS_PIPELINE_CACHE", &sub)
        .args([
            "bench",
            "--size",
            "tiny",
            "--ops",
            "knn",
            "--backends",
            "gpu",
        ])
        .args(["--json", "--repeats", "1"])
        .output()
        .unwrap();
    json_of(&out);
    let after = cache(&info());
    assert_eq!(after["status"], "active", "{after}");
    assert!(after["loaded_bytes"].as_u64().unwrap() > 0, "{after}");
    assert!(after["ignored"].is_null(), "{after}");
    // A damaged file is ignored, without an error.
    let path = std::path::PathBuf::from(after["path"].as_str().unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let damaged = cache(&info());
    assert_eq!(damaged["loaded_bytes"], 0, "{damaged}");
    assert!(damaged["ignored"].is_string(), "{damaged}");
}
