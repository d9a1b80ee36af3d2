//! The f32-accurate products over the f32 range (`linear::precise_*`, `linear::*_pres*`, `shaders/lib/precise.wgsl`,
//! the scaled split core of `kernels::gemm`) against float64 references on fresh random,
//! non-symmetric inputs, whatever variant the adapter picks: on lavapipe the portable variants
//! (f32 FMAs on the same scaled hi/lo halves), on an adapter with cooperative matrices the
//! tensor-core variants. Error metric: max over outputs of |c − Σab| / Σ|a||b|,
//! ≤ 1e-6. Outputs are poisoned (NaN) first and the elements past them must stay so; shapes are
//! off the 128×128 blocks, and whole blocks are included so that tensor cores run where they
//! exist. The range tests scale whole operands by 1e-12 … 1e+30 and mix magnitudes.

mod common;
#[path = "reference/linear16.rs"]
mod reference;

use common::{gpu, gpu_with, has_f16, rng, uniform};
use kernels::gemm::{self, Core, Epilogue, Gemm, GemmWorkspace, Mat, Precision};
use kernels::linear::{self, matmul_at_pres_split, matmul_pres, matmul_t_pres, precise_absmax, precise_clear};
use kernels::ops::{self, F16x4};
use kernels::{Buffer, Error, Gpu, GpuOptions, KernelDef, f16};
use rand::Rng;
use rand::rngs::StdRng;
use reference::Product;

/// Elements past each output, written with NaN, which must survive.
const TAIL: usize = 5;

/// The bound for f32 accuracy: at most 1e-6 of Σ|a||b| per output.
const F32_LEVEL: f64 = 1e-6;

/// (m, n, k): one element; K = 1; K = 0 (Y = 0, the weight gradient adds nothing); every
/// dimension off the blocks; whole 128×128 blocks only (tensor cores everywhere they exist); a
/// mix of whole and edge blocks with N % 4 ≠ 0.
const SHAPES: [(usize, usize, usize); 7] =
    [(1, 1, 1), (3, 6, 1), (4, 5, 0), (37, 70, 33), (129, 130, 20), (256, 256, 96), (260, 131, 45)];

/// Which variant of `kernel` runs on `gpu`, printed.
fn variant(gpu: &Gpu, kernel: &KernelDef) -> &'static str {
    let v = match gpu.variant_for(kernel) {
        Ok(v) if !v.coop.is_empty() => "tensor cores",
        Ok(_) => "portable",
        Err(_) => "none",
    };
    eprintln!("{}: {v} variant on `{}`", kernel.qualified_name(), gpu.report().name);
    v
}

/// The test GPU, if it has one with SHADER_F16 (the precise kernels read f16 halves).
fn f16_gpu(what: &str) -> Option<Gpu> {
    let gpu = gpu()?;
    has_f16(&gpu, what).then_some(gpu)
}

/// `values` then TAIL NaNs.
fn poisoned_with(gpu: &Gpu, values: &[f32]) -> Buffer<f32> {
    let mut v = values.to_vec();
    v.extend([f32::NAN; TAIL]);
    gpu.upload(&v).unwrap()
}

fn poisoned(gpu: &Gpu, n: usize) -> Buffer<f32> {
    poisoned_with(gpu, &vec![f32::NAN; n])
}

/// Reads the first `n` elements and checks the tail after them is untouched.
fn read(gpu: &Gpu, what: &str, b: &Buffer<f32>, n: usize) -> Vec<f32> {
    let mut v = b.read(gpu).unwrap();
    assert!(v[n..].iter().all(|x| x.is_nan()), "{what}: wrote past the output");
    v.truncate(n);
    v
}

#[track_caller]
fn check(what: &str, got: &[f32], want: &Product, tol: f64) -> f64 {
    let e = want.max_error(got);
    eprintln!("{what}: max error {e:.2e} of Σ|a||b|");
    assert!(e <= tol, "{what}: error {e:e} > {tol:e} (relative to Σ|a||b|)");
    e
}

