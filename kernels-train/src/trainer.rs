//! The training loop around [`Model`]: batches from the corpus, the schedule, validation,
//! checkpoints and sampling. Every method that reads from the GPU has an `_async` form (the
//! only one on wasm32, where nothing may block).

use crate::Error;
use crate::checkpoint::{self, Checkpoint};
use crate::config::{ModelConfig, TrainConfig};
use crate::data::Corpus;
use crate::dist::{Collective, Rank, Single};
use crate::model::{Model, ModelOptions, Precision, ScalerState, StateRef, Tensors};
use crate::optim::Moments8;
use crate::params;
use crate::params::ModelWeights;
use crate::rng::Rng;
use crate::sample::sample;
use crate::tokenizer::Tokenizer;
use kernels::Gpu;
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

/// The model options of a run's settings, starting the loss scaler from `scaler`.
pub fn model_options(train: &TrainConfig, scaler: Option<ScalerState>) -> ModelOptions {
    ModelOptions {
        attention: train.attention,
        precision: train.precision,
        scaler,
        growth_interval: train.loss_scale_interval,
        optimizer: train.optimizer,
        split_products: false,
        transposed_weights: None,
    }
}

/// The optimizer state a checkpoint is made of.
enum OptimizerState {
    AdamW(Tensors, Tensors),
    AdamW8bit(ModelWeights<Moments8>),
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
    /// The other ranks of a data-parallel run ([`Trainer::join`]); [`Single`] by default.
    collective: Box<dyn Collective>,
}

