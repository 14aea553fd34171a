//! Adapter choice (by index, by name, hardware required) and kernel-only
//! GPU time from pass timestamps.

mod common;

use locus::{AdapterChoice, Device, Engine, EngineOptions, Error, Kernel, SoftmaxParams};
use ndarray::Array3;

/// Options for a GPU engine on `adapter`, or `None` (and a note) when
/// there is no adapter outside CI.
fn adapters_or_skip() -> Option<Vec<locus::BackendInfo>> {
    let adapters = Engine::adapters();
    if adapters.is_empty() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "GPU adapter required (CI=true) but none found"
        );
        eprintln!("SKIPPED: no GPU adapter; adapter choice not tested");
        return None;
    }
    Some(adapters)
}

fn options(device: Device, adapter: Option<AdapterChoice>) -> EngineOptions {
    let mut o = EngineOptions::new(device);
    o.adapter = adapter;
    o
}

fn name(b: &locus::BackendInfo) -> String {
    match b {
        locus::BackendInfo::Gpu { name, .. } => name.clone(),
        other => panic!("expected a GPU backend, got {other}"),
    }
}

#[test]
fn adapters_are_chosen_by_index_and_by_name() {
    let Some(adapters) = adapters_or_skip() else {
        return;
    };
    for (i, a) in adapters.iter().enumerate() {
        let e = Engine::with_options(options(Device::Gpu, Some(AdapterChoice::Index(i)))).unwrap();
        assert_eq!(name(e.backend()), name(a), "index {i}");
        // A name in another case, and a part of it, finds the same adapter
        // (the first of that name, best first).
        let upper = name(a).to_uppercase();
        let part: String = upper.chars().take(5).collect();
        let first = adapters
            .iter()
            .position(|b| name(b).to_uppercase().contains(&part))
            .unwrap();
        let e =
            Engine::with_options(options(Device::Gpu, Some(AdapterChoice::Name(part)))).unwrap();
        assert_eq!(name(e.backend()), name(&adapters[first]));
        // With auto, an adapter chosen by name is taken even when software.
        let e = Engine::with_options(options(Device::Auto, Some(AdapterChoice::Index(i)))).unwrap();
        assert!(e.backend().is_gpu());
        // The CPU ignores the choice.
        let e = Engine::with_options(options(Device::Cpu, Some(AdapterChoice::Index(i)))).unwrap();
        assert!(!e.backend().is_gpu());
    }
}

#[test]
fn an_adapter_that_is_not_there_is_a_typed_error_listing_the_adapters() {
    let adapters = Engine::adapters();
    let n = adapters.len();
    for choice in [
        AdapterChoice::Index(n),
        AdapterChoice::Name("no adapter is called this".into()),
    ] {
        for device in [Device::Gpu, Device::Auto] {
            match Engine::with_options(options(device, Some(choice.clone()))) {
                Err(Error::AdapterNotFound { wanted, available }) => {
                    assert_eq!(wanted, choice.to_string());
                    if n == 0 {
                        assert_eq!(available, "none");
                    } else {
                        assert!(available.starts_with("0: "), "{available}");
                        assert_eq!(available.matches(": ").count(), n);
                    }
                }
                other => {
                    panic!("{choice:?} on {device:?}: expected AdapterNotFound, got {other:?}")
                }
            }
        }
    }
}

#[test]
fn adapter_choices_parse_from_text() {
    assert_eq!(
        "0".parse::<AdapterChoice>().unwrap(),
        AdapterChoice::Index(0)
    );
    assert_eq!(
        " 12 ".parse::<AdapterChoice>().unwrap(),
        AdapterChoice::Index(12)
    );
    assert_eq!(
        "nvidia".parse::<AdapterChoice>().unwrap(),
        AdapterChoice::Name("nvidia".into())
    );
    assert_eq!(
        "2x".parse::<AdapterChoice>().unwrap(),
        AdapterChoice::Name("2x".into())
    );
    assert!(matches!(
        "".parse::<AdapterChoice>(),
        Err(Error::InvalidParameter { .. })
    ));
    assert!(matches!(
        "99999999999999999999999".parse::<AdapterChoice>(),
        Err(Error::InvalidParameter { .. })
    ));
}

#[test]
fn hardware_required_refuses_software_adapters() {
    let Some(adapters) = adapters_or_skip() else {
        return;
    };
    for (i, a) in adapters.iter().enumerate() {
        let mut o = options(Device::Gpu, Some(AdapterChoice::Index(i)));
        o.require_hardware = true;
        match (a.is_software(), Engine::with_options(o)) {
            (true, Err(Error::SoftwareAdapter { adapter })) => assert_eq!(adapter, name(a)),
            (false, Ok(e)) => assert!(!e.backend().is_software()),
            (sw, r) => panic!("adapter {i} (software: {sw}): {r:?}"),
        }
    }
    let mut o = EngineOptions::new(Device::Gpu);
    o.require_hardware = true;
    let any_hardware = adapters.iter().any(|a| !a.is_software());
    match Engine::with_options(o) {
        Ok(e) => assert!(any_hardware && !e.backend().is_software()),
        Err(Error::SoftwareAdapter { .. }) => assert!(!any_hardware),
        Err(e) => panic!("{e}"),
    }
    // Auto never takes a software adapter when hardware is required: the
    // CPU path, which is not a GPU, runs instead.
    let mut o = EngineOptions::new(Device::Auto);
    o.require_hardware = true;
    o.allow_software_gpu = true;
    let e = Engine::with_options(o).unwrap();
    assert!(!e.backend().is_software());
}