/// `Y (+)= X·Wᵀ` (X [m, k], W [n, k]) on the scaled split core whatever the adapter.
fn split_t(
    gpu: &Gpu,
    x: &Buffer<f32>,
    w: &Buffer<f32>,
    y: &mut Buffer<f32>,
    (m, n, k): (usize, usize, usize),
    acc: bool,
) {
    let e = if acc { Epilogue::Accumulate } else { Epilogue::Store };
    let plan = Gemm::new(m, n, k).b_t(true).epilogue(e).plan_split(gpu).unwrap();
    let mut ws = GemmWorkspace::new(gpu, &[&plan]).unwrap();
    gemm::gemm(gpu, &plan, Mat::f32(x, m, k), Mat::f32(w, n, k).t(), None, y, &mut ws).unwrap();
}

/// `Y (+)= X·W` (X [m, k], W [k, n]) on the scaled split core.
fn split_n(
    gpu: &Gpu,
    x: &Buffer<f32>,
    w: &Buffer<f32>,
    y: &mut Buffer<f32>,
    (m, n, k): (usize, usize, usize),
    acc: bool,
) {
    let e = if acc { Epilogue::Accumulate } else { Epilogue::Store };
    let plan = Gemm::new(m, n, k).epilogue(e).plan_split(gpu).unwrap();
    let mut ws = GemmWorkspace::new(gpu, &[&plan]).unwrap();
    gemm::gemm(gpu, &plan, Mat::f32(x, m, k), Mat::f32(w, k, n), None, y, &mut ws).unwrap();
}

/// The weight gradient `Y [k, n] += Xᵀ·B` over m rows (X [m, k], B [m, n]) on the scaled split
/// core, split along the rows as its plan says.
fn split_wgrad(gpu: &Gpu, x: &Buffer<f32>, b: &Buffer<f32>, y: &mut Buffer<f32>, (m, n, k): (usize, usize, usize)) {
    let plan = Gemm::new(k, n, m).a_t(true).epilogue(Epilogue::Accumulate).plan_split(gpu).unwrap();
    let mut ws = GemmWorkspace::new(gpu, &[&plan]).unwrap();
    gemm::gemm(gpu, &plan, Mat::f32(x, m, k).t(), Mat::f32(b, m, n), None, y, &mut ws).unwrap();
}

/// The three products of one (m, n, k) on the scaled split core (scale, split, product), X·Wᵀ and
/// X·W also accumulating onto a random Y, the weight gradient's parts added to a random Y; each
/// against float64, error ≤ `tol`. `make`
/// makes an operand of `len` values.
fn check_products(
    gpu: &Gpu,
    what: &str,
    (m, n, k): (usize, usize, usize),
    mut make: impl FnMut(usize) -> Vec<f32>,
    tol: f64,
) -> f64 {
    let shape = format!("{what} {:?}", (m, n, k));
    let (x, wt, w) = (make(m * k), make(n * k), make(k * n));
    let (xb, wtb, wb) = (gpu.upload(&x).unwrap(), gpu.upload(&wt).unwrap(), gpu.upload(&w).unwrap());
    let mut worst = 0.0f64;

    let mut y = poisoned(gpu, m * n);
    split_t(gpu, &xb, &wtb, &mut y, (m, n, k), false);
    let want = reference::matmul_t(&x, &wt, m, n, k);
    worst = worst.max(check(&format!("matmul_t_split {shape}"), &read(gpu, "t", &y, m * n), &want, tol));

    let mut y = poisoned(gpu, m * n);
    split_n(gpu, &xb, &wb, &mut y, (m, n, k), false);
    let want = reference::matmul(&x, &w, m, n, k);
    worst = worst.max(check(&format!("matmul_split {shape}"), &read(gpu, "n", &y, m * n), &want, tol));

    // The accumulating forms, onto a random Y of the results' magnitude.
    let y0 = make(m * n);
    let mut y = poisoned_with(gpu, &y0);
    split_t(gpu, &xb, &wtb, &mut y, (m, n, k), true);
    let want = reference::matmul_t(&x, &wt, m, n, k).plus(&y0);
    worst = worst.max(check(&format!("matmul_t_split acc {shape}"), &read(gpu, "t+", &y, m * n), &want, tol));
    let mut y = poisoned_with(gpu, &y0);
    split_n(gpu, &xb, &wb, &mut y, (m, n, k), true);
    let want = reference::matmul(&x, &w, m, n, k).plus(&y0);
    worst = worst.max(check(&format!("matmul_split acc {shape}"), &read(gpu, "n+", &y, m * n), &want, tol));

    // Weight gradient Y [k, n] += Xᵀ·B over the m rows (X [m, k], B [m, n]).
    let b = make(m * n);
    let bb = gpu.upload(&b).unwrap();
    let y0 = make(k * n);
    let mut y = poisoned_with(gpu, &y0);
    split_wgrad(gpu, &xb, &bb, &mut y, (m, n, k));
    let want = reference::matmul_at(&x, &b, m, n, k).plus(&y0);
    let got = read(gpu, "weight_grad_split", &y, k * n);
    worst.max(check(&format!("weight_grad_split {shape}"), &got, &want, tol))
}

