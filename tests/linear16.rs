//! The tensor-core products of `shaders/11_linear16.wgsl` (and their `ops` entries) against
//! float64 references on fresh random, non-symmetric inputs, whatever variant the adapter picks:
//! on lavapipe and in CI the portable variants (f32 FMAs), on an adapter with cooperative
//! matrices (an H200) the tensor-core variants, checked against the same references. Each test
//! prints which variant ran. Error metric (issue 12): max over outputs of |c − Σab| / Σ|a||b|,
//! ≤ 1e-4 for f16 operands (the reference over the operands rounded to f16) and ≤ 1e-6 for the
//! f32-accurate products. Outputs are poisoned (NaN) first and elements past them must stay so;
//! shapes are off the 128×256 (and 64×64) blocks, K = 1 and small K included, and with
//! blocks wholly inside so that tensor cores (which take only those) run where they exist.

mod common;
#[path = "reference/linear16.rs"]
mod reference;

use common::{gpu, gpu_with, rng, uniform};
use kernels::linear16::{
    self, attention_ptx16, attention_pv16, attention_scores16, matmul_at_precise_split, matmul_at16_split,
    matmul_precise, matmul_t_precise, matmul_t16, matmul16,
};
use kernels::ops::{self, F16x4, Precision, ProductPath};
use kernels::{Buffer, CoopConfig, CoopScalar, Error, Gpu, GpuOptions, KernelDef, f16};
use rand::rngs::StdRng;
use reference::{Att, Product};

kernels::kernels!("tests/shaders/coop_tiles.wgsl", shared = none, module = coop_fixture);

/// Elements past each output, written with NaN, which must survive.
const TAIL: usize = 5;

/// (m, n, k): one element; K = 1; every dimension off the blocks; small K; past one block both
/// ways; whole 128×256 blocks only (tensor cores everywhere they exist); a mix of whole and edge
/// blocks.
const SHAPES: [(usize, usize, usize); 7] =
    [(1, 1, 1), (3, 6, 1), (37, 70, 33), (130, 260, 9), (129, 257, 40), (256, 512, 64), (300, 520, 72)];

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

/// The values as the GPU's f16 operands hold them (rounded to nearest, clamped to ±65504).
fn round16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| f16::from_f32(x.clamp(-65504.0, 65504.0)).to_f32()).collect()
}

