kernels::kernels!("./wgsl/several.wgsl");

// `good` is still generated: no "cannot find function" error below the two real ones.
fn use_good(gpu: &kernels::Gpu, x: &mut kernels::Buffer<f32>) {
    several::good(gpu, x, kernels::Grid::Threads(1)).unwrap();
}

fn main() {}
