//! Flash attention: causal grouped-query attention fused into one kernel forward and two
//! backward (FlashAttention-2's scheme, without atomics), with no S×S buffer anywhere — memory
//! O(B·H·S). Same layouts, results and overwrite convention as the streaming kernels
//! (`attention::attention_forward`, `backward_attention::attention_backward_dq` / `_dkdv`) and
//! the fast path ([`crate::fast_attention`]): Q, O, dO, dQ `[B, S, H, Dh]`; K, V, dK, dV
//! `[B, S, Hkv, Dh]`; lse and Δ `[B, H, S]`; query head `h` reads kv head `h / (H / Hkv)`; query
//! `s` sees keys `0..=s`; head dims 1 to 256.
//!
//! [`forward`] records `attention::flash_forward`: per block of 64 queries, the key blocks up
//! to the diagonal with an online softmax in f32, writing O and the log-sum-exp. [`backward`]
//! records three kernels: Δ = rowsum(dO ⊙ O) once (`backward_attention::attention_fast_delta`),
//! then `flash_backward_dkdv` (key-major: a workgroup owns 64 keys and recomputes S and P from
//! Q, K and lse for every later query block of every query head of its group, writing dK and
//! dV) and `flash_backward_dq` (query-major: dQ). Each output element is written by one
//! invocation after a fixed-order sum: the bits repeat run to run.
//!
//! **Two forms.** The f32 form ([`forward`], [`backward`]) reads f32 tensors and runs f32 FMAs
//! everywhere (`--precision f32`, and every adapter without `SHADER_F16`): f32 accuracy is its
//! purpose and WGSL's tensor cores multiply f16, so it has no tensor-core variant. The f16 form
//! ([`forward16`], [`backward16`], mixed precision's) reads Q, K, V and dO in the f16x4 row
//! layout of [`crate::ops`] (Dh % 4 == 0) and runs its products — Q·Kᵀ, P·V forward; Q·Kᵀ,
//! dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K backward — on 16×16×16 cooperative matrices where the adapter has
//! them (f16 operands, f32 sums; P and dS rounded to f16 for their products), and as f32 FMAs
//! on the same f16 operands, rounding at the same places, where it has not (lavapipe). Scores,
//! softmax, lse, Δ and dS stay f32 in both; `backward16` takes dO in f32 and makes its f16
//! copy in the kernel that computes Δ (`attention_delta_cast16`), and raises the loss-scaling
//! overflow flag for a dO or dS beyond f16's range, as the fast path's `attention_ds_f16` does.
//!
//! **The f16 kernels on tensor cores.** Where their tensor-core form runs with subgroups of 32
//! and the head dim is at most 64 (the trainer's), [`forward16`] records `flash_forward16_tc` and
//! [`backward16`] `flash_backward_dkdv16_tc` and `flash_backward_dq16_tc` instead of the sliced
//! kernels, which re-stage every operand per product in slices of 32 dims and pass workgroup
//! barriers between every stage. The forward keeps Q in registers and O in cooperative-matrix
//! accumulators, stages K and V per step of 32 keys into alternating buffers, and rescales O
//! only when a row's maximum passes its reference by more than e⁸, so P is rounded to f16
//! relative to that reference (≤ e⁸) instead of the running maximum (see
//! `lib/flash_fwd_tc.wgsl`). In the backward each of four subgroups owns 16 of a workgroup's 64
//! rows and keeps its scores, P, dS and results to itself (through its own workgroup memory,
//! behind subgroup barriers); the workgroup shares only the walked operands, staged in steps of
//! 32 rows, one workgroup barrier a step (see `lib/flash_sg.wgsl`): same inputs, outputs,
//! rounding points and order as the sliced pair. [`forward16_form`] and [`backward16_form`] say
//! which kernels run. Where S is a multiple of 64 and the head dim 64 they are recorded with
//! `FL_EXACT` and read their rows without bounds tests (the same bits, faster on the NVIDIA
//! driver; `KERNELS_FLASH_EXACT=0` turns it off).
//!
//! **Workgroup memory.** The kernels stage 64-row blocks: the f32 form and the f16 form's
//! portable variant need up to 29 KiB (lavapipe offers 32 KiB), the tensor-core variant 37 KiB
//! (the H200 48 KiB). [`Params::flash_fits`] says whether an adapter offers what the variant it
//! would run needs (a browser's guaranteed 16 KiB does not; every call checks it and returns
//! [`Error::Shape`] rather than recording a kernel the device cannot run). On a CPU adapter
//! (lavapipe, which stops every loop of an invocation past 65535 iterations in all) the key-major
//! pass's walk is checked too: (H / Hkv)·⌈S/64⌉ blocks of about 85 iterations at Dh = 64, so
//! e.g. S up to about 45,000 without grouped heads and 3,800 with 12 query heads per kv head.
//!
//! ```no_run
//! use kernels::flash_attention::{self, Params};
//! # fn main() -> kernels::Result<()> {
//! let gpu = kernels::Gpu::new()?;
//! let p = Params::new(8, 1024, 12, 12, 64, 1.0 / 8.0);
//! let n = p.q_len();
//! let (q, k, v, d_o) = (gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?);
//! let (mut o, mut lse, mut delta) = (gpu.zeros(n)?, gpu.zeros(p.rows())?, gpu.zeros(p.rows())?);
//! let (mut dq, mut dk, mut dv) = (gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?);
//! let batch = gpu.batch();
//! flash_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, p)?;
//! flash_attention::backward(&batch, &q, &k, &v, &o, &d_o, &lse, &mut delta, &mut dq, &mut dk, &mut dv, p)?;
//! batch.submit()?;
//! # Ok(()) }
//! ```

