//! The forward pass (embedding → blocks → final norm → tied head) and the loss.

use super::B;
use super::alloc::Qkv;
use super::products::{Fused16, Kept, Operand, Plans, Prep, forward, forward_fused, forward_residual, preps};
use super::{Attention, Model, fast_params};
use crate::Error;
use kernels::Batch;
use kernels::attention::{attention_decode, attention_forward};
use kernels::embedding::embed_lookup;
use kernels::gemm::RopeQkv;
use kernels::loss::{cross_entropy, sum_losses};
use kernels::norm::rmsnorm_forward;
use kernels::rope::{rope_qkv, rope_qkv_f16};

/// What a forward pass is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// A step's or an evaluation's forward, or generation's without the cache.
    Full,
    /// Generation's forward of a context (`batch` = 1) whose keys and values become the cache.
    Prefill,
    /// Generation's one token at position t against the cache.
    Decode(usize),
}

impl Model {
    /// Records the forward pass of `batch` sequences of `seq` tokens (seq ≤ seq_len) up to the
    /// logits. With `at = Some(t)` (generation, `batch` = `seq` = 1): the one token in `ids[0]` at
    /// position t of sequence 0, whose keys and values for positions 0 … t − 1 are in the
    /// cache (the layers' K and V buffers, or an f16 layer's f32 cache): its own are written at
    /// row t and its query attends them all (`attention_decode`).
    pub(super) fn record_forward(
        &mut self,
        b: &Batch<'_>,
        batch: usize,
        seq: usize,
        at: Option<usize>,
    ) -> Result<(), Error> {
        self.record_pass(b, batch, seq, at.map_or(Pass::Full, Pass::Decode))
    }

