//! The problems `locus bench` plans at each `--size`, one op family at a
//! time (`--ops`), before any data are made (`cases.rs` builds them).

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

/// One planned case, before data are made.
#[derive(Debug, Clone, Copy)]
pub(super) enum Spec {
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
    pub(super) fn kind(&self) -> OpKind {
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
    pub(super) fn with(self, o: Overrides) -> Spec {
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
pub(super) fn bandwidth(d: usize) -> f32 {
    0.2 * (d as f32 / 3.0).sqrt().max(1.0)
}

/// The problems of `size`.
pub(super) fn plan(size: Size) -> Vec<Spec> {
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
