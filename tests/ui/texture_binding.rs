kernels::kernels!("./wgsl/texture_binding.wgsl");

fn main() {}
