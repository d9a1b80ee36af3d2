// Names that broke the macro (issue 11), through rustc in an edition-2024 crate: a file and a
// kernel named `gen`, `module = r#type`, bindings `rec`, `rec_` and `None`, structs named
// `Overrides` and like another kernel, a field named like generated padding, a constant and a
// kernel named `KERNELS`.
use kernels::{Buffer, Error, Gpu, Grid};

kernels::kernels!("../wgsl/01_gen.wgsl");
kernels::kernels!("../wgsl/01_gen.wgsl", module = r#type);
kernels::kernels!("../wgsl/02_registry.wgsl", module = registry);

/// Type-checks the calls (not run: no GPU needed).
#[allow(dead_code)]
fn calls(gpu: &Gpu, x: &mut Buffer<u32>, y: &mut Buffer<u32>) -> Result<(), Error> {
    // Kernel `a`: the binding `rec`, `rec_`, `None` (a uniform of struct `b`), the user's
    // `Overrides` (a uniform) beside the generated `__k_Overrides`.
    let none = r#gen::a::b::new([1.0, 2.0, 3.0], 7, 9);
    r#gen::a(gpu, x, y, none, r#gen::a::Overrides::new(1), Grid::Workgroups(1), r#gen::a::__k_Overrides { gain: Some(3) })?;
    r#gen::b(gpu, x, Grid::Workgroups(1))?;
    r#gen::r#gen(gpu, y, Grid::Workgroups(1))?;
    r#type::r#gen(gpu, y, Grid::Workgroups(1))?;
    registry::KERNELS(gpu, x, Grid::Workgroups(1))
}

fn main() {
    // The file `01_gen.wgsl` gives the module `gen`; its constant `KERNELS` is there, so the
    // list of kernels takes the reserved name.
    assert_eq!(r#gen::KERNELS, 2);
    assert_eq!(r#gen::__k_KERNELS.len(), 3);
    assert_eq!(r#type::__k_KERNELS[0].qualified_name(), "type::a");
    // A user field named `_pad0` beside the generated padding.
    let value = r#gen::a::b::new([1.0, 2.0, 3.0], 7, 9);
    assert_eq!((value._pad0, value.n), (7, 9));
    assert_eq!(std::mem::size_of::<r#gen::a::b>(), 32);
    assert_eq!(r#gen::r#gen::KERNEL.name, "gen");
    // A kernel named `KERNELS`.
    assert_eq!(registry::__k_KERNELS.len(), 1);
    assert_eq!(registry::KERNELS::KERNEL.name, "KERNELS");
}