/// Every product on ordinary inputs (uniform in [−1, 1)), shapes on and off the blocks.
#[test]
fn split_products_vs_reference() {
    let Some(gpu) = f16_gpu("precise products") else { return };
    for k in [&matmul_t_pres::KERNEL, &matmul_pres::KERNEL, &matmul_at_pres_split::KERNEL] {
        variant(&gpu, k);
    }
    let mut rng = rng("precise");
    for shape in SHAPES {
        check_products(&gpu, "uniform", shape, |len| uniform(&mut rng, len, -1.0, 1.0), F32_LEVEL);
    }
    // A weight gradient over enough rows for several parts of the contraction (2 here: 700 rows,
    // 2 blocks of output), one of them short.
    check_products(&gpu, "uniform", (700, 128, 256), |len| uniform(&mut rng, len, -1.0, 1.0), F32_LEVEL);
}

/// Values uniform in ±[1, 2)·10^e with e uniform in [lo, hi]: magnitudes mixed over 10^(hi − lo).
fn log_uniform(rng: &mut StdRng, len: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..len)
        .map(|_| {
            let sign = if rng.random_bool(0.5) { 1.0 } else { -1.0 };
            sign * rng.random_range(1.0f32..2.0) * 10f32.powf(rng.random_range(lo..=hi))
        })
        .collect()
}

/// The range: whole operands scaled by 1e-12, 1e-30 and 1e+30 (one or both; results kept within
/// f32's normal range, as any f32 product needs), gradients of a mean loss (1e-10), magnitudes
/// mixed over 10⁸ inside a tensor (within the 2²⁸ the scaling keeps to f32 level), and values
/// ~1e-9 mixed into ordinary ones: f32 accuracy in every case.
#[test]
fn split_products_over_the_f32_range() {
    let Some(gpu) = f16_gpu("precise range") else { return };
    let mut rng = rng("precise range");
    let shape = (129, 132, 72);
    let mut worst = 0.0f64;
    for (label, sa, sb) in [
        ("A·1e-12", 1e-12f32, 1.0f32),
        ("A·1e-30", 1e-30, 1.0),
        ("A·1e+30", 1e30, 1.0),
        ("A·1e-12, B·1e-12", 1e-12, 1e-12),
        ("A·1e+30, B·1e-30", 1e30, 1e-30),
        ("A·1e-10, B·1e-10", 1e-10, 1e-10),
    ] {
        // X gets sa, Wᵀ, W and B get sb, the added Ys sa·sb (check_products asks for X, Wᵀ, W,
        // the Y of the accumulating forms, B, the Y of the weight gradient, in that order).
        let mut i = 0usize;
        let e = check_products(
            &gpu,
            label,
            shape,
            |len| {
                i += 1;
                let s = match i {
                    1 => sa,
                    4 | 6 => sa * sb,
                    _ => sb,
                };
                uniform(&mut rng, len, -1.0, 1.0).into_iter().map(|v| v * s).collect()
            },
            F32_LEVEL,
        );
        worst = worst.max(e);
    }
    let e =
        check_products(&gpu, "mixed over 1e-4..1e+4", shape, |len| log_uniform(&mut rng, len, -4.0, 4.0), F32_LEVEL);
    worst = worst.max(e);
    let e =
        check_products(&gpu, "mixed over 1e-14..1e-6", shape, |len| log_uniform(&mut rng, len, -14.0, -6.0), F32_LEVEL);
    worst = worst.max(e);
    // Ordinary values with 10% of them ~1e-9.
    let e = check_products(
        &gpu,
        "ordinary with 1e-9 values",
        shape,
        |len| {
            uniform(&mut rng, len, -1.0, 1.0)
                .into_iter()
                .map(|v| if rng.random_bool(0.1) { v * 1e-9 } else { v })
                .collect()
        },
        F32_LEVEL,
    );
    worst = worst.max(e);
    eprintln!("range: worst error {worst:.2e} of Σ|a||b|");
}

