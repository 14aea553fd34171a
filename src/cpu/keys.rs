//! Keys and value matrices in the layout the CPU kernels stream: transposed
//! into columns of a padded stride ([`KeysSoa`], borrowed), and the owned
//! copy ([`KeyColumns`]) that a key set keeps and a one-shot call builds
//! for the call, so both reach the kernels the same way.
//!
//! With many queries in many dimensions the keys are also kept centred
//! and packed in panels for inner products (`panels.rs`).
//!
//! Imports: `super::panels`, `crate::error`, `crate::matrix`.

use rayon::prelude::*;

use super::panels::{KnnRows, Panels};
use crate::error::Result;
use crate::matrix::{Matrix, padded_stride, reserve, try_zeros};

/// Keys and values stored column-major for unit-stride lane loads.
pub(crate) struct KeysSoa<'a> {
    /// `d` columns: coordinate `k` of key `j` at `xt[k·ld + j]`.
    pub xt: &'a [f32],
    /// `q` columns: value `c` of key `j` at `yt[c·ld + j]`.
    pub yt: &'a [f32],
    /// Number of keys.
    pub n: usize,
    /// Stride between the columns of `xt` and `yt` (≥ `n`; padded so
    /// columns do not alias in the L1 cache).
    pub ld: usize,
    /// Number of value columns.
    pub q: usize,
    /// The keys centred and packed for inner products, when built.
    pub panels: Option<&'a Panels>,
    /// The keys as given, row-major (`rows[j·d + k]`), when at hand: the
    /// panels' copy (a key set) or the caller's keys (a one-shot kNN).
    /// kNN's blocked path re-measures its candidates from them.
    pub rows: Option<&'a [f32]>,
}

/// What a [`KeyColumns`] builds beside the transposed keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pack {
    /// Nothing.
    None,
    /// The keys' panels (local means, row states, kernel matrices).
    Panels,
    /// The panels with kNN's data and a row-major copy of the keys (a key
    /// set; kNN re-measures from the copy).
    PanelsAndRows,
    /// The panels with kNN's data, without the transposed keys unless the
    /// panels cannot be built and without a row-major copy: a one-shot
    /// kNN that takes the blocked path, whose every pair the panels and
    /// the caller's keys, lent row-major ([`KeysSoa::rows`]), measure.
    PanelsInstead,
}

impl Pack {
    /// `Panels` when `yes`, else `None`.
    pub(crate) fn panels_if(yes: bool) -> Pack {
        if yes { Pack::Panels } else { Pack::None }
    }

    /// What the panels hold for kNN.
    fn knn_rows(self) -> KnnRows {
        match self {
            Pack::None | Pack::Panels => KnnRows::No,
            Pack::PanelsAndRows => KnnRows::Copied,
            Pack::PanelsInstead => KnnRows::Lent,
        }
    }
}

/// Keys (`d` columns of stride `ld`) and value matrices, transposed and
/// owned.
pub(crate) struct KeyColumns {
    xt: Vec<f32>,
    /// Each value matrix transposed, and its column count.
    sets: Vec<(Vec<f32>, usize)>,
    n: usize,
    d: usize,
    ld: usize,
    panels: Option<Panels>,
}

