//! Where a run writes: the checkpoint path, probed before training and locked for the run,
//! and the files beside it (`NAME.loss.svg`, `NAME.diverged.safetensors`).

use super::Checkpoint;
use super::write::{partial_prefix, save, save_diverged, write_atomic};
use crate::Error;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// `model.safetensors` → `model.loss.svg`.
pub fn curve_path(checkpoint: &Path) -> PathBuf {
    checkpoint.with_file_name(format!("{}.loss.svg", stem(checkpoint)))
}

/// `model.safetensors` → `model.tokenizer.json`: a copy of the run's tokenizer (other than
/// bytes) in the standard format, for other tools; the checkpoint records its own.
pub fn tokenizer_path(checkpoint: &Path) -> PathBuf {
    checkpoint.with_file_name(format!("{}.tokenizer.json", stem(checkpoint)))
}

/// `model.safetensors` → `model.diverged.safetensors`: where the state of a run whose loss
/// became NaN or infinite goes (never over the checkpoint).
pub fn diverged_path(checkpoint: &Path) -> PathBuf {
    checkpoint.with_file_name(format!("{}.diverged.safetensors", stem(checkpoint)))
}

fn stem(checkpoint: &Path) -> String {
    checkpoint.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into())
}

/// `model.safetensors` → `.model.safetensors.lock`.
fn lock_path(checkpoint: &Path) -> PathBuf {
    let name = checkpoint.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    checkpoint.with_file_name(format!(".{name}.lock"))
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A checkpoint path ready for a run: probed (its directory exists and takes a file, the path
/// is not a directory), locked against other runs for as long as this value lives, and cleared
/// of the temporary files that killed saves left.
#[derive(Debug)]
pub struct Destination {
    path: PathBuf,
    lock: Option<File>,
    lock_error: Option<String>,
    removed: usize,
}

impl Destination {
    /// Probes `path`, takes its lock, and removes stale temporary files.
    ///
    /// Errors: [`Error::Checkpoint`] when the path cannot take a checkpoint (it is a directory,
    /// its parent is a file, its directory cannot be created or written), [`Error::Busy`] when
    /// another run holds the lock. A filesystem that cannot lock at all is not an error:
    /// [`Destination::lock_error`] says why.
    pub fn open(path: &Path) -> Result<Destination, Error> {
        probe(path)?;
        let lock_file = lock_path(path);
        let bad = |e: std::io::Error| Error::Checkpoint(format!("cannot create the lock {}: {e}", lock_file.display()));
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&lock_file).map_err(bad)?;
        let (lock, lock_error) = match file.try_lock() {
            Ok(()) => {
                // The holder's process id, for the message another run gets.
                let _ =
                    file.set_len(0).and_then(|_| file.rewind()).and_then(|_| write!(file, "{}", std::process::id()));
                (Some(file), None)
            }
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let by = if holder.is_empty() { String::new() } else { format!(" (process {holder})") };
                return Err(Error::Busy(format!(
                    "another run{by} is training into {}: wait for it to end, or pass another --checkpoint",
                    path.display()
                )));
            }
            Err(TryLockError::Error(e)) => (None, Some(e.to_string())),
        };
        let mut d = Destination { path: path.to_path_buf(), lock, lock_error, removed: 0 };
        d.removed = d.clean();
        Ok(d)
    }

    /// The checkpoint path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the lock could not be taken on this filesystem (`None`: it is held).
    pub fn lock_error(&self) -> Option<&str> {
        if self.lock.is_some() { None } else { self.lock_error.as_deref() }
    }

    /// How many stale temporary files [`Destination::open`] removed.
    pub fn removed(&self) -> usize {
        self.removed
    }

    /// Removes the temporary files of this checkpoint, its loss curve and its diverged state
    /// (under the lock, no other run is writing them; without one, nothing); returns how many.
    fn clean(&self) -> usize {
        if self.lock.is_none() {
            return 0;
        }
        let dir = dir_of(&self.path);
        let prefixes: Vec<String> =
            [self.path.clone(), curve_path(&self.path), diverged_path(&self.path), tokenizer_path(&self.path)]
                .iter()
                .map(|p| partial_prefix(p))
                .collect();
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if prefixes.iter().any(|p| name.starts_with(p.as_str())) && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Saves a checkpoint over the previous one ([`save`]: atomic, durable, finite only).
    pub fn save(&self, c: &Checkpoint) -> Result<(), Error> {
        self.clean();
        save(&self.path, c)
    }

    /// Saves a diverged state beside the checkpoint ([`diverged_path`]); returns where.
    pub fn save_diverged(&self, c: &Checkpoint) -> Result<PathBuf, Error> {
        let to = diverged_path(&self.path);
        save_diverged(&to, c)?;
        Ok(to)
    }

    /// Writes the loss curve beside the checkpoint ([`curve_path`]), atomically; returns where.
    pub fn write_curve(&self, svg: &str) -> Result<PathBuf, Error> {
        let to = curve_path(&self.path);
        write_atomic(&to, |w| w.write_all(svg.as_bytes()))?;
        Ok(to)
    }
}

impl Destination {
    /// Writes the tokenizer's `tokenizer.json` beside the checkpoint ([`tokenizer_path`]),
    /// atomically; returns where.
    pub fn write_tokenizer(&self, json: &str) -> Result<PathBuf, Error> {
        let to = tokenizer_path(&self.path);
        write_atomic(&to, |w| w.write_all(json.as_bytes()))?;
        Ok(to)
    }
}

/// Checks, changing nothing, that `path` can name a checkpoint file: it names a file, and it is
/// not a directory or anything else that is not a regular file (links followed). Run first,
/// so that such a path gets this advice rather than advice about an existing checkpoint.
pub fn check_path(path: &Path) -> Result<(), Error> {
    let bad = |m: String| Err(Error::Checkpoint(m));
    let shown = path.display();
    if path.file_name().is_none() {
        return bad(format!("--checkpoint {shown} names no file: give a path such as checkpoints/model.safetensors"));
    }
    if path.is_dir() {
        return bad(format!(
            "--checkpoint {shown} is a directory: name a file in it, such as {}",
            path.join("model.safetensors").display()
        ));
    }
    if path.exists() && !path.is_file() {
        return bad(format!("--checkpoint {shown} is not a regular file: name a checkpoint file"));
    }
    Ok(())
}

/// Checks that the tokenizer's copy beside the checkpoint ([`tokenizer_path`]) can be written:
/// a directory (or anything but a regular file) of that name is a usage mistake, found before
/// any work, like one in the place of the loss curve.
pub fn check_tokenizer_path(checkpoint: &Path) -> Result<(), Error> {
    let to = tokenizer_path(checkpoint);
    if to.exists() && !to.is_file() {
        let what = if to.is_dir() { "a directory" } else { "not a regular file" };
        return Err(Error::Checkpoint(format!(
            "{} is {what}: it is where this run writes its tokenizer (beside --checkpoint {})",
            to.display(),
            checkpoint.display()
        )));
    }
    Ok(())
}

/// Checks that `path` can take a checkpoint, creating its directory if needed.
fn probe(path: &Path) -> Result<(), Error> {
    let bad = |m: String| Err(Error::Checkpoint(m));
    let shown = path.display();
    check_path(path)?;
    let dir = dir_of(path);
    if !dir.is_dir() {
        // The nearest ancestor that exists must be a directory.
        if let Some(file) = dir.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists()).filter(|a| !a.is_dir()) {
            return bad(format!("cannot put {shown} under {}: it is a file, not a directory", file.display()));
        }
        std::fs::create_dir_all(dir)
            .or_else(|e| bad(format!("cannot create the directory {} for {shown}: {e}", dir.display())))?;
    }
    for beside in [curve_path(path), diverged_path(path), crate::metrics::metrics_path(path)] {
        if beside.is_dir() {
            return bad(format!("{} is a directory: it is where this run writes a file", beside.display()));
        }
    }
    // A file written, flushed and removed: a read-only filesystem, missing permissions or a
    // full disk show here, before any training.
    let probe =
        dir.join(format!(".{}.probe-{}", path.file_name().unwrap_or_default().to_string_lossy(), std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| f.write_all(b"probe").and_then(|_| f.sync_all()));
    let _ = std::fs::remove_file(&probe);
    written.or_else(|e| bad(format!("cannot write in {} (for {shown}): {e}", dir.display())))
}
