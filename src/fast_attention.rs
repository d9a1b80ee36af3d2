//! The fast path of causal grouped-query attention: register-tiled batched GEMMs over the
//! materialised probabilities P `[B, H, S, S]`, for GPUs with memory to spare (at batch 8,
//! sequence 1024, 12 heads P is 400 MB). Same layouts, results and overwrite convention as the
//! streaming kernels (`attention::attention_forward`, `backward_attention::attention_backward_dq`
//! / `_dkdv`), which remain the small-memory path:
//! Q, O, dO, dQ `[B, S, H, Dh]`; K, V, dK, dV `[B, S, Hkv, Dh]`; lse `[B, H, S]`; query head `h`
//! reads kv head `h / (H / Hkv)`; query `s` sees keys `0..=s`; any head dim ≥ 1.
//!
//! [`forward`] records three kernels: `attention_fast_scores` (S = scale·Q·Kᵀ, lower-triangle
//! 64×64 tiles only), `attention_fast_softmax` (P and lse, per row), `attention_fast_pv`
//! (O = P·V, contraction stopping at the diagonal tile). [`backward`] records five:
//! `attention_fast_delta` (Δ = rowsum(dO ⊙ O)), `attention_fast_ptx` (dV = Σ_g P_gᵀ·dO_g),
//! `attention_fast_ds` (dS = P ⊙ (dO·Vᵀ − Δ), in place of P), `attention_fast_pv`
//! (dQ = scale·dS·K) and `attention_fast_ptx` (dK = scale·Σ_g dS_gᵀ·Q_g). Everything is
//! deterministic (fixed-order sums, no atomics); every output is overwritten.
//!
//! **f16 operands on tensor cores** ([`forward16`], [`backward16`], workspace [`Workspace16`]):
//! the same computation with Q, K, V and dO given as f16 (`Buffer<`[`F16x4`]`>`, the f16x4 row
//! layout of `kernels::ops`: `[B, S, H, Dh]` / `[B, S, Hkv, Dh]` as rows of Dh halves,
//! Dh % 4 == 0) and all six batched products on the tensor-core kernels `attention::attention_scores_f16`, `attention::attention_pv_f16` and
//! `backward_attention::attention_ptx_f16` (f16 operands,
//! f32 sums; their portable bodies where the adapter has no cooperative matrices):
//! S = scale·Q·Kᵀ and dP = dO·Vᵀ (`attention_scores_f16`), O = P·V and dQ = scale·dS·K
//! (`attention_pv_f16`), dV = Σ_g P_gᵀ·dO_g and dK = scale·Σ_g dS_gᵀ·Q_g (`attention_ptx_f16`).
//! P and dS stay f32 in their workspaces and are rounded to f16 as the products load them; the
//! softmax, lse, Δ = rowsum(dO ⊙ O) (from the f32 dO and O) and dS = P ⊙ (dP − Δ)
//! (`backward_attention::attention_ds_f16`, which also raises a loss-scaling overflow flag when a dS is
//! beyond f16's range) are f32 arithmetic. The backward needs a second S×S workspace for dP (then
//! dS), and leaves P intact.
//!
//! ```no_run
//! use kernels::fast_attention::{self, Params};
//! # fn main() -> kernels::Result<()> {
//! let gpu = kernels::Gpu::new()?;
//! let p = Params::new(8, 1024, 12, 12, 64, 1.0 / 8.0);
//! let n = p.q_len();
//! let (q, k, v, d_o) = (gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?);
//! let (mut o, mut lse) = (gpu.zeros(n)?, gpu.zeros(p.rows())?);
//! let (mut dq, mut dk, mut dv) = (gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?);
//! let mut ws = fast_attention::Workspace::new(&gpu, &p)?;
//! let batch = gpu.batch();
//! fast_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, &mut ws.probs, p)?;
//! fast_attention::backward(&batch, &q, &k, &v, &o, &d_o, &mut ws.probs, &mut ws.delta, &mut dq, &mut dk, &mut dv, p)?;
//! batch.submit()?;
//! # Ok(()) }
//! ```

