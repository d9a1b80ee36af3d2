//! GGUF version 3 for llama.cpp's `llama` architecture (`--export-gguf FILE`).
//!
//! The file: `GGUF`, version 3, the tensor and metadata counts; the metadata (`general.*`, the
//! `llama.*` hyperparameters llama.cpp reads, the vocabulary as `tokenizer.ggml.*` in its `gpt2`
//! byte-level BPE form); the tensor descriptions (name, dimensions innermost first, type,
//! offset); then the tensors, each aligned to [`ALIGNMENT`] bytes. Names are llama.cpp's
//! (`token_embd`, `blk.N.attn_q`, …, `output_norm`); there is no `output.weight`, so loaders use
//! the embedding as the head (tied). The rotary pairs stay interleaved, llama.cpp's `llama`
//! convention and the trainer's. With [`ExportDtype::F16`] the matrices are F16 and the RMSNorm
//! gains F32 (`general.file_type` 1, "mostly F16"), as llama.cpp's own converter writes them.

use super::vocab::gguf_vocab;
use super::{ExportDtype, Exported, f16_bytes};
use crate::Error;
use std::path::Path;

/// Alignment of the tensor data (GGUF's default, written as `general.alignment`).
pub const ALIGNMENT: usize = 32;

/// GGUF's metadata value types.
mod ty {
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
}

/// ggml's tensor types.
const GGML_F32: u32 = 0;
const GGML_F16: u32 = 1;

/// A metadata value.
enum Meta {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    Strings(Vec<String>),
    I32s(Vec<i32>),
}

/// Little-endian GGUF encoding into a byte vector.
struct Out(Vec<u8>);

