//! The optimizer kernels (`shaders/12_optimizer.wgsl`) against the float64 references of
//! `tests/reference/optimizer.rs`: gradient norm² and clip scale over several tensors, AdamW over
//! consecutive steps (bias corrections, weight decay, clipping, non-finite gradients skipped,
//! gradients zeroed), 8-bit AdamW against its own quantization model and against f32 AdamW, the
//! 2-D grid past 65535 blocks, determinism, and short buffers.

mod common;
#[path = "reference/optimizer.rs"]
mod reference;

use common::{assert_close, gpu, gpu_with, rel_err, rng, uniform};
use kernels::infrastructure::axpy;
use kernels::optimizer::{adamw_8bit_update, adamw_update, adamw_update_absmax, finalize_grad_stats, reduce_norm_sq};
use kernels::{Batch, Buffer, Error, Gpu, GpuOptions};
use rand::Rng;
use rand::rngs::StdRng;
use reference::{AdamW, QBLOCK, Quant8};

/// Lengths of the gradient tensors of one "model": odd sizes, one past a norm block (4096), one
/// of many blocks.
const LENS: [usize; 5] = [1, 255, 257, 4097, 100_003];

/// Hyperparameters, given to the GPU as f32; the reference uses the same f32 values widened to
/// f64 (f32(0.999) differs from 0.999 by 1.3e-8, i.e. 1 − β2 by 1.3e-5 relative — more than the
/// tolerance — so the reference must start from the values the GPU sees).
fn hyper() -> AdamW {
    AdamW {
        lr: 1e-2f32 as f64,
        beta1: 0.9f32 as f64,
        beta2: 0.999f32 as f64,
        eps: 1e-8f32 as f64,
        weight_decay: 0.1f32 as f64,
    }
}

fn adamw_params(h: &AdamW, n: usize, t: u32) -> adamw_update::Params {
    let (b1, b2) = h.bias(t);
    adamw_update::Params::new(
        n as u32,
        h.lr as f32,
        h.beta1 as f32,
        h.beta2 as f32,
        h.eps as f32,
        h.weight_decay as f32,
        b1 as f32,
        b2 as f32,
    )
}

fn adamw_8bit_params(h: &AdamW, n: usize, t: u32) -> adamw_8bit_update::Params {
    let a = adamw_params(h, n, t);
    adamw_8bit_update::Params::new(a.n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.bias1, a.bias2, 0)
}

/// The partial offsets of tensors of lengths `lens` and the total partial count.
fn offsets(lens: &[usize]) -> (Vec<usize>, usize) {
    let mut offs = Vec::new();
    let mut count = 0;
    for &n in lens {
        offs.push(count);
        count += reference::norm_blocks(n);
    }
    (offs, count)
}

/// Records the norm of all `grads` and the stats: `reduce_norm_sq` per tensor, then
/// `finalize_grad_stats`.
fn record_norm(
    batch: &Batch,
    grads: &[&Buffer<f32>],
    partials: &mut Buffer<f32>,
    bad: &mut Buffer<u32>,
    stats: &mut Buffer<f32>,
    max_norm: f32,
) {
    let lens: Vec<usize> = grads.iter().map(|g| g.len()).collect();
    let (offs, count) = offsets(&lens);
    for (g, off) in grads.iter().zip(offs) {
        reduce_norm_sq(batch, g, partials, bad, reduce_norm_sq::Params::new(g.len() as u32, off as u32)).unwrap();
    }
    finalize_grad_stats(batch, partials, bad, stats, finalize_grad_stats::Params::new(count as u32, max_norm)).unwrap();
}

#[track_caller]
fn assert_rel(what: &str, got: f64, want: f64, tol: f64) {
    let e = (got - want).abs() / want.abs().max(1e-30);
    assert!(e < tol, "{what}: got {got:e}, want {want:e} (relative error {e:e} ≥ {tol:e})");
}