use crate::attention::{flash_forward, flash_forward16, flash_forward16_tc};
use crate::backward_attention::{
    attention_delta_cast16, attention_fast_delta, flash_backward_dkdv, flash_backward_dkdv16, flash_backward_dkdv16_tc,
    flash_backward_dq, flash_backward_dq16, flash_backward_dq16_tc,
};
use crate::ops::F16x4;
use crate::{Buffer, Error, Gpu, KernelDef, Record, Result};

pub use crate::fast_attention::Params;
use crate::fast_attention::{check_flag, check_len, check_len16};

/// The largest head dim of the flash kernels.
pub const HEAD_DIM_MAX: u32 = 256;

/// Workgroup memory, in bytes, of the f32 kernels and the f16 kernels' portable variants (the
/// largest of them: the f16 forward).
pub const WORKGROUP_BYTES_PORTABLE: u32 = 29_696;
/// Workgroup memory, in bytes, of the f16 kernels' tensor-core variants (the forward's).
pub const WORKGROUP_BYTES_COOP: u32 = 37_888;

/// Workgroup memory, in bytes, of the tensor-core forward (`flash_forward16_tc`).
pub const WORKGROUP_BYTES_FWD_TC: u32 = 32_800;

/// Workgroup memory, in bytes, of the tensor-core backward (the larger of
/// `flash_backward_dkdv16_tc` and `flash_backward_dq16_tc`).
pub const WORKGROUP_BYTES_TC: u32 = 38_400;

/// Which kernels [`forward16`] or [`backward16`] record on an adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flash16Form {
    /// `flash_forward16`, `flash_backward_dkdv16` / `flash_backward_dq16`: operands staged in
    /// slices per product, any head dim, tensor cores or not.
    Sliced,
    /// `flash_forward16_tc`, `flash_backward_dkdv16_tc` / `flash_backward_dq16_tc`: tensor cores
    /// with subgroups of 32, head dim ≤ 64.
    TensorCores,
}

/// Whether the head-dim-≤-64 tensor-core kernels `kernels` run for `p` on `gpu` with `bytes` of
/// workgroup memory: their tensor-core form selected, every subgroup 32 wide (the forward's
/// tiles are shared among exactly eight subgroups, the backward's rows among four), the head
/// dim at most 64.
fn tensor_core_form(gpu: &Gpu, p: &Params, kernels: &[&KernelDef], bytes: u32) -> Flash16Form {
    let r = gpu.report();
    let fits = p.head_dim <= 64
        && kernels.iter().all(|k| on_tensor_cores(gpu, k))
        && r.subgroup_min_size == 32
        && r.subgroup_max_size == 32
        && r.max_workgroup_memory >= bytes;
    if fits { Flash16Form::TensorCores } else { Flash16Form::Sliced }
}

