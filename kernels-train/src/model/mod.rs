//! The model on the GPU: parameters, gradients, AdamW moments and every activation the backward
//! pass needs live in GPU buffers; a training step is recorded into one batch (forward,
//! backward, gradient-norm clipping, AdamW) and submitted once. Nothing is read back inside a
//! step; the loss is read only when asked for.
//!
//! By stage: `alloc` allocates the buffers (`Model::with_attention`), `forward` records
//! the forward pass and the loss, `backward` the gradients, `update` clipping and AdamW; this
//! file holds the model and what callers use (a step, an evaluation, the next token's logits,
//! copies back to the host). Every read-back has an `_async` form, the only one on wasm32 (a
//! browser's thread must not block); the blocking forms are native only.
//!
//! Shapes: M = batch · seq_len rows; D model width; F SwiGLU width; H·Dh query width; Hkv·Dh
//! key/value width; V the vocabulary (256 for bytes). Linear layers keep PyTorch's [out, in] weight layout, so the forward
//! is `Y = X·Wᵀ` (`matmul_t`), the input gradient `dX = dY·W` (`matmul`) and the weight gradient
//! `dW += dYᵀ·X` (split along the tokens when the output is small), each a `kernels::gemm` plan.
//! The parameters on the GPU are the fused set (`params::fused`: Wq, Wk, Wv stacked into one
//! weight, W1 and W3 into another, so each group is one product); every method that takes or
//! returns host tensors uses the LLaMA layout of `params::layout`.

mod alloc;
mod arena;
mod attention16;
mod backward;
mod forward;
mod products;
mod update;

use crate::Error;
use crate::config::{ModelConfig, TrainConfig};
use crate::optim::{Moments8, OptimizerKind};
use crate::params::fused::{self, Fused};
use crate::params::{ModelWeights, Param};
use alloc::{Activations, Optimizer, Scratch, State};
use kernels::{Buffer, Gpu};
use products::Half;

pub use crate::precision::Precision;
pub use crate::scaler::ScalerState;

type B = Buffer<f32>;

/// How a model is built beyond its shape and weights ([`Model::with_options`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelOptions {
    /// The attention path.
    pub attention: Attention,
    /// The arithmetic of a step ([`Precision::Auto`] resolves on the adapter).
    pub precision: Precision,
    /// The loss scaler's state to start from (mixed precision; `None`: a fresh scaler).
    pub scaler: Option<ScalerState>,
    /// Clean steps before the loss scale doubles (mixed precision; at least 1).
    pub growth_interval: u32,
    /// The optimizer ([`OptimizerKind::AdamW8bit`] resolves [`Precision::Auto`] to f32 and
    /// refuses [`Precision::Mixed`]).
    pub optimizer: OptimizerKind,
    /// f32 precision: run the products through the scaled split (`kernels::gemm`'s split core)
    /// even where the adapter has no tensor cores, in its portable form (f32 FMAs on the same
    /// halves). Where tensor cores run, f32 takes the split anyway; elsewhere this is for tests
    /// of the split step (against float64 and the SGEMM's products), not for speed.
    pub split_products: bool,
    /// Mixed precision: keep each weight matrix's transposed f16 copy beside its f16 copy,
    /// rewritten by the update, so that the input gradients `dY·W` run as `X·Wᵀ` products.
    /// `None` (the default) keeps them for the matrices whose input gradient that puts on the
    /// exact tensor-core kernels, which run `X·Wᵀ` faster than the full core runs `dY·W`
    /// (BENCHMARKS.md §1); `Some(true)` for every matrix (tests of the path on any adapter);
    /// `Some(false)` for none.
    pub transposed_weights: Option<bool>,
}

/// Optimizer state to start a model from ([`Model::with_state`]).
#[derive(Clone, Copy, Debug)]
pub enum StateRef<'a> {
    /// AdamW's first and second moments.
    AdamW(&'a Tensors, &'a Tensors),
    /// AdamW-8bit's codes and scales.
    AdamW8bit(&'a ModelWeights<Moments8>),
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            attention: Attention::Auto,
            precision: Precision::F32,
            scaler: None,
            growth_interval: crate::scaler::DEFAULT_GROWTH_INTERVAL,
            optimizer: OptimizerKind::AdamW,
            split_products: false,
            transposed_weights: None,
        }
    }
}

