//! The fused f16-output kernels (`norm::rmsnorm_f16`, `norm::residual_rmsnorm_f16`, `activation::swiglu_f16`, `activation::swiglu_gu_f16`, `optimizer::adamw_mixed`, `cast::cast_f16x4`; `shaders/lib/f16x4.wgsl`) against float64 references on fresh random inputs,
//! outputs poisoned first (NaN, and a NaN tail that must survive), row lengths that are not
//! multiples of 4 or of the workgroup's 256 columns, rows wider than the 1024 columns kept in
//! registers, and the 2-D grid fallback.
//!
//! f16 outputs: the kernels compute in f32 and round once to f16, the reference computes in f64
//! and rounds once to f16. The f32 result differs from the exact one by a few f32 ulps (2⁻²³
//! relative), 2¹³ times finer than an f16 ulp, so the two roundings agree except where the exact
//! value lies within those few f32 ulps of a midpoint between two f16 values: there they may
//! pick neighbouring f16 values. So each f16 output is allowed 1 f16 ulp from the rounded
//! reference, and no more.

mod common;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{Rounded, TAIL, assert_within, gpu, gpu_with, has_f16, rng, uniform};
use kernels::activation::{swiglu_f16, swiglu_gu_f16};
use kernels::cast::cast_f16x4;
use kernels::norm::{residual_rmsnorm_f16, rmsnorm_f16};
use kernels::ops::{self, F16x4};
use kernels::optimizer::adamw_mixed;
use kernels::{Gpu, GpuOptions, f16};
use rand::Rng;

fn nan16() -> F16x4 {
    [f16::from_f32(f32::NAN); 4]
}

/// An f16 as a position on the number line (adjacent finite values differ by 1; ±0 both 0).
fn ordered(h: f16) -> i32 {
    let b = h.to_bits() as i32;
    if b & 0x8000 != 0 { -(b & 0x7fff) } else { b }
}

/// The exact value `want` as the kernels round it: clamped to ±65504, NaN kept, to nearest f16.
fn round16(want: f64) -> f16 {
    f16::from_f64(if want.is_nan() { want } else { want.clamp(-65504.0, 65504.0) })
}

/// Asserts the f16x4 rows `got` ([rows, ⌈cols/4⌉]) hold `want` ([rows, cols] row-major) rounded
/// to f16 within 1 f16 ulp (module docs), NaN where `want` is NaN, and exact zeros in the row
/// padding; and that the `TAIL` vec4s after them are still NaN.
#[track_caller]
fn check16(what: &str, got: &[F16x4], want: &[f64], rows: usize, cols: usize) {
    let cq = cols.div_ceil(4);
    assert_eq!(got.len(), rows * cq + TAIL);
    for r in 0..rows {
        for c in 0..cq * 4 {
            let g = got[r * cq + c / 4][c % 4];
            if c >= cols {
                assert!(g.to_bits() == 0, "{what}: padding at row {r} column {c} is {g}, not 0");
                continue;
            }
            let w = want[r * cols + c];
            if w.is_nan() {
                assert!(g.is_nan(), "{what}: row {r} column {c}: {g}, want NaN");
                continue;
            }
            let d = (ordered(g) - ordered(round16(w))).abs();
            assert!(!g.is_nan() && d <= 1, "{what}: row {r} column {c}: {g} vs {w} ({} f16 ulps)", d);
        }
    }
    assert!(got[rows * cq..].iter().all(|v| v.iter().all(|h| h.is_nan())), "{what}: wrote past the output");
}

/// The reference RMSNorm of the `[rows, d]` x: (y, rrms) in f64.
fn norm_ref(x: &[f32], gamma: &[f32], rows: usize, d: usize, eps: f32) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * d];
    let mut rr = vec![0.0; rows];
    for r in 0..rows {
        let ss: f64 = x[r * d..(r + 1) * d].iter().map(|&v| v as f64 * v as f64).sum();
        rr[r] = 1.0 / (ss / d as f64 + eps as f64).sqrt();
        for j in 0..d {
            y[r * d + j] = x[r * d + j] as f64 * rr[r] * gamma[j] as f64;
        }
    }
    (y, rr)
}

fn poisoned16(gpu: &Gpu, rows: usize, cols: usize) -> kernels::Buffer<F16x4> {
    gpu.upload(&vec![nan16(); ops::f16x4_len(rows, cols) + TAIL]).unwrap()
}

