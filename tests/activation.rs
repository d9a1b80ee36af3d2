//! The activation kernels (`shaders/06_activation.wgsl`) against float64 references: lengths
//! around and past multiples of 256 and past 65535 workgroups (16,776,961 values, the 2-D grid),
//! outputs poisoned with NaN, and large inputs (|x| up to 1e4) that must stay finite. The SwiGLU
//! combine over fused gate/up rows (`swiglu_gu`) also against the separate halves' kernel's bits.

mod common;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{TAIL, assert_close, check_tail, gpu, rng, uniform};
use kernels::Gpu;
use kernels::activation::{gelu_inplace, swiglu_combine, swiglu_gu};

/// `gelu_inplace` over `xs` (tail poisoned); returns the first `xs.len()` values.
fn run_gelu(gpu: &Gpu, xs: &[f32]) -> Vec<f32> {
    let n = xs.len();
    let mut padded = xs.to_vec();
    padded.extend([f32::NAN; TAIL]);
    let mut x = gpu.upload(&padded).unwrap();
    gelu_inplace(gpu, &mut x, gelu_inplace::Params::new(n as u32)).unwrap();
    let got = x.read(gpu).unwrap();
    check_tail("gelu_inplace", &got, n);
    got[..n].to_vec()
}

fn run_swiglu(gpu: &Gpu, gate: &[f32], up: &[f32]) -> Vec<f32> {
    let n = gate.len();
    let g = gpu.upload(gate).unwrap();
    let u = gpu.upload(up).unwrap();
    let mut out = gpu.filled(n + TAIL, f32::NAN).unwrap();
    swiglu_combine(gpu, &g, &u, &mut out, swiglu_combine::Params::new(n as u32)).unwrap();
    let got = out.read(gpu).unwrap();
    check_tail("swiglu_combine", &got, n);
    got[..n].to_vec()
}

/// On `reference::extreme_inputs`: finite results that match the reference to f32 accuracy in
/// absolute terms scaled by max(1, |x|) (deep in the negative tail the true values are below
/// 1e-30 and the GPU's exp may flush them to 0).
#[track_caller]
fn check_extreme(what: &str, xs: &[f32], got: &[f32], want: &[f64]) {
    for ((&x, &g), &w) in xs.iter().zip(got).zip(want) {
        assert!(g.is_finite(), "{what}({x}) = {g}");
        let tol = 2e-6 * (x.abs() as f64).max(1.0);
        assert!((g as f64 - w).abs() <= tol, "{what}({x}) = {g}, want {w}");
    }
}

#[test]
fn gelu_inplace_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("gelu_inplace");
    // Not multiples of 256, and past 65535 workgroups of 256 (16,776,960 values).
    for n in [1usize, 255, 257, 1000, 65_537, 16_776_961] {
        let xs = uniform(&mut rng, n, -6.0, 6.0);
        let got = run_gelu(&gpu, &xs);
        let want = reference::gelu_all(&reference::widen(&xs));
        assert_close(&format!("gelu_inplace n={n}"), &got, &want, 1e-5);
    }
}

#[test]
fn gelu_inplace_is_finite_for_large_inputs() {
    let Some(gpu) = gpu() else { return };
    let xs = reference::extreme_inputs();
    let got = run_gelu(&gpu, &xs);
    check_extreme("gelu", &xs, &got, &reference::gelu_all(&reference::widen(&xs)));
    // The tails: gelu(x) = x for large x, -0 or a tiny negative value for very negative x.
    let last = xs.len() - 2;
    assert_eq!(got[last], 1e4);
    assert!(got[last + 1] <= 0.0 && got[last + 1] > -1e-30, "gelu(-1e4) = {}", got[last + 1]);
    // A NaN input gives NaN.
    assert!(run_gelu(&gpu, &[f32::NAN])[0].is_nan());
}