/// Host copies of every parameter tensor (or gradient, or moment).
pub type Tensors = ModelWeights<Vec<f32>>;

/// How attention runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// The first path of [`AUTO_ORDER_MIXED`] (mixed precision) or [`AUTO_ORDER`] (f32) that
    /// fits (see [`Attention::resolve_for`]).
    Auto,
    /// Register-tiled batched products over materialised probabilities
    /// (`kernels::fast_attention`): one `[B, H, S, S]` workspace per layer.
    Fast,
    /// Fused flash-attention kernels (`kernels::flash_attention`): no workspace (memory
    /// O(B·H·S)), tensor cores in mixed precision where the adapter has them; needs 29 KiB of
    /// workgroup memory (37 KiB on tensor cores).
    Flash,
    /// The streaming kernels (`attention_forward`, `attention_backward_dq`/`_dkdv`): no
    /// workspace, the least workgroup memory (16 KiB), slower.
    Streaming,
}

/// Total bytes of probability workspaces [`Attention::Auto`] allows (wgpu does not say how much
/// memory a device has).
pub const FAST_ATTENTION_BUDGET: u64 = 8 << 30;

/// The paths [`Attention::Auto`] tries in f32 precision, in order: the first that fits is taken
/// ([`Attention::Fast`] where its workspaces fit the adapter and [`FAST_ATTENTION_BUDGET`],
/// [`Attention::Flash`] where the adapter's workgroup memory holds its kernels,
/// [`Attention::Streaming`] everywhere). The f32 flash kernels run without tensor cores and are
/// slower than the fast path's products, so the fast path comes first.
pub const AUTO_ORDER: [Attention; 3] = [Attention::Fast, Attention::Flash, Attention::Streaming];

/// The paths [`Attention::Auto`] tries in mixed precision where attention runs in f16 (head dim a
/// multiple of 4, the flash kernels' f16 form fitting the adapter): flash first. Its f16 kernels
/// are as fast as the fast path's f16 products (BENCHMARKS.md §4) and keep no `[B, H, S, S]`
/// workspace, which frees 12 × 400 MB at gpt2-small's batch of 8. With these two constants,
/// the one place that decides which path a model gets by default.
pub const AUTO_ORDER_MIXED: [Attention; 3] = [Attention::Flash, Attention::Fast, Attention::Streaming];

impl Attention {
    /// The path a model of this shape takes on `gpu` in f32 precision; an explicit path that
    /// cannot run there is an error naming what to use instead.
    pub fn resolve(self, gpu: &Gpu, cfg: &ModelConfig, batch: usize) -> Result<Attention, Error> {
        self.resolve_for(gpu, cfg, batch, false)
    }

    /// [`Attention::resolve`] for a model in mixed precision (`mixed`) or in f32: they differ
    /// only in what [`Attention::Auto`] tries first ([`AUTO_ORDER_MIXED`], [`AUTO_ORDER`]).
    pub fn resolve_for(self, gpu: &Gpu, cfg: &ModelConfig, batch: usize, mixed: bool) -> Result<Attention, Error> {
        let p = fast_params(cfg, batch, cfg.seq_len);
        let total = p.probs_len() as u64 * 4 * cfg.layers as u64;
        let fits = |a: Attention| match a {
            Attention::Fast => p.fits(gpu) && total <= FAST_ATTENTION_BUDGET,
            Attention::Flash => p.flash_fits(gpu, false),
            _ => true,
        };
        match self {
            Attention::Streaming => Ok(Attention::Streaming),
            Attention::Fast if !p.fits(gpu) => Err(Error::Config(format!(
                "the fast attention path needs a {} MiB workspace per layer, over this device's binding limit; use --attention flash or streaming",
                (p.probs_len() * 4) >> 20
            ))),
            Attention::Fast => Ok(Attention::Fast),
            Attention::Flash if !fits(Attention::Flash) => Err(Error::Config(format!(
                "flash attention cannot run this model here ({}): use --attention streaming",
                p.flash_check(gpu, false).err().map_or_else(String::new, |e| e.to_string())
            ))),
            Attention::Flash => Ok(Attention::Flash),
            Attention::Auto => {
                let f16 = mixed && attention16::Attention16::applies(gpu, cfg, batch, true);
                let order = if f16 { AUTO_ORDER_MIXED } else { AUTO_ORDER };
                Ok(order.into_iter().find(|&a| fits(a)).unwrap_or(Attention::Streaming))
            }
        }
    }
}

