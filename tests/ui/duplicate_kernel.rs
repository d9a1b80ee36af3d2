kernels::kernels!("./wgsl/duplicate.wgsl");

fn main() {}
