#![doc = include_str!("../README.md")]

extern crate self as kernels;

pub use kernels_macro::kernels;
pub use kernels_runtime::*;

kernels!("shaders/00_infrastructure.wgsl");
kernels!("shaders/02_norm.wgsl");
kernels!("shaders/07_loss.wgsl");

pub mod ops;

/// Every kernel of the library, for [`Gpu::warm_up`] and tools.
pub fn all_kernels() -> impl Iterator<Item = &'static &'static KernelDef> {
    infrastructure::KERNELS.iter().chain(norm::KERNELS).chain(loss::KERNELS)
}
