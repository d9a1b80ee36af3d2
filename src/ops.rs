//! Host-side drivers for kernels that take more than one dispatch.

use crate::infrastructure::{fill_const, reduce_max, reduce_sum};
use crate::{Buffer, Error, Gpu, KernelDef, Record, Result};

/// Elements one reduction workgroup folds into one partial (`REDUCE_CHUNK` in
/// `shaders/00_infrastructure.wgsl`).
pub const REDUCE_CHUNK: usize = crate::infrastructure::REDUCE_CHUNK as usize;

/// The number of dispatches [`reduce_sum_into`] and [`reduce_max_into`] record for `n` values:
/// 1 for `n ≤ REDUCE_CHUNK` (`n = 0` included), else one more per factor of [`REDUCE_CHUNK`]
/// (3 for 2²⁸ values). For benchmarks that time one reduction as a group of dispatches.
pub fn reduce_passes(n: usize) -> usize {
    let (mut len, mut passes) = (n, 1);
    while len > REDUCE_CHUNK {
        len = len.div_ceil(REDUCE_CHUNK);
        passes += 1;
    }
    passes
}

/// Scratch space for [`reduce_sum`](fn@reduce_sum_into) and friends over up to `capacity` values.
#[derive(Debug)]
pub struct ReduceScratch {
    a: Buffer<f32>,
    b: Buffer<f32>,
    capacity: usize,
}

impl ReduceScratch {
    /// Scratch for arrays of up to `capacity` values.
    pub fn new(gpu: &Gpu, capacity: usize) -> Result<Self> {
        let first = capacity.div_ceil(REDUCE_CHUNK).max(1);
        let second = first.div_ceil(REDUCE_CHUNK).max(1);
        Ok(ReduceScratch { a: gpu.zeros(first)?, b: gpu.zeros(second)?, capacity })
    }
}

#[derive(Clone, Copy)]
enum Op {
    Sum,
    Max,
}

fn pass(rec: impl Record, op: Op, x: &Buffer<f32>, out: &mut Buffer<f32>, n: u32) -> Result<()> {
    match op {
        Op::Sum => reduce_sum(rec, x, out, n),
        Op::Max => reduce_max(rec, x, out, n),
    }
}

fn reduce(
    rec: impl Record + Copy,
    op: Op,
    x: &Buffer<f32>,
    n: usize,
    out: &mut Buffer<f32>,
    s: &mut ReduceScratch,
) -> Result<()> {
    if n > s.capacity || n > x.len() {
        return Err(Error::LengthMismatch {
            detail: format!("reducing {n} values of a buffer of {} with scratch for {}", x.len(), s.capacity),
        });
    }
    let n32 = u32::try_from(n)
        .map_err(|_| Error::LengthMismatch { detail: format!("{n} values: reductions take at most u32::MAX") })?;
    if n == 0 {
        let value = match op {
            Op::Sum => 0.0,
            Op::Max => f32::NEG_INFINITY,
        };
        return fill_const(rec, out, fill_const::Params::new(1, value));
    }
    if n <= REDUCE_CHUNK {
        return pass(rec, op, x, out, n32);
    }
    // x → a, then a ↔ b until one chunk is left, then into `out`.
    pass(rec, op, x, &mut s.a, n32)?;
    let mut len = n.div_ceil(REDUCE_CHUNK);
    let mut in_a = true;
    while len > REDUCE_CHUNK {
        let next = len.div_ceil(REDUCE_CHUNK);
        if in_a {
            pass(rec, op, &s.a, &mut s.b, len as u32)?;
        } else {
            pass(rec, op, &s.b, &mut s.a, len as u32)?;
        }
        in_a = !in_a;
        len = next;
    }
    let last = if in_a { &s.a } else { &s.b };
    pass(rec, op, last, out, len as u32)
}

/// Records the sum of `x[0..n]` into `out[0]`: ⌈log₄₀₉₆ n⌉ passes (at least one) of
/// `infrastructure::reduce_sum`, each folding [`REDUCE_CHUNK`] = 4096 values into one.
/// The order of additions depends only on `n` and the subgroup size, so results repeat
/// bit for bit. `n = 0` gives 0.
pub fn reduce_sum_into(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    n: usize,
    out: &mut Buffer<f32>,
    scratch: &mut ReduceScratch,
) -> Result<()> {
    reduce(rec, Op::Sum, x, n, out, scratch)
}

/// Records the maximum of `x[0..n]` into `out[0]` (`n = 0` gives −∞; NaNs are not propagated).
pub fn reduce_max_into(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    n: usize,
    out: &mut Buffer<f32>,
    scratch: &mut ReduceScratch,
) -> Result<()> {
    reduce(rec, Op::Max, x, n, out, scratch)
}