    /// [`Model::record_forward`] for `pass`: a [`Pass::Prefill`] also leaves sequence 0's keys
    /// and values in the cache where the layers keep only f16 copies ([`Qkv::F16`]; f32 layers
    /// keep them in every forward).
    pub(super) fn record_pass(&mut self, b: &Batch<'_>, batch: usize, seq: usize, pass: Pass) -> Result<(), Error> {
        let at = match pass {
            Pass::Decode(t) => Some(t),
            Pass::Full | Pass::Prefill => None,
        };
        if at.is_none() {
            self.cache.clear();
        }
        let Model { cfg: c, params: p, acts, ids, w16, halves, s, plans, attention, .. } = self;
        let split = &*plans;
        let pv = preps(p, (w16.as_ref(), None), halves.as_ref());
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let (hq, kv) = (h * dh, hkv * dh);
        let rows = (batch * seq) as u32;
        let (bt, sq) = (batch as u32, seq as u32);
        let eps = c.norm_eps;
        let base = c.rope_base;
        let scale = 1.0 / (dh as f32).sqrt();
        let mm = |n: u32, k: u32| (rows, n, k);
        let norm = (rows, d, eps);
        let Some(first) = acts.layers.first_mut() else {
            return Err(Error::Config("the model has no layers".into()));
        };
        embed_lookup(b, ids, &p.embedding, &mut first.x_in, kernels::embedding::embed_lookup::Params::new(rows, d, v))?;
        // Mixed precision: whether the last residual branch's `+ resid` is still to be added (by
        // the next norm, `norm::residual_rmsnorm_f16`), resid being the previous layer's x_mid.
        let mut pending = false;
        for (l, w) in p.layers.iter().enumerate() {
            let (done, rest) = acts.layers.split_at_mut(l);
            let (this, next) = rest.split_at_mut(1);
            let layer = &mut this[0];
            let pw = &pv.layers[l];
            // Every linear layer's input is written once in its kept form (in mixed precision
            // its f16 copy only, by the fused norm or SwiGLU) and read by the products here and
            // by the weight gradients.
            let res = if pending { done.last().map(|prev| &prev.x_mid) } else { None };
            let kept32 = s.kept32.as_mut();
            norm_into(b, &mut layer.x_in, res, &w.attn_norm, &mut layer.h1, kept32, &mut layer.rrms1, norm)?;
            let h1 = layer.h1.operand();
            let pos = at.unwrap_or(0) as u32;
            // Q, K and V in one product into the fused rows, which RoPE splits (and rotates) into
            // the tensors attention reads: no copies.
            // A step's forward in mixed precision rotates and rounds Q, K, V in the product's
            // epilogue where its plan allows (the same bits as `rope_qkv_f16`).
            let roped = match (&mut layer.qkv, pass) {
                (Qkv::F16 { q, k, v, .. }, Pass::Full) => {
                    let (heads, kv_heads, head_dim) = (c.heads, c.kv_heads, c.head_dim());
                    let rope = RopeQkv { batch, seq, heads, kv_heads, head_dim, pos_offset: 0, base };
                    let then = Fused16::Rope { rope, q, k, v };
                    forward_fused(b, split, h1, &w.wqkv, pw.wqkv, &mut s.qkv, then, mm(hq + 2 * kv, d))?
                }
                _ => {
                    forward(b, split, h1, &w.wqkv, pw.wqkv, &mut s.qkv, mm(hq + 2 * kv, d))?;
                    false
                }
            };
            let rp = kernels::rope::rope_qkv::Params::new(bt, sq, h, hkv, dh, pos, base);
            // Generation's new token: its key and value at row t of the cache.
            let n = kv as usize;
            match &mut layer.qkv {
                Qkv::F32 { q, k, v } => match at {
                    None => rope_qkv(b, &s.qkv, q, k, v, rp)?,
                    // Generation writes the new token's key and value beside the cache, then into it.
                    Some(t) => {
                        rope_qkv(b, &s.qkv, q, &mut s.dk, &mut s.dv, rp)?;
                        b.copy_range(&s.dk, 0, k, t * n, n)?;
                        b.copy_range(&s.dv, 0, v, t * n, n)?;
                    }
                },
                // Only the f16 copies are kept; generation's f32 Q, K, V go to the scratch (the new
                // token's query, and the keys and values of the cache).
                Qkv::F16 { q, k, v, cache_k, cache_v } => {
                    let p16 = kernels::rope::rope_qkv_f16::Params::new(bt, sq, h, hkv, dh, pos, base);
                    match pass {
                        Pass::Full if roped => {}
                        Pass::Full => rope_qkv_f16(b, &s.qkv, q, k, v, p16)?,
                        // The f16 copies, and the f32 keys and values for the cache from the same
                        // rotation (the f32 values the f16 copies round).
                        Pass::Prefill => {
                            let r = rows as usize;
                            rope_qkv_f16(b, &s.qkv, q, k, v, p16)?;
                            rope_qkv(b, &s.qkv, &mut s.dq, &mut s.dk, &mut s.dv, rp)?;
                            b.copy_range(&s.dk, 0, cache_k, 0, r * n)?;
                            b.copy_range(&s.dv, 0, cache_v, 0, r * n)?;
                        }
                        Pass::Decode(t) => {
                            rope_qkv(b, &s.qkv, &mut s.dq, &mut s.dk, &mut s.dv, rp)?;
                            b.copy_range(&s.dk, 0, cache_k, t * n, n)?;
                            b.copy_range(&s.dv, 0, cache_v, t * n, n)?;
                        }
                    }
                }
            }
            // Whether the attention kernel wrote the output's f16 copy itself.
            let mut att16_written = false;
            match (at, &mut layer.probs, s.att16.as_mut()) {
                // Generation: the new token's query against the t + 1 cached keys and values.
                (Some(t), ..) => {
                    let t_max = c.seq_len as u32;
                    let dp =
                        kernels::attention::attention_decode::Params::new(1, h, hkv, dh, t_max, t as u32 + 1, scale);
                    let (q, k, v) = match &layer.qkv {
                        Qkv::F32 { q, k, v } => (q, k, v),
                        Qkv::F16 { cache_k, cache_v, .. } => (&s.dq, cache_k, cache_v),
                    };
                    attention_decode(b, q, k, v, &mut layer.att, dp)?;
                }
                // Mixed precision: f16 operands on tensor cores (`attention16`).
                (None, Some(probs), Some(a16)) => {
                    let fp = fast_params(c, batch, seq);
                    a16.forward(b, layer.qkv.f16()?, &mut layer.att, &mut layer.lse, probs, fp)?;
                }
                (None, Some(probs), None) => {
                    let fp = fast_params(c, batch, seq);
                    let (q, k, v) = layer.qkv.f32()?;
                    kernels::fast_attention::forward(b, q, k, v, &mut layer.att, &mut layer.lse, probs, fp)?;
                }
                (None, None, Some(a16)) if *attention == Attention::Flash => {
                    let fp = fast_params(c, batch, seq);
                    let att16 = layer
                        .att16
                        .as_mut()
                        .ok_or_else(|| Error::Config("internal: f16 attention without the output's f16 copy".into()))?;
                    a16.forward_flash(b, layer.qkv.f16()?, &mut layer.att, att16, &mut layer.lse, fp)?;
                    att16_written = true;
                }
                (None, None, _) if *attention == Attention::Flash => {
                    let fp = fast_params(c, batch, seq);
                    let (q, k, v) = layer.qkv.f32()?;
                    kernels::flash_attention::forward(b, q, k, v, &mut layer.att, &mut layer.lse, fp)?;
                }
                (None, None, _) => {
                    let ap = kernels::attention::attention_forward::Params::new(bt, sq, h, hkv, dh, scale);
                    let (q, k, v) = layer.qkv.f32()?;
                    attention_forward(b, q, k, v, &mut layer.att, &mut layer.lse, ap)?;
                }
            }
            // x_mid = x_in + att·Woᵀ (the attention backward reads att in f32; mixed precision
            // keeps its f16 copy too, for Wo's products: written by flash attention, else cast).
            if let (Some(att16), false) = (&mut layer.att16, att16_written) {
                let cp = kernels::cast::cast_f16x4::RowsParams::new(rows, hq);
                kernels::cast::cast_f16x4(b, &layer.att, att16, cp)?;
            }
            let att = layer.att16.as_ref().map_or(Operand::F32(&layer.att), Operand::F16);
            let wo = (&w.wo, pw.wo);
            pending = residual_forward(b, split, att, wo, &layer.x_in, &mut layer.x_mid, mm(d, hq))?;
            let res = if pending { Some(&layer.x_in) } else { None };
            let kept32 = s.kept32.as_mut();
            norm_into(b, &mut layer.x_mid, res, &w.ffn_norm, &mut layer.h2, kept32, &mut layer.rrms2, norm)?;
            let h2 = layer.h2.operand();
            // The gate and up projections in one product; SwiGLU reads both halves of its rows.
            // In mixed precision SwiGLU's f16 output comes from the product's epilogue where its
            // plan allows (the same bits as `swiglu_gu_f16`).
            match &mut layer.a {
                a @ (Kept::F32(_) | Kept::Split(_)) => {
                    forward(b, split, h2, &w.w13, pw.w13, &mut layer.gu, mm(2 * f, d))?;
                    let sw = kernels::activation::swiglu_gu::RowsParams::new(rows, f);
                    let gu = &layer.gu;
                    let dims = (rows as usize, f as usize);
                    a.write_f32(b, s.kept32.as_mut(), dims, |a| Ok(kernels::activation::swiglu_gu(b, gu, a, sw)?))?;
                }
                Kept::F16(a16) => {
                    let then = Fused16::SwiGlu(a16);
                    if !forward_fused(b, split, h2, &w.w13, pw.w13, &mut layer.gu, then, mm(2 * f, d))? {
                        let sw = kernels::activation::swiglu_gu_f16::RowsParams::new(rows, f);
                        kernels::activation::swiglu_gu_f16(b, &layer.gu, a16, sw)?;
                    }
                }
            }
            // The layer's output x_mid + a·W2ᵀ is the next layer's input (or the final one's).
            let out = match next.first_mut() {
                Some(n) => &mut n.x_in,
                None => &mut acts.xf,
            };
            let w2 = (&w.w2, pw.w2);
            pending = residual_forward(b, split, layer.a.operand(), w2, &layer.x_mid, out, mm(d, f))?;
        }
        let res = if pending { acts.layers.last().map(|last| &last.x_mid) } else { None };
        norm_into(b, &mut acts.xf, res, &p.final_norm, &mut acts.hf, s.kept32.as_mut(), &mut acts.rrms_f, norm)?;
        forward(b, split, acts.hf.operand(), &p.embedding, pv.embedding, &mut acts.logits, mm(v, d))?;
        Ok(())
    }

