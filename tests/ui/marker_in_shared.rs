kernels::kernels!("./wgsl/ok.wgsl", shared = "./wgsl/shared_with_marker.wgsl");

fn main() {}
