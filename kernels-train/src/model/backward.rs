//! The backward pass: every parameter's gradient, accumulated (+=) into the gradient buffers.

use super::alloc::{LayerSums, NormPartials};
use super::products::{Dy, Half, Kept, Operand, Plans, Prep, backward, preps};
use super::{Attention, B, Model, fast_params};
use crate::Error;
use crate::params::Param;
use crate::params::fused::Fused;
use kernels::Batch;
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq};
use kernels::backward_ffn::{ffn_swiglu_backward_gu, ffn_swiglu_backward_gu_f16};
use kernels::norm::{
    rmsnorm_backward, rmsnorm_backward_acc, rmsnorm_backward_acc_f16, rmsnorm_backward_f16, rmsnorm_dgamma_reduce,
    rmsnorm_dgamma_reduce_all, rmsnorm_dgamma_reduce4,
};
use kernels::rope::{rope_qkv_backward, rope_qkv_backward_f16};

/// Records the backward of the linear layers over the step's rows: input and weight gradients
/// of one layer together ([`backward`]).
struct Linear<'a> {
    plans: &'a Plans,
    half: &'a mut Option<Half>,
    rows: usize,
    /// Where the layers' split weight gradients wait for one sum a layer, and the layer being
    /// recorded (`None`: the head, summed on its own).
    defer: Option<&'a mut LayerSums>,
    layer: Option<usize>,
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
        // A layer's weight gradient whose parts wait for the layer's one sum, where it has one.
        let defer = match (self.defer.as_deref_mut(), self.layer) {
            (Some(d), Some(l)) => d.dst(l, shape.index).map(|dst| (&mut d.deferral, dst)),
            _ => None,
        };
        backward(b, self.plans, dy, w, prep, x, dw, residual, dx, dims, defer)
    }

    /// Adds the deferred weight gradients of layer `l` into its part of the gradient pages.
    fn finish_layer(&mut self, b: &Batch<'_>, l: usize) -> Result<(), Error> {
        if let Some(d) = self.defer.as_deref_mut() {
            d.add(b, l)?;
        }
        Ok(())
    }
}

/// RMSNorm's dγ: each norm's backward writes its partial sums into [`Dgamma::partials`].
/// With [`NormPartials::All`] every norm has its own, and one dispatch at the end of the
/// backward reduces them all (`norm::rmsnorm_dgamma_reduce_all`); with [`NormPartials::Four`]
/// the norms take four buffers in turn, reduced four a dispatch (`norm::rmsnorm_dgamma_reduce4`)
/// and the backward's last norms (fewer than four) one at a time (`rmsnorm_dgamma_reduce`). The
/// sums are the same in every case: the same bits.
struct Dgamma {
    /// [`NormPartials::Four`]: the gradient of each norm whose partials wait, by its index in
    /// the fused order.
    pending: Vec<usize>,
    rows: u32,
    d: u32,
}