/// One `rmsnorm_f16` (or with `res`, `residual_rmsnorm_f16`) on fresh inputs, checked.
fn norm_case(gpu: &Gpu, rng: &mut rand::rngs::StdRng, rows: usize, d: usize, residual: bool) {
    let eps = 1e-5f32;
    let what = format!("{} ({rows}, {d})", if residual { "residual_rmsnorm_f16" } else { "rmsnorm_f16" });
    let mut x0 = uniform(rng, rows * d, -3.0, 3.0);
    if rows >= 3 {
        // A NaN in row 1: that row's rrms and every one of its outputs are NaN (kept through the
        // f16 rounding, which clamps everything else), the other rows as they were.
        x0[d + rng.random_range(0..d)] = f32::NAN;
    }
    let gamma = uniform(rng, d, -2.0, 2.0);
    let res = uniform(rng, rows * d, -1.0, 1.0);
    let mut xpad = x0.clone();
    xpad.extend([f32::NAN; TAIL]);
    let mut xb = gpu.upload(&xpad).unwrap();
    let gb = gpu.upload(&gamma).unwrap();
    let mut y = poisoned16(gpu, rows, d);
    let mut rrms = common::poisoned(gpu, rows);
    if residual {
        let rb = gpu.upload(&res).unwrap();
        let p = kernels::norm::residual_rmsnorm_f16::NormParams::new(rows as u32, d as u32, eps);
        residual_rmsnorm_f16(gpu, &mut xb, &rb, &gb, &mut y, &mut rrms, p).unwrap();
    } else {
        let p = kernels::norm::rmsnorm_f16::NormParams::new(rows as u32, d as u32, eps);
        rmsnorm_f16(gpu, &xb, &gb, &mut y, &mut rrms, p).unwrap();
    }
    // The input the norm saw: x + res in f32 (one correctly rounded addition), written back.
    let xin: Vec<f32> = if residual { x0.iter().zip(&res).map(|(a, b)| a + b).collect() } else { x0.clone() };
    let xg = xb.read(gpu).unwrap();
    for (i, (g, w)) in xg.iter().zip(&xin).enumerate() {
        assert!(g.to_bits() == w.to_bits() || (w.is_nan() && g.is_nan()), "{what}: x[{i}] = {g}, want {w}");
    }
    assert!(xg[rows * d..].iter().all(|v| v.is_nan()), "{what}: wrote past x");
    let (yw, rw) = norm_ref(&xin, &gamma, rows, d, eps);
    let rg = rrms.read(gpu).unwrap();
    common::check_tail(&format!("{what} rrms"), &rg, rows);
    for r in 0..rows {
        if rw[r].is_nan() {
            assert!(rg[r].is_nan(), "{what}: rrms[{r}] = {}, want NaN (a NaN in the row)", rg[r]);
            continue;
        }
        let e = (rg[r] as f64 - rw[r]).abs() / rw[r];
        assert!(e < 1e-5, "{what}: rrms[{r}] = {} vs {} (relative error {e:e})", rg[r], rw[r]);
    }
    check16(&what, &y.read(gpu).unwrap(), &yw, rows, d);
}

// Row lengths: 1, not multiples of 4 (5, 130, 1030, 2051), a multiple of 4 but not of 256 (768),
// wider than the 1024 columns kept in registers (1030, 2051: the loop that reads x again).
const NORM_SHAPES: [(usize, usize); 7] = [(1, 1), (3, 5), (5, 768), (7, 130), (4, 256), (6, 1030), (3, 2051)];

#[test]
fn rmsnorm_f16_matches_a_float64_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "rmsnorm_f16") {
        return;
    }
    let mut rng = rng("rmsnorm_f16");
    for (rows, d) in NORM_SHAPES {
        norm_case(&gpu, &mut rng, rows, d, false);
    }
}

#[test]
fn residual_rmsnorm_f16_adds_in_place_and_normalises() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "residual_rmsnorm_f16") {
        return;
    }
    let mut rng = rng("residual_rmsnorm_f16");
    for (rows, d) in NORM_SHAPES {
        norm_case(&gpu, &mut rng, rows, d, true);
    }
}

