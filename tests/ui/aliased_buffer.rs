use kernels::infrastructure::axpy;

fn main() {
    let gpu = kernels::Gpu::new().unwrap();
    let mut y = gpu.zeros::<f32>(16).unwrap();
    // y += 2·y would read and write one buffer in one dispatch: the borrow checker says no.
    axpy(&gpu, &y, &mut y, axpy::Params::new(16, 2.0)).unwrap();
}