impl Dgamma {
    /// The partials buffer the backward of the norm whose gain is tensor `i` (fused order) writes.
    fn partials<'s>(&self, norms: &'s mut NormPartials, i: usize) -> Result<&'s mut B, Error> {
        match norms {
            NormPartials::All { parts, .. } => parts
                .get_mut(i)
                .and_then(Option::as_mut)
                .ok_or_else(|| Error::Config(format!("internal: tensor {i} has no dγ partials"))),
            NormPartials::Four(four) => Ok(&mut four[self.pending.len()]),
        }
    }

    /// Notes that the norm whose gradient is tensor `i` (fused order) wrote its partials; with
    /// four buffers, reduces the four waiting norms once there are four.
    fn push(&mut self, b: &Batch<'_>, i: usize, norms: &NormPartials, g: &mut Fused<B>) -> Result<(), Error> {
        let NormPartials::Four(parts) = norms else { return Ok(()) };
        self.pending.push(i);
        if self.pending.len() == parts.len() {
            self.flush_four(b, parts, g)?;
        }
        Ok(())
    }

    /// Reduces every norm's partials not yet reduced into its gradient (`gains`: the gradient
    /// pages' runs).
    fn finish(&mut self, b: &Batch<'_>, norms: &NormPartials, g: &mut Fused<B>, gains: &mut [B]) -> Result<(), Error> {
        match norms {
            NormPartials::Four(parts) => self.flush_four(b, parts, g),
            &NormPartials::All { ref whole, stride, run, gstride, ref parts } => {
                let count = parts.iter().flatten().count() as u32;
                let dg = gains.get_mut(run).ok_or_else(|| Error::Config("internal: no run of the gains".into()))?;
                let p = kernels::norm::rmsnorm_dgamma_reduce_all::Params::new(
                    self.rows,
                    self.d,
                    count,
                    stride as u32,
                    gstride as u32,
                );
                rmsnorm_dgamma_reduce_all(b, whole, dg, p)?;
                Ok(())
            }
        }
    }

    /// Reduces the waiting norms' partials into their gradients.
    fn flush_four(&mut self, b: &Batch<'_>, parts: &[B; 4], g: &mut Fused<B>) -> Result<(), Error> {
        let mut all: Vec<Option<&mut B>> = g.iter_mut().map(Some).collect();
        let mut take = |i: usize| {
            all.get_mut(i)
                .and_then(Option::take)
                .ok_or_else(|| Error::Config(format!("internal: the norm gradient {i} is missing or taken twice")))
        };
        let (rows, d) = (self.rows, self.d);
        match self.pending[..] {
            [i0, i1, i2, i3] => {
                let (g0, g1, g2, g3) = (take(i0)?, take(i1)?, take(i2)?, take(i3)?);
                let p = kernels::norm::rmsnorm_dgamma_reduce4::Params::new(rows, d);
                let [p0, p1, p2, p3] = parts;
                rmsnorm_dgamma_reduce4(b, p0, p1, p2, p3, g0, g1, g2, g3, p)?;
            }
            ref rest => {
                for (part, &i) in parts.iter().zip(rest) {
                    let p = kernels::norm::rmsnorm_dgamma_reduce::Params::new(rows, d);
                    rmsnorm_dgamma_reduce(b, part, take(i)?, p)?;
                }
            }
        }
        self.pending.clear();
        Ok(())
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
        let Model {
            cfg: c,
            layout,
            params: p,
            grads: g,
            pages,
            acts,
            s,
            ids,
            half,
            w16,
            wt16,
            halves,
            plans,
            attention,
            ..
        } = self;
        let pv = preps(p, (w16.as_ref(), wt16.as_ref()), halves.as_ref());
        let (d, f, v) = (c.dim as u32, c.ffn_hidden as u32, c.vocab as u32);
        let (h, hkv, dh) = (c.heads as u32, c.kv_heads as u32, c.head_dim() as u32);
        let rows = (batch * c.seq_len) as u32;
        let (bt, sq) = (batch as u32, c.seq_len as u32);
        let scale = 1.0 / (dh as f32).sqrt();
        let base = c.rope_base;
        let nb = kernels::norm::rmsnorm_backward::Params::new(rows, d);
        let nba = kernels::norm::rmsnorm_backward_acc::Params::new(rows, d);
        let mut dgamma = Dgamma { pending: Vec::new(), rows, d };

        let mut lin = Linear { plans, half, rows: rows as usize, defer: s.layer_sums.as_mut(), layer: None };
        // Head (tied to the embedding): dhf = dlogits·E, dE += dlogitsᵀ·hf. Mixed precision:
        // dlogits arrive in f16, times the loss scale (undone by the optimizer), from the loss.
        let e = (&p.embedding, pv.embedding, &layout.embedding);
        let dl = acts.dlogits16.as_ref().map_or(Dy::F32(&acts.logits), Dy::F16);
        lin.backward(b, dl, e, acts.hf.operand(), &mut g.embedding, None, &mut s.ma)?;
        // Final norm: dx = ∂/∂x_final (in mixed precision with its f16 copy, W2's dY).
        let (x, rr, parts) = (&acts.xf, &acts.rrms_f, dgamma.partials(&mut s.norms, layout.final_norm.index)?);
        match s.dy16.as_mut() {
            None => rmsnorm_backward(b, x, &p.final_norm, rr, &s.ma, &mut s.dx, parts, nb)?,
            Some(d16) => {
                let n16 = kernels::norm::rmsnorm_backward_f16::Params::new(rows, d);
                let fl = flag(lin.half)?;
                rmsnorm_backward_f16(b, x, &p.final_norm, rr, &s.ma, &mut s.dx, parts, &mut d16.dx, fl, n16)?
            }
        }
        dgamma.push(b, layout.final_norm.index, &s.norms, g)?;

        for l in (0..c.layers).rev() {
            let (y, w, shape) = (&mut acts.layers[l], &p.layers[l], &layout.layers[l]);
            lin.layer = Some(l);
            let pw = &pv.layers[l];
            // Mixed precision: each output gradient in f16 from the kernel that makes it (dx's
            // copy beside it).
            let dx = s.dy16.as_ref().map_or(Dy::F32(&s.dx), |d16| Dy::F16(&d16.dx));
            // Feed-forward: out = x_mid + (silu(g)·u)·W2ᵀ, [g | u] = h2·W13ᵀ.
            let w2 = (&w.w2, pw.w2, &shape.w2);
            lin.backward(b, dx, w2, y.a.operand(), &mut g.layers[l].w2, None, &mut s.da)?;
            match &mut s.dgu {
                Kept::F32(dgu) => {
                    let sb = kernels::backward_ffn::ffn_swiglu_backward_gu::RowsParams::new(rows, f);
                    ffn_swiglu_backward_gu(b, &y.gu, &s.da, dgu, sb)?;
                }
                Kept::F16(dgu) => {
                    let sb = kernels::backward_ffn::ffn_swiglu_backward_gu_f16::RowsParams::new(rows, f);
                    ffn_swiglu_backward_gu_f16(b, &y.gu, &s.da, dgu, flag(lin.half)?, sb)?;
                }
                Kept::Split(..) => return Err(Error::Config("internal: SwiGLU's gradient kept as halves".into())),
            }
            let w13 = (&w.w13, pw.w13, &shape.w13);
            lin.backward(b, s.dgu.dy()?, w13, y.h2.operand(), &mut g.layers[l].w13, None, &mut s.mb)?;
            // dx += the norm's input gradient (the residual stream's two paths meet here).
            let (x, rr, parts) = (&y.x_mid, &y.rrms2, dgamma.partials(&mut s.norms, shape.ffn_norm.index)?);
            match s.dy16.as_mut() {
                None => rmsnorm_backward_acc(b, x, &w.ffn_norm, rr, &s.mb, &mut s.dx, parts, nba)?,
                Some(d16) => {
                    let n16 = kernels::norm::rmsnorm_backward_acc_f16::Params::new(rows, d);
                    let fl = flag(lin.half)?;
                    rmsnorm_backward_acc_f16(b, x, &w.ffn_norm, rr, &s.mb, &mut s.dx, parts, &mut d16.dx, fl, n16)?
                }
            }
            dgamma.push(b, shape.ffn_norm.index, &s.norms, g)?;
            // Attention: x_mid = x_in + att·Woᵀ.
            let att = y.att16.as_ref().map_or(Operand::F32(&y.att), Operand::F16);
            let wo = (&w.wo, pw.wo, &shape.wo);
            let dx = s.dy16.as_ref().map_or(Dy::F32(&s.dx), |d16| Dy::F16(&d16.dx));
            lin.backward(b, dx, wo, att, &mut g.layers[l].wo, None, &mut s.datt)?;
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
            lin.backward(b, dqkv, wqkv, y.h1.operand(), &mut g.layers[l].wqkv, None, &mut s.ma)?;
            lin.finish_layer(b, l)?;
            // The first layer's dx goes to the embedding only, in f32: no f16 copy.
            let (x, rr, parts) = (&y.x_in, &y.rrms1, dgamma.partials(&mut s.norms, shape.attn_norm.index)?);
            match s.dy16.as_mut() {
                Some(d16) if l > 0 => {
                    let n16 = kernels::norm::rmsnorm_backward_acc_f16::Params::new(rows, d);
                    let fl = flag(lin.half)?;
                    rmsnorm_backward_acc_f16(b, x, &w.attn_norm, rr, &s.ma, &mut s.dx, parts, &mut d16.dx, fl, n16)?
                }
                _ => rmsnorm_backward_acc(b, x, &w.attn_norm, rr, &s.ma, &mut s.dx, parts, nba)?,
            }
            dgamma.push(b, shape.attn_norm.index, &s.norms, g)?;
        }
        dgamma.finish(b, &s.norms, g, &mut pages.grads)?;
        let eb = kernels::embed::Params::new(rows, d, v);
        kernels::embed::backward(b, &s.dx, ids, &mut g.embedding, &mut s.embed, eb)?;
        Ok(())
    }
}
