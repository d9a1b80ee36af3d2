//! The feed-forward backward kernels (`shaders/09_backward_ffn.wgsl`) against float64
//! references and against central finite differences of the GPU forward kernels
//! (`shaders/06_activation.wgsl`), plus large inputs that must stay finite. The SwiGLU backward
//! over fused gate/up rows (`ffn_swiglu_backward_gu`) against the reference and bit for bit
//! against the separate halves' kernel; its f16 form (`ffn_swiglu_backward_gu_f16`) bit for bit
//! against that kernel followed by `cast_grad_f16x4`, overflow flag included.

mod common;
#[path = "reference/half.rs"]
mod half;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{TAIL, assert_close, check_tail, gpu, rng, uniform};
use kernels::Gpu;
use kernels::activation::{gelu_inplace, swiglu_combine};
use kernels::backward_ffn::{
    ffn_gelu_backward, ffn_swiglu_backward, ffn_swiglu_backward_gu, ffn_swiglu_backward_gu_f16,
};
use rand::Rng;
use rand::seq::index::sample;

/// Lengths: tiny, around a workgroup, not multiples of 256, past 256 workgroups.
const LENGTHS: [usize; 6] = [1, 255, 257, 1000, 65_537, 300_001];

fn run_gelu_backward(gpu: &Gpu, x: &[f32], dy: &[f32]) -> Vec<f32> {
    let n = x.len();
    let xb = gpu.upload(x).unwrap();
    let dyb = gpu.upload(dy).unwrap();
    let mut dx = gpu.filled(n + TAIL, f32::NAN).unwrap();
    ffn_gelu_backward(gpu, &xb, &dyb, &mut dx, ffn_gelu_backward::Params::new(n as u32)).unwrap();
    let got = dx.read(gpu).unwrap();
    check_tail("ffn_gelu_backward", &got, n);
    got[..n].to_vec()
}

fn run_swiglu_backward(gpu: &Gpu, gate: &[f32], up: &[f32], d_out: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let n = gate.len();
    let g = gpu.upload(gate).unwrap();
    let u = gpu.upload(up).unwrap();
    let d = gpu.upload(d_out).unwrap();
    let mut dg = gpu.filled(n + TAIL, f32::NAN).unwrap();
    let mut du = gpu.filled(n + TAIL, f32::NAN).unwrap();
    ffn_swiglu_backward(gpu, &g, &u, &d, &mut dg, &mut du, ffn_swiglu_backward::Params::new(n as u32)).unwrap();
    let (dg, du) = (dg.read(gpu).unwrap(), du.read(gpu).unwrap());
    check_tail("ffn_swiglu_backward d_gate", &dg, n);
    check_tail("ffn_swiglu_backward d_up", &du, n);
    (dg[..n].to_vec(), du[..n].to_vec())
}

/// L = Σ G·gelu(x) with the GPU forward kernel, summed in float64.
fn gelu_loss(gpu: &Gpu, x: &[f32], g: &[f32]) -> f64 {
    let mut b = gpu.upload(x).unwrap();
    gelu_inplace(gpu, &mut b, gelu_inplace::Params::new(x.len() as u32)).unwrap();
    b.read(gpu).unwrap().iter().zip(g).map(|(&y, &g)| y as f64 * g as f64).sum()
}

/// L = Σ G·swiglu(gate, up) with the GPU forward kernel, summed in float64.
fn swiglu_loss(gpu: &Gpu, gate: &[f32], up: &[f32], g: &[f32]) -> f64 {
    let n = gate.len();
    let (gb, ub) = (gpu.upload(gate).unwrap(), gpu.upload(up).unwrap());
    let mut out = gpu.filled(n, f32::NAN).unwrap();
    swiglu_combine(gpu, &gb, &ub, &mut out, swiglu_combine::Params::new(n as u32)).unwrap();
    out.read(gpu).unwrap().iter().zip(g).map(|(&y, &g)| y as f64 * g as f64).sum()
}

