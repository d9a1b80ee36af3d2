kernels::kernels!("./wgsl/bad_annotation.wgsl");

fn main() {}
