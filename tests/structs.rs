//! Host structs generated with WGSL layout (explicit padding around a `vec3`) read correctly
//! by the GPU, as uniforms and as storage elements; `@grid`/`@requires` built from struct
//! fields; override constants.

mod common;

use common::{gpu, rng, uniform};
use rand::Rng;

kernels::kernels!("kernels-codegen/tests/fixtures/01_demo.wgsl");
use demo::{points, shift};

#[test]
fn uniform_struct_with_padding() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("uniform struct");
    let (rows, cols) = (37u32, 29u32);
    let n = (rows * cols) as usize;
    let m0 = uniform(&mut rng, n, -1.0, 1.0);
    let origin = [rng.random_range(-5.0..5.0f32), 7.0, 9.0];
    let scale_: f32 = rng.random_range(0.5..2.0);
    let mut m = gpu.upload(&m0).unwrap();
    shift(&gpu, &mut m, shift::Dims::new(rows, cols, origin, scale_)).unwrap();
    let got = m.read(&gpu).unwrap();
    for (g, x) in got.iter().zip(&m0) {
        let want = *x as f64 + origin[0] as f64 * scale_ as f64;
        assert!((*g as f64 - want).abs() < 1e-5, "{g} vs {want}");
    }
    // The requirement names the struct fields.
    let mut short = gpu.zeros::<f32>(n - 1).unwrap();
    let e = shift(&gpu, &mut short, shift::Dims::new(rows, cols, origin, scale_)).unwrap_err();
    assert!(e.to_string().contains("d.rows * d.cols"), "{e}");
}

#[test]
fn storage_struct_elements_and_overrides() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("storage structs");
    let n = 300;
    let pts: Vec<demo::Point> = (0..n)
        .map(|_| demo::Point::new([rng.random(), rng.random(), rng.random()], rng.random_range(-1.0..1.0)))
        .collect();
    let buf = gpu.upload(&pts).unwrap();
    assert_eq!(std::mem::size_of::<demo::Point>(), 16);
    let mut out = gpu.filled(n, f32::NAN).unwrap();
    let dims = demo::Dims { rows: 3, ..Default::default() };
    points(&gpu, &buf, &mut out, dims, kernels::Grid::Threads(n as u64), points::Overrides { GAIN: Some(0.5) })
        .unwrap();
    let got = out.read(&gpu).unwrap();
    for (g, p) in got.iter().zip(&pts) {
        assert!((*g as f64 - 0.5 * p.w as f64 * 3.0).abs() < 1e-6);
    }
}

/// Names that broke the macro (issue 11), through rustc in this edition-2024 crate: a file and a
/// kernel named `gen`, `module = r#type`, bindings `rec`, `rec_` and `None`, structs named
/// `Overrides` and like another kernel, a field named like generated padding, a constant and a
/// kernel named `KERNELS`. (Here rather than in `tests/ui/pass`: trybuild would then build, not
/// just check, the whole dependency tree a second time.)
mod hostile_names {
    use kernels::{Buffer, Error, Gpu, Grid};

    kernels::kernels!("tests/ui/wgsl/01_gen.wgsl");
    kernels::kernels!("tests/ui/wgsl/01_gen.wgsl", module = r#type);
    kernels::kernels!("tests/ui/wgsl/02_registry.wgsl", module = registry);

    /// Type-checks the calls (not run).
    #[allow(dead_code)]
    fn calls(gpu: &Gpu, x: &mut Buffer<u32>, y: &mut Buffer<u32>) -> Result<(), Error> {
        // Kernel `a`: the binding `rec`, `rec_`, `None` (a uniform of struct `b`), the user's
        // `Overrides` (a uniform) beside the generated `__k_Overrides`.
        let none = r#gen::a::b::new([1.0, 2.0, 3.0], 7, 9);
        r#gen::a(
            gpu,
            x,
            y,
            none,
            r#gen::a::Overrides::new(1),
            Grid::Workgroups(1),
            r#gen::a::__k_Overrides { gain: Some(3) },
        )?;
        r#gen::b(gpu, x, Grid::Workgroups(1))?;
        r#gen::r#gen(gpu, y, Grid::Workgroups(1))?;
        r#type::r#gen(gpu, y, Grid::Workgroups(1))?;
        registry::KERNELS(gpu, x, Grid::Workgroups(1))
    }

    kernels::kernels!("tests/ui/wgsl/03_locals.wgsl", module = locals);

    /// A constant `v` of the module and bindings `grid`, `rec` and `overrides` beside an
    /// override: the function body's own locals are out of their way.
    #[test]
    fn locals_of_the_generated_body_collide_with_nothing() {
        let Some(gpu) = crate::common::gpu() else { return };
        assert_eq!(locals::v, 3);
        let mut grid = gpu.filled(1, u32::MAX).unwrap();
        let mut rec = gpu.filled(1, u32::MAX).unwrap();
        let mut overrides = gpu.filled(1, u32::MAX).unwrap();
        let gain = 5;
        locals::k(
            &gpu,
            &mut grid,
            &mut rec,
            &mut overrides,
            Grid::Workgroups(1),
            locals::k::Overrides { gain: Some(gain) },
        )
        .unwrap();
        let read = |b: &Buffer<u32>| b.read(&gpu).unwrap()[0];
        assert_eq!((read(&grid), read(&rec), read(&overrides)), (3 * gain, 3 + gain, gain));
    }

    #[test]
    fn generated_names_stay_out_of_the_users_way() {
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
}

/// `crate = path`: the generated code names the runtime through a crate's own re-export, not
/// through `kernels`.
mod runtime_path {
    mod gpu {
        pub use kernels_runtime::*;
    }

    kernels::kernels!("tests/ui/wgsl/ok.wgsl", crate = crate::runtime_path::gpu, module = doubled);

    #[test]
    fn runtime_named_through_a_reexport() {
        let k: &gpu::KernelDef = doubled::KERNELS[0];
        assert_eq!(k.qualified_name(), "doubled::ok");
        let _: fn(&gpu::Gpu, &mut gpu::Buffer<f32>, gpu::Grid) -> Result<(), gpu::Error> =
            |r, x, g| doubled::ok(r, x, g);
    }
}