/// The kernel [`forward16`] records for `p` on `gpu`: [`Flash16Form::TensorCores`]
/// (`flash_forward16_tc`, 32,800 bytes of workgroup memory) where its tensor-core form runs and
/// the head dim is at most 64; else [`Flash16Form::Sliced`].
pub fn forward16_form(gpu: &Gpu, p: &Params) -> Flash16Form {
    tensor_core_form(gpu, p, &[&flash_forward16_tc::KERNEL], WORKGROUP_BYTES_FWD_TC)
}

/// The kernels [`backward16`] records for `p` on `gpu`: [`Flash16Form::TensorCores`]
/// (`flash_backward_dkdv16_tc` / `flash_backward_dq16_tc`, up to 38,400 bytes of workgroup
/// memory) where their tensor-core form runs and the head dim is at most 64; else
/// [`Flash16Form::Sliced`].
pub fn backward16_form(gpu: &Gpu, p: &Params) -> Flash16Form {
    tensor_core_form(gpu, p, &[&flash_backward_dkdv16_tc::KERNEL, &flash_backward_dq16_tc::KERNEL], WORKGROUP_BYTES_TC)
}

/// Whether `kernel` runs its tensor-core variant on `gpu` (cooperative matrices enabled and
/// offered; inside it, the products use them when the workgroup has 8 subgroups).
pub fn on_tensor_cores(gpu: &Gpu, kernel: &KernelDef) -> bool {
    crate::ops::on_tensor_cores(gpu, kernel)
}

/// The workgroup memory `kernel` needs on `gpu` (for the variant it would run).
fn workgroup_bytes(gpu: &Gpu, kernel: &KernelDef) -> u32 {
    if on_tensor_cores(gpu, kernel) { WORKGROUP_BYTES_COOP } else { WORKGROUP_BYTES_PORTABLE }
}

impl Params {
    /// Whether the flash kernels of one form (`f16`: [`forward16`] / [`backward16`], else
    /// [`forward`] / [`backward`]) run on `gpu`: the head dim is in range (a multiple of 4 for
    /// f16), the adapter has `SHADER_F16` for f16, and its workgroup memory holds the variant
    /// it would run.
    pub fn flash_fits(&self, gpu: &Gpu, f16: bool) -> bool {
        self.flash_check(gpu, f16).is_ok()
    }

    /// [`Params::flash_fits`] with the reason when they do not: [`Error::Shape`] naming the
    /// requirement (the head dim, `SHADER_F16`, the workgroup memory, a CPU adapter's loop cap).
    pub fn flash_check(&self, gpu: &Gpu, f16: bool) -> Result<()> {
        check_flash(gpu, if f16 { "flash_attention::forward16" } else { "flash_attention::forward" }, self, f16)
    }
}

/// The head dim, the heads and the adapter's workgroup memory against the kernels of one form.
fn check_flash(gpu: &Gpu, what: &str, p: &Params, f16: bool) -> Result<()> {
    let bad = |requirement: String, detail: String| Err(Error::Shape { kernel: what.to_string(), requirement, detail });
    let heads = format!("heads = {}, kv_heads = {}, head_dim = {}", p.heads, p.kv_heads, p.head_dim);
    if p.head_dim == 0 || p.head_dim > HEAD_DIM_MAX {
        return bad(format!("1 <= head_dim <= {HEAD_DIM_MAX}"), heads);
    }
    if f16 && !p.head_dim.is_multiple_of(4) {
        return bad("head_dim % 4 == 0 (f16 operands are read as whole vec4s)".into(), heads);
    }
    if p.kv_heads == 0 || !p.heads.is_multiple_of(p.kv_heads) {
        return bad("kv_heads >= 1 and heads % kv_heads == 0".into(), heads);
    }
    if f16 && !gpu.features().contains(crate::wgpu::Features::SHADER_F16) {
        return bad("an adapter with SHADER_F16".into(), format!("{} has none", gpu.report().name));
    }
    if gpu.report().device_type == "Cpu" {
        let walk = loop_iterations(p);
        if walk > LAVAPIPE_LOOP_BUDGET {
            return bad(
                format!("at most {LAVAPIPE_LOOP_BUDGET} loop iterations per invocation on a CPU adapter"),
                format!(
                    "the key-major pass walks about {walk} (heads / kv_heads = {} times ⌈{} / 64⌉ blocks; lavapipe stops every loop past 65535 iterations in all): use a shorter sequence or fewer query heads per kv head",
                    p.heads / p.kv_heads.max(1),
                    p.seq
                ),
            );
        }
    }
    let kernel = if f16 { &flash_forward16::KERNEL } else { &flash_forward::KERNEL };
    let need = workgroup_bytes(gpu, kernel);
    let have = gpu.report().max_workgroup_memory;
    if need > have {
        return bad(
            format!("{need} bytes of workgroup memory"),
            format!("{} offers {have} (use the streaming kernels there)", gpu.report().name),
        );
    }
    Ok(())
}

