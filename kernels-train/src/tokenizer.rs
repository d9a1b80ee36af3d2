//! Tokenizers: bytes (vocabulary 256, each byte its own token), or any tokenizer Hugging Face's
//! `tokenizers` library reads from a standard `tokenizer.json` — a byte-level BPE trained here on
//! the training text ([`Tokenizer::train_bpe`]), or an existing one such as GPT-2's.
//!
//! The model's vocabulary is the tokenizer's rounded up to a multiple of [`VOCAB_MULTIPLE`]
//! ([`Tokenizer::model_vocab`]: GPT-2's 50257 becomes 50304): the head's `[rows, V]` products
//! and the embedding's gradient then fill whole 64-wide output tiles. The padding rows are never
//! a target, so training drives their logits down; sampling never picks them
//! ([`Tokenizer::vocab_size`] bounds it).
//!
//! A tokenizer is identified by its canonical JSON (the library's compact serialisation), which
//! checkpoints record in their metadata ([`Tokenizer::record`]) under the checksum, so a resumed
//! run or a sample uses exactly the tokenizer the weights were trained with.

use crate::Error;

/// The model's vocabulary is the tokenizer's rounded up to a multiple of this.
pub const VOCAB_MULTIPLE: usize = 64;

/// Largest vocabulary `bpe:N` trains (GPT-2 has 50257 tokens, LLaMA 3 128256).
pub const MAX_BPE_VOCAB: usize = 1 << 20;

/// What a checkpoint records for the byte tokenizer.
const BYTES: &str = "bytes";

/// Bytes of text encoded per piece; pieces end after a newline (the library's batch encoding
/// runs them in parallel natively).
const PIECE: usize = 1 << 16;

/// A tokenizer: bytes, or a `tokenizers` tokenizer with its canonical JSON.
#[derive(Clone)]
pub struct Tokenizer {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Bytes,
    Hf {
        tk: Box<tokenizers::Tokenizer>,
        /// The canonical serialisation: what checkpoints record and what identifies it.
        json: String,
        /// Tokens, added ones included.
        vocab: usize,
    },
}