/// Outliers far above the rest of their tensor (2²⁸ and more): one scale per tensor, so elements
/// more than ~2²⁸ below the tensor's largest magnitude lose bits (~2⁻⁵⁰ of that magnitude
/// absolute), and an output that only such elements feed is not f32-accurate. What holds is the
/// documented bound: |c − Σab| ≤ 1e-6·Σ|a||b| + 2⁻⁴⁸·(max|A|·Σ|b| + max|B|·Σ|a|) over the
/// output's contraction. Checked with 1e+20 outliers mixed into ordinary values of X.
#[test]
fn outliers_keep_the_documented_bound() {
    let Some(gpu) = f16_gpu("precise outliers") else { return };
    let mut rng = rng("precise outliers");
    let (m, n, k) = (70, 66, 40);
    // Outliers in X only: two of them meeting in one term would overflow f32 (1e40).
    let x: Vec<f32> = uniform(&mut rng, m * k, -1.0, 1.0)
        .into_iter()
        .map(|v| if rng.random_bool(0.02) { v * 1e20 } else { v })
        .collect();
    let wt = uniform(&mut rng, n * k, -1.0, 1.0);
    let mut y = poisoned(&gpu, m * n);
    let (xb, wtb) = (gpu.upload(&x).unwrap(), gpu.upload(&wt).unwrap());
    split_t(&gpu, &xb, &wtb, &mut y, (m, n, k), false);
    let got = read(&gpu, "outliers", &y, m * n);
    let max_abs = |v: &[f32]| v.iter().fold(0.0f64, |a, &b| a.max((b as f64).abs()));
    let (ma, mb) = (max_abs(&x), max_abs(&wt));
    let floor = 2f64.powi(-48);
    let (mut worst, mut worst_plain) = (0.0f64, 0.0f64);
    for i in 0..m {
        for j in 0..n {
            let (mut v, mut s, mut sa, mut sb) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
            for p in 0..k {
                let (a, b) = (x[i * k + p] as f64, wt[j * k + p] as f64);
                v += a * b;
                s += (a * b).abs();
                sa += a.abs();
                sb += b.abs();
            }
            let err = (got[i * n + j] as f64 - v).abs();
            let bound = F32_LEVEL * s + floor * (ma * sb + mb * sa);
            assert!(err <= bound, "output ({i}, {j}): error {err:e} over the bound {bound:e} (Σ|a||b| = {s:e})");
            worst = worst.max(err / bound);
            worst_plain = worst_plain.max(if s > 0.0 { err / s } else { err });
        }
    }
    eprintln!("outliers: worst error {worst:.2e} of the bound; {worst_plain:.2e} of Σ|a||b| alone");
}

