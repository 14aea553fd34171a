//! Outputs written atomically: every output path is checked before any
//! work (folder writable, no path given twice), each output is written to
//! a temporary file in its folder (an unnamed one, `O_TMPFILE`, where the
//! system allows, so even a killed run leaves nothing; else a hidden named
//! one, removed on drop and by [`remove_temporary_files`] on a signal),
//! and a run's outputs are renamed into place together at the end
//! ([`write_all_or_nothing`]), so a failed or interrupted run never leaves
//! a partial file or half of its outputs.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{CliError, CliResult};

thread_local! {
    /// The outputs this run has claimed: option and resolved path.
    static CLAIMED: RefCell<Vec<(String, PathBuf)>> = const { RefCell::new(Vec::new()) };
    /// With [`write_all_or_nothing`] under way, the outputs written so far
    /// (committed together at its end).
    static STAGED: RefCell<Option<Vec<(String, PathBuf, TempFile)>>> = const { RefCell::new(None) };
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

/// Runs `write`, which writes a run's outputs with
/// [`write_array`](crate::io::write_array) and [`write_atomic`], and puts
/// them all in place only if it succeeds: every output is first written in
/// full to its temporary file, then all are renamed into place. If `write`
/// fails, no output is touched.
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
    use crate::io::write_array;

    #[test]
    fn an_output_path_may_be_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.npy");
        check_output_dir("--output", &a).unwrap();
        let same = dir.path().join(".").join("a.npy");
        let e = check_output_dir("--proba", &same).unwrap_err();
        let e = e.message();
        assert!(e.contains("the same file as --output"), "{e}");
        check_output_dir("--proba", &dir.path().join("b.npy")).unwrap();
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
