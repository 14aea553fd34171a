//! NumPy `.npy` files (format versions 1, 2 and 3), read with std and
//! ndarray only, so the command-line tool and the service share one
//! reader (the writer is `npy_write.rs`).
//!
//! Reading trusts nothing in the file: the header is parsed as the Python
//! literal it is (either quote style, any spacing, every key exactly once),
//! the data the shape claims must be exactly what the file holds, and that
//! is checked before anything is allocated for it; the allocation itself
//! is fallible. Data are read in small chunks straight into the result
//! (`f32` files without a widened copy), so reading costs the array and a
//! 64 KiB buffer (Fortran-order files one transposed copy more). The
//! header and the errors are `header.rs`; this file reads the data.

// Shared by the tool, the example service and the tests; each uses a part.
#![allow(dead_code)]

use std::io::{self, Read};

use ndarray::{ArrayD, IxDyn, ShapeBuilder};

mod header;

// The header's items, as `npy::…` (the tests that include this file use
// some of them).
#[allow(unused_imports)]
pub use header::{Header, Kind, NpyError, part_len, read_header};

/// Bytes read at a time.
const CHUNK: usize = 64 * 1024;

/// Reserves room for `len` elements, failing instead of aborting.
fn alloc<T>(len: usize, what: &str) -> Result<Vec<T>, NpyError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        NpyError::Alloc(format!(
            "{len} elements ({} bytes) of {what} do not fit in memory",
            len.saturating_mul(std::mem::size_of::<T>())
        ))
    })?;
    Ok(v)
}

/// `len` zero floats from the allocator's zeroed memory (a large buffer is
/// fresh pages, zero without a pass over them; the read then fills them),
/// or [`NpyError::Alloc`].
fn zeroed<T: bytemuck::Zeroable + Clone>(len: usize, what: &str) -> Result<Vec<T>, NpyError> {
    locus::zeroed_vec(len).ok_or_else(|| {
        NpyError::Alloc(format!(
            "{len} elements ({} bytes) of {what} do not fit in memory",
            len.saturating_mul(std::mem::size_of::<T>())
        ))
    })
}

/// Reads the data after `h` and converts each element with `conv`
/// (which gets the raw little-endian bytes; `Err` names what is wrong);
/// returns a C-order array of the file's shape.
fn read_data<T: Clone>(
    r: &mut impl Read,
    h: &Header,
    what: &str,
    conv: impl Fn(&[u8]) -> Result<T, String>,
) -> Result<ArrayD<T>, NpyError> {
    let size = h.dtype.size;
    let mut out: Vec<T> = alloc(h.len, what)?;
    let mut buf = vec![0u8; CHUNK - CHUNK % size];
    let mut left = h.len;
    let mut le = [0u8; 8];
    while left > 0 {
        let n = (left * size).min(buf.len());
        r.read_exact(&mut buf[..n])?;
        for raw in buf[..n].chunks_exact(size) {
            le[..size].copy_from_slice(raw);
            if h.dtype.big_endian {
                le[..size].reverse();
            }
            match conv(&le[..size]) {
                Ok(v) => out.push(v),
                Err(reason) => {
                    return Err(NpyError::Value {
                        at: file_index(h, out.len()),
                        reason,
                    });
                }
            }
        }
        left -= n / size;
    }
    shaped(h, out)
}

/// `out` (the elements in file order) as a C-order array of the file's shape.
fn shaped<T: Clone>(h: &Header, out: Vec<T>) -> Result<ArrayD<T>, NpyError> {
    let shape = IxDyn(&h.shape);
    if h.fortran_order && h.shape.len() > 1 {
        let a =
            ArrayD::from_shape_vec(shape.f(), out).map_err(|e| NpyError::Format(e.to_string()))?;
        Ok(a.as_standard_layout().into_owned())
    } else {
        ArrayD::from_shape_vec(shape, out).map_err(|e| NpyError::Format(e.to_string()))
    }
}

/// The index (C order over the shape) of the `k`-th element stored.
fn file_index(h: &Header, mut k: usize) -> Vec<usize> {
    let mut at = vec![0; h.shape.len()];
    let axes: Vec<usize> = if h.fortran_order {
        (0..h.shape.len()).collect()
    } else {
        (0..h.shape.len()).rev().collect()
    };
    for ax in axes {
        let d = h.shape[ax].max(1);
        at[ax] = k % d;
        k /= d;
    }
    at
}

fn float_of(raw: &[u8]) -> f64 {
    match raw.len() {
        2 => f64::from(half_to_f32(u16::from_le_bytes([raw[0], raw[1]]))),
        4 => f64::from(f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
        _ => f64::from_le_bytes(le8(raw)),
    }
}

fn le8(raw: &[u8]) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..raw.len()].copy_from_slice(raw);
    b
}

/// IEEE half precision to `f32` (exact).
fn half_to_f32(h: u16) -> f32 {
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f32::from(h & 0x3ff);
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 if frac == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        _ => sign * (1.0 + frac / 1024.0) * 2f32.powi(exp - 15),
    }
}

