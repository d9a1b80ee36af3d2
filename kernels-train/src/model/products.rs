//! The linear layers' products at the step's precision, and the mixed-precision state (f16
//! weight copies, the kept f16 activations, dY's f16 scratch, the loss scaler's buffers).
//!
//! Two ways to run a product ([`Products`]): the f32 SGEMM of `kernels::linear` (`f32`: the
//! trainer's original kernels, bit for bit) and f16 operands with f32 sums
//! (`ops::matmul_t_f16`, `ops::matmul_f16`, `ops::weight_grad_f16`: mixed precision). Which one
//! a product takes follows from its input ([`Operand`]): an activation kept in f32 goes to the
//! SGEMM, one kept in f16 (mixed precision keeps every linear layer's input only as its f16
//! copy, [`Kept::F16`]) to the f16 products.
//!
//! Not (yet) the f32-accurate products on tensor cores. The first split products
//! (`linear16::*_precise`, split while staging, unscaled) were f32-accurate only for values in
//! f16's normal range (|x| ≥ 2⁻¹⁴), and a step's gradients are far smaller (the loss is a mean
//! over thousands of tokens): on the H200 (BENCHMARKS.md, run 9) gpt2-small trained 300 steps
//! to a loss of 1.13 through them, 0.786 through the SGEMM and 0.784 in mixed precision. Their
//! successor, `kernels::precise` (`ops::*_precise` at `Precision::F32`), scales each operand by a
//! power of two before the split and is f32-accurate over the f32 range — its tests
//! (tests/precise.rs) hold every product within 1e-6 of Σ|a||b| (measured ≤ 7.5e-7) for whole
//! tensors of 1e-10 (a mean loss's gradients), 1e-12, 1e-30 and 1e+30, magnitudes mixed over
//! 10⁸ and values ~1e-9 mixed into ordinary ones; only outliers more than ~2²⁸ above the rest of
//! their tensor (1e+20 among ordinary values) leave the rows and columns without them at the
//! documented absolute bound instead. It is not wired here because its scratch
//! (`ops::PreciseWorkspace`, mutable, the operands' halves) has to reach `forward`,
//! `input_grad` and `weight_grad` below, whose callers (forward.rs, backward.rs) pass only the
//! mixed-precision state: a `Products::Split` mode needs the workspace (sized by
//! `ops::precise_workspace_len` over the model's product shapes) as a `Model` field passed to
//! these three functions, the residual forms as `ops::matmul_t_split(.., acc = true)` after the
//! copy and `ops::matmul_split(.., acc = true)` after copying the residual, and the weight
//! gradients as `ops::weight_grad_split` (scratch `ops::weight_grad_split_scratch_len`).

use super::B;
use crate::Error;
use kernels::ops::{self, F16x4, f16x4_len};
use kernels::{Batch, Buffer, Gpu};

/// How the linear layers' products run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Products {
    /// f32 SGEMM (`kernels::linear`).
    Sgemm,
    /// f16 operands, f32 sums (`ops::*_f16`).
    Half,
}

/// Mixed precision's buffers.
pub(super) struct Half {
    /// dY's f16 copy in the backward: each output gradient is cast here once
    /// (`kernels::mixed::cast_grad_f16x4`) and feeds both its input and its weight gradient.
    pub x16: Buffer<F16x4>,
    /// Set by the gradient casts when a value overflows f16 (`kernels::mixed::cast_grad_f16x4`).
    pub flag: Buffer<u32>,
    /// The loss scaler's state (`crate::scaler::STATE_LEN` floats).
    pub state: B,
    /// Clean steps before the loss scale doubles.
    pub growth_interval: u32,
}

/// A linear layer's input as the forward writes it and the backward's weight gradient reads it.
pub(super) enum Kept {
    /// f32 `[rows, cols]` (f32 precision).
    F32(B),
    /// Only the f16 copy, in the f16x4 row layout (mixed precision: written directly by
    /// `kernels::fused`'s RMSNorm and SwiGLU; nothing reads the f32 values).
    F16(Buffer<F16x4>),
}

impl Kept {
    /// Zeros for `[rows, cols]`: f16 when `half`, else f32.
    pub fn zeros(gpu: &Gpu, half: bool, rows: usize, cols: usize) -> Result<Kept, Error> {
        Ok(if half { Kept::F16(gpu.zeros(f16x4_len(rows, cols))?) } else { Kept::F32(gpu.zeros(rows * cols)?) })
    }

    /// The product operand.
    pub fn operand(&self) -> Operand<'_> {
        match self {
            Kept::F32(x) => Operand::F32(x),
            Kept::F16(x) => Operand::F16(x),
        }
    }
}

