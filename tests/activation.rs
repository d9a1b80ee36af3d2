//! The activation kernels (`shaders/06_activation.wgsl`) against float64 references: lengths
//! around and past multiples of 256 and past 65535 workgroups (16,776,961 values, the 2-D grid),
//! outputs poisoned with NaN, and large inputs (|x| up to 1e4) that must stay finite.

mod common;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{TAIL, assert_close, check_tail, gpu, rng, uniform};
use kernels::Gpu;
use kernels::activation::{gelu_inplace, swiglu_combine};

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
