//! The backward pass: every parameter's gradient, accumulated (+=) into the gradient buffers.

use super::products::{Dy, Half, Kept, Operand, Plans, Prep, backward, preps};
use super::{Attention, B, Model, fast_params};
use crate::Error;
use crate::params::Param;
use kernels::Batch;
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq};
use kernels::backward_ffn::{ffn_swiglu_backward_gu, ffn_swiglu_backward_gu_f16};
use kernels::norm::{
    rmsnorm_backward, rmsnorm_backward_acc, rmsnorm_backward_acc_f16, rmsnorm_backward_f16, rmsnorm_dgamma_reduce,
};
use kernels::rope::{rope_qkv_backward, rope_qkv_backward_f16};

/// Records the backward of the linear layers over the step's rows: input and weight gradients
/// of one layer together ([`backward`]).
struct Linear<'a> {
    plans: &'a Plans,
    half: &'a mut Option<Half>,
    rows: usize,
}

impl Linear<'_> {
    /// For the weight `w` of shape [out, in] (as the products read it: `prep`) and its input `x`
    /// [rows, in], from `dy` [rows, out]: `dx = dy·w` (+ `residual`) and `dw += dyᵀ·x`.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &mut self,
        b: &Batch<'_>,
        dy: Dy<'_>,
        (w, prep, shape): (&B, Prep<'_>, &Param),
        x: Operand<'_>,
        dw: &mut B,
        residual: Option<&B>,
        dx: &mut B,
    ) -> Result<(), Error> {
        let [out, inp] = shape.shape[..] else {
            return Err(Error::Config(format!("`{}` is not a matrix: no linear backward", shape.name)));
        };
        let dims = (self.rows, out, inp);
        backward(b, self.plans, dy, w, prep, x, dw, residual, dx, dims)
    }
}

/// Mixed precision's overflow flag.
fn flag(half: &mut Option<Half>) -> Result<&mut kernels::Buffer<u32>, Error> {
    half.as_mut()
        .map(|h| &mut h.flag)
        .ok_or_else(|| Error::Config("internal: f16 output gradients without mixed precision's buffers".into()))
}

impl Model {
    /// Records the backward pass of a full batch (after `record_forward` and `record_loss`),
    /// accumulating every parameter's gradient (+=).
    pub(super) fn record_backward(&mut self, b: &Batch<'_>, batch: usize) -> Result<(), Error> {
        let Model { cfg: c, layout, params: p, grads: g, acts, s, ids, half, w16, halves, plans, attention, .. } = self;
        let pv = preps(p, w16.as_ref(), halves.as_ref());
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let rows = (batch * c.seq_len) as u32;
        let (bt, sq) = (batch as u32, c.seq_len as u32);
        let scale = 1.0 / (dh as f32).sqrt();
        let base = c.rope_base;
        let nb = kernels::norm::rmsnorm_backward::Params::new(rows, d);
        let nr = kernels::norm::rmsnorm_dgamma_reduce::Params::new(rows, d);
        let nba = kernels::norm::rmsnorm_backward_acc::Params::new(rows, d);

        let mut lin = Linear { plans, half, rows: rows as usize };
        // Head (tied to the embedding): dhf = dlogits·E, dE += dlogitsᵀ·hf. Mixed precision:
        // dlogits arrive in f16, times the loss scale (undone by the optimizer), from the loss.
        let e = (&p.embedding, pv.embedding, &layout.embedding);
        let dl = acts.dlogits16.as_ref().map_or(Dy::F32(&acts.logits), Dy::F16);
        lin.backward(b, dl, e, acts.hf.operand(), &mut g.embedding, None, &mut s.ma)?;
        // Final norm: dx = ∂/∂x_final (in mixed precision with its f16 copy, W2's dY).
        let (x, rr, parts) = (&acts.xf, &acts.rrms_f, &mut s.norm_partials);
        match s.dy16.as_mut() {
            None => rmsnorm_backward(b, x, &p.final_norm, rr, &s.ma, &mut s.dx, parts, nb)?,
            Some(d16) => {
                let n16 = kernels::norm::rmsnorm_backward_f16::Params::new(rows, d);
                let fl = flag(lin.half)?;
                rmsnorm_backward_f16(b, x, &p.final_norm, rr, &s.ma, &mut s.dx, parts, &mut d16.dx, fl, n16)?
            }
        }
        rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut g.final_norm, nr)?;

