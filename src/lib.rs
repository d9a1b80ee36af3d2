#![doc = include_str!("../README.md")]

extern crate self as kernels;

pub use kernels_macro::kernels;
pub use kernels_runtime::*;

kernels!("shaders/00_infrastructure.wgsl");
kernels!("shaders/04_rope.wgsl");
kernels!("shaders/05_attention.wgsl");
kernels!("shaders/10_backward_attention.wgsl");

pub mod ops;

/// Every kernel of the library, for [`Gpu::warm_up`] and tools.
pub fn all_kernels() -> impl Iterator<Item = &'static &'static KernelDef> {
    infrastructure::KERNELS
        .iter()
        .chain(rope::KERNELS.iter())
        .chain(attention::KERNELS.iter())
        .chain(backward_attention::KERNELS.iter())
}
