//! Files in and out, by format: `.npy` (f32 or f64, C or Fortran order,
//! 1-D as a column; labels of any integer type or whole floats) and `.csv`
//! (comma separated, header row detected or set by
//! `--header`/`--no-header`, `#` comments). The format is chosen by
//! extension ([`Format`]); the `npy` and `delimited` modules do the
//! parsing and the text, this one the checks and the dispatch.
//!
//! Every input is checked while it is read (shape, every entry a finite
//! `f32`, sizes against the file before anything is allocated) and every
//! problem is reported with the option and file it came from; [`Input`]
//! and the shape checks ([`same_rows`], [`one_column`]) cross-check
//! inputs. Points are read by [`read_points`], keeping `f64` values where
//! the file has them, for the `points` module to centre before rounding.
//! Outputs are chosen by extension (`.npy` as f32 — float64 for positions
//! of points read as `f64` —, or i64 for labels; `.csv` with the shortest
//! text that reads back to the same value) and written through the
//! `atomic` module: paths checked before any work, files put in place
//! only when the run succeeds.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ndarray::{Array1, Array2, Array3, ArrayD, ArrayView, Axis, Dimension, Ix2, Ix3};

use crate::atomic::{check_output_dir, write_atomic};
use crate::delimited::{self, HeaderRule};
use crate::error::{CliError, CliResult};
use crate::npy::{self, NpyError};
use crate::npy_write;

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
    let a = read_array(flag, path, 2, false)?;
    a.into_dimensionality::<Ix2>()
        .map_err(|e| CliError::input(format!("{flag} {}: {e}", path.display())))
}

/// Reads a stack of matrices `(B, N, d)` of finite `f32`: a 3-D `.npy`, or
/// a matrix (2-D `.npy`, 1-D `.npy` as a column, `.csv`) as one matrix
/// (`B = 1`). Returns the stack and the number of axes the file had.
pub fn read_stack(flag: &str, path: &Path) -> CliResult<(Array3<f32>, usize)> {
    let a = read_array(flag, path, 3, false)?;
    let ndim = a.ndim();
    let a = if ndim == 2 { a.insert_axis(Axis(0)) } else { a };
    let a = a
        .into_dimensionality::<Ix3>()
        .map_err(|e| CliError::input(format!("{flag} {}: {e}", path.display())))?;
    Ok((a, ndim.max(2)))
}

/// How the first row of every CSV input is read, set once from
/// `--header`/`--no-header` (automatic when never set).
static HEADER_RULE: OnceLock<HeaderRule> = OnceLock::new();

/// Sets how the first row of CSV inputs is read (once, at start-up).
pub fn set_header_rule(rule: HeaderRule) {
    let _ = HEADER_RULE.set(rule);
}

fn header_rule() -> HeaderRule {
    HEADER_RULE.get().copied().unwrap_or_default()
}

/// Opens `path` for reading, with its length.
fn open(path: &Path) -> Result<(File, u64), String> {
    let fail = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => "no such file".to_string(),
        _ => format!("cannot read: {e}"),
    };
    let file = File::open(path).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if meta.is_dir() {
        return Err("is a folder".to_string());
    }
    Ok((file, meta.len()))
}

/// Reads a whole text file, refusing one too large for memory.
fn read_text(path: &Path) -> Result<Vec<u8>, String> {
    let (mut file, len) = open(path)?;
    let mut bytes = Vec::new();
    usize::try_from(len)
        .ok()
        .and_then(|l| bytes.try_reserve_exact(l).ok())
        .ok_or_else(|| format!("{len} bytes do not fit in memory"))?;
    io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    Ok(bytes)
}

/// `batch b, row r, column c` of an index into an array of up to 3 axes
/// (1-D: a column).
fn locate(at: &[usize]) -> String {
    match at {
        [r] => format!("row {r}, column 0"),
        [r, c] => format!("row {r}, column {c}"),
        [b, r, c] => format!("batch {b}, row {r}, column {c}"),
        _ => format!("index {at:?}"),
    }
}

fn npy_message(e: NpyError) -> String {
    match e {
        NpyError::Value { at, reason } => format!("{reason} at {} (0-based)", locate(&at)),
        e => e.to_string(),
    }
}

