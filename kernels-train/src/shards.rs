//! Token shards in llm.c's format, for data larger than memory: a header of 256 little-endian
//! int32 — `[0]` the magic, `[1]` the version, `[2]` the number of tokens — then the tokens,
//! uint16 (magic 20240520, version 1: vocabularies up to 65536, GPT-2's) or uint32 (magic
//! 20240801, version 7: larger ones, LLaMA 3's).
//!
//! [`write_shards`] (`--tokenize-to DIR`) also fills two header fields llm.c leaves zero:
//! `[3]` = [`TOKENIZER_TAG`] and `[4]` = the CRC-32 of the tokenizer's record
//! ([`Tokenizer::record`]), so a run can refuse shards made by another tokenizer; llm.c's
//! readers ignore them, and shards without the tag are read as they are.
//!
//! [`Shards`] reads by position: each read is a `pread` (`read_at`) of the bytes it needs,
//! through a buffer of at most [`READ_BUFFER`] bytes, never a memory map — a file truncated
//! under the run is an error naming it, not a crash — so memory does not grow with the data.
//! The files are opened once; the shards read as one sequence of tokens, in order.

use crate::Error;
use crate::tokenizer::Tokenizer;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Magic of shards of uint16 tokens.
pub const MAGIC_U16: i32 = 20240520;
/// Version of shards of uint16 tokens.
pub const VERSION_U16: i32 = 1;
/// Magic of shards of uint32 tokens.
pub const MAGIC_U32: i32 = 20240801;
/// Version of shards of uint32 tokens.
pub const VERSION_U32: i32 = 7;
/// Bytes of the header (256 int32).
pub const HEADER_BYTES: usize = 1024;
/// `header[3]` of shards that record their tokenizer's CRC-32 in `header[4]` (`ktk1`).
pub const TOKENIZER_TAG: i32 = 0x6b74_6b31;
/// Largest read, in bytes, [`Shards`] makes at once by default.
pub const READ_BUFFER: usize = 1 << 20;
/// Tokens per shard [`write_shards`] writes by default (llm.c's 10⁸).
pub const DEFAULT_SHARD_TOKENS: usize = 100_000_000;

/// The CRC-32 a shard records for `tokenizer`.
pub fn tokenizer_crc(tokenizer: &Tokenizer) -> u32 {
    crc32fast::hash(tokenizer.record().as_bytes())
}

/// One shard file, open.
#[derive(Debug)]
struct Shard {
    path: PathBuf,
    file: File,
    tokens: usize,
    /// Bytes per token: 2 or 4.
    width: usize,
    crc: Option<u32>,
}

