kernels::kernels!("./wgsl/unchecked_misuse.wgsl");

fn main() {}