use crate::attention::{attention_fast_pv, attention_fast_scores, attention_fast_softmax};
use crate::attention::{attention_pv_f16, attention_scores_f16};
use crate::backward_attention::attention_ds_f16;
use crate::backward_attention::attention_ptx_f16;
use crate::backward_attention::{attention_fast_delta, attention_fast_ds, attention_fast_ptx};
use crate::ops::F16x4;
use crate::{Buffer, Error, Gpu, Record, Result};

/// The shape of one attention call and its score scale (the trainer passes 1/√Dh).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// B
    pub batch: u32,
    /// S
    pub seq: u32,
    /// H, query heads
    pub heads: u32,
    /// Hkv, key/value heads (H is a multiple of it)
    pub kv_heads: u32,
    /// Dh
    pub head_dim: u32,
    /// The factor of q·k.
    pub scale: f32,
}

impl Params {
    /// The parameters of one call.
    pub fn new(batch: u32, seq: u32, heads: u32, kv_heads: u32, head_dim: u32, scale: f32) -> Self {
        Params { batch, seq, heads, kv_heads, head_dim, scale }
    }

    /// Elements of Q (and O, dO, dQ): B·S·H·Dh.
    pub fn q_len(&self) -> usize {
        self.batch as usize * self.seq as usize * self.heads as usize * self.head_dim as usize
    }

    /// Elements of K (and V, dK, dV): B·S·Hkv·Dh.
    pub fn kv_len(&self) -> usize {
        self.batch as usize * self.seq as usize * self.kv_heads as usize * self.head_dim as usize
    }

    /// Elements of lse (and of the Δ workspace): B·H·S.
    pub fn rows(&self) -> usize {
        self.batch as usize * self.heads as usize * self.seq as usize
    }

    /// Floats of the probability workspace: B·H·S·S.
    pub fn probs_len(&self) -> usize {
        self.rows() * self.seq as usize
    }

    /// The workspace sizes, in floats.
    pub fn workspace_sizes(&self) -> WorkspaceSizes {
        WorkspaceSizes { probs: self.probs_len(), delta: self.rows() }
    }

    /// Whether the probability workspace fits one storage binding (and one buffer) of `gpu`:
    /// if not, use the streaming kernels.
    pub fn fits(&self, gpu: &Gpu) -> bool {
        let bytes = self.probs_len() as u64 * 4;
        let r = gpu.report();
        bytes <= r.max_storage_binding && bytes <= r.max_buffer_size
    }
}

impl From<crate::attention::attention_forward::Params> for Params {
    fn from(p: crate::attention::attention_forward::Params) -> Self {
        Params::new(p.batch, p.seq, p.heads, p.kv_heads, p.head_dim, p.scale)
    }
}

/// Sizes of the workspaces, in floats (f32 elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceSizes {
    /// The probabilities P `[B, H, S, S]` (written by [`forward`], read and consumed by
    /// [`backward`]).
    pub probs: usize,
    /// Δ `[B, H, S]` (scratch of [`backward`]).
    pub delta: usize,
}

/// The workspaces of one shape, allocated at their exact sizes.
#[derive(Debug)]
pub struct Workspace {
    /// P, then dS (see [`backward`]).
    pub probs: Buffer<f32>,
    /// Δ.
    pub delta: Buffer<f32>,
}

impl Workspace {
    /// Allocates the workspaces for `p` (zeroed; the kernels never read what they did not write).
    pub fn new(gpu: &Gpu, p: &Params) -> Result<Self> {
        let s = p.workspace_sizes();
        Ok(Workspace { probs: gpu.zeros(s.probs.max(1))?, delta: gpu.zeros(s.delta.max(1))? })
    }
}

fn check_params(what: &str, p: &Params) -> Result<()> {
    let bad = |requirement: &str| {
        Err(Error::Shape {
            kernel: what.to_string(),
            requirement: requirement.to_string(),
            detail: format!("heads = {}, kv_heads = {}, head_dim = {}", p.heads, p.kv_heads, p.head_dim),
        })
    };
    if p.head_dim == 0 {
        return bad("head_dim >= 1");
    }
    if p.kv_heads == 0 {
        return bad("kv_heads >= 1");
    }
    if !p.heads.is_multiple_of(p.kv_heads) {
        return bad("heads % kv_heads == 0");
    }
    Ok(())
}

