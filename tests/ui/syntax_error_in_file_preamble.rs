kernels::kernels!("./wgsl/syntax_preamble.wgsl");

fn main() {}