fn f16x4(gpu: &Gpu, v: &[f32], rows: usize, cols: usize) -> Buffer<F16x4> {
    let data = ops::to_f16x4(v, rows, cols);
    gpu.upload(if data.is_empty() { &[[f16::ZERO; 4]][..] } else { &data }).unwrap()
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
fn check(what: &str, got: &[f32], want: &Product, tol: f64) {
    let e = want.max_error(got);
    eprintln!("{what}: max error {e:.2e} of Σ|a||b|");
    assert!(e <= tol, "{what}: error {e:e} > {tol:e} (relative to Σ|a||b|)");
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn has_f16(gpu: &Gpu) -> bool {
    let yes = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    if !yes {
        eprintln!("adapter without SHADER_F16: the f16-operand products are not run");
    }
    yes
}

#[test]
fn cast_f16x4_matches_the_host_layout() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("cast_f16x4");
    for (rows, cols) in [(1, 1), (3, 5), (17, 64), (9, 131)] {
        let mut v = uniform(&mut rng, rows * cols, -3.0, 3.0);
        // Out of range, infinite and NaN values.
        v[0] = 1.0e6;
        if v.len() > 3 {
            v[1] = f32::NEG_INFINITY;
            v[2] = f32::NAN;
            v[3] = -70000.0;
        }
        let src = gpu.upload(&v).unwrap();
        let len = ops::f16x4_len(rows, cols);
        let nan = f16::from_f32(f32::NAN);
        let mut dst = gpu.upload(&vec![[nan; 4]; len + TAIL]).unwrap();
        ops::cast_f16x4(&gpu, &src, &mut dst, rows, cols).unwrap();
        let got = dst.read(&gpu).unwrap();
        let want = ops::to_f16x4(&v, rows, cols);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            for c in 0..4 {
                let same = g[c].to_bits() == w[c].to_bits() || (g[c].is_nan() && w[c].is_nan());
                assert!(same, "({rows}, {cols}) vec4 {i} lane {c}: {} vs {}", g[c], w[c]);
            }
        }
        assert!(got[len..].iter().all(|g| g.iter().all(|h| h.is_nan())), "wrote past the output");
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Gemm {
    /// Y = X·Wᵀ
    T,
    /// Y += X·Wᵀ
    TAcc,
    /// Y = X·W
    N,
    /// Y = X·W + R
    Residual,
}

/// One f16 GEMM form through `ops` at every shape: error ≤ 1e-4 against the reference over the
/// rounded operands, the tail untouched, and one shape run twice bit for bit.
fn check_gemm(form: Gemm) {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let kernel = match form {
        Gemm::T => &linear16::matmul_t16::KERNEL,
        Gemm::TAcc => &linear16::matmul_t16_acc::KERNEL,
        Gemm::N => &linear16::matmul16::KERNEL,
        Gemm::Residual => &linear16::matmul16_residual::KERNEL,
    };
    variant(&gpu, kernel);
    let mut rng = rng(&format!("{form:?}"));
    for (m, n, k) in SHAPES {
        let x = round16(&uniform(&mut rng, m * k, -1.0, 1.0));
        let transposed = matches!(form, Gemm::T | Gemm::TAcc);
        // W [n, k] for the transposed forms, [k, n] otherwise.
        let w = round16(&uniform(&mut rng, k * n, -1.0, 1.0));
        let (wr, wc) = if transposed { (n, k) } else { (k, n) };
        let r = uniform(&mut rng, m * n, -1.0, 1.0);
        let y0 = if form == Gemm::TAcc { uniform(&mut rng, m * n, -1.0, 1.0) } else { vec![f32::NAN; m * n] };
        let (xb, wb, rb) = (f16x4(&gpu, &x, m, k), f16x4(&gpu, &w, wr, wc), gpu.upload(&r).unwrap());
        let run = || {
            let mut y = poisoned_with(&gpu, &y0);
            match form {
                Gemm::T => ops::matmul_t_f16(&gpu, &xb, &wb, &mut y, m, n, k),
                Gemm::TAcc => ops::matmul_t_f16_acc(&gpu, &xb, &wb, &mut y, m, n, k),
                Gemm::N => ops::matmul_f16(&gpu, &xb, &wb, None, &mut y, m, n, k),
                Gemm::Residual => ops::matmul_f16(&gpu, &xb, &wb, Some(&rb), &mut y, m, n, k),
            }
            .unwrap();
            read(&gpu, &format!("{form:?} {:?}", (m, n, k)), &y, m * n)
        };
        let got = run();
        let want = match form {
            Gemm::T => reference::matmul_t(&x, &w, m, n, k),
            Gemm::TAcc => reference::matmul_t(&x, &w, m, n, k).plus(&y0),
            Gemm::N => reference::matmul(&x, &w, m, n, k),
            Gemm::Residual => reference::matmul(&x, &w, m, n, k).plus(&r),
        };
        check(&format!("{form:?} (m, n, k) = {:?}", (m, n, k)), &got, &want, 1e-4);
        if (m, n, k) == (300, 520, 72) {
            assert!(same_bits(&got, &run()), "{form:?}: two runs differ");
        }
    }
}

#[test]
fn matmul_t16_vs_reference() {
    check_gemm(Gemm::T);
}

#[test]
fn matmul_t16_acc_vs_reference() {
    check_gemm(Gemm::TAcc);
}

#[test]
fn matmul16_vs_reference() {
    check_gemm(Gemm::N);
}

#[test]
fn matmul16_residual_vs_reference() {
    check_gemm(Gemm::Residual);
}

/// Weight-gradient shapes (tokens m, n, k): one element, edges, a part boundary inside a
/// 32-row step, and whole blocks.
const WGRAD: [(usize, usize, usize); 4] = [(1, 1, 1), (300, 70, 33), (600, 256, 128), (1000, 260, 130)];

/// `Y += Xᵀ·B` through `ops::weight_grad_f16` (f16 operands) and `weight_grad_f16_from_f32` (f32
/// operands rounded while staging): ≤ 1e-4 against the reference over rounded operands, Y
/// accumulated onto random values.
#[test]
fn weight_grad_f16_vs_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    variant(&gpu, &linear16::matmul_at16_split::KERNEL);
    variant(&gpu, &linear16::matmul_at16_split_f32::KERNEL);
    let mut rng = rng("weight_grad_f16");
    for (m, n, k) in WGRAD {
        let x32 = uniform(&mut rng, m * k, -1.0, 1.0);
        let b32 = uniform(&mut rng, m * n, -1.0, 1.0);
        let (x, b) = (round16(&x32), round16(&b32));
        let y0 = uniform(&mut rng, k * n, -1.0, 1.0);
        let want = reference::matmul_at(&x, &b, m, n, k).plus(&y0);
        let mut scratch = poisoned(&gpu, ops::weight_grad_f16_scratch_len(m, n, k).max(1));
        eprintln!("(m, n, k) = {:?}: {} parts", (m, n, k), ops::weight_grad_f16_parts(m, n, k));

        let (xb, bb) = (f16x4(&gpu, &x, m, k), f16x4(&gpu, &b, m, n));
        let mut y = poisoned_with(&gpu, &y0);
        ops::weight_grad_f16(&gpu, &xb, &bb, &mut y, &mut scratch, m, n, k).unwrap();
        let got = read(&gpu, "weight_grad_f16", &y, k * n);
        check(&format!("weight_grad_f16 {:?}", (m, n, k)), &got, &want, 1e-4);

        let (xf, bf) = (gpu.upload(&x32).unwrap(), gpu.upload(&b32).unwrap());
        let mut y = poisoned_with(&gpu, &y0);
        ops::weight_grad_f16_from_f32(&gpu, &xf, &bf, &mut y, &mut scratch, m, n, k).unwrap();
        let fused = read(&gpu, "weight_grad_f16_from_f32", &y, k * n);
        check(&format!("weight_grad_f16_from_f32 {:?}", (m, n, k)), &fused, &want, 1e-4);
    }
}

/// The split kernel itself with more parts than rows need (trailing parts with no rows are written
/// as zeros) and a part boundary off the 32-row steps.
#[test]
fn split_parts_with_no_rows_are_zeros() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("split parts");
    let (m, n, k, parts, chunk) = (50usize, 20usize, 12usize, 5usize, 17usize);
    let x = round16(&uniform(&mut rng, m * k, -1.0, 1.0));
    let b = round16(&uniform(&mut rng, m * n, -1.0, 1.0));
    let (xb, bb) = (f16x4(&gpu, &x, m, k), f16x4(&gpu, &b, m, n));
    let mut out = poisoned(&gpu, parts * k * n);
    let sp = linear16::SplitParams::new(m as u32, n as u32, k as u32, parts as u32, chunk as u32);
    matmul_at16_split(&gpu, &xb, &bb, &mut out, sp, Default::default()).unwrap();
    let got = read(&gpu, "split parts", &out, parts * k * n);
    for s in 0..parts {
        let (lo, hi) = ((s * chunk).min(m), ((s + 1) * chunk).min(m));
        let want = reference::matmul_at(&x[lo * k..hi * k], &b[lo * n..hi * n], hi - lo, n, k);
        check(&format!("part {s} (rows {lo}..{hi})"), &got[s * k * n..(s + 1) * k * n], &want, 1e-4);
    }
}