impl PartialEq for Tokenizer {
    fn eq(&self, other: &Tokenizer) -> bool {
        self.record() == other.record()
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Tokenizer {
    /// Bytes: token `b` is byte `b`.
    pub fn bytes() -> Tokenizer {
        Tokenizer { kind: Kind::Bytes }
    }

    /// Whether this is the byte tokenizer.
    pub fn is_bytes(&self) -> bool {
        matches!(self.kind, Kind::Bytes)
    }

    /// A tokenizer from the text of a `tokenizer.json`; `shown` names where it came from.
    pub fn from_json(json: &str, shown: &str) -> Result<Tokenizer, Error> {
        let tk: tokenizers::Tokenizer = json.parse().map_err(|e| {
            Error::Config(format!("{shown} is not a tokenizer.json that Hugging Face's tokenizers library reads: {e}"))
        })?;
        Tokenizer::from_hf(tk, shown)
    }

    fn from_hf(tk: tokenizers::Tokenizer, shown: &str) -> Result<Tokenizer, Error> {
        // The library serialises a vocabulary whose ids have gaps with a `println!` (which would
        // corrupt the program's output, or panic on a closed stdout); the model's ids must run
        // from 0 without gaps anyway.
        let ids = tokenizers::Model::get_vocab(tk.get_model());
        if let Some(max) = ids.values().max()
            && *max as usize + 1 != ids.len()
        {
            return Err(Error::Config(format!(
                "the tokenizer of {shown} has {} tokens with ids up to {max}: its ids must run from 0 without gaps",
                ids.len()
            )));
        }
        let json = tk
            .to_string(false)
            .map_err(|e| Error::Config(format!("cannot serialise the tokenizer of {shown}: {e}")))?;
        let vocab = tk.get_vocab_size(true);
        if vocab == 0 || vocab > crate::config::MAX_WIDTH {
            return Err(Error::Config(format!(
                "the tokenizer of {shown} has {vocab} tokens; this trainer takes 1 to {}",
                crate::config::MAX_WIDTH
            )));
        }
        Ok(Tokenizer { kind: Kind::Hf { tk: Box::new(tk), json, vocab } })
    }

    /// Reads a `tokenizer.json` file: a regular file of at most
    /// [`crate::files::MAX_TOKENIZER_BYTES`], UTF-8.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &std::path::Path) -> Result<Tokenizer, Error> {
        let bytes = crate::files::read_regular(path, crate::files::MAX_TOKENIZER_BYTES, "the tokenizer")
            .map_err(Error::Config)?;
        let json = String::from_utf8(bytes)
            .map_err(|e| Error::Config(format!("the tokenizer {} is not UTF-8 text: {e}", path.display())))?;
        Tokenizer::from_json(&json, &path.display().to_string())
    }

    /// Trains a byte-level BPE of up to `vocab` tokens on `text` (GPT-2's scheme: its
    /// pre-tokenizing regex, the 256 byte symbols as the initial alphabet, no prefix space, so
    /// decoding gives back the text exactly). The result may hold fewer tokens when the text runs
    /// out of pairs to merge. It prints nothing: the library's progress bars print empty lines
    /// to stdout with `println!`, which panics when stdout is a closed pipe, so they stay off and
    /// callers show their own progress.
    pub fn train_bpe(text: &str, vocab: usize) -> Result<Tokenizer, Error> {
        use tokenizers::models::TrainerWrapper;
        use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        if !(257..=MAX_BPE_VOCAB).contains(&vocab) {
            return Err(Error::Config(format!(
                "a byte-level BPE needs 257 to {MAX_BPE_VOCAB} tokens (the 256 bytes and at least one merge); {vocab} asked"
            )));
        }
        serial_in_the_browser();
        let level = ByteLevel::default().add_prefix_space(false).trim_offsets(false);
        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .vocab_size(vocab)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build()
            .into();
        let mut tk = tokenizers::Tokenizer::new(BPE::default());
        tk.with_pre_tokenizer(Some(level));
        tk.with_decoder(Some(level));
        tk.train(&mut trainer, pieces(text))
            .map_err(|e| Error::Data(format!("training the BPE tokenizer failed: {e}")))?;
        Tokenizer::from_hf(tk, "the trained BPE")
    }

    /// Tokens the tokenizer produces (ids are below this).
    pub fn vocab_size(&self) -> usize {
        match &self.kind {
            Kind::Bytes => 256,
            Kind::Hf { vocab, .. } => *vocab,
        }
    }

    /// The model's vocabulary: [`Tokenizer::vocab_size`] rounded up to a multiple of
    /// [`VOCAB_MULTIPLE`].
    pub fn model_vocab(&self) -> usize {
        self.vocab_size().next_multiple_of(VOCAB_MULTIPLE)
    }

    /// One phrase for messages: `bytes (256 tokens)` or `BPE (512 tokens)`.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Bytes => "bytes (256 tokens)".into(),
            Kind::Hf { tk, vocab, .. } => {
                let model = match tk.get_model() {
                    tokenizers::models::ModelWrapper::BPE(_) => "BPE",
                    tokenizers::models::ModelWrapper::WordPiece(_) => "WordPiece",
                    tokenizers::models::ModelWrapper::WordLevel(_) => "WordLevel",
                    tokenizers::models::ModelWrapper::Unigram(_) => "Unigram",
                };
                format!("{model} ({vocab} tokens)")
            }
        }
    }

    /// The standard `tokenizer.json` text (`None` for bytes, which have none).
    pub fn json(&self) -> Option<&str> {
        match &self.kind {
            Kind::Bytes => None,
            Kind::Hf { json, .. } => Some(json),
        }
    }

    /// What a checkpoint records: `bytes`, or the tokenizer's canonical JSON.
    pub fn record(&self) -> &str {
        self.json().unwrap_or(BYTES)
    }

    /// The tokenizer a checkpoint recorded ([`Tokenizer::record`]).
    pub fn from_record(record: &str) -> Result<Tokenizer, Error> {
        if record == BYTES {
            Ok(Tokenizer::bytes())
        } else {
            Tokenizer::from_json(record, "the checkpoint's tokenizer")
        }
    }

    /// The token ids of `text`. Bytes take any bytes; other tokenizers need UTF-8 text. Every id
    /// is checked against [`Tokenizer::vocab_size`].
    pub fn encode(&self, text: &[u8]) -> Result<Vec<u32>, Error> {
        if self.is_bytes() {
            return Ok(text.iter().map(|&b| b as u32).collect());
        }
        let text = std::str::from_utf8(text).map_err(not_utf8)?;
        self.encode_pieces(pieces(text).collect())
    }

    /// The ids of `pieces`, encoded in parallel (natively) and concatenated.
    fn encode_pieces(&self, pieces: Vec<&str>) -> Result<Vec<u32>, Error> {
        let Kind::Hf { tk, vocab, .. } = &self.kind else {
            return Ok(pieces.iter().flat_map(|p| p.bytes().map(u32::from)).collect());
        };
        serial_in_the_browser();
        let bytes: usize = pieces.iter().map(|p| p.len()).sum();
        let encodings = tk
            .encode_batch_fast(pieces, false)
            .map_err(|e| Error::Data(format!("the tokenizer cannot encode the text: {e}")))?;
        let mut ids = Vec::with_capacity(bytes / 3);
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
        }
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= *vocab) {
            return Err(Error::Data(format!("the tokenizer produced the id {bad}, outside its {vocab} tokens")));
        }
        Ok(ids)
    }

    /// The text of `ids` (bytes that are not UTF-8 come out as U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String, Error> {
        match &self.kind {
            Kind::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&i| i.min(255) as u8).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Kind::Hf { tk, .. } => {
                tk.decode(ids, false).map_err(|e| Error::Data(format!("the tokenizer cannot decode {ids:?}: {e}")))
            }
        }
    }
}