#[test]
fn rmsnorm_f16_kernels_on_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu, "rmsnorm_f16 on the 2-D grid") {
        return;
    }
    let mut rng = rng("rmsnorm_f16_2d");
    // 37 rows: 10 workgroups of 4 rows, over the limit of 4 per dimension (a 4 × 3 grid whose
    // last two workgroups have no rows; the last real one has one row).
    for residual in [false, true] {
        norm_case(&gpu, &mut rng, 37, 66, residual);
    }
}

/// One `swiglu_f16` of gate, up ([rows, cols]), checked.
fn swiglu_case(gpu: &Gpu, gate: &[f32], up: &[f32], rows: usize, cols: usize) {
    let gb = gpu.upload(gate).unwrap();
    let ub = gpu.upload(up).unwrap();
    let mut out = poisoned16(gpu, rows, cols);
    let p = kernels::activation::swiglu_f16::RowsParams::new(rows as u32, cols as u32);
    swiglu_f16(gpu, &gb, &ub, &mut out, p).unwrap();
    let want = reference::swiglu(&reference::widen(gate), &reference::widen(up));
    check16(&format!("swiglu_f16 ({rows}, {cols})"), &out.read(gpu).unwrap(), &want, rows, cols);
}

#[test]
fn swiglu_f16_matches_a_float64_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "swiglu_f16") {
        return;
    }
    let mut rng = rng("swiglu_f16");
    // cols % 4 == 0 takes the 4-vec4 path (whole workgroups and a partial last one); the others
    // the per-vec4 path with row padding.
    for (rows, cols) in [(1, 1), (3, 5), (7, 130), (16, 256), (5, 1027), (9, 3072)] {
        let mut gate = uniform(&mut rng, rows * cols, -8.0, 8.0);
        let mut up = uniform(&mut rng, rows * cols, -4.0, 4.0);
        // Tails of the sigmoid, products beyond the f16 range (clamped to ±65504), NaN kept.
        let n = rows * cols;
        for (i, (g, u)) in
            [(-1.0e4f32, 3.0f32), (1.0e4, 30.0), (50.0, -2000.0), (f32::NAN, 1.0)].into_iter().enumerate()
        {
            if i < n {
                gate[n - 1 - i] = g;
                up[n - 1 - i] = u;
            }
        }
        swiglu_case(&gpu, &gate, &up, rows, cols);
    }
}

#[test]
fn swiglu_f16_on_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu, "swiglu_f16 on the 2-D grid") {
        return;
    }
    let mut rng = rng("swiglu_f16_2d");
    // 6 workgroups of 1024 vec4s each time: with padding (160 × 33 vec4s) and without (64 × 96).
    for (rows, cols) in [(160, 130), (64, 384)] {
        let gate = uniform(&mut rng, rows * cols, -6.0, 6.0);
        let up = uniform(&mut rng, rows * cols, -3.0, 3.0);
        swiglu_case(&gpu, &gate, &up, rows, cols);
    }
}

/// One `swiglu_gu_f16` of gate and up (`[rows, cols]` each) as fused `[rows, 2·cols]` rows,
/// checked against float64 and bit for bit against `swiglu_f16` on the separate halves.
fn swiglu_gu_case(gpu: &Gpu, gate: &[f32], up: &[f32], rows: usize, cols: usize) {
    let mut gu = reference::fuse_halves(gate, up, rows, cols);
    gu.extend([f32::NAN; TAIL]);
    let gub = gpu.upload(&gu).unwrap();
    let mut out = poisoned16(gpu, rows, cols);
    swiglu_gu_f16(gpu, &gub, &mut out, swiglu_gu_f16::RowsParams::new(rows as u32, cols as u32)).unwrap();
    let got = out.read(gpu).unwrap();
    let what = format!("swiglu_gu_f16 ({rows}, {cols})");
    let want = reference::swiglu(&reference::widen(gate), &reference::widen(up));
    check16(&what, &got, &want, rows, cols);
    let (gb, ub) = (gpu.upload(gate).unwrap(), gpu.upload(up).unwrap());
    let mut sep = poisoned16(gpu, rows, cols);
    swiglu_f16(gpu, &gb, &ub, &mut sep, swiglu_f16::RowsParams::new(rows as u32, cols as u32)).unwrap();
    assert!(same16(&got, &sep.read(gpu).unwrap()), "{what}: not swiglu_f16's bits");
}