impl Out {
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn pad(&mut self) {
        let n = self.0.len().next_multiple_of(ALIGNMENT);
        self.0.resize(n, 0);
    }
    fn meta(&mut self, key: &str, v: &Meta) {
        self.str(key);
        match v {
            Meta::U32(x) => {
                self.u32(ty::U32);
                self.u32(*x);
            }
            Meta::F32(x) => {
                self.u32(ty::F32);
                self.0.extend_from_slice(&x.to_le_bytes());
            }
            Meta::Bool(b) => {
                self.u32(ty::BOOL);
                self.0.push(u8::from(*b));
            }
            Meta::Str(s) => {
                self.u32(ty::STRING);
                self.str(s);
            }
            Meta::Strings(v) => {
                self.u32(ty::ARRAY);
                self.u32(ty::STRING);
                self.u64(v.len() as u64);
                for s in v {
                    self.str(s);
                }
            }
            Meta::I32s(v) => {
                self.u32(ty::ARRAY);
                self.u32(ty::I32);
                self.u64(v.len() as u64);
                for x in v {
                    self.0.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
}

fn u32_of(x: usize, what: &str) -> Result<Meta, Error> {
    u32::try_from(x).map(Meta::U32).map_err(|_| Error::Config(format!("{what} {x} does not fit GGUF's u32")))
}

/// The GGUF bytes of `m` (matrices in `dtype`; `name` becomes `general.name`), and a warning
/// for the user where llama.cpp may tokenize differently.
pub fn to_bytes(m: &Exported, dtype: ExportDtype, name: &str) -> Result<(Vec<u8>, Option<String>), Error> {
    m.check()?;
    let c = &m.model;
    let vocab = gguf_vocab(&m.tokenizer)?;
    let mut meta: Vec<(&str, Meta)> = vec![
        ("general.architecture", Meta::Str("llama".into())),
        ("general.name", Meta::Str(name.to_string())),
        ("general.file_type", Meta::U32(if dtype == ExportDtype::F16 { 1 } else { 0 })),
        ("general.alignment", Meta::U32(ALIGNMENT as u32)),
        ("llama.vocab_size", u32_of(m.tokenizer.vocab_size(), "the vocabulary")?),
        ("llama.context_length", u32_of(c.seq_len, "the context")?),
        ("llama.embedding_length", u32_of(c.dim, "the width")?),
        ("llama.block_count", u32_of(c.layers, "the layer count")?),
        ("llama.feed_forward_length", u32_of(c.ffn_hidden, "the feed-forward width")?),
        ("llama.attention.head_count", u32_of(c.heads, "the head count")?),
        ("llama.attention.head_count_kv", u32_of(c.kv_heads, "the kv head count")?),
        ("llama.rope.dimension_count", u32_of(c.head_dim(), "the head width")?),
        ("llama.rope.freq_base", Meta::F32(c.rope_base)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(c.norm_eps)),
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Meta::Str(vocab.pre.into())),
        ("tokenizer.ggml.tokens", Meta::Strings(vocab.tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(vocab.types)),
        ("tokenizer.ggml.merges", Meta::Strings(vocab.merges)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
        ("tokenizer.ggml.add_eos_token", Meta::Bool(false)),
    ];
    if let Some(eos) = vocab.eos {
        meta.push(("tokenizer.ggml.eos_token_id", Meta::U32(eos)));
    }

    // (name, ggml dimensions innermost first, type, bytes)
    let mut tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)> = Vec::new();
    let mut add = |n: String, shape: &[usize], values: &[f32]| -> Result<(), Error> {
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let (t, bytes) = if dtype == ExportDtype::F16 && shape.len() == 2 {
            (GGML_F16, f16_bytes(values, &n)?)
        } else {
            (GGML_F32, bytemuck::cast_slice::<f32, u8>(values).to_vec())
        };
        tensors.push((n, dims, t, bytes));
        Ok(())
    };
    add("token_embd.weight".into(), &[m.tokenizer.vocab_size(), c.dim], m.token_rows())?;
    let layout = crate::params::layout(c);
    for (i, (l, p)) in m.params.layers.iter().zip(&layout.layers).enumerate() {
        let parts = [
            ("attn_norm", &l.attn_norm, &p.attn_norm),
            ("attn_q", &l.wq, &p.wq),
            ("attn_k", &l.wk, &p.wk),
            ("attn_v", &l.wv, &p.wv),
            ("attn_output", &l.wo, &p.wo),
            ("ffn_norm", &l.ffn_norm, &p.ffn_norm),
            ("ffn_gate", &l.w1, &p.w1),
            ("ffn_up", &l.w3, &p.w3),
            ("ffn_down", &l.w2, &p.w2),
        ];
        for (n, values, param) in parts {
            add(format!("blk.{i}.{n}.weight"), &param.shape, values)?;
        }
    }
    add("output_norm.weight".into(), &layout.final_norm.shape, &m.params.final_norm)?;

    let mut out = Out(Vec::new());
    out.0.extend_from_slice(b"GGUF");
    out.u32(3);
    out.u64(tensors.len() as u64);
    out.u64(meta.len() as u64);
    for (k, v) in &meta {
        out.meta(k, v);
    }
    let mut offset = 0u64;
    for (n, dims, t, bytes) in &tensors {
        out.str(n);
        out.u32(dims.len() as u32);
        for &d in dims {
            out.u64(d);
        }
        out.u32(*t);
        out.u64(offset);
        offset = (offset + bytes.len() as u64).next_multiple_of(ALIGNMENT as u64);
    }
    out.pad();
    for (_, _, _, bytes) in &tensors {
        out.0.extend_from_slice(bytes);
        out.pad();
    }
    Ok((out.0, vocab.warning))
}

/// Writes `m` to `path` as GGUF (atomically); returns a warning for the user, if any.
pub fn write(path: &Path, m: &Exported, dtype: ExportDtype, name: &str) -> Result<Option<String>, Error> {
    let (bytes, warning) = to_bytes(m, dtype, name)?;
    crate::checkpoint::write_atomic(path, |w| w.write_all(&bytes))?;
    Ok(warning)
}