/// Reads an array of at most `max_ndim` axes (1-D taken as a column, so at
/// least 2) of finite `f32` (or NaN, with `missing`), none of them empty.
fn read_array(flag: &str, path: &Path, max_ndim: usize, missing: bool) -> CliResult<ArrayD<f32>> {
    let at = in_file(flag, path);
    match Format::of(flag, path)? {
        Format::Npy => {
            let (r, h) = npy_header(path, max_ndim).map_err(at)?;
            npy_f32(flag, path, r, &h, missing)
        }
        Format::Csv => {
            let (plain, with_missing) = (delimited::f32_field, delimited::f32_or_missing_field);
            let t = csv_table(path, missing, plain, with_missing).map_err(at)?;
            let m = t.data.into_dyn();
            check_not_empty(m.shape()).map_err(at)?;
            check_finite(&m, Some(&t.lines), missing).map_err(at)?;
            Ok(m)
        }
    }
}

/// The data of a `.npy` file whose header `h` was read from `r` (by
/// [`npy_header`]) as `f32`, 1-D as a column, checked finite (or NaN,
/// with `missing`) unless the reading threads scanned every entry.
fn npy_f32(
    flag: &str,
    path: &Path,
    mut r: BufReader<File>,
    h: &npy::Header,
    missing: bool,
) -> CliResult<ArrayD<f32>> {
    let at = in_file(flag, path);
    let (a, finite) = npy::read_f32_file(&mut r, h).map_err(|e| at(npy_message(e)))?;
    let a = npy::column_if_1d(a);
    if !finite {
        check_finite(&a, None, missing).map_err(at)?;
    }
    Ok(a)
}

/// An input error about `flag`'s file `path`: "--keys x.npy: …".
fn in_file<'a>(flag: &'a str, path: &'a Path) -> impl Fn(String) -> CliError + Copy + 'a {
    move |msg| CliError::input(format!("{flag} {}: {msg}", path.display()))
}

/// A matrix of points as read, before it is rounded to `f32`: the file's
/// `f32` entries, or where the file holds more precision (a float64
/// `.npy`, CSV text) its `f64` values, which the `points` module centres
/// before rounding. Every entry is finite (or NaN, read with `missing`).
#[derive(Clone)]
pub enum Points {
    /// From an `f32` (or `f2`) `.npy`: nothing to gain from `f64`.
    Narrow(Array2<f32>),
    /// From a float64 `.npy` or a `.csv`.
    Wide {
        /// The values.
        values: Array2<f64>,
        /// CSV: each value correctly rounded to `f32` from its text
        /// (infinite where too large), used where nothing is centred.
        rounded: Option<Array2<f32>>,
        /// CSV: the text line of each row.
        lines: Option<Vec<usize>>,
    },
}

impl Points {
    /// Rows and columns.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Points::Narrow(a) => a.dim(),
            Points::Wide { values, .. } => values.dim(),
        }
    }

    /// Read as `f64`.
    pub fn is_wide(&self) -> bool {
        matches!(self, Points::Wide { .. })
    }

    /// The points as read, in `f64`.
    pub fn to_f64(&self) -> Array2<f64> {
        match self {
            Points::Narrow(a) => a.mapv(f64::from),
            Points::Wide { values, .. } => values.clone(),
        }
    }
}

/// Reads an `N × d` matrix of points (as [`read_matrix`]; with `missing`,
/// NaN — in CSV an empty field, `NA` or `nan` — marks a missing entry),
/// keeping `f64` values where the file has them.
pub fn read_points(flag: &str, path: &Path, missing: bool) -> CliResult<Points> {
    let at = in_file(flag, path);
    let (values, rounded, lines) = match Format::of(flag, path)? {
        Format::Npy => {
            let (mut r, h) = npy_header(path, 2).map_err(at)?;
            if !(h.dtype.kind == npy::Kind::Float && h.dtype.size == 8) {
                let a = npy_f32(flag, path, r, &h, missing)?;
                let a = a
                    .into_dimensionality::<Ix2>()
                    .map_err(|e| at(e.to_string()))?;
                return Ok(Points::Narrow(a));
            }
            let a = npy::read_f64(&mut r, &h).map_err(|e| at(npy_message(e)))?;
            let a = npy::column_if_1d(a);
            (
                a.into_dimensionality::<Ix2>()
                    .map_err(|e| at(e.to_string()))?,
                None,
                None,
            )
        }
        Format::Csv => {
            let (plain, with_missing) = (delimited::wide_field, delimited::wide_or_missing_field);
            let t = csv_table(path, missing, plain, with_missing).map_err(at)?;
            let rounded = t.data.mapv(|(x, _)| x);
            (t.data.mapv(|(_, v)| v), Some(rounded), Some(t.lines))
        }
    };
    check_not_empty(values.shape()).map_err(at)?;
    let flat = values.as_slice().expect("standard layout"); // ok: built in C order above
    if let Some(pos) = flat
        .iter()
        .position(|v| !(v.is_finite() || (missing && v.is_nan())))
    {
        return Err(at(non_finite(
            flat[pos],
            pos,
            values.shape(),
            lines.as_deref(),
        )));
    }
    Ok(Points::Wide {
        values,
        rounded,
        lines,
    })
}