/// Checks an f32 operand: `got` floats against `needed`. `what` names the call
/// (`fast_attention::forward`); the flash functions share these checks.
pub(crate) fn check_len(what: &str, name: &str, got: usize, needed: usize, formula: &str) -> Result<()> {
    if got < needed {
        return Err(Error::LengthMismatch {
            detail: format!("{what}: `{name}` holds {got} floats but needs at least {formula} = {needed}"),
        });
    }
    Ok(())
}

/// The causal GQA forward: O `[B, S, H, Dh]` and lse `[B, H, S]` (both overwritten, the first
/// B·S·H·Dh and B·H·S elements) from `q` `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]`, through the
/// workspace `probs` (at least [`Params::probs_len`] floats), which is left holding P for
/// [`backward`]: row (b, h, s) at `((b·H + h)·S + s)·S` holds the probabilities of keys
/// `0..=s` and zeros up to the end of its 64-key tile; entries further right are not written.
///
/// Records three dispatches into `rec`. Every size is checked before anything is recorded:
/// a short buffer or inconsistent heads give `Err`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    rec: impl Record + Copy,
    q: &Buffer<f32>,
    k: &Buffer<f32>,
    v: &Buffer<f32>,
    o: &mut Buffer<f32>,
    lse: &mut Buffer<f32>,
    probs: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "fast_attention::forward";
    check_params(what, &p)?;
    check_len(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "lse", lse.len(), p.rows(), "B·H·S")?;
    check_len(what, "probs (workspace)", probs.len(), p.probs_len(), "B·H·S·S")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    attention_fast_scores(rec, q, k, probs, attention_fast_scores::Params::new(b, s, h, hkv, dh, p.scale))?;
    attention_fast_softmax(rec, probs, lse, attention_fast_softmax::Params::new(b, s, h))?;
    attention_fast_pv(rec, probs, v, o, attention_fast_pv::Params::new(b, s, h, hkv, dh, 1.0))
}

/// The causal GQA backward of [`forward`]: dQ `[B, S, H, Dh]`, dK and dV `[B, S, Hkv, Dh]`, all
/// OVERWRITTEN (never added to; dK/dV summed over the query heads of each kv group inside the
/// kernel, in a fixed order), from the forward's inputs, its output `o`, the upstream gradient
/// `d_o` `[B, S, H, Dh]` and `probs` as [`forward`] left it. lse is not needed.
///
/// `probs` is CONSUMED: P is overwritten in place by dS = P ⊙ (dP − Δ), so a second backward
/// needs the forward again. `delta` is scratch of at least B·H·S floats (left holding
/// Δ = rowsum(dO ⊙ O)). Records five dispatches into `rec`; every size is checked before
/// anything is recorded.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    rec: impl Record + Copy,
    q: &Buffer<f32>,
    k: &Buffer<f32>,
    v: &Buffer<f32>,
    o: &Buffer<f32>,
    d_o: &Buffer<f32>,
    probs: &mut Buffer<f32>,
    delta: &mut Buffer<f32>,
    dq: &mut Buffer<f32>,
    dk: &mut Buffer<f32>,
    dv: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "fast_attention::backward";
    check_params(what, &p)?;
    check_len(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "d_o", d_o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "probs (workspace)", probs.len(), p.probs_len(), "B·H·S·S")?;
    check_len(what, "delta (workspace)", delta.len(), p.rows(), "B·H·S")?;
    check_len(what, "dq", dq.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "dk", dk.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "dv", dv.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    attention_fast_delta(rec, o, d_o, delta, attention_fast_delta::Params::new(b, s, h, dh))?;
    // dV reads P before the next step turns it into dS.
    attention_fast_ptx(rec, probs, d_o, dv, attention_fast_ptx::Params::new(b, s, h, hkv, dh, 1.0))?;
    attention_fast_ds(rec, d_o, v, delta, probs, attention_fast_ds::Params::new(b, s, h, hkv, dh))?;
    attention_fast_pv(rec, probs, k, dq, attention_fast_pv::Params::new(b, s, h, hkv, dh, p.scale))?;
    attention_fast_ptx(rec, probs, q, dk, attention_fast_ptx::Params::new(b, s, h, hkv, dh, p.scale))
}