/// The sum of a whole buffer, read back (allocates scratch; for repeated use, keep a
/// [`ReduceScratch`] and call [`reduce_sum_into`]). Not on the web, where nothing may block:
/// there, record [`reduce_sum_into`] and read the result with `Buffer::read_async`.
#[cfg(not(target_arch = "wasm32"))]
pub fn sum(gpu: &Gpu, x: &Buffer<f32>) -> Result<f32> {
    let mut scratch = ReduceScratch::new(gpu, x.len())?;
    let mut out = gpu.zeros::<f32>(1)?;
    let batch = gpu.batch();
    reduce_sum_into(&batch, x, x.len(), &mut out, &mut scratch)?;
    batch.submit()?;
    Ok(out.read(gpu)?[0])
}

/// The maximum of a whole buffer, read back (not on the web; see [`sum`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn max(gpu: &Gpu, x: &Buffer<f32>) -> Result<f32> {
    let mut scratch = ReduceScratch::new(gpu, x.len())?;
    let mut out = gpu.zeros::<f32>(1)?;
    let batch = gpu.batch();
    reduce_max_into(&batch, x, x.len(), &mut out, &mut scratch)?;
    batch.submit()?;
    Ok(out.read(gpu)?[0])
}

/// How many parts [`matmul_at_acc_split`] splits `Y += Xᵀ·B` (X [m, k], B [m, n]) into: enough
/// to give the GPU about 768 workgroups when the k×n output has fewer 128×64 tiles than that,
/// each part still summing at least 512 rows; at most 16. (Measured on an H200, 132
/// multiprocessors: for the trainer's 768×768, 2048×768 and 256×768 gradients over 8192
/// tokens, 8–16 parts, 4 parts and 16 parts were the fastest; BENCHMARKS.md.)
pub fn weight_grad_parts(m: usize, n: usize, k: usize) -> usize {
    let tiles = n.div_ceil(64) * k.div_ceil(128);
    768usize.div_ceil(tiles.max(1)).min(m / 512).clamp(1, 16)
}

/// Scratch floats [`matmul_at_acc_split`] needs for these shapes.
pub fn weight_grad_scratch_len(m: usize, n: usize, k: usize) -> usize {
    let parts = weight_grad_parts(m, n, k);
    if parts > 1 { parts * n * k } else { 0 }
}

/// `Y += Xᵀ·B` (X [m, k], B [m, n], Y [k, n]) for weight gradients, split along the
/// contraction when the output is small ([`weight_grad_parts`]): `linear::matmul_at_split`
/// writes the parts into `scratch` (at least [`weight_grad_scratch_len`] floats) and
/// `linear::matmul_parts_add` adds them to Y in a fixed order — deterministic, but not the
/// same rounding as one unsplit `matmul_at_acc`, which this records when one part is enough.
#[allow(clippy::too_many_arguments)]
pub fn matmul_at_acc_split(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    b: &Buffer<f32>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    matmul_at_acc_parts(rec, x, b, y, scratch, m, n, k, weight_grad_parts(m, n, k))
}

/// [`matmul_at_acc_split`] with an explicit number of parts (at least 1; `scratch` holds at
/// least parts·k·n floats when parts > 1): for measuring which count is fastest.
#[allow(clippy::too_many_arguments)]
pub fn matmul_at_acc_parts(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    b: &Buffer<f32>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
    parts: usize,
) -> Result<()> {
    let to_u32 = |v: usize, what: &str| {
        u32::try_from(v).map_err(|_| Error::LengthMismatch { detail: format!("{what} = {v} is over u32::MAX") })
    };
    let (m32, n32, k32) = (to_u32(m, "m")?, to_u32(n, "n")?, to_u32(k, "k")?);
    if parts <= 1 {
        return crate::linear::matmul_at_acc(rec, x, b, y, crate::linear::matmul_at_acc::Params::new(m32, n32, k32));
    }
    let chunk = to_u32(m.div_ceil(parts), "chunk")?;
    let sp = crate::linear::matmul_at_split::SplitParams::new(m32, n32, k32, to_u32(parts, "parts")?, chunk);
    crate::linear::matmul_at_split(rec, x, b, scratch, sp)?;
    let ap = crate::linear::matmul_parts_add::AddParams::new(to_u32(n * k, "k·n")?, to_u32(parts, "parts")?);
    crate::linear::matmul_parts_add(rec, scratch, y, ap)
}

// ---- Tensor-core products (`linear16`, shaders/11_linear16.wgsl) ----

/// The element of the f16 operands of the tensor-core products: four f16 values (`vec4<f16>`
/// in WGSL). A matrix `[rows, cols]` in the *f16x4 row layout* is row-major with every row
/// padded with zeros to a multiple of 4 elements, [`f16x4_len`] elements; for `cols % 4 == 0`
/// that is plain row-major f16. [`cast_f16x4`] writes it on the GPU, [`to_f16x4`] on the host.
pub type F16x4 = [crate::f16; 4];