#[test]
fn swiglu_gu_f16_matches_a_float64_reference_and_the_separate_kernel() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "swiglu_gu_f16") {
        return;
    }
    let mut rng = rng("swiglu_gu_f16");
    // cols % 4 == 0 takes the 4-vec4 path (whole workgroups and a partial last one); the others
    // the per-vec4 path with row padding.
    for (rows, cols) in [(1, 1), (3, 5), (7, 130), (16, 256), (5, 1027), (9, 3072)] {
        let n = rows * cols;
        let mut gate = uniform(&mut rng, n, -8.0, 8.0);
        let mut up = uniform(&mut rng, n, -4.0, 4.0);
        // Tails of the sigmoid, products beyond the f16 range (clamped to ±65504), NaN kept.
        for (i, (g, u)) in
            [(-1.0e4f32, 3.0f32), (1.0e4, 30.0), (50.0, -2000.0), (f32::NAN, 1.0)].into_iter().enumerate()
        {
            if i < n {
                gate[n - 1 - i] = g;
                up[n - 1 - i] = u;
            }
        }
        swiglu_gu_case(&gpu, &gate, &up, rows, cols);
    }
    // 6 workgroups of 1024 vec4s each where a dimension takes at most 4 (the 2-D grid): with
    // padding (160 × 33 vec4s) and without (64 × 96).
    let Some(gpu2d) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    for (rows, cols) in [(160, 130), (64, 384)] {
        let gate = uniform(&mut rng, rows * cols, -6.0, 6.0);
        let up = uniform(&mut rng, rows * cols, -3.0, 3.0);
        swiglu_gu_case(&gpu2d, &gate, &up, rows, cols);
    }
}

/// `cast::cast_f16x4` of v ([rows, cols]) into a poisoned buffer.
fn cast(gpu: &Gpu, v: &[f32], rows: usize, cols: usize) -> Vec<F16x4> {
    let src = gpu.upload(v).unwrap();
    let mut a = poisoned16(gpu, rows, cols);
    cast_f16x4(gpu, &src, &mut a, kernels::cast::cast_f16x4::RowsParams::new(rows as u32, cols as u32)).unwrap();
    a.read(gpu).unwrap()
}

/// Bitwise equality of f16x4 vectors (NaN payloads aside: any NaN matches any NaN).
fn same16(a: &[F16x4], b: &[F16x4]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (0..4).all(|c| x[c].to_bits() == y[c].to_bits() || (x[c].is_nan() && y[c].is_nan())))
}

#[test]
fn cast_f16x4_is_bitwise_the_host_cast() {
    for limit in [None, Some(4)] {
        let options = match limit {
            Some(l) => GpuOptions::from_env().max_workgroups_per_dimension(l),
            None => GpuOptions::from_env(),
        };
        let Some(gpu) = gpu_with(options) else { return };
        if !has_f16(&gpu, "cast::cast_f16x4") {
            return;
        }
        let mut rng = rng("fused_cast_f16x4");
        // Padded rows and whole ones; (160, 130) and (64, 384) take 6 workgroups (2-D at limit 4).
        for (rows, cols) in [(1, 1), (3, 5), (7, 130), (16, 256), (160, 130), (64, 384)] {
            let n = rows * cols;
            // Magnitudes from f16 subnormals to past the f16 range.
            let exps = uniform(&mut rng, n, -8.0, 5.5);
            let mut v: Vec<f32> =
                uniform(&mut rng, n, -1.0, 1.0).into_iter().zip(exps).map(|(u, e)| u * 10f32.powf(e)).collect();
            let specials = [
                70000.0f32,
                -1.0e6,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                65519.0,
                65520.0,
                1.0e-7,
                -3.0e-8,
                0.0,
            ];
            for (i, s) in specials.into_iter().enumerate() {
                if i < n {
                    v[(i * 7919) % n] = s;
                }
            }
            let a = cast(&gpu, &v, rows, cols);
            let what = format!("({rows}, {cols}), limit {limit:?}");
            let len = ops::f16x4_len(rows, cols);
            assert!(same16(&a[..len], &ops::to_f16x4(&v, rows, cols)), "{what}: differs from ops::to_f16x4");
            assert!(a[len..].iter().all(|x| x.iter().all(|h| h.is_nan())), "{what}: wrote past the output");
        }
    }
}

/// AdamW hyper-parameters of the tests.
struct Hyper {
    lr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    wd: f32,
}

