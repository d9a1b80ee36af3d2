//! What the runtime keeps on disk between runs: the cache directory (one for everything the
//! library caches: pipelines here, `kernels::gemm`'s autotune choices), files replaced
//! atomically, and the pipeline cache file.
//!
//! The pipeline cache is the driver's own (wgpu's `PipelineCache`, Vulkan's `VkPipelineCache`)
//! wrapped in a header of ours: a key naming the adapter, its driver and the wgpu and runtime
//! versions, the payload's length and a checksum over key and payload. A file whose header,
//! key, length or checksum does not match is ignored (and replaced at the next save), so a
//! damaged file, one of another driver or one of another machine never reaches the driver.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The directory the library caches in: `$KERNELS_CACHE_DIR`, else the platform's cache
/// directory with `kernels` under it (`$XDG_CACHE_HOME/kernels`, else `~/.cache/kernels` on
/// Linux and other Unix; `~/Library/Caches/kernels` on macOS; `%LOCALAPPDATA%\kernels` on
/// Windows). `None` where none of these is known (and always in a browser).
pub fn cache_dir() -> Option<PathBuf> {
    if cfg!(target_arch = "wasm32") {
        return None;
    }
    cache_dir_from(|name| std::env::var_os(name))
}

/// [`cache_dir`] over any source of variables.
pub(crate) fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set("KERNELS_CACHE_DIR") {
        return Some(dir);
    }
    if cfg!(windows) {
        return set("LOCALAPPDATA").map(|d| d.join("kernels"));
    }
    if cfg!(target_os = "macos") {
        return set("HOME").map(|h| h.join("Library/Caches/kernels"));
    }
    set("XDG_CACHE_HOME").map(|d| d.join("kernels")).or_else(|| set("HOME").map(|h| h.join(".cache/kernels")))
}

/// Replaces `path` with `bytes` so that a reader sees the old file or the new one, never a
/// part: the bytes go to a temporary file of a unique name in the same directory (created if
/// missing), which is flushed to disk and renamed over `path`. Concurrent writers each rename a
/// whole file; the last one wins.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    // The rename itself survives a crash once the directory is flushed (not possible on Windows).
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// What became of the pipeline cache file when a [`Gpu`](crate::Gpu) was opened
/// ([`Gpu::pipeline_cache_file`](crate::Gpu::pipeline_cache_file)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PipelineCacheFile {
    /// No cache on disk, and why (turned off, no cache directory, a backend without one).
    Off {
        /// Why.
        reason: String,
    },
    /// No file yet: one is written when pipelines have been built.
    New {
        /// The file.
        path: PathBuf,
    },
    /// The file was read and handed to the driver.
    Loaded {
        /// The file.
        path: PathBuf,
        /// The driver's data it held.
        bytes: usize,
    },
    /// The file was not used, and why (damaged, another adapter, driver or wgpu); it is
    /// replaced at the next save.
    Ignored {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The largest file read: the driver's data for thousands of pipelines is a few hundred MB at
/// most; a file beyond this is not a cache of ours.
const MAX_FILE: u64 = 1 << 30;

const MAGIC: &[u8; 16] = b"kernels-plcache\n";
const FORMAT: u32 = 1;

/// The key of a cache file: everything a driver's pipeline data depends on that wgpu's own
/// header does not check (wgpu checks the backend, vendor and device ids and the driver's
/// cache UUID).
pub(crate) fn key(info: &wgpu::AdapterInfo) -> String {
    format!(
        "adapter {} | vendor {:#x} device {:#x} | driver {} {} | {:?} | wgpu 30 | kernels-runtime {} | {}-bit",
        info.name,
        info.vendor,
        info.device,
        info.driver,
        info.driver_info,
        info.backend,
        env!("CARGO_PKG_VERSION"),
        usize::BITS
    )
}

/// The file name for an adapter: one file per adapter, so another GPU's cache stays.
pub(crate) fn file_name(info: &wgpu::AdapterInfo) -> String {
    let clean: String = info.name.chars().take(48).map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("pipelines-{:04x}-{:04x}-{clean}.bin", info.vendor, info.device)
}

/// A 64-bit checksum (a multiply-rotate mix over 8-byte words, then an avalanche): it catches
/// damage, not forgery.
pub(crate) fn checksum(parts: &[&[u8]]) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let mut h: u64 = 0x2545_F491_4F6C_DD1D;
    for part in parts {
        h = (h ^ part.len() as u64).wrapping_mul(P1);
        let mut words = part.chunks_exact(8);
        for w in &mut words {
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            h = (h ^ v.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1);
        }
        let mut tail = [0u8; 8];
        let rest = words.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(tail).wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P1);
    h ^ (h >> 32)
}

