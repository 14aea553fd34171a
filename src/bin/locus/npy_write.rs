//! NumPy `.npy` files written (format version 1, or 2 for a header too
//! long for it), C order, little-endian: the command-line tool's outputs
//! and the service's answers.

use std::io::{self, Write};

use ndarray::{ArrayView, Dimension};

/// Bytes gathered before each write of [`write`].
const CHUNK: usize = 64 * 1024;

/// An element `.npy` files are written with.
pub trait Element: bytemuck::Pod {
    /// The type string, e.g. `<f4`.
    const DESCR: &'static str;
    /// Appends the little-endian bytes.
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($t:ty, $descr:literal) => {
        impl Element for $t {
            const DESCR: &'static str = $descr;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

element!(f32, "<f4");
element!(f64, "<f8");
element!(i64, "<i8");

/// Writes a C-order array of `shape` whose elements `data` yields in
/// order (format version 1, or 2 for a header too long for it).
///
/// # Errors
/// Writing fails, or `data` yields a number of elements other than the
/// shape's.
pub fn write<T: Element>(
    w: &mut impl Write,
    shape: &[usize],
    data: impl IntoIterator<Item = T>,
) -> io::Result<()> {
    write_header::<T>(w, shape)?;
    let expected: usize = shape.iter().product();
    let mut count = 0usize;
    let mut buf = Vec::with_capacity(CHUNK);
    for v in data {
        v.put(&mut buf);
        count += 1;
        if buf.len() >= CHUNK - 8 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    w.write_all(&buf)?;
    if count != expected {
        return Err(wrong_count(count, shape));
    }
    Ok(())
}

/// The error of a write whose data holds `count` elements, not `shape`'s.
fn wrong_count(count: usize, shape: &[usize]) -> io::Error {
    io::Error::other(format!("{count} elements written for shape {shape:?}"))
}

/// [`write`] of a C-order array whose elements are `data`: the bytes
/// straight out on a little-endian host.
///
/// # Errors
/// Writing fails, or `data` holds a number of elements other than the
/// shape's.
pub fn write_slice<T: Element>(w: &mut impl Write, shape: &[usize], data: &[T]) -> io::Result<()> {
    if cfg!(target_endian = "big") {
        return write(w, shape, data.iter().copied());
    }
    let expected: usize = shape.iter().product();
    if data.len() != expected {
        return Err(wrong_count(data.len(), shape));
    }
    write_header::<T>(w, shape)?;
    w.write_all(bytemuck::cast_slice(data))
}

/// The magic string, version, header length and dictionary of a C-order
/// array of `T` of `shape`.
fn write_header<T: Element>(w: &mut impl Write, shape: &[usize]) -> io::Result<()> {
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        T::DESCR
    );
    // Magic, version, length, dict, padding spaces and '\n' to a multiple of 64.
    let (version, pre) = if dict.len() + 11 <= usize::from(u16::MAX) {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let total = (pre + dict.len() + 1).div_ceil(64) * 64;
    let hlen = total - pre;
    w.write_all(b"\x93NUMPY")?;
    w.write_all(&[version, 0])?;
    if version == 1 {
        w.write_all(&(hlen as u16).to_le_bytes())?;
    } else {
        w.write_all(&(hlen as u32).to_le_bytes())?;
    }
    w.write_all(dict.as_bytes())?;
    w.write_all(&vec![b' '; hlen - dict.len() - 1])?;
    w.write_all(b"\n")?;
    Ok(())
}

/// Writes `a` (any layout): a standard-layout array's data in one write
/// ([`write_slice`]), another's element by element in C order.
///
/// # Errors
/// Writing fails.
pub fn write_array<T: Element, D: Dimension>(
    w: &mut impl Write,
    a: ArrayView<'_, T, D>,
) -> io::Result<()> {
    match a.as_slice() {
        Some(flat) => write_slice(w, a.shape(), flat),
        None => write(w, a.shape(), a.iter().copied()),
    }
}