/// Below lavapipe's cap (65535 loop iterations per invocation, every loop of a shader counted
/// together; past it every loop stops: wrong results, no error), with room for the estimate.
const LAVAPIPE_LOOP_BUDGET: u64 = 60_000;

/// Loop iterations per invocation of the longest walk, `flash_backward_dkdv`'s (its portable
/// products: per block two score products of 4 iterations per 16 dims, two value products of
/// 24 per 64-wide chunk, and the block's own), for every query head of the group and every
/// query block. The forward and the query-major pass walk at most ⌈S/64⌉ blocks of fewer.
fn loop_iterations(p: &Params) -> u64 {
    let (dh, blocks) = (p.head_dim.max(1) as u64, p.seq.div_ceil(64) as u64);
    let per_block = 2 * 4 * dh.div_ceil(16) + 2 * 24 * dh.div_ceil(64) + 4;
    (p.heads / p.kv_heads.max(1)) as u64 * blocks * per_block
}

/// The head dim compiled into the pipelines where tensor cores run (their index arithmetic
/// folds; one pipeline per head dim), none on the portable path (one pipeline for all).
fn compiled_dh(gpu: &Gpu, kernel: &KernelDef, p: &Params) -> Option<u32> {
    on_tensor_cores(gpu, kernel).then_some(p.head_dim)
}

/// Whether the tensor-core kernels read their rows without bounds tests (`FL_EXACT`): every row
/// they read exists where S is a multiple of 64 and the head dim 64 (the trainer's shapes), and
/// the NVIDIA driver runs their loops faster without the tests (BENCHMARKS.md §4). Two
/// pipelines at most per kernel; the same results bit for bit. `KERNELS_FLASH_EXACT=0` turns it
/// off.
fn exact_rows(p: &Params) -> bool {
    // Read once: every recording of the tensor-core kernels asks.
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("KERNELS_FLASH_EXACT").map_or(true, |v| v != "0"));
    on && p.head_dim == 64 && p.seq.is_multiple_of(64)
}

/// The causal GQA forward, f32: O `[B, S, H, Dh]` and lse `[B, H, S]` (both overwritten, the
/// first B·S·H·Dh and B·H·S elements) from `q` `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]`. No
/// workspace. Records one dispatch; every size and the adapter's workgroup memory are checked
/// before anything is recorded.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    rec: impl Record + Copy,
    q: &Buffer<f32>,
    k: &Buffer<f32>,
    v: &Buffer<f32>,
    o: &mut Buffer<f32>,
    lse: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "flash_attention::forward";
    check_flash(rec.gpu(), what, &p, false)?;
    check_len(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "lse", lse.len(), p.rows(), "B·H·S")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let fp = flash_forward::Params::new(p.batch, p.seq, p.heads, p.kv_heads, p.head_dim, p.scale);
    let ov = flash_forward::Overrides { FL_DH: compiled_dh(rec.gpu(), &flash_forward::KERNEL, &p) };
    flash_forward(rec, q, k, v, o, lse, fp, ov)
}

