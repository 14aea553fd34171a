//! Validated, contiguous input matrices.

use std::borrow::Cow;

use ndarray::ArrayView2;

use crate::error::{Error, Result};

/// A row-major `f32` matrix that passed the checks every op needs: at least
/// one row and one column, every entry finite.
#[derive(Debug, Clone)]
pub(crate) struct Matrix<'a> {
    data: Cow<'a, [f32]>,
    rows: usize,
    cols: usize,
}

impl<'a> Matrix<'a> {
    /// Checks `view` and borrows it (or copies it into row-major order when
    /// it is not already contiguous).
    pub(crate) fn check(
        op: &'static str,
        what: &'static str,
        view: ArrayView2<'a, f32>,
    ) -> Result<Self> {
        Self::checked(op, what, view, false)
    }

    /// As [`check`](Self::check), with NaN entries allowed: they mark
    /// missing values (infinities are still refused).
    pub(crate) fn with_missing(
        op: &'static str,
        what: &'static str,
        view: ArrayView2<'a, f32>,
    ) -> Result<Self> {
        Self::checked(op, what, view, true)
    }

    fn checked(
        op: &'static str,
        what: &'static str,
        view: ArrayView2<'a, f32>,
        allow_nan: bool,
    ) -> Result<Self> {
        let (rows, cols) = view.dim();
        if rows == 0 || cols == 0 {
            return Err(Error::EmptyInput {
                op,
                what,
                rows,
                cols,
            });
        }
        let data: Cow<'a, [f32]> = match view.to_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(view.iter().copied().collect()),
        };
        if let Some(pos) = data
            .iter()
            .position(|v| !(v.is_finite() || allow_nan && v.is_nan()))
        {
            return Err(Error::NonFinite {
                op,
                what,
                row: pos / cols,
                col: pos % cols,
                value: data[pos],
            });
        }
        Ok(Matrix { data, rows, cols })
    }

    /// The same matrix, owning its data.
    pub(crate) fn into_owned(self) -> Matrix<'static> {
        Matrix {
            data: Cow::Owned(self.data.into_owned()),
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// The largest magnitude of an entry.
    pub(crate) fn max_abs(&self) -> f32 {
        self.data.iter().fold(0.0f32, |r, v| r.max(v.abs()))
    }

    /// Number of rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// All entries, row-major.
    pub(crate) fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// An owned copy as an ndarray.
    pub(crate) fn to_array(&self) -> ndarray::Array2<f32> {
        ndarray::Array2::from_shape_vec((self.rows, self.cols), self.data.to_vec())
            .expect("rows·cols entries") // ok: checked at construction
    }

    /// Rows `r0..r1`, row-major.
    pub(crate) fn row_range(&self, r0: usize, r1: usize) -> &[f32] {
        &self.data[r0 * self.cols..r1 * self.cols]
    }

    /// The transpose, column `k` of the input at `k·ld .. k·ld + rows`,
    /// with `ld` = [`padded_stride`]`(rows)`.
    pub(crate) fn transposed(&self) -> Vec<f32> {
        let ld = padded_stride(self.rows);
        let mut t = vec![0.0f32; ld * self.cols];
        for (i, row) in self.data.chunks_exact(self.cols).enumerate() {
            for (k, &v) in row.iter().enumerate() {
                t[k * ld + i] = v;
            }
        }
        t
    }
}

/// Allocates a zeroed `rows × cols` buffer, or reports that it cannot.
pub(crate) fn alloc_output(
    op: &'static str,
    what: &'static str,
    rows: usize,
    cols: usize,
) -> Result<Vec<f32>> {
    let mut v = reserve::<f32>(op, what, (rows as u64).saturating_mul(cols as u64))?;
    // Reserved, so rows·cols fits.
    v.resize(rows * cols, 0.0);
    Ok(v)
}

/// An empty vector with room for `len` elements, or [`Error::TooLarge`]
/// (reporting `len` elements' bytes) when they cannot be allocated now:
/// sizes that come from user input must not abort the process.
pub(crate) fn reserve<T>(op: &'static str, what: &'static str, len: u64) -> Result<Vec<T>> {
    let too_large = || Error::TooLarge {
        op,
        what,
        bytes: len.saturating_mul(std::mem::size_of::<T>() as u64),
    };
    let len = usize::try_from(len).map_err(|_| too_large())?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_large())?;
    Ok(v)
}

/// Fails with [`Error::TooLarge`] unless `bytes` of working memory can be
/// allocated now (for work buffers allocated further down, by code that
/// cannot fail).
pub(crate) fn ensure_room(op: &'static str, what: &'static str, bytes: u64) -> Result<()> {
    reserve::<u8>(op, what, bytes).map(drop)
}

/// Column stride for `rows` floats: a multiple of 16 floats that is not a
/// multiple of 4 KiB, so the columns of a transposed matrix fall into
/// different L1 sets instead of evicting each other.
pub(crate) fn padded_stride(rows: usize) -> usize {
    let ld = rows.next_multiple_of(16);
    if (ld * 4).is_multiple_of(4096) {
        ld + 16
    } else {
        ld
    }
}