/// Reads `buf.len()` bytes at `offset`; a short file is `UnexpectedEof`.
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let (mut done, mut buf) = (0u64, buf);
        while !buf.is_empty() {
            match std::os::windows::fs::FileExt::seek_read(file, buf, offset + done) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    done += n as u64;
                    buf = &mut buf[n..];
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Shard {
    fn open(path: &Path) -> Result<Shard, Error> {
        let shown = path.display();
        let (file, meta) = crate::files::open_regular(path, "the shard").map_err(Error::Data)?;
        let mut head = [0u8; HEADER_BYTES];
        read_exact_at(&file, &mut head, 0).map_err(|e| {
            Error::Data(format!("{shown} is not a token shard: it is shorter than the 1024-byte header ({e})"))
        })?;
        let int = |i: usize| i32::from_le_bytes([head[4 * i], head[4 * i + 1], head[4 * i + 2], head[4 * i + 3]]);
        let width = match (int(0), int(1)) {
            (MAGIC_U16, VERSION_U16) => 2,
            (MAGIC_U32, VERSION_U32) => 4,
            (MAGIC_U16 | MAGIC_U32, v) => {
                return Err(Error::Data(format!(
                    "{shown}: a shard of version {v}, which this trainer does not read (1: uint16 tokens, 7: uint32)"
                )));
            }
            (m, _) => {
                return Err(Error::Data(format!(
                    "{shown} is not a token shard (its magic is {m}; llm.c's are {MAGIC_U16} for uint16 tokens and {MAGIC_U32} for uint32)"
                )));
            }
        };
        let tokens = usize::try_from(int(2))
            .map_err(|_| Error::Data(format!("{shown}: the header's token count {} is negative", int(2))))?;
        let size = meta.len();
        let need = (HEADER_BYTES + tokens * width) as u64;
        if size < need {
            return Err(Error::Data(format!(
                "{shown} holds {size} bytes; its header announces {tokens} tokens ({need} bytes): the file is cut short"
            )));
        }
        let crc = (int(3) == TOKENIZER_TAG).then(|| int(4) as u32);
        Ok(Shard { path: path.to_path_buf(), file, tokens, width, crc })
    }
}

/// Token shards read as one sequence, by position.
#[derive(Debug)]
pub struct Shards {
    shards: Vec<Shard>,
    /// Token position where each shard starts.
    starts: Vec<usize>,
    total: usize,
    buffer: usize,
}

impl Shards {
    /// Opens `paths` in order, checking every header; an empty list or a shard without tokens
    /// is an error.
    pub fn open(paths: &[PathBuf]) -> Result<Shards, Error> {
        if paths.is_empty() {
            return Err(Error::Data("no token shards to read".into()));
        }
        let mut shards = Vec::with_capacity(paths.len());
        let (mut starts, mut total) = (Vec::with_capacity(paths.len()), 0usize);
        for p in paths {
            let s = Shard::open(p)?;
            if s.tokens == 0 {
                return Err(Error::Data(format!("the shard {} holds no tokens", p.display())));
            }
            starts.push(total);
            total += s.tokens;
            shards.push(s);
        }
        Ok(Shards { shards, starts, total, buffer: READ_BUFFER })
    }

    /// The same shards read through a buffer of `bytes` (at least one token).
    pub fn with_buffer(mut self, bytes: usize) -> Shards {
        self.buffer = bytes.max(4);
        self
    }

    /// Tokens in all the shards.
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether there are no tokens (never, for shards [`Shards::open`] accepted).
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Number of shard files.
    pub fn files(&self) -> usize {
        self.shards.len()
    }

    /// The shards but the last, and the last alone (`None` with a single shard): training and
    /// validation.
    pub fn split_last(mut self) -> (Shards, Option<Shards>) {
        if self.shards.len() < 2 {
            return (self, None);
        }
        let Some(last) = self.shards.pop() else { return (self, None) };
        self.starts.pop();
        self.total -= last.tokens;
        let val = Shards { total: last.tokens, shards: vec![last], starts: vec![0], buffer: self.buffer };
        (self, Some(val))
    }

    /// Checks the tokenizer recorded in tagged shards against `tokenizer`.
    pub fn check_tokenizer(&self, tokenizer: &Tokenizer) -> Result<(), Error> {
        let crc = tokenizer_crc(tokenizer);
        match self.shards.iter().find(|s| s.crc.is_some_and(|c| c != crc)) {
            Some(s) => Err(Error::Data(format!(
                "{} was tokenized with another tokenizer than this run's {} (its header records another one's checksum); pass the --tokenizer it was made with",
                s.path.display(),
                tokenizer.describe()
            ))),
            None => Ok(()),
        }
    }

    /// Appends tokens `start..start + n` to `out`; an id that is not below `vocab` is an error
    /// naming the shard and the position.
    pub fn read(&self, start: usize, n: usize, vocab: usize, out: &mut Vec<u32>) -> Result<(), Error> {
        if start.checked_add(n).is_none_or(|end| end > self.total) {
            return Err(Error::Data(format!("tokens {start}..{} asked of shards holding {}", start + n, self.total)));
        }
        let (mut pos, mut left) = (start, n);
        let mut i = self.starts.partition_point(|&s| s <= pos) - 1;
        let mut bytes = vec![0u8; (n * 4).min(self.buffer)];
        while left > 0 {
            let s = &self.shards[i];
            let at = pos - self.starts[i];
            if at >= s.tokens {
                i += 1;
                continue;
            }
            let take = left.min(s.tokens - at).min(self.buffer / s.width);
            let buf = &mut bytes[..take * s.width];
            read_exact_at(&s.file, buf, (HEADER_BYTES + at * s.width) as u64).map_err(|e| {
                Error::Data(format!(
                    "cannot read tokens {at}..{} of {} ({e}): was it truncated or replaced during the run?",
                    at + take,
                    s.path.display()
                ))
            })?;
            let first = out.len();
            if s.width == 2 {
                out.extend(buf.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]) as u32));
            } else {
                out.extend(buf.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            }
            if let Some(k) = out[first..].iter().position(|&id| id as usize >= vocab) {
                return Err(Error::Data(format!(
                    "token {} of {} is the id {}, outside the tokenizer's {vocab} tokens: the shard was made with another tokenizer",
                    at + k,
                    s.path.display(),
                    out[first + k]
                )));
            }
            pos += take;
            left -= take;
        }
        Ok(())
    }
}

