kernels::kernels!("./wgsl/no_markers.wgsl");

fn main() {}
