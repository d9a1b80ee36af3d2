//! Mixed precision on the fast and flash attention paths: attention's products with f16
//! operands on tensor cores (`kernels::fast_attention::forward16` / `backward16`: six batched
//! products; `kernels::flash_attention::forward16` / `backward16`: the fused kernels).
//!
//! Used when the model runs mixed precision ([`super::Products::Half`]), the fast or flash path
//! (not the streaming kernels) and a head dim that is a multiple of 4 (f16 operands are whole
//! vec4s); otherwise attention stays f32 (`fast_attention::forward` / `backward`,
//! `flash_attention::forward` / `backward`). Q, K, V (after RoPE)
//! are cast to f16 by `ops::cast_f16x4` into buffers shared by the layers, once before each
//! layer's forward and again before its backward (the same f32 values, so the same halves: the
//! layers keep only their f32 Q, K, V); the upstream gradient dO is cast by
//! `cast::cast_grad_f16x4`, which raises the loss scaler's overflow flag; so does a dS beyond
//! f16's range (`backward_attention::attention_ds_f16`, or the flash backward itself). The softmax, lse, Δ and
//! dS stay f32. The fast path's backward writes dP, then dS, into one more `[B, H, S, S]`
//! workspace (shared by the layers; the P of each layer stays in its own); flash attention has
//! no workspace.

use super::B;
use super::products::Half;
use crate::Error;
use crate::config::ModelConfig;
use kernels::fast_attention::{Params, backward16, forward16};
use kernels::flash_attention;
use kernels::ops::{F16x4, cast_f16x4, f16x4_len};
use kernels::{Batch, Buffer, Gpu};

/// The f16 operands and (the fast path's) the backward's dP/dS workspace, sized for batches of
/// up to `batch` sequences of `seq_len` tokens.
pub(super) struct Attention16 {
    q: Buffer<F16x4>,
    k: Buffer<F16x4>,
    v: Buffer<F16x4>,
    d_o: Buffer<F16x4>,
    /// The fast path's dP, then dS `[B, H, S, S]`; `None` for flash attention.
    ds: Option<B>,
}

impl Attention16 {
    /// Whether a model of `cfg` in mixed precision on the fast or flash path runs attention in
    /// f16 on `gpu` (`flash`: the flash kernels' f16 form must fit the adapter too).
    pub fn applies(gpu: &Gpu, cfg: &ModelConfig, batch: usize, flash: bool) -> bool {
        cfg.head_dim().is_multiple_of(4)
            && (!flash || super::fast_params(cfg, batch, cfg.seq_len).flash_fits(gpu, true))
    }

