//! Host-side drivers for kernels that take more than one dispatch (reductions), and the f16
//! operand layout of the products. The products themselves are [`crate::gemm`].

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

// ---- f16 operands ----

/// The element of the f16 operands of the tensor-core products: four f16 values (`vec4<f16>`
/// in WGSL). A matrix `[rows, cols]` in the *f16x4 row layout* is row-major with every row
/// padded with zeros to a multiple of 4 elements, [`f16x4_len`] elements; for `cols % 4 == 0`
/// that is plain row-major f16. [`cast_f16x4`] writes it on the GPU, [`to_f16x4`] on the host.
pub type F16x4 = [crate::f16; 4];

/// Elements ([`F16x4`]) of a `[rows, cols]` matrix in the f16x4 row layout: rows·⌈cols/4⌉.
pub fn f16x4_len(rows: usize, cols: usize) -> usize {
    rows * cols.div_ceil(4)
}

/// A row-major f32 matrix `[rows, cols]` in the f16x4 row layout, as `cast::cast_f16x4`
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

/// Records a cast of `src` `[rows, cols]` f32 into `dst` in the f16x4 row layout (at least
/// [`f16x4_len`]`(rows, cols)` elements): `cast::cast_f16x4`, bit for bit what [`to_f16x4`]
/// writes on the host. Needs SHADER_F16.
pub fn cast_f16x4(
    rec: impl Record,
    src: &Buffer<f32>,
    dst: &mut Buffer<F16x4>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let p = crate::cast::cast_f16x4::RowsParams::new(to_u32(rows, "rows")?, to_u32(cols, "cols")?);
    crate::cast::cast_f16x4(rec, src, dst, p)
}

/// Whether `kernel` runs its tensor-core (cooperative-matrix) variant on `gpu`: the adapter
/// offers the configuration and tensor cores are not turned off (`KERNELS_COOPERATIVE_MATRIX=0`,
/// `GpuOptions::cooperative_matrix(false)`).
pub fn on_tensor_cores(gpu: &Gpu, kernel: &KernelDef) -> bool {
    gpu.variant_for(kernel).is_ok_and(|v| !v.coop.is_empty())
}

/// One matrix of a [`Transposes`] set: `rows × cols` in the f16x4 row layout at element `src`
/// of the source buffer, its transpose (`cols × rows`, the same layout) at element `dst` of the
/// destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transpose {
    /// The source matrix's first element ([`F16x4`] units).
    pub src: usize,
    /// The transpose's first element ([`F16x4`] units).
    pub dst: usize,
    /// The source matrix's rows (the transpose's columns).
    pub rows: usize,
    /// The source matrix's columns (the transpose's rows).
    pub cols: usize,
}

impl Transpose {
    /// The [`F16x4`] elements of the source matrix and of its transpose.
    fn lens(&self) -> (usize, usize) {
        (f16x4_len(self.rows, self.cols), f16x4_len(self.cols, self.rows))
    }
}

/// A set of f16 matrices that one dispatch of `cast::transpose_f16x4` transposes, each from its
/// place in one buffer to its place in another (the trainer's weights, from their f16 copies to
/// the transposed copies its input gradients read). Made once: the table of the set lives on
/// the GPU.
#[derive(Debug)]
pub struct Transposes {
    table: Buffer<u32>,
    count: u32,
    tiles: u32,
    /// The elements the source and destination buffers must hold.
    src_len: usize,
    dst_len: usize,
}

impl Transposes {
    /// The set of `items`, whose destinations must not overlap one another.
    pub fn new(gpu: &Gpu, items: &[Transpose]) -> Result<Transposes> {
        const TILE: usize = crate::cast::TP_TILE as usize;
        let mut table = Vec::with_capacity(8 * items.len().max(1));
        let (mut tiles, mut src_len, mut dst_len) = (0usize, 0usize, 0usize);
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(items.len());
        for t in items {
            let (sl, dl) = t.lens();
            let across = t.cols.div_ceil(TILE);
            let words = [t.src, t.dst, t.rows, t.cols, tiles, across];
            for (v, what) in words.iter().zip(["src", "dst", "rows", "cols", "first tile", "tiles across"]) {
                table.push(to_u32(*v, what)?);
            }
            table.extend([0, 0]);
            tiles += t.rows.div_ceil(TILE) * across;
            src_len = src_len.max(t.src + sl);
            dst_len = dst_len.max(t.dst + dl);
            spans.push((t.dst, t.dst + dl));
        }
        spans.retain(|s| s.0 < s.1);
        spans.sort_unstable();
        if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(Error::BadArguments {
                kernel: "transpose_f16x4".into(),
                detail: format!("destinations {:?} and {:?} overlap", w[0], w[1]),
            });
        }
        if table.is_empty() {
            table.resize(8, 0);
        }
        let tiles = to_u32(tiles, "tiles")?;
        Ok(Transposes { table: gpu.upload(&table)?, count: items.len() as u32, tiles, src_len, dst_len })
    }

    /// Records the transposes from `src` into `dst` (one dispatch; none for an empty set).
    /// Needs SHADER_F16.
    pub fn record(&self, rec: impl Record, src: &Buffer<F16x4>, dst: &mut Buffer<F16x4>) -> Result<()> {
        for (have, need, what) in [(src.len(), self.src_len, "source"), (dst.len(), self.dst_len, "destination")] {
            if have < need {
                return Err(Error::LengthMismatch {
                    detail: format!("transpose_f16x4: the {what} holds {have} elements; the set reaches {need}"),
                });
            }
        }
        if self.tiles == 0 {
            return Ok(());
        }
        let p = crate::cast::transpose_f16x4::TransposeParams::new(self.count, self.tiles);
        crate::cast::transpose_f16x4(rec, src, dst, &self.table, p)
    }
}
