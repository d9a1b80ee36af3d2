//! Training text as byte tokens: a file read into memory once (so nothing another process does
//! to the file later can reach the run), or the project's own text built into the program. The
//! last part is held out for validation.

use crate::Error;
use crate::rng::Rng;
use std::path::Path;

/// The default corpus: this project's own text (docs, kernels, sources), built in, so a fresh
/// clone trains with no download.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("README.md", include_str!("../../README.md")),
    ("docs/DESIGN.md", include_str!("../../docs/DESIGN.md")),
    ("shaders/00_shared.wgsl", include_str!("../../shaders/00_shared.wgsl")),
    ("shaders/00_infrastructure.wgsl", include_str!("../../shaders/00_infrastructure.wgsl")),
    ("kernels-codegen/src/compile.rs", include_str!("../../kernels-codegen/src/compile.rs")),
    ("kernels-codegen/src/split.rs", include_str!("../../kernels-codegen/src/split.rs")),
    ("kernels-codegen/src/uniformity.rs", include_str!("../../kernels-codegen/src/uniformity.rs")),
    ("kernels-codegen/src/expand.rs", include_str!("../../kernels-codegen/src/expand.rs")),
    ("kernels-codegen/src/reflect.rs", include_str!("../../kernels-codegen/src/reflect.rs")),
    ("kernels-runtime/src/batch.rs", include_str!("../../kernels-runtime/src/batch.rs")),
    ("kernels-runtime/src/context.rs", include_str!("../../kernels-runtime/src/context.rs")),
    ("kernels-runtime/src/buffer.rs", include_str!("../../kernels-runtime/src/buffer.rs")),
    ("kernels-runtime/src/pipeline.rs", include_str!("../../kernels-runtime/src/pipeline.rs")),
];

/// Byte tokens, split into a training part and a held-out tail.
pub struct Corpus {
    bytes: Vec<u8>,
    split: usize,
    /// Where the text came from (for messages).
    pub source: String,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus").field("source", &self.source).field("bytes", &self.len()).finish()
    }
}

impl Corpus {
    /// The built-in text.
    pub fn built_in() -> Corpus {
        let mut text = Vec::new();
        for (name, body) in BUILT_IN {
            text.extend_from_slice(format!("\n==> {name} <==\n").as_bytes());
            text.extend_from_slice(body.as_bytes());
        }
        Corpus::from_bytes(text, "built-in project text")
    }

    /// In-memory bytes.
    pub fn from_bytes(bytes: Vec<u8>, source: &str) -> Corpus {
        let split = split_point(bytes.len());
        Corpus { bytes, split, source: source.to_string() }
    }

    /// A file, read whole into memory. (It was memory-mapped once; a file truncated by another
    /// process while the run read it then ended the run with SIGBUS.)
    pub fn open(path: &Path) -> Result<Corpus, Error> {
        let bytes = std::fs::read(path).map_err(|e| Error::Data(format!("cannot read {}: {e}", path.display())))?;
        if bytes.is_empty() {
            return Err(Error::Data(format!("{} is empty: nothing to train on", path.display())));
        }
        // The first MiB; a character cut at its end is not an error.
        if std::str::from_utf8(&bytes[..bytes.len().min(1 << 20)]).is_err_and(|e| e.error_len().is_some()) {
            crate::note(format!(
                "warning: {} does not look like UTF-8 text; training on its bytes anyway",
                path.display()
            ));
        }
        Ok(Corpus::from_bytes(bytes, &path.display().to_string()))
    }

    /// All bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether there is no text.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The training part.
    pub fn train(&self) -> &[u8] {
        &self.bytes()[..self.split]
    }

    /// The held-out tail.
    pub fn validation(&self) -> &[u8] {
        &self.bytes()[self.split..]
    }

    /// Checks that both parts hold at least one window of `seq_len + 1` bytes.
    pub fn check(&self, seq_len: usize) -> Result<(), Error> {
        if self.is_empty() {
            return Err(Error::Data(format!("{} is empty: nothing to train on", self.source)));
        }
        let need = seq_len + 1;
        if self.train().len() < need || self.validation().len() < need {
            return Err(Error::Data(format!(
                "{} has {} bytes: too little for sequences of {seq_len} (the training part and the held-out 5% each need {need} bytes); use a shorter --seq-len or more text",
                self.source,
                self.len()
            )));
        }
        Ok(())
    }

    /// The training batch of `step`: `batch` windows at positions drawn from (seed, step) alone,
    /// so a resumed run sees the same batches. Returns (inputs, targets), each `batch · seq_len`.
    pub fn train_batch(&self, seed: u64, step: u64, batch: usize, seq_len: usize) -> (Vec<u32>, Vec<u32>) {
        let data = self.train();
        let mut rng = Rng::for_step(seed, 1, step);
        let starts: Vec<usize> = (0..batch).map(|_| rng.below((data.len() - seq_len) as u64) as usize).collect();
        windows(data, &starts, seq_len)
    }

    /// Validation batch `k` of `count`: windows spread evenly over the held-out tail.
    pub fn validation_batch(&self, k: usize, count: usize, batch: usize, seq_len: usize) -> (Vec<u32>, Vec<u32>) {
        let data = self.validation();
        let room = data.len() - seq_len;
        let total = (count * batch).max(1);
        let starts: Vec<usize> = (0..batch).map(|b| (k * batch + b) * room / total).collect();
        windows(data, &starts, seq_len)
    }
}

fn split_point(len: usize) -> usize {
    len - len / 20
}

fn windows(data: &[u8], starts: &[usize], seq_len: usize) -> (Vec<u32>, Vec<u32>) {
    let mut x = Vec::with_capacity(starts.len() * seq_len);
    let mut y = Vec::with_capacity(starts.len() * seq_len);
    for &s in starts {
        x.extend(data[s..s + seq_len].iter().map(|&b| b as u32));
        y.extend(data[s + 1..s + seq_len + 1].iter().map(|&b| b as u32));
    }
    (x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_shifted_windows_and_reproducible() {
        let c = Corpus::from_bytes((0..=255u8).cycle().take(10_000).collect(), "test");
        c.check(32).unwrap();
        let (x, y) = c.train_batch(7, 3, 4, 32);
        assert_eq!(x.len(), 128);
        for (a, b) in x.iter().zip(&y) {
            assert_eq!((a + 1) % 256, *b);
        }
        assert_eq!(c.train_batch(7, 3, 4, 32), (x, y));
        assert_ne!(c.train_batch(7, 4, 4, 32).0, c.train_batch(7, 3, 4, 32).0);
        let (vx, _) = c.validation_batch(1, 2, 2, 32);
        assert_eq!(vx.len(), 64);
    }

    #[test]
    fn small_or_empty_text_is_an_error() {
        assert!(Corpus::from_bytes(vec![], "empty").check(8).is_err());
        assert!(Corpus::from_bytes(vec![b'a'; 20], "tiny").check(8).unwrap_err().to_string().contains("too little"));
        assert!(Corpus::built_in().check(256).is_ok());
    }
}