fn check_norm(gpu: &Gpu, label: &str) {
    let mut rng = rng(label);
    let mut host: Vec<Vec<f32>> = LENS.iter().map(|&n| uniform(&mut rng, n, -1.0, 1.0)).collect();
    // Non-finite values: left out of the norm and counted.
    host[0][0] = f32::NAN;
    host[3][4096] = f32::INFINITY;
    host[4][99_999] = f32::NEG_INFINITY;
    host[4][7] = f32::NAN;
    let grads: Vec<Buffer<f32>> = host.iter().map(|g| gpu.upload(g).unwrap()).collect();
    let refs: Vec<&Buffer<f32>> = grads.iter().collect();
    let (_, count) = offsets(&LENS);

    let want_partials: Vec<(f64, u32)> = host.iter().flat_map(|g| reference::norm_sq_partials(g)).collect();
    assert_eq!(want_partials.len(), count);
    let slices: Vec<&[f32]> = host.iter().map(|g| &g[..]).collect();
    let (want_sq, want_bad) = reference::norm_sq(&slices);
    assert_eq!(want_bad, 4);

    // Clipping on (max_norm below the norm), poisoned outputs with a tail that must stay.
    let max_norm = (0.5 * want_sq.sqrt()) as f32;
    let run = || {
        let mut partials = gpu.filled(count + 3, f32::NAN).unwrap();
        let mut bad = gpu.filled(count + 3, u32::MAX).unwrap();
        let mut stats = gpu.filled(6, f32::NAN).unwrap();
        let batch = gpu.batch();
        record_norm(&batch, &refs, &mut partials, &mut bad, &mut stats, max_norm);
        batch.submit().unwrap();
        (partials.read(gpu).unwrap(), bad.read(gpu).unwrap(), stats.read(gpu).unwrap(), partials, bad)
    };
    let (partials, bad, stats, partials_buf, bad_buf) = run();
    for (j, (&got, &(want, want_b))) in partials.iter().zip(&want_partials).enumerate() {
        assert_rel(&format!("{label}: partial {j}"), got as f64, want, 1e-5);
        assert_eq!(bad[j], want_b, "{label}: non-finite count of partial {j}");
    }
    assert!(partials[count..].iter().all(|v| v.is_nan()), "{label}: partials past count written");
    assert!(bad[count..].iter().all(|&v| v == u32::MAX), "{label}: counts past count written");
    assert_rel(&format!("{label}: norm²"), stats[0] as f64, want_sq, 1e-5);
    let want_clip = reference::clip_scale(want_sq, max_norm as f64);
    assert!(want_clip < 0.51, "clipping must be active");
    assert_rel(&format!("{label}: clip scale"), stats[1] as f64, want_clip, 1e-5);
    assert_rel(&format!("{label}: norm"), stats[2] as f64, want_sq.sqrt(), 1e-5);
    assert_eq!(stats[3], 4.0, "{label}: non-finite count");
    assert!(stats[4..].iter().all(|v| v.is_nan()), "{label}: stats past 4 written");

    // The same bits on every run.
    let (partials2, bad2, stats2, _, _) = run();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&partials), bits(&partials2), "{label}: partials not deterministic");
    assert_eq!(bad, bad2);
    assert_eq!(bits(&stats), bits(&stats2), "{label}: stats not deterministic");

    // Clipping off: max_norm ≤ 0, or above the norm, gives exactly 1.
    for max_norm in [0.0f32, -1.0, (2.0 * want_sq.sqrt()) as f32] {
        let mut stats = gpu.filled(4, f32::NAN).unwrap();
        finalize_grad_stats(
            gpu,
            &partials_buf,
            &bad_buf,
            &mut stats,
            finalize_grad_stats::Params::new(count as u32, max_norm),
        )
        .unwrap();
        let s = stats.read(gpu).unwrap();
        assert_eq!(s[1], 1.0, "{label}: clip scale with max_norm = {max_norm}");
        assert_eq!(s[0].to_bits(), stats2[0].to_bits(), "{label}: norm² changed with max_norm");
    }
    // No partials at all: norm 0, scale 1.
    let mut stats = gpu.filled(4, f32::NAN).unwrap();
    finalize_grad_stats(gpu, &partials_buf, &bad_buf, &mut stats, finalize_grad_stats::Params::new(0, 1.0)).unwrap();
    assert_eq!(stats.read(gpu).unwrap(), vec![0.0, 1.0, 0.0, 0.0]);
}

#[test]
fn norm_sq_over_tensors_and_clip_scale() {
    let Some(gpu) = gpu() else { return };
    check_norm(&gpu, "norm (subgroups)");
}

#[test]
fn norm_sq_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    check_norm(&gpu, "norm (tree)");
}

/// Per step: the gradient scale of each tensor, the max_norm (≤ 0: clipping off), and whether
/// to plant non-finite gradient values.
const SCHEDULE: [(f32, f32, bool); 6] = [
    (1.0, 0.0, false),  // clipping off
    (2.0, 1.0, false),  // clipping on, hard
    (0.5, 1e6, false),  // clipping on but above the norm: scale 1
    (1.0, 5.0, true),   // non-finite values, clipping on
    (0.01, 0.0, false), // small gradients after large ones (v decays slowly)
    (3.0, 10.0, false),
];

/// Fresh random gradients for one step (never zeros), with NaN/±Inf planted when asked.
fn step_grads(rng: &mut StdRng, lens: &[usize], scale: f32, nonfinite: bool) -> (Vec<Vec<f32>>, Vec<(usize, usize)>) {
    let mut gs: Vec<Vec<f32>> = lens.iter().map(|&n| uniform(rng, n, -scale, scale)).collect();
    let mut planted = Vec::new();
    if nonfinite {
        for (k, &bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN].iter().enumerate() {
            let t = k % lens.len();
            let i = rng.random_range(0..lens[t]);
            if gs[t][i].is_finite() {
                gs[t][i] = bad;
                planted.push((t, i));
            }
        }
        // Always one in the largest tensor.
        let t = lens.len() - 1;
        if gs[t][lens[t] / 2].is_finite() {
            gs[t][lens[t] / 2] = f32::NAN;
            planted.push((t, lens[t] / 2));
        }
    }
    (gs, planted)
}

struct State32 {
    p: Buffer<f32>,
    g: Buffer<f32>,
    m: Buffer<f32>,
    v: Buffer<f32>,
}

struct State8 {
    p: Buffer<f32>,
    g: Buffer<f32>,
    mq: Buffer<u32>,
    vq: Buffer<u32>,
    qscale: Buffer<f32>,
}

fn new8(gpu: &Gpu, p0: &[f32]) -> State8 {
    let n = p0.len();
    State8 {
        p: gpu.upload(p0).unwrap(),
        g: gpu.zeros(n).unwrap(),
        mq: gpu.zeros(n.div_ceil(4)).unwrap(),
        vq: gpu.zeros(n.div_ceil(4)).unwrap(),
        qscale: gpu.zeros(2 * n.div_ceil(QBLOCK)).unwrap(),
    }
}

fn read8(gpu: &Gpu, s: &State8) -> (Vec<f32>, Quant8) {
    let n = s.p.len();
    let q = Quant8::from_gpu(n, &s.mq.read(gpu).unwrap(), &s.vq.read(gpu).unwrap(), &s.qscale.read(gpu).unwrap());
    (s.p.read(gpu).unwrap(), q)
}

