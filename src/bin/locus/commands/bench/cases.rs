//! The cases `locus bench` runs, at each `--size`. A new op adds its case
//! here.

use std::sync::Arc;

use locus::{Engine, Kernel, LaplacianKind, MeanShiftParams, Profile, Seeds, SoftmaxParams};
use ndarray::{Array2, Array3, s};
use serde_json::{Value, json};

use crate::data;
use crate::error::{CliError, CliResult};
use crate::verify::Tolerance;

/// Problem sizes of `locus bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Size {
    /// Seconds on any adapter, lavapipe included: a check that every case runs.
    Tiny,
    /// Small sizes: seconds in all.
    Quick,
    /// Sizes that suit a hardware GPU (minutes on a software adapter).
    Default,
    /// A hardware GPU's sizes: local mean M = N = 10⁶ (d = 3), 4096
    /// queries against 10⁶ keys (d = 3) and M = N = 2·10⁵ (d = 128), attention B = 8, T = 4096, d = 64, MeanShift on
    /// 10⁶ points, kNN of 10⁴ queries over 10⁶ keys (d = 128), a 16384²
    /// kernel matrix.
    Large,
}

/// The op families `--ops` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpKind {
    /// Gaussian local mean (Nadaraya–Watson) of value columns.
    LocalMean,
    /// Self local mean `K̃X` (one MeanShift step).
    SelfLocalMean,
    /// Kernel matrices: plain, row-normalized, Laplacian.
    KernelMatrix,
    /// Gaussian log-density.
    Kde,
    /// k nearest neighbours.
    Knn,
    /// Kernel softmax (attention), full and causal.
    Attention,
    /// MeanShift clustering.
    MeanShift,
    /// A key set's local mean under a compact kernel (through its cell
    /// index), beside the one-shot op over every key on the same data.
    KeySet,
}

/// Sizes given on the command line, for the distance ops.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// Query rows.
    pub m: Option<usize>,
    /// Key rows.
    pub n: Option<usize>,
    /// Dimension.
    pub d: Option<usize>,
}

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

/// One planned case, before data are made.
#[derive(Debug, Clone, Copy)]
enum Spec {
    LocalMean {
        m: usize,
        n: usize,
        d: usize,
        q: usize,
        h: f32,
    },
    SelfLocalMean {
        n: usize,
        h: f32,
    },
    KernelMatrix {
        m: usize,
        n: usize,
        d: usize,
        rows: bool,
    },
    Laplacian {
        n: usize,
    },
    Kde {
        m: usize,
        n: usize,
        d: usize,
    },
    Knn {
        m: usize,
        n: usize,
        d: usize,
        k: usize,
    },
    Attention {
        b: usize,
        t: usize,
        d: usize,
        causal: bool,
    },
    /// Attention of `m` new queries per batch and call against `t` keys
    /// and values per batch: sent from the host every call, or prepared
    /// once on the engine (`AttentionSet`, as a decoder or a fixed memory
    /// would keep them).
    AttentionQueries {
        b: usize,
        t: usize,
        m: usize,
        d: usize,
        prepared: bool,
    },
    /// Gaussian MeanShift, every point a seed, exactly `iters` iterations.
    MeanShiftFixed {
        n: usize,
        iters: usize,
    },
    /// Flat-kernel MeanShift to convergence, as scikit-learn runs it.
    MeanShift {
        n: usize,
        binned: bool,
    },
    /// Uniform-kernel local mean of `m` queries near `n` blob points:
    /// through a key set prepared on the first (warm-up) call, whose cell
    /// index it builds then (`indexed`), or by the one-shot op over every
    /// key.
    KeySet {
        m: usize,
        n: usize,
        h: f32,
        indexed: bool,
    },
}

impl Spec {
    fn kind(&self) -> OpKind {
        match self {
            Spec::LocalMean { .. } => OpKind::LocalMean,
            Spec::SelfLocalMean { .. } => OpKind::SelfLocalMean,
            Spec::KernelMatrix { .. } | Spec::Laplacian { .. } => OpKind::KernelMatrix,
            Spec::Kde { .. } => OpKind::Kde,
            Spec::Knn { .. } => OpKind::Knn,
            Spec::Attention { .. } | Spec::AttentionQueries { .. } => OpKind::Attention,
            Spec::MeanShiftFixed { .. } | Spec::MeanShift { .. } => OpKind::MeanShift,
            Spec::KeySet { .. } => OpKind::KeySet,
        }
    }

    /// `--m/--n/--d` applied to the distance ops.
    fn with(self, o: Overrides) -> Spec {
        let pick = |v: usize, o: Option<usize>| o.unwrap_or(v);
        match self {
            Spec::LocalMean { m, n, d, q, h } => Spec::LocalMean {
                m: pick(m, o.m),
                n: pick(n, o.n),
                d: pick(d, o.d),
                q,
                h,
            },
            Spec::KernelMatrix { m, n, d, rows } => Spec::KernelMatrix {
                m: pick(m, o.m),
                n: pick(n, o.n),
                d: pick(d, o.d),
                rows,
            },
            Spec::Kde { m, n, d } => Spec::Kde {
                m: pick(m, o.m),
                n: pick(n, o.n),
                d: pick(d, o.d),
            },
            Spec::Knn { m, n, d, k } => Spec::Knn {
                m: pick(m, o.m),
                n: pick(n, o.n),
                d: pick(d, o.d),
                k,
            },
            other => other,
        }
    }
}

