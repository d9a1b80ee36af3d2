kernels::kernels!("./wgsl/multisampled_texture.wgsl");

fn main() {}