/// Opens a `.npy` file and reads its header: an array of 1 to `max_ndim`
/// axes, none of them empty; the reader is left at the first data byte.
fn npy_header(path: &Path, max_ndim: usize) -> Result<(BufReader<File>, npy::Header), String> {
    let (file, len) = open(path)?;
    let mut r = BufReader::new(file);
    let h = npy::read_header(&mut r, len).map_err(npy_message)?;
    if h.shape.is_empty() || h.shape.len() > max_ndim {
        let allowed = if max_ndim == 3 {
            "1-D, 2-D or 3-D"
        } else {
            "1-D or 2-D"
        };
        return Err(format!(
            "expected a {allowed} array, got shape {:?}",
            h.shape
        ));
    }
    check_not_empty(&h.shape)?;
    Ok((r, h))
}

/// Reads a whole CSV file, converting each field with `plain`, or with
/// `missing` with `with_missing` (which reads a missing entry).
fn csv_table<T: Clone>(
    path: &Path,
    missing: bool,
    plain: fn(&str) -> Result<T, String>,
    with_missing: fn(&str) -> Result<T, String>,
) -> Result<delimited::Table<T>, String> {
    let text = read_text(path)?;
    let field = if missing { with_missing } else { plain };
    delimited::read(&text, header_rule(), field)
}

fn check_not_empty(shape: &[usize]) -> Result<(), String> {
    if !shape.contains(&0) {
        return Ok(());
    }
    let shape = shape.iter().map(usize::to_string).collect::<Vec<_>>();
    Err(format!(
        "empty ({}); it needs at least one row and one column",
        shape.join("×")
    ))
}

/// Fails on the first entry that is not finite (NaN allowed with
/// `missing`); `lines[i]` is the text line of row `i` (CSV).
fn check_finite(m: &ArrayD<f32>, lines: Option<&[usize]>, missing: bool) -> Result<(), String> {
    // One flat scan (the arrays read here are already in standard layout,
    // so this borrows); the n-dimensional index only for the error.
    let m = m.as_standard_layout();
    let flat = m.as_slice().expect("standard layout"); // ok: made so above
    let Some(pos) = locus::first_non_finite(flat, missing) else {
        return Ok(());
    };
    Err(non_finite(f64::from(flat[pos]), pos, m.shape(), lines))
}

/// "NaN at row r, column c (0-based; line l)" for the entry `v` at flat
/// position `pos` of an array of `shape`.
fn non_finite(v: f64, pos: usize, shape: &[usize], lines: Option<&[usize]>) -> String {
    let what = if v.is_nan() {
        "NaN".to_string()
    } else {
        format!("{}infinity", if v < 0.0 { "-" } else { "" })
    };
    format!("{what} at {}", entry(pos, shape, lines))
}

/// "row r, column c (0-based; line l)": where the entry at flat position
/// `pos` of an array of `shape` is (`lines[i]`: the text line of row `i`,
/// CSV).
pub fn entry(pos: usize, shape: &[usize], lines: Option<&[usize]>) -> String {
    let mut at = vec![0; shape.len()];
    let mut rest = pos;
    for (a, &len) in at.iter_mut().zip(shape).rev() {
        *a = rest % len.max(1);
        rest /= len.max(1);
    }
    let line = match (lines, at.len()) {
        (Some(l), n) if n >= 2 => format!("; line {}", l[at[n - 2]]),
        _ => String::new(),
    };
    format!("{} (0-based{line})", locate(&at))
}

