//! The linear layers' products at the step's precision, and the mixed-precision state (f16
//! weight copies, the kept f16 activations, dY's f16 scratch, the loss scaler's buffers).
//!
//! Three ways to run a product ([`Products`]): the f32 SGEMM of `kernels::linear` (`f32` without
//! tensor cores: the trainer's original kernels, bit for bit), the f32-accurate products on
//! tensor cores (`ops::matmul_t_split`, `ops::matmul_split`, `ops::weight_grad_split`: `f32`
//! where the adapter has tensor cores), and f16 operands with f32 sums (`ops::matmul_t_f16`,
//! `ops::matmul_f16`, `ops::weight_grad_f16`: mixed precision). Which one a product takes follows
//! from its input ([`Operand`]) and the model's split workspace ([`Split`]): an activation kept in
//! f32 goes to the split products when the model has the workspace, else to the SGEMM; one kept
//! in f16 (mixed precision keeps every linear layer's input only as its f16 copy, [`Kept::F16`])
//! to the f16 products.
//!
//! The split products scale each operand by a power of two before splitting it into hi + lo
//! f16 halves (`kernels::precise`), so they are f32-accurate over the whole f32 range — a mean
//! loss's gradients (~1e-10) included (tests/precise.rs). Their unscaled predecessor
//! (`linear16::*_precise`) was accurate only in f16's normal range and trained gpt2-small
//! visibly worse (loss 1.13 against 0.786 after 300 steps on the H200, BENCHMARKS.md run 9),
//! which is why it was taken out of `--precision f32`.

use super::B;
use crate::Error;
use kernels::ops::{self, F16x4, f16x4_len};
use kernels::{Batch, Buffer, Gpu};
use std::cell::RefCell;

/// How the linear layers' products run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Products {
    /// f32 SGEMM (`kernels::linear`).
    Sgemm,
    /// f16 operands, f32 sums (`ops::*_f16`).
    Half,
    /// f32-accurate products on tensor cores (`ops::*_split`: operands scaled by a power of two
    /// and split into hi + lo f16 halves, three products): `--precision f32` where the adapter
    /// has tensor cores.
    Split,
}

/// The scaled-split products' workspace (`Products::Split`), shared by every product of a step
/// (recorded in order, each splits its operands into it first); `None` runs the SGEMM.
pub(super) type Split<'a> = Option<&'a RefCell<ops::PreciseWorkspace>>;

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
#[allow(clippy::too_many_arguments)]
pub(super) fn forward(
    b: &Batch<'_>,
    split: Split<'_>,
    x: Operand<'_>,
    w: &B,
    w16: Option<&Buffer<F16x4>>,
    y: &mut B,
    (m, n, k): (u32, u32, u32),
    acc: bool,
) -> Result<(), Error> {
    let p = kernels::linear::matmul_t::Params::new(m, n, k);
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    if let (Operand::F32(x), Some(ws)) = (x, split) {
        ops::matmul_t_split(b, x, w, y, &mut ws.borrow_mut(), mu, nu, ku, acc)?;
        return Ok(());
    }
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
        Products::Split => ops::weight_grad_split_scratch_len(rows, inp, out),
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
    split: Split<'_>,
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
        Operand::F32(x) if split.is_some() => {
            let mut ws = split.ok_or_else(missing)?.borrow_mut();
            let acc = match residual {
                None => false,
                Some(r) => {
                    kernels::infrastructure::copy(b, r, dx, u(rows * inp)?)?;
                    true
                }
            };
            ops::matmul_split(b, dy, w, dx, &mut ws, rows, inp, out, acc)?;
            ops::weight_grad_split(b, dy, x, dw, scratch, &mut ws, rows, inp, out)?;
        }
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