/// The bound of `Precision::F16` against the exact product of the unrounded operands: each
/// operand rounded to f16 (relative error u = 2⁻¹¹) moves a product by at most (2u + u²)|ab| ≈
/// 9.8e-4 |ab|. (Blocks at the edges run the portable f32 product, which is exact to f32 level.)
const F16_OPERANDS: f64 = 1.1e-3;

/// The f32-accurate products: the `linear16` kernels called directly (tensor cores split in three
/// products where they exist, a plain f32 product elsewhere) and through `ops` at both
/// precisions. ≤ 1e-6 of Σ|a||b| for f32 accuracy; `Precision::F16` on tensor cores within
/// [`F16_OPERANDS`] of the exact product.
#[test]
fn precise_products_vs_reference() {
    let Some(gpu) = gpu() else { return };
    for k in [&matmul_t_precise::KERNEL, &matmul_precise::KERNEL, &matmul_at_precise_split::KERNEL] {
        variant(&gpu, k);
    }
    let path32 = ops::product_path(&gpu, Precision::F32);
    let path16 = ops::product_path(&gpu, Precision::F16);
    eprintln!("ops paths: F32 {path32:?}, F16 {path16:?}");
    let mut rng = rng("precise");
    for (m, n, k) in [(1, 1, 1), (37, 70, 33), (129, 130, 20), (256, 256, 96)] {
        let x = uniform(&mut rng, m * k, -1.0, 1.0);
        let wt = uniform(&mut rng, n * k, -1.0, 1.0); // [n, k]
        let w = uniform(&mut rng, k * n, -1.0, 1.0); // [k, n]
        let (xb, wtb, wb) = (gpu.upload(&x).unwrap(), gpu.upload(&wt).unwrap(), gpu.upload(&w).unwrap());
        let shape = format!("{:?}", (m, n, k));
        let p = linear16::Params::new(m as u32, n as u32, k as u32);

        let mut y = poisoned(&gpu, m * n);
        matmul_t_precise(&gpu, &xb, &wtb, &mut y, p, Default::default()).unwrap();
        let want_t = reference::matmul_t(&x, &wt, m, n, k);
        check(&format!("matmul_t_precise {shape}"), &read(&gpu, "t", &y, m * n), &want_t, 1e-6);
        let mut y = poisoned(&gpu, m * n);
        matmul_precise(&gpu, &xb, &wb, &mut y, p, Default::default()).unwrap();
        let want_n = reference::matmul(&x, &w, m, n, k);
        check(&format!("matmul_precise {shape}"), &read(&gpu, "n", &y, m * n), &want_n, 1e-6);

        for (precision, path) in [(Precision::F32, path32), (Precision::F16, path16)] {
            let tol = if path == ProductPath::TensorCoresF16 { F16_OPERANDS } else { 1e-6 };
            let (want_t, want_n) = (reference::matmul_t(&x, &wt, m, n, k), reference::matmul(&x, &w, m, n, k));
            let mut ws = ops::PreciseWorkspace::for_product(&gpu, precision, m, n, k).unwrap();
            let mut y = poisoned(&gpu, m * n);
            ops::matmul_t_precise(&gpu, &xb, &wtb, &mut y, &mut ws, m, n, k, precision).unwrap();
            check(&format!("ops::matmul_t_precise {precision:?} {shape}"), &read(&gpu, "t", &y, m * n), &want_t, tol);
            let mut y = poisoned(&gpu, m * n);
            ops::matmul_precise(&gpu, &xb, &wb, &mut y, &mut ws, m, n, k, precision).unwrap();
            check(&format!("ops::matmul_precise {precision:?} {shape}"), &read(&gpu, "n", &y, m * n), &want_n, tol);
        }
    }
    // Weight gradients Y += Xᵀ·B, X [m, k], B [m, n], over more rows.
    for (m, n, k) in [(1, 1, 1), (300, 70, 33), (700, 128, 256)] {
        let x = uniform(&mut rng, m * k, -1.0, 1.0);
        let b = uniform(&mut rng, m * n, -1.0, 1.0);
        let y0 = uniform(&mut rng, k * n, -1.0, 1.0);
        let (xb, bb) = (gpu.upload(&x).unwrap(), gpu.upload(&b).unwrap());
        for precision in [Precision::F32, Precision::F16] {
            let path = ops::product_path(&gpu, precision);
            let tol = if path == ProductPath::TensorCoresF16 { F16_OPERANDS } else { 1e-6 };
            let want = reference::matmul_at(&x, &b, m, n, k).plus(&y0);
            let len = ops::weight_grad_precise_scratch_len(&gpu, precision, m, n, k).max(1);
            let mut scratch = poisoned(&gpu, len);
            let mut y = poisoned_with(&gpu, &y0);
            let mut ws = ops::PreciseWorkspace::for_product(&gpu, precision, m, n, k).unwrap();
            ops::weight_grad_precise(&gpu, &xb, &bb, &mut y, &mut scratch, &mut ws, m, n, k, precision).unwrap();
            let got = read(&gpu, "weight_grad_precise", &y, k * n);
            check(&format!("ops::weight_grad_precise {precision:?} {:?}", (m, n, k)), &got, &want, tol);
        }
        // The kernel directly, two parts, f32 accuracy on any adapter.
        let chunk = m.div_ceil(2);
        let sp = linear16::SplitParams::new(m as u32, n as u32, k as u32, 2, chunk as u32);
        let mut parts = poisoned(&gpu, 2 * k * n);
        matmul_at_precise_split(&gpu, &xb, &bb, &mut parts, sp, Default::default()).unwrap();
        let got = read(&gpu, "matmul_at_precise_split", &parts, 2 * k * n);
        let sum: Vec<f32> = (0..k * n).map(|i| got[i] + got[k * n + i]).collect();
        check(&format!("matmul_at_precise_split {:?}", (m, n, k)), &sum, &reference::matmul_at(&x, &b, m, n, k), 1e-6);
    }
}