/// In a browser (no threads) the library's loops run serially instead of through rayon's
/// single-thread fallback.
fn serial_in_the_browser() {
    #[cfg(target_arch = "wasm32")]
    tokenizers::parallelism::set_parallelism(false);
}

fn not_utf8(e: std::str::Utf8Error) -> Error {
    Error::Data(format!("the text is not UTF-8 ({e}): a BPE tokenizer needs text; use --tokenizer bytes"))
}

/// Where the first piece of `rest` ends: after about [`PIECE`] bytes (moved on to a character
/// boundary), after the last newline within them where there is one and more text follows.
fn piece_end(rest: &[u8]) -> usize {
    let mut end = rest.len().min(PIECE);
    // A UTF-8 continuation byte is not a character boundary.
    while end < rest.len() && rest[end] & 0xC0 == 0x80 {
        end += 1;
    }
    if end < rest.len()
        && let Some(nl) = rest[..end].iter().rposition(|&b| b == b'\n')
    {
        end = nl + 1;
    }
    end
}

/// `text` in pieces of about [`PIECE`] bytes, each ending after a newline where there is one.
fn pieces(text: &str) -> impl Iterator<Item = &str> + Send {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (piece, tail) = rest.split_at(piece_end(rest.as_bytes()));
        rest = tail;
        Some(piece)
    })
}

/// Bytes of text a [`PieceStream`] is best given at a time.
#[cfg(not(target_arch = "wasm32"))]
pub const BLOCK: usize = 16 << 20;

