kernels::kernels!("./wgsl/missing_entry.wgsl");

fn main() {}