/// Reads class labels: one integer per row, from a 1-D or one-column
/// `.npy` of any integer type (int8…int64, uint8…uint64, bool) or of
/// floats that are whole numbers, or from a one-column `.csv`.
pub fn read_labels(flag: &str, path: &Path) -> CliResult<Array1<i64>> {
    let format = Format::of(flag, path)?;
    let at = in_file(flag, path);
    let a = match format {
        Format::Npy => {
            let (file, len) = open(path).map_err(at)?;
            let mut r = BufReader::new(file);
            let h = npy::read_header(&mut r, len).map_err(|e| at(npy_message(e)))?;
            if !matches!(h.shape.as_slice(), [_] | [_, 1]) {
                return Err(at(format!(
                    "labels must be 1-D or one column, got shape {:?}",
                    h.shape
                )));
            }
            npy::read_i64(&mut r, &h).map_err(|e| at(npy_message(e)))?
        }
        Format::Csv => {
            let text = read_text(path).map_err(at)?;
            let t = delimited::read(&text, header_rule(), delimited::i64_field).map_err(at)?;
            if t.data.ncols() > 1 {
                return Err(at(format!(
                    "labels must be one column, got {} columns",
                    t.data.ncols()
                )));
            }
            t.data.into_dyn()
        }
    };
    check_not_empty(a.shape()).map_err(at)?;
    let n = a.len();
    a.into_shape_with_order(n).map_err(|e| at(e.to_string()))
}

/// An element that can be written to `.npy` and `.csv`.
pub trait Cell: npy_write::Element + delimited::Field {}

impl<T: npy_write::Element + delimited::Field> Cell for T {}

/// Checks, before any work, that `path` can be an output: a known
/// extension, and as [`check_output_dir`].
pub fn check_output(flag: &str, path: &Path) -> CliResult<Format> {
    let format = Format::of(flag, path)?;
    check_output_dir(flag, path)?;
    Ok(format)
}

/// [`check_output`] for each output flag of a command that was given
/// (`None`: an optional output left out), in order.
pub fn check_outputs(outputs: &[(&str, Option<&Path>)]) -> CliResult<()> {
    for (flag, path) in outputs {
        if let Some(p) = path {
            check_output(flag, p)?;
        }
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
        Format::Npy => npy_write::write_array(w, a),
        Format::Csv => delimited::write(w, a),
    })
}

/// [`write_array`] to `path` when the optional output was given.
pub fn write_if<T: Cell, D: Dimension>(
    flag: &str,
    path: Option<&Path>,
    a: ArrayView<'_, T, D>,
) -> CliResult<()> {
    path.map_or(Ok(()), |p| write_array(flag, p, a))
}