/// The shape compiled in through the overrides gives the bits of the uniform-only pipeline, each
/// shape gets its own pipeline (and a repeated call reuses it), on whatever variant runs.
#[test]
fn shapes_compiled_in_through_overrides() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("overrides");
    variant(&gpu, &matmul_t16::KERNEL);
    for (m, n, k) in [(130, 260, 24), (256, 256, 40)] {
        let x = round16(&uniform(&mut rng, m * k, -1.0, 1.0));
        let w = round16(&uniform(&mut rng, n * k, -1.0, 1.0));
        let (xb, wb) = (f16x4(&gpu, &x, m, k), f16x4(&gpu, &w, n, k));
        let p = linear16::Params::new(m as u32, n as u32, k as u32);
        let compiled = matmul_t16::Overrides { M_C: Some(m as u32), N_C: Some(n as u32), K_C: Some(k as u32) };
        let before = gpu.pipeline_stats().built;
        let mut a = poisoned(&gpu, m * n);
        matmul_t16(&gpu, &xb, &wb, &mut a, p, Default::default()).unwrap();
        let mut b = poisoned(&gpu, m * n);
        matmul_t16(&gpu, &xb, &wb, &mut b, p, compiled).unwrap();
        let mut c = poisoned(&gpu, m * n);
        matmul_t16(&gpu, &xb, &wb, &mut c, p, compiled).unwrap();
        let built = gpu.pipeline_stats().built - before;
        assert!(built <= 2, "one pipeline per override set: built {built}");
        let (a, b, c) = (read(&gpu, "a", &a, m * n), read(&gpu, "b", &b, m * n), read(&gpu, "c", &c, m * n));
        check(&format!("compiled {:?}", (m, n, k)), &b, &reference::matmul_t(&x, &w, m, n, k), 1e-4);
        assert!(same_bits(&a, &b) && same_bits(&b, &c), "{:?}: compiled and uniform shapes differ", (m, n, k));
    }
}

