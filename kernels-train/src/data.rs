//! Training text as token ids: a file read into memory once (so nothing another process does to
//! the file later can reach the run), or the project's own text built into the program,
//! tokenized once by the run's [`Tokenizer`]. The last part is held out for validation.

use crate::Error;
use crate::rng::Rng;
use crate::tokenizer::Tokenizer;
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

/// The default corpus: this project's own text (docs, kernels, sources), built in, so a fresh
/// clone trains with no download.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("README.md", include_str!("../../README.md")),
    ("kernels-train/README.md", include_str!("../README.md")),
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

/// The built-in text: [`BUILT_IN`]'s files, each after a `==> name <==` line.
pub fn built_in_text() -> Vec<u8> {
    let mut text = Vec::new();
    for (name, body) in BUILT_IN {
        text.extend_from_slice(format!("\n==> {name} <==\n").as_bytes());
        text.extend_from_slice(body.as_bytes());
    }
    text
}

/// Reads a training text file whole into memory (not memory-mapped: a file truncated by
/// another process under a mapping ends the run with SIGBUS). It must be a regular file of at
/// most [`crate::files::MAX_DATA_BYTES`] ([`crate::files::read_regular`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn read_text(path: &Path) -> Result<Vec<u8>, Error> {
    let bytes = crate::files::read_regular(path, crate::files::MAX_DATA_BYTES, "the training text (--data)")
        .map_err(Error::Data)?;
    if bytes.is_empty() {
        return Err(Error::Data(format!("{} is empty: nothing to train on", path.display())));
    }
    // The first MiB; a character cut at its end is not an error.
    if std::str::from_utf8(&bytes[..bytes.len().min(1 << 20)]).is_err_and(|e| e.error_len().is_some()) {
        crate::note(format!("warning: {} does not look like UTF-8 text; training on its bytes anyway", path.display()));
    }
    Ok(bytes)
}

/// Token ids, two bytes each while the vocabulary allows (bytes, GPT-2's 50257), or token
/// shards read by position (native).
enum Ids {
    U16(Vec<u16>),
    U32(Vec<u32>),
    #[cfg(not(target_arch = "wasm32"))]
    Shards(crate::shards::Shards),
}

impl Ids {
    fn new(ids: Vec<u32>, vocab: usize) -> Ids {
        if vocab <= 1 << 16 { Ids::U16(ids.into_iter().map(|i| i as u16).collect()) } else { Ids::U32(ids) }
    }

    fn len(&self) -> usize {
        match self {
            Ids::U16(v) => v.len(),
            Ids::U32(v) => v.len(),
            #[cfg(not(target_arch = "wasm32"))]
            Ids::Shards(s) => s.len(),
        }
    }

    /// Appends ids `start..start + n` to `out` (shards: checked against `vocab`).
    fn extend_into(&self, out: &mut Vec<u32>, start: usize, n: usize, vocab: usize) -> Result<(), Error> {
        let _ = vocab;
        match self {
            Ids::U16(v) => out.extend(v[start..start + n].iter().map(|&i| i as u32)),
            Ids::U32(v) => out.extend_from_slice(&v[start..start + n]),
            #[cfg(not(target_arch = "wasm32"))]
            Ids::Shards(s) => s.read(start, n, vocab, out)?,
        }
        Ok(())
    }
}

/// A run of token ids: a range of a text in memory or of shards.
#[derive(Clone)]
pub struct Tokens {
    ids: std::sync::Arc<Ids>,
    base: usize,
    len: usize,
    /// Ids must be below this (the tokenizer's vocabulary).
    vocab: usize,
}

impl Tokens {
    fn whole(ids: Ids, vocab: usize) -> Tokens {
        let len = ids.len();
        Tokens { ids: std::sync::Arc::new(ids), base: 0, len, vocab }
    }