/// A text given block by block, encoded into exactly the ids [`Tokenizer::encode`] gives for
/// the whole text (the same pieces, cut as soon as the bytes that decide them have arrived), so
/// a file larger than memory is tokenized as if it were read whole.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Default)]
pub struct PieceStream {
    pending: Vec<u8>,
}

#[cfg(not(target_arch = "wasm32"))]
impl PieceStream {
    /// An empty stream.
    pub fn new() -> PieceStream {
        PieceStream::default()
    }

    /// Takes the next `bytes` of the text; returns the ids of the pieces they complete.
    pub fn push(&mut self, tk: &Tokenizer, bytes: &[u8]) -> Result<Vec<u32>, Error> {
        if tk.is_bytes() {
            return Ok(bytes.iter().map(|&b| b as u32).collect());
        }
        self.pending.extend_from_slice(bytes);
        // A piece is decided by its next PIECE bytes and the up to 3 bytes ending a character.
        let mut cuts = Vec::new();
        let mut at = 0;
        while self.pending.len() - at > PIECE + 3 {
            let end = piece_end(&self.pending[at..]);
            cuts.push(at..at + end);
            at += end;
        }
        let pieces = cuts.into_iter().map(|r| std::str::from_utf8(&self.pending[r])).collect::<Result<Vec<_>, _>>();
        let ids = tk.encode_pieces(pieces.map_err(not_utf8)?)?;
        self.pending.drain(..at);
        Ok(ids)
    }

    /// The ids of the rest of the text.
    pub fn finish(self, tk: &Tokenizer) -> Result<Vec<u32>, Error> {
        if tk.is_bytes() { Ok(Vec::new()) } else { tk.encode(&self.pending) }
    }
}

/// The `--tokenizer` flag: `bytes`, `bpe:N`, or a `tokenizer.json` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenizerChoice {
    /// Byte tokens.
    Bytes,
    /// Train an N-token byte-level BPE on the training text.
    Bpe(usize),
    /// An existing `tokenizer.json`.
    File(std::path::PathBuf),
}

