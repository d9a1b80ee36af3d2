kernels::kernels!("./wgsl/ok.wgsl", shared = "./wgsl/shared_unclosed_brace.wgsl");

fn main() {}
