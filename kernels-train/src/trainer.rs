//! The training loop around [`Model`]: batches from the corpus, the schedule, validation,
//! checkpoints and sampling.

use crate::Error;
use crate::checkpoint::{self, Checkpoint};
use crate::config::{ModelConfig, TrainConfig};
use crate::data::Corpus;
use crate::model::Model;
use crate::params;
use crate::rng::Rng;
use crate::sample::sample;
use kernels::Gpu;
use std::path::Path;

/// A model, its data and where the run stands.
pub struct Trainer {
    /// The model on the GPU.
    pub model: Model,
    /// The text.
    pub corpus: Corpus,
    /// Optimisation settings.
    pub train: TrainConfig,
    /// Steps done.
    pub step: u64,
    /// (step, training loss) at the steps where the loss was read.
    pub train_history: Vec<(usize, f32)>,
    /// (step, validation loss).
    pub val_history: Vec<(usize, f32)>,
}

impl Trainer {
    /// A new run: weights from `train.seed`.
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, train: &TrainConfig, corpus: Corpus) -> Result<Trainer, Error> {
        cfg.validate()?;
        train.validate()?;
        corpus.check(cfg.seq_len)?;
        let weights = params::init(cfg, train.seed);
        let model = Model::with_attention(gpu, cfg, train.batch, &weights, None, train.attention)?;
        Ok(Trainer { model, corpus, train: train.clone(), step: 0, train_history: Vec::new(), val_history: Vec::new() })
    }

    /// Continues a run from a checkpoint (its model shape and seed; `train` gives the rest).
    pub fn resume(gpu: &Gpu, ck: Checkpoint, train: &TrainConfig, corpus: Corpus) -> Result<Trainer, Error> {
        ck.model.validate()?;
        let train = TrainConfig { seed: ck.seed, ..train.clone() };
        train.validate()?;
        corpus.check(ck.model.seq_len)?;
        let model =
            Model::with_attention(gpu, &ck.model, train.batch, &ck.params, Some((&ck.m, &ck.v)), train.attention)?;
        Ok(Trainer {
            model,
            corpus,
            train,
            step: ck.step,
            train_history: ck.train_history,
            val_history: ck.val_history,
        })
    }

    /// One step on the next batch; with `read_loss`, waits for it and returns the loss.
    pub fn step(&mut self, read_loss: bool) -> Result<Option<f32>, Error> {
        let (x, y) = self.corpus.train_batch(self.train.seed, self.step, self.train.batch, self.model.cfg.seq_len);
        self.model.train_step(&x, &y, self.train.batch, &self.train, self.step)?;
        self.step += 1;
        if read_loss {
            let loss = self.model.read_loss()?;
            self.train_history.push((self.step as usize, loss));
            Ok(Some(loss))
        } else {
            Ok(None)
        }
    }

    /// The mean loss over `batches` batches of the held-out text.
    pub fn validate(&mut self, batches: usize) -> Result<f32, Error> {
        let batches = batches.max(1);
        let mut total = 0.0;
        for k in 0..batches {
            let (x, y) = self.corpus.validation_batch(k, batches, self.train.batch, self.model.cfg.seq_len);
            total += self.model.eval_loss(&x, &y, self.train.batch)? as f64;
        }
        let loss = (total / batches as f64) as f32;
        self.val_history.push((self.step as usize, loss));
        Ok(loss)
    }

    /// Everything needed to resume.
    pub fn checkpoint(&self) -> Result<Checkpoint, Error> {
        let (m, v) = self.model.moments()?;
        Ok(Checkpoint {
            model: self.model.cfg.clone(),
            step: self.step,
            seed: self.train.seed,
            params: self.model.weights()?,
            m,
            v,
            train_history: self.train_history.clone(),
            val_history: self.val_history.clone(),
        })
    }

    /// Writes a checkpoint (atomically).
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        checkpoint::save(path, &self.checkpoint()?)
    }

    /// Continues `prompt` by `n` bytes, sampled with `temperature` and `top_k`.
    pub fn generate(
        &mut self,
        prompt: &[u8],
        n: usize,
        temperature: f32,
        top_k: usize,
        seed: u64,
    ) -> Result<Vec<u8>, Error> {
        generate(&mut self.model, prompt, n, temperature, top_k, seed)
    }
}

/// Continues `prompt` by `n` bytes with the model's forward kernels.
pub fn generate(
    model: &mut Model,
    prompt: &[u8],
    n: usize,
    temperature: f32,
    top_k: usize,
    seed: u64,
) -> Result<Vec<u8>, Error> {
    let mut rng = Rng::for_step(seed, 7, 0);
    let mut ctx: Vec<u32> =
        if prompt.is_empty() { vec![b'\n' as u32] } else { prompt.iter().map(|&b| b as u32).collect() };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let logits = model.next_logits(&ctx)?;
        let next = sample(&logits, temperature, top_k, &mut rng) as u32;
        ctx.push(next);
        out.push(next as u8);
    }
    Ok(out)
}
