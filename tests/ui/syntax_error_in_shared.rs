kernels::kernels!("./wgsl/ok.wgsl", shared = "./wgsl/shared_syntax_error.wgsl");

fn main() {}