fn att_inputs(rng: &mut StdRng, a: Att) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let q = round16(&uniform(rng, a.b * a.s * a.h * a.d, -1.0, 1.0));
    let kv = round16(&uniform(rng, a.b * a.s * a.hkv * a.d, -1.0, 1.0));
    let probs = uniform(rng, a.b * a.h * a.s * a.s, -1.0, 1.0);
    (q, kv, probs)
}

fn att_params(a: Att, scale: f32) -> (u32, u32, u32, u32, u32, f32) {
    (a.b as u32, a.s as u32, a.h as u32, a.hkv as u32, a.d as u32, scale)
}

/// The attention products against float64, on shapes with partial and whole 64×64 tiles and
/// grouped-query heads. Entries the causal tiling must not read are NaN in the inputs (and
/// entries it must not write stay NaN).
fn check_attention(gpu: &Gpu, a: Att, rng: &mut StdRng) {
    let what = format!("{a:?}");
    let (q, kv, mut probs) = att_inputs(rng, a);
    let (sq, nprob) = (a.s, a.b * a.h * a.s * a.s);
    let (qb, kvb) = (f16x4(gpu, &q, q.len() / 4, 4), f16x4(gpu, &kv, kv.len() / 4, 4));

    // Scores: only the tiles up to the diagonal are written.
    let scale = 0.125f32;
    let (b, s, h, hkv, d, _) = att_params(a, scale);
    let mut out = poisoned(gpu, nprob);
    attention_scores16(
        gpu,
        &qb,
        &kvb,
        &mut out,
        linear16::attention_scores16::ScoreParams::new(b, s, h, hkv, d, scale),
    )
    .unwrap();
    let got = read(gpu, "scores", &out, nprob);
    let want = reference::scores(&q, &kv, a, scale as f64);
    let (mut g, mut w_val, mut w_scale) = (Vec::new(), Vec::new(), Vec::new());
    for (row, chunk) in got.chunks(sq).enumerate() {
        let s_i = row % sq;
        for (j, &v) in chunk.iter().enumerate() {
            if j <= s_i {
                g.push(v);
                w_val.push(want.value[row * sq + j]);
                w_scale.push(want.scale[row * sq + j]);
            } else if j >= a.tile_end(s_i) {
                assert!(v.is_nan(), "{what}: scores wrote ({s_i}, {j}) above the diagonal tile");
            }
        }
    }
    check(&format!("attention_scores16 {what}"), &g, &Product { value: w_val, scale: w_scale }, 1e-4);

    // P·V (and dS·K): P entries past each row's tile end must not be read.
    for (row, chunk) in probs.chunks_mut(sq).enumerate() {
        let end = a.tile_end(row % sq);
        chunk[end..].fill(f32::NAN);
    }
    let pr = round16(&probs);
    let pb = gpu.upload(&probs).unwrap();
    let alpha = 0.75f32;
    let ny = a.b * sq * a.h * a.d;
    let mut y = poisoned(gpu, ny);
    let pp = linear16::attention_pv16::AttParams::new(b, s, h, hkv, d, alpha);
    attention_pv16(gpu, &pb, &kvb, &mut y, pp).unwrap();
    check(&format!("attention_pv16 {what}"), &read(gpu, "pv", &y, ny), &reference::pv(&pr, &kv, a, alpha as f64), 1e-4);

    // Pᵀ·dO (and dSᵀ·Q): entries of queries before each key tile must not be read either.
    let mut probs = uniform(rng, nprob, -1.0, 1.0);
    for (row, chunk) in probs.chunks_mut(sq).enumerate() {
        let s_i = row % sq;
        for (j, v) in chunk.iter_mut().enumerate() {
            if s_i < 64 * (j / 64) {
                *v = f32::NAN;
            }
        }
    }
    let pr = round16(&probs);
    let pb = gpu.upload(&probs).unwrap();
    let nkv = a.b * sq * a.hkv * a.d;
    let mut y = poisoned(gpu, nkv);
    let pp = linear16::attention_ptx16::AttParams::new(b, s, h, hkv, d, alpha);
    attention_ptx16(gpu, &pb, &qb, &mut y, pp).unwrap();
    check(
        &format!("attention_ptx16 {what}"),
        &read(gpu, "ptx", &y, nkv),
        &reference::ptx(&pr, &q, a, alpha as f64),
        1e-4,
    );
}

