kernels::kernels!("./wgsl/syntax_section.wgsl");

fn main() {}
