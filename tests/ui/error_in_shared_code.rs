kernels::kernels!("./wgsl/error_in_shared_code.wgsl");

fn main() {}