fn adam_params(rows: usize, cols: usize, h: &Hyper, step: u32) -> kernels::optimizer::adamw_mixed::AdamParams {
    kernels::optimizer::adamw_mixed::AdamParams::new(
        rows as u32,
        cols as u32,
        h.lr,
        h.b1,
        h.b2,
        h.eps,
        h.wd,
        step,
        (h.b1 as f64).ln() as f32,
        (h.b2 as f64).ln() as f32,
    )
}

/// 1 − β^t as the kernel's `one_minus_pow` computes it from ln β rounded to f32 (`ln_b`): the
/// exact value and a bound on the kernel's error (the rounding of z = t·ln β, then each step of
/// the series, or `exp`, the truncation of the series included). Near z = −0.5, where the
/// kernel's f32 z may take either branch, the larger bound of the two.
fn one_minus_pow(b: f64, ln_b: f32, t: i32) -> Rounded {
    let exact = -(t as f64 * b.ln()).exp_m1();
    let lnb = Rounded { v: b.ln(), e: (ln_b as f64 - b.ln()).abs() };
    let z = Rounded::exact(t as f64).mul(lnb);
    let mut e: f64 = 0.0;
    if z.v + z.e > -0.5 {
        let mut acc = Rounded::constant(1.0 / 40320.0);
        for c in [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5] {
            acc = Rounded::constant(c).add(z.mul(acc));
        }
        let s = Rounded::exact(1.0).add(z.mul(acc));
        let r = Rounded { v: -z.v, e: z.e }.mul(s);
        e = e.max(r.e + (r.v - exact).abs());
    }
    if z.v - z.e <= -0.5 {
        let r = Rounded::exact(1.0).sub(z.exp());
        e = e.max(r.e + (r.v - exact).abs());
    }
    Rounded { v: exact, e }
}

/// The AdamW of one element at effective step t, with gradient factor `factor`, the operations
/// in the kernel's order (`lib/adam.wgsl`): the exact f64 result and how far the kernel's f32
/// arithmetic may land from it. Moments are bounded absolutely: `β1·m + (1 − β1)·g` can nearly
/// cancel, and then only the rounding of its terms bounds its error.
fn adam_ref(p: Rounded, g: f64, m: Rounded, v: Rounded, factor: Rounded, h: &Hyper, t: i32) -> [Rounded; 3] {
    let x = |a: f32| Rounded::exact(a as f64);
    let (b1, b2) = (x(h.b1), x(h.b2));
    let one = Rounded::exact(1.0);
    let bias1 = one_minus_pow(h.b1 as f64, (h.b1 as f64).ln() as f32, t);
    let bias2 = one_minus_pow(h.b2 as f64, (h.b2 as f64).ln() as f32, t);
    let gc = Rounded::exact(g).mul(factor);
    let m1 = b1.mul(m).add(one.sub(b1).mul(gc));
    let v1 = b2.mul(v).add(one.sub(b2).mul(gc.mul(gc)));
    let update = m1.div(bias1).div(v1.div(bias2).sqrt().add(x(h.eps))).add(x(h.wd).mul(p));
    [p.sub(x(h.lr).mul(update)), m1, v1]
}

/// GPU buffers of one tensor's AdamW state, each with a NaN tail.
struct Tensor {
    p: kernels::Buffer<f32>,
    g: kernels::Buffer<f32>,
    m: kernels::Buffer<f32>,
    v: kernels::Buffer<f32>,
    p16: kernels::Buffer<F16x4>,
}

fn with_tail(x: &[f32]) -> Vec<f32> {
    x.iter().copied().chain([f32::NAN; TAIL]).collect()
}

impl Tensor {
    fn new(gpu: &Gpu, p: &[f32], g: &[f32], m: &[f32], v: &[f32], rows: usize, cols: usize) -> Tensor {
        Tensor {
            p: gpu.upload(&with_tail(p)).unwrap(),
            g: gpu.upload(&with_tail(g)).unwrap(),
            m: gpu.upload(&with_tail(m)).unwrap(),
            v: gpu.upload(&with_tail(v)).unwrap(),
            p16: poisoned16(gpu, rows, cols),
        }
    }

    fn step(&mut self, gpu: &Gpu, state: &kernels::Buffer<f32>, a: kernels::optimizer::adamw_mixed::AdamParams) {
        adamw_mixed(gpu, &mut self.p, &mut self.g, &mut self.m, &mut self.v, &mut self.p16, state, a).unwrap();
    }