/// Elements ([`F16x4`]) of a `[rows, cols]` matrix in the f16x4 row layout: rows·⌈cols/4⌉.
pub fn f16x4_len(rows: usize, cols: usize) -> usize {
    rows * cols.div_ceil(4)
}

/// A row-major f32 matrix `[rows, cols]` in the f16x4 row layout, as `fused::cast_f16x4`
/// writes it: round to nearest f16, values beyond ±65504 clamped, NaN kept, rows zero-padded.
/// For uploading f16 operands.
pub fn to_f16x4(values: &[f32], rows: usize, cols: usize) -> Vec<F16x4> {
    assert!(values.len() >= rows * cols, "to_f16x4: {} values for a {rows}×{cols} matrix", values.len());
    let cq = cols.div_ceil(4);
    let half = |v: f32| crate::f16::from_f32(if v.is_nan() { v } else { v.clamp(-65504.0, 65504.0) });
    let mut out = vec![[crate::f16::ZERO; 4]; rows * cq];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cq + c / 4][c % 4] = half(values[r * cols + c]);
        }
    }
    out
}

fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LengthMismatch { detail: format!("{what} = {v} is over u32::MAX") })
}

fn dims(m: usize, n: usize, k: usize) -> Result<(u32, u32, u32)> {
    Ok((to_u32(m, "m")?, to_u32(n, "n")?, to_u32(k, "k")?))
}

/// Records a cast of `src` `[rows, cols]` f32 into `dst` in the f16x4 row layout (at least
/// [`f16x4_len`]`(rows, cols)` elements): `fused::cast_f16x4`, bit for bit what [`to_f16x4`]
/// writes on the host. Needs SHADER_F16.
pub fn cast_f16x4(
    rec: impl Record,
    src: &Buffer<f32>,
    dst: &mut Buffer<F16x4>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let p = crate::fused::cast_f16x4::RowsParams::new(to_u32(rows, "rows")?, to_u32(cols, "cols")?);
    crate::fused::cast_f16x4(rec, src, dst, p)
}

/// Whether `kernel` runs its tensor-core (cooperative-matrix) variant on `gpu`: the adapter
/// offers the configuration and tensor cores are not turned off (`KERNELS_COOPERATIVE_MATRIX=0`,
/// `GpuOptions::cooperative_matrix(false)`).
pub fn on_tensor_cores(gpu: &Gpu, kernel: &KernelDef) -> bool {
    gpu.variant_for(kernel).is_ok_and(|v| !v.coop.is_empty())
}

/// The shape compiled into a product's pipeline (its `M_C`, `N_C`, `K_C` overrides): the
/// dimensions where the kernel runs on tensor cores (one pipeline per shape, cached by the
/// runtime; measured +29–48% on an H200), none on the portable path (one pipeline for all).
fn compiled_shape(gpu: &Gpu, kernel: &KernelDef, m: u32, n: u32, k: u32) -> [Option<u32>; 3] {
    if on_tensor_cores(gpu, kernel) { [m, n, k].map(|d| (d != 0).then_some(d)) } else { [None; 3] }
}

/// `Y = X·Wᵀ` with f16 operands on tensor cores (f32 sums, f32 Y): X `[m, k]`, W `[n, k]` (PyTorch's
/// `[out, in]`) in the f16x4 row layout, Y `[m, n]` f32, overwritten. The shape is compiled in
/// where tensor cores run; elsewhere the portable variant runs (f32 FMAs, same operands).
pub fn matmul_t_f16(
    rec: impl Record + Copy,
    x: &Buffer<F16x4>,
    w: &Buffer<F16x4>,
    y: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    use crate::linear16::matmul_t16 as kern;
    let (m32, n32, k32) = dims(m, n, k)?;
    let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
    let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc };
    crate::linear16::matmul_t16(rec, x, w, y, kern::Params::new(m32, n32, k32), o)
}

/// `Y += X·Wᵀ` with f16 operands (as [`matmul_t_f16`]; the product summed in f32, then added).
pub fn matmul_t_f16_acc(
    rec: impl Record + Copy,
    x: &Buffer<F16x4>,
    w: &Buffer<F16x4>,
    y: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    use crate::linear16::matmul_t16_acc as kern;
    let (m32, n32, k32) = dims(m, n, k)?;
    let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
    let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc };
    crate::linear16::matmul_t16_acc(rec, x, w, y, kern::Params::new(m32, n32, k32), o)
}

