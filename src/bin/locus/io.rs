//! Files in and out: `.npy` (f32 or f64, C or Fortran order, 1-D as a
//! column) and `.csv` (comma separated, optional header row, `#` comments).
//!
//! Every input is checked while it is read (shape, every entry a finite
//! `f32`) and every problem is reported with the option and file it came
//! from. Outputs are chosen by extension (`.npy` as f32, or i64 for labels;
//! `.csv` with the shortest text that reads back to the same value) and are
//! written to a temporary file in the same folder, then renamed, so a failed
//! run never leaves a partial file.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use ndarray::{Array2, Array3, ArrayD, ArrayView, Axis, Dimension, Ix1, Ix2, Ix3};
use ndarray_npy::{ReadNpyError, ReadNpyExt, WritableElement, WriteNpyExt};

use crate::error::{CliError, CliResult};

/// A file format, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// NumPy `.npy`.
    Npy,
    /// Comma-separated text.
    Csv,
}

impl Format {
    /// The format of `path` by its extension (case-insensitive).
    pub fn of(flag: &str, path: &Path) -> CliResult<Format> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("npy") => Ok(Format::Npy),
            Some("csv") => Ok(Format::Csv),
            _ => Err(CliError::input(format!(
                "{flag} {}: unknown file type (expected a .npy or .csv extension)",
                path.display()
            ))),
        }
    }
}

/// A matrix read from a file, with the option and path it came from.
#[derive(Debug, Clone)]
pub struct Input {
    /// The option that named the file, e.g. `--keys`.
    pub flag: &'static str,
    /// The file.
    pub path: PathBuf,
    /// Its rows, row-major, every entry finite.
    pub data: Array2<f32>,
}

impl Input {
    /// Reads the matrix named by `flag`.
    pub fn load(flag: &'static str, path: &Path) -> CliResult<Input> {
        let data = read_matrix(flag, path)?;
        Ok(Input {
            flag,
            path: path.to_path_buf(),
            data,
        })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.data.nrows()
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.data.ncols()
    }
}

impl fmt::Display for Input {
    /// `--keys x.csv (500×2)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({}×{})",
            self.flag,
            self.path.display(),
            self.rows(),
            self.cols()
        )
    }
}

/// Fails unless `a` and `b` have the same number of columns (points of the
/// same dimension).
pub fn same_cols(a: &Input, b: &Input) -> CliResult<()> {
    if a.cols() == b.cols() {
        return Ok(());
    }
    Err(CliError::input(format!(
        "shape mismatch: {a} and {b} must have the same number of columns"
    )))
}

/// Fails unless `a` and `b` have the same number of rows (one row of `a`
/// per row of `b`).
pub fn same_rows(a: &Input, b: &Input) -> CliResult<()> {
    if a.rows() == b.rows() {
        return Ok(());
    }
    Err(CliError::input(format!(
        "shape mismatch: {a} needs one row per row of {b}"
    )))
}

/// Fails unless `a` has exactly one column (labels, weights).
pub fn one_column(a: &Input) -> CliResult<()> {
    if a.cols() == 1 {
        return Ok(());
    }
    Err(CliError::input(format!(
        "shape mismatch: {a} must have one column (or be 1-D)"
    )))
}

/// Reads an `N × d` matrix of finite `f32` from a `.npy` or `.csv` file.
pub fn read_matrix(flag: &str, path: &Path) -> CliResult<Array2<f32>> {
    let a = read_array(flag, path, 2)?;
    a.into_dimensionality::<Ix2>()
        .map_err(|e| CliError::input(format!("{flag} {}: {e}", path.display())))
}

/// Reads a stack of matrices `(B, N, d)` of finite `f32`: a 3-D `.npy`, or
/// a matrix (2-D `.npy`, 1-D `.npy` as a column, `.csv`) as one matrix
/// (`B = 1`). Returns the stack and the number of axes the file had.
pub fn read_stack(flag: &str, path: &Path) -> CliResult<(Array3<f32>, usize)> {
    let a = read_array(flag, path, 3)?;
    let ndim = a.ndim();
    let a = if ndim == 2 { a.insert_axis(Axis(0)) } else { a };
    let a = a
        .into_dimensionality::<Ix3>()
        .map_err(|e| CliError::input(format!("{flag} {}: {e}", path.display())))?;
    Ok((a, ndim.max(2)))
}

