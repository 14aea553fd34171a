//! Compiled pipelines kept on disk between processes: a
//! `wgpu::PipelineCache` loaded when the device opens and written back
//! after each pipeline compiled into it, in one file per adapter model
//! (`wgpu::util::pipeline_cache_key`), so a second process on the same
//! adapter and driver takes its pipelines' machine code from the file.
//!
//! The file is wgpu's data behind a small header of ours (magic, length,
//! FNV-1a checksum), written to a temporary file then renamed over the
//! old one: a reader sees a whole file or the previous one. Data that is
//! truncated or corrupt (our checksum), or from another adapter, driver or
//! wgpu version (wgpu's own header, checked by `create_pipeline_cache`),
//! is ignored and the device starts with an empty cache; failing to write
//! is not an error (the cache only saves time).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::PipelineCacheStatus;

/// First bytes of a cache file.
const MAGIC: [u8; 8] = *b"locuspc1";
/// Bytes of our header: magic, payload length, payload checksum.
const HEADER: usize = 8 + 8 + 8;

/// Temporary files written so far by this process (their names differ).
static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

/// 64-bit FNV-1a of `data`: catches a truncated or damaged file before
/// its bytes reach the driver.
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `data` as a cache file's bytes.
fn encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The wgpu data of a cache file's bytes, or why they are not usable.
fn decode(file: &[u8]) -> Result<&[u8], &'static str> {
    if file.len() < HEADER || file[..8] != MAGIC {
        return Err("not a locus pipeline cache");
    }
    let word = |at: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&file[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let data = &file[HEADER..];
    if word(8) != data.len() as u64 {
        return Err("truncated");
    }
    if word(16) != checksum(data) {
        return Err("checksum mismatch");
    }
    Ok(data)
}

/// The device's pipeline cache and the file it is kept in.
pub(crate) struct DiskCache {
    cache: wgpu::PipelineCache,
    path: PathBuf,
    /// Checksum of the data last read or written: an unchanged cache is
    /// not written again. Held while writing, so one process's writes land
    /// in order.
    last: Mutex<u64>,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Whether a device on `adapter` can keep a pipeline cache: the feature
/// to request, or why not.
pub(crate) fn support(adapter: &wgpu::Adapter) -> Result<wgpu::Features, String> {
    let info = adapter.get_info();
    if wgpu::util::pipeline_cache_key(&info).is_none() {
        return Err(format!(
            "wgpu keeps no pipeline cache on {:?}",
            info.backend
        ));
    }
    if !adapter.features().contains(wgpu::Features::PIPELINE_CACHE) {
        return Err("the adapter lacks PIPELINE_CACHE".into());
    }
    Ok(wgpu::Features::PIPELINE_CACHE)
}

impl DiskCache {
    /// Opens the cache of the adapter `info` describes in `dir` on
    /// `device` (opened with `PIPELINE_CACHE`), loading the file there if
    /// it is usable. Nothing is written until a pipeline is compiled.
    pub(crate) fn open(
        device: &wgpu::Device,
        info: &wgpu::AdapterInfo,
        dir: &Path,
    ) -> (Option<DiskCache>, PipelineCacheStatus) {
        let Some(key) = wgpu::util::pipeline_cache_key(info) else {
            let reason = format!("wgpu keeps no pipeline cache on {:?}", info.backend);
            return (None, PipelineCacheStatus::Unsupported { reason });
        };
        let path = dir.join(key);
        let (data, mut ignored) = match std::fs::read(&path) {
            Ok(bytes) => match decode(&bytes) {
                Ok(data) => (Some(data.to_vec()), None),
                Err(why) => (None, Some(why.to_string())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
            Err(e) => (None, Some(e.to_string())),
        };
        let loaded = data.as_deref().map(|d| create(device, Some(d)));
        let (cache, used) = match loaded {
            Some(Ok(cache)) => (cache, data.as_deref()),
            not_loaded => {
                if let Some(Err(why)) = not_loaded {
                    ignored = Some(why);
                }
                match create(device, None) {
                    Ok(cache) => (cache, None),
                    Err(reason) => {
                        return (None, PipelineCacheStatus::Unavailable { path, reason });
                    }
                }
            }
        };
        let status = PipelineCacheStatus::Active {
            path: path.clone(),
            loaded_bytes: used.map_or(0, |d| d.len() as u64),
            ignored,
        };
        let last = Mutex::new(used.map_or(0, checksum));
        (Some(DiskCache { cache, path, last }), status)
    }

    /// The cache pipelines are compiled with.
    pub(crate) fn cache(&self) -> &wgpu::PipelineCache {
        &self.cache
    }

    /// Writes the cache's data to its file (a temporary file in the same
    /// directory, renamed over it; the directory is created first) when
    /// it changed since it was last read or written; `Ok(false)` when
    /// there was nothing new to write.
    ///
    /// # Errors
    /// The I/O error of the write or the rename (the old file, if any, is
    /// left as it was).
    pub(crate) fn save(&self) -> std::io::Result<bool> {
        let Some(data) = self.cache.get_data() else {
            return Ok(false);
        };
        let sum = checksum(&data);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == sum {
            return Ok(false);
        }
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = self.path.with_file_name(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            TEMP_FILES.fetch_add(1, Ordering::Relaxed)
        ));
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let written = std::fs::File::create(&temp)
            .and_then(|mut f| f.write_all(&encode(&data)))
            .and_then(|()| std::fs::rename(&temp, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written?;
        *last = sum;
        Ok(true)
    }
}

/// A pipeline cache on `device` holding `data` (none: empty), or the
/// validation error wgpu reports for it (data from another adapter or
/// driver).
fn create(device: &wgpu::Device, data: Option<&[u8]>) -> Result<wgpu::PipelineCache, String> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    // Without a fallback, data wgpu would not use (an old wgpu, another
    // adapter, a driver update, damage) is an error, so the status can
    // say it was ignored; the caller then creates an empty cache.
    // SAFETY: wgpu requires `data` to come from `PipelineCache::get_data`.
    // A file cannot prove that; ours carries a checksum of what `save`
    // wrote, wgpu checks its own header (its version, the adapter, the
    // driver's cache UUID), and so does the driver, so what reaches the
    // driver is data it produced for this adapter and driver.
    let cache = unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some("locus pipeline cache"),
            data,
            fallback: false,
        })
    };
    match pollster::block_on(scope.pop()) {
        None => Ok(cache),
        Some(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `data` as a cache file holds it.
    pub(crate) fn encoded(data: &[u8]) -> Vec<u8> {
        encode(data)
    }

    /// Whether `file` is a whole, undamaged cache file.
    pub(crate) fn decodes(file: &[u8]) -> bool {
        decode(file).is_ok()
    }

    #[test]
    fn files_round_trip_and_damage_is_detected() {
        let data = b"some wgpu pipeline cache data".to_vec();
        let file = encode(&data);
        assert_eq!(decode(&file), Ok(&data[..]));
        assert!(decode(&file[..file.len() - 1]).is_err());
        assert!(decode(&file[..HEADER - 1]).is_err());
        assert!(decode(b"").is_err());
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&flipped), Err("checksum mismatch"));
        let mut foreign = file;
        foreign[0] = b'X';
        assert!(decode(&foreign).is_err());
    }
}
