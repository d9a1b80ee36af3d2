kernels::kernels!("./wgsl/near_miss_marker.wgsl");

fn main() {}