/// `Y = X·W` (input gradients dX = dY·W, W `[out, in]` = `[k, n]`), or `Y = X·W + R` with
/// `residual` (a different buffer from `y`), with f16 operands: X `[m, k]`, W `[k, n]` in the f16x4
/// row layout, R and Y `[m, n]` f32; Y overwritten.
#[allow(clippy::too_many_arguments)]
pub fn matmul_f16(
    rec: impl Record + Copy,
    x: &Buffer<F16x4>,
    w: &Buffer<F16x4>,
    residual: Option<&Buffer<f32>>,
    y: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    use crate::linear16::{matmul16, matmul16_residual};
    let (m32, n32, k32) = dims(m, n, k)?;
    let p = matmul16::Params::new(m32, n32, k32);
    match residual {
        None => {
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &matmul16::KERNEL, m32, n32, k32);
            matmul16(rec, x, w, y, p, matmul16::Overrides { M_C: mc, N_C: nc, K_C: kc })
        }
        Some(r) => {
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &matmul16_residual::KERNEL, m32, n32, k32);
            matmul16_residual(rec, x, w, r, y, p, matmul16_residual::Overrides { M_C: mc, N_C: nc, K_C: kc })
        }
    }
}

/// Workgroups the split weight-gradient products aim at: two per multiprocessor of an H200 (132).
/// A first guess, to be replaced by the block-shape sweep's measurements.
pub const TENSOR_WEIGHT_GRAD_WORKGROUPS: usize = 264;

/// Parts of a split `Xᵀ·B` (X `[m, k]`, B `[m, n]`) over output blocks of `bm`×`bn`: enough for
/// about [`TENSOR_WEIGHT_GRAD_WORKGROUPS`] workgroups, each part at least 256 rows, 1 to 16.
fn tensor_parts(m: usize, n: usize, k: usize, bm: usize, bn: usize) -> usize {
    let blocks = n.div_ceil(bn) * k.div_ceil(bm);
    TENSOR_WEIGHT_GRAD_WORKGROUPS.div_ceil(blocks.max(1)).min(m / 256).clamp(1, 16)
}

/// Parts [`weight_grad_f16`] splits a gradient of these shapes into.
pub fn weight_grad_f16_parts(m: usize, n: usize, k: usize) -> usize {
    let (bm, bn) = (crate::linear16::GEMM_BM as usize, crate::linear16::GEMM_BN as usize);
    tensor_parts(m, n, k, bm, bn)
}

/// Parts [`weight_grad_f16_from_f32`] splits a gradient of these shapes into (its kernel takes
/// 128×128 blocks, so that its portable form fits a browser).
pub fn weight_grad_f16_from_f32_parts(m: usize, n: usize, k: usize) -> usize {
    let (bm, bn) = (crate::linear16::PREC_BM as usize, crate::linear16::PREC_BN as usize);
    tensor_parts(m, n, k, bm, bn)
}

/// Scratch floats [`weight_grad_f16`] and [`weight_grad_f16_from_f32`] need: parts·k·n (the
/// larger part count of the two).
pub fn weight_grad_f16_scratch_len(m: usize, n: usize, k: usize) -> usize {
    weight_grad_f16_parts(m, n, k).max(weight_grad_f16_from_f32_parts(m, n, k)) * n * k
}

/// (parts, rows per part) of a split contraction over m rows: parts of whole 32-row steps.
fn split_chunk(m: usize, parts: usize) -> (usize, usize) {
    let chunk = m.div_ceil(parts).next_multiple_of(32).max(1);
    (m.div_ceil(chunk).max(1), chunk)
}

enum SplitInputs<'a> {
    F16(&'a Buffer<F16x4>, &'a Buffer<F16x4>),
    F32(&'a Buffer<f32>, &'a Buffer<f32>),
}

#[allow(clippy::too_many_arguments)]
fn weight_grad_split16(
    rec: impl Record + Copy,
    inputs: SplitInputs<'_>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    use crate::linear16::{matmul_at16_split, matmul_at16_split_f32};
    let (m32, n32, k32) = dims(m, n, k)?;
    let parts = match inputs {
        SplitInputs::F16(..) => weight_grad_f16_parts(m, n, k),
        SplitInputs::F32(..) => weight_grad_f16_from_f32_parts(m, n, k),
    };
    let (parts, chunk) = split_chunk(m, parts);
    let sp = matmul_at16_split::SplitParams::new(m32, n32, k32, to_u32(parts, "parts")?, to_u32(chunk, "chunk")?);
    match inputs {
        SplitInputs::F16(x, b) => {
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &matmul_at16_split::KERNEL, m32, n32, k32);
            matmul_at16_split(rec, x, b, scratch, sp, matmul_at16_split::Overrides { M_C: mc, N_C: nc, K_C: kc })?
        }
        SplitInputs::F32(x, b) => {
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &matmul_at16_split_f32::KERNEL, m32, n32, k32);
            let o = matmul_at16_split_f32::Overrides { M_C: mc, N_C: nc, K_C: kc };
            matmul_at16_split_f32(rec, x, b, scratch, sp, o)?
        }
    }
    let ap = crate::linear::matmul_parts_add::AddParams::new(to_u32(n * k, "k·n")?, to_u32(parts, "parts")?);
    crate::linear::matmul_parts_add(rec, scratch, y, ap)
}

