//! Host-side drivers for kernels that take more than one dispatch.

use crate::infrastructure::{fill_const, reduce_max, reduce_sum};
use crate::{Buffer, Error, Gpu, Record, Result};

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
