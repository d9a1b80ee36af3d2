//! Reading: parse, verify the checksum, bound the metadata, then copy the tensors out.

use super::{Checkpoint, FORMAT, FORMAT_BYTES_ONLY, MAX_STEP, TensorBytes, checksum, parse_config};
use crate::Error;
use crate::model::Tensors;
use crate::optim::{Moments8, OptimizerKind, QBLOCK};
use crate::params::{self, LAYER_TENSORS, host_vec};
use crate::tokenizer::Tokenizer;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

/// Reads a checkpoint. In order, before anything is allocated for its contents: the file parses
/// as safetensors, carries this trainer's format tag, its checksum matches its metadata and
/// tensors, its configuration is within [`crate::config::ModelConfig::validate`]'s bounds, its
/// step within [`MAX_STEP`], and it holds exactly the tensors of that model. A damaged file is an
/// [`Error::Corrupt`] that says so; a missing one or another program's file an
/// [`Error::Checkpoint`], as is a path that is not a regular file of at most
/// [`crate::files::MAX_CHECKPOINT_BYTES`] ([`crate::files::read_regular`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn load(path: &Path) -> Result<Checkpoint, Error> {
    let bytes = crate::files::read_regular(path, crate::files::MAX_CHECKPOINT_BYTES, "the checkpoint")
        .map_err(Error::Checkpoint)?;
    from_bytes(&bytes, &path.display().to_string())
}