        for l in (0..c.layers).rev() {
            let (y, w, gl, shape) = (&mut acts.layers[l], &p.layers[l], &mut g.layers[l], &layout.layers[l]);
            let pw = &pv.layers[l];
            // Mixed precision: each output gradient in f16 from the kernel that makes it (dx's
            // copy beside it).
            let dx = s.dy16.as_ref().map_or(Dy::F32(&s.dx), |d16| Dy::F16(&d16.dx));
            // Feed-forward: out = x_mid + (silu(g)·u)·W2ᵀ, [g | u] = h2·W13ᵀ.
            let w2 = (&w.w2, pw.w2, &shape.w2);
            lin.backward(b, dx, w2, y.a.operand(), &mut gl.w2, None, &mut s.da)?;
            match &mut s.dgu {
                Kept::F32(dgu) => {
                    let sb = kernels::backward_ffn::ffn_swiglu_backward_gu::RowsParams::new(rows, f);
                    ffn_swiglu_backward_gu(b, &y.gu, &s.da, dgu, sb)?;
                }
                Kept::F16(dgu) => {
                    let sb = kernels::backward_ffn::ffn_swiglu_backward_gu_f16::RowsParams::new(rows, f);
                    ffn_swiglu_backward_gu_f16(b, &y.gu, &s.da, dgu, flag(lin.half)?, sb)?;
                }
            }
            let w13 = (&w.w13, pw.w13, &shape.w13);
            lin.backward(b, s.dgu.dy(), w13, y.h2.operand(), &mut gl.w13, None, &mut s.mb)?;
            // dx += the norm's input gradient (the residual stream's two paths meet here).
            let (x, rr, parts) = (&y.x_mid, &y.rrms2, &mut s.norm_partials);
            match s.dy16.as_mut() {
                None => rmsnorm_backward_acc(b, x, &w.ffn_norm, rr, &s.mb, &mut s.dx, parts, nba)?,
                Some(d16) => {
                    let n16 = kernels::norm::rmsnorm_backward_acc_f16::Params::new(rows, d);
                    let fl = flag(lin.half)?;
                    rmsnorm_backward_acc_f16(b, x, &w.ffn_norm, rr, &s.mb, &mut s.dx, parts, &mut d16.dx, fl, n16)?
                }
            }
            rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut gl.ffn_norm, nr)?;
            // Attention: x_mid = x_in + att·Woᵀ.
            let att = y.att16.as_ref().map_or(Operand::F32(&y.att), Operand::F16);
            let wo = (&w.wo, pw.wo, &shape.wo);
            let dx = s.dy16.as_ref().map_or(Dy::F32(&s.dx), |d16| Dy::F16(&d16.dx));
            lin.backward(b, dx, wo, att, &mut gl.wo, None, &mut s.datt)?;
            match (&mut y.probs, &mut s.fast_delta, s.att16.as_mut()) {
                // Mixed precision: f16 operands on tensor cores (`attention16`).
                (Some(probs), Some(delta), Some(a16)) => {
                    let fp = fast_params(c, batch, c.seq_len);
                    let ins = (y.qkv.f16()?, &y.att, &s.datt);
                    a16.backward(b, lin.half, ins, probs, delta, (&mut s.dq, &mut s.dk, &mut s.dv), fp)?;
                }
                (Some(probs), Some(delta), None) => {
                    let fp = fast_params(c, batch, c.seq_len);
                    let (q, k, v) = y.qkv.f32()?;
                    kernels::fast_attention::backward(
                        b, q, k, v, &y.att, &s.datt, probs, delta, &mut s.dq, &mut s.dk, &mut s.dv, fp,
                    )?;
                }
                (None, _, Some(a16)) if *attention == Attention::Flash => {
                    let fp = fast_params(c, batch, c.seq_len);
                    let ins = (y.qkv.f16()?, &y.att, &s.datt);
                    let outs = (&mut s.dq, &mut s.dk, &mut s.dv);
                    a16.backward_flash(b, lin.half, ins, &y.lse, &mut s.delta, outs, fp)?;
                }
                (None, _, None) if *attention == Attention::Flash => {
                    let fp = fast_params(c, batch, c.seq_len);
                    let ((q, k, v), lse) = (y.qkv.f32()?, &y.lse);
                    let (dq, dk, dv) = (&mut s.dq, &mut s.dk, &mut s.dv);
                    kernels::flash_attention::backward(b, q, k, v, &y.att, &s.datt, lse, &mut s.delta, dq, dk, dv, fp)?;
                }
                _ => {
                    let (q, k, v) = y.qkv.f32()?;
                    let ap = kernels::backward_attention::attention_backward_dq::Params::new(bt, sq, h, hkv, dh, scale);
                    attention_backward_dq(b, q, k, v, &y.att, &s.datt, &y.lse, &mut s.dq, &mut s.delta, ap)?;
                    let kp =
                        kernels::backward_attention::attention_backward_dkdv::Params::new(bt, sq, h, hkv, dh, scale);
                    attention_backward_dkdv(b, q, k, v, &s.datt, &y.lse, &s.delta, &mut s.dk, &mut s.dv, kp)?;
                }
            }
            // dq, dk, dv gathered into Wqkv's one output gradient (dq and dk rotated back).
            let dqkv = match s.dy16.as_mut() {
                None => {
                    let rp = kernels::rope::rope_qkv_backward::Params::new(bt, sq, h, hkv, dh, 0, base);
                    rope_qkv_backward(b, &s.dq, &s.dk, &s.dv, &mut s.qkv, rp)?;
                    Dy::F32(&s.qkv)
                }
                Some(d16) => {
                    let rp = kernels::rope::rope_qkv_backward_f16::Params::new(bt, sq, h, hkv, dh, 0, base);
                    rope_qkv_backward_f16(b, &s.dq, &s.dk, &s.dv, &mut d16.dqkv, flag(lin.half)?, rp)?;
                    Dy::F16(&d16.dqkv)
                }
            };
            let wqkv = (&w.wqkv, pw.wqkv, &shape.wqkv);
            lin.backward(b, dqkv, wqkv, y.h1.operand(), &mut gl.wqkv, None, &mut s.ma)?;
            // The first layer's dx goes to the embedding only, in f32: no f16 copy.
            let (x, rr, parts) = (&y.x_in, &y.rrms1, &mut s.norm_partials);
            match s.dy16.as_mut() {
                Some(d16) if l > 0 => {
                    let n16 = kernels::norm::rmsnorm_backward_acc_f16::Params::new(rows, d);
                    let fl = flag(lin.half)?;
                    rmsnorm_backward_acc_f16(b, x, &w.attn_norm, rr, &s.ma, &mut s.dx, parts, &mut d16.dx, fl, n16)?
                }
                _ => rmsnorm_backward_acc(b, x, &w.attn_norm, rr, &s.ma, &mut s.dx, parts, nba)?,
            }
            rmsnorm_dgamma_reduce(b, &s.norm_partials, &mut gl.attn_norm, nr)?;
        }
        let eb = kernels::embed::Params::new(rows, d, v);
        kernels::embed::backward(b, &s.dx, ids, &mut g.embedding, &mut s.embed, eb)?;
        Ok(())
    }
}