/// The GPU's 8-bit state after a step against the float64 model run from the GPU's state
/// before it. Codes may differ by one where the scaled value lies within f32 rounding (~1e-6
/// relative) of a rounding boundary (the GPU computes m, v and the scales in f32, the model in
/// f64); they must agree exactly almost everywhere. Returns the number of differing codes.
#[track_caller]
fn check_against_model(what: &str, got_p: &[f32], got: &Quant8, want_p: &[f64], want: &Quant8) -> usize {
    assert_close(&format!("{what}: p"), got_p, want_p, 1e-5);
    for b in 0..want.m_scale.len() {
        assert!((got.m_scale[b] - want.m_scale[b]).abs() <= 1e-5 * want.m_scale[b] + 1e-30, "{what}: m scale {b}");
        assert!((got.v_scale[b] - want.v_scale[b]).abs() <= 1e-5 * want.v_scale[b] + 1e-30, "{what}: v scale {b}");
    }
    let mut differ = 0;
    for i in 0..want.m_code.len() {
        let dm = (got.m_code[i] as i32 - want.m_code[i] as i32).abs();
        let dv = (got.v_code[i] as i32 - want.v_code[i] as i32).abs();
        assert!(
            dm <= 1 && dv <= 1,
            "{what}: codes of {i}: m {} vs {}, v {} vs {}",
            got.m_code[i],
            want.m_code[i],
            got.v_code[i],
            want.v_code[i]
        );
        differ += (dm + dv) as usize;
    }
    differ
}

