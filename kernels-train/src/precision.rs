//! The arithmetic a training step uses: f32 throughout, or mixed precision (f16 operands for
//! the linear layers' products, f32 everywhere else, dynamic loss scaling).

use crate::Error;
use kernels::Gpu;

/// The precision of a training step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// `Mixed` where the adapter has tensor cores (cooperative matrices), else `F32`.
    #[default]
    Auto,
    /// f32 throughout: the products f32-accurate, through the scaled-split products on tensor
    /// cores where the adapter has them (`kernels::ops::matmul_t_split` and friends: each f32
    /// operand scaled by a power of two and split into two f16 halves, three products; measured
    /// faster than the SGEMM on an H200), else through the f32 SGEMM.
    F32,
    /// f32 master weights and AdamW moments; f16 copies of the weights written by the optimizer;
    /// every linear layer's product (forward, input gradient, weight gradient, the tied head
    /// included) with f16 operands and f32 sums; RMSNorm statistics, attention, softmax and the
    /// loss in f32; dynamic loss scaling ([`crate::scaler`]). Runs everywhere SHADER_F16 does:
    /// on tensor cores where the adapter has them, through the portable variants elsewhere.
    Mixed,
}

impl Precision {
    /// What `self` means on `gpu`: `F32` or `Mixed` (never `Auto`). `Mixed` needs SHADER_F16.
    pub fn resolve(self, gpu: &Gpu) -> Result<Precision, Error> {
        let has_f16 = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
        match self {
            Precision::Auto if !gpu.cooperative_matrices().is_empty() && has_f16 => Ok(Precision::Mixed),
            Precision::Auto => Ok(Precision::F32),
            Precision::Mixed if !has_f16 => Err(Error::Config(
                "--precision mixed needs 16-bit floats in shaders (SHADER_F16), which this adapter lacks; use --precision f32"
                    .into(),
            )),
            p => Ok(p),
        }
    }

    /// One line for the start of a run: what `self` resolves to on `gpu` and why.
    pub fn describe(self, gpu: &Gpu) -> String {
        let tensor = !gpu.cooperative_matrices().is_empty();
        let resolved = self.resolve(gpu).unwrap_or(self);
        let what = match resolved {
            Precision::Mixed => "mixed (f16 products, f32 master weights, dynamic loss scaling)",
            _ if kernels::gemm::Gemm::new(1, 1, 1).plan(gpu).is_ok_and(|p| p.core() == kernels::gemm::Core::Split) => {
                "f32 (f32-accurate split products on tensor cores)"
            }
            _ => "f32 (f32 SGEMM)",
        };
        let why = match (self, tensor) {
            (Precision::Auto, true) => "auto: this adapter has tensor cores",
            (Precision::Auto, false) => "auto: no tensor cores on this adapter",
            (_, true) => "as asked; this adapter has tensor cores",
            (_, false) => "as asked; no tensor cores on this adapter (portable kernels)",
        };
        format!("precision: {what} ({why})")
    }
}
