//! The model on the GPU: parameters, gradients, AdamW moments and every activation the backward
//! pass needs live in GPU buffers; a training step is recorded into one batch (forward,
//! backward, gradient-norm clipping, AdamW) and submitted once. Nothing is read back inside a
//! step; the loss is read only when asked for.
//!
//! Shapes: M = batch · seq_len rows; D model width; F SwiGLU width; H·Dh query width; Hkv·Dh
//! key/value width; V = 256. Linear layers keep PyTorch's [out, in] weight layout, so the forward
//! is `Y = X·Wᵀ` (`matmul_t`), the input gradient `dX = dY·W` (`matmul`) and the weight gradient
//! `dW += dYᵀ·X` (`matmul_at_acc`, split along the tokens when the output is small:
//! `kernels::ops::matmul_at_acc_split`).

use crate::Error;
use crate::config::{ModelConfig, TrainConfig};
use crate::params;
use kernels::attention::attention_forward;
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq, rope_k_backward, rope_q_backward};
use kernels::backward_ffn::ffn_swiglu_backward;
use kernels::embedding::{embed_backward, embed_lookup};
use kernels::infrastructure::{axpy, copy};
use kernels::linear::{matmul, matmul_residual, matmul_t, matmul_t_acc};
use kernels::loss::{cross_entropy, sum_losses};
use kernels::norm::{rmsnorm_backward, rmsnorm_dgamma_reduce, rmsnorm_forward};
use kernels::ops::{matmul_at_acc_split, weight_grad_scratch_len};
use kernels::optimizer::{adamw_update, finalize_grad_stats, reduce_norm_sq};
use kernels::rope::{rope_k, rope_q};
use kernels::{Batch, Buffer, Gpu};

type B = Buffer<f32>;

/// Host copies of tensors, in [`params::shapes`] order.
pub type Tensors = Vec<Vec<f32>>;

/// How attention runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// The fast path where its probability workspaces fit (see [`Attention::resolve`]),
    /// otherwise the streaming kernels.
    Auto,
    /// Register-tiled batched products over materialised probabilities
    /// (`kernels::fast_attention`): one `[B, H, S, S]` workspace per layer.
    Fast,
    /// The streaming kernels (`attention_forward`, `attention_backward_dq`/`_dkdv`): no
    /// workspace, slower.
    Streaming,
}

/// Total bytes of probability workspaces [`Attention::Auto`] allows (wgpu does not say how much
/// memory a device has).
pub const FAST_ATTENTION_BUDGET: u64 = 8 << 30;

