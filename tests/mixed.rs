//! The loss-scaling kernels (`optimizer::scale_by_state`, `optimizer::scaler_update`,
//! `cast::cast_grad_f16x4`) against float64 references (or exact expectations where the arithmetic is exact), on
//! fresh random inputs, outputs poisoned first, rows that are not a multiple of 4, and the 2-D
//! grid fallback.

mod common;

use common::{gpu, gpu_with, rng, uniform};
use kernels::cast::cast_grad_f16x4;
use kernels::ops::{self, F16x4};
use kernels::optimizer::{scale_by_state, scaler_update};
use kernels::{Gpu, GpuOptions, f16};

/// Poisoned elements past each output, which must survive.
const TAIL: usize = 5;

fn has_f16(gpu: &Gpu) -> bool {
    let yes = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    if !yes {
        eprintln!("adapter without SHADER_F16: the f16 kernels are not run");
    }
    yes
}

fn same_f16(got: &[F16x4], want: &[F16x4], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for c in 0..4 {
            let same = g[c].to_bits() == w[c].to_bits() || (g[c].is_nan() && w[c].is_nan());
            assert!(same, "{what}: vec4 {i} lane {c}: {} vs {}", g[c], w[c]);
        }
    }
}

fn nan16() -> F16x4 {
    [f16::from_f32(f32::NAN); 4]
}

fn cast_case(gpu: &Gpu, v: &[f32], rows: usize, cols: usize) -> (Vec<F16x4>, u32) {
    let src = gpu.upload(v).unwrap();
    let len = ops::f16x4_len(rows, cols);
    let mut dst = gpu.upload(&vec![nan16(); len + TAIL]).unwrap();
    let mut flag = gpu.upload(&[0u32, 7u32]).unwrap();
    let p = kernels::cast::cast_grad_f16x4::CastParams::new(rows as u32, cols as u32);
    cast_grad_f16x4(gpu, &src, &mut dst, &mut flag, p).unwrap();
    let got = dst.read(gpu).unwrap();
    assert!(got[len..].iter().all(|g| g.iter().all(|h| h.is_nan())), "({rows}, {cols}): wrote past the output");
    let flag = flag.read(gpu).unwrap();
    assert_eq!(flag[1], 7, "wrote past the flag");
    (got[..len].to_vec(), flag[0])
}

#[test]
fn cast_grad_f16x4_casts_like_cast_f16x4_and_flags_overflow() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("cast_grad_f16x4");
    for (rows, cols) in [(1, 1), (3, 5), (17, 64), (9, 131)] {
        let mut v = uniform(&mut rng, rows * cols, -60000.0, 60000.0);
        let (got, flag) = cast_case(&gpu, &v, rows, cols);
        same_f16(&got, &ops::to_f16x4(&v, rows, cols), &format!("({rows}, {cols}) in range"));
        assert_eq!(flag, 0, "({rows}, {cols}): values within ±65504 raised the flag");
        let last = v.len() - 1;
        for bad in [70000.0, -65600.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            v[last] = bad;
            let (got, flag) = cast_case(&gpu, &v, rows, cols);
            same_f16(&got, &ops::to_f16x4(&v, rows, cols), &format!("({rows}, {cols}) with {bad}"));
            assert_eq!(flag, 1, "({rows}, {cols}): {bad} did not raise the flag");
        }
        v[last] = 1.0;
    }
}

#[test]
fn cast_grad_f16x4_on_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("cast_grad_f16x4_2d");
    // 40 × 33 = 1320 vec4s: 6 workgroups of 256, over the limit of 4 per dimension.
    let (rows, cols) = (40, 130);
    let mut v = uniform(&mut rng, rows * cols, -2.0, 2.0);
    let (got, flag) = cast_case(&gpu, &v, rows, cols);
    same_f16(&got, &ops::to_f16x4(&v, rows, cols), "2-D grid");
    assert_eq!(flag, 0);
    // The very last element lies in the 2-D grid's far part.
    v[rows * cols - 1] = 1.0e5;
    assert_eq!(cast_case(&gpu, &v, rows, cols).1, 1, "an overflow in the last workgroup was missed");
}