/// AdamW (f32 state) against the float64 reference over consecutive steps, and 8-bit AdamW on
/// the same gradients against its float64 model (each step from the GPU's state) and against
/// the f32 trajectory. Gradients are accumulated with `axpy` into the buffers the previous step
/// zeroed, as the trainer's backward pass does.
#[test]
fn adamw_f32_and_8bit_over_steps() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("adamw");
    let lens = [1usize, 255, 257, 1000, 5003];
    let h = hyper();
    let p0: Vec<Vec<f32>> = lens.iter().map(|&n| uniform(&mut rng, n, -1.0, 1.0)).collect();

    // f32 state on the GPU (m, v start at zero; g zero, ready for +=) and in f64.
    let mut s32: Vec<State32> = p0
        .iter()
        .map(|p| State32 {
            p: gpu.upload(p).unwrap(),
            g: gpu.zeros(p.len()).unwrap(),
            m: gpu.zeros(p.len()).unwrap(),
            v: gpu.zeros(p.len()).unwrap(),
        })
        .collect();
    let mut rp: Vec<Vec<f64>> = p0.iter().map(|p| p.iter().map(|&x| x as f64).collect()).collect();
    let mut rm: Vec<Vec<f64>> = lens.iter().map(|&n| vec![0.0; n]).collect();
    let mut rv = rm.clone();
    let mut s8: Vec<State8> = p0.iter().map(|p| new8(&gpu, p)).collect();

    let (_, count) = offsets(&lens);
    let mut partials = gpu.filled(count, f32::NAN).unwrap();
    let mut bad = gpu.filled(count, u32::MAX).unwrap();
    let mut stats = gpu.filled(4, f32::NAN).unwrap();
    let mut differ = 0usize;
    let mut codes = 0usize;

    for (step, &(scale, max_norm, nonfinite)) in SCHEDULE.iter().enumerate() {
        let t = step as u32 + 1;
        let (gs, planted) = step_grads(&mut rng, &lens, scale, nonfinite);
        let before32: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> =
            s32.iter().map(|s| (s.p.read(&gpu).unwrap(), s.m.read(&gpu).unwrap(), s.v.read(&gpu).unwrap())).collect();
        let before8: Vec<(Vec<f32>, Quant8)> = s8.iter().map(|s| read8(&gpu, s)).collect();

        // One batch: accumulate the gradients, norm, stats, both updates of every tensor.
        let tmp: Vec<Buffer<f32>> = gs.iter().map(|g| gpu.upload(g).unwrap()).collect();
        let batch = gpu.batch();
        for ((s, s8), x) in s32.iter_mut().zip(&mut s8).zip(&tmp) {
            let n = x.len() as u32;
            axpy(&batch, x, &mut s.g, axpy::Params::new(n, 1.0)).unwrap();
            axpy(&batch, x, &mut s8.g, axpy::Params::new(n, 1.0)).unwrap();
        }
        let grads: Vec<&Buffer<f32>> = s32.iter().map(|s| &s.g).collect();
        record_norm(&batch, &grads, &mut partials, &mut bad, &mut stats, max_norm);
        for s in s32.iter_mut() {
            let n = s.p.len();
            adamw_update(&batch, &mut s.p, &mut s.g, &mut s.m, &mut s.v, &stats, adamw_params(&h, n, t)).unwrap();
        }
        for s in s8.iter_mut() {
            let n = s.p.len();
            adamw_8bit_update(
                &batch,
                &mut s.p,
                &mut s.g,
                &mut s.mq,
                &mut s.vq,
                &mut s.qscale,
                &stats,
                adamw_8bit_params(&h, n, t),
            )
            .unwrap();
        }
        batch.submit().unwrap();

        // Stats against the reference.
        let slices: Vec<&[f32]> = gs.iter().map(|g| &g[..]).collect();
        let (want_sq, want_bad) = reference::norm_sq(&slices);
        let clip = reference::clip_scale(want_sq, max_norm as f64);
        let st = stats.read(&gpu).unwrap();
        assert_rel(&format!("step {t}: norm²"), st[0] as f64, want_sq, 1e-5);
        assert_rel(&format!("step {t}: clip scale"), st[1] as f64, clip, 1e-5);
        assert_eq!(st[3] as usize, want_bad, "step {t}: non-finite count");
        assert_eq!(want_bad, planted.len());
        if max_norm > 0.0 && max_norm < 1e6 {
            assert!(clip < 0.99, "step {t}: the schedule means clipping to be active");
        } else {
            assert_eq!(st[1], 1.0);
        }

        for (k, s) in s32.iter().enumerate() {
            reference::adamw_step(&mut rp[k], &gs[k], &mut rm[k], &mut rv[k], clip, &h, t);
            let (p, m, v) = (s.p.read(&gpu).unwrap(), s.m.read(&gpu).unwrap(), s.v.read(&gpu).unwrap());
            let what = format!("adamw step {t} n={}", lens[k]);
            assert_close(&format!("{what}: p"), &p, &rp[k], 1e-5);
            assert_close(&format!("{what}: m"), &m, &rm[k], 1e-5);
            assert_close(&format!("{what}: v"), &v, &rv[k], 1e-5);
            assert!(s.g.read(&gpu).unwrap().iter().all(|&x| x.to_bits() == 0), "{what}: g not zeroed");
            for &(tk, i) in &planted {
                if tk == k {
                    let (bp, bm, bv) = &before32[k];
                    assert_eq!(
                        (p[i].to_bits(), m[i].to_bits(), v[i].to_bits()),
                        (bp[i].to_bits(), bm[i].to_bits(), bv[i].to_bits()),
                        "{what}: skipped element {i} changed"
                    );
                }
            }
        }

        // 8-bit: one step of the model from the GPU's state before, with the GPU's clip scale.
        for (k, s) in s8.iter().enumerate() {
            let (bp, bq) = &before8[k];
            let mut want_p: Vec<f64> = bp.iter().map(|&x| x as f64).collect();
            let mut want_q = bq.clone();
            reference::adamw_8bit_step(&mut want_p, &gs[k], &mut want_q, st[1] as f64, &h, t);
            let (p, q) = read8(&gpu, s);
            let what = format!("adamw 8-bit step {t} n={}", lens[k]);
            differ += check_against_model(&what, &p, &q, &want_p, &want_q);
            codes += 2 * lens[k];
            assert!(s.g.read(&gpu).unwrap().iter().all(|&x| x.to_bits() == 0), "{what}: g not zeroed");
            for &(tk, i) in &planted {
                if tk == k {
                    assert_eq!(p[i].to_bits(), bp[i].to_bits(), "{what}: skipped element {i}: p changed");
                }
            }
            // Bytes past n in the last word are zero.
            let n = lens[k];
            let last = s.mq.read(&gpu).unwrap()[n.div_ceil(4) - 1] | s.vq.read(&gpu).unwrap()[n.div_ceil(4) - 1];
            if !n.is_multiple_of(4) {
                assert_eq!(last >> (8 * (n % 4)), 0, "{what}: code bytes past n");
            }
        }
    }
    eprintln!("8-bit codes differing by one from the float64 model: {differ} of {codes}");
    assert!(differ * 1000 <= codes, "too many codes off by one: {differ} of {codes}");

    // 8-bit tracks f32 AdamW. Per step the 8-bit moments carry a quantization error of at most
    // half a code (m: 0.4% of the block's absmax; √v: 0.2% of its max), which is relatively
    // larger for elements far below their block's max; the update direction m̂/√v̂ of such
    // elements moves by a few percent. Over the 6 steps the total displacement p − p0 of
    // 8-bit and f32 AdamW differs by ≈1% (measured 0.6–1.8% over several seeds); 5e-2 leaves room for the seed.
    for (k, (s, s32)) in s8.iter().zip(&s32).enumerate() {
        let p8 = s.p.read(&gpu).unwrap();
        let p32 = s32.p.read(&gpu).unwrap();
        let d32: Vec<f64> = p32.iter().zip(&p0[k]).map(|(&a, &b)| a as f64 - b as f64).collect();
        let d8: Vec<f32> = p8.iter().zip(&p0[k]).map(|(&a, &b)| a - b).collect();
        let e = rel_err(&d8, &d32);
        eprintln!("n={}: ‖Δp8 − Δp32‖ / ‖Δp32‖ = {e:.3e}", lens[k]);
        assert!(e < 5e-2, "n={}: 8-bit AdamW drifted from f32 AdamW: {e:e}", lens[k]);
    }

    // Determinism of one more step of each, from the same state twice.
    let (gs, _) = step_grads(&mut rng, &lens, 1.0, false);
    let k = lens.len() - 1;
    let n = lens[k];
    let saved8 = read8(&gpu, &s8[k]);
    let saved32 = (s32[k].p.read(&gpu).unwrap(), s32[k].m.read(&gpu).unwrap(), s32[k].v.read(&gpu).unwrap());
    let mut outs = Vec::new();
    for _ in 0..2 {
        let (mq, vq, qs) = saved8.1.to_gpu();
        let s = &mut s8[k];
        s.p.write(&gpu, &saved8.0).unwrap();
        s.mq.write(&gpu, &mq).unwrap();
        s.vq.write(&gpu, &vq).unwrap();
        s.qscale.write(&gpu, &qs).unwrap();
        s.g.write(&gpu, &gs[k]).unwrap();
        let s3 = &mut s32[k];
        s3.p.write(&gpu, &saved32.0).unwrap();
        s3.m.write(&gpu, &saved32.1).unwrap();
        s3.v.write(&gpu, &saved32.2).unwrap();
        s3.g.write(&gpu, &gs[k]).unwrap();
        let batch = gpu.batch();
        adamw_8bit_update(
            &batch,
            &mut s.p,
            &mut s.g,
            &mut s.mq,
            &mut s.vq,
            &mut s.qscale,
            &stats,
            adamw_8bit_params(&h, n, 7),
        )
        .unwrap();
        adamw_update(&batch, &mut s3.p, &mut s3.g, &mut s3.m, &mut s3.v, &stats, adamw_params(&h, n, 7)).unwrap();
        batch.submit().unwrap();
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        outs.push((
            bits(s.p.read(&gpu).unwrap()),
            s.mq.read(&gpu).unwrap(),
            s.vq.read(&gpu).unwrap(),
            bits(s.qscale.read(&gpu).unwrap()),
            bits(s3.p.read(&gpu).unwrap()),
            bits(s3.m.read(&gpu).unwrap()),
            bits(s3.v.read(&gpu).unwrap()),
        ));
    }
    assert!(outs[0] == outs[1], "AdamW steps are not deterministic");
}

