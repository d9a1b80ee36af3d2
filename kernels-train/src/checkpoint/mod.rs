//! Checkpoints: one safetensors file with the weights (names and layouts in [`crate::params`],
//! loadable by PyTorch's `safetensors.torch.load_file`), the optimizer's state — AdamW's f32
//! moments (`optim.m.<name>`, `optim.v.<name>`), or AdamW-8bit's codes and block scales
//! (`optim.mq.<name>`, `optim.vq.<name>`: U8, one code per value; `optim.qscale.<name>`: F32
//! [blocks, 2]) — the loss history (`history.train`, `history.validation`:
//! [n, 2] of (step, loss)), and metadata: `format`, `config` (the model shape as JSON), `optimizer`
//! (`adamw` or `adamw-8bit`; `adamw` where absent), `step` (steps done), `seed`, `tokenizer` (`bytes`, or the tokenizer's `tokenizer.json` text:
//! [`Tokenizer::record`]) and `checksum`.
//!
//! [`to_bytes`] and [`from_bytes`] encode and decode a checkpoint in memory (every target,
//! the browser's too); the files (`save`, `load`, `Destination`) are native only.
//!
//! What is guaranteed (each tested):
//! - **Integrity.** `checksum` is a CRC-32 over every other metadata entry and every tensor's
//!   name, dtype, shape and bytes; [`load`] verifies it before it uses anything, and bounds the
//!   metadata ([`ModelConfig::validate`], the step, the tensor count) before it allocates: a
//!   damaged file is an [`Error::Corrupt`], never a panic, never silently different values.
//! - **Atomic, durable saves** (`write`): the file is written under a unique temporary name
//!   beside the target (`.NAME.partial-PID-N`), flushed to disk (`fsync`), renamed over the
//!   target, and the directory is flushed too. A crash or a kill leaves either the old file
//!   or the new one, and at most a temporary file that is never read as a checkpoint and is
//!   removed by the next run on that checkpoint ([`Destination::open`]).
//! - **Never a non-finite checkpoint.** [`save`] refuses a state with a NaN or an infinity
//!   (an [`Error::Diverged`]); [`save_diverged`] is the only way to write one, and
//!   [`Destination`] puts it at `NAME.diverged.safetensors`, never over the checkpoint.
//! - **One run per checkpoint** ([`Destination`]): an advisory lock on `.NAME.lock` beside it,
//!   held for the whole run; a second run on the same checkpoint fails with [`Error::Busy`].

#[cfg(not(target_arch = "wasm32"))]
mod dest;
mod read;
mod write;

#[cfg(not(target_arch = "wasm32"))]
pub use dest::{Destination, check_path, check_tokenizer_path, curve_path, diverged_path, tokenizer_path};
pub use read::from_bytes;
#[cfg(not(target_arch = "wasm32"))]
pub use read::load;
pub use write::to_bytes;
#[cfg(not(target_arch = "wasm32"))]
pub use write::{save, save_diverged, write_atomic};

use crate::Error;
use crate::config::ModelConfig;
use crate::model::Tensors;
use crate::optim::{Moments8, OptimizerKind};
use crate::params::ModelWeights;
use crate::tokenizer::Tokenizer;
use std::collections::BTreeMap;

/// The format tag in the metadata (3: with the tokenizer).
pub const FORMAT: &str = "kernels-train/3";

/// The previous format (a checksum, no tokenizer: bytes), still read.
pub const FORMAT_BYTES_ONLY: &str = "kernels-train/2";

/// Largest step count a checkpoint may record (the optimizer's bias correction takes the step
/// as an `i32`).
pub const MAX_STEP: u64 = i32::MAX as u64 - 1;

