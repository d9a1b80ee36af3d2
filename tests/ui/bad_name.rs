kernels::kernels!("./wgsl/bad_name.wgsl");

fn main() {}