/// Gaussian bandwidth for uniform data in `d` dimensions: 0.2 at d = 3,
/// growing as √d with the typical distance, so that a query sees a
/// comparable share of the keys at every d.
fn bandwidth(d: usize) -> f32 {
    0.2 * (d as f32 / 3.0).sqrt().max(1.0)
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

fn plan(size: Size) -> Vec<Spec> {
    use Spec::*;
    match size {
        Size::Tiny => vec![
            LocalMean {
                m: 300,
                n: 500,
                d: 3,
                q: 4,
                h: bandwidth(3),
            },
            LocalMean {
                m: 100,
                n: 200,
                d: 32,
                q: 4,
                h: bandwidth(32),
            },
            SelfLocalMean { n: 400, h: 0.2 },
            KernelMatrix {
                m: 200,
                n: 300,
                d: 3,
                rows: false,
            },
            KernelMatrix {
                m: 200,
                n: 300,
                d: 3,
                rows: true,
            },
            Laplacian { n: 200 },
            Kde {
                m: 200,
                n: 400,
                d: 3,
            },
            Knn {
                m: 50,
                n: 1_000,
                d: 16,
                k: 16,
            },
            Attention {
                b: 2,
                t: 100,
                d: 16,
                causal: false,
            },
            Attention {
                b: 2,
                t: 100,
                d: 16,
                causal: true,
            },
            AttentionQueries {
                b: 2,
                t: 100,
                m: 4,
                d: 16,
                prepared: false,
            },
            AttentionQueries {
                b: 2,
                t: 100,
                m: 4,
                d: 16,
                prepared: true,
            },
            MeanShiftFixed { n: 300, iters: 3 },
            MeanShift {
                n: 2_000,
                binned: true,
            },
            MeanShift {
                n: 300,
                binned: false,
            },
            KeySet {
                m: 300,
                n: 5_000,
                h: 0.3,
                indexed: false,
            },
            KeySet {
                m: 300,
                n: 5_000,
                h: 0.3,
                indexed: true,
            },
        ],
        Size::Quick | Size::Default => {
            let quick = size == Size::Quick;
            let pick = |q: usize, full: usize| if quick { q } else { full };
            vec![
                LocalMean {
                    m: pick(2_000, 16_384),
                    n: pick(4_000, 32_768),
                    d: 3,
                    q: 2,
                    h: 0.2,
                },
                SelfLocalMean {
                    n: pick(3_000, 20_000),
                    h: 0.2,
                },
                KernelMatrix {
                    m: pick(1_000, 4_000),
                    n: pick(1_500, 6_000),
                    d: 3,
                    rows: false,
                },
                KernelMatrix {
                    m: pick(1_000, 4_000),
                    n: pick(1_500, 6_000),
                    d: 3,
                    rows: true,
                },
                Laplacian {
                    n: pick(1_200, 5_000),
                },
                Kde {
                    m: pick(1_000, 8_192),
                    n: pick(2_000, 32_768),
                    d: 3,
                },
                Knn {
                    m: pick(500, 2_048),
                    n: pick(4_000, 65_536),
                    d: 16,
                    k: 16,
                },
                Attention {
                    b: pick(4, 8),
                    t: pick(512, 2_048),
                    d: 64,
                    causal: true,
                },
                AttentionQueries {
                    b: pick(4, 8),
                    t: pick(512, 2_048),
                    m: 16,
                    d: 64,
                    prepared: false,
                },
                AttentionQueries {
                    b: pick(4, 8),
                    t: pick(512, 2_048),
                    m: 16,
                    d: 64,
                    prepared: true,
                },
                MeanShiftFixed {
                    n: pick(1_500, 16_384),
                    iters: 10,
                },
                KeySet {
                    m: pick(2_000, 20_000),
                    n: pick(20_000, 200_000),
                    h: 0.1,
                    indexed: false,
                },
                KeySet {
                    m: pick(2_000, 20_000),
                    n: pick(20_000, 200_000),
                    h: 0.1,
                    indexed: true,
                },
            ]
        }
        Size::Large => vec![
            LocalMean {
                m: 1_000_000,
                n: 1_000_000,
                d: 3,
                q: 4,
                h: bandwidth(3),
            },
            // Few queries: the keys split across workgroups.
            LocalMean {
                m: 4_096,
                n: 1_000_000,
                d: 3,
                q: 4,
                h: bandwidth(3),
            },
            LocalMean {
                m: 200_000,
                n: 200_000,
                d: 128,
                q: 4,
                h: bandwidth(128),
            },
            Attention {
                b: 8,
                t: 4_096,
                d: 64,
                causal: false,
            },
            Attention {
                b: 8,
                t: 4_096,
                d: 64,
                causal: true,
            },
            // 16 new queries a call (decoding): keys sent every call, or kept.
            AttentionQueries {
                b: 8,
                t: 4_096,
                m: 16,
                d: 64,
                prepared: false,
            },
            AttentionQueries {
                b: 8,
                t: 4_096,
                m: 16,
                d: 64,
                prepared: true,
            },
            MeanShift {
                n: 1_000_000,
                binned: true,
            },
            MeanShift {
                n: 100_000,
                binned: false,
            },
            Knn {
                m: 10_000,
                n: 1_000_000,
                d: 128,
                k: 16,
            },
            KernelMatrix {
                m: 16_384,
                n: 16_384,
                d: 3,
                rows: false,
            },
            // A key set's cell index (GPU: each workgroup over its spans)
            // against the one-shot op over every key.
            KeySet {
                m: 1_000_000,
                n: 1_000_000,
                h: 0.05,
                indexed: false,
            },
            KeySet {
                m: 1_000_000,
                n: 1_000_000,
                h: 0.05,
                indexed: true,
            },
        ],
    }
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
