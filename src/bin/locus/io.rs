//! Files in and out: `.npy` (f32 or f64, C or Fortran order, 1-D as a
//! column; labels of any integer type or whole floats) and `.csv` (comma
//! separated, header row detected or set by `--header`/`--no-header`,
//! `#` comments).
//!
//! Every input is checked while it is read (shape, every entry a finite
//! `f32`, sizes against the file before anything is allocated) and every
//! problem is reported with the option and file it came from. Outputs are
//! chosen by extension (`.npy` as f32, or i64 for labels; `.csv` with the
//! shortest text that reads back to the same value). Every output path is
//! checked before any work (folder writable, no path given twice); a run
//! writes each output to a temporary file in its folder (an unnamed one
//! where the system allows, so even a killed run leaves nothing) and
//! renames them into place together at the end, so a failed or
//! interrupted run never leaves a partial file or half of its outputs.

use std::cell::RefCell;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ndarray::{Array1, Array2, Array3, ArrayD, ArrayView, Axis, Dimension, Ix1, Ix2, Ix3};

use crate::delimited::{self, HeaderRule};
use crate::error::{CliError, CliResult};
use crate::npy::{self, NpyError};

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
/// least 2) of finite `f32`, none of them empty.
fn read_array(flag: &str, path: &Path, max_ndim: usize) -> CliResult<ArrayD<f32>> {
    let format = Format::of(flag, path)?;
    let at = |msg: String| CliError::input(format!("{flag} {}: {msg}", path.display()));
    let (m, lines) = match format {
        Format::Npy => {
            let (file, len) = open(path).map_err(at)?;
            let mut r = BufReader::new(file);
            let h = npy::read_header(&mut r, len).map_err(|e| at(npy_message(e)))?;
            if h.shape.is_empty() || h.shape.len() > max_ndim {
                let allowed = if max_ndim == 3 {
                    "1-D, 2-D or 3-D"
                } else {
                    "1-D or 2-D"
                };
                return Err(at(format!(
                    "expected a {allowed} array, got shape {:?}",
                    h.shape
                )));
            }
            check_not_empty(&h.shape).map_err(at)?;
            let a = npy::read_f32(&mut r, &h).map_err(|e| at(npy_message(e)))?;
            let a = if a.ndim() == 1 {
                let n = a.len();
                a.into_shape_with_order((n, 1))
                    .map_err(|e| at(e.to_string()))?
                    .into_dyn()
            } else {
                a
            };
            (a, None)
        }
        Format::Csv => {
            let text = read_text(path).map_err(at)?;
            let t = delimited::read(&text, header_rule(), delimited::f32_field).map_err(at)?;
            (t.data.into_dyn(), Some(t.lines))
        }
    };
    check_not_empty(m.shape()).map_err(at)?;
    check_finite(&m, lines.as_deref()).map_err(at)?;
    Ok(m)
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

/// Fails on the first entry that is not finite; `lines[i]` is the text
/// line of row `i` (CSV).
fn check_finite(m: &ArrayD<f32>, lines: Option<&[usize]>) -> Result<(), String> {
    let Some((at, &v)) = m.indexed_iter().find(|(_, v)| !v.is_finite()) else {
        return Ok(());
    };
    let what = if v.is_nan() {
        "NaN".to_string()
    } else {
        format!("{}infinity", if v < 0.0 { "-" } else { "" })
    };
    let at = at.slice();
    let line = lines.map_or(String::new(), |l| format!("; line {}", l[at[at.len() - 2]]));
    Err(format!("{what} at {} (0-based{line})", locate(at)))
}

/// Reads class labels: one integer per row, from a 1-D or one-column
/// `.npy` of any integer type (int8…int64, uint8…uint64, bool) or of
/// floats that are whole numbers, or from a one-column `.csv`.
pub fn read_labels(flag: &str, path: &Path) -> CliResult<Array1<i64>> {
    let format = Format::of(flag, path)?;
    let at = |msg: String| CliError::input(format!("{flag} {}: {msg}", path.display()));
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
pub trait Cell: npy::Element {
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

thread_local! {
    /// The outputs this run has claimed: option and resolved path.
    static CLAIMED: RefCell<Vec<(String, PathBuf)>> = const { RefCell::new(Vec::new()) };
    /// With [`write_all_or_nothing`] under way, the outputs written so far
    /// (committed together at its end).
    static STAGED: RefCell<Option<Vec<(String, PathBuf, TempFile)>>> = const { RefCell::new(None) };
}

/// Checks, before any work, that `path` can be an output: a known
/// extension, and as [`check_output_dir`].
pub fn check_output(flag: &str, path: &Path) -> CliResult<Format> {
    let format = Format::of(flag, path)?;
    check_output_dir(flag, path)?;
    Ok(format)
}

/// Checks, before any work, that `path` lies in an existing folder this
/// run may write to, is not itself a folder, and is not an output another
/// option of this run already names.
pub fn check_output_dir(flag: &str, path: &Path) -> CliResult<()> {
    let dir = parent_dir(path);
    let at = |msg: String| CliError::input(format!("{flag} {}: {msg}", path.display()));
    if !dir.is_dir() {
        return Err(at(format!("folder {} does not exist", dir.display())));
    }
    if path.is_dir() {
        return Err(at("is a folder".to_string()));
    }
    let resolved = resolve(path);
    if let Some(other) = CLAIMED.with(|c| {
        c.borrow()
            .iter()
            .find(|(_, p)| *p == resolved)
            .map(|(f, _)| f.clone())
    }) {
        return Err(at(format!(
            "the same file as {other}; give each output its own path"
        )));
    }
    // The same temporary file the write will use proves the folder writable.
    TempFile::create(path)
        .map_err(|e| at(format!("cannot write in folder {}: {e}", dir.display())))?;
    CLAIMED.with(|c| c.borrow_mut().push((flag.to_string(), resolved)));
    Ok(())
}

/// `path` with its folder (and the file itself, if it exists) resolved,
/// so two spellings of one file compare equal.
fn resolve(path: &Path) -> PathBuf {
    if let Ok(p) = fs::canonicalize(path) {
        return p;
    }
    let dir = fs::canonicalize(parent_dir(path)).unwrap_or_else(|_| parent_dir(path).into());
    match path.file_name() {
        Some(name) => dir.join(name),
        None => dir,
    }
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
        Format::Npy => npy::write(w, a.shape(), a.iter().copied()),
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
/// it to `path` (inside [`write_all_or_nothing`]: at its end, with the
/// other outputs); on any failure the temporary file is removed.
pub fn write_atomic(
    flag: &str,
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> CliResult<()> {
    let fail =
        |e: io::Error| CliError::compute(format!("{flag} {}: cannot write: {e}", path.display()));
    let mut tmp = TempFile::create(path).map_err(fail)?;
    fill(&mut tmp.writer).map_err(fail)?;
    tmp.finish().map_err(fail)?;
    let staged = STAGED.with(|s| match s.borrow_mut().as_mut() {
        Some(list) => {
            list.push((flag.to_string(), path.to_path_buf(), tmp));
            None
        }
        None => Some(tmp),
    });
    match staged {
        Some(tmp) => tmp.commit(path).map_err(fail),
        None => Ok(()),
    }
}

/// Runs `write`, which writes a run's outputs with [`write_array`] and
/// [`write_atomic`], and puts them all in place only if it succeeds:
/// every output is first written in full to its temporary file, then all
/// are renamed into place. If `write` fails, no output is touched.
pub fn write_all_or_nothing(write: impl FnOnce() -> CliResult<()>) -> CliResult<()> {
    STAGED.with(|s| *s.borrow_mut() = Some(Vec::new()));
    let result = write();
    let staged = STAGED.with(|s| s.borrow_mut().take()).unwrap_or_default();
    result?;
    // Give every output a name beside its target first, so that a failure
    // here still leaves every target as it was.
    let mut named = Vec::with_capacity(staged.len());
    for (flag, path, tmp) in staged {
        let fail = |e: io::Error| {
            CliError::compute(format!("{flag} {}: cannot write: {e}", path.display()))
        };
        let tmp = tmp.name(&path).map_err(fail)?;
        named.push((flag, path, tmp));
    }
    for (flag, path, tmp) in named {
        tmp.commit(&path).map_err(|e| {
            CliError::compute(format!("{flag} {}: cannot write: {e}", path.display()))
        })?;
    }
    Ok(())
}

/// Named temporary files that exist now: removed by
/// [`remove_temporary_files`] when the run is interrupted.
static NAMED_TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn named_temps() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    NAMED_TEMPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every named temporary file of this run (for a signal handler:
/// the run is ending).
pub fn remove_temporary_files() {
    for p in named_temps().drain(..) {
        let _ = fs::remove_file(p);
    }
}

/// A temporary file beside an output: unnamed (`O_TMPFILE`) where the
/// system and file system allow, so nothing is left behind however the
/// run ends, else a hidden named file, removed on drop unless committed and
/// on SIGINT, SIGTERM and SIGHUP. The environment variable
/// `LOCUS_NO_TMPFILE` (any value) asks for named files everywhere, as on
/// systems without `O_TMPFILE` (the tests use it).
struct TempFile {
    writer: BufWriter<File>,
    /// The file's name; `None` while it is unnamed.
    path: Option<PathBuf>,
    committed: bool,
}

impl TempFile {
    fn create(target: &Path) -> io::Result<TempFile> {
        #[cfg(target_os = "linux")]
        if std::env::var_os("LOCUS_NO_TMPFILE").is_none()
            && let Some(file) = unnamed_in(parent_dir(target))?
        {
            return Ok(TempFile {
                writer: BufWriter::new(file),
                path: None,
                committed: false,
            });
        }
        let path = temp_name(target);
        let file = create_named(&path)?;
        Ok(TempFile {
            writer: BufWriter::new(file),
            path: Some(path),
            committed: false,
        })
    }

    /// Flushes the data to disk.
    fn finish(&mut self) -> io::Result<()> {
        self.writer.flush()?;
        self.writer.get_ref().sync_all()
    }

    /// Gives an unnamed file a (hidden) name beside `target`.
    fn name(mut self, target: &Path) -> io::Result<TempFile> {
        if self.path.is_some() {
            return Ok(self);
        }
        let path = temp_name(target);
        named_temps().push(path.clone());
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = format!("/proc/self/fd/{}", self.writer.get_ref().as_raw_fd());
            if let Err(e) = rustix::fs::linkat(
                rustix::fs::CWD,
                fd.as_str(),
                rustix::fs::CWD,
                &path,
                rustix::fs::AtFlags::SYMLINK_FOLLOW,
            ) {
                named_temps().retain(|p| *p != path);
                return Err(e.into());
            }
        }
        self.path = Some(path);
        Ok(self)
    }

    /// Renames the file to `target`.
    fn commit(self, target: &Path) -> io::Result<()> {
        let mut this = self.name(target)?;
        if let Some(path) = &this.path {
            fs::rename(path, target)?;
            named_temps().retain(|p| p != path);
        }
        this.committed = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let (Some(path), false) = (&self.path, self.committed) {
            let _ = fs::remove_file(path);
            named_temps().retain(|p| p != path);
        }
    }
}

/// `.NAME.PID.K.tmp` beside `target`, `K` counting within the run.
fn temp_name(target: &Path) -> PathBuf {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent_dir(target).join(format!(".{name}.{}.{k}.tmp", std::process::id()))
}

fn create_named(path: &Path) -> io::Result<File> {
    // Registered first, so an interruption between the two cannot leak it.
    named_temps().push(path.to_path_buf());
    let file = OpenOptions::new().write(true).create_new(true).open(path);
    if file.is_err() {
        named_temps().retain(|p| p != path);
    }
    file
}

/// An unnamed file in `dir`, or `None` where `O_TMPFILE` is not available.
#[cfg(target_os = "linux")]
fn unnamed_in(dir: &Path) -> io::Result<Option<File>> {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    match rustix::fs::openat(
        rustix::fs::CWD,
        dir,
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_bits_truncate(0o666),
    ) {
        Ok(fd) => Ok(Some(File::from(fd))),
        // Kernels or file systems without O_TMPFILE.
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOSYS) => Ok(None),
        Err(e) => Err(e.into()),
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

    fn csv(text: &str) -> Result<delimited::Table<f32>, String> {
        delimited::read(text.as_bytes(), HeaderRule::Auto, delimited::f32_field)
    }

    #[test]
    fn csv_header_comments_and_blank_lines() {
        let t = csv("# made by hand\nx, y\n\n1,2 # first\n3.5,-4e-3\n").unwrap();
        assert_eq!(t.data, ndarray::array![[1.0, 2.0], [3.5, -4e-3]]);
        assert_eq!(t.lines, [4, 5]);
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = csv("1,2\n3,4\n5\n").unwrap_err();
        assert!(
            e.contains("ragged row: line 3 has 1 fields but line 1 has 2"),
            "{e}"
        );
        let e = csv("a,b\n1,2\n3,x\n").unwrap_err();
        assert!(e.contains("line 3, field 2"), "{e}");
    }

    #[test]
    fn non_finite_is_located() {
        let t = csv("1,2\n3,nan\n").unwrap();
        let e = check_finite(&t.data.into_dyn(), Some(&t.lines)).unwrap_err();
        assert_eq!(e, "NaN at row 1, column 1 (0-based; line 2)");
        assert!(csv("1e300\n").unwrap_err().contains("too large for f32"));
    }

    #[test]
    fn npy_headers_claiming_more_data_than_the_file_holds_are_refused() {
        let mut bytes = Vec::new();
        npy::write(&mut bytes, &[2, 2], [1.0f32, 2.0, 3.0, 4.0]).unwrap();
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

    #[test]
    fn csv_text_round_trips_f32() {
        for v in [0.1f32, 1.0 / 3.0, 1e-30, 3.4e38, -0.0, 16_777_217.0] {
            let mut s = Vec::new();
            v.write_csv(&mut s).unwrap();
            let back: f32 = std::str::from_utf8(&s).unwrap().parse().unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{v}");
        }
    }

    #[test]
    fn an_output_path_may_be_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.npy");
        check_output("--output", &a).unwrap();
        let same = dir.path().join(".").join("a.npy");
        let e = check_output("--proba", &same).unwrap_err();
        let e = e.message();
        assert!(e.contains("the same file as --output"), "{e}");
        check_output("--proba", &dir.path().join("b.npy")).unwrap();
        // Nothing was left in the folder by the checks.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn outputs_are_put_in_place_together_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
        let e = write_all_or_nothing(|| {
            write_array("--a", &a, ndarray::array![1.0f32].view())?;
            Err(CliError::compute("the second output failed"))
        });
        assert!(e.is_err());
        assert!(!a.exists() && !b.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        write_all_or_nothing(|| {
            write_array("--a", &a, ndarray::array![1.0f32].view())?;
            write_array("--b", &b, ndarray::array![2i64].view())
        })
        .unwrap();
        assert_eq!(fs::read_to_string(&a).unwrap(), "1.0\n");
        assert_eq!(fs::read_to_string(&b).unwrap(), "2\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
