//! Mixed precision on the fast and flash attention paths: attention's products with f16
//! operands on tensor cores (`kernels::fast_attention::forward16` / `backward16`: six batched
//! products; `kernels::flash_attention::forward16` / `backward16`: the fused kernels).
//!
//! Used when the model runs mixed precision ([`super::Products::Half`]), the fast or flash path
//! (not the streaming kernels) and a head dim that is a multiple of 4 (f16 operands are whole
//! vec4s); otherwise attention stays f32 (`fast_attention::forward` / `backward`,
//! `flash_attention::forward` / `backward`). Each layer keeps Q, K (after RoPE) and V only as
//! their f16 copies ([`super::alloc::Qkv::F16`]): RoPE writes all three from the fused
//! projection's f32 rows (`rope::rope_qkv_f16`, the bits `cast::cast_f16x4` would make of
//! `rope::rope_qkv`'s outputs); the backward reads the same copies and casts nothing for them.
//! The upstream gradient dO is cast by `cast::cast_grad_f16x4` on the fast path and by the
//! kernel that computes Δ on the flash path (`backward_attention::attention_delta_cast16`), both
//! of which raise the loss scaler's overflow flag; so does a dS beyond f16's range
//! (`backward_attention::attention_ds_f16`, or the flash backward itself). The softmax, lse, Δ
//! and dS stay f32. The fast path's backward writes dP, then dS, into one more `[B, H, S, S]`
//! workspace (shared by the layers; the P of each layer stays in its own); flash attention has
//! no workspace.

use super::B;
use super::alloc::Qkv16;
use super::products::Half;
use crate::Error;
use crate::config::ModelConfig;
use kernels::fast_attention::{Params, backward16, forward16};
use kernels::flash_attention;
use kernels::ops::{F16x4, f16x4_len};
use kernels::{Batch, Buffer, Gpu};

/// dO's f16 copy and (the fast path's) the backward's dP/dS workspace, shared by the layers and
/// sized for batches of up to `batch` sequences of `seq_len` tokens.
pub(super) struct Attention16 {
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
        let hq = cfg.heads * cfg.head_dim();
        let probs = super::fast_params(cfg, batch, cfg.seq_len).probs_len();
        Ok(Attention16 {
            d_o: gpu.zeros(f16x4_len(rows, hq))?,
            ds: if fast { Some(gpu.zeros(probs.max(1))?) } else { None },
        })
    }

    /// The forward of one layer from its f16 Q, K, V: O and lse, P left in `probs` for the
    /// backward.
    pub fn forward(
        &mut self,
        b: &Batch<'_>,
        (q, k, v): Qkv16<'_>,
        o: &mut B,
        lse: &mut B,
        probs: &mut B,
        p: Params,
    ) -> Result<(), Error> {
        forward16(b, q, k, v, o, lse, probs, p)?;
        Ok(())
    }

    /// The backward of one layer: dQ, dK, dV (overwritten) from the layer's f16 Q, K, V, its
    /// output `o`, the upstream gradient `d_o` (loss-scaled) and its P in `probs`; `delta` is Δ
    /// scratch. An overflow of dO's f16 cast or of dS (rounded to f16 by the products) raises the
    /// loss scaler's flag (`half`): the step is skipped.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &mut self,
        b: &Batch<'_>,
        half: &mut Option<Half>,
        ((q16, k16, v16), o, d_o): (Qkv16<'_>, &B, &B),
        probs: &B,
        delta: &mut B,
        (dq, dk, dv): (&mut B, &mut B, &mut B),
        p: Params,
    ) -> Result<(), Error> {
        let h = half
            .as_mut()
            .ok_or_else(|| Error::Config("internal: f16 attention without mixed precision's buffers".into()))?;
        let rows = p.batch * p.seq;
        let cp = kernels::cast::cast_grad_f16x4::CastParams::new(rows, p.heads * p.head_dim);
        kernels::cast::cast_grad_f16x4(b, d_o, &mut self.d_o, &mut h.flag, cp)?;
        let d_o16 = &self.d_o;
        let flag = &mut h.flag;
        let ds =
            self.ds.as_mut().ok_or_else(|| Error::Config("internal: the fast path without its dS workspace".into()))?;
        backward16(b, q16, k16, v16, o, d_o, d_o16, probs, ds, delta, flag, dq, dk, dv, p)?;
        Ok(())
    }

    /// The flash forward of one layer from its f16 Q, K, V: O, its f16 copy `o16` (the output
    /// projection's operand) and lse.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_flash(
        &mut self,
        b: &Batch<'_>,
        (q, k, v): Qkv16<'_>,
        o: &mut B,
        o16: &mut Buffer<F16x4>,
        lse: &mut B,
        p: Params,
    ) -> Result<(), Error> {
        flash_attention::forward16(b, q, k, v, o, o16, lse, p)?;
        Ok(())
    }

    /// The flash backward of one layer: dQ, dK, dV (overwritten) from the layer's f16 Q, K, V,
    /// its output `o` and `lse`, the upstream gradient `d_o` (loss-scaled); `delta` is Δ
    /// scratch. An overflow of dO's f16 cast or of dS raises the loss scaler's flag.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_flash(
        &mut self,
        b: &Batch<'_>,
        half: &mut Option<Half>,
        ((q16, k16, v16), o, d_o): (Qkv16<'_>, &B, &B),
        lse: &B,
        delta: &mut B,
        (dq, dk, dv): (&mut B, &mut B, &mut B),
        p: Params,
    ) -> Result<(), Error> {
        let h = half
            .as_mut()
            .ok_or_else(|| Error::Config("internal: f16 attention without mixed precision's buffers".into()))?;
        // dO's f16 copy and overflow check are made by the kernel that computes Δ.
        let (d_o16, flag) = (&mut self.d_o, &mut h.flag);
        flash_attention::backward16(b, q16, k16, v16, o, d_o, d_o16, lse, delta, flag, dq, dk, dv, p)?;
        Ok(())
    }
}