/// The 8-bit update of a tensor of 65536·256 + 77 values: 65537 blocks, more than the 65535
/// workgroups of one grid dimension, so the runtime dispatches a 2-D grid (32769 × 2) and the
/// kernel must take its block from `flat_wg`. (The original used `workgroup_id.x` alone: the
/// blocks past 32768 were never updated and the first ones were updated twice.)
///
/// Fast, simple inputs from zero state at step 1: block b has gradient amplitude a_b (distinct
/// between neighbouring blocks) and g = a_b·k/127 with an integer k ∈ [−127, 127] that depends
/// on the position in the block (k = 127 at position 0). Then every code is known exactly
/// (m code = k, √v code = round(|k|·255/127), far from ties), every block's scales are
/// (1−β1)·a_b and √(1−β2)·a_b, and p = p0 − lr·(g/(|g|+eps) + wd·p0). These are checked for every
/// element and block; the float64 model is run on a sample of blocks.
#[test]
fn adamw_8bit_past_65535_blocks() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("adamw 8-bit 2-D");
    let blocks = 65_537usize;
    let n = (blocks - 1) * QBLOCK + 77;
    assert!(n > 16_776_960 && n.div_ceil(QBLOCK) > gpu.limits().max_compute_workgroups_per_dimension as usize);
    let amp = |b: usize| 0.5 + (b % 61) as f32 / 16.0;
    let code = |b: usize, t: usize| if t == 0 { 127 } else { ((t * 37 + b) % 255) as i32 - 127 };
    let g: Vec<f32> =
        (0..n).map(|i| (amp(i / QBLOCK) as f64 * code(i / QBLOCK, i % QBLOCK) as f64 / 127.0) as f32).collect();
    let p0: Vec<f32> = (0..n).map(|i| 0.25 + (i % 7) as f32 * 0.125).collect();
    let h = hyper();
    let mut s = new8(&gpu, &p0);
    s.g.write(&gpu, &g).unwrap();
    let stats = gpu.upload(&[0.0f32, 1.0, 0.0, 0.0]).unwrap();
    adamw_8bit_update(
        &gpu,
        &mut s.p,
        &mut s.g,
        &mut s.mq,
        &mut s.vq,
        &mut s.qscale,
        &stats,
        adamw_8bit_params(&h, n, 1),
    )
    .unwrap();

    let (p, q) = read8(&gpu, &s);
    assert!(s.g.read(&gpu).unwrap().iter().all(|&x| x.to_bits() == 0), "g not zeroed everywhere");
    let bias = h.bias(1);
    for b in 0..blocks {
        let a = amp(b) as f64;
        assert_rel(&format!("m scale of block {b}"), q.m_scale[b], (1.0 - h.beta1) * a, 1e-6);
        assert_rel(&format!("v scale of block {b}"), q.v_scale[b], (1.0 - h.beta2).sqrt() * a, 1e-6);
    }
    for i in 0..n {
        let (b, t) = (i / QBLOCK, i % QBLOCK);
        let k = code(b, t);
        assert_eq!(q.m_code[i] as i32, k, "m code of {i} (block {b})");
        assert_eq!(q.v_code[i] as f64, (k.abs() as f64 * 255.0 / 127.0).round_ties_even(), "v code of {i} (block {b})");
        let (want, _, _) = reference::adamw_element(p0[i] as f64, 0.0, 0.0, g[i] as f64, &h, bias);
        assert!((p[i] as f64 - want).abs() <= 1e-6 * want.abs().max(1.0), "p of {i} (block {b}): {} vs {want}", p[i]);
    }
    // Code bytes past n in the last word stay zero.
    let (mq, vq) = (s.mq.read(&gpu).unwrap(), s.vq.read(&gpu).unwrap());
    assert_eq!((mq[n.div_ceil(4) - 1] | vq[n.div_ceil(4) - 1]) >> (8 * (n % 4)), 0);

    // The float64 model on a sample of blocks: around the 2-D split (32768/32769), the last
    // full and the partial block, and random ones.
    let mut sample = vec![0, 1, 32_767, 32_768, 32_769, 65_534, 65_535, 65_536];
    sample.extend((0..8).map(|_| rng.random_range(0..blocks)));
    for b in sample {
        let r = b * QBLOCK..((b + 1) * QBLOCK).min(n);
        let mut want_p: Vec<f64> = p0[r.clone()].iter().map(|&x| x as f64).collect();
        let mut want_q = Quant8::zeros(r.len());
        reference::adamw_8bit_step(&mut want_p, &g[r.clone()], &mut want_q, 1.0, &h, 1);
        let got_q = Quant8 {
            m_code: q.m_code[r.clone()].to_vec(),
            v_code: q.v_code[r.clone()].to_vec(),
            m_scale: vec![q.m_scale[b]],
            v_scale: vec![q.v_scale[b]],
        };
        let differ = check_against_model(&format!("block {b}"), &p[r], &got_q, &want_p, &want_q);
        assert_eq!(differ, 0, "block {b}: codes differ from the model");
    }
}

