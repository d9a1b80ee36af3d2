// A buffer of the wrong element type is a type error at the call. (A kernel of this file, not of
// the library: the note below names where the function is defined, and the library's list of
// kernel files would put every new file into this snapshot.)
kernels::kernels!("./wgsl/ok.wgsl", module = doubling);

fn main() {
    let gpu = kernels::Gpu::new().unwrap();
    let mut x = gpu.zeros::<u32>(16).unwrap();
    doubling::ok(&gpu, &mut x, kernels::Grid::Workgroups(1)).unwrap();
}
