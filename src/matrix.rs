//! Validated, contiguous input matrices.

use std::borrow::Cow;

use ndarray::{Array, Array2, ArrayView, ArrayView2, Dimension};
use rayon::prelude::*;

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
            return Err(empty(op, what, (rows, cols)));
        }
        let data: Cow<'a, [f32]> = match view.to_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(try_collect(op, what, view.len(), view.iter().copied())?),
        };
        Self::validated(op, what, data, (rows, cols), allow_nan)
    }

    /// As [`check`](Self::check), taking `rows × cols` entries (row-major)
    /// it owns from then on.
    pub(crate) fn check_owned(
        op: &'static str,
        what: &'static str,
        (rows, cols): (usize, usize),
        data: Vec<f32>,
    ) -> Result<Matrix<'static>> {
        if rows == 0 || cols == 0 {
            return Err(empty(op, what, (rows, cols)));
        }
        assert_eq!(data.len(), rows * cols, "rows·cols entries");
        Matrix::validated(op, what, Cow::Owned(data), (rows, cols), false)
    }

    /// `data` as a matrix once every entry passed the checks.
    fn validated(
        op: &'static str,
        what: &'static str,
        data: Cow<'a, [f32]>,
        (rows, cols): (usize, usize),
        allow_nan: bool,
    ) -> Result<Self> {
        if let Some(pos) = first_non_finite(&data, allow_nan) {
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

    /// The same matrix, owning its data (copied when borrowed), or
    /// [`Error::TooLarge`] when the copy cannot be allocated.
    pub(crate) fn into_owned(
        self,
        op: &'static str,
        what: &'static str,
    ) -> Result<Matrix<'static>> {
        let data = match self.data {
            Cow::Owned(v) => v,
            Cow::Borrowed(s) => try_copy(op, what, s)?,
        };
        Ok(Matrix {
            data: Cow::Owned(data),
            rows: self.rows,
            cols: self.cols,
        })
    }

    /// The largest magnitude of an entry (NaN entries aside), sixteen
    /// independent lanes at a time, so it runs at vector width.
    pub(crate) fn max_abs(&self) -> f32 {
        let bigger = |r: f32, x: f32| if x.abs() > r { x.abs() } else { r };
        let mut lanes = [0.0f32; 16];
        let mut chunks = self.data.chunks_exact(16);
        for c in &mut chunks {
            for (r, &x) in lanes.iter_mut().zip(c) {
                *r = bigger(*r, x);
            }
        }
        let tail = chunks.remainder().iter().fold(0.0f32, |r, &x| bigger(r, x));
        lanes.iter().fold(tail, |r, &x| bigger(r, x))
    }

    /// Number of rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// The same matrix, borrowed (no copy, even when this one owns its
    /// entries).
    pub(crate) fn view(&self) -> Matrix<'_> {
        Matrix {
            data: Cow::Borrowed(&self.data),
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// All entries, row-major.
    pub(crate) fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// An owned copy as an ndarray, or [`Error::TooLarge`] when it cannot
    /// be allocated.
    pub(crate) fn to_array(&self, op: &'static str, what: &'static str) -> Result<Array2<f32>> {
        let data = try_copy(op, what, &self.data)?;
        Ok(Array2::from_shape_vec((self.rows, self.cols), data).expect("rows·cols entries")) // ok: checked at construction
    }

    /// Rows `r0..r1`, row-major.
    pub(crate) fn row_range(&self, r0: usize, r1: usize) -> &[f32] {
        &self.data[r0 * self.cols..r1 * self.cols]
    }

    /// The transpose, column `k` of the input at `k·ld .. k·ld + rows`,
    /// with `ld` = [`padded_stride`]`(rows)`, or [`Error::TooLarge`] when
    /// it cannot be allocated.
    pub(crate) fn transposed(&self, op: &'static str, what: &'static str) -> Result<Vec<f32>> {
        let ld = padded_stride(self.rows);
        let len = (ld as u64).saturating_mul(self.cols as u64);
        let mut t = try_zeros::<f32>(op, what, len)?;
        // Tasks of 16 columns on the current thread pool: each reads one
        // cache line of every input row and writes 16 sequential streams
        // (a row-by-row scatter touches `cols` lines per row).
        const COLS: usize = 16;
        let cols = self.cols;
        t.par_chunks_mut(COLS * ld)
            .enumerate()
            .for_each(|(c, out)| {
                let (k0, w) = (c * COLS, out.len() / ld);
                for (i, row) in self.data.chunks_exact(cols).enumerate() {
                    for (kk, &v) in row[k0..k0 + w].iter().enumerate() {
                        out[kk * ld + i] = v;
                    }
                }
            });
        Ok(t)
    }
}

/// The index of the first entry of `data` that is not finite (NaN
/// allowed with `allow_nan`), if any. Scans 1024 entries at a time without
/// a branch (a test of the exponent bits, which the compiler vectorizes),
/// and entry by entry only in a block that holds one.
#[doc(hidden)]
pub fn first_non_finite(data: &[f32], allow_nan: bool) -> Option<usize> {
    const EXP: u32 = 0x7f80_0000;
    let bad = |v: f32| {
        let b = v.to_bits();
        (b & EXP == EXP) && !(allow_nan && b & 0x007f_ffff != 0)
    };
    let block = data
        .chunks(1024)
        .position(|c| c.iter().fold(false, |any, &v| any | bad(v)))?;
    let start = block * 1024;
    data[start..]
        .iter()
        .position(|&v| bad(v))
        .map(|i| start + i)
}

// Fallible allocation: every buffer whose size comes from the input (working
// copies, packed keys, per-call buffers, outputs) is allocated here, so that
// a size the machine cannot hold is an [`Error::TooLarge`] naming the op and
// the buffer, never an abort.

/// Allocates a zeroed `rows × cols` buffer, or reports that it cannot.
pub(crate) fn alloc_output(
    op: &'static str,
    what: &'static str,
    rows: usize,
    cols: usize,
) -> Result<Vec<f32>> {
    try_zeros(op, what, (rows as u64).saturating_mul(cols as u64))
}

/// `len` zeros, from the allocator's zeroed memory: a large buffer comes
/// as fresh pages that are zero without being written, faulted in by
/// whichever thread first writes them (with [`try_vec`] the calling
/// thread would write every byte first, alone). Or [`Error::TooLarge`].
pub(crate) fn try_zeros<T: bytemuck::Zeroable + Clone>(
    op: &'static str,
    what: &'static str,
    len: u64,
) -> Result<Vec<T>> {
    let too_large = || Error::TooLarge {
        op,
        what,
        bytes: len.saturating_mul(std::mem::size_of::<T>() as u64),
    };
    let n = usize::try_from(len).map_err(|_| too_large())?;
    zeroed_vec(n).ok_or_else(too_large)
}

/// `len` zeros from the allocator's zeroed memory (see [`try_zeros`]),
/// large ones on huge pages where the system gives them
/// ([`advise_huge_pages`]); `None` when they cannot be allocated. For the
/// command-line tool's readers, which report their own errors.
#[doc(hidden)]
pub fn zeroed_vec<T: bytemuck::Zeroable + Clone>(len: usize) -> Option<Vec<T>> {
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Some(vec![T::zeroed(); len]);
    }
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    // SAFETY: the layout's size is not zero (len > 0, T not zero-sized).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return None;
    }
    advise_huge_pages(p.cast(), layout.size());
    // SAFETY: `p` comes from the global allocator with the layout of `len`
    // values of `T`, and all-zero bytes are a valid `T` (`Zeroable`).
    Some(unsafe { Vec::from_raw_parts(p, len, len) })
}