/// 8-bit AdamW with the tree reductions (no subgroups) against the float64 model.
#[test]
fn adamw_8bit_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    assert!(!gpu.variant_for(&adamw_8bit_update::KERNEL).unwrap().subgroups);
    let mut rng = rng("adamw 8-bit (tree)");
    let h = hyper();
    let n = 1000;
    let p0 = uniform(&mut rng, n, -1.0, 1.0);
    let mut s = new8(&gpu, &p0);
    let stats = gpu.upload(&[0.0f32, 0.75, 0.0, 0.0]).unwrap();
    for t in 1..=3 {
        let g = uniform(&mut rng, n, -1.0, 1.0);
        let (bp, bq) = read8(&gpu, &s);
        s.g.write(&gpu, &g).unwrap();
        adamw_8bit_update(
            &gpu,
            &mut s.p,
            &mut s.g,
            &mut s.mq,
            &mut s.vq,
            &mut s.qscale,
            &stats,
            adamw_8bit_params(&h, n, t),
        )
        .unwrap();
        let mut want_p: Vec<f64> = bp.iter().map(|&x| x as f64).collect();
        let mut want_q = bq;
        reference::adamw_8bit_step(&mut want_p, &g, &mut want_q, 0.75, &h, t);
        let (p, q) = read8(&gpu, &s);
        let differ = check_against_model(&format!("tree step {t}"), &p, &q, &want_p, &want_q);
        assert!(differ <= 2, "tree step {t}: {differ} codes off by one");
    }
}

/// A `@requires` of every kernel failing: `Err` before anything runs.
#[test]
fn short_buffers_are_errors() {
    let Some(gpu) = gpu() else { return };
    let shape = |e: Error, needle: &str| {
        assert!(matches!(e, Error::Shape { .. }), "{e:?}");
        assert!(e.to_string().contains(needle), "{e}");
    };
    let g = gpu.upload(&vec![1.0f32; 5000]).unwrap();
    // 5000 values need 2 partials at offset 3: 5 entries.
    let mut partials = gpu.zeros::<f32>(4).unwrap();
    let mut bad = gpu.zeros::<u32>(5).unwrap();
    let e = reduce_norm_sq(&gpu, &g, &mut partials, &mut bad, reduce_norm_sq::Params::new(5000, 3)).unwrap_err();
    shape(e, "len(partials) >= p.offset + ceil_div(p.n, NORM_BLOCK)");
    let e = reduce_norm_sq(&gpu, &g, &mut partials, &mut bad, reduce_norm_sq::Params::new(5001, 0)).unwrap_err();
    shape(e, "len(g) >= p.n");
    assert_eq!(partials.read(&gpu).unwrap(), vec![0.0; 4], "nothing ran");

    let mut stats = gpu.zeros::<f32>(3).unwrap();
    let e =
        finalize_grad_stats(&gpu, &partials, &bad, &mut stats, finalize_grad_stats::Params::new(4, 1.0)).unwrap_err();
    shape(e, "len(stats) >= 4");
    let mut stats = gpu.zeros::<f32>(4).unwrap();
    let e =
        finalize_grad_stats(&gpu, &partials, &bad, &mut stats, finalize_grad_stats::Params::new(5, 1.0)).unwrap_err();
    shape(e, "len(partials) >= p.count");

    let h = hyper();
    let n = 1000;
    let mut p = gpu.zeros::<f32>(n).unwrap();
    let mut gr = gpu.zeros::<f32>(n).unwrap();
    let mut m = gpu.zeros::<f32>(n).unwrap();
    let mut v = gpu.zeros::<f32>(n - 1).unwrap();
    let e = adamw_update(&gpu, &mut p, &mut gr, &mut m, &mut v, &stats, adamw_params(&h, n, 1)).unwrap_err();
    shape(e, "len(v) >= h.n");
    let short_stats = gpu.zeros::<f32>(1).unwrap();
    let mut v = gpu.zeros::<f32>(n).unwrap();
    let e = adamw_update(&gpu, &mut p, &mut gr, &mut m, &mut v, &short_stats, adamw_params(&h, n, 1)).unwrap_err();
    shape(e, "len(stats) >= 2");

    // 1000 values: 250 code words, 4 blocks → 8 scales.
    let mut mq = gpu.zeros::<u32>(250).unwrap();
    let mut vq = gpu.zeros::<u32>(249).unwrap();
    let mut qscale = gpu.zeros::<f32>(8).unwrap();
    let e =
        adamw_8bit_update(&gpu, &mut p, &mut gr, &mut mq, &mut vq, &mut qscale, &stats, adamw_8bit_params(&h, n, 1))
            .unwrap_err();
    shape(e, "len(vq) >= ceil_div(h.n, 4)");
    let mut vq = gpu.zeros::<u32>(250).unwrap();
    let mut qscale = gpu.zeros::<f32>(7).unwrap();
    let e =
        adamw_8bit_update(&gpu, &mut p, &mut gr, &mut mq, &mut vq, &mut qscale, &stats, adamw_8bit_params(&h, n, 1))
            .unwrap_err();
    shape(e, "len(qscale) >= 2 * ceil_div(h.n, QBLOCK)");
    let mut qscale = gpu.zeros::<f32>(8).unwrap();
    adamw_8bit_update(&gpu, &mut p, &mut gr, &mut mq, &mut vq, &mut qscale, &stats, adamw_8bit_params(&h, n, 1))
        .unwrap();
}