/// Reads the array after `h` as `f32`: float files only (`f2`, `f4`, `f8`;
/// `f4` read without a widened copy). An `f8` value too large for `f32`
/// is a [`NpyError::Value`]; NaN and infinities are passed through for the
/// caller to locate.
///
/// # Errors
/// [`NpyError::Dtype`] for integer or bool data; as [`read_header`]'s
/// size check, reading, and allocation.
pub fn read_f32(r: &mut impl Read, h: &Header) -> Result<ArrayD<f32>, NpyError> {
    read_f32_with(r, h, read_unscanned).map(|(a, _)| a)
}

/// Fills `out` with the next bytes of `r`, scanning nothing (`false`: the
/// caller checks the entries).
fn read_unscanned(r: &mut impl Read, out: &mut [f32]) -> Result<bool, NpyError> {
    r.read_exact(bytemuck::cast_slice_mut(out))?;
    Ok(false)
}

/// Bytes of data from which [`read_f32_file`] reads with several threads.
const PARALLEL_READ_FROM: usize = 8 << 20;

/// [`read_f32`] from `r`, a file whose header has been read: a large
/// little-endian `f32` array (the common case) is read by up to four
/// threads at their own offsets (one thread copies from the page cache
/// at a few GB/s: 10–20 ms for 50 MB), each scanning what it read for
/// entries that are not finite while they are still in cache. Also
/// returns whether that scan found every entry finite (`false` where
/// there was no such scan: the caller checks).
pub fn read_f32_file(
    r: &mut io::BufReader<std::fs::File>,
    h: &Header,
) -> Result<(ArrayD<f32>, bool), NpyError> {
    use std::io::Seek;
    let offset = r.stream_position()?;
    read_f32_with(r, h, |r, out| match out.len() * 4 < PARALLEL_READ_FROM {
        true => read_unscanned(r, out),
        false => read_at_in_parallel(r.get_ref(), offset, out),
    })
}

/// Entries a reading thread reads and scans at a time (256 KiB: the scan
/// finds them in the core's L2 cache).
const SCAN_PIECE: usize = 1 << 16;

/// Fills `out` from `file` at `offset` (native-endian `f32` bytes), by up
/// to four threads; whether every entry is finite (each thread scans the
/// pieces it reads, [`SCAN_PIECE`] entries at a time).
fn read_at_in_parallel(
    file: &std::fs::File,
    offset: u64,
    out: &mut [f32],
) -> Result<bool, NpyError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        let read_part = |part: &mut [f32], at: u64| -> io::Result<bool> {
            let mut finite = true;
            for (i, piece) in part.chunks_mut(SCAN_PIECE).enumerate() {
                let from = at + (i * SCAN_PIECE * 4) as u64;
                file.read_exact_at(bytemuck::cast_slice_mut(piece), from)?;
                finite &= locus::first_non_finite(piece, false).is_none();
            }
            Ok(finite)
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        let part = out.len().div_ceil(threads).max(1 << 18);
        // Parts in slots: a thread reads the part it takes; this thread
        // takes every part still there (the first, any whose thread could
        // not be started under a memory cap, any not yet begun).
        let slots: Vec<std::sync::Mutex<Option<_>>> = out
            .chunks_mut(part)
            .enumerate()
            .map(|(i, c)| std::sync::Mutex::new(Some((c, offset + (i * part * 4) as u64))))
            .collect();
        let take = |i: usize| {
            let mut slot = slots[i].lock().unwrap_or_else(|e| e.into_inner());
            slot.take()
        };
        let finite = std::thread::scope(|s| {
            let jobs: Vec<_> = (1..slots.len())
                .filter_map(|i| {
                    let job = move || match take(i) {
                        Some((c, at)) => read_part(c, at),
                        None => Ok(true),
                    };
                    std::thread::Builder::new().spawn_scoped(s, job).ok()
                })
                .collect();
            let mut finite = true;
            for i in 0..slots.len() {
                if let Some((c, at)) = take(i) {
                    finite &= read_part(c, at)?;
                }
            }
            for j in jobs {
                finite &= j
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a reading thread failed")))?;
            }
            Ok::<bool, io::Error>(finite)
        })?;
        Ok(finite)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(bytemuck::cast_slice_mut(out))?;
        Ok(false)
    }
}

/// [`read_f32`], the little-endian `f32` data read by `fill` (which says
/// whether it found every entry finite); with that answer, `false` where
/// another dtype was converted.
fn read_f32_with<R: Read>(
    r: &mut R,
    h: &Header,
    fill: impl FnOnce(&mut R, &mut [f32]) -> Result<bool, NpyError>,
) -> Result<(ArrayD<f32>, bool), NpyError> {
    check_float(h)?;
    if h.dtype.size == 4 && !h.dtype.big_endian && cfg!(target_endian = "little") {
        // Little-endian f32, the common case: the bytes straight into
        // place, no per-element conversion (there is nothing to check).
        let mut out = zeroed::<f32>(h.len, "f32")?;
        let finite = fill(r, &mut out)?;
        return Ok((shaped(h, out)?, finite));
    }
    let a = read_data(r, h, "f32", |raw| {
        let v = float_of(raw);
        let x = v as f32;
        if v.is_finite() && !x.is_finite() {
            return Err(format!("value {v:e} is too large for f32"));
        }
        Ok(x)
    })?;
    Ok((a, false))
}