/// Reads an array of at most `max_ndim` axes (1-D taken as a column, so at
/// least 2) of finite `f32`, none of them empty.
fn read_array(flag: &str, path: &Path, max_ndim: usize) -> CliResult<ArrayD<f32>> {
    let format = Format::of(flag, path)?;
    let at = |msg: String| CliError::input(format!("{flag} {}: {msg}", path.display()));
    let bytes = fs::read(path).map_err(|e| {
        at(match e.kind() {
            io::ErrorKind::NotFound => "no such file".to_string(),
            _ => format!("cannot read: {e}"),
        })
    })?;
    let (m, lines) = match format {
        Format::Npy => (parse_npy(&bytes, max_ndim).map_err(at)?, None),
        Format::Csv => {
            let text =
                std::str::from_utf8(&bytes).map_err(|e| at(format!("not UTF-8 text: {e}")))?;
            let (m, lines) = parse_csv(text).map_err(at)?;
            (m.into_dyn(), Some(lines))
        }
    };
    if m.shape().contains(&0) {
        let shape = m.shape().iter().map(usize::to_string).collect::<Vec<_>>();
        return Err(at(format!(
            "empty ({}); it needs at least one row and one column",
            shape.join("×")
        )));
    }
    to_f32(&m, lines.as_deref()).map_err(at)
}

/// Converts to `f32`, failing on the first entry that is not finite or
/// does not fit; `lines[i]` is the text line of row `i` (CSV).
fn to_f32(m: &ArrayD<f64>, lines: Option<&[usize]>) -> Result<ArrayD<f32>, String> {
    let out = m.mapv(|v| v as f32);
    if let Some((at, &v)) = out.indexed_iter().find(|(_, v)| !v.is_finite()) {
        let orig = m[&at];
        let what = if orig.is_finite() {
            format!("value {orig:e} is too large for f32")
        } else if orig.is_nan() {
            "NaN".to_string()
        } else {
            format!("{}infinity", if v < 0.0 { "-" } else { "" })
        };
        let at = at.slice();
        let (row, col) = (at[at.len() - 2], at[at.len() - 1]);
        let batch = if at.len() == 3 {
            format!("batch {}, ", at[0])
        } else {
            String::new()
        };
        let line = lines.map_or(String::new(), |l| format!("; line {}", l[row]));
        return Err(format!(
            "{what} at {batch}row {row}, column {col} (0-based{line})"
        ));
    }
    Ok(out)
}

fn parse_npy(bytes: &[u8], max_ndim: usize) -> Result<ArrayD<f64>, String> {
    check_npy_size(bytes)?;
    let any: ArrayD<f64> = match ArrayD::<f32>::read_npy(bytes) {
        Ok(a) => a.mapv(f64::from),
        Err(ReadNpyError::WrongDescriptor(_)) => match ArrayD::<f64>::read_npy(bytes) {
            Ok(a) => a,
            Err(ReadNpyError::WrongDescriptor(d)) => {
                return Err(format!(
                    "unsupported dtype {d} (expected float32 '<f4' or float64 '<f8')"
                ));
            }
            Err(e) => return Err(format!("not a valid .npy file: {e}")),
        },
        Err(e) => return Err(format!("not a valid .npy file: {e}")),
    };
    let shape = any.shape().to_vec();
    match shape.len() {
        1 => any
            .into_shape_with_order((shape[0], 1))
            .map(|a| a.into_dyn())
            .map_err(|e| e.to_string()),
        n if (2..=max_ndim).contains(&n) => Ok(any.as_standard_layout().into_owned()),
        _ => {
            let allowed = if max_ndim == 3 {
                "1-D, 2-D or 3-D"
            } else {
                "1-D or 2-D"
            };
            Err(format!("expected a {allowed} array, got shape {shape:?}"))
        }
    }
}