    /// Token shards, their ids checked against `tokenizer` as they are read.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn shards(shards: crate::shards::Shards, tokenizer: &Tokenizer) -> Result<Tokens, Error> {
        shards.check_tokenizer(tokenizer)?;
        Ok(Tokens::whole(Ids::Shards(shards), tokenizer.vocab_size()))
    }

    /// `text` tokenized by `tokenizer`, in memory.
    pub fn text(text: &[u8], tokenizer: &Tokenizer) -> Result<Tokens, Error> {
        let ids = if tokenizer.is_bytes() {
            // Two bytes per byte, without a four-byte copy in between.
            Ids::U16(text.iter().map(|&b| u16::from(b)).collect())
        } else {
            Ids::new(tokenizer.encode(text)?, tokenizer.vocab_size())
        };
        Ok(Tokens::whole(ids, tokenizer.vocab_size()))
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `n` tokens and the rest.
    fn split(self, n: usize) -> (Tokens, Tokens) {
        let tail = Tokens { base: self.base + n, len: self.len - n, ..self.clone() };
        (Tokens { len: n, ..self }, tail)
    }

    /// Appends tokens `start..start + n` of this run to `out`.
    pub fn read_into(&self, start: usize, n: usize, out: &mut Vec<u32>) -> Result<(), Error> {
        if start.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(Error::Data(format!("tokens {start}..{} asked of {}", start.saturating_add(n), self.len)));
        }
        self.ids.extend_into(out, self.base + start, n, self.vocab)
    }

    /// Windows of `seq_len` tokens at each start and the same shifted by one (inputs, targets).
    pub fn windows(&self, starts: &[usize], seq_len: usize) -> Result<(Vec<u32>, Vec<u32>), Error> {
        let mut x = Vec::with_capacity(starts.len() * seq_len);
        let mut y = Vec::with_capacity(starts.len() * seq_len);
        let mut w = Vec::with_capacity(seq_len + 1);
        for &s in starts {
            w.clear();
            self.read_into(s, seq_len + 1, &mut w)?;
            x.extend_from_slice(&w[..seq_len]);
            y.extend_from_slice(&w[1..]);
        }
        Ok((x, y))
    }
}

/// The training text as token ids, split into a training part and a validation part (the last
/// 5% of the text, the last shard, or `--val-data`), with the tokenizer that made them.
pub struct Corpus {
    train: Tokens,
    val: Tokens,
    tokenizer: Tokenizer,
    /// Where the text came from (for messages).
    pub source: String,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus")
            .field("source", &self.source)
            .field("tokens", &self.len())
            .field("tokenizer", &self.tokenizer)
            .finish()
    }
}

impl Corpus {
    /// The built-in text as bytes.
    pub fn built_in() -> Corpus {
        Corpus::from_bytes(built_in_text(), "built-in project text")
    }

    /// In-memory bytes as byte tokens.
    pub fn from_bytes(bytes: Vec<u8>, source: &str) -> Corpus {
        let ids = Tokens::whole(Ids::U16(bytes.into_iter().map(u16::from).collect()), 256);
        Corpus::held_out(ids, Tokenizer::bytes(), source)
    }

    /// `text` tokenized once, here, by `tokenizer`.
    pub fn new(text: &[u8], source: &str, tokenizer: Tokenizer) -> Result<Corpus, Error> {
        let ids = Tokens::text(text, &tokenizer).map_err(|e| Error::Data(format!("{source}: {e}")))?;
        Ok(Corpus::held_out(ids, tokenizer, source))
    }

    /// Training and validation tokens given apart (the validation tokens from `--val-data`,
    /// or the last of several shards).
    pub fn with_validation(train: Tokens, val: Tokens, tokenizer: Tokenizer, source: &str) -> Corpus {
        Corpus { train, val, tokenizer, source: source.to_string() }
    }

    /// `ids` with its last 5% held out for validation.
    pub fn held_out(ids: Tokens, tokenizer: Tokenizer, source: &str) -> Corpus {
        let at = split_point(ids.len());
        let (train, val) = ids.split(at);
        Corpus { train, val, tokenizer, source: source.to_string() }
    }

    /// The tokenizer of the ids.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Length in tokens (training and validation).
    pub fn len(&self) -> usize {
        self.train.len() + self.val.len()
    }

    /// Whether there is no text.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens in the training part.
    pub fn train_len(&self) -> usize {
        self.train.len()
    }

