//! The cases `locus bench` runs: each planned problem (`plan.rs`) with
//! its data generated and its call, ready to time. A new op adds its
//! planned sizes in `plan.rs` and its case here.

use std::sync::Arc;

use locus::{Engine, Kernel, LaplacianKind, MeanShiftParams, Profile, Seeds, SoftmaxParams};
use ndarray::{Array2, Array3, s};
use serde_json::{Value, json};

use crate::data;
use crate::error::{CliError, CliResult};
use crate::verify::Tolerance;

use super::plan::{OpKind, Overrides, Size, Spec, bandwidth, plan};

/// A call that returns a matrix to compare between backends.
pub type Call = Box<dyn Fn(&Engine) -> locus::Result<Array2<f32>>>;

/// The first rows of a result, computed on their own: how a GPU result is
/// checked when the CPU run of the whole case would take too long.
pub struct Sample {
    /// Rows computed.
    pub rows: usize,
    /// The call on those rows.
    pub run: Call,
}

/// One op on generated data.
pub struct Case {
    /// The family `--ops` selects it by.
    pub kind: OpKind,
    /// Op name, as the subcommand calls it.
    pub op: String,
    /// Sizes, in the order printed.
    pub sizes: Vec<(&'static str, usize)>,
    /// Parameters (kernel, bandwidth, causal, seeds…), for the report and
    /// for other tools to run the same problem.
    pub params: Value,
    /// Pair evaluations per run (`M·N`); `None` where the count depends on
    /// the data (MeanShift run to convergence).
    pub pairs: Option<f64>,
    /// Rough CPU work (pairs × d): a CPU run above `--cpu-max-work` is skipped.
    pub work: f64,
    /// Tolerance between the two backends.
    pub tolerance: Tolerance,
    /// The call, returning a matrix to compare.
    pub run: Call,
    /// Rows to check on the CPU when the CPU run is skipped.
    pub sample: Option<Sample>,
}

/// Generated uniform data, or an input error when it does not fit in memory.
fn uniform(rows: usize, cols: usize, seed: u64) -> CliResult<Array2<f32>> {
    data::try_uniform(rows, cols, seed).ok_or_else(|| too_large(rows, cols))
}

/// Generated blobs, or an input error when they do not fit in memory.
fn blobs(n: usize) -> CliResult<Array2<f32>> {
    data::try_blobs(n).ok_or_else(|| too_large(n, 2))
}

/// `b` batches of `rows × d` generated points, uniform in [-1, 1) (attention).
fn heads(b: usize, rows: usize, d: usize, seed: u64) -> CliResult<Array3<f32>> {
    uniform(b * rows, d, seed)?
        .mapv(|x| 2.0 * x - 1.0)
        .into_shape_with_order((b, rows, d))
        .map_err(CliError::compute)
}

/// The one-shot attention call over these inputs, its result stacked.
fn attention_call(
    phi: Array3<f32>,
    psi: Array3<f32>,
    values: Array3<f32>,
    params: SoftmaxParams,
) -> Call {
    Box::new(move |e: &Engine| {
        let out = e.kernel_softmax(phi.view(), psi.view(), values.view(), &params)?;
        Ok(stacked(out))
    })
}

/// A batched result `(B, M, q)` as the `(B·M) × q` matrix the bench compares.
fn stacked(out: Array3<f32>) -> Array2<f32> {
    let (_, m, q) = out.dim();
    Array2::from_shape_fn((out.len() / q.max(1), q), |(r, c)| out[[r / m, r % m, c]])
}

/// What each engine prepared on its first (warm-up) call, by backend: a
/// case's prepared set, timed in its later calls without the preparing.
struct PerEngine<T>(std::sync::Mutex<Vec<(String, T)>>);

impl<T> Default for PerEngine<T> {
    fn default() -> Self {
        PerEngine(std::sync::Mutex::new(Vec::new()))
    }
}

impl<T: Clone> PerEngine<T> {
    /// `e`'s value, made by `make` on its first call.
    fn get(&self, e: &Engine, make: impl FnOnce() -> locus::Result<T>) -> locus::Result<T> {
        let id = e.backend().to_string();
        // A cache only: a poisoned lock's list is still usable.
        let mut sets = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = sets.iter().find(|(k, _)| *k == id) {
            return Ok(s.clone());
        }
        let s = make()?;
        sets.push((id, s.clone()));
        Ok(s)
    }
}

fn too_large(rows: usize, cols: usize) -> CliError {
    CliError::input(format!(
        "bench: {rows}×{cols} generated points do not fit in memory; choose smaller --m/--n/--d"
    ))
}

/// The cases of `size`, only those of `ops` when it is not empty, with
/// the distance ops' sizes overridden.
pub fn cases(size: Size, ops: &[OpKind], o: Overrides) -> CliResult<Vec<Case>> {
    plan(size)
        .into_iter()
        .filter(|s| ops.is_empty() || ops.contains(&s.kind()))
        .map(|s| build(s.with(o)))
        .collect()
}

/// Rows of a sample check: few enough to stay quick on the CPU.
fn sample_rows(m: usize, d: usize) -> usize {
    m.min(if d > 32 { 64 } else { 256 })
}

fn build(spec: Spec) -> CliResult<Case> {
    let kind = spec.kind();
    let case = match spec {
        Spec::LocalMean { m, n, d, q, h } => {
            let gauss = Kernel::new(Profile::Gaussian, h)?;
            let (queries, keys, values) = (
                uniform(m, d, 1)?,
                Arc::new(uniform(n, d, 2)?),
                Arc::new(uniform(n, q, 3)?),
            );
            let rows = sample_rows(m, d);
            let head = queries.slice(s![..rows, ..]).to_owned();
            let (k2, v2) = (Arc::clone(&keys), Arc::clone(&values));
            Case {
                kind,
                op: "local-mean".into(),
                sizes: vec![("M", m), ("N", n), ("d", d), ("q", q)],
                params: json!({"kernel": "gaussian", "bandwidth": h, "data": "uniform [0,1)"}),
                pairs: Some((m * n) as f64),
                work: (m * n) as f64 * (d + q) as f64,
                tolerance: Tolerance::local_mean(1.0),
                run: Box::new(move |e: &Engine| {
                    Ok(
                        e.local_mean(&gauss, queries.view(), keys.view(), values.view())?
                            .values,
                    )
                }),
                sample: Some(Sample {
                    rows,
                    run: Box::new(move |e: &Engine| {
                        Ok(e.local_mean(&gauss, head.view(), k2.view(), v2.view())?
                            .values)
                    }),
                }),
            }
        }
        Spec::SelfLocalMean { n, h } => {
            let epan = Kernel::new(Profile::Epanechnikov, h)?;
            let points = uniform(n, 2, 4)?;
            Case {
                kind,
                op: "local-mean (self, epanechnikov)".into(),
                sizes: vec![("N", n), ("d", 2)],
                params: json!({"kernel": "epanechnikov", "bandwidth": h, "data": "uniform [0,1)"}),
                pairs: Some((n * n) as f64),
                work: (n * n) as f64 * 4.0,
                tolerance: Tolerance::local_mean(1.0),
                run: Box::new(move |e: &Engine| {
                    Ok(e.self_local_mean(&epan, points.view())?.values)
                }),
                sample: None,
            }
        }
        Spec::KernelMatrix {
            m,
            n,
            d,
            rows: normalize,
        } => {
            let gauss = Kernel::new(Profile::Gaussian, 0.2)?;
            let (queries, keys) = (uniform(m, d, 5)?, Arc::new(uniform(n, d, 6)?));
            let rows = sample_rows(m, d);
            let head = queries.slice(s![..rows, ..]).to_owned();
            let k2 = Arc::clone(&keys);
            let run = move |e: &Engine,
                            q: ndarray::ArrayView2<'_, f32>,
                            k: ndarray::ArrayView2<'_, f32>| {
                if normalize {
                    Ok(e.normalized_kernel_matrix(&gauss, q, k)?.values)
                } else {
                    e.kernel_matrix(&gauss, q, k)
                }
            };
            Case {
                kind,
                op: if normalize {
                    "kernel-matrix --normalize rows".into()
                } else {
                    "kernel-matrix".into()
                },
                sizes: vec![("M", m), ("N", n), ("d", d)],
                params: json!({"kernel": "gaussian", "bandwidth": 0.2, "normalize": if normalize {"rows"} else {"none"}, "data": "uniform [0,1)"}),
                pairs: Some((m * n) as f64),
                work: (m * n) as f64 * d as f64,
                tolerance: Tolerance::MATRIX,
                run: Box::new(move |e: &Engine| run(e, queries.view(), keys.view())),
                sample: Some(Sample {
                    rows,
                    run: Box::new(move |e: &Engine| run(e, head.view(), k2.view())),
                }),
            }
        }
        Spec::Laplacian { n } => {
            let gauss = Kernel::new(Profile::Gaussian, 0.2)?;
            let points = uniform(n, 3, 7)?;
            Case {
                kind,
                op: "kernel-matrix --laplacian".into(),
                sizes: vec![("N", n), ("d", 3)],
                params: json!({"kernel": "gaussian", "bandwidth": 0.2, "laplacian": "unnormalized"}),
                pairs: Some((n * n) as f64),
                work: (n * n) as f64 * 3.0,
                tolerance: Tolerance::unnormalized_laplacian(n),
                run: Box::new(move |e: &Engine| {
                    e.laplacian(&gauss, points.view(), LaplacianKind::Unnormalized)
                }),
                sample: None,
            }
        }
        Spec::Kde { m, n, d } => {
            let gauss = Kernel::new(Profile::Gaussian, bandwidth(d))?;
            let (queries, keys) = (uniform(m, d, 8)?, Arc::new(uniform(n, d, 9)?));
            let rows = sample_rows(m, d);
            let head = queries.slice(s![..rows, ..]).to_owned();
            let k2 = Arc::clone(&keys);
            let run = move |e: &Engine,
                            q: ndarray::ArrayView2<'_, f32>,
                            k: ndarray::ArrayView2<'_, f32>| {
                let l = e.log_density(&gauss, q, k, None)?;
                Ok(l.mapv(|v| v as f32).insert_axis(ndarray::Axis(1)))
            };
            Case {
                kind,
                op: "kde (log-density)".into(),
                sizes: vec![("M", m), ("N", n), ("d", d)],
                params: json!({"kernel": "gaussian", "bandwidth": bandwidth(d), "data": "uniform [0,1)"}),
                pairs: Some((m * n) as f64),
                work: (m * n) as f64 * d as f64,
                tolerance: Tolerance {
                    rtol: 1e-4,
                    atol: 1e-5,
                },
                run: Box::new(move |e: &Engine| run(e, queries.view(), keys.view())),
                sample: Some(Sample {
                    rows,
                    run: Box::new(move |e: &Engine| run(e, head.view(), k2.view())),
                }),
            }
        }
        Spec::Knn { m, n, d, k } => {
            let (queries, keys) = (uniform(m, d, 10)?, Arc::new(uniform(n, d, 11)?));
            let rows = sample_rows(m, d);
            let head = queries.slice(s![..rows, ..]).to_owned();
            let k2 = Arc::clone(&keys);
            Case {
                kind,
                op: format!("knn (distances, k={k})"),
                sizes: vec![("M", m), ("N", n), ("d", d), ("k", k)],
                params: json!({"k": k, "data": "uniform [0,1)"}),
                pairs: Some((m * n) as f64),
                work: (m * n) as f64 * d as f64,
                tolerance: Tolerance {
                    rtol: 1e-5,
                    atol: 1e-6,
                },
                run: Box::new(move |e: &Engine| {
                    Ok(e.knn(queries.view(), keys.view(), k)?.distances)
                }),
                sample: Some(Sample {
                    rows,
                    run: Box::new(move |e: &Engine| {
                        Ok(e.knn(head.view(), k2.view(), k)?.distances)
                    }),
                }),
            }
        }
        Spec::Attention { b, t, d, causal } => {
            let (phi, psi, values) = (
                heads(b, t, d, 12)?,
                heads(b, t, d, 13)?,
                heads(b, t, d, 14)?,
            );
            let params = SoftmaxParams::new().with_causal(causal);
            // Causal: about B·T²/2 (query, key) pairs.
            let pairs = if causal {
                b * t * (t + 1) / 2
            } else {
                b * t * t
            };
            Case {
                kind,
                op: if causal {
                    "softmax (causal attention)".into()
                } else {
                    "softmax (attention)".into()
                },
                sizes: vec![("B", b), ("T", t), ("d", d), ("q", d)],
                params: json!({"causal": causal, "scale": 1.0 / (d as f64).sqrt(), "data": "uniform [-1,1)"}),
                pairs: Some(pairs as f64),
                work: pairs as f64 * 2.0 * d as f64,
                tolerance: Tolerance::local_mean(1.0),
                run: attention_call(phi, psi, values, params),
                sample: None,
            }
        }
        Spec::AttentionQueries {
            b,
            t,
            m,
            d,
            prepared,
        } => {
            let (phi, psi, values) = (
                heads(b, m, d, 15)?,
                heads(b, t, d, 16)?,
                heads(b, t, d, 17)?,
            );
            let params = SoftmaxParams::new();
            let pairs = b * m * t;
            let sets = PerEngine::default();
            let run: Call = if prepared {
                Box::new(move |e: &Engine| {
                    let set = sets.get(e, || e.prepare_attention(psi.view(), values.view()))?;
                    Ok(stacked(set.attend(phi.view(), &params)?))
                })
            } else {
                attention_call(phi, psi, values, params)
            };
            Case {
                kind,
                op: if prepared {
                    "softmax (new queries, prepared keys)".into()
                } else {
                    "softmax (new queries, keys from the host)".into()
                },
                sizes: vec![("B", b), ("M", m), ("T", t), ("d", d), ("q", d)],
                params: json!({"causal": false, "scale": 1.0 / (d as f64).sqrt(), "prepared": prepared, "data": "uniform [-1,1)"}),
                pairs: Some(pairs as f64),
                work: pairs as f64 * 2.0 * d as f64,
                tolerance: Tolerance::local_mean(1.0),
                run,
                sample: None,
            }
        }
        Spec::KeySet { m, n, h, indexed } => {
            let uniform_kernel = Kernel::new(Profile::Uniform, h)?;
            let keys = blobs(n)?;
            // Queries near the points: every (n/m)-th point moved by h/3.
            let step = (n / m.max(1)).max(1);
            let queries =
                Array2::from_shape_fn((m, 2), |(i, k)| keys[[(i * step) % n, k]] + h / 3.0);
            let rows = sample_rows(m, 2);
            let head = queries.slice(s![..rows, ..]).to_owned();
            let keys = Arc::new(keys);
            let pairs = (m as f64) * (n as f64);
            let (run, sample): (Call, Option<Sample>) = if indexed {
                // The first (warm-up) call also builds the set's index.
                let sets = PerEngine::default();
                let k2 = Arc::clone(&keys);
                let run = Box::new(move |e: &Engine| {
                    let set = sets.get(e, || e.prepare(k2.view()).values(k2.view()).build())?;
                    Ok(set.local_mean(&uniform_kernel, queries.view())?.values)
                });
                (run, None)
            } else {
                let (k2, k3) = (Arc::clone(&keys), Arc::clone(&keys));
                let kernel = uniform_kernel;
                let run: Call = Box::new(move |e: &Engine| {
                    Ok(e.local_mean(&kernel, queries.view(), k2.view(), k2.view())?
                        .values)
                });
                let sample = Sample {
                    rows,
                    run: Box::new(move |e: &Engine| {
                        Ok(
                            e.local_mean(&uniform_kernel, head.view(), k3.view(), k3.view())?
                                .values,
                        )
                    }),
                };
                (run, Some(sample))
            };
            Case {
                kind,
                op: if indexed {
                    "local-mean (uniform, key set, cell index)".into()
                } else {
                    "local-mean (uniform, one-shot, every key)".into()
                },
                sizes: vec![("M", m), ("N", n), ("d", 2), ("q", 2)],
                params: json!({"kernel": "uniform", "bandwidth": h, "indexed": indexed, "data": "5 blobs, queries near the points"}),
                pairs: Some(pairs),
                // The index visits a small share of the pairs.
                work: if indexed { pairs / 64.0 } else { pairs * 2.0 },
                tolerance: Tolerance::local_mean(1.0),
                run,
                sample,
            }
        }
        Spec::MeanShiftFixed { n, iters } => {
            // A tolerance no seed reaches: exactly `iters` iterations, so
            // iters·N² pair evaluations.
            let points = blobs(n)?;
            let params = MeanShiftParams::new()
                .profile(Profile::Gaussian)
                .bandwidth(0.8)
                .max_iter(iters)
                .tol(1e-12)
                .check()?;
            Case {
                kind,
                op: format!("mean-shift (gaussian, {iters} iterations)"),
                sizes: vec![("N", n), ("d", 2)],
                params: json!({"kernel": "gaussian", "bandwidth": 0.8, "seeds": "all", "iterations": iters, "data": "5 blobs"}),
                pairs: Some((iters * n * n) as f64),
                work: (iters * n * n) as f64 * 2.0,
                tolerance: Tolerance {
                    rtol: 0.0,
                    atol: 1e-4 * 0.8,
                },
                run: Box::new(move |e: &Engine| Ok(e.mean_shift(&params, points.view())?.modes)),
                sample: None,
            }
        }
        Spec::MeanShift { n, binned } => {
            let points = blobs(n)?;
            let params = MeanShiftParams::new()
                .profile(Profile::Uniform)
                .bandwidth(0.8)
                .seeds(if binned {
                    Seeds::Binned { min_bin_freq: 1 }
                } else {
                    Seeds::All
                })
                .check()?;
            Case {
                kind,
                op: format!(
                    "mean-shift (flat, {} seeds)",
                    if binned { "binned" } else { "all" }
                ),
                sizes: vec![("N", n), ("d", 2)],
                params: json!({"kernel": "uniform", "bandwidth": 0.8, "seeds": if binned {"binned"} else {"all"}, "data": "5 blobs"}),
                pairs: None,
                // Seeds × neighbours × iterations, roughly: binned seeds are
                // few; every point a seed sweeps its neighbourhood ~20 times.
                work: if binned {
                    n as f64 * 200.0
                } else {
                    (n * n) as f64
                },
                tolerance: Tolerance {
                    rtol: 0.0,
                    atol: 1e-3 * 0.8,
                },
                run: Box::new(move |e: &Engine| Ok(e.mean_shift(&params, points.view())?.modes)),
                sample: None,
            }
        }
    };
    Ok(case)
}
