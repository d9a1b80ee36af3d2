use kernels::infrastructure::scale;

fn main() {
    let gpu = kernels::Gpu::new().unwrap();
    let mut x = gpu.zeros::<u32>(16).unwrap();
    scale(&gpu, &mut x, scale::Params::new(16, 2.0)).unwrap();
}