/// Fails when the shape in a `.npy` header needs more data than the file
/// holds, before anything is allocated for it (a header may claim any
/// shape). Headers this cannot read are left to the `.npy` reader.
fn check_npy_size(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 10 || !bytes.starts_with(b"\x93NUMPY") {
        return Ok(());
    }
    let (len, start) = if bytes[6] == 1 {
        (
            usize::from(u16::from_le_bytes([bytes[8], bytes[9]])),
            10usize,
        )
    } else if bytes.len() >= 12 {
        let l = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        (usize::try_from(l).unwrap_or(usize::MAX), 12)
    } else {
        return Ok(());
    };
    let Some(header) = bytes.get(start..start.saturating_add(len)) else {
        return Ok(());
    };
    let header = String::from_utf8_lossy(header);
    let field = |name: &str| header.find(name).map(|i| &header[i + name.len()..]);
    let Some(shape) = field("'shape':") else {
        return Ok(());
    };
    let Some(shape) = shape
        .find('(')
        .and_then(|a| shape[a + 1..].find(')').map(|b| &shape[a + 1..a + 1 + b]))
    else {
        return Ok(());
    };
    let item = field("'descr':")
        .and_then(|d| {
            let d = d.trim_start().trim_start_matches(['\'', '"']);
            let digits: String = d
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().ok()
        })
        .unwrap_or(1)
        .max(1);
    let mut elements: u64 = 1;
    for dim in shape.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let Ok(dim) = dim.parse::<u64>() else {
            return Ok(());
        };
        elements = elements.saturating_mul(dim);
    }
    let need = elements.saturating_mul(item);
    let have = (bytes.len() - start - len) as u64;
    if need > have {
        return Err(format!(
            "truncated or corrupt: the header's shape ({shape}) needs {need} bytes of data but the file holds {have}"
        ));
    }
    Ok(())
}

/// Parses comma-separated numbers. A first row that is not all numbers is
/// a header; `#` starts a comment; blank lines are skipped. Returns the
/// matrix and the (1-based) line of each row.
fn parse_csv(text: &str) -> Result<(Array2<f64>, Vec<usize>), String> {
    let mut data = Vec::new();
    let mut lines = Vec::new();
    // Columns, and the line that set them.
    let mut width: Option<(usize, usize)> = None;
    for (idx, raw) in text.lines().enumerate() {
        let line_no = idx + 1;
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if let Some((w, first)) = width {
            if fields.len() != w {
                return Err(format!(
                    "ragged row: line {line_no} has {} fields but line {first} has {w}",
                    fields.len()
                ));
            }
        }
        let parsed: Vec<Option<f64>> = fields.iter().map(|f| f.parse().ok()).collect();
        if width.is_none() {
            width = Some((fields.len(), line_no));
            if parsed.iter().any(Option::is_none) {
                continue; // the header row
            }
        }
        for (j, (v, f)) in parsed.iter().zip(&fields).enumerate() {
            match v {
                Some(v) => data.push(*v),
                None => {
                    return Err(format!(
                        "line {line_no}, field {}: {f:?} is not a number",
                        j + 1
                    ));
                }
            }
        }
        lines.push(line_no);
    }
    let cols = width.map_or(0, |(w, _)| w);
    let m = Array2::from_shape_vec((lines.len(), cols), data).map_err(|e| e.to_string())?;
    Ok((m, lines))
}

/// An element that can be written to `.npy` and `.csv`.
pub trait Cell: WritableElement + Copy {
    /// Writes the value as CSV text that reads back to the same value.
    fn write_csv(self, out: &mut impl Write) -> io::Result<()>;
}

impl Cell for f32 {
    fn write_csv(self, out: &mut impl Write) -> io::Result<()> {
        // `{:?}` is the shortest text that parses back to the same f32,
        // with an exponent for very large or small values.
        write!(out, "{self:?}")
    }
}

impl Cell for i64 {
    fn write_csv(self, out: &mut impl Write) -> io::Result<()> {
        write!(out, "{self}")
    }
}

/// Checks, before any work, that `path` can be an output: a known
/// extension, an existing folder, not itself a folder.
pub fn check_output(flag: &str, path: &Path) -> CliResult<Format> {
    let format = Format::of(flag, path)?;
    check_output_dir(flag, path)?;
    Ok(format)
}

/// Checks, before any work, that `path` lies in an existing folder and is
/// not itself a folder.
pub fn check_output_dir(flag: &str, path: &Path) -> CliResult<()> {
    let dir = parent_dir(path);
    if !dir.is_dir() {
        return Err(CliError::input(format!(
            "{flag} {}: folder {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(CliError::input(format!(
            "{flag} {}: is a folder",
            path.display()
        )));
    }
    Ok(())
}

/// Writes a 1-D or 2-D array (`.csv`: one row per line; `.npy`: any shape)
/// atomically.
pub fn write_array<T: Cell, D: Dimension>(
    flag: &str,
    path: &Path,
    a: ArrayView<'_, T, D>,
) -> CliResult<()> {
    let format = Format::of(flag, path)?;
    write_atomic(flag, path, |w| match format {
        Format::Npy => a.write_npy(w).map_err(io::Error::other),
        Format::Csv => write_csv(w, a),
    })
}