#[test]
fn swiglu_combine_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("swiglu_combine");
    for n in [1usize, 255, 257, 1000, 65_537, 300_001] {
        let gate = uniform(&mut rng, n, -6.0, 6.0);
        let up = uniform(&mut rng, n, -3.0, 3.0);
        let got = run_swiglu(&gpu, &gate, &up);
        let want = reference::swiglu(&reference::widen(&gate), &reference::widen(&up));
        assert_close(&format!("swiglu_combine n={n}"), &got, &want, 1e-5);
    }
}

#[test]
fn swiglu_combine_is_finite_for_large_inputs() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("swiglu_extreme");
    let gate = reference::extreme_inputs();
    let up = uniform(&mut rng, gate.len(), 0.5, 1.0);
    let got = run_swiglu(&gpu, &gate, &up);
    check_extreme("swiglu", &gate, &got, &reference::swiglu(&reference::widen(&gate), &reference::widen(&up)));
}

#[test]
fn short_buffer_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let gate = gpu.upload(&[1.0f32; 10]).unwrap();
    let up = gpu.upload(&[1.0f32; 9]).unwrap();
    let mut out = gpu.filled(10, f32::NAN).unwrap();
    let e = swiglu_combine(&gpu, &gate, &up, &mut out, swiglu_combine::Params::new(10)).unwrap_err();
    assert!(matches!(e, kernels::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(up) >= p.n"), "{e}");
    assert!(out.read(&gpu).unwrap().iter().all(|v| v.is_nan()), "nothing ran");
}

/// `swiglu_gu` of gate and up (`[rows, cols]` each) as fused rows on `gpu`, output tail
/// poisoned: against float64 and bit for bit `swiglu_combine` on the separate halves.
fn swiglu_gu_case(gpu: &Gpu, rng: &mut rand::rngs::StdRng, rows: usize, cols: usize) {
    let n = rows * cols;
    let gate = uniform(rng, n, -6.0, 6.0);
    let up = uniform(rng, n, -3.0, 3.0);
    let mut gu = reference::fuse_halves(&gate, &up, rows, cols);
    gu.extend([f32::NAN; TAIL]);
    let gub = gpu.upload(&gu).unwrap();
    let mut out = gpu.filled(n + TAIL, f32::NAN).unwrap();
    swiglu_gu(gpu, &gub, &mut out, swiglu_gu::RowsParams::new(rows as u32, cols as u32)).unwrap();
    let got = out.read(gpu).unwrap();
    let what = format!("swiglu_gu ({rows}, {cols})");
    check_tail(&what, &got, n);
    let want = reference::swiglu(&reference::widen(&gate), &reference::widen(&up));
    assert_close(&what, &got[..n], &want, 1e-5);
    assert!(common::same_bits(&got[..n], &run_swiglu(gpu, &gate, &up)), "{what}: not swiglu_combine's bits");
}

#[test]
fn swiglu_gu_matches_reference_and_the_separate_kernel() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("swiglu_gu");
    // Rows shorter and longer than the 8 outputs of an invocation (which then span rows), odd
    // widths, a partial last workgroup.
    for (rows, cols) in [(1, 1), (3, 5), (7, 130), (16, 256), (33, 1000), (257, 300)] {
        swiglu_gu_case(&gpu, &mut rng, rows, cols);
    }
    // 37 × 300 = 11,100 outputs, 6 workgroups where a dimension takes at most 4: the 2-D grid.
    let Some(gpu2d) = common::gpu_with(kernels::GpuOptions::from_env().max_workgroups_per_dimension(4)) else {
        return;
    };
    swiglu_gu_case(&gpu2d, &mut rng, 37, 300);
}

#[test]
fn swiglu_gu_short_buffer_is_an_error() {
    let Some(gpu) = gpu() else { return };
    // Gate and up of 2 rows of 5 need 20 values.
    let gu = gpu.upload(&[1.0f32; 19]).unwrap();
    let mut out = gpu.filled(10, f32::NAN).unwrap();
    let e = swiglu_gu(&gpu, &gu, &mut out, swiglu_gu::RowsParams::new(2, 5)).unwrap_err();
    assert!(matches!(e, kernels::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(gu)"), "{e}");
    assert!(out.read(&gpu).unwrap().iter().all(|v| v.is_nan()), "nothing ran");
}