#[track_caller]
fn check_extreme(what: &str, xs: &[f32], got: &[f32], want: &[f64]) {
    for ((&x, &g), &w) in xs.iter().zip(got).zip(want) {
        assert!(g.is_finite(), "{what}({x}) = {g}");
        assert!((g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0), "{what}({x}) = {g}, want {w}");
    }
}

#[test]
fn ffn_gelu_backward_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("ffn_gelu_backward");
    for n in LENGTHS {
        let x = uniform(&mut rng, n, -6.0, 6.0);
        let dy = uniform(&mut rng, n, -2.0, 2.0);
        let got = run_gelu_backward(&gpu, &x, &dy);
        let want = reference::gelu_backward(&reference::widen(&x), &reference::widen(&dy));
        assert_close(&format!("ffn_gelu_backward n={n}"), &got, &want, 1e-5);
    }
}

#[test]
fn ffn_swiglu_backward_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("ffn_swiglu_backward");
    for n in LENGTHS {
        let gate = uniform(&mut rng, n, -6.0, 6.0);
        let up = uniform(&mut rng, n, -3.0, 3.0);
        let d_out = uniform(&mut rng, n, -2.0, 2.0);
        let (dg, du) = run_swiglu_backward(&gpu, &gate, &up, &d_out);
        let (want_dg, want_du) =
            reference::swiglu_backward(&reference::widen(&gate), &reference::widen(&up), &reference::widen(&d_out));
        assert_close(&format!("ffn_swiglu_backward d_gate n={n}"), &dg, &want_dg, 1e-5);
        assert_close(&format!("ffn_swiglu_backward d_up n={n}"), &du, &want_du, 1e-5);
    }
}

#[test]
fn backward_is_finite_for_large_inputs() {
    let Some(gpu) = gpu() else { return };
    let xs = reference::extreme_inputs();
    let ones = vec![1.0f32; xs.len()];
    // gelu'(x) itself (dy = 1): 1 for large x, 0 for very negative x, ≈ 1.13 at its peak.
    let got = run_gelu_backward(&gpu, &xs, &ones);
    let want: Vec<f64> = xs.iter().map(|&x| reference::gelu_grad(x as f64)).collect();
    check_extreme("gelu'", &xs, &got, &want);
    // silu'(g) and silu(g) (up = 1, d_out = 1).
    let (dg, du) = run_swiglu_backward(&gpu, &xs, &ones, &ones);
    let want_dg: Vec<f64> = xs.iter().map(|&x| reference::silu_grad(x as f64)).collect();
    let want_du: Vec<f64> = xs.iter().map(|&x| reference::silu(x as f64)).collect();
    check_extreme("silu'", &xs, &dg, &want_dg);
    check_extreme("silu", &xs, &du, &want_du);
}

// Central finite differences of the GPU forward kernels. For a random upstream gradient G,
// L(x) = Σ G·forward(x) over all n outputs in float64; for a sample of coordinates i,
// (L(x + h·e_i) − L(x − h·e_i)) / (x_i⁺ − x_i⁻) (the actual f32 step) is compared with the
// backward kernel's dL/dx_i. The unperturbed outputs are bitwise the same in both runs, so
// they cancel exactly; what remains:
// - truncation h²/6·|f'''| with inputs of order 1–4 and h = 1e-2: |gelu'''|, |silu'''| ≤ ~1.5,
//   so ≤ ~3e-5;
// - f32 rounding of the two perturbed outputs, ~2·6e-8·|f| / 2h ≈ 3e-5 for |f| ≤ 4.
// Against derivatives of order 0.1–1 that bounds the relative error by ~1e-4 (observed ~1e-5),
// well inside the tolerance 1e-2, which still catches a wrong constant or a missing term.

