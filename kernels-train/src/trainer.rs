//! The training loop around [`Model`]: batches from the corpus, the schedule, validation,
//! checkpoints and sampling.

use crate::Error;
use crate::checkpoint::{self, Checkpoint};
use crate::config::{ModelConfig, TrainConfig};
use crate::data::Corpus;
use crate::model::{Model, ModelOptions, ScalerState};
use crate::params;
use crate::rng::Rng;
use crate::sample::sample;
use kernels::Gpu;
use std::path::Path;

/// The model options of a run's settings, starting the loss scaler from `scaler`.
pub fn model_options(train: &TrainConfig, scaler: Option<ScalerState>) -> ModelOptions {
    ModelOptions {
        attention: train.attention,
        precision: train.precision,
        scaler,
        growth_interval: train.loss_scale_interval,
    }
}

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
    /// The loss scaler's state as last read (mixed precision; read with the loss).
    pub scaler: Option<ScalerState>,
}

impl Trainer {
    /// A new run: weights from `train.seed`.
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, train: &TrainConfig, corpus: Corpus) -> Result<Trainer, Error> {
        cfg.validate()?;
        train.validate()?;
        corpus.check(cfg.seq_len)?;
        // Before the host copy of the weights is made: a model too large for the device is an
        // error naming the limit, not an allocation abort.
        Model::check_fits(gpu, cfg, train.batch, train.attention)?;
        let weights = params::init(cfg, train.seed)?;
        let model = Model::with_options(gpu, cfg, train.batch, &weights, None, model_options(train, None))?;
        let scaler = model.scaler_state()?;
        Ok(Trainer {
            model,
            corpus,
            train: train.clone(),
            step: 0,
            train_history: Vec::new(),
            val_history: Vec::new(),
            scaler,
        })
    }

    /// Continues a run from a checkpoint (its model shape and seed; `train` gives the rest).
    pub fn resume(gpu: &Gpu, ck: Checkpoint, train: &TrainConfig, corpus: Corpus) -> Result<Trainer, Error> {
        ck.model.validate()?;
        if let Some(what) = ck.non_finite() {
            return Err(Error::Diverged(format!("the checkpoint cannot be resumed: {what}")));
        }
        let train = TrainConfig { seed: ck.seed, ..train.clone() };
        train.validate()?;
        corpus.check(ck.model.seq_len)?;
        let options = model_options(&train, ck.scaler);
        let model = Model::with_options(gpu, &ck.model, train.batch, &ck.params, Some((&ck.m, &ck.v)), options)?;
        let scaler = model.scaler_state()?;
        Ok(Trainer {
            scaler,
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
            self.scaler = self.model.scaler_state()?;
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

    /// The loss-scaling note for progress lines and logs: `" | scale S, K skipped"` in mixed
    /// precision (as last read), empty in f32.
    pub fn scaling_note(&self) -> String {
        self.scaler.map_or(String::new(), |s| format!(" | loss scale {}, {} steps skipped", s.scale, s.skipped))
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
            scaler: self.model.scaler_state()?,
            train_history: self.train_history.clone(),
            val_history: self.val_history.clone(),
        })
    }

    /// Why the current state (`ck`, from [`Trainer::checkpoint`]) must not be written over a
    /// checkpoint (`None`: it may): a weight or moment is NaN or infinite, or the loss is: that
    /// of the last forward pass, or that of the current weights on the first validation batch
    /// (one forward pass, evaluated here; the training state is not changed).
    pub fn divergence(&mut self, ck: &Checkpoint) -> Result<Option<String>, Error> {
        if let Some(what) = ck.non_finite() {
            return Ok(Some(format!("at step {}, {what}", self.step)));
        }
        let last = self.model.read_loss()?;
        if !last.is_finite() {
            return Ok(Some(format!("the loss is {last} at step {}", self.step)));
        }
        let (x, y) = self.corpus.validation_batch(0, 1, self.train.batch, self.model.cfg.seq_len);
        let now = self.model.eval_loss(&x, &y, self.train.batch)?;
        if !now.is_finite() {
            return Ok(Some(format!("the weights of step {} give a loss of {now}", self.step)));
        }
        Ok(None)
    }

    /// Writes a checkpoint (atomically and durably); a diverged state is refused
    /// ([`Trainer::divergence`], [`Error::Diverged`]) and `path` left as it was.
    pub fn save(&mut self, path: &Path) -> Result<(), Error> {
        let ck = self.checkpoint()?;
        if let Some(why) = self.divergence(&ck)? {
            return Err(Error::Diverged(format!("{why}; {} not written", path.display())));
        }
        checkpoint::save(path, &ck)
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
