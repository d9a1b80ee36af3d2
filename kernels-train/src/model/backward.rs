//! The backward pass: every parameter's gradient, accumulated (+=) into the gradient buffers.

use super::products::{Products, input_grad, weight_grad};
use super::{B, Model, fast_params};
use crate::Error;
use crate::params::Param;
use kernels::Batch;
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq, rope_k_backward, rope_q_backward};
use kernels::backward_ffn::ffn_swiglu_backward;
use kernels::embedding::embed_backward;
use kernels::infrastructure::axpy;
use kernels::norm::{rmsnorm_backward, rmsnorm_dgamma_reduce};

/// Records weight gradients `dW += dYᵀ·X` over the step's rows, split along the tokens when
/// the output is small (`kernels::ops::matmul_at_acc_split`), through one scratch buffer.
struct WeightGrads<'a> {
    scratch: &'a mut B,
    rows: usize,
    mode: Products,
}

impl WeightGrads<'_> {
    /// `dw += dyᵀ·x` for the weight `w` of shape [out, in]: `dy` [rows, out], `x` [rows, in].
    fn add(&mut self, b: &Batch<'_>, dy: &B, x: &B, dw: &mut B, w: &Param) -> Result<(), Error> {
        let [out, inp] = w.shape[..] else {
            return Err(Error::Config(format!("`{}` is not a matrix: no weight gradient", w.name)));
        };
        weight_grad(b, self.mode, dy, x, dw, self.scratch, self.rows, inp, out)
    }
}

impl Model {
    /// Records the backward pass of a full batch (after `record_forward` and `record_loss`),
    /// accumulating every parameter's gradient (+=).
    pub(super) fn record_backward(&mut self, b: &Batch<'_>, batch: usize) -> Result<(), Error> {
        let Model { cfg: c, layout, params: p, grads: g, acts, s, ids, products: mode, half, w16, .. } = self;
        let mode = *mode;
        let w16 = w16.as_ref().map(|w| w.as_ref());
        let w16 = w16.as_ref();
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let (hq, kv) = (h * dh, hkv * dh);
        let rows = (batch * c.seq_len) as u32;
        let (bt, sq) = (batch as u32, c.seq_len as u32);
        let scale = 1.0 / (dh as f32).sqrt();
        let base = c.rope_base;
        // Params { m: rows, n, k } of every product below.
        let mm = |n: u32, k: u32| (rows, n, k);
        let nb = kernels::norm::rmsnorm_backward::Params::new(rows, d);
        let nr = kernels::norm::rmsnorm_dgamma_reduce::Params::new(rows, d);
        let add = kernels::infrastructure::axpy::Params::new(rows * d, 1.0);
        let mut wg = WeightGrads { scratch: &mut s.wgrad, rows: rows as usize, mode };

        // Mixed precision: the loss gradient times the loss scale (undone by the optimizer).
        if let Some(h) = half.as_ref() {
            let sp = kernels::mixed::scale_by_state::ScaleParams::new(rows * v);
            kernels::mixed::scale_by_state(b, &mut acts.logits, &h.state, sp)?;
        }
        // Head (tied to the embedding): dhf = dlogits·E, dE += dlogitsᵀ·hf.
        let e16 = w16.map(|w| w.embedding);
        input_grad(b, mode, &acts.logits, &p.embedding, e16, half, None, &mut s.ma, mm(d, v))?;
        wg.add(b, &acts.logits, &acts.hf, &mut g.embedding, &layout.embedding)?;
        // Final norm: dx = ∂/∂x_final.
        rmsnorm_backward(b, &acts.xf, &p.final_norm, &acts.rrms_f, &s.ma, &mut s.dx, &mut s.norm_partials, nb)?;
        rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut g.final_norm, nr)?;