    /// (p, g, m, v) without the tails, after checking the tails, the zeroed gradient and the
    /// f16 copy.
    fn read(&self, gpu: &Gpu, rows: usize, cols: usize, what: &str) -> [Vec<f32>; 4] {
        let out = self.read_raw(gpu, rows, cols, what);
        assert!(out[1].iter().all(|&x| x.to_bits() == 0), "{what}: the gradient was not zeroed");
        let got16 = self.p16.read(gpu).unwrap();
        let len16 = ops::f16x4_len(rows, cols);
        assert!(
            same16(&got16[..len16], &ops::to_f16x4(&out[0], rows, cols)),
            "{what}: the f16 copy is not the master's"
        );
        assert!(got16[len16..].iter().all(|x| x.iter().all(|h| h.is_nan())), "{what}: wrote past the f16 copy");
        out
    }

    /// (p, g, m, v) without the tails, after checking the tails.
    fn read_raw(&self, gpu: &Gpu, rows: usize, cols: usize, what: &str) -> [Vec<f32>; 4] {
        let n = rows * cols;
        let mut out = [&self.p, &self.g, &self.m, &self.v].map(|b| b.read(gpu).unwrap());
        for x in &mut out {
            assert!(x[n..].iter().all(|t| t.is_nan()), "{what}: wrote past n");
            x.truncate(n);
        }
        out
    }
}

/// Asserts p, m, v against the reference, element by element within the rounding the kernel's
/// arithmetic allows. The bound on p is a few ulps of p plus the rounding of lr·update (~1e-7
/// against a change of ~1e-2), so a wrong bias correction or factor shows at full size.
#[track_caller]
fn check_adam(what: &str, got: &[Vec<f32>; 4], want: &[[Rounded; 3]]) {
    for (k, (name, got)) in [(0, ("p", &got[0])), (1, ("m", &got[2])), (2, ("v", &got[3]))] {
        assert_within(&format!("{what} {name}"), got, &want.iter().map(|w| w[k]).collect::<Vec<_>>());
    }
}

/// One step on fresh values with a given state: the loss scale S, the skips so far, skipped or
/// not; `step` is the 1-based step number.
fn adam_case(gpu: &Gpu, (rows, cols): (usize, usize), h: &Hyper, (step, skipped): (u32, u32), skip: bool, seed: &str) {
    let mut rng = rng(seed);
    let n = rows * cols;
    let s = 512.0f32;
    let g = uniform(&mut rng, n, -s, s);
    let m = uniform(&mut rng, n, -0.1, 0.1);
    let v = uniform(&mut rng, n, 0.0, 0.01);
    let p = uniform(&mut rng, n, -1.0, 1.0);
    let factor = 0.5 / s;
    let state = [s, 0.0, skipped as f32, if skip { 1.0 } else { 0.0 }, if skip { 0.0 } else { factor }, 0.0, 0.0, 0.0];
    let st = gpu.upload(&state).unwrap();
    let mut t = Tensor::new(gpu, &p, &g, &m, &v, rows, cols);
    t.step(gpu, &st, adam_params(rows, cols, h, step));
    let what = format!("({rows}, {cols}) step {step} skipped {skipped} skip {skip}");
    let got = t.read(gpu, rows, cols, &what);
    if skip {
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got[0]), bits(&p), "{what}: a skipped step changed p");
        assert_eq!(bits(&got[2]), bits(&m), "{what}: a skipped step changed m");
        assert_eq!(bits(&got[3]), bits(&v), "{what}: a skipped step changed v");
    } else {
        let te = (step - skipped) as i32;
        let x = |a: f32| Rounded::exact(a as f64);
        let want: Vec<_> = (0..n).map(|i| adam_ref(x(p[i]), g[i] as f64, x(m[i]), x(v[i]), x(factor), h, te)).collect();
        check_adam(&what, &got, &want);
    }
}

const HYPER: Hyper = Hyper { lr: 1e-2, b1: 0.9, b2: 0.95, eps: 1e-8, wd: 0.1 };