/// A checkpoint from a file's bytes (`load` without the file), with the same checks; `shown`
/// names the file in messages.
pub fn from_bytes(bytes: &[u8], shown: &str) -> Result<Checkpoint, Error> {
    let corrupt = |what: String| Error::Corrupt(format!("{shown}: {what}"));
    let st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("not a valid safetensors file ({e})")))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let format = meta.get("format").map(String::as_str);
    match format {
        Some(FORMAT | FORMAT_BYTES_ONLY) => {}
        Some(f) if f.starts_with("kernels-train/") => {
            return Err(Error::Checkpoint(format!(
                "{shown} was written by another version of this trainer (format {f}; this one reads {FORMAT})"
            )));
        }
        _ => return Err(Error::Checkpoint(format!("{shown} is not a checkpoint of this trainer (format {FORMAT})"))),
    }
    let stored = meta.get("checksum").ok_or_else(|| corrupt("it has no checksum".into()))?;
    let tensors = st.tensors();
    let dtypes: Vec<String> = tensors.iter().map(|(_, t)| format!("{:?}", t.dtype())).collect();
    let computed = checksum(
        &meta,
        tensors.iter().zip(&dtypes).map(|((name, t), dtype)| TensorBytes {
            name,
            dtype,
            shape: t.shape(),
            data: t.data(),
        }),
    );
    if *stored != computed {
        return Err(corrupt(format!(
            "its contents do not match its checksum ({stored} stored, {computed} computed): the file is damaged; use another copy"
        )));
    }

    let model =
        parse_config(meta.get("config").map(String::as_str).unwrap_or("")).map_err(|e| corrupt(e.to_string()))?;
    model.validate().map_err(|e| corrupt(format!("its model configuration is out of bounds: {e}")))?;
    let num = |k: &str| {
        meta.get(k).and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| corrupt(format!("the metadata lacks `{k}`")))
    };
    let (step, seed) = (num("step")?, num("seed")?);
    let tokenizer = match (format, meta.get("tokenizer")) {
        (Some(FORMAT_BYTES_ONLY), _) => Tokenizer::bytes(),
        (_, Some(record)) => Tokenizer::from_record(record).map_err(|e| corrupt(e.to_string()))?,
        (_, None) => return Err(corrupt("the metadata lacks `tokenizer`".into())),
    };
    if tokenizer.model_vocab() != model.vocab {
        return Err(corrupt(format!(
            "its vocabulary of {} does not fit its tokenizer, {} (a model vocabulary of {})",
            model.vocab,
            tokenizer.describe(),
            tokenizer.model_vocab()
        )));
    }
    if step > MAX_STEP {
        return Err(corrupt(format!("its step {step} is over {MAX_STEP}")));
    }
    let optimizer = match meta.get("optimizer") {
        None => OptimizerKind::AdamW,
        Some(name) => OptimizerKind::from_name(name).ok_or_else(|| {
            Error::Checkpoint(format!(
                "{shown} was trained with the optimizer `{name}`, which this trainer does not know"
            ))
        })?,
    };
    let per_tensor = if optimizer == OptimizerKind::AdamW8bit { 4 } else { 3 };
    let expected = per_tensor * (2 + LAYER_TENSORS * model.layers) + 2;
    if st.len() != expected {
        return Err(corrupt(format!(
            "it holds {} tensors; a model of {} layers has {expected}",
            st.len(),
            model.layers
        )));
    }

    let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>, Error> {
        let t = st.tensor(name).map_err(|_| corrupt(format!("it lacks the tensor `{name}`")))?;
        if t.shape() != shape {
            return Err(corrupt(format!("`{name}` has shape {:?}, expected {shape:?}", t.shape())));
        }
        floats(&t, name).map_err(|e| corrupt(e.to_string()))
    };
    let layout = params::layout(&model);
    let tensors = |prefix: &str| -> Result<Tensors, Error> {
        layout.as_ref().try_map(|p| get(&format!("{prefix}{}", p.name), &p.shape))
    };
    let p = tensors("")?;
    let (m, v, moments8) = match optimizer {
        OptimizerKind::AdamW => (tensors("optim.m.")?, tensors("optim.v.")?, None),
        OptimizerKind::AdamW8bit => {
            let codes = |name: &str, n: usize| -> Result<Vec<u8>, Error> {
                let t = st.tensor(name).map_err(|_| corrupt(format!("it lacks the tensor `{name}`")))?;
                if t.dtype() != Dtype::U8 || t.shape() != [n] {
                    return Err(corrupt(format!("`{name}` is {:?} {:?}, expected U8 [{n}]", t.dtype(), t.shape())));
                }
                Ok(t.data().to_vec())
            };
            let q = layout.as_ref().try_map(|p| -> Result<Moments8, Error> {
                let n = p.elements();
                Ok(Moments8 {
                    mq: codes(&format!("optim.mq.{}", p.name), n)?,
                    vq: codes(&format!("optim.vq.{}", p.name), n)?,
                    qscale: get(&format!("optim.qscale.{}", p.name), &[n.div_ceil(QBLOCK), 2])?,
                })
            })?;
            let empty = layout.as_ref().map(|_| Vec::new());
            (empty.clone(), empty, Some(q))
        }
    };
    let hist = |name: &str| -> Result<Vec<(usize, f32)>, Error> {
        let t = st.tensor(name).map_err(|_| corrupt(format!("it lacks the tensor `{name}`")))?;
        let &[n, 2] = t.shape() else {
            return Err(corrupt(format!("`{name}` has shape {:?}, expected [n, 2]", t.shape())));
        };
        let values = floats(&t, name).map_err(|e| corrupt(e.to_string()))?;
        let mut out = Vec::with_capacity(n);
        for pair in values.chunks_exact(2) {
            let (s, loss) = (pair[0], pair[1]);
            if !(s.is_finite() && s >= 0.0 && s.fract() == 0.0 && s <= step as f32) {
                return Err(corrupt(format!("`{name}` records a loss at step {s}, not a step of this run")));
            }
            out.push((s as usize, loss));
        }
        Ok(out)
    };
    Ok(Checkpoint {
        model,
        step,
        seed,
        params: p,
        m,
        v,
        moments8,
        scaler: super::parse_scaler(&meta).map_err(|e| corrupt(e.to_string()))?,
        train_history: hist("history.train")?,
        val_history: hist("history.validation")?,
        tokenizer,
    })
}

fn floats(t: &TensorView<'_>, name: &str) -> Result<Vec<f32>, Error> {
    if t.dtype() != Dtype::F32 {
        return Err(Error::Corrupt(format!("`{name}` is {:?}, expected F32", t.dtype())));
    }
    if !t.data().len().is_multiple_of(4) {
        return Err(Error::Corrupt(format!("`{name}` holds {} bytes, not whole floats", t.data().len())));
    }
    let mut out = host_vec(t.data().len() / 4, name)?;
    bytemuck::cast_slice_mut::<f32, u8>(&mut out).copy_from_slice(t.data());
    Ok(out)
}