/// A product's activation operand: f32 (the SGEMM) or f16 in the f16x4 row layout (the f16
/// products).
#[derive(Clone, Copy)]
pub(super) enum Operand<'a> {
    F32(&'a B),
    F16(&'a Buffer<F16x4>),
}

/// A weight matrix's shape [out, in] as (rows, cols); a vector [n] as one row.
pub(super) fn rows_cols(shape: &[usize]) -> (usize, usize) {
    match shape {
        [n] => (1, *n),
        [out, inp] => (*out, *inp),
        _ => (1, shape.iter().product()),
    }
}

fn missing() -> Error {
    Error::Config("internal: a mixed-precision product without its f16 buffers".into())
}

/// `y = x·wᵀ` (`acc`: `y += x·wᵀ`) for x [m, k], w [n, k]: the SGEMM for an f32 `x`, the f16
/// product with `w16` (the weight's f16 copy) for an f16 `x`.
pub(super) fn forward(
    b: &Batch<'_>,
    x: Operand<'_>,
    w: &B,
    w16: Option<&Buffer<F16x4>>,
    y: &mut B,
    (m, n, k): (u32, u32, u32),
    acc: bool,
) -> Result<(), Error> {
    let p = kernels::linear::matmul_t::Params::new(m, n, k);
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    match (x, acc) {
        (Operand::F32(x), false) => kernels::linear::matmul_t(b, x, w, y, p)?,
        (Operand::F32(x), true) => kernels::linear::matmul_t_acc(b, x, w, y, p)?,
        (Operand::F16(x), false) => ops::matmul_t_f16(b, x, w16.ok_or_else(missing)?, y, mu, nu, ku)?,
        (Operand::F16(x), true) => ops::matmul_t_f16_acc(b, x, w16.ok_or_else(missing)?, y, mu, nu, ku)?,
    }
    Ok(())
}

/// Scratch floats the weight gradients of a [out, in] matrix over `rows` tokens need.
pub(super) fn weight_grad_scratch(mode: Products, rows: usize, inp: usize, out: usize) -> usize {
    match mode {
        Products::Sgemm => ops::weight_grad_scratch_len(rows, inp, out),
        Products::Half => ops::weight_grad_f16_scratch_len(rows, inp, out),
    }
}

/// The backward of one linear layer `Y = X·Wᵀ` (X [rows, in], W [out, in]) from dY [rows, out]:
/// the input gradient `dx = dy·w` (+ `residual`, a different buffer from `dx`) and the weight
/// gradient `dw += dyᵀ·x`, split along the tokens (through `scratch`).
///
/// f32 `x`: the SGEMM (`linear::matmul`/`matmul_residual`, `ops::matmul_at_acc_split`). f16 `x`
/// (mixed precision): dY is cast to f16 once, by `kernels::mixed::cast_grad_f16x4` (which raises
/// the loss scaler's overflow flag), into [`Half::x16`]; that copy is the f16 operand of both
/// products (`ops::matmul_f16`, `ops::weight_grad_f16` with X's kept f16 copy).
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    b: &Batch<'_>,
    dy: &B,
    w: &B,
    w16: Option<&Buffer<F16x4>>,
    x: Operand<'_>,
    dw: &mut B,
    scratch: &mut B,
    half: &mut Option<Half>,
    residual: Option<&B>,
    dx: &mut B,
    (rows, out, inp): (usize, usize, usize),
) -> Result<(), Error> {
    let u = |v: usize| u32::try_from(v).map_err(|_| Error::Config(format!("a product dimension {v} is over u32")));
    match x {
        Operand::F32(x) => {
            let p = kernels::linear::matmul::Params::new(u(rows)?, u(inp)?, u(out)?);
            match residual {
                None => kernels::linear::matmul(b, dy, w, dx, p)?,
                Some(r) => kernels::linear::matmul_residual(b, dy, w, r, dx, p)?,
            }
            ops::matmul_at_acc_split(b, dy, x, dw, scratch, rows, inp, out)?;
        }
        Operand::F16(x) => {
            let (h, w16) = (half.as_mut().ok_or_else(missing)?, w16.ok_or_else(missing)?);
            let cp = kernels::mixed::cast_grad_f16x4::CastParams::new(u(rows)?, u(out)?);
            kernels::mixed::cast_grad_f16x4(b, dy, &mut h.x16, &mut h.flag, cp)?;
            ops::matmul_f16(b, &h.x16, w16, residual, dx, rows, inp, out)?;
            ops::weight_grad_f16(b, &h.x16, x, dw, scratch, rows, inp, out)?;
        }
    }
    Ok(())
}