#[test]
fn ffn_gelu_backward_matches_finite_differences() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("ffn_gelu_fd");
    let n = 300;
    let x = uniform(&mut rng, n, -4.0, 4.0);
    let g = uniform(&mut rng, n, -1.0, 1.0);
    let h = 1e-2f32;
    let coords = sample(&mut rng, n, 24).into_vec();
    let mut fd = Vec::new();
    for &i in &coords {
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[i] += h;
        xm[i] -= h;
        fd.push((gelu_loss(&gpu, &xp, &g) - gelu_loss(&gpu, &xm, &g)) / (xp[i] as f64 - xm[i] as f64));
    }
    let dx = run_gelu_backward(&gpu, &x, &g);
    let got: Vec<f32> = coords.iter().map(|&i| dx[i]).collect();
    eprintln!("ffn_gelu_backward vs finite differences: relative error {:e}", common::rel_err(&got, &fd));
    assert_close("ffn_gelu_backward vs finite differences", &got, &fd, 1e-2);
}

#[test]
fn ffn_swiglu_backward_matches_finite_differences() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("ffn_swiglu_fd");
    let n = 300;
    let gate = uniform(&mut rng, n, -4.0, 4.0);
    let up = uniform(&mut rng, n, -2.0, 2.0);
    let g = uniform(&mut rng, n, -1.0, 1.0);
    let h = 1e-2f32;
    let coords = sample(&mut rng, n, 16).into_vec();
    let (mut fd_gate, mut fd_up) = (Vec::new(), Vec::new());
    for &i in &coords {
        let (mut gp, mut gm) = (gate.clone(), gate.clone());
        gp[i] += h;
        gm[i] -= h;
        fd_gate
            .push((swiglu_loss(&gpu, &gp, &up, &g) - swiglu_loss(&gpu, &gm, &up, &g)) / (gp[i] as f64 - gm[i] as f64));
        let (mut up_p, mut up_m) = (up.clone(), up.clone());
        up_p[i] += h;
        up_m[i] -= h;
        fd_up.push(
            (swiglu_loss(&gpu, &gate, &up_p, &g) - swiglu_loss(&gpu, &gate, &up_m, &g))
                / (up_p[i] as f64 - up_m[i] as f64),
        );
    }
    let (dg, du) = run_swiglu_backward(&gpu, &gate, &up, &g);
    let got_dg: Vec<f32> = coords.iter().map(|&i| dg[i]).collect();
    let got_du: Vec<f32> = coords.iter().map(|&i| du[i]).collect();
    eprintln!(
        "ffn_swiglu_backward vs finite differences: relative error d_gate {:e}, d_up {:e}",
        common::rel_err(&got_dg, &fd_gate),
        common::rel_err(&got_du, &fd_up)
    );
    assert_close("ffn_swiglu_backward d_gate vs finite differences", &got_dg, &fd_gate, 1e-2);
    assert_close("ffn_swiglu_backward d_up vs finite differences", &got_du, &fd_up, 1e-2);
}