/// The split pass on its own: the scale bits are those of the largest finite magnitude (NaN and
/// ±Inf left out); hi is f16's nearest value to x·2^e (in f16's normal range) and hi + lo·2⁻¹¹ holds
/// x·2^e to 2⁻²¹ relative there (2⁻¹¹ relative and 2⁻²⁵ absolute below it, where a GPU may flush
/// hi to zero); rows are zero-padded; NaN stays NaN.
#[test]
fn split_pass_scales_and_splits() {
    let Some(gpu) = f16_gpu("precise split") else { return };
    let mut rng = rng("precise split");
    let (rows, cols) = (37, 23);
    let mut x = log_uniform(&mut rng, rows * cols, -20.0, -5.0);
    x[5] = f32::NAN;
    x[17] = f32::INFINITY;
    x[40] = f32::NEG_INFINITY;
    x[41] = 0.0;
    let xb = gpu.upload(&x).unwrap();
    let mut amax: Buffer<u32> = gpu.filled(2 + TAIL, u32::MAX).unwrap();
    precise_clear(&gpu, &mut amax, 2).unwrap();
    precise_absmax(&gpu, &xb, &mut amax, linear::AbsParams::new((rows * cols) as u32, 1)).unwrap();
    let bits = amax.read(&gpu).unwrap();
    assert!(bits[2..].iter().all(|&b| b == u32::MAX), "precise_clear wrote past its n");
    assert_eq!(bits[0], 0, "slot 0 cleared and left alone");
    let want_max = x.iter().filter(|v| v.is_finite()).fold(0.0f32, |a, &b| a.max(b.abs()));
    assert_eq!(f32::from_bits(bits[1]), want_max, "the largest finite magnitude");

    let cq = cols.div_ceil(4);
    let sentinel = [f16::from_f32(7.0); 4];
    let mut hi: Buffer<F16x4> = gpu.filled(rows * cq + TAIL, sentinel).unwrap();
    let mut lo: Buffer<F16x4> = gpu.filled(rows * cq + TAIL, sentinel).unwrap();
    let sp = linear::HalvesParams::new(rows as u32, cols as u32, 1);
    linear::precise_split(&gpu, &xb, &amax, &mut hi, &mut lo, sp).unwrap();
    let (hi, lo) = (hi.read(&gpu).unwrap(), lo.read(&gpu).unwrap());
    assert!(hi[rows * cq..].iter().chain(&lo[rows * cq..]).all(|v| *v == sentinel), "wrote past the halves");
    // The scale: max·2^e in [2¹⁴, 2¹⁵).
    let e = 14 - want_max.log2().floor() as i32;
    let scaled_max = want_max as f64 * 2f64.powi(e);
    assert!((16384.0..32768.0).contains(&scaled_max), "scale 2^{e} puts the max at {scaled_max}");
    for r in 0..rows {
        for c in 0..cq * 4 {
            let (h, l) = (hi[r * cq + c / 4][c % 4], lo[r * cq + c / 4][c % 4]);
            if c >= cols {
                assert!(h.to_f32() == 0.0 && l.to_f32() == 0.0, "padding ({r}, {c}) is not zero");
                continue;
            }
            let v = x[r * cols + c];
            if v.is_nan() {
                assert!(h.to_f32().is_nan(), "NaN at ({r}, {c}) lost");
                continue;
            }
            if v.is_infinite() {
                continue; // clamped: not meaningful (documented)
            }
            let xs = v as f64 * 2f64.powi(e);
            if xs.abs() >= 2f64.powi(-14) {
                assert_eq!(h, f16::from_f64(xs), "hi at ({r}, {c}) of {v:e}: f16's nearest");
            }
            let back = h.to_f64() + l.to_f64() / 2048.0;
            let err = (back - xs).abs();
            // Below f16's normal range hi may be flushed to zero (the H200 does, measured; lavapipe
            // keeps f16 subnormals), leaving lo's 11 bits (and nothing below 2⁻²⁵): such values
            // are over 2²⁸ below the tensor's largest, so a product's error relative to
            // Σ|a||b| does not see it.
            let bound = if xs.abs() >= 2f64.powi(-14) {
                2f64.powi(-21) * xs.abs() + 2f64.powi(-35)
            } else {
                2f64.powi(-11) * xs.abs() + 2f64.powi(-25)
            };
            assert!(err <= bound, "({r}, {c}): {xs:e} kept as {back:e}");
        }
    }
}