/// Bytes from which a fresh buffer asks for transparent huge pages.
const HUGE_FROM: usize = 8 << 20;

/// Asks the kernel to back the whole 2 MiB pages of a fresh, untouched
/// buffer of `bytes` at `p` with transparent huge pages, when it holds
/// [`HUGE_FROM`] bytes or more (Linux; `LOCUS_HUGE_PAGES=0` turns it off).
/// A one-shot call writes its working copies once, page by page: with
/// 4 KiB pages the page faults took 17 % of a kNN's CPU time over 32 MB of
/// keys (docs/tiling.md, "Huge pages"). Advice only: where the
/// kernel has no huge pages to give, or the system leaves them off, the
/// buffer keeps small pages.
pub(crate) fn advise_huge_pages(p: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if bytes < HUGE_FROM || !huge_pages_wanted() {
            return;
        }
        let (start, end) = (
            (p as usize).next_multiple_of(HUGE),
            (p as usize + bytes) / HUGE * HUGE,
        );
        if end > start {
            // SAFETY: advice on whole pages that lie inside the caller's
            // allocation; it changes no contents. An error (no huge
            // pages in this kernel) leaves the small pages.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, bytes, HUGE_FROM);
}

/// Whether `LOCUS_HUGE_PAGES` leaves huge pages on (anything but `0`,
/// `off`, `false`, `no`).
#[cfg(target_os = "linux")]
fn huge_pages_wanted() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("LOCUS_HUGE_PAGES").map_or(true, |v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "false" | "no"
            )
        })
    })
}

/// `len` copies of `value` (a fallible `vec![value; len]`).
pub(crate) fn try_vec<T: Clone>(
    op: &'static str,
    what: &'static str,
    len: u64,
    value: T,
) -> Result<Vec<T>> {
    let mut v = reserve::<T>(op, what, len)?;
    // Reserved, so `len` fits in a usize and in the capacity.
    v.resize(len as usize, value);
    Ok(v)
}