#[test]
fn short_buffer_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("ffn_misuse");
    let n = 10 + rng.random_range(0..5usize);
    let x = gpu.upload(&vec![1.0f32; n]).unwrap();
    let dy = gpu.upload(&vec![1.0f32; n]).unwrap();
    let mut dx = gpu.filled(n - 1, f32::NAN).unwrap();
    let e = ffn_gelu_backward(&gpu, &x, &dy, &mut dx, ffn_gelu_backward::Params::new(n as u32)).unwrap_err();
    assert!(matches!(e, kernels::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(dx) >= p.n"), "{e}");
}

/// (rows, cols) of the fused-row cases: widths not multiples of 4 (1, 5, 130, 2, 3: the f16
/// form's fused vec4s straddle the halves), multiples (64, 1024, 400), rows shorter than an
/// invocation's 8 values; the last, 60·400 values (12 workgroups of 2048, 6 of 1024 vec4s), is run
/// where a dimension takes at most 4 workgroups: the 2-D fallback.
const GU_CASES: [(usize, usize); 8] = [(1, 1), (3, 5), (4, 2), (7, 3), (17, 64), (9, 130), (33, 1024), (60, 400)];

/// gate, up and d_out of `[rows, cols]`, fresh, d_out times `scale`.
fn swiglu_inputs(rng: &mut rand::rngs::StdRng, n: usize, scale: f32) -> [Vec<f32>; 3] {
    let gate = uniform(rng, n, -6.0, 6.0);
    let up = uniform(rng, n, -2.0, 2.0);
    let d_out = uniform(rng, n, -2.0, 2.0).into_iter().map(|v| v * scale).collect();
    [gate, up, d_out]
}

fn with_tail(mut v: Vec<f32>) -> Vec<f32> {
    v.extend([f32::NAN; TAIL]);
    v
}

/// `ffn_swiglu_backward_gu`: the fused gradient against float64 (d_gate, d_up of the reference
/// side by side, 1e-5 as the separate kernel) and bit for bit the separate kernel's two outputs
/// fused on the host; the inputs' tails and the output's poisoned.
#[test]
fn ffn_swiglu_backward_gu_matches_the_reference_and_the_separate_kernel() {
    let Some(gpu) = gpu() else { return };
    let small = kernels::GpuOptions::from_env().max_workgroups_per_dimension(4);
    let Some(gpu2d) = common::gpu_with(small) else { return };
    let mut rng = rng("ffn_swiglu_backward_gu");
    for (i, (rows, cols)) in GU_CASES.into_iter().enumerate() {
        let kgpu = if i == GU_CASES.len() - 1 { &gpu2d } else { &gpu };
        let n = rows * cols;
        let [gate, up, d_out] = swiglu_inputs(&mut rng, n, 1.0);
        let gu = kgpu.upload(&with_tail(reference::fuse_halves(&gate, &up, rows, cols))).unwrap();
        let d = kgpu.upload(&with_tail(d_out.clone())).unwrap();
        let mut dgu = kgpu.filled(2 * n + TAIL, f32::NAN).unwrap();
        let p = ffn_swiglu_backward_gu::RowsParams::new(rows as u32, cols as u32);
        ffn_swiglu_backward_gu(kgpu, &gu, &d, &mut dgu, p).unwrap();
        let what = format!("ffn_swiglu_backward_gu ({rows}, {cols})");
        let got = dgu.read(kgpu).unwrap();
        check_tail(&what, &got, 2 * n);
        let (rg, ru) =
            reference::swiglu_backward(&reference::widen(&gate), &reference::widen(&up), &reference::widen(&d_out));
        assert_close(&what, &got[..2 * n], &reference::fuse_halves(&rg, &ru, rows, cols), 1e-5);
        let (dg, du) = run_swiglu_backward(&gpu, &gate, &up, &d_out);
        let sep = reference::fuse_halves(&dg, &du, rows, cols);
        assert!(common::same_bits(&got[..2 * n], &sep), "{what}: not ffn_swiglu_backward's bits");
    }
}

/// `ffn_swiglu_backward_gu_f16`: the fused gradient's f16 rows are the bits of
/// `ffn_swiglu_backward_gu` on the same inputs followed by `cast_grad_f16x4`, and the flag is
/// raised exactly when that cast raises it; against float64 within f16 rounding (each half within
/// 2⁻¹¹ relative of the f32 value, which is within 1e-5 of the reference as above; subnormals
/// within 2⁻²⁵ absolute: 6e-4 norm-wise). The cases of `GU_CASES` (padded rows; vec4s across
/// the halves; four vec4s an invocation for multiples of 4; the 2-D grid), the inputs' tails
/// poisoned; then d_out scaled by 10⁵, past f16's range: clamped like the cast and flagged.
#[test]
fn ffn_swiglu_backward_gu_f16_is_the_f32_kernel_then_the_cast() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "ffn_swiglu_backward_gu_f16") {
        return;
    }
    let small = kernels::GpuOptions::from_env().max_workgroups_per_dimension(4);
    let Some(gpu2d) = common::gpu_with(small) else { return };
    let mut rng = rng("ffn_swiglu_backward_gu_f16");
    for (i, (rows, cols)) in GU_CASES.into_iter().enumerate() {
        // The f16 kernel on `kgpu`; the f32 kernel and the cast always on `gpu`.
        let kgpu = if i == GU_CASES.len() - 1 { &gpu2d } else { &gpu };
        for scale in [1.0f32, 1.0e5] {
            let what = format!("ffn_swiglu_backward_gu_f16 ({rows}, {cols}) scale {scale}");
            let n = rows * cols;
            let [gate, up, d_out] = swiglu_inputs(&mut rng, n, scale);
            let gu_host = with_tail(reference::fuse_halves(&gate, &up, rows, cols));
            let (gu, d) = (kgpu.upload(&gu_host).unwrap(), kgpu.upload(&with_tail(d_out.clone())).unwrap());
            let mut dgu16 = half::poisoned16(kgpu, rows, 2 * cols);
            let mut flag = half::flag(kgpu);
            let p = ffn_swiglu_backward_gu_f16::RowsParams::new(rows as u32, cols as u32);
            ffn_swiglu_backward_gu_f16(kgpu, &gu, &d, &mut dgu16, &mut flag, p).unwrap();
            let got = half::read16(kgpu, &dgu16, rows, 2 * cols, &what);
            let got_flag = half::read_flag(kgpu, &flag, &what);
            let (gu, d) = (gpu.upload(&gu_host).unwrap(), gpu.upload(&d_out).unwrap());
            let mut dgu = gpu.filled(2 * n, f32::NAN).unwrap();
            let p = ffn_swiglu_backward_gu::RowsParams::new(rows as u32, cols as u32);
            ffn_swiglu_backward_gu(&gpu, &gu, &d, &mut dgu, p).unwrap();
            let (want, want_flag) = half::cast_grad(&gpu, &dgu, rows, 2 * cols);
            half::same16(&got, &want, &what);
            assert_eq!(got_flag, want_flag, "{what}: the flag is not the cast's");
            let over = dgu.read(&gpu).unwrap().iter().any(|v| v.abs() > 65504.0);
            assert_eq!(got_flag, u32::from(over), "{what}: flag {got_flag} with a gradient beyond ±65504: {over}");
            // d_out of 10⁵ takes some of 64 or more gradients past f16's range (each does with
            // probability over 1/4).
            assert!(scale == 1.0 || n < 64 || over, "{what}: no gradient beyond f16's range");
            if scale == 1.0 {
                let (rg, ru) = reference::swiglu_backward(
                    &reference::widen(&gate),
                    &reference::widen(&up),
                    &reference::widen(&d_out),
                );
                let want = reference::fuse_halves(&rg, &ru, rows, cols);
                assert_close(&what, &half::widen16(&got, rows, 2 * cols, &what), &want, 6e-4);
            }
        }
    }
}

#[test]
fn ffn_swiglu_backward_gu_short_buffer_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let gu = gpu.upload(&[1.0f32; 20]).unwrap();
    let d = gpu.upload(&[1.0f32; 10]).unwrap();
    // The fused gradient of 2 rows of 5 needs 20 values.
    let mut dgu = gpu.filled(19, f32::NAN).unwrap();
    let p = ffn_swiglu_backward_gu::RowsParams::new(2, 5);
    let e = ffn_swiglu_backward_gu(&gpu, &gu, &d, &mut dgu, p).unwrap_err();
    assert!(matches!(e, kernels::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(dgu)"), "{e}");
    assert!(dgu.read(&gpu).unwrap().iter().all(|v| v.is_nan()), "nothing ran");
}