        for l in (0..c.layers).rev() {
            let (y, w, gl, shape) = (&mut acts.layers[l], &p.layers[l], &mut g.layers[l], &layout.layers[l]);
            let h16 = w16.map(|w| &w.layers[l]);
            // Feed-forward: out = x_mid + (silu(g)·u)·W2ᵀ, g = h2·W1ᵀ, u = h2·W3ᵀ.
            input_grad(b, mode, &s.dx, &w.w2, h16.map(|h| h.w2), half, None, &mut s.da, mm(f, d))?;
            wg.add(b, &s.dx, &y.a, &mut gl.w2, &shape.w2)?;
            let sb = kernels::backward_ffn::ffn_swiglu_backward::Params::new(rows * f);
            ffn_swiglu_backward(b, &y.g, &y.u, &s.da, &mut s.dg, &mut s.du, sb)?;
            wg.add(b, &s.dg, &y.h2, &mut gl.w1, &shape.w1)?;
            wg.add(b, &s.du, &y.h2, &mut gl.w3, &shape.w3)?;
            input_grad(b, mode, &s.dg, &w.w1, h16.map(|h| h.w1), half, None, &mut s.ma, mm(d, f))?;
            input_grad(b, mode, &s.du, &w.w3, h16.map(|h| h.w3), half, Some(&s.ma), &mut s.mb, mm(d, f))?;
            rmsnorm_backward(b, &y.x_mid, &w.ffn_norm, &y.rrms2, &s.mb, &mut s.dxn, &mut s.norm_partials, nb)?;
            rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut gl.ffn_norm, nr)?;
            axpy(b, &s.dxn, &mut s.dx, add)?;
            // Attention: x_mid = x_in + att·Woᵀ.
            input_grad(b, mode, &s.dx, &w.wo, h16.map(|h| h.wo), half, None, &mut s.datt, mm(hq, d))?;
            wg.add(b, &s.dx, &y.att, &mut gl.wo, &shape.wo)?;
            match (&mut y.probs, &mut s.fast_delta, s.att16.as_mut()) {
                // Mixed precision: f16 operands on tensor cores (`attention16`).
                (Some(probs), Some(delta), Some(a16)) => {
                    let fp = fast_params(c, batch, c.seq_len);
                    let ins = (&y.q, &y.k, &y.v, &y.att, &s.datt);
                    a16.backward(b, half, ins, probs, delta, (&mut s.dq, &mut s.dk, &mut s.dv), fp)?;
                }
                (Some(probs), Some(delta), None) => {
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
            let rq = kernels::backward_attention::rope_q_backward::Params::new(bt, sq, h, dh, 0, base);
            rope_q_backward(b, &mut s.dq, rq)?;
            let rk = kernels::backward_attention::rope_k_backward::Params::new(bt, sq, hkv, dh, 0, base);
            rope_k_backward(b, &mut s.dk, rk)?;
            wg.add(b, &s.dq, &y.h1, &mut gl.wq, &shape.wq)?;
            wg.add(b, &s.dk, &y.h1, &mut gl.wk, &shape.wk)?;
            wg.add(b, &s.dv, &y.h1, &mut gl.wv, &shape.wv)?;
            input_grad(b, mode, &s.dq, &w.wq, h16.map(|h| h.wq), half, None, &mut s.ma, mm(d, hq))?;
            input_grad(b, mode, &s.dk, &w.wk, h16.map(|h| h.wk), half, Some(&s.ma), &mut s.mb, mm(d, kv))?;
            input_grad(b, mode, &s.dv, &w.wv, h16.map(|h| h.wv), half, Some(&s.mb), &mut s.ma, mm(d, kv))?;
            rmsnorm_backward(b, &y.x_in, &w.attn_norm, &y.rrms1, &s.ma, &mut s.dxn, &mut s.norm_partials, nb)?;
            rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut gl.attn_norm, nr)?;
            axpy(b, &s.dxn, &mut s.dx, add)?;
        }
        let eb = kernels::embedding::embed_backward::Params::new(rows, d, v);
        embed_backward(b, &s.dx, ids, &mut g.embedding, eb)?;
        Ok(())
    }
}
