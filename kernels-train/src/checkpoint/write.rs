//! Writing: the safetensors encoding with its checksum (in memory on every target), and the
//! atomic, durable file write (native).

use super::{Checkpoint, TensorBytes, checksum, metadata};
use crate::Error;
use crate::params;
#[cfg(not(target_arch = "wasm32"))]
use std::io::Write;
#[cfg(not(target_arch = "wasm32"))]
use std::path::{Path, PathBuf};
#[cfg(not(target_arch = "wasm32"))]
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes of the checkpoint file of `c`, exactly as [`save`] writes them (same format, same
/// checksum); refuses a state holding a NaN or an infinity ([`Error::Diverged`]). For the
/// browser, which has no files: its "download checkpoint" is these bytes.
pub fn to_bytes(c: &Checkpoint) -> Result<Vec<u8>, Error> {
    c.model.validate()?;
    if let Some(what) = c.non_finite() {
        return Err(Error::Diverged(format!("{what}; no checkpoint written")));
    }
    let (train, val) = (history(&c.train_history), history(&c.val_history));
    let (header, data) = encode(c, &train, &val)?;
    let total = data.iter().map(|t| t.len()).sum::<usize>() + 8 + header.len();
    let mut out = Vec::new();
    out.try_reserve_exact(total).map_err(|e| Error::Save(format!("no memory for a {total}-byte checkpoint: {e}")))?;
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for t in data {
        out.extend_from_slice(t);
    }
    Ok(out)
}

#[cfg(not(target_arch = "wasm32"))]
/// Writes `c` to `path` atomically and durably; refuses a state holding a NaN or an infinity
/// ([`Error::Diverged`]): a checkpoint written here is always finite.
pub fn save(path: &Path, c: &Checkpoint) -> Result<(), Error> {
    c.model.validate()?;
    if let Some(what) = c.non_finite() {
        return Err(Error::Diverged(format!("{what}; not written to {}", path.display())));
    }
    save_diverged(path, c)
}

#[cfg(not(target_arch = "wasm32"))]
/// Writes `c` to `path` atomically and durably, finite or not (for the record of a diverged
/// run; [`save`] is the one for checkpoints).
pub fn save_diverged(path: &Path, c: &Checkpoint) -> Result<(), Error> {
    c.model.validate()?;
    let (train, val) = (history(&c.train_history), history(&c.val_history));
    let (header, data) = encode(c, &train, &val)?;
    write_atomic(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        for t in data {
            w.write_all(t)?;
        }
        Ok(())
    })
}

fn history(h: &[(usize, f32)]) -> Vec<f32> {
    h.iter().flat_map(|&(s, l)| [s as f32, l]).collect()
}