/// Whether `path` is a regular file that starts with a shard's magic (anything else, a FIFO
/// included, is looked at without waiting or reading).
pub fn is_shard(path: &Path) -> bool {
    let mut head = [0u8; 4];
    let read = crate::files::open_regular(path, "").is_ok_and(|(f, _)| read_exact_at(&f, &mut head, 0).is_ok());
    let m = i32::from_le_bytes(head);
    read && (m == MAGIC_U16 || m == MAGIC_U32)
}

/// Whether `spec` is a glob pattern (has `*`, `?` or `[`).
fn is_pattern(spec: &str) -> bool {
    spec.contains(['*', '?', '['])
}

/// The files a `--data` value names, sorted: a directory's `*.bin` files, a glob's matches, or
/// the file itself. An empty result is an error saying what was looked for.
pub fn resolve(spec: &Path) -> Result<Vec<PathBuf>, Error> {
    let text = spec.to_string_lossy();
    let mut files: Vec<PathBuf> = if spec.is_dir() {
        std::fs::read_dir(spec)
            .map_err(|e| Error::Data(format!("cannot list {}: {e}", spec.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "bin"))
            .collect()
    } else if !spec.exists() && is_pattern(&text) {
        glob::glob(&text)
            .map_err(|e| Error::Data(format!("`{text}` is not a valid pattern: {e}")))?
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
            .collect()
    } else {
        vec![spec.to_path_buf()]
    };
    files.sort();
    if files.is_empty() {
        return Err(Error::Data(if spec.is_dir() {
            format!("{} holds no .bin token shards", spec.display())
        } else {
            format!("no file matches {text}")
        }));
    }
    Ok(files)
}

/// What [`write_shards`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    /// The shard files, in order.
    pub files: Vec<PathBuf>,
    /// Tokens written.
    pub tokens: usize,
    /// Bytes of text read.
    pub bytes: u64,
}

/// Where shard `i` of `dir` goes: `DIR/NAME_000000.bin` (NAME: the folder's name).
pub fn shard_path(dir: &Path, i: usize) -> PathBuf {
    let stem = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "shard".into());
    dir.join(format!("{stem}_{i:06}.bin"))
}

/// A shard being written: its tokens so far.
struct Pending {
    ids: Vec<u32>,
}