    /// Allocates the buffers for batches of up to `batch` sequences (the dP/dS workspace only
    /// for the fast path).
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, batch: usize, fast: bool) -> Result<Self, Error> {
        let rows = batch * cfg.seq_len;
        let (hq, kv) = (cfg.heads * cfg.head_dim(), cfg.kv_dim());
        let probs = super::fast_params(cfg, batch, cfg.seq_len).probs_len();
        Ok(Attention16 {
            q: gpu.zeros(f16x4_len(rows, hq))?,
            k: gpu.zeros(f16x4_len(rows, kv))?,
            v: gpu.zeros(f16x4_len(rows, kv))?,
            d_o: gpu.zeros(f16x4_len(rows, hq))?,
            ds: if fast { Some(gpu.zeros(probs.max(1))?) } else { None },
        })
    }

    /// Casts `q`, `k`, `v` ([rows, H·Dh] and [rows, Hkv·Dh], rows = B·S of `p`) to f16.
    fn cast_qkv(&mut self, b: &Batch<'_>, q: &B, k: &B, v: &B, p: &Params) -> Result<(), Error> {
        let rows = p.batch as usize * p.seq as usize;
        let (hq, kv) = ((p.heads * p.head_dim) as usize, (p.kv_heads * p.head_dim) as usize);
        cast_f16x4(b, q, &mut self.q, rows, hq)?;
        cast_f16x4(b, k, &mut self.k, rows, kv)?;
        cast_f16x4(b, v, &mut self.v, rows, kv)?;
        Ok(())
    }

    /// The forward of one layer: O and lse, P left in `probs` for the backward.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &mut self,
        b: &Batch<'_>,
        q: &B,
        k: &B,
        v: &B,
        o: &mut B,
        lse: &mut B,
        probs: &mut B,
        p: Params,
    ) -> Result<(), Error> {
        self.cast_qkv(b, q, k, v, &p)?;
        forward16(b, &self.q, &self.k, &self.v, o, lse, probs, p)?;
        Ok(())
    }

    /// The backward of one layer: dQ, dK, dV (overwritten) from the layer's f32 Q, K, V, its
    /// output `o`, the upstream gradient `d_o` (loss-scaled) and its P in `probs`; `delta` is Δ
    /// scratch. An overflow of dO's f16 cast or of dS (rounded to f16 by the products) raises the
    /// loss scaler's flag (`half`): the step is skipped.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &mut self,
        b: &Batch<'_>,
        half: &mut Option<Half>,
        (q, k, v, o, d_o): (&B, &B, &B, &B, &B),
        probs: &B,
        delta: &mut B,
        (dq, dk, dv): (&mut B, &mut B, &mut B),
        p: Params,
    ) -> Result<(), Error> {
        let h = half
            .as_mut()
            .ok_or_else(|| Error::Config("internal: f16 attention without mixed precision's buffers".into()))?;
        self.cast_qkv(b, q, k, v, &p)?;
        let rows = p.batch * p.seq;
        let cp = kernels::cast::cast_grad_f16x4::CastParams::new(rows, p.heads * p.head_dim);
        kernels::cast::cast_grad_f16x4(b, d_o, &mut self.d_o, &mut h.flag, cp)?;
        let (q16, k16, v16, d_o16) = (&self.q, &self.k, &self.v, &self.d_o);
        let flag = &mut h.flag;
        let ds =
            self.ds.as_mut().ok_or_else(|| Error::Config("internal: the fast path without its dS workspace".into()))?;
        backward16(b, q16, k16, v16, o, d_o, d_o16, probs, ds, delta, flag, dq, dk, dv, p)?;
        Ok(())
    }

    /// The flash forward of one layer: O and lse.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_flash(
        &mut self,
        b: &Batch<'_>,
        q: &B,
        k: &B,
        v: &B,
        o: &mut B,
        lse: &mut B,
        p: Params,
    ) -> Result<(), Error> {
        self.cast_qkv(b, q, k, v, &p)?;
        flash_attention::forward16(b, &self.q, &self.k, &self.v, o, lse, p)?;
        Ok(())
    }

    /// The flash backward of one layer: dQ, dK, dV (overwritten) from the layer's f32 Q, K, V,
    /// its output `o` and `lse`, the upstream gradient `d_o` (loss-scaled); `delta` is Δ
    /// scratch. An overflow of dO's f16 cast or of dS raises the loss scaler's flag.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_flash(
        &mut self,
        b: &Batch<'_>,
        half: &mut Option<Half>,
        (q, k, v, o, d_o): (&B, &B, &B, &B, &B),
        lse: &B,
        delta: &mut B,
        (dq, dk, dv): (&mut B, &mut B, &mut B),
        p: Params,
    ) -> Result<(), Error> {
        let h = half
            .as_mut()
            .ok_or_else(|| Error::Config("internal: f16 attention without mixed precision's buffers".into()))?;
        self.cast_qkv(b, q, k, v, &p)?;
        let rows = p.batch * p.seq;
        let cp = kernels::cast::cast_grad_f16x4::CastParams::new(rows, p.heads * p.head_dim);
        kernels::cast::cast_grad_f16x4(b, d_o, &mut self.d_o, &mut h.flag, cp)?;
        let (q16, k16, v16, d_o16) = (&self.q, &self.k, &self.v, &self.d_o);
        let flag = &mut h.flag;
        flash_attention::backward16(b, q16, k16, v16, o, d_o, d_o16, lse, delta, flag, dq, dk, dv, p)?;
        Ok(())
    }
}
