#![doc = include_str!("../README.md")]

extern crate self as kernels;

pub use kernels_macro::kernels;
pub use kernels_runtime::*;

kernels!("shaders/00_infrastructure.wgsl");
kernels!("shaders/01_embedding.wgsl");
kernels!("shaders/02_norm.wgsl");
kernels!("shaders/03_linear.wgsl");
kernels!("shaders/04_rope.wgsl");
kernels!("shaders/05_attention.wgsl");
kernels!("shaders/06_activation.wgsl");
kernels!("shaders/07_loss.wgsl");
kernels!("shaders/08_cast.wgsl");
kernels!("shaders/09_backward_ffn.wgsl");
kernels!("shaders/10_backward_attention.wgsl");
kernels!("shaders/12_optimizer.wgsl");

pub mod fast_attention;
pub mod ops;

/// Every kernel of the library, for [`Gpu::warm_up`] and tools.
pub fn all_kernels() -> impl Iterator<Item = &'static &'static KernelDef> {
    infrastructure::KERNELS
        .iter()
        .chain(embedding::KERNELS)
        .chain(norm::KERNELS)
        .chain(linear::KERNELS)
        .chain(rope::KERNELS)
        .chain(attention::KERNELS)
        .chain(activation::KERNELS)
        .chain(loss::KERNELS)
        .chain(cast::KERNELS)
        .chain(backward_ffn::KERNELS)
        .chain(backward_attention::KERNELS)
        .chain(optimizer::KERNELS)
}