impl Attention {
    /// The path a model of this shape takes on `gpu`.
    pub fn resolve(self, gpu: &Gpu, cfg: &ModelConfig, batch: usize) -> Result<Attention, Error> {
        let p = fast_params(cfg, batch, cfg.seq_len);
        let total = p.probs_len() as u64 * 4 * cfg.layers as u64;
        match self {
            Attention::Streaming => Ok(Attention::Streaming),
            Attention::Fast if !p.fits(gpu) => Err(Error::Config(format!(
                "the fast attention path needs a {} MiB workspace per layer, over this device's binding limit; use --attention streaming",
                (p.probs_len() * 4) >> 20
            ))),
            Attention::Fast => Ok(Attention::Fast),
            Attention::Auto if p.fits(gpu) && total <= FAST_ATTENTION_BUDGET => Ok(Attention::Fast),
            Attention::Auto => Ok(Attention::Streaming),
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

/// Activations one layer keeps for its backward pass.
struct Layer {
    x_in: B,
    h1: B,
    rrms1: B,
    q: B,
    k: B,
    v: B,
    att: B,
    lse: B,
    x_mid: B,
    h2: B,
    rrms2: B,
    g: B,
    u: B,
    a: B,
    /// The fast path's probabilities (P, then dS in the backward); empty when streaming.
    probs: Option<B>,
}

/// Scratch for the backward pass.
struct Scratch {
    dx: B,
    dxn: B,
    da: B,
    ma: B,
    mb: B,
    dg: B,
    du: B,
    datt: B,
    dq: B,
    dk: B,
    dv: B,
    delta: B,
    norm_partials: B,
    fast_delta: Option<B>,
    /// Parts of split weight gradients.
    wgrad: B,
}

/// Index of a parameter in [`params::shapes`] order.
mod ix {
    pub const EMB: usize = 0;
    pub fn layer(l: usize) -> usize {
        1 + 9 * l
    }
    pub const ATTN_NORM: usize = 0;
    pub const WQ: usize = 1;
    pub const WK: usize = 2;
    pub const WV: usize = 3;
    pub const WO: usize = 4;
    pub const FFN_NORM: usize = 5;
    pub const W1: usize = 6;
    pub const W3: usize = 7;
    pub const W2: usize = 8;
}

/// The model and its training state on one GPU.
pub struct Model {
    /// The shape.
    pub cfg: ModelConfig,
    /// Sequences per batch the buffers hold.
    pub batch: usize,
    /// The attention path in use.
    pub attention: Attention,
    gpu: Gpu,
    params: Vec<B>,
    grads: Vec<B>,
    m: Vec<B>,
    v: Vec<B>,
    decay: Vec<bool>,
    ids: Buffer<u32>,
    targets: Buffer<u32>,
    xf: B,
    layers: Vec<Layer>,
    hf: B,
    rrms_f: B,
    logits: B,
    losses: B,
    loss_out: B,
    s: Scratch,
    norm_offsets: Vec<u32>,
    norm_partials: B,
    norm_bad: Buffer<u32>,
    stats: B,
}

impl Model {
    /// Allocates everything for batches of up to `batch` sequences and uploads `weights`
    /// (in [`params::shapes`] order); moments start at zero unless `moments` is given.
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        batch: usize,
        weights: &[Vec<f32>],
        moments: Option<(&Tensors, &Tensors)>,
    ) -> Result<Model, Error> {
        Model::with_attention(gpu, cfg, batch, weights, moments, Attention::Auto)
    }

    /// [`Model::new`] with a chosen attention path.
    pub fn with_attention(
        gpu: &Gpu,
        cfg: &ModelConfig,
        batch: usize,
        weights: &[Vec<f32>],
        moments: Option<(&Tensors, &Tensors)>,
        attention: Attention,
    ) -> Result<Model, Error> {
        cfg.validate()?;
        let attention = attention.resolve(gpu, cfg, batch)?;
        let fast = attention == Attention::Fast;
        let probs_len = fast_params(cfg, batch, cfg.seq_len).probs_len();
        let shapes = params::shapes(cfg);
        if weights.len() != shapes.len()
            || weights.iter().zip(&shapes).any(|(w, (_, s))| w.len() != s.iter().product::<usize>())
        {
            return Err(Error::Config("weights do not match the model's parameter shapes".into()));
        }
        let (d, f, s) = (cfg.dim, cfg.ffn_hidden, cfg.seq_len);
        let (hq, kv) = (cfg.heads * cfg.head_dim(), cfg.kv_dim());
        let m = batch * s;
        let z = |n: usize| gpu.zeros::<f32>(n);
        let mut params = Vec::new();
        let mut grads = Vec::new();
        let mut mo = Vec::new();
        let mut vo = Vec::new();
        for (i, w) in weights.iter().enumerate() {
            params.push(gpu.upload(w)?);
            grads.push(z(w.len())?);
            match moments {
                Some((mm, vv)) => {
                    mo.push(gpu.upload(&mm[i])?);
                    vo.push(gpu.upload(&vv[i])?);
                }
                None => {
                    mo.push(z(w.len())?);
                    vo.push(z(w.len())?);
                }
            }
        }
        let mut layers = Vec::new();
        for _ in 0..cfg.layers {
            layers.push(Layer {
                x_in: z(m * d)?,
                h1: z(m * d)?,
                rrms1: z(m)?,
                q: z(m * hq)?,
                k: z(m * kv)?,
                v: z(m * kv)?,
                att: z(m * hq)?,
                lse: z(batch * cfg.heads * s)?,
                x_mid: z(m * d)?,
                h2: z(m * d)?,
                rrms2: z(m)?,
                g: z(m * f)?,
                u: z(m * f)?,
                a: z(m * f)?,
                probs: if fast { Some(z(probs_len)?) } else { None },
            });
        }
        let norm_block = kernels::norm::NORM_BLOCK as usize;
        let s_ = Scratch {
            dx: z(m * d)?,
            dxn: z(m * d)?,
            da: z(m * f)?,
            ma: z(m * d)?,
            mb: z(m * d)?,
            dg: z(m * f)?,
            du: z(m * f)?,
            datt: z(m * hq)?,
            dq: z(m * hq)?,
            dk: z(m * kv)?,
            dv: z(m * kv)?,
            delta: z(batch * cfg.heads * s)?,
            norm_partials: z(m.div_ceil(norm_block) * d)?,
            fast_delta: if fast { Some(z(batch * cfg.heads * s)?) } else { None },
            wgrad: z([(d, cfg.vocab), (f, d), (d, f), (hq, d), (d, hq), (d, kv)]
                .iter()
                .map(|&(n, k)| weight_grad_scratch_len(m, n, k))
                .max()
                .unwrap_or(0)
                .max(1))?,
        };
        let block = kernels::optimizer::NORM_BLOCK as usize;
        let mut norm_offsets = Vec::new();
        let mut total = 0usize;
        for w in weights {
            norm_offsets.push(total as u32);
            total += w.len().div_ceil(block);
        }
        Ok(Model {
            cfg: cfg.clone(),
            batch,
            attention,
            gpu: gpu.clone(),
            decay: shapes.iter().map(|(n, _)| params::decays(n)).collect(),
            params,
            grads,
            m: mo,
            v: vo,
            ids: gpu.zeros(m)?,
            targets: gpu.zeros(m)?,
            xf: z(m * d)?,
            layers,
            hf: z(m * d)?,
            rrms_f: z(m)?,
            logits: z(m * cfg.vocab)?,
            losses: z(m)?,
            loss_out: z(2)?,
            s: s_,
            norm_offsets,
            norm_partials: z(total.max(1))?,
            norm_bad: gpu.zeros(total.max(1))?,
            stats: z(4)?,
        })
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
        // Unused rows keep stale ids; every kernel below is told the real row count.
        let mut ids = tokens.to_vec();
        ids.resize(self.batch * self.cfg.seq_len, 0);
        let mut tg = targets.to_vec();
        tg.resize(self.batch * self.cfg.seq_len, u32::MAX);
        self.ids.write(&self.gpu, &ids)?;
        self.targets.write(&self.gpu, &tg)?;
        Ok(())
    }

    /// Records the forward pass of `batch` sequences of `seq` tokens (seq ≤ seq_len) up to the
    /// logits.
    fn record_forward(&mut self, b: &Batch<'_>, batch: usize, seq: usize) -> Result<(), Error> {
        let c = &self.cfg;
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let (hq, kv) = (h * dh, hkv * dh);
        let rows = (batch * seq) as u32;
        let (bt, sq) = (batch as u32, seq as u32);
        let eps = c.norm_eps;
        let base = c.rope_base;
        let scale = 1.0 / (dh as f32).sqrt();
        let mm = |n: u32, k: u32| kernels::linear::matmul::Params::new(rows, n, k);
        let norm = kernels::norm::rmsnorm_forward::Params::new(rows, d, eps);
        let p = &self.params;
        embed_lookup(
            b,
            &self.ids,
            &p[ix::EMB],
            &mut self.layers[0].x_in,
            kernels::embedding::embed_lookup::Params::new(rows, d, v),
        )?;
        for l in 0..c.layers {
            let w = ix::layer(l);
            let (this, next) = self.layers.split_at_mut(l + 1);
            let layer = &mut this[l];
            rmsnorm_forward(b, &layer.x_in, &p[w + ix::ATTN_NORM], &mut layer.h1, &mut layer.rrms1, norm)?;
            matmul_t(b, &layer.h1, &p[w + ix::WQ], &mut layer.q, mm(hq, d))?;
            matmul_t(b, &layer.h1, &p[w + ix::WK], &mut layer.k, mm(kv, d))?;
            matmul_t(b, &layer.h1, &p[w + ix::WV], &mut layer.v, mm(kv, d))?;
            rope_q(b, &mut layer.q, kernels::rope::rope_q::Params::new(bt, sq, h, dh, 0, base))?;
            rope_k(b, &mut layer.k, kernels::rope::rope_k::Params::new(bt, sq, hkv, dh, 0, base))?;
            match &mut layer.probs {
                Some(probs) => {
                    let fp = fast_params(c, batch, seq);
                    kernels::fast_attention::forward(
                        b,
                        &layer.q,
                        &layer.k,
                        &layer.v,
                        &mut layer.att,
                        &mut layer.lse,
                        probs,
                        fp,
                    )?;
                }
                None => {
                    let ap = kernels::attention::attention_forward::Params::new(bt, sq, h, hkv, dh, scale);
                    attention_forward(b, &layer.q, &layer.k, &layer.v, &mut layer.att, &mut layer.lse, ap)?;
                }
            }
            // x_mid = x_in + att·Woᵀ
            copy(b, &layer.x_in, &mut layer.x_mid, rows * d)?;
            matmul_t_acc(b, &layer.att, &p[w + ix::WO], &mut layer.x_mid, mm(d, hq))?;
            rmsnorm_forward(b, &layer.x_mid, &p[w + ix::FFN_NORM], &mut layer.h2, &mut layer.rrms2, norm)?;
            matmul_t(b, &layer.h2, &p[w + ix::W1], &mut layer.g, mm(f, d))?;
            matmul_t(b, &layer.h2, &p[w + ix::W3], &mut layer.u, mm(f, d))?;
            let sw = kernels::activation::swiglu_combine::Params::new(rows * f);
            kernels::activation::swiglu_combine(b, &layer.g, &layer.u, &mut layer.a, sw)?;
            // The layer's output x_mid + a·W2ᵀ is the next layer's input (or the final one's).
            let out = match next.first_mut() {
                Some(n) => &mut n.x_in,
                None => &mut self.xf,
            };
            copy(b, &layer.x_mid, out, rows * d)?;
            matmul_t_acc(b, &layer.a, &p[w + ix::W2], out, mm(d, f))?;
        }
        rmsnorm_forward(b, &self.xf, &p[p.len() - 1], &mut self.hf, &mut self.rrms_f, norm)?;
        matmul_t(b, &self.hf, &p[ix::EMB], &mut self.logits, mm(v, d))?;
        Ok(())
    }

    /// Records the loss of the targets: logits become dlogits in place (the gradient of the mean
    /// loss over the `rows` targets), and the loss sum and count go to `loss_out`.
    fn record_loss(&mut self, b: &Batch<'_>, rows: usize) -> Result<(), Error> {
        let v = self.cfg.vocab as u32;
        let p = kernels::loss::cross_entropy::Params::new(rows as u32, v, 0.0, 0.0, 1.0 / rows as f32);
        cross_entropy(b, &mut self.logits, &self.targets, &mut self.losses, p)?;
        sum_losses(
            b,
            &self.losses,
            &self.targets,
            &mut self.loss_out,
            kernels::loss::sum_losses::Params::new(rows as u32, v),
        )?;
        Ok(())
    }

    /// Records the backward pass of a full batch (after `record_forward` and `record_loss`),
    /// accumulating every parameter's gradient (+=).
    fn record_backward(&mut self, b: &Batch<'_>, batch: usize) -> Result<(), Error> {
        let Model { cfg, params: p, grads: g, layers, s, xf, hf, rrms_f, logits, ids, .. } = self;
        let c = &*cfg;
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let (hq, kv) = (h * dh, hkv * dh);
        let rows = (batch * c.seq_len) as u32;
        let (bt, sq) = (batch as u32, c.seq_len as u32);
        let scale = 1.0 / (dh as f32).sqrt();
        let base = c.rope_base;
        // Params { m: rows, n, k } of every product below.
        let mm = |n: u32, k: u32| kernels::linear::matmul::Params::new(rows, n, k);
        let nb = kernels::norm::rmsnorm_backward::Params::new(rows, d);
        let nr = kernels::norm::rmsnorm_dgamma_reduce::Params::new(rows, d);
        let add = kernels::infrastructure::axpy::Params::new(rows * d, 1.0);
        let last = p.len() - 1;

        // Head (tied to the embedding): dhf = dlogits·E, dE += dlogitsᵀ·hf.
        matmul(b, logits, &p[ix::EMB], &mut s.ma, mm(d, v))?;
        matmul_at_acc_split(b, logits, hf, &mut g[ix::EMB], &mut s.wgrad, rows as usize, d as usize, v as usize)?;
        // Final norm: dx = ∂/∂x_final.
        rmsnorm_backward(b, xf, &p[last], rrms_f, &s.ma, &mut s.dx, &mut s.norm_partials, nb)?;
        rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut g[last], nr)?;

        for l in (0..c.layers).rev() {
            let w = ix::layer(l);
            let y = &mut layers[l];
            // Feed-forward: out = x_mid + (silu(g)·u)·W2ᵀ, g = h2·W1ᵀ, u = h2·W3ᵀ.
            matmul(b, &s.dx, &p[w + ix::W2], &mut s.da, mm(f, d))?;
            matmul_at_acc_split(
                b,
                &s.dx,
                &y.a,
                &mut g[w + ix::W2],
                &mut s.wgrad,
                rows as usize,
                f as usize,
                d as usize,
            )?;
            let sb = kernels::backward_ffn::ffn_swiglu_backward::Params::new(rows * f);
            ffn_swiglu_backward(b, &y.g, &y.u, &s.da, &mut s.dg, &mut s.du, sb)?;
            matmul_at_acc_split(
                b,
                &s.dg,
                &y.h2,
                &mut g[w + ix::W1],
                &mut s.wgrad,
                rows as usize,
                d as usize,
                f as usize,
            )?;
            matmul_at_acc_split(
                b,
                &s.du,
                &y.h2,
                &mut g[w + ix::W3],
                &mut s.wgrad,
                rows as usize,
                d as usize,
                f as usize,
            )?;
            matmul(b, &s.dg, &p[w + ix::W1], &mut s.ma, mm(d, f))?;
            matmul_residual(b, &s.du, &p[w + ix::W3], &s.ma, &mut s.mb, mm(d, f))?;
            rmsnorm_backward(b, &y.x_mid, &p[w + ix::FFN_NORM], &y.rrms2, &s.mb, &mut s.dxn, &mut s.norm_partials, nb)?;
            rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut g[w + ix::FFN_NORM], nr)?;
            axpy(b, &s.dxn, &mut s.dx, add)?;
            // Attention: x_mid = x_in + att·Woᵀ.
            matmul(b, &s.dx, &p[w + ix::WO], &mut s.datt, mm(hq, d))?;
            matmul_at_acc_split(
                b,
                &s.dx,
                &y.att,
                &mut g[w + ix::WO],
                &mut s.wgrad,
                rows as usize,
                hq as usize,
                d as usize,
            )?;
            match (&mut y.probs, &mut s.fast_delta) {
                (Some(probs), Some(delta)) => {
                    let fp = fast_params(c, batch, c.seq_len);
                    kernels::fast_attention::backward(
                        b, &y.q, &y.k, &y.v, &y.att, &s.datt, probs, delta, &mut s.dq, &mut s.dk, &mut s.dv, fp,
                    )?;
                }
                _ => {
                    let ap = kernels::backward_attention::attention_backward_dq::Params::new(bt, sq, h, hkv, dh, scale);
                    attention_backward_dq(b, &y.q, &y.k, &y.v, &y.att, &s.datt, &y.lse, &mut s.dq, &mut s.delta, ap)?;
                    let kp =
                        kernels::backward_attention::attention_backward_dkdv::Params::new(bt, sq, h, hkv, dh, scale);
                    attention_backward_dkdv(b, &y.q, &y.k, &y.v, &s.datt, &y.lse, &s.delta, &mut s.dk, &mut s.dv, kp)?;
                }
            }
            rope_q_backward(
                b,
                &mut s.dq,
                kernels::backward_attention::rope_q_backward::Params::new(bt, sq, h, dh, 0, base),
            )?;
            rope_k_backward(
                b,
                &mut s.dk,
                kernels::backward_attention::rope_k_backward::Params::new(bt, sq, hkv, dh, 0, base),
            )?;
            matmul_at_acc_split(
                b,
                &s.dq,
                &y.h1,
                &mut g[w + ix::WQ],
                &mut s.wgrad,
                rows as usize,
                d as usize,
                hq as usize,
            )?;
            matmul_at_acc_split(
                b,
                &s.dk,
                &y.h1,
                &mut g[w + ix::WK],
                &mut s.wgrad,
                rows as usize,
                d as usize,
                kv as usize,
            )?;
            matmul_at_acc_split(
                b,
                &s.dv,
                &y.h1,
                &mut g[w + ix::WV],
                &mut s.wgrad,
                rows as usize,
                d as usize,
                kv as usize,
            )?;
            matmul(b, &s.dq, &p[w + ix::WQ], &mut s.ma, mm(d, hq))?;
            matmul_residual(b, &s.dk, &p[w + ix::WK], &s.ma, &mut s.mb, mm(d, kv))?;
            matmul_residual(b, &s.dv, &p[w + ix::WV], &s.mb, &mut s.ma, mm(d, kv))?;
            rmsnorm_backward(b, &y.x_in, &p[w + ix::ATTN_NORM], &y.rrms1, &s.ma, &mut s.dxn, &mut s.norm_partials, nb)?;
            rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut g[w + ix::ATTN_NORM], nr)?;
            axpy(b, &s.dxn, &mut s.dx, add)?;
        }
        embed_backward(b, &s.dx, ids, &mut g[ix::EMB], kernels::embedding::embed_backward::Params::new(rows, d, v))?;
        Ok(())
    }

    /// Records global-norm clipping and AdamW for step `step` (0-based); zeroes the gradients.
    fn record_update(&mut self, b: &Batch<'_>, t: &TrainConfig, step: u64) -> Result<(), Error> {
        let Model { params, grads, m, v, decay, norm_offsets, norm_partials, norm_bad, stats, .. } = self;
        for (gr, &offset) in grads.iter().zip(norm_offsets.iter()) {
            let np = kernels::optimizer::reduce_norm_sq::Params::new(gr.len() as u32, offset);
            reduce_norm_sq(b, gr, norm_partials, norm_bad, np)?;
        }
        let count = norm_partials.len() as u32;
        finalize_grad_stats(
            b,
            norm_partials,
            norm_bad,
            stats,
            kernels::optimizer::finalize_grad_stats::Params::new(count, t.clip),
        )?;
        let tt = (step + 1) as i32;
        let bias1 = (1.0 - (t.beta1 as f64).powi(tt)) as f32;
        let bias2 = (1.0 - (t.beta2 as f64).powi(tt)) as f32;
        let lr = t.lr_at(step as usize);
        for i in 0..params.len() {
            let wd = if decay[i] { t.weight_decay } else { 0.0 };
            let h = kernels::optimizer::adamw_update::Params::new(
                params[i].len() as u32,
                lr,
                t.beta1,
                t.beta2,
                t.eps,
                wd,
                bias1,
                bias2,
            );
            adamw_update(b, &mut params[i], &mut grads[i], &mut m[i], &mut v[i], stats, h)?;
        }
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
        self.record_forward(&b, batch, self.cfg.seq_len)?;
        self.record_loss(&b, batch * self.cfg.seq_len)?;
        self.record_backward(&b, batch)?;
        self.record_update(&b, t, step)?;
        b.submit()?;
        Ok(())
    }

    /// A training step recorded into a profiled batch: GPU time of every dispatch.
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
        self.record_forward(&b, batch, self.cfg.seq_len)?;
        self.record_loss(&b, batch * self.cfg.seq_len)?;
        self.record_backward(&b, batch)?;
        self.record_update(&b, t, step)?;
        Ok(b.submit_profiled()?)
    }

    /// The mean loss of the last step or evaluation (reads two floats back).
    pub fn read_loss(&self) -> Result<f32, Error> {
        let out = self.loss_out.read(&self.gpu)?;
        Ok(if out[1] > 0.0 { out[0] / out[1] } else { 0.0 })
    }

    /// Forward, loss and backward of one batch without updating: gradients are added to the
    /// gradient buffers. Returns the loss. (For tests and tools.)
    pub fn forward_backward(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<f32, Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, batch, self.cfg.seq_len)?;
        self.record_loss(&b, batch * self.cfg.seq_len)?;
        self.record_backward(&b, batch)?;
        b.submit()?;
        self.read_loss()
    }

    /// The mean loss of a batch, with no gradients.
    pub fn eval_loss(&mut self, tokens: &[u32], targets: &[u32], batch: usize) -> Result<f32, Error> {
        self.load_tokens(tokens, targets, batch)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, batch, self.cfg.seq_len)?;
        self.record_loss(&b, batch * self.cfg.seq_len)?;
        b.submit()?;
        self.read_loss()
    }

    /// The logits for the byte after `context` (its last `seq_len` bytes are used).
    pub fn next_logits(&mut self, context: &[u32]) -> Result<Vec<f32>, Error> {
        if context.is_empty() {
            return Err(Error::Config("generation needs at least one byte of prompt".into()));
        }
        let ctx = &context[context.len().saturating_sub(self.cfg.seq_len)..];
        let n = ctx.len();
        let mut ids = ctx.to_vec();
        ids.resize(self.batch * self.cfg.seq_len, 0);
        self.ids.write(&self.gpu, &ids)?;
        let gpu = self.gpu.clone();
        let b = gpu.batch();
        self.record_forward(&b, 1, n)?;
        b.submit()?;
        let v = self.cfg.vocab;
        Ok(self.logits.read_range(&self.gpu, (n - 1) * v..n * v)?)
    }

    /// Copies the parameters back to the host, in [`params::shapes`] order.
    pub fn weights(&self) -> Result<Vec<Vec<f32>>, Error> {
        self.params.iter().map(|b| Ok(b.read(&self.gpu)?)).collect()
    }

    /// Copies the gradient buffers back to the host.
    pub fn gradients(&self) -> Result<Vec<Vec<f32>>, Error> {
        self.grads.iter().map(|b| Ok(b.read(&self.gpu)?)).collect()
    }

    /// Copies the AdamW moments back to the host: (m, v).
    pub fn moments(&self) -> Result<(Tensors, Tensors), Error> {
        let m = self.m.iter().map(|b| Ok(b.read(&self.gpu)?)).collect::<Result<_, Error>>()?;
        let v = self.v.iter().map(|b| Ok(b.read(&self.gpu)?)).collect::<Result<_, Error>>()?;
        Ok((m, v))
    }
}