/// `Y += Xᵀ·B` (weight gradients dW += dYᵀ·X: pass dY as `x`) with f16 operands on tensor cores,
/// split along the contraction ([`weight_grad_f16_parts`]): `linear16::matmul_at16_split` writes
/// the parts into `scratch` (at least [`weight_grad_f16_scratch_len`] floats), then
/// `linear::matmul_parts_add` adds them to Y in a fixed order (deterministic). X `[m, k]`, B
/// `[m, n]` in the f16x4 row layout, Y `[k, n]` f32.
#[allow(clippy::too_many_arguments)]
pub fn weight_grad_f16(
    rec: impl Record + Copy,
    x: &Buffer<F16x4>,
    b: &Buffer<F16x4>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    weight_grad_split16(rec, SplitInputs::F16(x, b), y, scratch, m, n, k)
}

/// [`weight_grad_f16`] from f32 operands, rounded to f16 as they are staged (the fused cast:
/// no separate cast pass): X `[m, k]`, B `[m, n]` f32 row-major.
#[allow(clippy::too_many_arguments)]
pub fn weight_grad_f16_from_f32(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    b: &Buffer<f32>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    weight_grad_split16(rec, SplitInputs::F32(x, b), y, scratch, m, n, k)
}

/// The accuracy a product of f32 matrices must meet, for [`matmul_t_precise`] and friends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 accuracy over the whole f32 range: error at most about 1e-6 of Σ|a||b| per output
    /// (the f32 SGEMM's level; the split arithmetic measured 1e-7 to 7.5e-7 in tests/precise.rs
    /// for operands of any overall magnitude from 1e-30 to 1e+30 and magnitudes mixed over 10⁸,
    /// the sweep's kernel of this design 1.9e-7 to 4.9e-7 on an H200). On tensor cores each
    /// operand is scaled by a power of two that lifts its largest magnitude to the top of f16's
    /// range, then split into hi + lo f16 (`precise`, shaders/16_precise.wgsl); the bound holds
    /// for every element within ~2²⁸ of its tensor's largest magnitude, and smaller ones keep
    /// an absolute error of ~2⁻⁵⁰ of that largest magnitude. ±Inf operands are not supported
    /// there (clamped); NaN propagates.
    F32,
    /// f16 operands: the inputs may be rounded to f16 (error at most about 1e-3 of Σ|a||b|, from
    /// the rounding; typically 1e-5 to 5e-5), sums in f32 — mixed-precision training's products.
    F16,
}

/// Which product [`matmul_t_precise`] and friends run for a [`Precision`] on an adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProductPath {
    /// Tensor cores, each f32 operand scaled by a power of two and split into hi + lo f16 by a
    /// separate pass, three products (`precise::*_pres`): f32 accuracy over the f32 range
    /// ([`Precision::F32`]), measured faster than cuBLAS SGEMM on an H200.
    TensorCoresSplit,
    /// Tensor cores, one product of the operands rounded to f16 (`linear16::*_precise` with
    /// `SPLIT = false`).
    TensorCoresF16,
    /// The f32 SGEMM of `linear` (no tensor cores): meets either precision.
    Sgemm,
}

/// The fastest product meeting `precision` on `gpu`: tensor cores where the precise kernels run
/// on them, else the f32 SGEMM.
pub fn product_path(gpu: &Gpu, precision: Precision) -> ProductPath {
    match precision {
        Precision::F32 if on_tensor_cores(gpu, &crate::precise::matmul_t_pres::KERNEL) => ProductPath::TensorCoresSplit,
        Precision::F16 if on_tensor_cores(gpu, &crate::linear16::matmul_t_precise::KERNEL) => {
            ProductPath::TensorCoresF16
        }
        _ => ProductPath::Sgemm,
    }
}

/// The scratch of the f32-accurate products on tensor cores ([`ProductPath::TensorCoresSplit`]):
/// the scaled hi and lo halves of both operands (f16x4 row layout, [`PreciseWorkspace::capacity`]
/// elements each) and the two operands' scale bits. One workspace serves any number of products
/// recorded in order (each product splits its operands into it first). Unused on the other paths:
/// there, [`PreciseWorkspace::new`] with capacity 0 is enough.
#[derive(Debug)]
pub struct PreciseWorkspace {
    a_hi: Buffer<F16x4>,
    a_lo: Buffer<F16x4>,
    b_hi: Buffer<F16x4>,
    b_lo: Buffer<F16x4>,
    amax: Buffer<u32>,
    capacity: usize,
}