/// The workspaces of the f16-operand path ([`forward16`], [`backward16`]) for one shape,
/// allocated at their exact sizes: [`Workspace`]'s two and the backward's dP.
#[derive(Debug)]
pub struct Workspace16 {
    /// P `[B, H, S, S]` (written by [`forward16`], read by [`backward16`]).
    pub probs: Buffer<f32>,
    /// dP, then dS `[B, H, S, S]` (scratch of [`backward16`]; [`Params::probs_len`] floats).
    pub ds: Buffer<f32>,
    /// Δ `[B, H, S]` (scratch of [`backward16`]).
    pub delta: Buffer<f32>,
}

impl Workspace16 {
    /// Allocates the workspaces for `p` (zeroed; the kernels never read what they did not write).
    pub fn new(gpu: &Gpu, p: &Params) -> Result<Self> {
        let s = p.workspace_sizes();
        Ok(Workspace16 {
            probs: gpu.zeros(s.probs.max(1))?,
            ds: gpu.zeros(s.probs.max(1))?,
            delta: gpu.zeros(s.delta.max(1))?,
        })
    }
}

/// [`check_params`] plus the f16 path's head-dim rule.
fn check_params16(what: &str, p: &Params) -> Result<()> {
    check_params(what, p)?;
    if !p.head_dim.is_multiple_of(4) {
        return Err(Error::Shape {
            kernel: what.to_string(),
            requirement: "head_dim % 4 == 0 (f16 operands are read as whole vec4s)".to_string(),
            detail: format!("head_dim = {}", p.head_dim),
        });
    }
    Ok(())
}

/// Checks an f16 operand: `got` f16x4 elements (4 halves each) against `needed` halves.
pub(crate) fn check_len16(what: &str, name: &str, got: usize, needed: usize, formula: &str) -> Result<()> {
    if got.saturating_mul(4) < needed {
        return Err(Error::LengthMismatch {
            detail: format!(
                "{what}: `{name}` holds {got} f16x4 elements ({} halves) but needs at least {formula} = {needed} halves",
                got.saturating_mul(4)
            ),
        });
    }
    Ok(())
}

/// Checks loss scaling's overflow flag: at least one element.
pub(crate) fn check_flag(what: &str, flag: &Buffer<u32>) -> Result<()> {
    if flag.is_empty() {
        return Err(Error::LengthMismatch { detail: format!("{what}: `flag` is empty but needs at least 1 element") });
    }
    Ok(())
}

