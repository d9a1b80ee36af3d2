//! The linear layers' products at the step's precision, and the mixed-precision state (f16
//! weight copies, the f16 operand scratch, the loss scaler's buffers).
//!
//! Two ways to run a product ([`Products`]): the f32 SGEMM of `kernels::linear` (`f32`: the
//! trainer's original kernels, bit for bit) and f16 operands with f32 sums
//! (`ops::matmul_t_f16`, `ops::matmul_f16`, `ops::weight_grad_f16_from_f32`: mixed precision).
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
use kernels::ops::{self, F16x4};
use kernels::{Batch, Buffer};

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
    /// f16 operand scratch: an activation or a gradient cast for the next product.
    pub x16: Buffer<F16x4>,
    /// Set by the gradient casts when a value overflows f16 (`kernels::mixed::cast_grad_f16x4`).
    pub flag: Buffer<u32>,
    /// The loss scaler's state (`crate::scaler::STATE_LEN` floats).
    pub state: B,
    /// Clean steps before the loss scale doubles.
    pub growth_interval: u32,
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

/// Casts the activation `x` [rows, cols] to the f16 scratch when products take f16 operands.
pub(super) fn cast_act(
    b: &Batch<'_>,
    mode: Products,
    x: &B,
    half: &mut Option<Half>,
    rows: u32,
    cols: u32,
) -> Result<(), Error> {
    if mode == Products::Half {
        let h = half.as_mut().ok_or_else(missing)?;
        ops::cast_f16x4(b, x, &mut h.x16, rows as usize, cols as usize)?;
    }
    Ok(())
}

/// `y = x·wᵀ` (`acc`: `y += x·wᵀ`) for x [m, k], w [n, k]; in `Half` mode from the f16 scratch
/// (cast by [`cast_act`]) and `w16`.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward(
    b: &Batch<'_>,
    mode: Products,
    x: &B,
    w: &B,
    w16: Option<&Buffer<F16x4>>,
    half: &Option<Half>,
    y: &mut B,
    (m, n, k): (u32, u32, u32),
    acc: bool,
) -> Result<(), Error> {
    let p = kernels::linear::matmul_t::Params::new(m, n, k);
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    match (mode, acc) {
        (Products::Sgemm, false) => kernels::linear::matmul_t(b, x, w, y, p)?,
        (Products::Sgemm, true) => kernels::linear::matmul_t_acc(b, x, w, y, p)?,
        (Products::Half, acc) => {
            let (h, w16) = (half.as_ref().ok_or_else(missing)?, w16.ok_or_else(missing)?);
            if acc {
                ops::matmul_t_f16_acc(b, &h.x16, w16, y, mu, nu, ku)?
            } else {
                ops::matmul_t_f16(b, &h.x16, w16, y, mu, nu, ku)?
            }
        }
    }
    Ok(())
}

/// `y = dy·w` (+ `residual`, a different buffer from `y`) for dy [m, k], w [k, n]: an input
/// gradient. In `Half` mode `dy` is cast to f16 first by `kernels::mixed::cast_grad_f16x4`,
/// which raises the loss scaler's overflow flag.
#[allow(clippy::too_many_arguments)]
pub(super) fn input_grad(
    b: &Batch<'_>,
    mode: Products,
    dy: &B,
    w: &B,
    w16: Option<&Buffer<F16x4>>,
    half: &mut Option<Half>,
    residual: Option<&B>,
    y: &mut B,
    (m, n, k): (u32, u32, u32),
) -> Result<(), Error> {
    let p = kernels::linear::matmul::Params::new(m, n, k);
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    match (mode, residual) {
        (Products::Sgemm, None) => kernels::linear::matmul(b, dy, w, y, p)?,
        (Products::Sgemm, Some(r)) => kernels::linear::matmul_residual(b, dy, w, r, y, p)?,
        (Products::Half, r) => {
            let (h, w16) = (half.as_mut().ok_or_else(missing)?, w16.ok_or_else(missing)?);
            let cp = kernels::mixed::cast_grad_f16x4::CastParams::new(m, k);
            kernels::mixed::cast_grad_f16x4(b, dy, &mut h.x16, &mut h.flag, cp)?;
            ops::matmul_f16(b, &h.x16, w16, r, y, mu, nu, ku)?;
        }
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

/// `dw += dyᵀ·x` (dy [rows, out], x [rows, in], dw [out, in]), split along the tokens.
#[allow(clippy::too_many_arguments)]
pub(super) fn weight_grad(
    b: &Batch<'_>,
    mode: Products,
    dy: &B,
    x: &B,
    dw: &mut B,
    scratch: &mut B,
    rows: usize,
    inp: usize,
    out: usize,
) -> Result<(), Error> {
    match mode {
        Products::Sgemm => ops::matmul_at_acc_split(b, dy, x, dw, scratch, rows, inp, out)?,
        Products::Half => ops::weight_grad_f16_from_f32(b, dy, x, dw, scratch, rows, inp, out)?,
    }
    Ok(())
}