/// A copy of `src` (a fallible `to_vec`).
pub(crate) fn try_copy<T: Clone + Send + Sync>(
    op: &'static str,
    what: &'static str,
    src: &[T],
) -> Result<Vec<T>> {
    let mut v = reserve::<T>(op, what, src.len() as u64)?;
    // Large copies by the current thread pool, each task filling its own
    // fresh pages.
    const PART: usize = 1 << 18;
    if src.len() <= PART {
        v.extend_from_slice(src);
    } else {
        v.par_extend(src.par_iter().cloned());
    }
    Ok(v)
}

/// The first `len` items of `items`, collected into a vector reserved up
/// front (a fallible `collect` of an iterator whose length is known).
pub(crate) fn try_collect<T>(
    op: &'static str,
    what: &'static str,
    len: usize,
    items: impl IntoIterator<Item = T>,
) -> Result<Vec<T>> {
    let mut v = reserve::<T>(op, what, len as u64)?;
    // `take`: never more than was reserved, so `extend` cannot reallocate.
    v.extend(items.into_iter().take(len));
    Ok(v)
}

/// A `rows × cols` array of `value` (a fallible `Array2::from_elem`).
pub(crate) fn try_array<T: Clone>(
    op: &'static str,
    what: &'static str,
    (rows, cols): (usize, usize),
    value: T,
) -> Result<Array2<T>> {
    let v = try_vec(op, what, (rows as u64).saturating_mul(cols as u64), value)?;
    Ok(Array2::from_shape_vec((rows, cols), v).expect("rows·cols entries")) // ok: allocated so
}

/// The error of an input with no rows or no columns.
fn empty(op: &'static str, what: &'static str, (rows, cols): (usize, usize)) -> Error {
    Error::EmptyInput {
        op,
        what,
        rows,
        cols,
    }
}

/// An owned, standard-layout copy of `view` (a fallible `to_owned`).
pub(crate) fn try_owned<T: Clone, D: Dimension>(
    op: &'static str,
    what: &'static str,
    view: ArrayView<'_, T, D>,
) -> Result<Array<T, D>> {
    let v = try_collect(op, what, view.len(), view.iter().cloned())?;
    Ok(Array::from_shape_vec(view.raw_dim(), v).expect("every entry")) // ok: view.len() of them
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
    let mut v = Vec::<T>::new();
    v.try_reserve_exact(len).map_err(|_| too_large())?;
    advise_huge_pages(
        v.as_mut_ptr().cast(),
        v.capacity().saturating_mul(std::mem::size_of::<T>()),
    );
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

#[cfg(test)]
mod tests {
    use super::first_non_finite;

    /// `max_abs` at every position of the largest entry, NaN beside it.
    #[test]
    fn max_abs_is_the_largest_magnitude_nan_aside() {
        for len in [1usize, 5, 15, 16, 17, 31, 32, 33, 100] {
            for at in 0..len {
                let mut v: Vec<f32> = (0..len).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
                v[at] = -9.5;
                if len > 1 {
                    v[(at + 1) % len] = f32::NAN;
                }
                let view = ndarray::ArrayView2::from_shape((len, 1), &v).unwrap();
                let m = super::Matrix::with_missing("t", "x", view);
                assert_eq!(m.unwrap().max_abs(), 9.5, "len={len} at={at}");
            }
        }
    }

    /// The block scan finds the first bad entry wherever it lies (first,
    /// last, across block edges), NaN only when it is not allowed.
    #[test]
    fn the_first_non_finite_entry_is_found() {
        for len in [1usize, 5, 1023, 1024, 1025, 5000] {
            let clean = vec![1.5f32; len];
            assert_eq!(first_non_finite(&clean, false), None);
            for at in [0, len / 2, len.saturating_sub(1)] {
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    if at + 1 < len {
                        v[len - 1] = f32::INFINITY;
                    }
                    let want = if bad.is_nan() && at + 1 < len {
                        len - 1
                    } else {
                        at
                    };
                    assert_eq!(first_non_finite(&v, false), Some(at), "len={len} at={at}");
                    let with_nan = if bad.is_nan() {
                        (at + 1 < len).then_some(want)
                    } else {
                        Some(at)
                    };
                    assert_eq!(
                        first_non_finite(&v, true),
                        with_nan,
                        "len={len} at={at} nan ok"
                    );
                }
            }
        }
        // Largest finite values and subnormals are finite.
        assert_eq!(
            first_non_finite(&[f32::MAX, -f32::MAX, 1e-45, -0.0], false),
            None
        );
    }
}