#[test]
fn attention_products_vs_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    for k in [&attention_scores16::KERNEL, &attention_pv16::KERNEL, &attention_ptx16::KERNEL] {
        variant(&gpu, k);
    }
    let mut rng = rng("attention16");
    // Partial tiles and a narrow head; whole 64×64 tiles (tensor cores where they exist); GQA.
    for a in [
        Att { b: 1, s: 1, h: 1, hkv: 1, d: 4 },
        Att { b: 2, s: 70, h: 2, hkv: 1, d: 12 },
        Att { b: 1, s: 128, h: 4, hkv: 2, d: 64 },
    ] {
        check_attention(&gpu, a, &mut rng);
    }
}

/// Past the device's workgroups per dimension (lowered to 4): the 1-D grids go 2-D, `flat_wg`
/// recovers each workgroup's index and the tail workgroups leave.
#[test]
fn two_d_grid_fallback() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("2-D grid");
    // 3 × 3 = 9 blocks of 128×256 > 4: grid (3, 3) with 0 idle.
    let (m, n, k) = (300, 520, 20);
    let x = round16(&uniform(&mut rng, m * k, -1.0, 1.0));
    let w = round16(&uniform(&mut rng, n * k, -1.0, 1.0));
    let mut y = poisoned(&gpu, m * n);
    ops::matmul_t_f16(&gpu, &f16x4(&gpu, &x, m, k), &f16x4(&gpu, &w, n, k), &mut y, m, n, k).unwrap();
    check("matmul_t16 on a 2-D grid", &read(&gpu, "y", &y, m * n), &reference::matmul_t(&x, &w, m, n, k), 1e-4);
    // 2 heads × 6 triangle tiles = 12 workgroups (grid (4, 3)), P·V 3 × 2 = 6.
    check_attention(&gpu, Att { b: 1, s: 150, h: 2, hkv: 1, d: 8 }, &mut rng);
}

