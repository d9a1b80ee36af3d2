kernels::kernels!("./wgsl/validation_error.wgsl");

fn main() {}
