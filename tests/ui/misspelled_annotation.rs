kernels::kernels!("./wgsl/misspelled_annotation.wgsl");

fn main() {}