/// The chunked updates under a 2-D grid give the same bits as under their own 1-D grid. Their
/// grids only turn 2-D past 65535 workgroups of 2048 (f32) or 1024 (8-bit) values, beyond this
/// adapter's 128 MiB bindings, so an explicit (2, 2, 1) grid goes through the untyped API: 4
/// workgroups for 3 chunks, laid out as the runtime's fallback lays out a long grid.
#[test]
fn chunked_updates_on_a_2d_grid() {
    use kernels::__private::bytemuck::bytes_of;
    use kernels::{Arg, Call, Grid, Record};
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("adamw 2-D");
    let h = hyper();
    let stats = gpu.upload(&[0.0f32, 0.8, 0.0, 0.0]).unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();

    let n = 2 * 2048 + 77;
    let p0 = uniform(&mut rng, n, -1.0, 1.0);
    let mut g0 = uniform(&mut rng, n, -1.0, 1.0);
    g0[3000] = f32::NAN;
    let m0 = uniform(&mut rng, n, -0.1, 0.1);
    let v0 = uniform(&mut rng, n, 0.0, 0.01);
    let mk = || State32 {
        p: gpu.upload(&p0).unwrap(),
        g: gpu.upload(&g0).unwrap(),
        m: gpu.upload(&m0).unwrap(),
        v: gpu.upload(&v0).unwrap(),
    };
    let (mut a, b) = (mk(), mk());
    let params = adamw_params(&h, n, 3);
    adamw_update(&gpu, &mut a.p, &mut a.g, &mut a.m, &mut a.v, &stats, params).unwrap();
    let args = [
        Arg::storage(&b.p, true),
        Arg::storage(&b.g, true),
        Arg::storage(&b.m, true),
        Arg::storage(&b.v, true),
        Arg::storage(&stats, false),
        Arg::uniform(bytes_of(&params)),
    ];
    let call = Call { kernel: &adamw_update::KERNEL, grid: Grid::Explicit([2, 2, 1]), args: &args, overrides: &[] };
    (&gpu).record(call).unwrap();
    for (what, x, y) in [("p", &a.p, &b.p), ("g", &a.g, &b.g), ("m", &a.m, &b.m), ("v", &a.v, &b.v)] {
        assert_eq!(bits(x.read(&gpu).unwrap()), bits(y.read(&gpu).unwrap()), "adamw_update {what}");
    }

    let n = 2 * 1024 + 77;
    let p0 = uniform(&mut rng, n, -1.0, 1.0);
    let g0 = uniform(&mut rng, n, -1.0, 1.0);
    let (mut a, mut b) = (new8(&gpu, &p0), new8(&gpu, &p0));
    a.g.write(&gpu, &g0).unwrap();
    b.g.write(&gpu, &g0).unwrap();
    let params = adamw_8bit_params(&h, n, 1);
    adamw_8bit_update(&gpu, &mut a.p, &mut a.g, &mut a.mq, &mut a.vq, &mut a.qscale, &stats, params).unwrap();
    let args = [
        Arg::storage(&b.p, true),
        Arg::storage(&b.g, true),
        Arg::storage(&b.mq, true),
        Arg::storage(&b.vq, true),
        Arg::storage(&b.qscale, true),
        Arg::storage(&stats, false),
        Arg::uniform(bytes_of(&params)),
    ];
    let call =
        Call { kernel: &adamw_8bit_update::KERNEL, grid: Grid::Explicit([2, 2, 1]), args: &args, overrides: &[] };
    (&gpu).record(call).unwrap();
    assert_eq!(bits(a.p.read(&gpu).unwrap()), bits(b.p.read(&gpu).unwrap()), "8-bit p");
    assert_eq!(bits(a.g.read(&gpu).unwrap()), bits(b.g.read(&gpu).unwrap()), "8-bit g");
    assert_eq!(a.mq.read(&gpu).unwrap(), b.mq.read(&gpu).unwrap(), "8-bit m codes");
    assert_eq!(a.vq.read(&gpu).unwrap(), b.vq.read(&gpu).unwrap(), "8-bit v codes");
    assert_eq!(bits(a.qscale.read(&gpu).unwrap()), bits(b.qscale.read(&gpu).unwrap()), "8-bit scales");
    assert!(a.qscale.read(&gpu).unwrap().iter().all(|&s| s > 0.0), "every block updated");
}

/// `adamw_update_absmax` takes `adamw_update`'s step bit for bit (parameters, moments, zeroed
/// gradients) and folds the largest finite |p| of the updated tensor into its scale word: an
/// element whose gradient is not finite keeps its parameter, which counts as it stands (planted
/// here as the largest), and the neighbouring words are untouched. Over tensors of one element
/// to many workgroups, with NaN/±Inf gradients planted.
#[test]
fn adamw_with_the_max_of_the_new_weights() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("adamw_absmax");
    let h = hyper();
    let (gs, planted) = step_grads(&mut rng, &LENS, 1.0, true);
    let stats = gpu.upload(&[1.0f32, 0.7, 1.0, 0.0]).unwrap();
    for (t, &n) in LENS.iter().enumerate() {
        let mut p0 = uniform(&mut rng, n, -2.0, 2.0);
        if let Some(&(_, i)) = planted.iter().find(|&&(k, _)| k == t) {
            p0[i] = -1e6;
        }
        let m0 = uniform(&mut rng, n, -0.1, 0.1);
        let v0: Vec<f32> = uniform(&mut rng, n, 0.0, 0.01);
        let up = |x: &[f32]| gpu.upload(x).unwrap();
        let mut a = State32 { p: up(&p0), g: up(&gs[t]), m: up(&m0), v: up(&v0) };
        let mut b = State32 { p: up(&p0), g: up(&gs[t]), m: up(&m0), v: up(&v0) };
        let mut amax = gpu.upload(&[7u32, 0, 7]).unwrap();
        let ap = adamw_params(&h, n, 3);
        adamw_update(&gpu, &mut a.p, &mut a.g, &mut a.m, &mut a.v, &stats, ap).unwrap();
        let bp = adamw_update_absmax::AbsmaxParams::new(
            ap.n,
            ap.lr,
            ap.beta1,
            ap.beta2,
            ap.eps,
            ap.weight_decay,
            ap.bias1,
            ap.bias2,
            1,
        );
        adamw_update_absmax(&gpu, &mut b.p, &mut b.g, &mut b.m, &mut b.v, &stats, &mut amax, bp).unwrap();
        let bits = |x: &Buffer<f32>| x.read(&gpu).unwrap().into_iter().map(f32::to_bits).collect::<Vec<_>>();
        for (what, x, y) in [("p", &a.p, &b.p), ("g", &a.g, &b.g), ("m", &a.m, &b.m), ("v", &a.v, &b.v)] {
            assert_eq!(bits(x), bits(y), "n = {n}: {what} differs from adamw_update's");
        }
        let p = b.p.read(&gpu).unwrap();
        let want = p.iter().filter(|x| x.is_finite()).map(|x| x.abs().to_bits()).max().unwrap_or(0);
        let got = amax.read(&gpu).unwrap();
        eprintln!("n = {n}: max |p| = {}", f32::from_bits(got[1]));
        assert_eq!(got, vec![7, want, 7], "n = {n}: the scale word (max |p| = {})", f32::from_bits(want));
        if planted.iter().any(|&(k, _)| k == t) {
            assert_eq!(f32::from_bits(got[1]), 1e6, "n = {n}: a kept parameter counts as it stands");
        }
    }
}