    /// Tokens in the validation part.
    pub fn validation_len(&self) -> usize {
        self.val.len()
    }

    /// The validation tokens.
    pub fn validation(&self) -> &Tokens {
        &self.val
    }

    /// Checks that both parts hold at least one window of `seq_len + 1` tokens.
    pub fn check(&self, seq_len: usize) -> Result<(), Error> {
        if self.is_empty() {
            return Err(Error::Data(format!("{} is empty: nothing to train on", self.source)));
        }
        let need = seq_len + 1;
        if self.train_len() < need || self.validation_len() < need {
            return Err(Error::Data(format!(
                "{} has {} tokens ({}; {} for training, {} for validation): too little for sequences of {seq_len} (each part needs {need} tokens); use a shorter --seq-len or more text",
                self.source,
                self.len(),
                self.tokenizer.describe(),
                self.train_len(),
                self.validation_len(),
            )));
        }
        Ok(())
    }

    /// The training batch of `step`: `batch` windows at positions drawn from (seed, step) alone,
    /// so a resumed run sees the same batches. Returns (inputs, targets), each `batch · seq_len`.
    pub fn train_batch(
        &self,
        seed: u64,
        step: u64,
        batch: usize,
        seq_len: usize,
    ) -> Result<(Vec<u32>, Vec<u32>), Error> {
        self.train.windows(&train_starts(self.train_len(), seed, step, batch, seq_len), seq_len)
    }

    /// Rank `part` of `parts`'s share of training batch `step` in a data-parallel run of
    /// `batch` sequences per rank: sequences `part · batch … (part + 1) · batch − 1` of the
    /// global batch of `parts · batch` ([`Corpus::train_batch`]). The ranks read disjoint parts,
    /// fixed by the seed, the step and the rank, and together the tokens one process reads with
    /// the whole batch; part 0 of 1 is [`Corpus::train_batch`].
    pub fn train_batch_part(
        &self,
        seed: u64,
        step: u64,
        batch: usize,
        seq_len: usize,
        part: usize,
        parts: usize,
    ) -> Result<(Vec<u32>, Vec<u32>), Error> {
        if part >= parts {
            return Err(Error::Config(format!("part {part} of a batch in {parts} parts")));
        }
        let mut starts = train_starts(self.train_len(), seed, step, (part + 1) * batch, seq_len);
        self.train.windows(&starts.split_off(part * batch), seq_len)
    }

    /// Rank `part` of `parts`'s share of validation batch `k` of `count` in a data-parallel run
    /// of `batch` sequences per rank: sequences `part · batch … (part + 1) · batch − 1` of the
    /// batch of `parts · batch` ([`Corpus::validation_batch`]).
    pub fn validation_batch_part(
        &self,
        k: usize,
        count: usize,
        batch: usize,
        seq_len: usize,
        part: usize,
        parts: usize,
    ) -> Result<(Vec<u32>, Vec<u32>), Error> {
        if part >= parts {
            return Err(Error::Config(format!("part {part} of a batch in {parts} parts")));
        }
        let mut starts = validation_starts(self.validation_len(), k, count, parts * batch, seq_len);
        starts.truncate((part + 1) * batch);
        self.val.windows(&starts.split_off(part * batch), seq_len)
    }

    /// Validation batch `k` of `count`: windows spread evenly over the validation part
    /// ([`validation_starts`]).
    pub fn validation_batch(
        &self,
        k: usize,
        count: usize,
        batch: usize,
        seq_len: usize,
    ) -> Result<(Vec<u32>, Vec<u32>), Error> {
        self.val.windows(&validation_starts(self.validation_len(), k, count, batch, seq_len), seq_len)
    }
}

/// Where the windows of training batch `step` start.
fn train_starts(len: usize, seed: u64, step: u64, batch: usize, seq_len: usize) -> Vec<usize> {
    let mut rng = Rng::for_step(seed, 1, step);
    (0..batch).map(|_| rng.below((len - seq_len) as u64) as usize).collect()
}