/// The header (JSON padded with spaces to a multiple of 8 bytes, as safetensors writes it, with
/// the checksum in its metadata) and the tensors' data in file order (sorted by name).
fn encode<'a>(c: &'a Checkpoint, train: &'a [f32], val: &'a [f32]) -> Result<(Vec<u8>, Vec<&'a [u8]>), Error> {
    let layout = params::layout(&c.model);
    let fits = |t: &crate::model::Tensors, empty: bool| {
        t.layers.len() == layout.layers.len()
            && t.iter().zip(layout.iter()).all(|(w, p)| w.len() == if empty { 0 } else { p.elements() })
    };
    let q8 = c.moments8.as_ref();
    let q8_fits = q8.is_none_or(|q| {
        q.layers.len() == layout.layers.len() && q.iter().zip(layout.iter()).all(|(t, p)| t.fits(p.elements()))
    });
    if !(fits(&c.params, false) && fits(&c.m, q8.is_some()) && fits(&c.v, q8.is_some()) && q8_fits) {
        return Err(Error::Checkpoint("the tensors do not match the model's parameter shapes".into()));
    }
    let f32s = |t: &'a [f32]| -> &'a [u8] { bytemuck::cast_slice(t) };
    // (name, dtype, shape, bytes)
    let mut tensors: Vec<(String, &str, Vec<usize>, &[u8])> = Vec::new();
    for (p, t) in layout.iter().zip(c.params.iter()) {
        tensors.push((p.name.clone(), "F32", p.shape.clone(), f32s(t)));
    }
    match q8 {
        None => {
            for (prefix, values) in [("optim.m.", &c.m), ("optim.v.", &c.v)] {
                for (p, t) in layout.iter().zip(values.iter()) {
                    tensors.push((format!("{prefix}{}", p.name), "F32", p.shape.clone(), f32s(t)));
                }
            }
        }
        Some(q) => {
            for (p, t) in layout.iter().zip(q.iter()) {
                let n = p.elements();
                tensors.push((format!("optim.mq.{}", p.name), "U8", vec![n], &t.mq));
                tensors.push((format!("optim.vq.{}", p.name), "U8", vec![n], &t.vq));
                tensors.push((format!("optim.qscale.{}", p.name), "F32", vec![t.qscale.len() / 2, 2], f32s(&t.qscale)));
            }
        }
    }
    tensors.push(("history.train".into(), "F32", vec![c.train_history.len(), 2], f32s(train)));
    tensors.push(("history.validation".into(), "F32", vec![c.val_history.len(), 2], f32s(val)));
    tensors.sort_by(|a, b| a.0.cmp(&b.0));

    let mut meta = metadata(c);
    let sum =
        checksum(&meta, tensors.iter().map(|(name, dtype, shape, data)| TensorBytes { name, dtype, shape, data }));
    meta.insert("checksum".into(), sum);
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!(meta));
    let mut offset = 0usize;
    for (name, dtype, shape, data) in &tensors {
        let end = offset + data.len();
        header.insert(name.clone(), serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}));
        offset = end;
    }
    let mut bytes = serde_json::to_vec(&serde_json::Value::Object(header))
        .map_err(|e| Error::Checkpoint(format!("cannot encode the header: {e}")))?;
    bytes.resize(bytes.len().next_multiple_of(8), b' ');
    Ok((bytes, tensors.into_iter().map(|t| t.3).collect()))
}

#[cfg(not(target_arch = "wasm32"))]
/// A temporary file's name beside `path`: `.NAME.partial-PID-N`, unique within the process
/// and across processes, and never a checkpoint name.
pub(super) fn partial_name(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!("{}{}-{n}", partial_prefix(path), std::process::id()))
}

#[cfg(not(target_arch = "wasm32"))]
/// The prefix of every temporary file of `path` (`.NAME.partial-`).
pub(super) fn partial_prefix(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "checkpoint".into());
    format!(".{name}.partial-")
}

#[cfg(not(target_arch = "wasm32"))]
/// Writes a file atomically and durably: `fill` writes the contents into a new temporary file
/// beside `path` (`.NAME.partial-PID-N`), which is flushed to disk, renamed over `path`, and the
/// directory flushed after the rename. On any failure the temporary file is removed and `path`
/// is as it was; the error ([`Error::Save`]) names the path and the system's reason (e.g. "No
/// space left on device").
pub fn write_atomic(path: &Path, fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Error> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = partial_name(path);
    let fail = |what: &str, e: std::io::Error| Error::Save(format!("cannot {what} {}: {e}", path.display()));
    let written = (|| {
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(|e| fail("write", e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        fill(&mut w).map_err(|e| fail("write", e))?;
        let file = w.into_inner().map_err(|e| fail("write", e.into_error()))?;
        file.sync_all().map_err(|e| fail("flush to disk", e))?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(|e| fail("replace", e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    sync_dir(dir).map_err(|e| fail("flush the directory of", e))
}

#[cfg(not(target_arch = "wasm32"))]
/// Flushes a directory's entries (the rename) to disk. Filesystems that cannot (the call is
/// refused as invalid or unsupported) are taken as they are.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        match std::fs::File::open(dir).and_then(|d| d.sync_all()) {
            Err(e) if matches!(e.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported) => Ok(()),
            other => other,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}