/// Reads the array after `h` as `f64`, every value as stored (`f2`, `f4`
/// and `f8` are exact in `f64`; NaN and infinities are passed through for
/// the caller to locate). For points whose file holds more precision than
/// `f32`, which the caller centres before rounding.
///
/// # Errors
/// [`NpyError::Dtype`] for integer or bool data; as [`read_header`]'s
/// size check, reading, and allocation.
pub fn read_f64(r: &mut impl Read, h: &Header) -> Result<ArrayD<f64>, NpyError> {
    check_float(h)?;
    if h.dtype.size == 8 && !h.dtype.big_endian && cfg!(target_endian = "little") {
        // Little-endian f64: the bytes straight into place.
        let mut out = zeroed::<f64>(h.len, "f64")?;
        r.read_exact(bytemuck::cast_slice_mut(&mut out))?;
        return shaped(h, out);
    }
    read_data(r, h, "f64", |raw| Ok(float_of(raw)))
}

/// Refuses a header whose elements are not floats.
fn check_float(h: &Header) -> Result<(), NpyError> {
    if h.dtype.kind == Kind::Float {
        return Ok(());
    }
    Err(NpyError::Dtype(format!(
        "unsupported dtype {} (expected float32 '<f4' or float64 '<f8')",
        h.descr
    )))
}

/// Reads the array after `h` as integers: any integer dtype, bool, or
/// floats that are whole numbers below 2⁵³ in magnitude.
///
/// # Errors
/// [`NpyError::Value`] naming the first element that is not an integer
/// or does not fit an `i64`; as [`read_f32`] otherwise.
pub fn read_i64(r: &mut impl Read, h: &Header) -> Result<ArrayD<i64>, NpyError> {
    let kind = h.dtype.kind;
    read_data(r, h, "i64", |raw| match kind {
        Kind::Int => {
            let b = le8(raw);
            let bits = i64::from_le_bytes(b);
            // Sign-extend from the stored width.
            let shift = 64 - 8 * raw.len() as u32;
            Ok((bits << shift) >> shift)
        }
        Kind::UInt | Kind::Bool => {
            let v = u64::from_le_bytes(le8(raw));
            i64::try_from(v).map_err(|_| format!("value {v} does not fit a 64-bit integer"))
        }
        Kind::Float => integral(float_of(raw)),
    })
}

/// A float that is a whole number of magnitude below 2⁵³, as `i64`.
pub fn integral(v: f64) -> Result<i64, String> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        Ok(v as i64)
    } else {
        Err(format!("value {v} is not an integer"))
    }
}

/// `a`, a 1-D array as one column (the readers' and the service's rule
/// for points).
pub fn column_if_1d<T>(a: ArrayD<T>) -> ArrayD<T> {
    match a.ndim() {
        1 => a.insert_axis(ndarray::Axis(1)),
        _ => a,
    }
}

/// Reads a whole `.npy` file held in memory as `f32` (for tests and small
/// files).
///
/// # Errors
/// As [`read_header`] and [`read_f32`].
pub fn f32_from_bytes(bytes: &[u8]) -> Result<ArrayD<f32>, NpyError> {
    let mut r = bytes;
    let h = read_header(&mut r, bytes.len() as u64)?;
    read_f32(&mut r, &h)
}

/// A float array in the precision it was stored in.
pub enum Floats {
    /// `f2` or `f4`: nothing to gain from `f64`.
    F32(ArrayD<f32>),
    /// `f8` (either byte order).
    F64(ArrayD<f64>),
}

/// Reads a whole float `.npy` held in memory (a request's body), a
/// float64 array as `f64`, others as [`f32_from_bytes`].
///
/// # Errors
/// As [`read_header`], [`read_f32`] and [`read_f64`].
pub fn floats_from_bytes(bytes: &[u8]) -> Result<Floats, NpyError> {
    let mut r = bytes;
    let h = read_header(&mut r, bytes.len() as u64)?;
    if h.dtype.kind == Kind::Float && h.dtype.size == 8 {
        read_f64(&mut r, &h).map(Floats::F64)
    } else {
        read_f32(&mut r, &h).map(Floats::F32)
    }
}

/// Reads a whole `.npy` file held in memory as `i64` (for tests and small
/// files).
///
/// # Errors
/// As [`read_header`] and [`read_i64`].
pub fn i64_from_bytes(bytes: &[u8]) -> Result<ArrayD<i64>, NpyError> {
    let mut r = bytes;
    let h = read_header(&mut r, bytes.len() as u64)?;
    read_i64(&mut r, &h)
}
