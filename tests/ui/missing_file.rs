kernels::kernels!("./wgsl/does_not_exist.wgsl");

fn main() {}
