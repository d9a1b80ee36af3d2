//! Reading the files a run is given — the training text, a `tokenizer.json`, a checkpoint, token
//! shards, an `--import-hf` folder's files, the metrics log — with one rule: each must be a
//! regular file (of bounded size where it is read whole), or it is refused before anything is
//! read. A device (`/dev/zero` never ends), a FIFO (opened without waiting for a writer, so a
//! FIFO nobody writes to is an error, not a hang), a directory, or a link to any of them is an
//! error naming what the path is; so is a file over the limit of its kind, by its size before
//! reading and by what was read (a file that grows while it is read).

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::Path;

/// The most training text a run reads: it is held in memory with its token ids (2 or 4 bytes a
/// token).
pub const MAX_DATA_BYTES: u64 = 4 << 30;

/// The most a `tokenizer.json` may hold (GPT-2's is 1.4 MB, the largest published ones tens of
/// MB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// The most a checkpoint may hold: more than the weights and AdamW moments (12 bytes a
/// parameter) of any model one GPU trains. Also the bound of one `--import-hf` weight file.
pub const MAX_CHECKPOINT_BYTES: u64 = 256 << 30;

/// The most a small JSON file of `--import-hf` (`config.json`, the safetensors index) may hold.
pub const MAX_JSON_BYTES: u64 = 64 << 20;

/// The most a run's metrics log (`NAME.metrics.jsonl`, about 200 bytes a logged step) may hold
/// when a resumed run reads it back.
pub const MAX_METRICS_BYTES: u64 = 4 << 30;

/// What a path that is not a regular file is, for messages.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Opens `path` for reading without blocking: a FIFO opens at once even with no writer (Unix's
/// `O_NONBLOCK`, which changes nothing for regular files), and a terminal does not become the
/// process's controlling terminal.
fn open(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    options.open(path)
}

/// `path` open for reading, with its metadata, if it is a regular file (links followed);
/// otherwise an error naming what it is. For files read by position (token shards) or in
/// blocks (`--tokenize-to`'s text), which are not held whole in memory.
pub fn open_regular(path: &Path, what: &str) -> Result<(File, Metadata), String> {
    let shown = path.display();
    let file = open(path).map_err(|e| format!("cannot read {what} {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {what} {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{what} {shown} is {}: the trainer reads only regular files", kind(&meta)));
    }
    Ok((file, meta))
}

/// The whole of `path`, if it is a regular file (links followed) of at most `limit` bytes.
/// `what` names the file in messages ("the training text", "the tokenizer", "the checkpoint").
pub fn read_regular(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let (file, meta) = open_regular(path, what)?;
    let too_large =
        |size: String| format!("{what} {shown} is {size}; the most this trainer reads there is {limit} bytes");
    if meta.len() > limit {
        return Err(too_large(format!("{} bytes", meta.len())));
    }
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(meta.len() as usize).map_err(|e| format!("cannot hold {what} {shown} in memory: {e}"))?;
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {what} {shown}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(too_large("still growing while read".into()));
    }
    Ok(bytes)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kernels-train-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn regular_files_within_the_limit_are_read_and_everything_else_is_refused() {
        let dir = scratch("kinds");
        let file = dir.join("a.txt");
        std::fs::write(&file, b"hello").unwrap();
        assert_eq!(read_regular(&file, 5, "the text").unwrap(), b"hello");
        let e = read_regular(&file, 4, "the text").unwrap_err();
        assert!(e.contains("is 5 bytes; the most this trainer reads there is 4 bytes"), "{e}");
        // A link to a regular file is followed; links to devices and directories are refused.
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 5, "the text").unwrap(), b"hello");
        let zero = dir.join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, is) in
            [(Path::new("/dev/zero"), "a character device"), (&zero, "a character device"), (&dir, "a directory")]
        {
            let e = read_regular(path, 1 << 20, "the tokenizer").unwrap_err();
            assert!(e.contains(&format!("is {is}: the trainer reads only regular files")), "{e}");
        }
        // A FIFO nobody writes to is refused at once.
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_regular(&fifo, 1 << 20, "the training text").unwrap_err();
        assert!(e.contains("is a FIFO"), "{e}");
        let e = read_regular(&dir.join("missing"), 1, "the checkpoint").unwrap_err();
        assert!(e.starts_with("cannot read the checkpoint"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