impl PreciseWorkspace {
    /// A workspace for operands of up to `capacity` [`F16x4`] elements each
    /// ([`f16x4_len`]`(rows, cols)`; [`precise_workspace_len`] for one product's shapes).
    pub fn new(gpu: &Gpu, capacity: usize) -> Result<Self> {
        let n = capacity.max(1);
        Ok(PreciseWorkspace {
            a_hi: gpu.zeros(n)?,
            a_lo: gpu.zeros(n)?,
            b_hi: gpu.zeros(n)?,
            b_lo: gpu.zeros(n)?,
            amax: gpu.zeros(2)?,
            capacity,
        })
    }

    /// A workspace for the products of `gpu` at `precision`: [`precise_workspace_len`]`(m, n, k)`
    /// elements where they run on tensor cores split ([`ProductPath::TensorCoresSplit`]), else
    /// none.
    pub fn for_product(gpu: &Gpu, precision: Precision, m: usize, n: usize, k: usize) -> Result<Self> {
        let len = match product_path(gpu, precision) {
            ProductPath::TensorCoresSplit => precise_workspace_len(m, n, k),
            _ => 0,
        };
        PreciseWorkspace::new(gpu, len)
    }

    /// Elements ([`F16x4`]) per operand half.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records the scaled split of A `[ar, ac]` and B `[br, bc]` (f32 row-major) into the
    /// workspace: `precise_clear`, `precise_absmax` and `precise_split` for each.
    fn split(
        &mut self,
        rec: impl Record + Copy,
        a: &Buffer<f32>,
        (ar, ac): (usize, usize),
        b: &Buffer<f32>,
        (br, bc): (usize, usize),
    ) -> Result<()> {
        use crate::precise::{precise_absmax, precise_clear, precise_split};
        let need = f16x4_len(ar, ac).max(f16x4_len(br, bc));
        if need > self.capacity {
            return Err(Error::LengthMismatch {
                detail: format!(
                    "a precise product of a [{ar}, {ac}] and a [{br}, {bc}] operand needs a PreciseWorkspace of \
                     {need} elements; this one holds {} (size it with ops::precise_workspace_len)",
                    self.capacity
                ),
            });
        }
        precise_clear(rec, &mut self.amax, 2)?;
        for (x, (r, c), slot) in [(a, (ar, ac), 0u32), (b, (br, bc), 1u32)] {
            let len = to_u32(r * c, "operand elements")?;
            precise_absmax(rec, x, &mut self.amax, crate::precise::precise_absmax::AbsParams::new(len, slot))?;
        }
        let sa = crate::precise::HalvesParams::new(to_u32(ar, "rows")?, to_u32(ac, "cols")?, 0);
        precise_split(rec, a, &self.amax, &mut self.a_hi, &mut self.a_lo, sa)?;
        let sb = crate::precise::HalvesParams::new(to_u32(br, "rows")?, to_u32(bc, "cols")?, 1);
        precise_split(rec, b, &self.amax, &mut self.b_hi, &mut self.b_lo, sb)
    }
}

/// [`F16x4`] elements per operand half a [`PreciseWorkspace`] needs for any of the three precise
/// products of these shapes (`Y [m, n] = X [m, k]·W`, either orientation of W, and the weight
/// gradient `[k, n] = Xᵀ·B` over m rows).
pub fn precise_workspace_len(m: usize, n: usize, k: usize) -> usize {
    [f16x4_len(m, k), f16x4_len(n, k), f16x4_len(k, n), f16x4_len(m, n)].into_iter().max().unwrap_or(0)
}

/// `Y = X·Wᵀ` of f32 matrices at `precision`, by the fastest product that meets it
/// ([`product_path`]): X `[m, k]`, W `[n, k]`, Y `[m, n]` f32, overwritten. On tensor cores at
/// [`Precision::F32`]: X and W scaled and split into `ws` (at least
/// [`precise_workspace_len`]`(m, n, k)` elements), then `precise::matmul_t_pres` — 6 dispatches.
#[allow(clippy::too_many_arguments)]
pub fn matmul_t_precise(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    w: &Buffer<f32>,
    y: &mut Buffer<f32>,
    ws: &mut PreciseWorkspace,
    m: usize,
    n: usize,
    k: usize,
    precision: Precision,
) -> Result<()> {
    let (m32, n32, k32) = dims(m, n, k)?;
    match product_path(rec.gpu(), precision) {
        ProductPath::Sgemm => {
            crate::linear::matmul_t(rec, x, w, y, crate::linear::matmul_t::Params::new(m32, n32, k32))
        }
        ProductPath::TensorCoresF16 => {
            use crate::linear16::matmul_t_precise as kern;
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
            let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc, SPLIT: Some(false) };
            crate::linear16::matmul_t_precise(rec, x, w, y, kern::Params::new(m32, n32, k32), o)
        }
        ProductPath::TensorCoresSplit => matmul_t_split(rec, x, w, y, ws, m, n, k, false),
    }
}