/// The causal GQA backward of [`forward`], f32: dQ `[B, S, H, Dh]`, dK and dV `[B, S, Hkv, Dh]`,
/// all OVERWRITTEN (dK/dV summed over the query heads of each kv group inside the kernel, in a
/// fixed order), from the forward's inputs, its outputs `o` and `lse`, and the upstream gradient
/// `d_o` `[B, S, H, Dh]`. `delta` is scratch of at least B·H·S floats, left holding
/// Δ = rowsum(dO ⊙ O). Records three dispatches (Δ, dK/dV, dQ); every size is checked before
/// anything is recorded.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    rec: impl Record + Copy,
    q: &Buffer<f32>,
    k: &Buffer<f32>,
    v: &Buffer<f32>,
    o: &Buffer<f32>,
    d_o: &Buffer<f32>,
    lse: &Buffer<f32>,
    delta: &mut Buffer<f32>,
    dq: &mut Buffer<f32>,
    dk: &mut Buffer<f32>,
    dv: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "flash_attention::backward";
    check_flash(rec.gpu(), what, &p, false)?;
    check_len(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "d_o", d_o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "lse", lse.len(), p.rows(), "B·H·S")?;
    check_len(what, "delta (workspace)", delta.len(), p.rows(), "B·H·S")?;
    check_len(what, "dq", dq.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "dk", dk.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "dv", dv.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    attention_fast_delta(rec, o, d_o, delta, attention_fast_delta::Params::new(b, s, h, dh))?;
    let kp = flash_backward_dkdv::Params::new(b, s, h, hkv, dh, p.scale);
    let ko = flash_backward_dkdv::Overrides { FL_DH: compiled_dh(rec.gpu(), &flash_backward_dkdv::KERNEL, &p) };
    flash_backward_dkdv(rec, q, k, v, d_o, lse, delta, dk, dv, kp, ko)?;
    let qp = flash_backward_dq::Params::new(b, s, h, hkv, dh, p.scale);
    let qo = flash_backward_dq::Overrides { FL_DH: compiled_dh(rec.gpu(), &flash_backward_dq::KERNEL, &p) };
    flash_backward_dq(rec, q, k, v, d_o, lse, delta, dq, qp, qo)
}