/// [`forward`] with f16 operands on tensor cores: O `[B, S, H, Dh]` f32 and lse `[B, H, S]`
/// (both overwritten) from `q` `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]` in the f16x4 row
/// layout (`ops::cast_f16x4` of the f32 tensors as `[rows, Dh]` matrices; Dh % 4 == 0). S =
/// scale·Q·Kᵀ with f32 sums (`attention::attention_scores_f16`), the f32 softmax
/// (`attention_fast_softmax`), O = P·V with P rounded to f16 as it is read
/// (`attention::attention_pv_f16`). `probs` (at least [`Params::probs_len`] floats) is left holding
/// P with [`forward`]'s row contract, for [`backward16`].
///
/// Records three dispatches into `rec`; every size is checked before anything is recorded (a
/// short buffer, inconsistent heads or Dh % 4 ≠ 0 give `Err`). Needs `SHADER_F16`.
#[allow(clippy::too_many_arguments)]
pub fn forward16(
    rec: impl Record + Copy,
    q: &Buffer<F16x4>,
    k: &Buffer<F16x4>,
    v: &Buffer<F16x4>,
    o: &mut Buffer<f32>,
    lse: &mut Buffer<f32>,
    probs: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "fast_attention::forward16";
    check_params16(what, &p)?;
    check_len16(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len16(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "lse", lse.len(), p.rows(), "B·H·S")?;
    check_len(what, "probs (workspace)", probs.len(), p.probs_len(), "B·H·S·S")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    attention_scores_f16(rec, q, k, probs, attention_scores_f16::ScoreParams::new(b, s, h, hkv, dh, p.scale))?;
    attention_fast_softmax(rec, probs, lse, attention_fast_softmax::Params::new(b, s, h))?;
    attention_pv_f16(rec, probs, v, o, attention_pv_f16::AttParams::new(b, s, h, hkv, dh, 1.0))
}

/// [`backward`] with f16 operands on tensor cores: dQ `[B, S, H, Dh]`, dK and dV
/// `[B, S, Hkv, Dh]` f32, all OVERWRITTEN (dK/dV summed over each kv group's query heads in a
/// fixed order), from the f16 operands of [`forward16`] (`q`, `k`, `v`), its f32 output `o`,
/// the upstream gradient both as f32 (`d_o`, for Δ) and as f16 (`d_o16`, the same values cast
/// by `ops::cast_f16x4` or `cast::cast_grad_f16x4`: the products' operand), and `probs` as
/// [`forward16`] left it (only read: P survives, unlike [`backward`]).
///
/// Six dispatches: Δ = rowsum(dO ⊙ O) (`attention_fast_delta`, f32, into `delta`, at least
/// B·H·S floats), dV = Σ_g P_gᵀ·dO_g (`attention_ptx_f16`), dP = dO·Vᵀ (`attention_scores_f16`,
/// scale 1, into `ds`, at least [`Params::probs_len`] floats), dS = P ⊙ (dP − Δ) in place of dP
/// (`backward_attention::attention_ds_f16`, f32), dQ = scale·dS·K (`attention_pv_f16`) and
/// dK = scale·Σ_g dS_gᵀ·Q_g (`attention_ptx_f16`); P and dS are rounded to f16 as the products read
/// them. `flag` (at least 1 element) is the overflow check of loss scaling: `flag[0]` is set to 1
/// (never cleared) when a dS value is NaN, ±Inf or beyond ±65504 — where its f16 rounding would
/// clamp it — as `cast::cast_grad_f16x4` does for the gradients it casts (the trainer passes the
/// loss scaler's flag; other callers a scratch `Buffer<u32>` to read or ignore). Every size is
/// checked before anything is recorded. Needs `SHADER_F16`.
#[allow(clippy::too_many_arguments)]
pub fn backward16(
    rec: impl Record + Copy,
    q: &Buffer<F16x4>,
    k: &Buffer<F16x4>,
    v: &Buffer<F16x4>,
    o: &Buffer<f32>,
    d_o: &Buffer<f32>,
    d_o16: &Buffer<F16x4>,
    probs: &Buffer<f32>,
    ds: &mut Buffer<f32>,
    delta: &mut Buffer<f32>,
    flag: &mut Buffer<u32>,
    dq: &mut Buffer<f32>,
    dk: &mut Buffer<f32>,
    dv: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "fast_attention::backward16";
    check_params16(what, &p)?;
    check_len16(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len16(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "d_o", d_o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "d_o16", d_o16.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "probs (workspace)", probs.len(), p.probs_len(), "B·H·S·S")?;
    check_len(what, "ds (workspace)", ds.len(), p.probs_len(), "B·H·S·S")?;
    check_len(what, "delta (workspace)", delta.len(), p.rows(), "B·H·S")?;
    check_flag(what, flag)?;
    check_len(what, "dq", dq.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "dk", dk.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "dv", dv.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    let att = |alpha: f32| attention_pv_f16::AttParams::new(b, s, h, hkv, dh, alpha);
    let attt = |alpha: f32| attention_ptx_f16::AttParams::new(b, s, h, hkv, dh, alpha);
    attention_fast_delta(rec, o, d_o, delta, attention_fast_delta::Params::new(b, s, h, dh))?;
    attention_ptx_f16(rec, probs, d_o16, dv, attt(1.0))?;
    attention_scores_f16(rec, d_o16, v, ds, attention_scores_f16::ScoreParams::new(b, s, h, hkv, dh, 1.0))?;
    attention_ds_f16(rec, probs, delta, ds, flag, attention_ds_f16::Params::new(b, s, h))?;
    attention_pv_f16(rec, ds, k, dq, att(p.scale))?;
    attention_ptx_f16(rec, ds, q, dk, attt(p.scale))
}