fn write_csv<T: Cell, D: Dimension>(w: &mut impl Write, a: ArrayView<'_, T, D>) -> io::Result<()> {
    let m = match a.ndim() {
        1 => {
            let v = a.into_dimensionality::<Ix1>().map_err(io::Error::other)?;
            let n = v.len();
            v.into_shape_with_order((n, 1)).map_err(io::Error::other)?
        }
        2 => a.into_dimensionality::<Ix2>().map_err(io::Error::other)?,
        n => {
            return Err(io::Error::other(format!(
                "a {n}-D array cannot be written as CSV; use .npy"
            )));
        }
    };
    for row in m.rows() {
        for (j, &v) in row.iter().enumerate() {
            if j > 0 {
                w.write_all(b",")?;
            }
            v.write_csv(w)?;
        }
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Writes through `fill` into a temporary file beside `path`, then renames
/// it to `path`; on any failure the temporary file is removed.
pub fn write_atomic(
    flag: &str,
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> CliResult<()> {
    let fail =
        |e: io::Error| CliError::compute(format!("{flag} {}: cannot write: {e}", path.display()));
    let mut tmp = TempFile::create(path).map_err(fail)?;
    fill(&mut tmp.writer).map_err(fail)?;
    tmp.commit(path).map_err(fail)
}

/// A hidden temporary file, removed on drop unless committed.
struct TempFile {
    path: PathBuf,
    writer: BufWriter<File>,
    committed: bool,
}

impl TempFile {
    fn create(target: &Path) -> io::Result<TempFile> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = parent_dir(target).join(format!(".{name}.{}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(TempFile {
            path,
            writer: BufWriter::new(file),
            committed: false,
        })
    }

    fn commit(mut self, target: &Path) -> io::Result<()> {
        self.writer.flush()?;
        self.writer.get_ref().sync_all()?;
        fs::rename(&self.path, target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_header_comments_and_blank_lines() {
        let (m, lines) = parse_csv("# made by hand\nx, y\n\n1,2 # first\n3.5,-4e-3\n").unwrap();
        assert_eq!(m, ndarray::array![[1.0, 2.0], [3.5, -4e-3]]);
        assert_eq!(lines, [4, 5]);
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = parse_csv("1,2\n3,4\n5\n").unwrap_err();
        assert!(
            e.contains("ragged row: line 3 has 1 fields but line 1 has 2"),
            "{e}"
        );
        let e = parse_csv("a,b\n1,2\n3,x\n").unwrap_err();
        assert!(e.contains("line 3, field 2"), "{e}");
    }

    #[test]
    fn non_finite_is_located() {
        let (m, lines) = parse_csv("1,2\n3,nan\n").unwrap();
        let e = to_f32(&m.into_dyn(), Some(&lines)).unwrap_err();
        assert_eq!(e, "NaN at row 1, column 1 (0-based; line 2)");
        let big = ndarray::array![[1e300]].into_dyn();
        assert!(
            to_f32(&big, None)
                .unwrap_err()
                .contains("too large for f32")
        );
    }

    #[test]
    fn npy_headers_claiming_more_data_than_the_file_holds_are_refused() {
        let mut bytes = Vec::new();
        ndarray::array![[1.0f32, 2.0], [3.0, 4.0]]
            .write_npy(&mut bytes)
            .unwrap();
        assert!(parse_npy(&bytes, 2).is_ok());
        // The same file, its shape claiming 10^6 × 10^6.
        let mut forged_bytes = bytes.clone();
        let at = bytes.windows(6).position(|w| w == b"(2, 2)").unwrap();
        forged_bytes.splice(at..at + 6, b"(1000000, 1000000)".iter().copied());
        // Keep the header length field consistent (version 1: u16 at 8..10).
        let len = u16::from_le_bytes([bytes[8], bytes[9]]) + 12;
        forged_bytes[8..10].copy_from_slice(&len.to_le_bytes());
        let e = parse_npy(&forged_bytes, 2).unwrap_err();
        assert!(e.contains("truncated or corrupt"), "{e}");
        // A file cut short is refused the same way.
        let e = parse_npy(&bytes[..bytes.len() - 4], 2).unwrap_err();
        assert!(
            e.contains("needs 16 bytes of data but the file holds 12"),
            "{e}"
        );
    }

    #[test]
    fn csv_text_round_trips_f32() {
        for v in [0.1f32, 1.0 / 3.0, 1e-30, 3.4e38, -0.0, 16_777_217.0] {
            let mut s = Vec::new();
            v.write_csv(&mut s).unwrap();
            let back: f32 = std::str::from_utf8(&s).unwrap().parse().unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{v}");
        }
    }
}