fn fast_params(cfg: &ModelConfig, batch: usize, seq: usize) -> kernels::fast_attention::Params {
    let dh = cfg.head_dim();
    kernels::fast_attention::Params::new(
        batch as u32,
        seq as u32,
        cfg.heads as u32,
        cfg.kv_heads as u32,
        dh as u32,
        1.0 / (dh as f32).sqrt(),
    )
}

fn scaler_from(values: &[f32]) -> Result<ScalerState, Error> {
    ScalerState::from_gpu(values).map_err(|e| Error::Diverged(format!("loss scaling failed: {e}")))
}

/// The model and its training state on one GPU.
pub struct Model {
    /// The shape.
    pub cfg: ModelConfig,
    /// Sequences per batch the buffers hold.
    pub batch: usize,
    /// The attention path in use.
    pub attention: Attention,
    /// The precision in use (`F32` or `Mixed`, resolved).
    pub precision: Precision,
    gpu: Gpu,
    /// Mixed precision: the weights' f16 copies (f16x4 row layout; vectors as one row).
    w16: Option<Fused<Buffer<kernels::ops::F16x4>>>,
    /// Mixed precision: the weight matrices' transposed f16 copies, where the model keeps them
    /// ([`ModelOptions::transposed_weights`]).
    wt16: Option<products::Transposed>,
    /// Mixed precision: the loss scaler's buffers.
    half: Option<Half>,
    /// The products' plans and their shared workspace.
    plans: products::Plans,
    /// The split mode (f32 on the split core): every weight matrix's halves, made when the
    /// optimizer writes the weights.
    halves: Option<products::Prepared>,
    /// Names, shapes and kinds of the tensors below: the fused set (`params::fused`), which
    /// the methods that take or return host tensors convert from and to the LLaMA layout.
    layout: Fused<Param>,
    /// Each tensor's weights and gradients: parts of `pages`' allocations (`arena`).
    params: Fused<B>,
    grads: Fused<B>,
    /// The per-parameter allocations, as the update binds them.
    pages: arena::Pages,
    opt: Optimizer,
    ids: Buffer<u32>,
    targets: Buffer<u32>,
    acts: Activations,
    /// The loss sum and target count of the last forward pass.
    loss_out: B,
    s: Scratch,
    /// The tokens whose keys and values sequence 0 of the layers' K and V buffers holds, at
    /// positions 0 … len − 1 (the generation cache, [`Model::next_logits_cached`]); empty when
    /// they hold anything else.
    cache: Vec<u32>,
}