/// The scaled split product `Y = X·Wᵀ` ([`Precision::F32`] on tensor cores) whatever the adapter:
/// X `[m, k]` and W `[n, k]` scaled and split into `ws` (at least
/// [`precise_workspace_len`]`(m, n, k)` elements), then `precise::matmul_t_pres` (its portable
/// variant, f32 FMAs on the same halves, without tensor cores: for tests and comparisons). Y
/// `[m, n]` overwritten, or with `acc` accumulated into (`Y += X·Wᵀ`); 6 dispatches.
#[allow(clippy::too_many_arguments)]
pub fn matmul_t_split(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    w: &Buffer<f32>,
    y: &mut Buffer<f32>,
    ws: &mut PreciseWorkspace,
    m: usize,
    n: usize,
    k: usize,
    acc: bool,
) -> Result<()> {
    use crate::precise::matmul_t_pres as kern;
    let (m32, n32, k32) = dims(m, n, k)?;
    ws.split(rec, x, (m, k), w, (n, k))?;
    let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
    let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc, ACC: Some(acc) };
    let p = kern::Params::new(m32, n32, k32);
    crate::precise::matmul_t_pres(rec, &ws.a_hi, &ws.a_lo, &ws.b_hi, &ws.b_lo, &ws.amax, y, p, o)
}

/// `Y = X·W` of f32 matrices at `precision` (as [`matmul_t_precise`]): X `[m, k]`, W `[k, n]`,
/// Y `[m, n]` f32, overwritten; on tensor cores at [`Precision::F32`] `precise::matmul_pres`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_precise(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    w: &Buffer<f32>,
    y: &mut Buffer<f32>,
    ws: &mut PreciseWorkspace,
    m: usize,
    n: usize,
    k: usize,
    precision: Precision,
) -> Result<()> {
    let (m32, n32, k32) = dims(m, n, k)?;
    match product_path(rec.gpu(), precision) {
        ProductPath::Sgemm => crate::linear::matmul(rec, x, w, y, crate::linear::matmul::Params::new(m32, n32, k32)),
        ProductPath::TensorCoresF16 => {
            use crate::linear16::matmul_precise as kern;
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
            let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc, SPLIT: Some(false) };
            crate::linear16::matmul_precise(rec, x, w, y, kern::Params::new(m32, n32, k32), o)
        }
        ProductPath::TensorCoresSplit => matmul_split(rec, x, w, y, ws, m, n, k, false),
    }
}

/// The scaled split product `Y = X·W` (with `acc`: `Y += X·W`) whatever the adapter (as
/// [`matmul_t_split`]): X `[m, k]`, W `[k, n]`, `precise::matmul_pres`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_split(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    w: &Buffer<f32>,
    y: &mut Buffer<f32>,
    ws: &mut PreciseWorkspace,
    m: usize,
    n: usize,
    k: usize,
    acc: bool,
) -> Result<()> {
    use crate::precise::matmul_pres as kern;
    let (m32, n32, k32) = dims(m, n, k)?;
    ws.split(rec, x, (m, k), w, (k, n))?;
    let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
    let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc, ACC: Some(acc) };
    let p = kern::Params::new(m32, n32, k32);
    crate::precise::matmul_pres(rec, &ws.a_hi, &ws.a_lo, &ws.b_hi, &ws.b_lo, &ws.amax, y, p, o)
}

/// Parts the split-K products split a gradient `[k, n]` over m rows into on tensor cores (block
/// `bm`×`bn`), after rounding the rows per part to whole 32-row steps.
fn parts_for(m: usize, n: usize, k: usize, bm: u32, bn: u32) -> (usize, usize) {
    split_chunk(m, tensor_parts(m, n, k, bm as usize, bn as usize))
}

/// Parts of the contraction [`weight_grad_split`] uses for a gradient `[k, n]` over m rows:
/// about 576 workgroups of 128×128, at most 8 parts, each at least 256 rows (the coop sweep on an
/// H200, BENCHMARKS.md run 10: 768×768 over 8192 rows fastest with 8 of 1/2/4/8 parts, 768×3072
/// with 4), after rounding the rows per part to whole 32-row steps: (parts, rows per part).
pub fn weight_grad_split_parts(m: usize, n: usize, k: usize) -> (usize, usize) {
    let (bm, bn) = (crate::precise::PB_BM as usize, crate::precise::PB_BN as usize);
    let blocks = n.div_ceil(bn) * k.div_ceil(bm);
    split_chunk(m, 576usize.div_ceil(blocks.max(1)).min(8).min(m / 256).max(1))
}