#[test]
fn scale_by_state_multiplies_by_the_scale() {
    for limit in [None, Some(4)] {
        let options = match limit {
            Some(l) => GpuOptions::from_env().max_workgroups_per_dimension(l),
            None => GpuOptions::from_env(),
        };
        let Some(gpu) = gpu_with(options) else { return };
        let mut rng = rng("scale_by_state");
        for n in [1usize, 257, 1500] {
            let x = uniform(&mut rng, n, -1.0, 1.0);
            let mut buf = x.clone();
            buf.extend([f32::NAN; TAIL]);
            let mut xb = gpu.upload(&buf).unwrap();
            let state = gpu.upload(&[4096.0f32, 0.0, 0.0, 0.0]).unwrap();
            scale_by_state(&gpu, &mut xb, &state, kernels::optimizer::scale_by_state::ScaleParams::new(n as u32))
                .unwrap();
            let got = xb.read(&gpu).unwrap();
            for (i, (g, w)) in got.iter().zip(&x).enumerate() {
                // A power of two: exact.
                assert_eq!(g.to_bits(), (w * 4096.0).to_bits(), "n = {n}, element {i}, limit {limit:?}");
            }
            assert!(got[n..].iter().all(|g| g.is_nan()), "wrote past n");
        }
    }
}

/// One `scaler_update` on the GPU: (state after, flag after).
fn scaler_step(gpu: &Gpu, stats: [f32; 4], flag: u32, state: [f32; 8], interval: u32, clip: f32) -> ([f32; 8], u32) {
    let stats = gpu.upload(&stats).unwrap();
    let mut flag = gpu.upload(&[flag]).unwrap();
    let mut st = gpu.upload(&state).unwrap();
    let p = kernels::optimizer::scaler_update::ScalerParams::new(interval, clip);
    scaler_update(gpu, &stats, &mut flag, &mut st, p).unwrap();
    let s = st.read(gpu).unwrap();
    (s.try_into().unwrap(), flag.read(gpu).unwrap()[0])
}

#[test]
fn scaler_update_skips_halves_grows_and_computes_the_factor() {
    let Some(gpu) = gpu() else { return };
    let start = [1024.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    // A clean step, clipping on: the unscaled norm is 4096 / 1024 = 4, so clip = 1 / (4 + 1e-6).
    let (s, flag) = scaler_step(&gpu, [0.0, 0.0, 4096.0, 0.0], 0, start, 2, 1.0);
    let factor = (1.0 / (4.0 + 1e-6)) / 1024.0;
    assert!(((s[4] as f64 - factor) / factor).abs() < 1e-6, "factor {} vs {factor}", s[4]);
    assert_eq!((s[0], s[1], s[2], s[3], flag), (1024.0, 1.0, 0.0, 0.0, 0));
    // The second clean step in a row doubles the scale (interval 2); a small norm is not clipped.
    let (s, _) = scaler_step(&gpu, [0.0, 0.0, 512.0, 0.0], 0, s, 2, 1.0);
    assert_eq!((s[0], s[1], s[3], s[4]), (2048.0, 0.0, 0.0, 1.0 / 1024.0));
    // A cast overflow: skipped, halved, counted, flag cleared.
    let (s, flag) = scaler_step(&gpu, [0.0, 0.0, 512.0, 0.0], 1, s, 2, 1.0);
    assert_eq!((s[0], s[1], s[2], s[3], s[4], flag), (1024.0, 0.0, 1.0, 1.0, 0.0, 0));
    // Non-finite gradient values.
    let (s, _) = scaler_step(&gpu, [0.0, 0.0, 512.0, 3.0], 0, s, 2, 1.0);
    assert_eq!((s[0], s[2], s[3]), (512.0, 2.0, 1.0));
    // A non-finite norm (finite values whose squares overflow).
    let (s, _) = scaler_step(&gpu, [f32::INFINITY, 0.0, f32::INFINITY, 0.0], 0, s, 2, 1.0);
    assert_eq!((s[0], s[2], s[3]), (256.0, 3.0, 1.0));
    // Clipping off: the factor is 1 / S; a clean step after skips clears the skip mark.
    let (s, _) = scaler_step(&gpu, [0.0, 0.0, 1.0e6, 0.0], 0, s, 2, 0.0);
    assert_eq!((s[0], s[1], s[2], s[3], s[4]), (256.0, 1.0, 3.0, 0.0, 1.0 / 256.0));
    // The scale stays within [2^-24, 2^24].
    let (s, _) = scaler_step(&gpu, [0.0; 4], 1, [5.960_464_5e-8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 2, 0.0);
    assert_eq!(s[0], 5.960_464_5e-8);
    let (s, _) = scaler_step(&gpu, [0.0; 4], 0, [16_777_216.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 1, 0.0);
    assert_eq!(s[0], 16_777_216.0);
}
