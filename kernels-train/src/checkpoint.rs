//! Checkpoints: one safetensors file with the weights (names and layouts in [`crate::params`],
//! loadable by PyTorch's `safetensors.torch.load_file`), the AdamW moments
//! (`optim.m.<name>`, `optim.v.<name>`), the loss history (`history.train`, `history.validation`:
//! [n, 2] of (step, loss)), and metadata: `format`, `config` (the model shape as JSON) and
//! `step` (steps done) and `seed`. Written to a temporary file beside the target and renamed
//! over it, so an existing checkpoint is never replaced by a broken one.

use crate::Error;
use crate::config::ModelConfig;
use crate::model::Tensors;
use crate::params;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::HashMap;
use std::path::Path;

/// The format tag in the metadata.
pub const FORMAT: &str = "kernels-train/1";

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
    /// AdamW first moments.
    pub m: Tensors,
    /// AdamW second moments.
    pub v: Tensors,
    /// (step, training loss).
    pub train_history: Vec<(usize, f32)>,
    /// (step, validation loss).
    pub val_history: Vec<(usize, f32)>,
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
        serde_json::from_str(s).map_err(|e| Error::Checkpoint(format!("bad config metadata: {e}")))?;
    let u = |k: &str| {
        v[k].as_u64().map(|x| x as usize).ok_or_else(|| Error::Checkpoint(format!("config metadata lacks `{k}`")))
    };
    let f = |k: &str| {
        v[k].as_f64().map(|x| x as f32).ok_or_else(|| Error::Checkpoint(format!("config metadata lacks `{k}`")))
    };
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

fn history(h: &[(usize, f32)]) -> Vec<f32> {
    h.iter().flat_map(|&(s, l)| [s as f32, l]).collect()
}

/// Writes `c` to `path` atomically (temporary file, then rename).
pub fn save(path: &Path, c: &Checkpoint) -> Result<(), Error> {
    let layout = params::layout(&c.model);
    if [&c.params, &c.m, &c.v].iter().any(|t| t.layers.len() != layout.layers.len()) {
        return Err(Error::Checkpoint("parameter count does not match the model".into()));
    }
    let train = history(&c.train_history);
    let val = history(&c.val_history);
    let mut views: Vec<(String, TensorView<'_>)> = Vec::new();
    fn view(data: &[f32], shape: Vec<usize>) -> Result<TensorView<'_>, Error> {
        TensorView::new(Dtype::F32, shape, bytemuck::cast_slice(data)).map_err(|e| Error::Checkpoint(e.to_string()))
    }
    for (((p, w), m), v) in layout.iter().zip(c.params.iter()).zip(c.m.iter()).zip(c.v.iter()) {
        views.push((p.name.clone(), view(w, p.shape.clone())?));
        views.push((format!("optim.m.{}", p.name), view(m, p.shape.clone())?));
        views.push((format!("optim.v.{}", p.name), view(v, p.shape.clone())?));
    }
    views.push(("history.train".into(), view(&train, vec![c.train_history.len(), 2])?));
    views.push(("history.validation".into(), view(&val, vec![c.val_history.len(), 2])?));
    let meta = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("config".to_string(), config_json(&c.model)),
        ("step".to_string(), c.step.to_string()),
        ("seed".to_string(), c.seed.to_string()),
    ]);
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::Checkpoint(format!("cannot create {}: {e}", dir.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("checkpoint"),
        std::process::id()
    ));
    let written = safetensors::serialize_to_file(views, Some(meta), &tmp)
        .map_err(|e| Error::Checkpoint(format!("cannot write {}: {e}", tmp.display())))
        .and_then(|_| {
            std::fs::rename(&tmp, path)
                .map_err(|e| Error::Checkpoint(format!("cannot move {} to {}: {e}", tmp.display(), path.display())))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn floats(t: &TensorView<'_>, name: &str) -> Result<Vec<f32>, Error> {
    if t.dtype() != Dtype::F32 {
        return Err(Error::Checkpoint(format!("`{name}` is {:?}, expected F32", t.dtype())));
    }
    let mut out = vec![0f32; t.data().len() / 4];
    bytemuck::cast_slice_mut::<f32, u8>(&mut out).copy_from_slice(t.data());
    Ok(out)
}

/// Reads a checkpoint.
pub fn load(path: &Path) -> Result<Checkpoint, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::Checkpoint(format!("cannot read {}: {e}", path.display())))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| Error::Checkpoint(format!("{} is not a safetensors file: {e}", path.display())))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| Error::Checkpoint(e.to_string()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(Error::Checkpoint(format!(
            "{} is not a checkpoint of this trainer (format {FORMAT})",
            path.display()
        )));
    }
    let model = parse_config(meta.get("config").map(String::as_str).unwrap_or(""))?;
    let num = |k: &str| {
        meta.get(k)
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| Error::Checkpoint(format!("metadata lacks `{k}`")))
    };
    let (step, seed) = (num("step")?, num("seed")?);
    let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>, Error> {
        let t = st.tensor(name).map_err(|_| Error::Checkpoint(format!("{} lacks tensor `{name}`", path.display())))?;
        if t.shape() != shape {
            return Err(Error::Checkpoint(format!("`{name}` has shape {:?}, expected {shape:?}", t.shape())));
        }
        floats(&t, name)
    };
    let layout = params::layout(&model);
    let tensors = |prefix: &str| -> Result<Tensors, Error> {
        layout.as_ref().try_map(|p| get(&format!("{prefix}{}", p.name), &p.shape))
    };
    let (p, m, v) = (tensors("")?, tensors("optim.m.")?, tensors("optim.v.")?);
    let hist = |name: &str| -> Result<Vec<(usize, f32)>, Error> {
        let t = st.tensor(name).map_err(|_| Error::Checkpoint(format!("lacks `{name}`")))?;
        Ok(floats(&t, name)?.chunks(2).map(|c| (c[0] as usize, c[1])).collect())
    };
    Ok(Checkpoint {
        model,
        step,
        seed,
        params: p,
        m,
        v,
        train_history: hist("history.train")?,
        val_history: hist("history.validation")?,
    })
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
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_atomic_write() {
        let model = ModelConfig::new(8, 1, 2, 1, 4);
        let init = params::init(&model, 3);
        let c = Checkpoint {
            model: model.clone(),
            step: 17,
            seed: 3,
            m: init.as_ref().map(|p| p.iter().map(|x| x * 0.5).collect()),
            v: init.as_ref().map(|p| p.iter().map(|x| x * x).collect()),
            params: init,
            train_history: vec![(0, 5.5), (1, 5.0)],
            val_history: vec![(1, 5.1)],
        };
        let dir = std::env::temp_dir().join(format!("kt-ckpt-{}", std::process::id()));
        let path = dir.join("model.safetensors");
        save(&path, &c).unwrap();
        assert_eq!(load(&path).unwrap(), c);
        // Leftover temporaries are not left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let mut other = model.clone();
        other.dim = 16;
        assert!(
            check_compatible(&c.model, &other).unwrap_err().to_string().contains("dim 8 (checkpoint) vs 16 (asked)")
        );
        assert!(load(&dir.join("missing.safetensors")).is_err());
        std::fs::write(dir.join("junk.safetensors"), b"not a checkpoint").unwrap();
        assert!(load(&dir.join("junk.safetensors")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