/// Scratch floats [`weight_grad_precise`] needs for these shapes on `gpu` (and
/// [`weight_grad_split`], with [`Precision::F32`] on an adapter with tensor cores).
pub fn weight_grad_precise_scratch_len(gpu: &Gpu, precision: Precision, m: usize, n: usize, k: usize) -> usize {
    match product_path(gpu, precision) {
        ProductPath::Sgemm => weight_grad_scratch_len(m, n, k),
        ProductPath::TensorCoresF16 => parts_for(m, n, k, crate::linear16::PREC_BM, crate::linear16::PREC_BN).0 * n * k,
        ProductPath::TensorCoresSplit => weight_grad_split_scratch_len(m, n, k),
    }
}

/// Scratch floats [`weight_grad_split`] needs for these shapes.
pub fn weight_grad_split_scratch_len(m: usize, n: usize, k: usize) -> usize {
    weight_grad_split_parts(m, n, k).0 * n * k
}

/// `Y += Xᵀ·B` of f32 matrices at `precision` (weight gradients), split along the contraction
/// and summed in a fixed order (deterministic): on tensor cores at [`Precision::F32`]
/// [`weight_grad_split`]; at [`Precision::F16`] `linear16::matmul_at_precise_split` (one f16
/// product) and `linear::matmul_parts_add`; else [`matmul_at_acc_split`]. X `[m, k]`, B `[m, n]`,
/// Y `[k, n]`; `scratch` holds at least [`weight_grad_precise_scratch_len`] floats, `ws` at least
/// [`precise_workspace_len`]`(m, n, k)` elements on the split path.
#[allow(clippy::too_many_arguments)]
pub fn weight_grad_precise(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    b: &Buffer<f32>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    ws: &mut PreciseWorkspace,
    m: usize,
    n: usize,
    k: usize,
    precision: Precision,
) -> Result<()> {
    match product_path(rec.gpu(), precision) {
        ProductPath::Sgemm => matmul_at_acc_split(rec, x, b, y, scratch, m, n, k),
        ProductPath::TensorCoresSplit => weight_grad_split(rec, x, b, y, scratch, ws, m, n, k),
        ProductPath::TensorCoresF16 => {
            use crate::linear16::matmul_at_precise_split as kern;
            let (m32, n32, k32) = dims(m, n, k)?;
            let (parts, chunk) = parts_for(m, n, k, crate::linear16::PREC_BM, crate::linear16::PREC_BN);
            let (parts32, chunk32) = (to_u32(parts, "parts")?, to_u32(chunk, "chunk")?);
            let sp = kern::SplitParams::new(m32, n32, k32, parts32, chunk32);
            let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
            let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc, SPLIT: Some(false) };
            crate::linear16::matmul_at_precise_split(rec, x, b, scratch, sp, o)?;
            let ap = crate::linear::matmul_parts_add::AddParams::new(to_u32(n * k, "k·n")?, parts32);
            crate::linear::matmul_parts_add(rec, scratch, y, ap)
        }
    }
}

/// The scaled split weight gradient `Y += Xᵀ·B` whatever the adapter (as [`matmul_t_split`]):
/// X `[m, k]` and B `[m, n]` scaled and split into `ws`, `precise::matmul_at_pres_split` writes
/// the parts of the contraction into `scratch` (at least [`weight_grad_split_scratch_len`]
/// floats) and `linear::matmul_parts_add` adds them to Y `[k, n]` in a fixed order
/// (deterministic).
#[allow(clippy::too_many_arguments)]
pub fn weight_grad_split(
    rec: impl Record + Copy,
    x: &Buffer<f32>,
    b: &Buffer<f32>,
    y: &mut Buffer<f32>,
    scratch: &mut Buffer<f32>,
    ws: &mut PreciseWorkspace,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    use crate::precise::matmul_at_pres_split as kern;
    let (m32, n32, k32) = dims(m, n, k)?;
    let (parts, chunk) = weight_grad_split_parts(m, n, k);
    let (parts32, chunk32) = (to_u32(parts, "parts")?, to_u32(chunk, "chunk")?);
    ws.split(rec, x, (m, k), b, (m, n))?;
    let sp = kern::SplitParams::new(m32, n32, k32, parts32, chunk32);
    let [mc, nc, kc] = compiled_shape(rec.gpu(), &kern::KERNEL, m32, n32, k32);
    let o = kern::Overrides { M_C: mc, N_C: nc, K_C: kc };
    crate::precise::matmul_at_pres_split(rec, &ws.a_hi, &ws.a_lo, &ws.b_hi, &ws.b_lo, &ws.amax, scratch, sp, o)?;
    let ap = crate::linear::matmul_parts_add::AddParams::new(to_u32(n * k, "k·n")?, parts32);
    crate::linear::matmul_parts_add(rec, scratch, y, ap)
}
