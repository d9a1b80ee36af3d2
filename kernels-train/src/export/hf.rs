//! A Hugging Face `transformers` Llama folder: [`write()`] (`--export-hf DIR`) and [`read`]
//! (`--import-hf DIR`).
//!
//! The folder holds `config.json` (`LlamaForCausalLM`, grouped-query heads, the head tied to
//! the embedding), `model.safetensors` (HF's names, q/k rows in its half-split rotary order,
//! `{"format": "pt"}` metadata as `from_pretrained` requires), `tokenizer.json`,
//! `tokenizer_config.json` and `generation_config.json`.
//!
//! [`read()`] takes any Llama folder whose model this trainer can hold: `model.safetensors` or a
//! sharded `model.safetensors.index.json`, F32, F16 or BF16 tensors, a `tokenizer.json`. It
//! refuses, naming each reason: another architecture, an output head not tied to the embedding
//! (the trainer ties them), biases, RoPE scaling, an activation other than SiLU, a head width
//! other than hidden/heads, quantized weights, and shapes outside [`ModelConfig::validate`].

use super::{ExportDtype, Exported, f16_bytes, from_half_split, json_f32, to_half_split};
use crate::Error;
use crate::config::ModelConfig;
use crate::model::Tensors;
use crate::params::{LayerWeights, ModelWeights};
use crate::tokenizer::Tokenizer;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// HF's name of each tensor, in the trainer's layout (`params::layout`'s order).
fn names(layers: usize) -> ModelWeights<String> {
    let layer = |i: usize| {
        let n = |s: &str| format!("model.layers.{i}.{s}.weight");
        LayerWeights {
            attn_norm: n("input_layernorm"),
            wq: n("self_attn.q_proj"),
            wk: n("self_attn.k_proj"),
            wv: n("self_attn.v_proj"),
            wo: n("self_attn.o_proj"),
            ffn_norm: n("post_attention_layernorm"),
            w1: n("mlp.gate_proj"),
            w3: n("mlp.up_proj"),
            w2: n("mlp.down_proj"),
        }
    };
    ModelWeights {
        embedding: "model.embed_tokens.weight".into(),
        layers: (0..layers).map(layer).collect(),
        final_norm: "model.norm.weight".into(),
    }
}

/// The tensors as HF holds them: the embedding's token rows only, q and k in the half-split
/// rotary order.
fn hf_tensors(m: &Exported) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let c = &m.model;
    let (dh, d) = (c.head_dim(), c.dim);
    let shapes = crate::params::layout(c).map(|p| p.shape);
    let mut out = Vec::with_capacity(m.params.count());
    for ((name, shape), t) in names(c.layers).iter().zip(shapes.iter()).zip(m.params.iter()) {
        out.push((name.clone(), shape.clone(), t.clone()));
    }
    out[0] = (out[0].0.clone(), vec![m.tokenizer.vocab_size(), d], m.token_rows().to_vec());
    for (i, l) in m.params.layers.iter().enumerate() {
        let base = 1 + crate::params::LAYER_TENSORS * i;
        out[base + 1].2 = to_half_split(&l.wq, c.heads, dh, d);
        out[base + 2].2 = to_half_split(&l.wk, c.kv_heads, dh, d);
    }
    out
}

/// `config.json`.
fn config_json(m: &Exported, dtype: ExportDtype) -> Value {
    let c = &m.model;
    json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": m.tokenizer.vocab_size(),
        "hidden_size": c.dim,
        "intermediate_size": c.ffn_hidden,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim(),
        "hidden_act": "silu",
        "max_position_embeddings": c.seq_len,
        "rms_norm_eps": json_f32(c.norm_eps),
        "rope_theta": json_f32(c.rope_base),
        "rope_scaling": null,
        "attention_bias": false,
        "attention_dropout": 0.0,
        "mlp_bias": false,
        "tie_word_embeddings": true,
        "torch_dtype": match dtype { ExportDtype::F32 => "float32", ExportDtype::F16 => "float16" },
        "bos_token_id": null,
        "eos_token_id": eos_id(&m.tokenizer),
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": true,
    })
}