/// [`forward`] with f16 operands (mixed precision's): O `[B, S, H, Dh]` f32, its f16 copy `o16`
/// (the f16x4 row layout of O as a `[B·S, H·Dh]` matrix: the operand of the output projection,
/// the bits `ops::cast_f16x4` would make of O) and lse `[B, H, S]` (all overwritten) from `q`
/// `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]` in the f16x4 row layout (`ops::cast_f16x4` of the
/// f32 tensors as `[B·S, H·Dh]` / `[B·S, Hkv·Dh]` matrices; Dh % 4 == 0). Q·Kᵀ and P·V on
/// tensor cores where the adapter has them, P rounded to f16 for P·V; scores, softmax and sums
/// f32. Records one dispatch; every size is checked before anything is recorded. Needs
/// `SHADER_F16`.
#[allow(clippy::too_many_arguments)]
pub fn forward16(
    rec: impl Record + Copy,
    q: &Buffer<F16x4>,
    k: &Buffer<F16x4>,
    v: &Buffer<F16x4>,
    o: &mut Buffer<f32>,
    o16: &mut Buffer<F16x4>,
    lse: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "flash_attention::forward16";
    check_flash(rec.gpu(), what, &p, true)?;
    check_len16(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len16(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "o16", o16.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "lse", lse.len(), p.rows(), "B·H·S")?;
    if p.rows() == 0 {
        return Ok(());
    }
    if forward16_form(rec.gpu(), &p) == Flash16Form::TensorCores {
        let fp = flash_forward16_tc::Params::new(p.batch, p.seq, p.heads, p.kv_heads, p.head_dim, p.scale);
        let ov = flash_forward16_tc::Overrides { FL_DH: Some(p.head_dim), FL_EXACT: Some(exact_rows(&p)) };
        return flash_forward16_tc(rec, q, k, v, o, lse, o16, fp, ov);
    }
    let fp = flash_forward16::Params::new(p.batch, p.seq, p.heads, p.kv_heads, p.head_dim, p.scale);
    let ov = flash_forward16::Overrides { FL_DH: compiled_dh(rec.gpu(), &flash_forward16::KERNEL, &p) };
    flash_forward16(rec, q, k, v, o, lse, o16, fp, ov)
}

/// [`backward`] with f16 operands: dQ `[B, S, H, Dh]`, dK and dV `[B, S, Hkv, Dh]` f32, all
/// OVERWRITTEN, from the f16 operands of [`forward16`] (`q`, `k`, `v`), its f32 outputs `o` and
/// `lse`, and the upstream gradient `d_o` (f32). `d_o16` is OVERWRITTEN with dO's f16 copy (the
/// bits `cast::cast_grad_f16x4` makes: the products' operand) and `delta` (at least B·H·S
/// floats) with Δ = rowsum(dO ⊙ O) from the f32 dO and O, both by one kernel
/// (`backward_attention::attention_delta_cast16`). `flag` (at least 1 element) is the overflow
/// check of loss scaling: `flag[0]` is set to 1 (never cleared) when a value of dO or a dS is
/// NaN, ±Inf or beyond ±65504 — where its f16 rounding would clamp it — as
/// `cast::cast_grad_f16x4` does for the gradients it casts. Records three dispatches (Δ and dO's
/// copy, dK/dV, dQ); every size is checked before anything is recorded. Needs `SHADER_F16`.
#[allow(clippy::too_many_arguments)]
pub fn backward16(
    rec: impl Record + Copy,
    q: &Buffer<F16x4>,
    k: &Buffer<F16x4>,
    v: &Buffer<F16x4>,
    o: &Buffer<f32>,
    d_o: &Buffer<f32>,
    d_o16: &mut Buffer<F16x4>,
    lse: &Buffer<f32>,
    delta: &mut Buffer<f32>,
    flag: &mut Buffer<u32>,
    dq: &mut Buffer<f32>,
    dk: &mut Buffer<f32>,
    dv: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let what = "flash_attention::backward16";
    check_flash(rec.gpu(), what, &p, true)?;
    check_len16(what, "q", q.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "k", k.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len16(what, "v", v.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "o", o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "d_o", d_o.len(), p.q_len(), "B·S·H·Dh")?;
    check_len16(what, "d_o16", d_o16.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "lse", lse.len(), p.rows(), "B·H·S")?;
    check_len(what, "delta (workspace)", delta.len(), p.rows(), "B·H·S")?;
    check_flag(what, flag)?;
    check_len(what, "dq", dq.len(), p.q_len(), "B·S·H·Dh")?;
    check_len(what, "dk", dk.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    check_len(what, "dv", dv.len(), p.kv_len(), "B·S·Hkv·Dh")?;
    if p.rows() == 0 {
        return Ok(());
    }
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    let dp = attention_delta_cast16::Params::new(b, s, h, dh);
    attention_delta_cast16(rec, o, d_o, d_o16, delta, flag, dp)?;
    let d_o16 = &*d_o16;
    if backward16_form(rec.gpu(), &p) == Flash16Form::TensorCores {
        let kp = flash_backward_dkdv16_tc::Params::new(b, s, h, hkv, dh, p.scale);
        let ko = flash_backward_dkdv16_tc::Overrides { FL_DH: Some(dh), FL_EXACT: Some(exact_rows(&p)) };
        flash_backward_dkdv16_tc(rec, q, k, v, d_o16, lse, delta, dk, dv, flag, kp, ko)?;
        let qp = flash_backward_dq16_tc::Params::new(b, s, h, hkv, dh, p.scale);
        let qo = flash_backward_dq16_tc::Overrides { FL_DH: Some(dh), FL_EXACT: Some(exact_rows(&p)) };
        return flash_backward_dq16_tc(rec, q, k, v, d_o16, lse, delta, dq, qp, qo);
    }
    backward16_sliced(rec, q, k, v, d_o16, lse, delta, flag, dq, dk, dv, p)
}

/// The sliced pair of [`backward16`] after Δ (any adapter, any head dim).
#[allow(clippy::too_many_arguments)]
fn backward16_sliced(
    rec: impl Record + Copy,
    q: &Buffer<F16x4>,
    k: &Buffer<F16x4>,
    v: &Buffer<F16x4>,
    d_o16: &Buffer<F16x4>,
    lse: &Buffer<f32>,
    delta: &Buffer<f32>,
    flag: &mut Buffer<u32>,
    dq: &mut Buffer<f32>,
    dk: &mut Buffer<f32>,
    dv: &mut Buffer<f32>,
    p: Params,
) -> Result<()> {
    let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
    let kp = flash_backward_dkdv16::Params::new(b, s, h, hkv, dh, p.scale);
    let ko = flash_backward_dkdv16::Overrides { FL_DH: compiled_dh(rec.gpu(), &flash_backward_dkdv16::KERNEL, &p) };
    flash_backward_dkdv16(rec, q, k, v, d_o16, lse, delta, dk, dv, flag, kp, ko)?;
    let qp = flash_backward_dq16::Params::new(b, s, h, hkv, dh, p.scale);
    let qo = flash_backward_dq16::Overrides { FL_DH: compiled_dh(rec.gpu(), &flash_backward_dq16::KERNEL, &p) };
    flash_backward_dq16(rec, q, k, v, d_o16, lse, delta, dq, qp, qo)
}