impl Trainer {
    /// A new run: weights from `train.seed`. The model's vocabulary must be the corpus
    /// tokenizer's ([`crate::tokenizer::Tokenizer::model_vocab`]).
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, train: &TrainConfig, corpus: Corpus) -> Result<Trainer, Error> {
        Trainer::start(gpu, cfg, train, corpus, None)
    }

    /// A new run (step 0, fresh AdamW moments) from given weights: fine-tuning an imported
    /// model ([`crate::export::hf::read`]). The model's vocabulary must be the corpus
    /// tokenizer's.
    pub fn from_weights(
        gpu: &Gpu,
        cfg: &ModelConfig,
        train: &TrainConfig,
        corpus: Corpus,
        weights: &Tensors,
    ) -> Result<Trainer, Error> {
        Trainer::start(gpu, cfg, train, corpus, Some(weights))
    }

    fn start(
        gpu: &Gpu,
        cfg: &ModelConfig,
        train: &TrainConfig,
        corpus: Corpus,
        weights: Option<&Tensors>,
    ) -> Result<Trainer, Error> {
        cfg.validate()?;
        train.validate()?;
        let tokenizer = corpus.tokenizer();
        if cfg.vocab != tokenizer.model_vocab() {
            return Err(Error::Config(format!(
                "a model vocabulary of {} for the tokenizer {}, which needs {}",
                cfg.vocab,
                tokenizer.describe(),
                tokenizer.model_vocab()
            )));
        }
        corpus.check(cfg.seq_len)?;
        // Before the host copy of the weights is made: a model too large for the device is an
        // error naming the limit, not an allocation abort.
        Model::check_fits(gpu, cfg, train.batch, train.attention)?;
        let initial;
        let weights = match weights {
            Some(w) => w,
            None => {
                initial = params::init(cfg, train.seed)?;
                &initial
            }
        };
        let model = Model::with_options(gpu, cfg, train.batch, weights, None, model_options(train, None))?;
        // What the model's scaler buffer starts from (no read-back: this runs on the web too).
        let scaler = (model.precision == Precision::Mixed).then(ScalerState::default);
        Ok(Trainer {
            model,
            corpus,
            train: train.clone(),
            step: 0,
            train_history: Vec::new(),
            val_history: Vec::new(),
            scaler,
            collective: Box::new(Single),
        })
    }

    /// Continues a run from a checkpoint (its model shape and seed; `train` gives the rest). The
    /// corpus must have been tokenized by the checkpoint's tokenizer.
    pub fn resume(gpu: &Gpu, ck: Checkpoint, train: &TrainConfig, corpus: Corpus) -> Result<Trainer, Error> {
        ck.model.validate()?;
        if let Some(what) = ck.non_finite() {
            return Err(Error::Diverged(format!("the checkpoint cannot be resumed: {what}")));
        }
        checkpoint::check_tokenizer(&ck.tokenizer, Some(corpus.tokenizer()))?;
        let train = TrainConfig { seed: ck.seed, ..train.clone() };
        train.validate()?;
        corpus.check(ck.model.seq_len)?;
        if ck.optimizer() != train.optimizer {
            return Err(Error::Checkpoint(format!(
                "the checkpoint's run uses the optimizer {}, not {}: its state cannot continue under another; resume with --optimizer {}",
                ck.optimizer().name(),
                train.optimizer.name(),
                ck.optimizer().name()
            )));
        }
        let options = model_options(&train, ck.scaler);
        let state = match &ck.moments8 {
            Some(q) => StateRef::AdamW8bit(q),
            None => StateRef::AdamW(&ck.m, &ck.v),
        };
        let model = Model::with_state(gpu, &ck.model, train.batch, &ck.params, Some(state), options)?;
        let scaler = (model.precision == Precision::Mixed).then(|| ck.scaler.unwrap_or_default());
        Ok(Trainer {
            scaler,
            model,
            corpus,
            train,
            step: ck.step,
            train_history: ck.train_history,
            val_history: ck.val_history,
            collective: Box::new(Single),
        })
    }

    /// Makes this trainer one rank of a data-parallel run: from here on every step reads this
    /// rank's part of a global batch of `world · batch` sequences
    /// ([`Corpus::train_batch_part`]) and averages the gradients with the other ranks before
    /// clipping; losses are averaged over the ranks, validation is shared among them. Every rank
    /// must make the same calls in the same order. Checks that the ranks start from the same
    /// state ([`Trainer::check_replicas`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn join(&mut self, collective: Box<dyn Collective>) -> Result<(), Error> {
        self.collective = collective;
        let r = self.rank();
        // The settings that decide what every step computes must be the same on every rank.
        let settings = format!("{:?} {:?} {} {}", self.model.cfg, self.train, self.corpus.train_len(), self.step);
        let mut root = settings.clone().into_bytes();
        self.collective.broadcast(0, &mut root)?;
        let differs = self.ranks_where(root != settings.as_bytes())?;
        if !differs.is_empty() {
            return Err(Error::Dist(format!(
                "rank(s) {} were started with other settings, data or checkpoint than rank 0 (rank 0: {}; {r}: {settings})",
                list(&differs),
                String::from_utf8_lossy(&root)
            )));
        }
        self.check_replicas()
    }

    /// This process's rank ([`Rank::SINGLE`] unless [`Trainer::join`]ed).
    pub fn rank(&self) -> Rank {
        self.collective.rank()
    }

    /// The collective the ranks exchange through ([`Single`] in one process).
    pub fn collective(&mut self) -> &mut dyn Collective {
        &mut *self.collective
    }

    /// The ranks (in order) where `mine` is true on that rank.
    fn ranks_where(&mut self, mine: bool) -> Result<Vec<usize>, Error> {
        let r = self.rank();
        if r.world == 1 {
            return Ok(if mine { vec![0] } else { Vec::new() });
        }
        let mut flags = vec![0.0; r.world];
        flags[r.rank] = f64::from(u8::from(mine));
        self.collective.sum_f64(&mut flags)?;
        Ok(flags.iter().enumerate().filter(|(_, f)| **f > 0.0).map(|(k, _)| k).collect())
    }

    /// Whether `ok` holds on every rank (a collective call: every rank must make it).
    pub fn all_ranks(&mut self, ok: bool) -> Result<bool, Error> {
        Ok(self.ranks_where(!ok)?.is_empty())
    }

    /// Checks that every rank holds the same weights (a CRC-32 of their bits, rank 0's
    /// broadcast to the others); an [`Error::Dist`] naming the ranks that differ otherwise. One
    /// process always passes. A collective call.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn check_replicas(&mut self) -> Result<(), Error> {
        if self.rank().world == 1 {
            return Ok(());
        }
        let mut crc = crc32fast::Hasher::new();
        for w in self.model.weights()?.iter() {
            crc.update(bytemuck::cast_slice(w));
        }
        let mine = crc.finalize().to_le_bytes().to_vec();
        let mut root = mine.clone();
        self.collective.broadcast(0, &mut root)?;
        let differs = self.ranks_where(root != mine)?;
        if differs.is_empty() {
            return Ok(());
        }
        Err(Error::Dist(format!(
            "at step {} the weights of rank(s) {} differ from rank 0's: the ranks no longer train one model (a rank's GPU computes differently, or its memory was corrupted); the last checkpoint is rank 0's",
            self.step,
            list(&differs)
        )))
    }

    /// Records and submits the step on the next batch (this rank's part of it).
    fn submit_step(&mut self) -> Result<(), Error> {
        let r = self.rank();
        let (batch, seq) = (self.train.batch, self.model.cfg.seq_len);
        let (x, y) = self.corpus.train_batch_part(self.train.seed, self.step, batch, seq, r.rank, r.world)?;
        #[cfg(not(target_arch = "wasm32"))]
        if r.world > 1 {
            let step = self.step;
            self.model
                .train_step_averaged(&x, &y, batch, &self.train, step, &mut *self.collective)
                .map_err(|e| at_step(e, step + 1))?;
            self.step += 1;
            return Ok(());
        }
        self.model.train_step(&x, &y, batch, &self.train, self.step)?;
        self.step += 1;
        Ok(())
    }

    /// The mean of `value` over the ranks (`value` itself in one process).
    fn mean_over_ranks(&mut self, value: f64) -> Result<f64, Error> {
        let world = self.rank().world;
        if world == 1 {
            return Ok(value);
        }
        let mut v = [value];
        self.collective.sum_f64(&mut v).map_err(|e| at_step(e, self.step))?;
        Ok(v[0] / world as f64)
    }

    fn record_loss(&mut self, loss: f32) -> f32 {
        self.train_history.push((self.step as usize, loss));
        loss
    }

    /// One step on the next batch; with `read_loss`, waits for it and returns the loss.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn step(&mut self, read_loss: bool) -> Result<Option<f32>, Error> {
        self.submit_step()?;
        if !read_loss {
            return Ok(None);
        }
        let loss = self.mean_over_ranks(self.model.read_loss()? as f64)? as f32;
        self.scaler = self.model.scaler_state()?;
        Ok(Some(self.record_loss(loss)))
    }

    /// [`Trainer::step`] without blocking.
    pub async fn step_async(&mut self, read_loss: bool) -> Result<Option<f32>, Error> {
        self.submit_step()?;
        if !read_loss {
            return Ok(None);
        }
        let loss = self.model.read_loss_async().await? as f64;
        let loss = self.mean_over_ranks(loss)? as f32;
        self.scaler = self.model.scaler_state_async().await?;
        Ok(Some(self.record_loss(loss)))
    }

    fn record_validation(&mut self, total: f64, batches: usize) -> f32 {
        let loss = (total / batches as f64) as f32;
        self.val_history.push((self.step as usize, loss));
        loss
    }

    /// The mean loss over `batches` batches of the held-out text (in a data-parallel run, each
    /// rank evaluates its part of every batch of `world · batch` sequences
    /// ([`Corpus::validation_batch_part`]), and the mean is shared).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn validate(&mut self, batches: usize) -> Result<f32, Error> {
        let batches = batches.max(1);
        let r = self.rank();
        let mut total = 0.0;
        for k in 0..batches {
            let (x, y) = self.corpus.validation_batch_part(
                k,
                batches,
                self.train.batch,
                self.model.cfg.seq_len,
                r.rank,
                r.world,
            )?;
            total += self.model.eval_loss(&x, &y, self.train.batch)? as f64;
        }
        let total = self.mean_over_ranks(total)?;
        Ok(self.record_validation(total, batches))
    }

    /// The loss-scaling note for progress lines and logs: `" | scale S, K skipped"` in mixed
    /// precision (as last read), empty in f32.
    pub fn scaling_note(&self) -> String {
        self.scaler.map_or(String::new(), |s| format!(" | loss scale {}, {} steps skipped", s.scale, s.skipped))
    }

    /// [`Trainer::validate`] without blocking.
    pub async fn validate_async(&mut self, batches: usize) -> Result<f32, Error> {
        let batches = batches.max(1);
        let r = self.rank();
        let mut total = 0.0;
        for k in 0..batches {
            let (x, y) = self.corpus.validation_batch_part(
                k,
                batches,
                self.train.batch,
                self.model.cfg.seq_len,
                r.rank,
                r.world,
            )?;
            total += self.model.eval_loss_async(&x, &y, self.train.batch).await? as f64;
        }
        let total = self.mean_over_ranks(total)?;
        Ok(self.record_validation(total, batches))
    }

    fn checkpoint_of(&self, params: Tensors, state: OptimizerState, scaler: Option<ScalerState>) -> Checkpoint {
        let (m, v, moments8) = match state {
            OptimizerState::AdamW(m, v) => (m, v, None),
            OptimizerState::AdamW8bit(q) => {
                let empty = params.as_ref().map(|_| Vec::new());
                (empty.clone(), empty, Some(q))
            }
        };
        Checkpoint {
            moments8,
            model: self.model.cfg.clone(),
            step: self.step,
            seed: self.train.seed,
            params,
            m,
            v,
            scaler,
            train_history: self.train_history.clone(),
            val_history: self.val_history.clone(),
            tokenizer: self.corpus.tokenizer().clone(),
        }
    }

    /// Everything needed to resume.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn checkpoint(&self) -> Result<Checkpoint, Error> {
        let state = match self.model.moments8()? {
            Some(q) => OptimizerState::AdamW8bit(q),
            None => {
                let (m, v) = self.model.moments()?;
                OptimizerState::AdamW(m, v)
            }
        };
        Ok(self.checkpoint_of(self.model.weights()?, state, self.model.scaler_state()?))
    }

    /// [`Trainer::checkpoint`] without blocking.
    pub async fn checkpoint_async(&self) -> Result<Checkpoint, Error> {
        let scaler = self.model.scaler_state_async().await?;
        let state = match self.model.moments8_async().await? {
            Some(q) => OptimizerState::AdamW8bit(q),
            None => {
                let (m, v) = self.model.moments_async().await?;
                OptimizerState::AdamW(m, v)
            }
        };
        Ok(self.checkpoint_of(self.model.weights_async().await?, state, scaler))
    }

    /// Why the current state (`ck`, from [`Trainer::checkpoint`]) must not be written over a
    /// checkpoint (`None`: it may): a weight or moment is NaN or infinite, or the loss is: that
    /// of the last forward pass, or that of the current weights on the first validation batch
    /// (one forward pass, evaluated here; the training state is not changed).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn divergence(&mut self, ck: &Checkpoint) -> Result<Option<String>, Error> {
        if let Some(what) = ck.non_finite() {
            return Ok(Some(format!("at step {}, {what}", self.step)));
        }
        let last = self.model.read_loss()?;
        if !last.is_finite() {
            return Ok(Some(format!("the loss is {last} at step {}", self.step)));
        }
        let (x, y) = self.corpus.validation_batch(0, 1, self.train.batch, self.model.cfg.seq_len)?;
        let now = self.model.eval_loss(&x, &y, self.train.batch)?;
        if !now.is_finite() {
            return Ok(Some(format!("the weights of step {} give a loss of {now}", self.step)));
        }
        Ok(None)
    }

    /// Writes a checkpoint (atomically and durably); a diverged state is refused
    /// ([`Trainer::divergence`], [`Error::Diverged`]) and `path` left as it was. In a
    /// data-parallel run rank 0 alone writes (the ranks hold the same state); the others return
    /// at once.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save(&mut self, path: &Path) -> Result<(), Error> {
        if !self.rank().writes() {
            return Ok(());
        }
        let ck = self.checkpoint()?;
        if let Some(why) = self.divergence(&ck)? {
            return Err(Error::Diverged(format!("{why}; {} not written", path.display())));
        }
        checkpoint::save(path, &ck)
    }

    /// Continues `prompt` by `n` tokens, sampled with `temperature` and `top_k`; returns the
    /// continuation's text.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn generate(
        &mut self,
        prompt: &str,
        n: usize,
        temperature: f32,
        top_k: usize,
        seed: u64,
    ) -> Result<String, Error> {
        generate(&mut self.model, self.corpus.tokenizer(), prompt, n, temperature, top_k, seed)
    }

    /// A sample of `n` tokens from no prompt of the user's (the end of a run): the continuation
    /// of a newline, or, where the tokenizer makes no token of a newline (a WordPiece or
    /// WordLevel one that splits on whitespace), the first token of the held-out text followed
    /// by its continuation.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn sample(&mut self, n: usize, temperature: f32, top_k: usize, seed: u64) -> Result<String, Error> {
        let tokenizer = self.corpus.tokenizer().clone();
        let newline = tokenizer.encode(b"\n")?;
        if !newline.is_empty() {
            return self.generate("\n", n, temperature, top_k, seed);
        }
        let (first, _) = self.corpus.validation_batch(0, 1, 1, 1)?;
        let mut g = Generation::from_ids(&tokenizer, first, temperature, top_k, seed);
        for _ in 0..n {
            let logits = self.model.next_logits(&g.ctx)?;
            g.push(&logits);
        }
        tokenizer.decode(&g.ctx)
    }

    /// [`Trainer::generate`] without blocking.
    pub async fn generate_async(
        &mut self,
        prompt: &str,
        n: usize,
        temperature: f32,
        top_k: usize,
        seed: u64,
    ) -> Result<String, Error> {
        generate_async(&mut self.model, self.corpus.tokenizer(), prompt, n, temperature, top_k, seed).await
    }
}