#[test]
fn adamw_mixed_matches_a_float64_reference_at_the_effective_step() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "optimizer::adamw_mixed") {
        return;
    }
    // β2 = 0.999 at t = 1: 1 − β2^t = 0.001, where computing it as 1 − exp would lose digits.
    let slow = Hyper { b2: 0.999, ..HYPER };
    for (rows, cols) in [(1, 1), (1, 13), (5, 7), (64, 40), (3, 1024), (9, 516)] {
        // (step, skips so far): t = 1, 2 (one skip), 8 (two), 997 (β^t ≈ 0 for β1; β2 = 0.999:
        // 1 − 0.369), 3000 past the series' range for both.
        for (step, skipped) in [(1, 0), (3, 1), (10, 2), (1000, 3), (3000, 0)] {
            adam_case(&gpu, (rows, cols), &HYPER, (step, skipped), false, "fused_adamw");
            adam_case(&gpu, (rows, cols), &slow, (step, skipped), false, "fused_adamw_b2");
        }
        adam_case(&gpu, (rows, cols), &HYPER, (5, 1), true, "fused_adamw_skip");
    }
}

#[test]
fn adamw_mixed_on_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu, "optimizer::adamw_mixed on the 2-D grid") {
        return;
    }
    // 6 workgroups of 1024 vec4s: padded rows (160 × 33 vec4s) and whole ones (64 × 96).
    adam_case(&gpu, (160, 130), &HYPER, (4, 1), false, "fused_adamw_2d");
    adam_case(&gpu, (64, 384), &HYPER, (4, 1), false, "fused_adamw_2d_whole");
}

/// Three steps through the loss scaler on the GPU (`optimizer::scaler_update`, clipping off): a clean
/// one, one whose gradient cast overflowed (skipped: nothing changes, Adam's step count does not
/// advance), a clean one that must use the bias correction of t = 2, not 3.
#[test]
fn a_step_the_scaler_skips_does_not_advance_the_bias_correction() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "optimizer::adamw_mixed after a skip") {
        return;
    }
    let mut rng = rng("fused_adamw_scaler_skip");
    let (rows, cols) = (6, 130);
    let n = rows * cols;
    let h = Hyper { b2: 0.999, ..HYPER };
    let p = uniform(&mut rng, n, -1.0, 1.0);
    let zeros = vec![0.0f32; n];
    let mut t = Tensor::new(&gpu, &p, &zeros, &zeros, &zeros, rows, cols);
    let mut state = gpu.upload(&[1024.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]).unwrap();
    let stats = gpu.upload(&[1.0f32, 1.0, 1.0, 0.0]).unwrap();
    let sp = kernels::optimizer::scaler_update::ScalerParams::new(1000, 0.0);
    // The reference's master and moments, with the bounds of the GPU's rounding so far.
    let zero = Rounded::exact(0.0);
    let mut want: Vec<[Rounded; 3]> = p.iter().map(|&x| [Rounded::exact(x as f64), zero, zero]).collect();
    for (step, overflow) in [(1u32, false), (2, true), (3, false)] {
        let before = t.read_raw(&gpu, rows, cols, "before");
        let g = uniform(&mut rng, n, -1000.0, 1000.0);
        t.g.write(&gpu, &with_tail(&g)).unwrap();
        let mut flag = gpu.upload(&[overflow as u32]).unwrap();
        kernels::optimizer::scaler_update(&gpu, &stats, &mut flag, &mut state, sp).unwrap();
        t.step(&gpu, &state, adam_params(rows, cols, &h, step));
        let what = format!("step {step} (overflow {overflow})");
        let got = t.read(&gpu, rows, cols, &what);
        if overflow {
            assert!(common::same_bits(&got[0], &before[0]), "{what}: the skipped step changed p");
            assert!(common::same_bits(&got[2], &before[2]), "{what}: the skipped step changed m");
            assert!(common::same_bits(&got[3], &before[3]), "{what}: the skipped step changed v");
            continue;
        }
        // Step 1 is Adam's t = 1; step 3 follows one skip: t = 2. The loss scale is 1024 on both
        // (halved to 512 by the skip: step 3's factor is 1/512).
        let (te, s) = if step == 1 { (1, 1024.0) } else { (2, 512.0) };
        // The factor clip / S, with the clip off: 1 / S, a division on the GPU.
        let factor = Rounded::exact(1.0).div(Rounded::exact(s));
        for i in 0..n {
            let [wp, wm, wv] = want[i];
            want[i] = adam_ref(wp, g[i] as f64, wm, wv, factor, &h, te);
        }
        check_adam(&what, &got, &want);
    }
}
