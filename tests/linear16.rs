//! The fast attention path's tensor-core products (`shaders/lib/attention_f16.wgsl`: `attention::attention_scores_f16`, `attention::attention_pv_f16`, `backward_attention::attention_ptx_f16`) and the f16x4
//! cast against float64 references on fresh random, non-symmetric inputs, whatever variant the
//! adapter picks:
//! on lavapipe and in CI the portable variants (f32 FMAs), on an adapter with cooperative
//! matrices (an H200) the tensor-core variants, checked against the same references. Each test
//! prints which variant ran. Error metric: max over outputs of |c − Σab| / Σ|a||b|,
//! ≤ 1e-4 for f16 operands (the reference over the operands rounded to f16) and ≤ 1e-6 for the
//! f32-accurate products. Outputs are poisoned (NaN) first and elements past them must stay so;
//! shapes are off the 128×256 (and 64×64) blocks, K = 1 and small K included, and with
//! blocks wholly inside so that tensor cores (which take only those) run where they exist.

mod common;
#[path = "reference/linear16.rs"]
mod reference;

use common::{gpu, gpu_with, rng, uniform};
use kernels::attention::{attention_pv_f16, attention_scores_f16};
use kernels::backward_attention::attention_ptx_f16;
use kernels::ops::{self, F16x4};
use kernels::{Buffer, Error, Gpu, GpuOptions, KernelDef, f16};
use rand::rngs::StdRng;
use reference::{Att, Product};

kernels::kernels!("tests/shaders/coop_tiles.wgsl", shared = none, module = coop_fixture);

/// Elements past each output, written with NaN, which must survive.
const TAIL: usize = 5;

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
    attention_scores_f16(
        gpu,
        &qb,
        &kvb,
        &mut out,
        kernels::attention::attention_scores_f16::ScoreParams::new(b, s, h, hkv, d, scale),
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
    check(&format!("attention_scores_f16 {what}"), &g, &Product { value: w_val, scale: w_scale }, 1e-4);

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
    let pp = kernels::attention::attention_pv_f16::AttParams::new(b, s, h, hkv, d, alpha);
    attention_pv_f16(gpu, &pb, &kvb, &mut y, pp).unwrap();
    check(
        &format!("attention_pv_f16 {what}"),
        &read(gpu, "pv", &y, ny),
        &reference::pv(&pr, &kv, a, alpha as f64),
        1e-4,
    );

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
    let pp = kernels::backward_attention::attention_ptx_f16::AttParams::new(b, s, h, hkv, d, alpha);
    attention_ptx_f16(gpu, &pb, &qb, &mut y, pp).unwrap();
    check(
        &format!("attention_ptx_f16 {what}"),
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
    for k in [&attention_scores_f16::KERNEL, &attention_pv_f16::KERNEL, &attention_ptx_f16::KERNEL] {
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
    // 2 heads × 6 triangle tiles = 12 workgroups (grid (4, 3)), P·V 3 × 2 = 6.
    check_attention(&gpu, Att { b: 1, s: 150, h: 2, hkv: 1, d: 8 }, &mut rng);
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
    let mut probs = gpu.zeros::<f32>(64).unwrap();
    let p = kernels::attention::attention_scores_f16::ScoreParams::new(1, 4, 1, 1, 6, 1.0);
    let e = attention_scores_f16(&gpu, &x, &w, &mut probs, p).unwrap_err();
    assert!(e.to_string().contains("head_dim % 4"), "{e}");
    let p = kernels::attention::attention_pv_f16::AttParams::new(1, 4, 3, 2, 4, 1.0);
    let e = attention_pv_f16(&gpu, &probs, &x, &mut y, p).unwrap_err();
    assert!(e.to_string().contains("heads % p.kv_heads"), "{e}");
    let src = gpu.zeros::<f32>(5).unwrap();
    let mut dst = gpu.zeros::<F16x4>(1).unwrap();
    assert!(ops::cast_f16x4(&gpu, &src, &mut dst, 1, 5).is_err());
    // Nothing was dispatched that failed on the device.
    gpu.wait().unwrap();
}