#[test]
fn gpu_time_counts_the_compute_passes_of_every_op() {
    let Some(_) = adapters_or_skip() else {
        return;
    };
    let mut o = EngineOptions::new(Device::Gpu);
    o.gpu_timing = true;
    let e = Engine::with_options(o).unwrap();
    let has_stamps = e
        .gpu_limits()
        .is_some_and(|l| l.adapter_features.iter().any(|f| f == "TIMESTAMP_QUERY"));
    if !has_stamps {
        assert_eq!(e.take_gpu_time().unwrap(), None);
        eprintln!("SKIPPED: the adapter has no TIMESTAMP_QUERY");
        return;
    }
    // Nothing run yet: zero, not None.
    assert_eq!(e.take_gpu_time().unwrap(), Some(std::time::Duration::ZERO));
    let mut rng = common::Rng::new(7);
    let (q, x, y) = (
        rng.matrix(300, 3, 0.0, 1.0),
        rng.matrix(700, 3, 0.0, 1.0),
        rng.matrix(700, 2, 0.0, 1.0),
    );
    let k = Kernel::gaussian(0.3).unwrap();
    let wall = std::time::Instant::now();
    e.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    let wall = wall.elapsed();
    let t = e.take_gpu_time().unwrap().unwrap();
    assert!(
        t > std::time::Duration::ZERO && t <= wall,
        "kernel {t:?}, wall {wall:?}"
    );
    // Taken: the next call starts from zero.
    assert_eq!(e.take_gpu_time().unwrap(), Some(std::time::Duration::ZERO));
    // Ops with their own submissions: kernel matrix, softmax, kNN, MeanShift.
    e.kernel_matrix(&k, q.view(), x.view()).unwrap();
    assert!(e.take_gpu_time().unwrap().unwrap() > std::time::Duration::ZERO);
    let a = Array3::from_shape_fn((2, 40, 8), |(b, t, c)| {
        ((b + 3 * t + 5 * c) % 7) as f32 / 7.0
    });
    e.kernel_softmax(
        a.view(),
        a.view(),
        a.view(),
        &SoftmaxParams::new().with_causal(true),
    )
    .unwrap();
    assert!(e.take_gpu_time().unwrap().unwrap() > std::time::Duration::ZERO);
    e.knn(q.view(), x.view(), 5).unwrap();
    assert!(e.take_gpu_time().unwrap().unwrap() > std::time::Duration::ZERO);
    // An engine without timing, and the CPU, report none.
    let plain = Engine::with_options(EngineOptions::new(Device::Gpu)).unwrap();
    plain.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    assert_eq!(plain.take_gpu_time().unwrap(), None);
    assert_eq!(Engine::cpu().take_gpu_time().unwrap(), None);
}

#[test]
fn more_passes_than_one_query_set_holds_are_all_timed() {
    let Some(_) = adapters_or_skip() else {
        return;
    };
    // One value column per pass: 300 value columns are 300 passes in one
    // submission, more than one query set of 256 pairs holds.
    let timed = |cols: Option<usize>| {
        let mut o = EngineOptions::new(Device::Gpu);
        o.gpu_timing = true;
        o.tile_limits.value_cols = cols;
        Engine::with_options(o).unwrap()
    };
    let (one, all) = (timed(Some(1)), timed(None));
    let mut rng = common::Rng::new(9);
    let (q, x, y) = (
        rng.matrix(20, 2, 0.0, 1.0),
        rng.matrix(50, 2, 0.0, 1.0),
        rng.matrix(50, 300, 0.0, 1.0),
    );
    let k = Kernel::gaussian(0.3).unwrap();
    let a = one.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    let b = all.local_mean(&k, q.view(), x.view(), y.view()).unwrap();
    common::assert_close(
        "one column per pass",
        &a.values,
        &b.values.mapv(f64::from),
        1e-5,
        1e-6,
    );
    match (one.take_gpu_time().unwrap(), all.take_gpu_time().unwrap()) {
        (Some(t1), Some(t8)) => {
            assert!(t1 > std::time::Duration::ZERO && t8 > std::time::Duration::ZERO)
        }
        (None, None) => eprintln!("SKIPPED: the adapter has no TIMESTAMP_QUERY"),
        other => panic!("{other:?}"),
    }
}
