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
use crate::backward_attention::{attention_fast_delta, attention_fast_ds, attention_fast_ptx};
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
            kernel: format!("fast_attention::{what}"),
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

fn check_len(what: &str, name: &str, got: usize, needed: usize, formula: &str) -> Result<()> {
    if got < needed {
        return Err(Error::LengthMismatch {
            detail: format!(
                "fast_attention::{what}: `{name}` holds {got} floats but needs at least {formula} = {needed}"
            ),
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
    let what = "forward";
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
    let what = "backward";
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