/// The tokenizer's end-of-text token, where it has one of the usual ones.
fn eos_id(tk: &Tokenizer) -> Option<u32> {
    super::vocab::gguf_vocab(tk).ok().and_then(|v| v.eos)
}

/// `tokenizer_config.json`: the fast tokenizer over `tokenizer.json`, adding no tokens.
fn tokenizer_config(m: &Exported) -> Value {
    let eos = eos_id(&m.tokenizer).and_then(|id| m.tokenizer.decode(&[id]).ok());
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": m.model.seq_len,
        "add_bos_token": false,
        "add_eos_token": false,
        "bos_token": null,
        "eos_token": eos,
        "clean_up_tokenization_spaces": false,
        "model_input_names": ["input_ids", "attention_mask"],
    })
}

/// `generation_config.json`: the trainer's sampling defaults (`--temperature 0.8 --top-k 40`).
fn generation_config(m: &Exported) -> Value {
    json!({
        "do_sample": true,
        "temperature": 0.8,
        "top_k": 40,
        "top_p": 1.0,
        "max_length": m.model.seq_len,
        "bos_token_id": null,
        "eos_token_id": eos_id(&m.tokenizer),
    })
}

/// The `model.safetensors` bytes.
fn safetensors_bytes(m: &Exported, dtype: ExportDtype) -> Result<Vec<u8>, Error> {
    let tensors = hf_tensors(m);
    let mut data = Vec::with_capacity(tensors.len());
    for (name, shape, values) in &tensors {
        let bytes = match dtype {
            ExportDtype::F32 => bytemuck::cast_slice::<f32, u8>(values).to_vec(),
            ExportDtype::F16 => f16_bytes(values, name)?,
        };
        data.push((name.clone(), shape.clone(), bytes));
    }
    let st = match dtype {
        ExportDtype::F32 => Dtype::F32,
        ExportDtype::F16 => Dtype::F16,
    };
    let views = data
        .iter()
        .map(|(n, s, b)| TensorView::new(st, s.clone(), b).map(|v| (n.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Save(format!("safetensors: {e}")))?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::Save(format!("safetensors: {e}")))
}

/// Writes the folder `dir` (created if missing) for `m`, matrices in `dtype`; returns the files
/// written. A folder holding another model's weight files that loaders would also find
/// (`model.safetensors.index.json`, `pytorch_model*.bin`) is refused.
pub fn write(dir: &Path, m: &Exported, dtype: ExportDtype) -> Result<Vec<PathBuf>, Error> {
    m.check()?;
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Config(format!("{} exists and is not a folder", dir.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Save(format!("cannot create {}: {e}", dir.display())))?;
    let other = std::fs::read_dir(dir)
        .map_err(|e| Error::Save(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .find(|n| n == "model.safetensors.index.json" || (n.starts_with("pytorch_model") && n.ends_with(".bin")));
    if let Some(name) = other {
        return Err(Error::Config(format!(
            "{} holds another model's {name}, which loaders would read instead: export into an empty folder",
            dir.display()
        )));
    }
    let tokenizer = match m.tokenizer.json() {
        None => super::bytes_tokenizer_json(),
        Some(json) => {
            let tk: tokenizers::Tokenizer =
                json.parse().map_err(|e| Error::Config(format!("the tokenizer does not parse: {e}")))?;
            tk.to_string(true).map_err(|e| Error::Config(format!("the tokenizer does not serialise: {e}")))?
        }
    };
    let pretty = |v: Value| serde_json::to_string_pretty(&v).map(|s| s + "\n").unwrap_or_default().into_bytes();
    let files: [(&str, Vec<u8>); 5] = [
        ("model.safetensors", safetensors_bytes(m, dtype)?),
        ("config.json", pretty(config_json(m, dtype))),
        ("tokenizer.json", tokenizer.into_bytes()),
        ("tokenizer_config.json", pretty(tokenizer_config(m))),
        ("generation_config.json", pretty(generation_config(m))),
    ];
    let mut written = Vec::new();
    for (name, bytes) in files {
        let path = dir.join(name);
        crate::checkpoint::write_atomic(&path, |w| w.write_all(&bytes))?;
        written.push(path);
    }
    Ok(written)
}

/// A folder read by [`read`]: the model, and what a user should know about the conversion.
#[derive(Debug)]
pub struct Imported {
    /// The model in the trainer's layout.
    pub model: Exported,
    /// Notes (tensors ignored, rows dropped).
    pub notes: Vec<String>,
}

/// Reads a Llama folder (see the module's description); every reason a folder is refused is
/// in the one error.
pub fn read(dir: &Path) -> Result<Imported, Error> {
    let shown = dir.display().to_string();
    if !dir.is_dir() {
        let what = if dir.exists() { "is not a folder" } else { "does not exist" };
        return Err(Error::Config(format!("{shown} {what}: --import-hf takes a Hugging Face model folder")));
    }
    let config: Value = serde_json::from_str(&read_json(&dir.join("config.json"))?)
        .map_err(|e| Error::Config(format!("{shown}/config.json is not JSON: {e}")))?;
    let tokenizer_file = dir.join("tokenizer.json");
    if !tokenizer_file.exists() {
        return Err(Error::Config(format!(
            "{shown} has no tokenizer.json: the trainer needs the tokenizer the model reads"
        )));
    }
    let tokenizer = Tokenizer::open(&tokenizer_file)?;
    let bytes = Tokenizer::from_json(&super::bytes_tokenizer_json(), "the byte tokenizer")?;
    let tokenizer = if tokenizer == bytes { Tokenizer::bytes() } else { tokenizer };
    let (cfg, hf_vocab) = model_config(&config, &tokenizer)
        .map_err(|why| Error::Config(format!("{shown} cannot be imported: {}", why.join("; "))))?;
    let (params, notes) = read_tensors(dir, &cfg, hf_vocab, &tokenizer, &config)?;
    let model = Exported { model: cfg, params, tokenizer };
    model.check()?;
    Ok(Imported { model, notes })
}

/// A small JSON file of the folder, as text: a regular file of at most
/// [`crate::files::MAX_JSON_BYTES`].
fn read_json(path: &Path) -> Result<String, Error> {
    let bytes = crate::files::read_regular(path, crate::files::MAX_JSON_BYTES, "the file").map_err(Error::Config)?;
    String::from_utf8(bytes).map_err(|e| Error::Config(format!("{} is not UTF-8 text: {e}", path.display())))
}

/// The trainer's configuration for an HF config (and the HF vocabulary size), or every reason
/// it cannot be one.
fn model_config(c: &Value, tk: &Tokenizer) -> Result<(ModelConfig, usize), Vec<String>> {
    let mut why = Vec::new();
    let arch_ok = c["model_type"] == "llama"
        || c["architectures"].as_array().is_some_and(|a| a.iter().any(|x| x == "LlamaForCausalLM"));
    if !arch_ok {
        why.push(format!(
            "it is not a Llama model (model_type {}, architectures {})",
            c["model_type"], c["architectures"]
        ));
    }
    let mut u = |k: &str, default: Option<usize>| match (c[k].as_u64(), default) {
        (Some(x), _) => usize::try_from(x).unwrap_or(usize::MAX),
        (None, Some(d)) if c[k].is_null() => d,
        _ => {
            why.push(format!("config.json lacks `{k}` (an unsigned integer)"));
            0
        }
    };
    let dim = u("hidden_size", None);
    let ffn = u("intermediate_size", None);
    let layers = u("num_hidden_layers", None);
    let heads = u("num_attention_heads", None);
    let kv_heads = u("num_key_value_heads", Some(heads));
    let vocab = u("vocab_size", None);
    let seq = u("max_position_embeddings", None);
    let f = |k: &str, default: f64| c[k].as_f64().unwrap_or(default) as f32;
    let (eps, base) = (f("rms_norm_eps", 1e-6), f("rope_theta", 10000.0));
    for k in ["attention_bias", "mlp_bias"] {
        if c[k] == true {
            why.push(format!("`{k}` is true: the trainer's projections have no biases"));
        }
    }
    let act = c["hidden_act"].as_str().unwrap_or("silu");
    if act != "silu" {
        why.push(format!("the activation is {act}: the trainer's SwiGLU uses SiLU"));
    }
    let scaling = &c["rope_scaling"];
    if !scaling.is_null() && scaling["rope_type"] != "default" && scaling["type"] != "default" {
        why.push(format!("it scales RoPE ({scaling}): the trainer's rotary embedding has no scaling"));
    }
    if !c["quantization_config"].is_null() {
        why.push("its weights are quantized: the trainer takes F32, F16 or BF16".into());
    }
    if let Some(hd) = c["head_dim"].as_u64()
        && heads > 0
        && hd as usize * heads != dim
    {
        why.push(format!("its head width {hd} is not hidden_size / heads = {dim} / {heads}"));
    }
    if vocab < tk.vocab_size() && vocab > 0 {
        why.push(format!("its vocabulary of {vocab} rows is smaller than the tokenizer's {} tokens", tk.vocab_size()));
    }
    let mut cfg = ModelConfig::new(dim, layers, heads, kv_heads, seq).with_vocab(tk.model_vocab());
    cfg.ffn_hidden = ffn;
    cfg.norm_eps = eps;
    cfg.rope_base = base;
    if why.is_empty()
        && let Err(e) = cfg.validate()
    {
        why.push(format!("the trainer cannot hold its shape: {e}"));
    }
    if why.is_empty() { Ok((cfg, vocab)) } else { Err(why) }
}

/// f32 values of a stored tensor (F32, F16 or BF16, little-endian).
fn values(t: &TensorView<'_>, name: &str) -> Result<Vec<f32>, Error> {
    let d = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => d.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::F16 => d.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        Dtype::BF16 => d.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        other => {
            return Err(Error::Config(format!("{name} is {other:?}: the trainer imports F32, F16 and BF16 tensors")));
        }
    })
}

/// The safetensors files of the folder: `model.safetensors`, or the shards an index names.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        return Err(Error::Config(format!(
            "{} has neither model.safetensors nor model.safetensors.index.json; PyTorch .bin weights are not read",
            dir.display()
        )));
    }
    let text = read_json(&index)?;
    let v: Value = serde_json::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", index.display())))?;
    let mut files: Vec<String> = v["weight_map"]
        .as_object()
        .ok_or_else(|| Error::Config(format!("{} has no weight_map", index.display())))?
        .values()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    files.sort();
    files.dedup();
    if files.iter().any(|f| f.contains('/') || f.contains('\\') || f == "..") {
        return Err(Error::Config(format!("{} names a file outside its folder", index.display())));
    }
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