/// Everything needed to resume exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// The model shape.
    pub model: ModelConfig,
    /// Steps done.
    pub step: u64,
    /// The seed the run started from (batches are drawn from it and the step).
    pub seed: u64,
    /// The parameters.
    pub params: Tensors,
    /// AdamW first moments (each tensor empty when `moments8` holds the state).
    pub m: Tensors,
    /// AdamW second moments (each tensor empty when `moments8` holds the state).
    pub v: Tensors,
    /// AdamW-8bit's state (runs with [`OptimizerKind::AdamW8bit`]; `None` for AdamW).
    pub moments8: Option<ModelWeights<Moments8>>,
    /// The loss scaler's state (runs in mixed precision; `None` in f32). Stored as the
    /// metadata entries `loss_scale`, `loss_scale_clean_steps`, `loss_scale_skipped`.
    pub scaler: Option<crate::scaler::ScalerState>,
    /// (step, training loss).
    pub train_history: Vec<(usize, f32)>,
    /// (step, validation loss).
    pub val_history: Vec<(usize, f32)>,
    /// The tokenizer the model reads (its vocabulary, padded, is `model.vocab`).
    pub tokenizer: Tokenizer,
}

impl Checkpoint {
    /// The optimizer the run used.
    pub fn optimizer(&self) -> OptimizerKind {
        if self.moments8.is_some() { OptimizerKind::AdamW8bit } else { OptimizerKind::AdamW }
    }

    /// The first tensor holding a NaN or an infinity (`None`: all finite).
    pub fn non_finite(&self) -> Option<String> {
        let names = crate::params::layout(&self.model);
        if let Some(q) = &self.moments8 {
            for (p, t) in names.iter().zip(q.iter()) {
                if let Some(x) = t.qscale.iter().find(|x| !x.is_finite()) {
                    return Some(format!("optim.qscale.{} holds {x}", p.name));
                }
            }
        }
        for (prefix, tensors) in [("", &self.params), ("optim.m.", &self.m), ("optim.v.", &self.v)] {
            for (p, t) in names.iter().zip(tensors.iter()) {
                if let Some(x) = t.iter().find(|x| !x.is_finite()) {
                    return Some(format!("{prefix}{} holds {x}", p.name));
                }
            }
        }
        None
    }
}

fn config_json(c: &ModelConfig) -> String {
    serde_json::json!({
        "vocab": c.vocab, "dim": c.dim, "layers": c.layers, "heads": c.heads, "kv_heads": c.kv_heads,
        "ffn_hidden": c.ffn_hidden, "seq_len": c.seq_len, "norm_eps": c.norm_eps, "rope_base": c.rope_base,
    })
    .to_string()
}

fn parse_config(s: &str) -> Result<ModelConfig, Error> {
    let v: serde_json::Value =
        serde_json::from_str(s).map_err(|e| Error::Corrupt(format!("bad config metadata: {e}")))?;
    let u = |k: &str| {
        v[k].as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| Error::Corrupt(format!("config metadata lacks `{k}` (an unsigned integer)")))
    };
    let f =
        |k: &str| v[k].as_f64().map(|x| x as f32).ok_or_else(|| Error::Corrupt(format!("config metadata lacks `{k}`")));
    Ok(ModelConfig {
        vocab: u("vocab")?,
        dim: u("dim")?,
        layers: u("layers")?,
        heads: u("heads")?,
        kv_heads: u("kv_heads")?,
        ffn_hidden: u("ffn_hidden")?,
        seq_len: u("seq_len")?,
        norm_eps: f("norm_eps")?,
        rope_base: f("rope_base")?,
    })
}

/// The metadata entries the checksum covers (all but `checksum`).
fn metadata(c: &Checkpoint) -> BTreeMap<String, String> {
    let mut meta = BTreeMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("config".to_string(), config_json(&c.model)),
        ("step".to_string(), c.step.to_string()),
        ("seed".to_string(), c.seed.to_string()),
        ("optimizer".to_string(), c.optimizer().name().to_string()),
        ("tokenizer".to_string(), c.tokenizer.record().to_string()),
    ]);
    if let Some(s) = &c.scaler {
        meta.insert("loss_scale".to_string(), s.scale.to_string());
        meta.insert("loss_scale_clean_steps".to_string(), s.clean_steps.to_string());
        meta.insert("loss_scale_skipped".to_string(), s.skipped.to_string());
    }
    meta
}