/// `ops`' choice for a precision follows what the adapter runs: split-f16 (or one f16 product) on
/// tensor cores where the precise kernels' cooperative-matrix variant runs, else the f32 SGEMM;
/// with tensor cores turned off, always the SGEMM.
#[test]
fn precision_choice_follows_the_adapter() {
    let Some(gpu) = gpu() else { return };
    let tc = gpu.variant_for(&matmul_t_precise::KERNEL).is_ok_and(|v| !v.coop.is_empty());
    let config = CoopConfig { m: 16, n: 16, k: 16, ab: CoopScalar::F16, cr: CoopScalar::F32 };
    let offered = gpu.cooperative_matrices().contains(&config) && has_f16(&gpu);
    eprintln!("adapter `{}`: tensor cores {tc}, configurations {:?}", gpu.report().name, gpu.cooperative_matrices());
    assert_eq!(tc, offered && gpu.uses_subgroups(), "the precise kernels' variant vs the configurations enabled");
    let (f32p, f16p) = (ops::product_path(&gpu, Precision::F32), ops::product_path(&gpu, Precision::F16));
    if tc {
        assert_eq!((f32p, f16p), (ProductPath::TensorCoresSplit, ProductPath::TensorCoresF16));
    } else {
        assert_eq!((f32p, f16p), (ProductPath::Sgemm, ProductPath::Sgemm));
    }
    assert_eq!(ops::on_tensor_cores(&gpu, &matmul_t16::KERNEL), tc);
    let Some(off) = gpu_with(GpuOptions::from_env().cooperative_matrix(false)) else { return };
    assert_eq!(ops::product_path(&off, Precision::F32), ProductPath::Sgemm);
    assert!(!ops::on_tensor_cores(&off, &matmul16::KERNEL));
    assert!(off.variant_for(&matmul16::KERNEL).is_ok_and(|v| v.coop.is_empty()) || !has_f16(&off));
}