/// Reads every tensor into the trainer's layout: q/k back to interleaved rotary pairs, the
/// embedding padded with zero rows to the model's vocabulary.
fn read_tensors(
    dir: &Path,
    cfg: &ModelConfig,
    hf_vocab: usize,
    tk: &Tokenizer,
    config: &Value,
) -> Result<(Tensors, Vec<String>), Error> {
    let want = names(cfg.layers);
    let mut shapes: BTreeMap<String, Vec<usize>> =
        want.iter().cloned().zip(crate::params::layout(cfg).map(|p| p.shape).into_vec()).collect();
    shapes.insert(want.embedding.clone(), vec![hf_vocab, cfg.dim]);
    let mut found: HashMap<String, Vec<f32>> = HashMap::new();
    let mut head: Option<Vec<f32>> = None;
    let mut ignored = Vec::new();
    let mut unknown = Vec::new();
    for file in weight_files(dir)? {
        let bytes = crate::files::read_regular(&file, crate::files::MAX_CHECKPOINT_BYTES, "the weight file")
            .map_err(Error::Config)?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| Error::Config(format!("{} is not a safetensors file: {e}", file.display())))?;
        for (name, t) in st.tensors() {
            let expected = if name == "lm_head.weight" { shapes.get(&want.embedding) } else { shapes.get(&name) };
            match expected {
                Some(shape) if t.shape() != shape.as_slice() => {
                    return Err(Error::Config(format!(
                        "{name} in {} has the shape {:?}; the config asks for {shape:?}",
                        file.display(),
                        t.shape()
                    )));
                }
                Some(_) if name == "lm_head.weight" => head = Some(values(&t, &name)?),
                Some(_) => {
                    found.insert(name.clone(), values(&t, &name)?);
                }
                None if name.ends_with("rotary_emb.inv_freq") => ignored.push(name),
                None => unknown.push(name),
            }
        }
    }
    if !unknown.is_empty() {
        unknown.sort();
        return Err(Error::Config(format!(
            "{} cannot be imported: it holds tensors the trainer's Llama has no place for ({}{})",
            dir.display(),
            unknown.iter().take(6).cloned().collect::<Vec<_>>().join(", "),
            if unknown.len() > 6 { format!(" and {} more", unknown.len() - 6) } else { String::new() }
        )));
    }
    let missing: Vec<&String> = want.iter().filter(|n| !found.contains_key(*n)).collect();
    if !missing.is_empty() {
        return Err(Error::Config(format!(
            "{} lacks {} of the model's tensors, e.g. {}",
            dir.display(),
            missing.len(),
            missing[0]
        )));
    }
    let mut notes = Vec::new();
    let embedding = &found[&want.embedding];
    match head {
        Some(h) if h.iter().zip(embedding).all(|(a, b)| a.to_bits() == b.to_bits()) => {
            notes.push("lm_head.weight equals the embedding: taken as tied".into());
        }
        Some(_) => {
            return Err(Error::Config(format!(
                "{} cannot be imported: its output head (lm_head.weight) is not tied to the embedding, and this trainer ties them",
                dir.display()
            )));
        }
        None if config["tie_word_embeddings"] == false => {
            notes.push(
                "config.json says the head is untied but there is no lm_head.weight: the embedding is the head".into(),
            );
        }
        None => {}
    }
    let mut tensors = want.map(|n| found.remove(&n).unwrap_or_default());
    let (dh, d) = (cfg.head_dim(), cfg.dim);
    for l in &mut tensors.layers {
        l.wq = from_half_split(&l.wq, cfg.heads, dh, d);
        l.wk = from_half_split(&l.wk, cfg.kv_heads, dh, d);
    }
    let keep = hf_vocab.min(cfg.vocab);
    if hf_vocab > cfg.vocab {
        notes.push(format!(
            "rows {}..{hf_vocab} of the embedding are past the tokenizer's {} tokens and its padding: dropped",
            cfg.vocab,
            tk.vocab_size()
        ));
    }
    tensors.embedding.truncate(keep * d);
    tensors.embedding.resize(cfg.vocab * d, 0.0);
    if keep < cfg.vocab {
        notes.push(format!(
            "the vocabulary is padded from {keep} to {} rows (zeros; never a target, never sampled)",
            cfg.vocab
        ));
    }
    if !ignored.is_empty() {
        notes.push(format!("{} rotary frequency buffers ignored (the trainer computes them)", ignored.len()));
    }
    Ok((tensors, notes))
}
