//! The forward pass (embedding → blocks → final norm → tied head) and the loss.

use super::products::{Half, Products, cast_act, forward};
use super::{Model, fast_params};
use crate::Error;
use kernels::Batch;
use kernels::attention::attention_forward;
use kernels::embedding::embed_lookup;
use kernels::infrastructure::copy;
use kernels::loss::{cross_entropy, sum_losses};
use kernels::norm::rmsnorm_forward;
use kernels::ops::F16x4;
use kernels::rope::{rope_k, rope_q};

impl Model {
    /// Records the forward pass of `batch` sequences of `seq` tokens (seq ≤ seq_len) up to the
    /// logits.
    pub(super) fn record_forward(&mut self, b: &Batch<'_>, batch: usize, seq: usize) -> Result<(), Error> {
        let Model { cfg: c, params: p, acts, ids, products: mode, half, w16, s, .. } = self;
        let mode = *mode;
        let w16 = w16.as_ref().map(|w| w.as_ref());
        let w16 = w16.as_ref();
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let (hq, kv) = (h * dh, hkv * dh);
        let rows = (batch * seq) as u32;
        let (bt, sq) = (batch as u32, seq as u32);
        let eps = c.norm_eps;
        let base = c.rope_base;
        let scale = 1.0 / (dh as f32).sqrt();
        let mm = |n: u32, k: u32| (rows, n, k);
        let norm = kernels::norm::rmsnorm_forward::Params::new(rows, d, eps);
        let Some(first) = acts.layers.first_mut() else {
            return Err(Error::Config("the model has no layers".into()));
        };
        embed_lookup(b, ids, &p.embedding, &mut first.x_in, kernels::embedding::embed_lookup::Params::new(rows, d, v))?;
        for (l, w) in p.layers.iter().enumerate() {
            let (this, next) = acts.layers.split_at_mut(l + 1);
            let layer = &mut this[l];
            let h16 = w16.map(|w| &w.layers[l]);
            rmsnorm_forward(b, &layer.x_in, &w.attn_norm, &mut layer.h1, &mut layer.rrms1, norm)?;
            cast_act(b, mode, &layer.h1, half, rows, d)?;
            forward(b, mode, &layer.h1, &w.wq, h16.map(|h| h.wq), half, &mut layer.q, mm(hq, d), false)?;
            forward(b, mode, &layer.h1, &w.wk, h16.map(|h| h.wk), half, &mut layer.k, mm(kv, d), false)?;
            forward(b, mode, &layer.h1, &w.wv, h16.map(|h| h.wv), half, &mut layer.v, mm(kv, d), false)?;
            rope_q(b, &mut layer.q, kernels::rope::rope_q::Params::new(bt, sq, h, dh, 0, base))?;
            rope_k(b, &mut layer.k, kernels::rope::rope_k::Params::new(bt, sq, hkv, dh, 0, base))?;
            match (&mut layer.probs, s.att16.as_mut()) {
                // Mixed precision: f16 operands on tensor cores (`attention16`).
                (Some(probs), Some(a16)) => {
                    let fp = fast_params(c, batch, seq);
                    a16.forward(b, &layer.q, &layer.k, &layer.v, &mut layer.att, &mut layer.lse, probs, fp)?;
                }
                (Some(probs), None) => {
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
                (None, _) => {
                    let ap = kernels::attention::attention_forward::Params::new(bt, sq, h, hkv, dh, scale);
                    attention_forward(b, &layer.q, &layer.k, &layer.v, &mut layer.att, &mut layer.lse, ap)?;
                }
            }
            // x_mid = x_in + att·Woᵀ
            cast_act(b, mode, &layer.att, half, rows, hq)?;
            residual_forward(
                b,
                mode,
                &layer.att,
                &w.wo,
                h16.map(|h| h.wo),
                half,
                &layer.x_in,
                &mut layer.x_mid,
                mm(d, hq),
            )?;
            rmsnorm_forward(b, &layer.x_mid, &w.ffn_norm, &mut layer.h2, &mut layer.rrms2, norm)?;
            cast_act(b, mode, &layer.h2, half, rows, d)?;
            forward(b, mode, &layer.h2, &w.w1, h16.map(|h| h.w1), half, &mut layer.g, mm(f, d), false)?;
            forward(b, mode, &layer.h2, &w.w3, h16.map(|h| h.w3), half, &mut layer.u, mm(f, d), false)?;
            let sw = kernels::activation::swiglu_combine::Params::new(rows * f);
            kernels::activation::swiglu_combine(b, &layer.g, &layer.u, &mut layer.a, sw)?;
            // The layer's output x_mid + a·W2ᵀ is the next layer's input (or the final one's).
            let out = match next.first_mut() {
                Some(n) => &mut n.x_in,
                None => &mut acts.xf,
            };
            cast_act(b, mode, &layer.a, half, rows, f)?;
            residual_forward(b, mode, &layer.a, &w.w2, h16.map(|h| h.w2), half, &layer.x_mid, out, mm(d, f))?;
        }
        rmsnorm_forward(b, &acts.xf, &p.final_norm, &mut acts.hf, &mut acts.rrms_f, norm)?;
        cast_act(b, mode, &acts.hf, half, rows, d)?;
        let e16 = w16.map(|w| w.embedding);
        forward(b, mode, &acts.hf, &p.embedding, e16, half, &mut acts.logits, mm(v, d), false)?;
        Ok(())
    }

    /// Records the loss of the targets: logits become dlogits in place (the gradient of the mean
    /// loss over the `rows` targets), and the loss sum and count go to `loss_out`.
    pub(super) fn record_loss(&mut self, b: &Batch<'_>, rows: usize) -> Result<(), Error> {
        let v = self.cfg.vocab as u32;
        let p = kernels::loss::cross_entropy::Params::new(rows as u32, v, 0.0, 0.0, 1.0 / rows as f32);
        cross_entropy(b, &mut self.acts.logits, &self.targets, &mut self.acts.losses, p)?;
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

/// `out = resid + x·wᵀ` (a residual branch): a copy and an accumulating product.
#[allow(clippy::too_many_arguments)]
fn residual_forward(
    b: &Batch<'_>,
    mode: Products,
    x: &kernels::Buffer<f32>,
    w: &kernels::Buffer<f32>,
    w16: Option<&kernels::Buffer<F16x4>>,
    half: &Option<Half>,
    resid: &kernels::Buffer<f32>,
    out: &mut kernels::Buffer<f32>,
    (m, n, k): (u32, u32, u32),
) -> Result<(), Error> {
    copy(b, resid, out, m * n)?;
    forward(b, mode, x, w, w16, half, out, (m, n, k), true)
}