/// A kernel with tensor cores and no portable form: `Error::MissingFeature` naming the
/// cooperative matrices on an adapter without them (not a panic); where they exist, it runs and
/// its 16×16 products match float64.
#[test]
fn coop_only_kernel() {
    let Some(gpu) = gpu() else { return };
    let tiles = 3usize;
    let mut rng = rng("coop only");
    let a = round16(&uniform(&mut rng, tiles * 256, -1.0, 1.0));
    let b = round16(&uniform(&mut rng, tiles * 256, -1.0, 1.0));
    let ab = gpu.upload(&ops::to_f16x4(&a, tiles * 16, 16)).unwrap();
    let bb = gpu.upload(&ops::to_f16x4(&b, tiles * 16, 16)).unwrap();
    let mut c = gpu.filled(tiles * 64 * 256, f32::NAN).unwrap();
    match coop_fixture::coop_tiles(&gpu, &ab, &bb, &mut c, coop_fixture::coop_tiles::Params::new(tiles as u32)) {
        Err(Error::MissingFeature { feature, reason, .. }) => {
            eprintln!("coop_tiles: MissingFeature {feature}{reason}");
            assert!(gpu.cooperative_matrices().is_empty() || !has_f16(&gpu) || !gpu.uses_subgroups());
            assert!(
                ["EXPERIMENTAL_COOPERATIVE_MATRIX", "SHADER_F16", "SUBGROUP"].contains(&feature),
                "unexpected missing feature {feature}"
            );
        }
        Err(e) => panic!("coop_tiles: {e}"),
        Ok(()) => {
            eprintln!("coop_tiles ran on tensor cores");
            let got = c.read(&gpu).unwrap();
            for t in 0..tiles {
                let (at, bt) = (&a[t * 256..(t + 1) * 256], &b[t * 256..(t + 1) * 256]);
                let want = reference::matmul(at, bt, 16, 16, 16);
                check(&format!("coop_tiles tile {t}"), &got[t * 64 * 256..t * 64 * 256 + 256], &want, 1e-4);
            }
        }
    }
}

/// Short buffers, a head dim off the vec4s and inconsistent heads are errors before anything runs.
#[test]
fn misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let x = gpu.zeros::<F16x4>(10).unwrap();
    let w = gpu.zeros::<F16x4>(10).unwrap();
    let mut y = gpu.zeros::<f32>(10).unwrap();
    // X [8, 8] needs 16 vec4s.
    let e = ops::matmul_t_f16(&gpu, &x, &w, &mut y, 8, 1, 8).unwrap_err();
    assert!(matches!(e, Error::Shape { .. } | Error::LengthMismatch { .. }), "{e}");
    let e = ops::matmul_f16(&gpu, &x, &w, Some(&gpu.zeros(1).unwrap()), &mut y, 2, 2, 4).unwrap_err();
    assert!(e.to_string().contains("len(r)"), "{e}");
    let mut scratch = gpu.zeros::<f32>(1).unwrap();
    let e = ops::weight_grad_f16(&gpu, &x, &w, &mut y, &mut scratch, 4, 4, 4).unwrap_err();
    assert!(e.to_string().contains("parts"), "{e}");
    let mut probs = gpu.zeros::<f32>(64).unwrap();
    let p = linear16::attention_scores16::ScoreParams::new(1, 4, 1, 1, 6, 1.0);
    let e = attention_scores16(&gpu, &x, &w, &mut probs, p).unwrap_err();
    assert!(e.to_string().contains("head_dim % 4"), "{e}");
    let p = linear16::attention_pv16::AttParams::new(1, 4, 3, 2, 4, 1.0);
    let e = attention_pv16(&gpu, &probs, &x, &mut y, p).unwrap_err();
    assert!(e.to_string().contains("heads % p.kv_heads"), "{e}");
    let src = gpu.zeros::<f32>(5).unwrap();
    let mut dst = gpu.zeros::<F16x4>(1).unwrap();
    assert!(ops::cast_f16x4(&gpu, &src, &mut dst, 1, 5).is_err());
    // Nothing was dispatched that failed on the device.
    gpu.wait().unwrap();
}