/// Ranks as a list for a message: `1, 3`.
#[cfg(not(target_arch = "wasm32"))]
fn list(ranks: &[usize]) -> String {
    ranks.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// `e` with the step it happened at, where it is about the other ranks.
fn at_step(e: Error, step: u64) -> Error {
    match e {
        Error::Dist(m) => Error::Dist(format!("step {step}: {m}")),
        e => e,
    }
}

/// The tokens a generation starts from: `prompt`'s, or a newline's for an empty prompt; an error
/// that says so when the tokenizer makes no token of either (one that drops whitespace).
pub fn prompt_tokens(tokenizer: &Tokenizer, prompt: &str) -> Result<Vec<u32>, Error> {
    let mut ctx = tokenizer.encode(prompt.as_bytes())?;
    if ctx.is_empty() {
        ctx = tokenizer.encode(b"\n")?;
    }
    if ctx.is_empty() {
        return Err(Error::Config(format!(
            "the prompt {prompt:?} gives no tokens with the tokenizer {} (nor does a newline): give a prompt it makes tokens of",
            tokenizer.describe()
        )));
    }
    Ok(ctx)
}

/// The state of a generation: the context so far and the tokens sampled.
struct Generation {
    rng: Rng,
    ctx: Vec<u32>,
    out: Vec<u32>,
    /// Tokens that can be sampled: the tokenizer's, not the model's padding.
    vocab: usize,
    temperature: f32,
    top_k: usize,
}

impl Generation {
    fn new(
        tokenizer: &Tokenizer,
        prompt: &str,
        temperature: f32,
        top_k: usize,
        seed: u64,
    ) -> Result<Generation, Error> {
        Ok(Generation::from_ids(tokenizer, prompt_tokens(tokenizer, prompt)?, temperature, top_k, seed))
    }

    /// A generation continuing the token ids `ctx` (at least one).
    fn from_ids(tokenizer: &Tokenizer, ctx: Vec<u32>, temperature: f32, top_k: usize, seed: u64) -> Generation {
        let vocab = tokenizer.vocab_size();
        Generation { rng: Rng::for_step(seed, 7, 0), ctx, out: Vec::new(), vocab, temperature, top_k }
    }

    fn push(&mut self, logits: &[f32]) {
        let logits = &logits[..self.vocab.min(logits.len())];
        let next = sample(logits, self.temperature, self.top_k, &mut self.rng) as u32;
        self.ctx.push(next);
        self.out.push(next);
    }
}

/// Continues `prompt` by `n` tokens with the model's forward kernels and a key/value cache
/// ([`Model::next_logits_cached`]); returns the continuation's text (decoded by `tokenizer`, the
/// model's).
#[cfg(not(target_arch = "wasm32"))]
pub fn generate(
    model: &mut Model,
    tokenizer: &Tokenizer,
    prompt: &str,
    n: usize,
    temperature: f32,
    top_k: usize,
    seed: u64,
) -> Result<String, Error> {
    let mut g = Generation::new(tokenizer, prompt, temperature, top_k, seed)?;
    for _ in 0..n {
        let logits = model.next_logits_cached(&g.ctx)?;
        g.push(&logits);
    }
    tokenizer.decode(&g.out)
}

/// [`generate`] without blocking.
pub async fn generate_async(
    model: &mut Model,
    tokenizer: &Tokenizer,
    prompt: &str,
    n: usize,
    temperature: f32,
    top_k: usize,
    seed: u64,
) -> Result<String, Error> {
    let mut g = Generation::new(tokenizer, prompt, temperature, top_k, seed)?;
    for _ in 0..n {
        let logits = model.next_logits_cached_async(&g.ctx).await?;
        g.push(&logits);
    }
    tokenizer.decode(&g.out)
}
