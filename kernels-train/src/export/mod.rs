//! The model in other programs' formats: a Hugging Face `transformers` folder ([`hf`]: written
//! by `--export-hf`, read back by `--import-hf`) and a GGUF file for llama.cpp ([`gguf`]:
//! `--export-gguf`).
//!
//! Two conventions differ from this trainer's and are converted here, never left to the reader:
//! - **Rotary pairs.** The trainer (like Meta's LLaMA code and llama.cpp) rotates interleaved
//!   pairs (2i, 2i+1) of each head; `transformers`' Llama rotates (i, i + Dh/2) (`rotate_half`).
//!   The HF export reorders the rows of Wq and Wk within each head so that row i takes our row
//!   2i and row i + Dh/2 our row 2i+1 ([`to_half_split`]); the attention scores, which only see
//!   q·k, are unchanged, and HF's rotation of the reordered rows is ours of the original ones.
//!   GGUF keeps our order (llama.cpp's `llama` architecture rotates interleaved pairs).
//! - **Vocabulary padding.** The model's vocabulary is the tokenizer's padded to a multiple of
//!   64 ([`crate::tokenizer::VOCAB_MULTIPLE`]); both exports keep only the tokenizer's rows, so
//!   the file's vocabulary is the tokenizer's and no program can produce an id the tokenizer
//!   lacks. The logits of real tokens are unchanged; the padding rows, never a target, only
//!   took a (trained-down) share of the softmax.
//!
//! Both exports are written atomically ([`crate::checkpoint::write_atomic`]).

pub mod gguf;
pub mod hf;
mod vocab;

pub use vocab::{byte_level_char, bytes_tokenizer_json, token_byte_lengths};

use crate::Error;
use crate::config::ModelConfig;
use crate::model::Tensors;
use crate::tokenizer::Tokenizer;

/// The element type of exported weight matrices (`--export-dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExportDtype {
    /// IEEE single precision: the checkpoint's values exactly.
    #[default]
    F32,
    /// IEEE half precision (round to nearest even; values beyond ±65504 are an error). In GGUF
    /// the RMSNorm gains stay F32, as llama.cpp's converter writes them.
    F16,
}

impl std::str::FromStr for ExportDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<ExportDtype, String> {
        match s {
            "f32" | "F32" | "float32" => Ok(ExportDtype::F32),
            "f16" | "F16" | "float16" => Ok(ExportDtype::F16),
            _ => Err(format!("`{s}`: expected f32 or f16")),
        }
    }
}

/// A model as the exports take it and the import gives it: shape, weights (the trainer's names
/// and layouts, the padded vocabulary) and tokenizer.
#[derive(Clone, Debug, PartialEq)]
pub struct Exported {
    /// The shape (its `vocab` is the tokenizer's padded vocabulary).
    pub model: ModelConfig,
    /// The weights in the trainer's layout ([`crate::params`]).
    pub params: Tensors,
    /// The tokenizer the model reads.
    pub tokenizer: Tokenizer,
}

impl Exported {
    /// Checks that the tensors have the model's shapes and the vocabulary is the tokenizer's,
    /// padded; every value must be finite.
    pub fn check(&self) -> Result<(), Error> {
        self.model.validate()?;
        if self.model.vocab != self.tokenizer.model_vocab() {
            return Err(Error::Config(format!(
                "a model vocabulary of {} for the tokenizer {}, which needs {}",
                self.model.vocab,
                self.tokenizer.describe(),
                self.tokenizer.model_vocab()
            )));
        }
        let layout = crate::params::layout(&self.model);
        if self.params.layers.len() != layout.layers.len() {
            return Err(Error::Config(format!(
                "{} layers of weights for a model of {}",
                self.params.layers.len(),
                layout.layers.len()
            )));
        }
        for (p, t) in layout.iter().zip(self.params.iter()) {
            if t.len() != p.elements() {
                return Err(Error::Config(format!("{} holds {} values, not {:?}", p.name, t.len(), p.shape)));
            }
            if let Some(x) = t.iter().find(|x| !x.is_finite()) {
                return Err(Error::Diverged(format!("{} holds {x}: a model with it cannot be exported", p.name)));
            }
        }
        Ok(())
    }

    /// The embedding's rows that hold tokens (the tokenizer's), without the padding.
    pub(crate) fn token_rows(&self) -> &[f32] {
        &self.params.embedding[..self.tokenizer.vocab_size() * self.model.dim]
    }
}

/// Reorders the rows of a query or key projection (`[heads·Dh, D]`, the trainer's interleaved
/// rotary pairs) into `transformers`' half-split order: within each head, row i ← row 2i and row
/// i + Dh/2 ← row 2i+1.
pub fn to_half_split(w: &[f32], heads: usize, dh: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for h in 0..heads {
        for i in 0..dh / 2 {
            for (to, from) in [(i, 2 * i), (i + dh / 2, 2 * i + 1)] {
                let (t, f) = ((h * dh + to) * cols, (h * dh + from) * cols);
                out[t..t + cols].copy_from_slice(&w[f..f + cols]);
            }
        }
    }
    out
}

/// The inverse of [`to_half_split`].
pub fn from_half_split(w: &[f32], heads: usize, dh: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for h in 0..heads {
        for i in 0..dh / 2 {
            for (from, to) in [(i, 2 * i), (i + dh / 2, 2 * i + 1)] {
                let (t, f) = ((h * dh + to) * cols, (h * dh + from) * cols);
                out[t..t + cols].copy_from_slice(&w[f..f + cols]);
            }
        }
    }
    out
}

/// `values` as little-endian IEEE halves; a value beyond f16's range is an error naming the
/// tensor (rounding it to infinity would export a broken model).
pub(crate) fn f16_bytes(values: &[f32], name: &str) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(values.len() * 2);
    for &x in values {
        let h = half::f16::from_f32(x);
        if h.is_infinite() {
            return Err(Error::Config(format!(
                "{name} holds {x}, beyond f16's ±65504: export it with --export-dtype f32"
            )));
        }
        out.extend_from_slice(&h.to_le_bytes());
    }
    Ok(out)
}

/// A JSON number for an f32 setting, written as its shortest decimal form (`0.00001`, not
/// `9.999999747378752e-6`), which reads back as the same f32.
pub(crate) fn json_f32(x: f32) -> serde_json::Value {
    let shortest: f64 = x.to_string().parse().unwrap_or(x as f64);
    serde_json::Number::from_f64(shortest).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_split_moves_pairs_and_inverts() {
        // 2 heads of 4 rows, 3 columns: row r holds r·10 + c.
        let (heads, dh, cols) = (2, 4, 3);
        let w: Vec<f32> = (0..heads * dh).flat_map(|r| (0..cols).map(move |c| (r * 10 + c) as f32)).collect();
        let s = to_half_split(&w, heads, dh, cols);
        let rows: Vec<f32> = s.chunks(cols).map(|r| r[0] / 10.0).collect();
        assert_eq!(rows, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
        assert_eq!(from_half_split(&s, heads, dh, cols), w);
    }

    #[test]
    fn settings_are_written_in_their_shortest_form() {
        assert_eq!(json_f32(1e-5).to_string(), "0.00001");
        assert_eq!(json_f32(10000.0).to_string(), "10000.0");
        assert_eq!(json_f32(1e-5).as_f64().map(|x| x as f32), Some(1e-5));
        assert!(f16_bytes(&[1.0, -2.5], "w").unwrap() == [0x00, 0x3c, 0x00, 0xc1]);
        assert!(f16_bytes(&[1e6], "w").unwrap_err().to_string().contains("--export-dtype f32"));
    }
}