impl std::str::FromStr for TokenizerChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<TokenizerChoice, String> {
        if s == BYTES {
            return Ok(TokenizerChoice::Bytes);
        }
        if let Some(n) = s.strip_prefix("bpe:") {
            let n: usize = n.parse().map_err(|_| format!("`{s}`: bpe:N takes a number of tokens, e.g. bpe:512"))?;
            if !(257..=MAX_BPE_VOCAB).contains(&n) {
                return Err(format!(
                    "`{s}`: a byte-level BPE needs 257 to {MAX_BPE_VOCAB} tokens (the 256 bytes and at least one merge)"
                ));
            }
            return Ok(TokenizerChoice::Bpe(n));
        }
        if s.ends_with(".json") {
            return Ok(TokenizerChoice::File(s.into()));
        }
        Err(format!("`{s}`: expected `bytes`, `bpe:N` (N tokens) or a tokenizer.json file"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_text_and_end_at_newlines() {
        let text = "ab\ncd\n".repeat(30_000) + "é tail";
        let parts: Vec<&str> = pieces(&text).collect();
        assert!(parts.len() > 2, "{}", parts.len());
        assert_eq!(parts.concat(), text);
        for p in &parts[..parts.len() - 1] {
            assert!(p.ends_with('\n') && p.len() <= PIECE);
        }
        assert_eq!(pieces("").count(), 0);
        // No newline at all: cut at a character boundary.
        let wide = "é".repeat(PIECE);
        assert_eq!(pieces(&wide).collect::<Vec<_>>().concat(), wide);
    }

    #[test]
    fn choices_parse_and_bad_ones_say_why() {
        assert_eq!("bytes".parse::<TokenizerChoice>(), Ok(TokenizerChoice::Bytes));
        assert_eq!("bpe:512".parse::<TokenizerChoice>(), Ok(TokenizerChoice::Bpe(512)));
        assert_eq!(
            "gpt2/tokenizer.json".parse::<TokenizerChoice>(),
            Ok(TokenizerChoice::File("gpt2/tokenizer.json".into()))
        );
        assert!("bpe:256".parse::<TokenizerChoice>().unwrap_err().contains("257"));
        assert!("bpe:x".parse::<TokenizerChoice>().unwrap_err().contains("number of tokens"));
        assert!("words".parse::<TokenizerChoice>().unwrap_err().contains("expected"));
    }

    #[test]
    fn bytes_round_trip_and_pad_to_256() {
        let t = Tokenizer::bytes();
        assert_eq!((t.vocab_size(), t.model_vocab()), (256, 256));
        let text = "héllo\n".as_bytes();
        let ids = t.encode(text).unwrap();
        assert_eq!(ids, text.iter().map(|&b| b as u32).collect::<Vec<_>>());
        assert_eq!(t.decode(&ids).unwrap().as_bytes(), text);
        assert_eq!(Tokenizer::from_record(t.record()).unwrap(), t);
    }

    #[test]
    fn bpe_round_trips_the_built_in_corpus_and_is_recorded_exactly() {
        let text = crate::data::built_in_text();
        let text = std::str::from_utf8(&text).unwrap();
        let t = Tokenizer::train_bpe(text, 512).unwrap();
        assert_eq!((t.vocab_size(), t.model_vocab()), (512, 512));
        let ids = t.encode(text.as_bytes()).unwrap();
        // 512 tokens take this corpus (the repository's own prose, Rust and WGSL, so the ratio
        // moves with every document) to about half its bytes, 0.50 within a few thousandths;
        // merges that stopped working would leave it near 1 (one token a byte).
        assert!(ids.len() * 100 < text.len() * 55, "{} tokens for {} bytes", ids.len(), text.len());
        assert_eq!(t.decode(&ids).unwrap(), text);
        // The record gives back the same tokenizer, encoding the same ids.
        let back = Tokenizer::from_record(t.record()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.encode(text.as_bytes()).unwrap(), ids);
        // Not UTF-8: an error that names the way out.
        assert!(t.encode(&[0xff, 0xfe]).unwrap_err().to_string().contains("--tokenizer bytes"));
        // A vocabulary that is not a multiple of 64 is padded.
        let small = Tokenizer::train_bpe(text, 300).unwrap();
        assert_eq!((small.vocab_size(), small.model_vocab()), (300, 320));
        assert_ne!(small, t);
    }

    #[test]
    fn a_text_streamed_in_blocks_encodes_as_the_whole_text() {
        let mut text = crate::data::built_in_text();
        // A long line without newlines and multi-byte characters across block boundaries.
        text.extend("é€𝄞 no newline here ".repeat(9000).bytes());
        text.extend(b"\n  indented\n\n\tend");
        let tk = Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap(), 320).unwrap();
        let want = tk.encode(&text).unwrap();
        for block in [1000, PIECE - 1, PIECE + 5, 3 * PIECE + 17] {
            let mut stream = PieceStream::new();
            let mut got = Vec::new();
            for b in text.chunks(block) {
                got.extend(stream.push(&tk, b).unwrap());
            }
            got.extend(stream.finish(&tk).unwrap());
            assert!(got == want, "blocks of {block}: other ids than the whole text's");
        }
        let mut stream = PieceStream::new();
        let bytes: Vec<u32> = stream.push(&Tokenizer::bytes(), b"ab").unwrap();
        assert_eq!((bytes, stream.finish(&Tokenizer::bytes()).unwrap()), (vec![97, 98], vec![]));
        let mut bad = PieceStream::new();
        let e = bad.push(&tk, &[0xff; PIECE + 10]).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn bad_json_is_a_config_error_naming_the_source() {
        let e = Tokenizer::from_json("{\"not\": 1}", "x.json").unwrap_err().to_string();
        assert!(e.contains("x.json is not a tokenizer.json"), "{e}");
    }
}