/// Writes one shard atomically with the header of `width`-byte tokens.
fn write_one(path: &Path, ids: &[u32], width: usize, crc: u32) -> Result<(), Error> {
    let mut header = [0i32; 256];
    header[0] = if width == 2 { MAGIC_U16 } else { MAGIC_U32 };
    header[1] = if width == 2 { VERSION_U16 } else { VERSION_U32 };
    header[2] = i32::try_from(ids.len()).map_err(|_| Error::Data("a shard holds at most 2^31 − 1 tokens".into()))?;
    header[3] = TOKENIZER_TAG;
    header[4] = crc as i32;
    crate::checkpoint::write_atomic(path, |w| {
        for h in header {
            w.write_all(&h.to_le_bytes())?;
        }
        let mut buf = Vec::with_capacity(1 << 16);
        for chunk in ids.chunks(1 << 14) {
            buf.clear();
            for &id in chunk {
                if width == 2 {
                    buf.extend_from_slice(&(id as u16).to_le_bytes());
                } else {
                    buf.extend_from_slice(&id.to_le_bytes());
                }
            }
            w.write_all(&buf)?;
        }
        Ok(())
    })
}

/// Tokenizes the files `inputs` (read in order as one text, in blocks, so memory holds one
/// block and one shard) with `tokenizer` and writes shards of `shard_tokens` tokens into
/// `dir`: uint16 tokens for vocabularies up to 65536, uint32 above. The text is cut into the
/// same pieces as [`crate::data::Corpus::new`] cuts a text in memory, and pieces are encoded in
/// parallel, so the shards hold exactly the ids training on that text in memory reads.
/// `progress(bytes read, total bytes)` is called after each block.
pub fn write_shards(
    inputs: &[PathBuf],
    tokenizer: &Tokenizer,
    dir: &Path,
    shard_tokens: usize,
    mut progress: impl FnMut(u64, u64),
) -> Result<Written, Error> {
    if shard_tokens == 0 || shard_tokens > i32::MAX as usize {
        return Err(Error::Config(format!("{shard_tokens} tokens per shard: it takes 1 to 2^31 − 1")));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Save(format!("cannot create {}: {e}", dir.display())))?;
    let width = if tokenizer.vocab_size() <= 1 << 16 { 2 } else { 4 };
    let crc = tokenizer_crc(tokenizer);
    // Every input is opened, as a regular file, before a shard is written; each is read up to
    // its size when opened, so a file that grows under the run (or never ends) cannot hold it.
    let mut opened = Vec::with_capacity(inputs.len());
    let mut total_bytes = 0u64;
    for p in inputs {
        let (file, meta) = crate::files::open_regular(p, "the text").map_err(Error::Data)?;
        total_bytes += meta.len();
        opened.push((p, file.take(meta.len())));
    }
    let mut files = Vec::new();
    let mut pending = Pending { ids: Vec::with_capacity(shard_tokens.min(1 << 24)) };
    let (mut tokens, mut read) = (0usize, 0u64);
    let flush = |pending: &mut Pending, all: bool, files: &mut Vec<PathBuf>| -> Result<(), Error> {
        while pending.ids.len() >= shard_tokens || (all && !pending.ids.is_empty()) {
            let n = pending.ids.len().min(shard_tokens);
            let path = shard_path(dir, files.len());
            write_one(&path, &pending.ids[..n], width, crc)?;
            pending.ids.drain(..n);
            files.push(path);
        }
        Ok(())
    };
    let mut stream = crate::tokenizer::PieceStream::new();
    for (p, mut f) in opened {
        let mut block = vec![0u8; crate::tokenizer::BLOCK];
        loop {
            let n = f.read(&mut block).map_err(|e| Error::Data(format!("cannot read {}: {e}", p.display())))?;
            if n == 0 {
                break;
            }
            read += n as u64;
            let ids = stream.push(tokenizer, &block[..n])?;
            tokens += ids.len();
            pending.ids.extend_from_slice(&ids);
            flush(&mut pending, false, &mut files)?;
            progress(read, total_bytes);
        }
    }
    let ids = stream.finish(tokenizer)?;
    tokens += ids.len();
    pending.ids.extend_from_slice(&ids);
    flush(&mut pending, true, &mut files)?;
    if tokens == 0 {
        return Err(Error::Data("the input holds no text: no shard written".into()));
    }
    Ok(Written { files, tokens, bytes: read })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kernels-shards-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn raw(path: &Path, magic: i32, version: i32, ids: &[u32], width: usize) {
        let mut b = Vec::new();
        let mut h = [0i32; 256];
        (h[0], h[1], h[2]) = (magic, version, ids.len() as i32);
        for x in h {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for &id in ids {
            b.extend_from_slice(&id.to_le_bytes()[..width]);
        }
        std::fs::write(path, b).unwrap();
    }

    #[test]
    fn both_formats_read_across_shards_through_a_small_buffer() {
        let d = tmp("formats");
        let ids: Vec<u32> = (0..5000u32).map(|i| (i * 7919) % 60000).collect();
        raw(&d.join("a.bin"), MAGIC_U16, VERSION_U16, &ids[..1234], 2);
        let wide: Vec<u32> = ids[1234..].iter().map(|&i| i + 70000).collect();
        raw(&d.join("b.bin"), MAGIC_U32, VERSION_U32, &wide, 4);
        let s = Shards::open(&resolve(&d).unwrap()).unwrap().with_buffer(64);
        assert_eq!((s.len(), s.files()), (5000, 2));
        let mut want: Vec<u32> = ids[..1234].to_vec();
        want.extend(&wide);
        for (start, n) in [(0, 5000), (1200, 100), (1233, 2), (4999, 1), (7, 0)] {
            let mut out = vec![9];
            s.read(start, n, 1 << 20, &mut out).unwrap();
            assert_eq!(&out[1..], &want[start..start + n], "{start}+{n}");
        }
        assert!(s.read(4990, 11, 1 << 20, &mut Vec::new()).is_err());
        let e = s.read(1230, 10, 65536, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("outside the tokenizer's 65536 tokens") && e.contains("b.bin"), "{e}");
        let (train, val) = s.split_last();
        assert_eq!((train.len(), val.map(|v| v.len())), (1234, Some(3766)));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn bad_headers_and_short_files_are_errors_naming_the_file() {
        let d = tmp("bad");
        raw(&d.join("v.bin"), MAGIC_U16, 3, &[1, 2], 2);
        raw(&d.join("m.bin"), 1234, 1, &[1, 2], 2);
        raw(&d.join("s.bin"), MAGIC_U16, VERSION_U16, &[1, 2, 3], 2);
        let f = std::fs::OpenOptions::new().write(true).open(d.join("s.bin")).unwrap();
        f.set_len(HEADER_BYTES as u64 + 4).unwrap();
        std::fs::write(d.join("t.bin"), b"tiny").unwrap();
        for (name, want) in
            [("v.bin", "version 3"), ("m.bin", "magic is 1234"), ("s.bin", "cut short"), ("t.bin", "shorter than")]
        {
            let e = Shards::open(&[d.join(name)]).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(name), "{name}: {e}");
        }
        assert!(!is_shard(&d.join("t.bin")) && !is_shard(&d.join("m.bin")) && is_shard(&d.join("v.bin")));
        // A file truncated after it was opened: an error at the read, not a crash.
        raw(&d.join("ok.bin"), MAGIC_U16, VERSION_U16, &[5; 100], 2);
        let s = Shards::open(&[d.join("ok.bin")]).unwrap();
        std::fs::OpenOptions::new().write(true).open(d.join("ok.bin")).unwrap().set_len(1100).unwrap();
        let e = s.read(0, 100, 256, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("truncated") && e.contains("ok.bin"), "{e}");
        assert!(resolve(&d.join("none-*.bin")).unwrap_err().to_string().contains("no file matches"));
        assert_eq!(resolve(&d.join("[mv].bin")).unwrap(), vec![d.join("m.bin"), d.join("v.bin")]);
        std::fs::remove_dir_all(d).unwrap();
    }
}