    /// Records the loss of the targets and its gradient, that of the mean loss over the `rows`
    /// targets, for the backward: in f32 precision the logits become dlogits in place
    /// (`loss::cross_entropy`); in mixed precision the logits stay as they are and dlogits × the
    /// loss scale go straight to f16 (`Activations::dlogits16`, by `loss::cross_entropy_f16`,
    /// which raises the scaler's overflow flag as the cast of any other output gradient does).
    /// The loss sum and count go to `loss_out`.
    pub(super) fn record_loss(&mut self, b: &Batch<'_>, rows: usize) -> Result<(), Error> {
        let (r, v, gs) = (rows as u32, self.cfg.vocab as u32, 1.0 / rows as f32);
        match (self.half.as_mut(), self.acts.dlogits16.as_mut()) {
            (Some(h), Some(d16)) => {
                let p = kernels::loss::cross_entropy_f16::Params::new(r, v, 0.0, 0.0, gs);
                let (logits, losses) = (&self.acts.logits, &mut self.acts.losses);
                kernels::loss::cross_entropy_f16(b, logits, &self.targets, losses, d16, &mut h.flag, &h.state, p)?;
                self.record_loss_sum(b, rows)
            }
            _ => self.record_eval_loss(b, rows),
        }
    }

    /// Records the loss of the targets alone, for an evaluation (`loss::cross_entropy`, in
    /// either precision: the loss scaler's flag is left alone, and the losses are those of
    /// [`Model::record_loss`], which has no smoothing). The logits become dlogits in place,
    /// which nothing reads; the loss sum and count go to `loss_out`.
    pub(super) fn record_eval_loss(&mut self, b: &Batch<'_>, rows: usize) -> Result<(), Error> {
        let v = self.cfg.vocab as u32;
        let p = kernels::loss::cross_entropy::Params::new(rows as u32, v, 0.0, 0.0, 1.0 / rows as f32);
        cross_entropy(b, &mut self.acts.logits, &self.targets, &mut self.acts.losses, p)?;
        self.record_loss_sum(b, rows)
    }

