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