/// Where the windows of validation batch `k` of `count` start: spread evenly over `len`
/// tokens, in 128-bit arithmetic, so any `count` and `k < count` give windows inside them.
pub fn validation_starts(len: usize, k: usize, count: usize, batch: usize, seq_len: usize) -> Vec<usize> {
    let room = (len - seq_len) as u128;
    let total = (count as u128 * batch as u128).max(1);
    (0..batch).map(|b| ((k as u128 * batch as u128 + b as u128) * room / total).min(room) as usize).collect()
}

fn split_point(len: usize) -> usize {
    len - len / 20
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_shifted_windows_and_reproducible() {
        let c = Corpus::from_bytes((0..=255u8).cycle().take(10_000).collect(), "test");
        c.check(32).unwrap();
        let (x, y) = c.train_batch(7, 3, 4, 32).unwrap();
        assert_eq!(x.len(), 128);
        for (a, b) in x.iter().zip(&y) {
            assert_eq!((a + 1) % 256, *b);
        }
        assert_eq!(c.train_batch(7, 3, 4, 32).unwrap(), (x, y));
        assert_ne!(c.train_batch(7, 4, 4, 32).unwrap().0, c.train_batch(7, 3, 4, 32).unwrap().0);
        let (vx, _) = c.validation_batch(1, 2, 2, 32).unwrap();
        assert_eq!(vx.len(), 64);
        // Counts whose product with the batch overflows a usize still give windows of the tail.
        let huge = usize::MAX / 3;
        let (vx, vy) = c.validation_batch(huge - 1, huge, 4, 32).unwrap();
        assert_eq!((vx.len(), vy.len()), (128, 128));
    }

    #[test]
    fn the_parts_of_a_global_batch_are_disjoint_and_make_it_whole() {
        let c = Corpus::built_in();
        for parts in [1, 2, 3] {
            let mut x = Vec::new();
            let mut y = Vec::new();
            for part in 0..parts {
                let (px, py) = c.train_batch_part(11, 6, 2, 16, part, parts).unwrap();
                assert_eq!(px.len(), 2 * 16);
                x.extend(px);
                y.extend(py);
            }
            assert_eq!((x, y), c.train_batch(11, 6, 2 * parts, 16).unwrap(), "{parts} parts");
        }
        for parts in [1, 2, 4] {
            let mut x = Vec::new();
            for part in 0..parts {
                x.extend(c.validation_batch_part(3, 5, 2, 16, part, parts).unwrap().0);
            }
            assert_eq!(x, c.validation_batch(3, 5, 2 * parts, 16).unwrap().0, "{parts} parts");
        }
        let (a, _) = c.train_batch_part(11, 6, 2, 16, 0, 2).unwrap();
        let (b, _) = c.train_batch_part(11, 6, 2, 16, 1, 2).unwrap();
        assert_ne!(a, b);
        assert!(c.train_batch_part(11, 6, 2, 16, 2, 2).is_err());
    }

    #[test]
    fn bpe_corpus_batches_are_windows_of_its_ids() {
        let text = built_in_text();
        let tk = Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap(), 400).unwrap();
        let c = Corpus::new(&text, "built-in", tk.clone()).unwrap();
        let ids = tk.encode(&text).unwrap();
        assert_eq!(c.len(), ids.len());
        assert!(c.len() < text.len(), "{} tokens for {} bytes", c.len(), text.len());
        c.check(64).unwrap();
        let (x, y) = c.train_batch(3, 5, 2, 64).unwrap();
        // Each window is a run of the corpus's ids, the targets shifted by one.
        let at = ids.windows(64).position(|w| w == &x[..64]).expect("a window of the ids");
        assert_eq!(&y[..64], &ids[at + 1..at + 65]);
        let (vx, _) = c.validation_batch(0, 1, 1, 64).unwrap();
        assert_eq!(&vx[..], &ids[c.train_len()..c.train_len() + 64]);
    }

    #[test]
    fn small_or_empty_text_is_an_error() {
        assert!(Corpus::from_bytes(vec![], "empty").check(8).is_err());
        assert!(Corpus::from_bytes(vec![b'a'; 20], "tiny").check(8).unwrap_err().to_string().contains("too little"));
        assert!(Corpus::built_in().check(256).is_ok());
    }
}