    /// The sum and count of the per-row losses into `loss_out`.
    fn record_loss_sum(&mut self, b: &Batch<'_>, rows: usize) -> Result<(), Error> {
        let v = self.cfg.vocab as u32;
        sum_losses(
            b,
            &self.acts.losses,
            &self.targets,
            &mut self.loss_out,
            kernels::loss::sum_losses::Params::new(rows as u32, v),
        )?;
        Ok(())
    }
}

/// The residual branch `out = resid + x·wᵀ`. f32 `x`: one product with the residual epilogue
/// (returns false). f16 `x` (mixed precision): only `out = x·wᵀ`, and returns true: the
/// next norm (`norm::residual_rmsnorm_f16`) adds `resid` — the same one f32 addition as the
/// residual epilogue's (`r + v`), so the same bits, without the product's read of `resid`.
fn residual_forward(
    b: &Batch<'_>,
    split: &Plans,
    x: Operand<'_>,
    (w, prep): (&B, Prep<'_>),
    resid: &B,
    out: &mut B,
    (m, n, k): (u32, u32, u32),
) -> Result<bool, Error> {
    match x {
        Operand::F32(_) | Operand::Split(..) => {
            forward_residual(b, split, x, w, prep, resid, out, (m, n, k))?;
            Ok(false)
        }
        Operand::F16(_) => {
            forward(b, split, x, w, prep, out, (m, n, k))?;
            Ok(true)
        }
    }
}

/// RMSNorm of `x` [rows, d] into the kept activation `y`, its reciprocal RMS into `rrms`. f32:
/// `norm::rmsnorm_forward` (through `tmp` where `y` keeps only halves: [`Kept::write_f32`]).
/// f16 (mixed precision): `norm::rmsnorm_f16`, or with `res` (a residual branch's pending
/// `+ resid`, see [`residual_forward`]) `norm::residual_rmsnorm_f16`, which first adds `res`
/// into `x` in place.
#[allow(clippy::too_many_arguments)]
fn norm_into(
    b: &Batch<'_>,
    x: &mut B,
    res: Option<&B>,
    gamma: &B,
    y: &mut Kept,
    tmp: Option<&mut B>,
    rrms: &mut B,
    (rows, d, eps): (u32, u32, f32),
) -> Result<(), Error> {
    match (y, res) {
        (y @ (Kept::F32(_) | Kept::Split(_)), None) => {
            let p = kernels::norm::rmsnorm_forward::Params::new(rows, d, eps);
            y.write_f32(b, tmp, (rows as usize, d as usize), |y| Ok(rmsnorm_forward(b, x, gamma, y, rrms, p)?))?
        }
        (Kept::F16(y), None) => {
            let p = kernels::norm::rmsnorm_f16::NormParams::new(rows, d, eps);
            kernels::norm::rmsnorm_f16(b, x, gamma, y, rrms, p)?
        }
        (Kept::F16(y), Some(res)) => {
            let p = kernels::norm::residual_rmsnorm_f16::NormParams::new(rows, d, eps);
            kernels::norm::residual_rmsnorm_f16(b, x, res, gamma, y, rrms, p)?
        }
        (Kept::F32(_) | Kept::Split(..), Some(_)) => {
            return Err(Error::Config("internal: a pending residual add before an f32 norm".into()));
        }
    }
    Ok(())
}