impl KeyColumns {
    /// Bytes the transposed `keys` and `sets` take, with what `pack` adds.
    pub(crate) fn bytes(keys: &Matrix<'_>, sets: &[Matrix<'_>], pack: Pack) -> u64 {
        let ld = padded_stride(keys.rows());
        let cols: usize = keys.cols() + sets.iter().map(Matrix::cols).sum::<usize>();
        let (n, d) = (keys.rows(), keys.cols());
        let packed = match pack {
            Pack::None => 0,
            _ => Panels::bytes(n, d, pack.knn_rows()),
        };
        // PanelsInstead builds the transposed keys only where it builds no
        // panels, which take more: the panels stand for them.
        let cols = match pack {
            Pack::PanelsInstead => cols - keys.cols(),
            _ => cols,
        };
        (ld as u64)
            .saturating_mul(cols as u64)
            .saturating_mul(4)
            .saturating_add(packed)
    }

    /// Transposes `keys` and every value matrix, and builds what `pack`
    /// asks (no panels when the keys lie too far apart for them); or
    /// [`Error::TooLarge`](crate::Error::TooLarge) for `op` when a copy
    /// cannot be allocated.
    pub(crate) fn try_new(
        op: &'static str,
        keys: &Matrix<'_>,
        sets: &[Matrix<'_>],
        pack: Pack,
    ) -> Result<Self> {
        let (n, d, ld) = (keys.rows(), keys.cols(), padded_stride(keys.rows()));
        let panels = match pack {
            Pack::None => None,
            _ => Panels::try_from_rows(op, keys.as_slice(), d, pack.knn_rows())?,
        };
        let xt = match (pack, &panels) {
            (Pack::PanelsInstead, Some(_)) => Vec::new(),
            _ => keys.transposed(op, "transposed keys")?,
        };
        let mut cols = reserve(op, "transposed values", sets.len() as u64)?;
        for v in sets {
            cols.push((v.transposed(op, "transposed values")?, v.cols()));
        }
        Ok(KeyColumns {
            xt,
            sets: cols,
            n,
            d,
            ld,
            panels,
        })
    }

    /// Bytes of this copy's transposed keys and values (its panels left
    /// out), as [`permuted`](Self::permuted) allocates them.
    pub(crate) fn unpacked_bytes(&self) -> u64 {
        let cols = self.d + self.sets.iter().map(|s| s.1).sum::<usize>();
        (self.ld as u64)
            .saturating_mul(cols as u64)
            .saturating_mul(4)
    }

    /// The same keys and value matrices, key `order[p]` at position `p`
    /// (`order` a permutation of the keys), without panels; or
    /// [`Error::TooLarge`](crate::Error::TooLarge) for `op` when the copy
    /// cannot be allocated. Runs on the current thread pool.
    pub(crate) fn permuted(&self, op: &'static str, order: &[u32]) -> Result<Self> {
        debug_assert_eq!(order.len(), self.n);
        let ld = self.ld;
        let gather = |src: &[f32], cols: usize, what| -> Result<Vec<f32>> {
            let len = (ld as u64).saturating_mul(cols as u64);
            let mut out = try_zeros::<f32>(op, what, len)?;
            out.par_chunks_mut(ld)
                .zip(src.par_chunks(ld))
                .for_each(|(o, c)| {
                    for (o, &i) in o.iter_mut().zip(order) {
                        *o = c[i as usize];
                    }
                });
            Ok(out)
        };
        let xt = gather(&self.xt, self.d, "sorted keys")?;
        let mut sets = reserve(op, "sorted values", self.sets.len() as u64)?;
        for (v, q) in &self.sets {
            sets.push((gather(v, *q, "sorted values")?, *q));
        }
        Ok(KeyColumns {
            xt,
            sets,
            n: self.n,
            d: self.d,
            ld,
            panels: None,
        })
    }

    /// [`try_new`](Self::try_new) for tests, whose inputs are small.
    #[cfg(test)]
    pub(crate) fn new(keys: &Matrix<'_>, sets: &[Matrix<'_>], pack: Pack) -> Self {
        Self::try_new("test", keys, sets, pack).expect("small test keys")
    }

    /// The same without the panels' `bf16` pairs (tests of the `f32`
    /// filter on CPUs with AVX-512 BF16).
    #[cfg(test)]
    pub(crate) fn without_bf16(mut self) -> Self {
        if let Some(p) = self.panels.as_mut() {
            p.drop_bf16();
        }
        self
    }

    /// Number of keys.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Coordinates per key.
    pub(crate) fn d(&self) -> usize {
        self.d
    }

    /// Whether the transposed keys were built (always, but for
    /// [`Pack::PanelsInstead`] with panels).
    pub(crate) fn has_columns(&self) -> bool {
        self.n == 0 || !self.xt.is_empty()
    }

    /// Column counts of the value matrices.
    pub(crate) fn set_cols(&self) -> Vec<usize> {
        self.sets.iter().map(|s| s.1).collect()
    }

    /// The borrowed layout the kernels take, with value matrix `set`
    /// (none: no value columns).
    pub(crate) fn soa(&self, set: Option<usize>) -> KeysSoa<'_> {
        let (yt, q) = match set {
            Some(s) => (&self.sets[s].0[..], self.sets[s].1),
            None => (&[][..], 0),
        };
        KeysSoa {
            xt: &self.xt,
            yt,
            n: self.n,
            ld: self.ld,
            q,
            panels: self.panels.as_ref(),
            rows: self.panels.as_ref().and_then(Panels::rows),
        }
    }
}