impl Model {
    /// Allocates everything for batches of up to `batch` sequences and uploads `weights`;
    /// moments start at zero unless `moments` (m, v) is given.
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        batch: usize,
        weights: &Tensors,
        moments: Option<(&Tensors, &Tensors)>,
    ) -> Result<Model, Error> {
        Model::with_attention(gpu, cfg, batch, weights, moments, Attention::Auto)
    }

    /// The GPU context.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn load_tokens(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<(), Error> {
        let need = batch * self.cfg.seq_len;
        if batch == 0 || batch > self.batch || tokens.len() != need || targets.len() != need {
            return Err(Error::Config(format!(
                "a batch of {batch} sequences of {} tokens needs {need} tokens and targets (buffers hold {} sequences)",
                self.cfg.seq_len, self.batch
            )));
        }
        // Unused rows keep stale ids; every kernel is told the real row count.
        let mut ids = tokens.to_vec();
        ids.resize(self.batch * self.cfg.seq_len, 0);
        let mut tg = targets.to_vec();
        tg.resize(self.batch * self.cfg.seq_len, u32::MAX);
        self.ids.write(&self.gpu, &ids)?;
        self.targets.write(&self.gpu, &tg)?;
        Ok(())
    }

    /// One training step on `batch` sequences: forward, loss, backward, clipping and AdamW,
    /// recorded into one batch and submitted once. `step` is 0-based (it sets the learning rate
    /// and the bias corrections). Nothing is read back.
    pub fn train_step(
        &mut self,
        tokens: &[u32],
        targets: &[u32],
        batch: usize,
        t: &TrainConfig,
        step: u64,
    ) -> Result<(), Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_step(&b, batch, t, step)?;
        b.submit()?;
        Ok(())
    }

    /// [`Model::train_step`] as one rank of a data-parallel run: forward, loss and backward are
    /// submitted, `c` averages the gradients over the ranks (and, in mixed precision, the loss
    /// scaler's overflow flags: one rank's overflow skips the step on all), then clipping (on
    /// the global norm: that of the averaged gradients) and AdamW run as in a single-GPU step.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn train_step_averaged(
        &mut self,
        tokens: &[u32],
        targets: &[u32],
        batch: usize,
        t: &TrainConfig,
        step: u64,
        c: &mut dyn crate::dist::Collective,
    ) -> Result<(), Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, batch, self.cfg.seq_len, None)?;
        self.record_loss(&b, batch * self.cfg.seq_len)?;
        self.record_backward(&b, batch)?;
        b.submit()?;
        let grads: Vec<&B> = self.grads.iter().collect();
        c.average_gradients(&gpu, &grads)?;
        if let Some(h) = &mut self.half {
            let mut raised = [h.flag.read(&gpu)?.first().map_or(0.0, |&f| f64::from(u32::from(f != 0)))];
            c.sum_f64(&mut raised)?;
            h.flag.write(&gpu, &[u32::from(raised[0] > 0.0)])?;
        }
        let b = gpu.batch();
        self.record_update(&b, t, step)?;
        b.submit()?;
        Ok(())
    }

    /// Records everything of one training step into `b`: forward, loss, backward, clipping and
    /// AdamW (the tokens already loaded).
    fn record_step(&mut self, b: &kernels::Batch<'_>, batch: usize, t: &TrainConfig, step: u64) -> Result<(), Error> {
        self.record_forward(b, batch, self.cfg.seq_len, None)?;
        self.record_loss(b, batch * self.cfg.seq_len)?;
        self.record_backward(b, batch)?;
        self.record_update(b, t, step)
    }

    /// The number of dispatches a training step on `batch` sequences records, with nothing
    /// run: the step is recorded as [`Model::train_step`] records it, then discarded. The
    /// weights and optimizer state are unchanged (the generation cache is emptied, as by any
    /// step); the count does not depend on the tokens, so none are loaded.
    pub fn step_dispatches(&mut self, batch: usize, t: &TrainConfig, step: u64) -> Result<usize, Error> {
        if batch == 0 || batch > self.batch {
            return Err(Error::Config(format!("a step of {batch} sequences (buffers hold {})", self.batch)));
        }
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_step(&b, batch, t, step)?;
        Ok(b.dispatches())
    }

    /// A training step recorded into a profiled batch: GPU time of every dispatch.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn profile_step(
        &mut self,
        tokens: &[u32],
        targets: &[u32],
        batch: usize,
        t: &TrainConfig,
        step: u64,
    ) -> Result<kernels::Profile, Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.profiled_batch(4096)?;
        self.record_step(&b, batch, t, step)?;
        Ok(b.submit_profiled()?)
    }

    /// The mean loss of the last step or evaluation (reads two floats back).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_loss(&self) -> Result<f32, Error> {
        Ok(mean_loss(&self.loss_out.read(&self.gpu)?))
    }

    /// The global gradient norm of the last update, before clipping (unscaled in mixed
    /// precision); `None` when the loss scaler skipped that step (its gradients were not finite).
    /// Reads the optimizer's statistics back (and the scaler's state in mixed precision).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_grad_norm(&self) -> Result<Option<f32>, Error> {
        let norm = self.opt.stats.read(&self.gpu)?[2];
        let Some(h) = &self.half else { return Ok(Some(norm)) };
        // The norm is of the scaled gradients; the scale this step used is the state's after
        // the step, halved back if the step just doubled it (clean count 0 after a clean step).
        let s = crate::scaler::ScalerState::from_gpu(&h.state.read(&self.gpu)?).map_err(Error::Config)?;
        if s.last_skipped {
            return Ok(None);
        }
        let used = if s.clean_steps == 0 { s.scale / 2.0 } else { s.scale };
        Ok(Some(norm / used))
    }

    /// [`Model::read_loss`] without blocking.
    pub async fn read_loss_async(&self) -> Result<f32, Error> {
        Ok(mean_loss(&self.loss_out.read_async(&self.gpu).await?))
    }

    /// Forward, loss and backward of one batch without updating: gradients are added to the
    /// gradient buffers. Returns the loss. (For tests and tools.)
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_backward(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<f32, Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, batch, self.cfg.seq_len, None)?;
        self.record_loss(&b, batch * self.cfg.seq_len)?;
        self.record_backward(&b, batch)?;
        b.submit()?;
        self.read_loss()
    }

    /// Records and submits the forward pass and the loss of a batch, with no gradients.
    fn submit_eval(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<(), Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, batch, self.cfg.seq_len, None)?;
        self.record_eval_loss(&b, batch * self.cfg.seq_len)?;
        b.submit()?;
        Ok(())
    }

    /// The mean loss of a batch, with no gradients.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn eval_loss(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<f32, Error> {
        self.submit_eval(tokens, targets, batch)?;
        self.read_loss()
    }

    /// [`Model::eval_loss`] without blocking.
    pub async fn eval_loss_async(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<f32, Error> {
        self.submit_eval(tokens, targets, batch)?;
        self.read_loss_async().await
    }

    /// Records and submits the forward pass of `context`'s last `seq_len` tokens (`pass`: full
    /// or a prefill of the cache); returns how many that is.
    fn submit_next(&mut self, context: &[u32], pass: forward::Pass) -> Result<usize, Error> {
        if context.is_empty() {
            return Err(Error::Config("generation needs at least one token of prompt".into()));
        }
        let ctx = &context[context.len().saturating_sub(self.cfg.seq_len)..];
        let n = ctx.len();
        let mut ids = ctx.to_vec();
        ids.resize(self.batch * self.cfg.seq_len, 0);
        self.ids.write(&self.gpu, &ids)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_pass(&b, 1, n, pass)?;
        b.submit()?;
        Ok(n)
    }

    /// The logits for the token after `context` (its last `seq_len` tokens are used).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn next_logits(&mut self, context: &[u32]) -> Result<Vec<f32>, Error> {
        let n = self.submit_next(context, forward::Pass::Full)?;
        let v = self.cfg.vocab;
        Ok(self.acts.logits.read_range(&self.gpu, (n - 1) * v..n * v)?)
    }

    /// Records and submits what [`Model::next_logits_cached`] runs; returns the row of the
    /// logits. A context that extends the cached tokens by one, inside the context length, runs
    /// that token alone (position t = the cached count); any other runs the whole window and,
    /// when it fits the context length, caches it.
    fn submit_cached(&mut self, context: &[u32]) -> Result<usize, Error> {
        let n = context.len();
        let extends =
            n >= 2 && n <= self.cfg.seq_len && self.cache.len() == n - 1 && context[..n - 1] == self.cache[..];
        if !extends {
            let rows = self.submit_next(context, forward::Pass::Prefill)?;
            if n <= self.cfg.seq_len {
                self.cache = context.to_vec();
            }
            return Ok(rows - 1);
        }
        let mut ids = vec![0; self.batch * self.cfg.seq_len];
        ids[0] = context[n - 1];
        self.ids.write(&self.gpu, &ids)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, 1, 1, Some(n - 1))?;
        b.submit()?;
        self.cache.push(context[n - 1]);
        Ok(0)
    }

    /// [`Model::next_logits`] with a key/value cache for generation: each layer's keys and
    /// values of the context stay in its K and V buffers (sequence 0) between calls, so when
    /// `context` is the previous call's plus one token, only that token runs through the model
    /// (its query against the cache: `attention::attention_decode`), and a token costs O(context)
    /// instead of a forward pass over the whole context. Any other context (the first, or one
    /// that does not extend the cached tokens) runs whole and is cached while it fits the
    /// context length; past it, the window of the last `seq_len` tokens moves by one position
    /// with every token, which no cache can follow, so each call runs the window as
    /// `next_logits` does. Any other use of the model (a step, an evaluation) empties the cache.
    /// The first call's logits are `next_logits`'s bits; later ones differ by rounding only (the
    /// same function summed in another order).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn next_logits_cached(&mut self, context: &[u32]) -> Result<Vec<f32>, Error> {
        let row = self.submit_cached(context)?;
        let v = self.cfg.vocab;
        Ok(self.acts.logits.read_range(&self.gpu, row * v..(row + 1) * v)?)
    }

    /// [`Model::next_logits_cached`] without blocking (it reads the whole logits buffer back, as
    /// [`Model::next_logits_async`] does).
    pub async fn next_logits_cached_async(&mut self, context: &[u32]) -> Result<Vec<f32>, Error> {
        let row = self.submit_cached(context)?;
        let v = self.cfg.vocab;
        let mut all = self.acts.logits.read_async(&self.gpu).await?;
        all.truncate((row + 1) * v);
        Ok(all.split_off(row * v))
    }

    /// [`Model::next_logits`] without blocking. (It reads the whole logits buffer back: the
    /// runtime has no asynchronous partial read.)
    pub async fn next_logits_async(&mut self, context: &[u32]) -> Result<Vec<f32>, Error> {
        let n = self.submit_next(context, forward::Pass::Full)?;
        let v = self.cfg.vocab;
        let mut all = self.acts.logits.read_async(&self.gpu).await?;
        all.truncate(n * v);
        Ok(all.split_off((n - 1) * v))
    }

    /// Reads a fused set back as the LLaMA-layout tensors.
    #[cfg(not(target_arch = "wasm32"))]
    fn read_all(&self, tensors: &Fused<B>) -> Result<Tensors, Error> {
        fused::unfuse(&self.cfg, tensors.as_ref().try_map(|b| b.read(&self.gpu))?)
    }

    async fn read_all_async(&self, tensors: &Fused<B>) -> Result<Tensors, Error> {
        let mut out = Vec::with_capacity(tensors.count());
        for b in tensors.as_ref().into_vec() {
            out.push(b.read_async(&self.gpu).await?);
        }
        fused::unfuse(&self.cfg, Fused::from_vec(out, self.cfg.layers)?)
    }

    /// Copies the parameters back to the host (LLaMA layout, `params::layout`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn weights(&self) -> Result<Tensors, Error> {
        self.read_all(&self.params)
    }

    /// [`Model::weights`] without blocking.
    pub async fn weights_async(&self) -> Result<Tensors, Error> {
        self.read_all_async(&self.params).await
    }

    /// Copies the gradient buffers back to the host, LLaMA layout (in mixed precision, after a
    /// [`Model::forward_backward`], multiplied by the loss scale).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn gradients(&self) -> Result<Tensors, Error> {
        self.read_all(&self.grads)
    }

    /// The loss scaler's state (mixed precision; `None` in f32). Reads a few floats back.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn scaler_state(&self) -> Result<Option<ScalerState>, Error> {
        let Some(h) = &self.half else { return Ok(None) };
        scaler_from(&h.state.read(&self.gpu)?).map(Some)
    }

    /// [`Model::scaler_state`] without blocking.
    pub async fn scaler_state_async(&self) -> Result<Option<ScalerState>, Error> {
        let Some(h) = &self.half else { return Ok(None) };
        scaler_from(&h.state.read_async(&self.gpu).await?).map(Some)
    }

    /// The optimizer in use.
    pub fn optimizer(&self) -> OptimizerKind {
        match self.opt.state {
            State::AdamW { .. } => OptimizerKind::AdamW,
            State::AdamW8bit { .. } => OptimizerKind::AdamW8bit,
        }
    }

    /// Bytes of per-parameter optimizer state on the GPU (the moments, or the 8-bit codes and
    /// their scales).
    pub fn optimizer_state_bytes(&self) -> u64 {
        let sum = |t: &Fused<B>| t.iter().map(|b| 4 * b.len() as u64).sum::<u64>();
        let sum32 = |t: &ModelWeights<Buffer<u32>>| t.iter().map(|b| 4 * b.len() as u64).sum::<u64>();
        match &self.opt.state {
            State::AdamW { m, v } => sum(m) + sum(v),
            State::AdamW8bit { mq, vq, qscale } => {
                sum32(mq) + sum32(vq) + qscale.iter().map(|b| 4 * b.len() as u64).sum::<u64>()
            }
        }
    }

    /// Mixed precision: the bytes of the weights' f16 copies and of the matrices' transposed f16
    /// copies (0 where the model keeps none: [`ModelOptions::transposed_weights`]); `None` in
    /// f32.
    pub fn weight_copies_bytes(&self) -> Option<(u64, u64)> {
        let w16 = self.w16.as_ref()?;
        let copies = w16.iter().map(|b| 8 * b.len() as u64).sum();
        let transposed = self.wt16.as_ref().map_or(0, |t| t.parts.iter().flatten().map(|b| 8 * b.len() as u64).sum());
        Some((copies, transposed))
    }

    fn not_adamw(&self) -> Error {
        Error::Config(format!("this model's optimizer is {}, which keeps no f32 moments", self.optimizer().name()))
    }

    /// Copies the AdamW moments back to the host, LLaMA layout: (m, v). An error for AdamW-8bit
    /// ([`Model::moments8`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn moments(&self) -> Result<(Tensors, Tensors), Error> {
        let State::AdamW { m, v } = &self.opt.state else { return Err(self.not_adamw()) };
        Ok((self.read_all(m)?, self.read_all(v)?))
    }

    /// [`Model::moments`] without blocking.
    pub async fn moments_async(&self) -> Result<(Tensors, Tensors), Error> {
        let State::AdamW { m, v } = &self.opt.state else { return Err(self.not_adamw()) };
        Ok((self.read_all_async(m).await?, self.read_all_async(v).await?))
    }

    /// Copies AdamW-8bit's state back to the host (`None` for AdamW).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn moments8(&self) -> Result<Option<ModelWeights<Moments8>>, Error> {
        let State::AdamW8bit { mq, vq, qscale } = &self.opt.state else { return Ok(None) };
        let layout = crate::params::layout(&self.cfg);
        let mut out = Vec::with_capacity(layout.count());
        for (((p, mq), vq), qs) in layout.iter().zip(mq.iter()).zip(vq.iter()).zip(qscale.iter()) {
            let n = p.elements();
            out.push(Moments8 {
                mq: Moments8::codes(&mq.read(&self.gpu)?, n)?,
                vq: Moments8::codes(&vq.read(&self.gpu)?, n)?,
                qscale: qs.read(&self.gpu)?,
            });
        }
        ModelWeights::from_vec(out, self.cfg.layers).map(Some)
    }

    /// [`Model::moments8`] without blocking.
    pub async fn moments8_async(&self) -> Result<Option<ModelWeights<Moments8>>, Error> {
        let State::AdamW8bit { mq, vq, qscale } = &self.opt.state else { return Ok(None) };
        let layout = crate::params::layout(&self.cfg);
        let mut out = Vec::with_capacity(layout.count());
        for (((p, mq), vq), qs) in layout.iter().zip(mq.iter()).zip(vq.iter()).zip(qscale.iter()) {
            let n = p.elements();
            out.push(Moments8 {
                mq: Moments8::codes(&mq.read_async(&self.gpu).await?, n)?,
                vq: Moments8::codes(&vq.read_async(&self.gpu).await?, n)?,
                qscale: qs.read_async(&self.gpu).await?,
            });
        }
        ModelWeights::from_vec(out, self.cfg.layers).map(Some)
    }
}

/// The mean loss from `loss_out`'s (sum, count).
fn mean_loss(out: &[f32]) -> f32 {
    if out[1] > 0.0 { out[0] / out[1] } else { 0.0 }
}
