kernels::kernels!("./wgsl/enable_middle.wgsl");

fn main() {}