/// `adamw_8bit_update` over a range of larger buffers (`h.offset`: the trainer's LLaMA tensors
/// stacked in one fused weight, each with its own 8-bit state) is the update of that range as a
/// tensor of its own: over three steps of fresh gradients (a NaN among them), two tensors of
/// lengths that are not multiples of a block or of a code word, stacked, give bit for bit the
/// parameters, codes and scales of the same tensors updated alone (checked against the float64
/// model above), zero their gradient ranges, and leave the values after the ranges (poisoned)
/// untouched.
#[test]
fn adamw_8bit_update_on_a_range_is_the_update_of_that_tensor() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("adamw_8bit_update offset");
    let h = hyper();
    let lens = [1001usize, 2050];
    let tail = 5;
    let p0: Vec<Vec<f32>> = lens.iter().map(|&n| uniform(&mut rng, n, -1.0, 1.0)).collect();
    let mut alone: Vec<State8> = p0.iter().map(|p| new8(&gpu, p)).collect();
    let mut stacked_p: Vec<f32> = p0.concat();
    stacked_p.extend(std::iter::repeat_n(f32::NAN, tail));
    let total = lens.iter().sum::<usize>();
    let mut p = gpu.upload(&stacked_p).unwrap();
    let mut g = gpu.filled(total + tail, f32::NAN).unwrap();
    let mut states: Vec<State8> = p0.iter().map(|p| new8(&gpu, p)).collect();
    let stats = gpu.upload(&[0.0f32, 0.5, 0.0, 0.0]).unwrap();
    for t in 1..=3u32 {
        let mut gs: Vec<Vec<f32>> = lens.iter().map(|&n| uniform(&mut rng, n, -1.0, 1.0)).collect();
        gs[1][7] = f32::NAN;
        let mut flat = gs.concat();
        flat.extend(std::iter::repeat_n(f32::NAN, tail));
        g.write(&gpu, &flat).unwrap();
        let b = gpu.batch();
        let mut offset = 0;
        for ((s, a), (gr, &n)) in states.iter_mut().zip(&mut alone).zip(gs.iter().zip(&lens)) {
            let mut at = adamw_8bit_params(&h, n, t);
            at.offset = offset as u32;
            adamw_8bit_update(&b, &mut p, &mut g, &mut s.mq, &mut s.vq, &mut s.qscale, &stats, at).unwrap();
            a.g.write(&gpu, gr).unwrap();
            let one = adamw_8bit_params(&h, n, t);
            adamw_8bit_update(&b, &mut a.p, &mut a.g, &mut a.mq, &mut a.vq, &mut a.qscale, &stats, one).unwrap();
            offset += n;
        }
        b.submit().unwrap();
        let (got_p, got_g) = (p.read(&gpu).unwrap(), g.read(&gpu).unwrap());
        assert!(got_p[total..].iter().chain(&got_g[total..]).all(|v| v.is_nan()), "step {t}: wrote past the ranges");
        assert!(got_g[..total].iter().all(|&v| v == 0.0), "step {t}: gradients not zeroed");
        let mut offset = 0;
        for (i, (s, a)) in states.iter().zip(&alone).enumerate() {
            let n = lens[i];
            let what = format!("step {t}, tensor {i} at {offset}");
            let (want_p, want_q) = read8(&gpu, a);
            assert!(common::same_bits(&got_p[offset..offset + n], &want_p), "{what}: parameters differ");
            let got_q = Quant8::from_gpu(
                n,
                &s.mq.read(&gpu).unwrap(),
                &s.vq.read(&gpu).unwrap(),
                &s.qscale.read(&gpu).unwrap(),
            );
            assert_eq!(got_q, want_q, "{what}: 8-bit state differs");
            offset += n;
        }
        stacked_p = got_p;
    }
    // The updates moved the parameters (a test that cannot fail otherwise).
    assert!(stacked_p[..lens[0]].iter().zip(&p0[0]).any(|(a, b)| a != b));
    // A range past the buffer is refused before anything runs.
    let mut at = adamw_8bit_params(&h, lens[1], 4);
    at.offset = (total + tail - lens[1] + 1) as u32;
    let s = &mut states[1];
    let e = adamw_8bit_update(&gpu, &mut p, &mut g, &mut s.mq, &mut s.vq, &mut s.qscale, &stats, at).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(p) >= h.offset + h.n"), "{e}");
}