/// Writes a 3-D array `A × B × C`: as it is to `.npy`, as `A` rows of
/// `B·C` columns to `.csv`.
pub fn write_array_3d<T: Cell>(
    flag: &str,
    path: &Path,
    a: ndarray::ArrayView3<'_, T>,
) -> CliResult<()> {
    match Format::of(flag, path)? {
        Format::Npy => write_array(flag, path, a),
        Format::Csv => {
            let (rows, b, c) = a.dim();
            let flat = a
                .to_shape((rows, b * c))
                .map_err(|e| CliError::compute(format!("{flag}: {e}")))?;
            write_array(flag, path, flat.view())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> Result<delimited::Table<f32>, String> {
        delimited::read(text.as_bytes(), HeaderRule::Auto, delimited::f32_field)
    }

    #[test]
    fn non_finite_is_located() {
        let t = csv("1,2\n3,nan\n").unwrap();
        let e = check_finite(&t.data.into_dyn(), Some(&t.lines), false).unwrap_err();
        assert_eq!(e, "NaN at row 1, column 1 (0-based; line 2)");
        assert!(csv("1e300\n").unwrap_err().contains("too large for f32"));
    }

    /// Float64 points keep every bit, in either byte order and either
    /// layout; 1-D is a column; NaN and infinities are located.
    #[test]
    fn float64_points_are_read_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.npy");
        // Rows of 3: 1e7 plus parts below f32's spacing there.
        let v: Vec<f64> = (0..12)
            .map(|i| 1e7 + f64::from(i) * 0.123_456_789)
            .collect();
        let file = |descr: &str, fortran: bool, shape: &str, data: &[f64]| {
            let mut header = format!(
                "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
                if fortran { "True" } else { "False" }
            );
            while (10 + header.len() + 1) % 64 != 0 {
                header.push(' ');
            }
            header.push('\n');
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend((header.len() as u16).to_le_bytes());
            bytes.extend(header.as_bytes());
            for x in data {
                bytes.extend(if descr.starts_with('>') {
                    x.to_be_bytes()
                } else {
                    x.to_le_bytes()
                });
            }
            std::fs::write(&path, bytes).unwrap();
            match read_points("--keys", &path, false) {
                Ok(Points::Wide { values, .. }) => Ok(values),
                Ok(Points::Narrow(_)) => panic!("float64 read as f32"),
                Err(e) => Err(e.message().to_string()),
            }
        };
        let want = Array2::from_shape_vec((4, 3), v.clone()).unwrap();
        assert_eq!(file("<f8", false, "(4, 3)", &v).unwrap(), want);
        assert_eq!(file(">f8", false, "(4, 3)", &v).unwrap(), want);
        // Fortran order: the file holds the columns one after the other.
        let by_columns: Vec<f64> = want.t().iter().copied().collect();
        assert_eq!(file("<f8", true, "(4, 3)", &by_columns).unwrap(), want);
        assert_eq!(
            file("<f8", false, "(12,)", &v).unwrap(),
            want.to_shape((12, 1)).unwrap()
        );
        let mut bad = v.clone();
        bad[7] = f64::NEG_INFINITY;
        let e = file("<f8", false, "(4, 3)", &bad).unwrap_err();
        assert!(e.ends_with("-infinity at row 2, column 1 (0-based)"), "{e}");
    }

    /// A large `.npy` is read and scanned by several threads: every entry
    /// that is not finite is found wherever it lies (first entry, the
    /// edges of a scanned piece and of a thread's part, the last), with
    /// NaN let through as missing where asked.
    #[test]
    fn large_npy_reads_find_every_entry_that_is_not_finite() {
        let dir = tempfile::tempdir().unwrap();
        // 11 MB: read by the threads, each part's last piece short.
        let (rows, cols) = ((3 << 17) + 5, 7);
        let clean: Vec<f32> = (0..rows * cols)
            .map(|i| (i % 1013) as f32 - 500.0)
            .collect();
        let path = dir.path().join("x.npy");
        let save = |v: &[f32]| {
            let mut f = std::fs::File::create(&path).unwrap();
            npy_write::write(&mut f, &[rows, cols], v.iter().copied()).unwrap();
        };
        save(&clean);
        let got = read_array("--keys", &path, 2, false).unwrap();
        assert_eq!(got.as_slice().unwrap(), &clean[..]);
        let half = (rows * cols).div_ceil(2);
        for at in [0, 65_535, 65_536, half - 1, half, rows * cols - 1] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut v = clean.clone();
                v[at] = bad;
                save(&v);
                let e = read_array("--keys", &path, 2, false).unwrap_err();
                let e = e.message();
                let want = format!("at row {}, column {}", at / cols, at % cols);
                assert!(e.contains(&want), "{bad} at {at}: {e}");
                let missing = read_array("--keys", &path, 2, true);
                assert_eq!(missing.is_ok(), bad.is_nan(), "{bad} at {at}");
            }
        }
    }

    #[test]
    fn npy_headers_claiming_more_data_than_the_file_holds_are_refused() {
        let mut bytes = Vec::new();
        npy_write::write(&mut bytes, &[2, 2], [1.0f32, 2.0, 3.0, 4.0]).unwrap();
        assert!(npy::f32_from_bytes(&bytes).is_ok());
        // The same file, its shape claiming 10^6 × 10^6.
        let mut forged = bytes.clone();
        let at = bytes.windows(6).position(|w| w == b"(2, 2)").unwrap();
        forged.splice(at..at + 6, b"(1000000, 1000000)".iter().copied());
        // Keep the header length consistent (version 1: u16 at 8..10).
        let len = u16::from_le_bytes([bytes[8], bytes[9]]) + 12;
        forged[8..10].copy_from_slice(&len.to_le_bytes());
        let e = npy::f32_from_bytes(&forged).unwrap_err().to_string();
        assert!(e.contains("truncated or corrupt"), "{e}");
        // A file cut short is refused the same way.
        let e = npy::f32_from_bytes(&bytes[..bytes.len() - 4])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("needs 16 bytes of data but the file holds 12"),
            "{e}"
        );
    }
}