/// The file's bytes: magic, format, key, payload length, checksum, payload.
pub(crate) fn encode(key: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + key.len() + 40);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(&[key.as_bytes(), payload]).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of a file written by [`encode`] with `key`, or why it cannot be used.
pub(crate) fn decode<'a>(bytes: &'a [u8], key: &str) -> Result<&'a [u8], String> {
    let mut rest = bytes;
    let mut take = |n: usize, what: &str| -> Result<&'a [u8], String> {
        if rest.len() < n {
            return Err(format!("the file ends inside its {what}"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    if take(MAGIC.len(), "header")? != MAGIC {
        return Err("not a pipeline cache of kernels".into());
    }
    let format = u32::from_le_bytes(take(4, "header")?.try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(format!("format {format}, this runtime writes {FORMAT}"));
    }
    let key_len = u32::from_le_bytes(take(4, "header")?.try_into().expect("4 bytes")) as usize;
    let found = take(key_len, "key")?;
    if found != key.as_bytes() {
        return Err(format!("written for another adapter, driver or version: `{}`", String::from_utf8_lossy(found)));
    }
    let len = u64::from_le_bytes(take(8, "header")?.try_into().expect("8 bytes"));
    let sum = u64::from_le_bytes(take(8, "header")?.try_into().expect("8 bytes"));
    if len != rest.len() as u64 {
        return Err(format!("the header says {len} bytes of data, the file holds {}", rest.len()));
    }
    if checksum(&[key.as_bytes(), rest]) != sum {
        return Err("the checksum does not match (the file is damaged)".into());
    }
    Ok(rest)
}

/// A device's pipeline cache and its file.
pub(crate) struct DiskCache {
    pub(crate) cache: wgpu::PipelineCache,
    path: PathBuf,
    key: String,
    /// The checksum of the payload on disk (as read or last written), and how many pipelines
    /// the context had built then.
    saved: Mutex<(u64, u64)>,
}

impl DiskCache {
    /// Reads the file for `info` in `dir` and creates the device's cache from it (from nothing
    /// where it is absent or unusable).
    pub(crate) fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo, dir: &Path) -> (DiskCache, PipelineCacheFile) {
        let path = dir.join(file_name(info));
        let key = key(info);
        let read = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read it: {e}")),
            Ok(m) if m.len() > MAX_FILE => Err(format!("{} bytes, more than a pipeline cache holds", m.len())),
            Ok(_) => std::fs::read(&path).map(Some).map_err(|e| format!("cannot read it: {e}")),
        };
        let (payload, status) = match read {
            Ok(None) => (None, PipelineCacheFile::New { path: path.clone() }),
            Ok(Some(bytes)) => match decode(&bytes, &key) {
                Ok(payload) => {
                    let status = PipelineCacheFile::Loaded { path: path.clone(), bytes: payload.len() };
                    (Some(payload.to_vec()), status)
                }
                Err(reason) => (None, PipelineCacheFile::Ignored { path: path.clone(), reason }),
            },
            Err(reason) => (None, PipelineCacheFile::Ignored { path: path.clone(), reason }),
        };
        // SAFETY: wgpu requires `data` to come from `PipelineCache::get_data` of an adapter with
        // the same `pipeline_cache_key`. It does: the file is ours (magic, format), written
        // for this adapter, driver and wgpu (the key), whole and undamaged (length, checksum);
        // anything else was dropped above. `fallback` makes wgpu start empty if its own header
        // check (backend, vendor, device, the driver's cache UUID) still refuses it.
        let cache = unsafe {
            device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                label: Some("kernels"),
                data: payload.as_deref(),
                fallback: true,
            })
        };
        let sum = payload.as_deref().map_or(0, |p| checksum(&[key.as_bytes(), p]));
        (DiskCache { cache, path, key, saved: Mutex::new((sum, 0)) }, status)
    }

    /// Writes the driver's data if pipelines were built since the last save (`built` counts
    /// the context's builds) and the data differs from what is on disk. The path when a file
    /// was written.
    pub(crate) fn save(&self, built: u64) -> std::io::Result<Option<PathBuf>> {
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        if saved.1 == built {
            return Ok(None);
        }
        let Some(payload) = self.cache.get_data() else { return Ok(None) };
        let sum = checksum(&[self.key.as_bytes(), &payload]);
        let changed = sum != saved.0;
        if changed {
            write_atomically(&self.path, &encode(&self.key, &payload))?;
        }
        *saved = (sum, built);
        Ok(changed.then(|| self.path.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, driver_info: &str) -> wgpu::AdapterInfo {
        let mut i = wgpu::AdapterInfo::new(wgpu::DeviceType::DiscreteGpu, wgpu::Backend::Vulkan);
        i.name = name.into();
        i.vendor = 0x10de;
        i.device = 0x2335;
        i.driver = "NVIDIA".into();
        i.driver_info = driver_info.into();
        i
    }

    #[test]
    fn the_cache_directory_is_the_override_then_the_platforms() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        static ALL: [(&str, &str); 4] =
            [("KERNELS_CACHE_DIR", "/k"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h"), ("LOCALAPPDATA", "/l")];
        let all = &ALL;
        assert_eq!(cache_dir_from(vars(all)), Some(PathBuf::from("/k")));
        assert_eq!(cache_dir_from(vars(&[])), None);
        if cfg!(all(unix, not(target_os = "macos"))) {
            assert_eq!(cache_dir_from(vars(&all[1..])), Some(PathBuf::from("/x/kernels")));
            assert_eq!(cache_dir_from(vars(&all[2..])), Some(PathBuf::from("/h/.cache/kernels")));
            // An empty variable is unset.
            assert_eq!(
                cache_dir_from(vars(&[("KERNELS_CACHE_DIR", ""), ("XDG_CACHE_HOME", ""), ("HOME", "/h")])),
                Some(PathBuf::from("/h/.cache/kernels"))
            );
        }
    }

    #[test]
    fn a_file_round_trips_and_anything_else_is_refused() {
        let key = key(&info("NVIDIA H200", "580.65"));
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let file = encode(&key, &payload);
        assert_eq!(decode(&file, &key), Ok(&payload[..]));
        assert_eq!(decode(&encode(&key, &[]), &key), Ok(&[][..]));

        // Every single flipped bit of the payload or the key is caught.
        for i in [file.len() - 1, file.len() - 500, 30] {
            let mut bad = file.clone();
            bad[i] ^= 1;
            assert!(decode(&bad, &key).is_err(), "a flipped bit at {i} went through");
        }
        // Truncated anywhere, extended, or empty.
        for n in [0, 5, 16, 24, 40, file.len() - 1] {
            assert!(decode(&file[..n], &key).is_err(), "{n} bytes went through");
        }
        let mut longer = file.clone();
        longer.push(0);
        assert!(decode(&longer, &key).unwrap_err().contains("holds"));
        // Another driver, or not ours at all.
        let other = super::key(&info("NVIDIA H200", "590.01"));
        assert!(decode(&file, &other).unwrap_err().contains("another adapter"));
        assert!(
            decode(b"WGPUPLCH and the rest of some other file", &key).unwrap_err().contains("not a pipeline cache")
        );
    }

    #[test]
    fn the_key_and_name_tell_adapters_and_drivers_apart() {
        let (a, b) = (info("NVIDIA H200", "580.65"), info("NVIDIA H200", "590.01"));
        assert_ne!(key(&a), key(&b));
        assert_eq!(file_name(&a), file_name(&b), "a driver update replaces the file");
        assert_eq!(file_name(&a), "pipelines-10de-2335-NVIDIA_H200.bin");
        let lavapipe = info("llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa");
        assert!(file_name(&lavapipe).chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
    }

    #[test]
    fn atomic_writes_leave_the_whole_file_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("kernels-atomic-{}", std::process::id()));
        let path = dir.join("sub/file.bin");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![OsString::from("file.bin")], "no temporary file is left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
