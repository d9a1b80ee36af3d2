kernels::kernels!("./wgsl/second_entry_point.wgsl");

fn main() {}