/// The loss scaler's state from the metadata (`None` when absent: an f32 run).
fn parse_scaler(meta: &std::collections::HashMap<String, String>) -> Result<Option<crate::scaler::ScalerState>, Error> {
    let Some(scale) = meta.get("loss_scale") else { return Ok(None) };
    let bad = |k: &str| Error::Corrupt(format!("the metadata's `{k}` is not valid"));
    let count = |k: &str| meta.get(k).and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| bad(k));
    let state = crate::scaler::ScalerState {
        scale: scale.parse::<f32>().map_err(|_| bad("loss_scale"))?,
        clean_steps: count("loss_scale_clean_steps")?,
        skipped: count("loss_scale_skipped")?,
        last_skipped: false,
    };
    state.check().map_err(|e| Error::Corrupt(format!("the metadata's loss scaler: {e}")))?;
    Ok(Some(state))
}

/// One tensor as the checksum sees it.
struct TensorBytes<'a> {
    name: &'a str,
    dtype: &'a str,
    shape: &'a [usize],
    data: &'a [u8],
}

/// CRC-32 over the metadata entries (but `checksum`) and the tensors, each sorted by name, every
/// field length-prefixed: `crc32:` and 8 hex digits.
fn checksum<'a>(
    meta: impl IntoIterator<Item = (&'a String, &'a String)>,
    tensors: impl IntoIterator<Item = TensorBytes<'a>>,
) -> String {
    let mut h = crc32fast::Hasher::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let mut meta: Vec<_> = meta.into_iter().filter(|(k, _)| k.as_str() != "checksum").collect();
    meta.sort();
    for (k, v) in meta {
        field(k.as_bytes());
        field(v.as_bytes());
    }
    let mut tensors: Vec<_> = tensors.into_iter().collect();
    tensors.sort_by(|a, b| a.name.cmp(b.name));
    for t in tensors {
        field(t.name.as_bytes());
        field(t.dtype.as_bytes());
        let dims: Vec<u8> = t.shape.iter().flat_map(|&d| (d as u64).to_le_bytes()).collect();
        field(&dims);
        field(t.data);
    }
    format!("crc32:{:08x}", h.finalize())
}

/// Checks that a checkpoint's tokenizer is the one the user asked for (`None`: none asked,
/// the checkpoint's is used).
pub fn check_tokenizer(found: &Tokenizer, wanted: Option<&Tokenizer>) -> Result<(), Error> {
    match wanted {
        Some(w) if w != found => Err(Error::Checkpoint(format!(
            "the checkpoint was trained with another tokenizer: {} (checkpoint) vs {} (--tokenizer){}; omit --tokenizer to use the checkpoint's",
            found.describe(),
            w.describe(),
            if w.describe() == found.describe() { ", with other tokens or merges" } else { "" }
        ))),
        _ => Ok(()),
    }
}

/// Checks that a checkpoint fits the model the user asked for.
pub fn check_compatible(found: &ModelConfig, wanted: &ModelConfig) -> Result<(), Error> {
    if found == wanted {
        return Ok(());
    }
    let mut diffs = Vec::new();
    let mut d = |k: &str, a: String, b: String| {
        if a != b {
            diffs.push(format!("{k} {a} (checkpoint) vs {b} (asked)"));
        }
    };
    d("dim", found.dim.to_string(), wanted.dim.to_string());
    d("layers", found.layers.to_string(), wanted.layers.to_string());
    d("heads", found.heads.to_string(), wanted.heads.to_string());
    d("kv heads", found.kv_heads.to_string(), wanted.kv_heads.to_string());
    d("ffn width", found.ffn_hidden.to_string(), wanted.ffn_hidden.to_string());
    d("sequence length", found.seq_len.to_string(), wanted.seq_len.to_string());
    d("vocab", found.vocab.to_string(), wanted.vocab.to_string());
    d("norm eps", found.norm_eps.to_string(), wanted.norm_eps.to_string());
    d("rope base", found.rope_base.to_string(), wanted.rope_base.to_string());
    Err(Error::Checkpoint(format!(
        "the checkpoint is for another model configuration: {}; pass the same model flags (or omit them: --resume reads the shape from the checkpoint)",
        diffs.join(", ")
    )))
}

#[cfg(test)]
mod tests;
