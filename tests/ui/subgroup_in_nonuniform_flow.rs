kernels::kernels!("./wgsl/nonuniform.wgsl");

fn main() {}