/// The product kernels on their own, with two parts of the contraction (split-K): each part is
/// the product over its rows, and `matmul_t_pres` on the 2-D grid fallback (a device limit of 4
/// workgroups per dimension: 3 × 3 = 9 blocks).
#[test]
fn parts_and_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu, "precise 2-D grid") {
        return;
    }
    let mut rng = rng("precise 2-D grid");
    let (m, n, k) = (300, 260, 20);
    let x = uniform(&mut rng, m * k, -1.0, 1.0);
    let w = uniform(&mut rng, n * k, -1.0, 1.0);
    let mut y = poisoned(&gpu, m * n);
    let (xb, wb) = (gpu.upload(&x).unwrap(), gpu.upload(&w).unwrap());
    split_t(&gpu, &xb, &wb, &mut y, (m, n, k), false);
    check(
        "matmul_t_split on a 2-D grid",
        &read(&gpu, "y", &y, m * n),
        &reference::matmul_t(&x, &w, m, n, k),
        F32_LEVEL,
    );

    // Split-K directly: X [rows, k2], B [rows, n2] over 2 parts of 96 rows (the second short).
    let (rows, n2, k2) = (150, 40, 30);
    let x = uniform(&mut rng, rows * k2, -1.0, 1.0);
    let b = uniform(&mut rng, rows * n2, -1.0, 1.0);
    let (xb, bb) = (gpu.upload(&x).unwrap(), gpu.upload(&b).unwrap());
    // Split through a product (the workspace's halves are private): a weight gradient into zeros
    // checks the scaled halves, then the parts kernel reads the same halves.
    let mut y = gpu.zeros::<f32>(k2 * n2).unwrap();
    split_wgrad(&gpu, &xb, &bb, &mut y, (rows, n2, k2));
    let want = reference::matmul_at(&x, &b, rows, n2, k2);
    check("weight_grad_split on a 2-D grid", &y.read(&gpu).unwrap(), &want, F32_LEVEL);
    let chunk = 96;
    let (hi_a, lo_a, hi_b, lo_b, amax) = split_by_hand(&gpu, &x, (rows, k2), &b, (rows, n2));
    let mut parts = poisoned(&gpu, 2 * k2 * n2);
    let sp = linear::SplitParams::new(rows as u32, n2 as u32, k2 as u32, 2, chunk as u32);
    matmul_at_pres_split(&gpu, &hi_a, &lo_a, &hi_b, &lo_b, &amax, &mut parts, sp, Default::default()).unwrap();
    let got = read(&gpu, "parts", &parts, 2 * k2 * n2);
    for s in 0..2 {
        let (lo, hi) = ((s * chunk).min(rows), ((s + 1) * chunk).min(rows));
        let want = reference::matmul_at(&x[lo * k2..hi * k2], &b[lo * n2..hi * n2], hi - lo, n2, k2);
        check(&format!("part {s} (rows {lo}..{hi})"), &got[s * k2 * n2..(s + 1) * k2 * n2], &want, F32_LEVEL);
    }
}

type Halves = (Buffer<F16x4>, Buffer<F16x4>, Buffer<F16x4>, Buffer<F16x4>, Buffer<u32>);

/// The split of A and B by the three helper kernels, into buffers of the test's own.
fn split_by_hand(gpu: &Gpu, a: &[f32], (ar, ac): (usize, usize), b: &[f32], (br, bc): (usize, usize)) -> Halves {
    let (ab, bb) = (gpu.upload(a).unwrap(), gpu.upload(b).unwrap());
    let mut amax = gpu.zeros::<u32>(2).unwrap();
    precise_clear(gpu, &mut amax, 2).unwrap();
    let abs = linear::AbsParams::new;
    precise_absmax(gpu, &ab, &mut amax, abs((ar * ac) as u32, 0)).unwrap();
    precise_absmax(gpu, &bb, &mut amax, abs((br * bc) as u32, 1)).unwrap();
    let half = |len: usize| gpu.zeros::<F16x4>(len).unwrap();
    let (mut ha, mut la) = (half(ops::f16x4_len(ar, ac)), half(ops::f16x4_len(ar, ac)));
    let (mut hb, mut lb) = (half(ops::f16x4_len(br, bc)), half(ops::f16x4_len(br, bc)));
    let sp = linear::HalvesParams::new;
    linear::precise_split(gpu, &ab, &amax, &mut ha, &mut la, sp(ar as u32, ac as u32, 0)).unwrap();
    linear::precise_split(gpu, &bb, &amax, &mut hb, &mut lb, sp(br as u32, bc as u32, 1)).unwrap();
    (ha, la, hb, lb, amax)
}

