// `crate = path`: the generated code names the runtime through a crate's own re-export, not
// through `kernels`.
mod gpu {
    pub use kernels_runtime::*;
}

kernels::kernels!("../wgsl/ok.wgsl", crate = crate::gpu, module = doubled);

fn main() {
    let k: &gpu::KernelDef = doubled::KERNELS[0];
    assert_eq!(k.qualified_name(), "doubled::ok");
    let _: fn(&gpu::Gpu, &mut gpu::Buffer<f32>, gpu::Grid) -> Result<(), gpu::Error> = |r, x, g| doubled::ok(r, x, g);
}
