// A cooperative-matrix store that naga's SPIR-V writer cannot handle: a compile error at the
// store, with the fix, instead of a panic at pipeline creation.
kernels::kernels!("./wgsl/coop_store_inline_stride.wgsl");

fn main() {}