/// The plan at `Precision::F32` follows the adapter: the scaled split on tensor cores (f32
/// accuracy even for a 1e-10 operand), elsewhere the SIMT product; the kernels
/// `matmul_t_pres`/`matmul_pres` called directly as well.
#[test]
fn precise_entries_follow_the_path() {
    let Some(gpu) = f16_gpu("precise entries") else { return };
    let tc = ops::on_tensor_cores(&gpu, &matmul_t_pres::KERNEL);
    let mut rng = rng("precise entries");
    let (m, n, k) = (129, 130, 40);
    let x: Vec<f32> = uniform(&mut rng, m * k, -1.0, 1.0).into_iter().map(|v| v * 1e-10).collect();
    let wt = uniform(&mut rng, n * k, -1.0, 1.0);
    let w = uniform(&mut rng, k * n, -1.0, 1.0);
    let (xb, wtb, wb) = (gpu.upload(&x).unwrap(), gpu.upload(&wt).unwrap(), gpu.upload(&w).unwrap());
    for (b_t, wbuf, want) in
        [(true, &wtb, reference::matmul_t(&x, &wt, m, n, k)), (false, &wb, reference::matmul(&x, &w, m, n, k))]
    {
        let plan = Gemm::new(m, n, k).b_t(b_t).precision(Precision::F32).plan(&gpu).unwrap();
        assert_eq!(plan.core() == Core::Split, tc, "{}", plan.describe());
        let mut ws = GemmWorkspace::new(&gpu, &[&plan]).unwrap();
        let mut y = poisoned(&gpu, m * n);
        let wm = if b_t { Mat::f32(wbuf, n, k).t() } else { Mat::f32(wbuf, k, n) };
        gemm::gemm(&gpu, &plan, Mat::f32(&xb, m, k), wm, None, &mut y, &mut ws).unwrap();
        check(&format!("gemm F32 b_t {b_t} ({})", plan.describe()), &read(&gpu, "y", &y, m * n), &want, F32_LEVEL);
    }
    // The kernels directly on halves split by hand.
    let (ha, la, hb, lb, amax) = split_by_hand(&gpu, &x, (m, k), &wt, (n, k));
    let mut y = poisoned(&gpu, m * n);
    let p = linear::Params::new(m as u32, n as u32, k as u32);
    matmul_t_pres(&gpu, &ha, &la, &hb, &lb, &amax, &mut y, p, Default::default()).unwrap();
    check("matmul_t_pres", &read(&gpu, "t", &y, m * n), &reference::matmul_t(&x, &wt, m, n, k), F32_LEVEL);
    let (ha, la, hb, lb, amax) = split_by_hand(&gpu, &x, (m, k), &w, (k, n));
    let mut y = poisoned(&gpu, m * n);
    matmul_pres(&gpu, &ha, &la, &hb, &lb, &amax, &mut y, p, Default::default()).unwrap();
    check("matmul_pres", &read(&gpu, "n", &y, m * n), &reference::matmul(&x, &w, m, n, k), F32_LEVEL);
}

/// A workspace too small for the plan is an error naming what it needs, not a panic.
#[test]
fn a_small_workspace_is_an_error() {
    let Some(gpu) = f16_gpu("precise workspace") else { return };
    let (m, n, k) = (64, 48, 40);
    let x = gpu.zeros::<f32>(m * k).unwrap();
    let w = gpu.zeros::<f32>(n * k).unwrap();
    let mut y = gpu.zeros::<f32>(m * n).unwrap();
    let plan = Gemm::new(m, n, k).b_t(true).plan_split(&gpu).unwrap();
    let mut ws = GemmWorkspace::with_capacity(&gpu, 0, 10).unwrap();
    let e = gemm::gemm(&gpu, &plan, Mat::f32(&x, m, k), Mat::f32(&w, n, k).t(), None, &mut y, &mut ws).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
    assert!(e.to_string().contains("GemmWorkspace::new"), "{e}");
}

/// `precise_absmax` over several 4096-value chunks on the 2-D grid fallback (6 workgroups, at
/// most 4 per dimension): the largest finite magnitude wherever it lies (each chunk's tail, the
/// last partial chunk), folded into what the slot already holds, the other slot untouched.
#[test]
fn absmax_over_chunks_and_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    let mut rng = rng("precise absmax");
    let n = 4096 * 5 + 123;
    for at in [0, 4095, 4096 * 3 + 17, n - 1] {
        let mut x = uniform(&mut rng, n, -1.0, 1.0);
        x[at] = if rng.random_bool(0.5) { 3.5 } else { -3.5 };
        x[(at + 1000) % n] = f32::NAN;
        x[(at + 2000) % n] = f32::NEG_INFINITY;
        let xb = gpu.upload(&x).unwrap();
        let mut amax: Buffer<u32> = gpu.upload(&[7u32, 2.0f32.to_bits()]).unwrap();
        precise_absmax(&gpu, &xb, &mut amax, linear::AbsParams::new(n as u32, 1)).unwrap();
        assert_eq!(amax.read(&gpu).unwrap(), vec![7, 3.5f32.to_bits()], "max at {at}");
        // A smaller maximum leaves the slot as it was.
        let small = gpu.upload(&uniform(&mut rng, n, -1.0, 1.0)).unwrap();
        precise_absmax(&gpu, &small, &mut amax, linear::AbsParams::new(n as u32, 1)).unwrap();
        assert_eq!(amax.read(&gpu).unwrap()[1], 3.5f32.to_bits(), "max kept");
    }
}
