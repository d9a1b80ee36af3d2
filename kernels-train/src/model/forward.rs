//! The forward pass (embedding → blocks → final norm → tied head) and the loss.

use super::{Model, fast_params};
use crate::Error;
use kernels::Batch;
use kernels::attention::attention_forward;
use kernels::embedding::embed_lookup;
use kernels::infrastructure::copy;
use kernels::linear::{matmul_t, matmul_t_acc};
use kernels::loss::{cross_entropy, sum_losses};
use kernels::norm::rmsnorm_forward;
use kernels::rope::{rope_k, rope_q};

impl Model {
    /// Records the forward pass of `batch` sequences of `seq` tokens (seq ≤ seq_len) up to the
    /// logits.
    pub(super) fn record_forward(&mut self, b: &Batch<'_>, batch: usize, seq: usize) -> Result<(), Error> {
        let Model { cfg: c, params: p, acts, ids, .. } = self;
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
        let Some(first) = acts.layers.first_mut() else {
            return Err(Error::Config("the model has no layers".into()));
        };
        embed_lookup(b, ids, &p.embedding, &mut first.x_in, kernels::embedding::embed_lookup::Params::new(rows, d, v))?;
        for (l, w) in p.layers.iter().enumerate() {
            let (this, next) = acts.layers.split_at_mut(l + 1);
            let layer = &mut this[l];
            rmsnorm_forward(b, &layer.x_in, &w.attn_norm, &mut layer.h1, &mut layer.rrms1, norm)?;
            matmul_t(b, &layer.h1, &w.wq, &mut layer.q, mm(hq, d))?;
            matmul_t(b, &layer.h1, &w.wk, &mut layer.k, mm(kv, d))?;
            matmul_t(b, &layer.h1, &w.wv, &mut layer.v, mm(kv, d))?;
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
            matmul_t_acc(b, &layer.att, &w.wo, &mut layer.x_mid, mm(d, hq))?;
            rmsnorm_forward(b, &layer.x_mid, &w.ffn_norm, &mut layer.h2, &mut layer.rrms2, norm)?;
            matmul_t(b, &layer.h2, &w.w1, &mut layer.g, mm(f, d))?;
            matmul_t(b, &layer.h2, &w.w3, &mut layer.u, mm(f, d))?;
            let sw = kernels::activation::swiglu_combine::Params::new(rows * f);
            kernels::activation::swiglu_combine(b, &layer.g, &layer.u, &mut layer.a, sw)?;
            // The layer's output x_mid + a·W2ᵀ is the next layer's input (or the final one's).
            let out = match next.first_mut() {
                Some(n) => &mut n.x_in,
                None => &mut acts.xf,
            };
            copy(b, &layer.x_mid, out, rows * d)?;
            matmul_t_acc(b, &layer.a, &w.w2, out, mm(d, f))?;
        }
        rmsnorm_forward(b, &acts.xf, &p.final_norm, &mut acts.hf, &mut acts.rrms_f, norm)?;
        matmul_t(b, &acts.hf, &p.embedding, &mut acts.logits, mm(v, d))?;
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
