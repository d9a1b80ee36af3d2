//! Cross-entropy kernels (`kernels::loss`) against the float64 references of
//! `reference/loss.rs`, on fresh random inputs with outputs poisoned with NaN: label smoothing
//! and z-loss on and off, ignored targets, dlogits against central finite differences of the
//! kernel's own loss, large logits, more than 65535 rows, determinism in bits, misuse; and the
//! mixed-precision loss head (`cross_entropy_f16`) against float64 and, bit for bit, against the
//! three kernels it replaces (`cross_entropy`, `optimizer::scale_by_state`,
//! `cast::cast_grad_f16x4`), its overflow flag included.

mod common;
#[path = "reference/loss.rs"]
mod reference;

use common::{TAIL, assert_close, gpu, gpu_with, has_f16, rel_err, rng, uniform};
use kernels::cast::cast_grad_f16x4;
use kernels::loss::{cross_entropy, cross_entropy_f16, sum_losses};
use kernels::ops::{self, F16x4};
use kernels::optimizer::scale_by_state;
use kernels::{Error, Gpu, GpuOptions, f16};
use rand::Rng;
use rand::rngs::StdRng;

/// (smoothing ε, z-loss coefficient z): each on and off.
const SETTINGS: [(f32, f32); 4] = [(0.0, 0.0), (0.1, 0.0), (0.0, 1e-3), (0.1, 1e-3)];

/// GPU cross-entropy: `(losses, dlogits)`; `losses` is poisoned with NaN before the run.
fn run_ce(
    gpu: &Gpu,
    logits: &[f32],
    targets: &[u32],
    rows: usize,
    v: usize,
    p: (f32, f32, f32),
) -> (Vec<f32>, Vec<f32>) {
    let mut lb = gpu.upload(logits).unwrap();
    let tb = gpu.upload(targets).unwrap();
    let mut losses = gpu.filled(rows, f32::NAN).unwrap();
    let params = cross_entropy::Params::new(rows as u32, v as u32, p.0, p.1, p.2);
    cross_entropy(gpu, &mut lb, &tb, &mut losses, params).unwrap();
    (losses.read(gpu).unwrap(), lb.read(gpu).unwrap())
}

/// Targets in [0, v) with about one row in four ignored (v, v + 3 or u32::MAX), and at least
/// one valid row.
fn targets(rng: &mut StdRng, rows: usize, v: usize) -> Vec<u32> {
    let mut t: Vec<u32> = (0..rows)
        .map(|_| match rng.random_range(0..8) {
            0 => v as u32,
            1 => [v as u32 + 3, u32::MAX][rng.random_range(0..2)],
            _ => rng.random_range(0..v as u32),
        })
        .collect();
    t[0] = rng.random_range(0..v as u32);
    t
}

#[track_caller]
fn check_ignored(label: &str, losses: &[f32], dlogits: &[f32], t: &[u32], v: usize) {
    for (r, &tr) in t.iter().enumerate() {
        if tr as usize >= v {
            assert_eq!(losses[r], 0.0, "{label}: ignored row {r} has a loss");
            assert!(dlogits[r * v..(r + 1) * v].iter().all(|&g| g == 0.0), "{label}: ignored row {r} has a gradient");
        }
    }
}

fn check_ce(gpu: &Gpu, label: &str, vocab: &[usize]) {
    let mut rng = rng(label);
    for &v in vocab {
        for (eps, z) in SETTINGS {
            let rows = rng.random_range(3..9);
            let logits = uniform(&mut rng, rows * v, -8.0, 8.0);
            let t = targets(&mut rng, rows, v);
            let valid = t.iter().filter(|&&x| (x as usize) < v).count();
            let gs = 1.0 / valid as f32;
            let (losses, dl) = run_ce(gpu, &logits, &t, rows, v, (eps, z, gs));
            let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, eps, z, gs);
            let what = format!("{label}: v={v} rows={rows} ε={eps} z={z}");
            assert_close(&format!("{what}: losses"), &losses, &l_ref, 1e-5);
            assert_close(&format!("{what}: dlogits"), &dl, &dl_ref, 1e-5);
            check_ignored(&what, &losses, &dl, &t, v);
        }
    }
}

#[test]
fn cross_entropy_matches_reference() {
    let Some(gpu) = gpu() else { return };
    check_ce(&gpu, "cross_entropy", &[2, 256, 1000, 5000]);
}

#[test]
fn cross_entropy_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    check_ce(&gpu, "cross_entropy (tree)", &[2, 1000]);
}

/// dlogits against central finite differences of the kernel's own loss:
/// dL/dl_j with L = grad_scale · loss_row, the row's loss read back from `losses`.
///
/// Numbers: logits ∈ [−2, 2], h = 1e-2 (0.5% of the range), v = 7 and 37 so the gradients are
/// of size ≈ 0.03 to 1. The f32 loss (≈ 2–4, one to a few ulps ≈ 5e-7) differenced over 2h gives
/// ≈ 5e-5 of noise; the truncation error h²·|L'''|/6 is below 1e-5. Compared as
/// ‖fd − dlogits‖ / ‖fd‖ < 1e-2 over the sampled coordinates (a wrong term, e.g. a missing
/// z-loss or smoothing part, is off by ≥ 5%).
#[test]
fn cross_entropy_matches_finite_differences() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("cross_entropy finite differences");
    let h = 1e-2f32;
    for v in [7usize, 37] {
        for (eps, z) in [(0.0, 0.0), (0.2, 0.0), (0.0, 0.05), (0.2, 0.05)] {
            let rows = 3;
            let logits = uniform(&mut rng, rows * v, -2.0, 2.0);
            let t: Vec<u32> = (0..rows).map(|_| rng.random_range(0..v as u32)).collect();
            let gs = 0.5;
            let (_, dl) = run_ce(&gpu, &logits, &t, rows, v, (eps, z, gs));
            // Rows are independent: every perturbed row is a row of one call (2k: +h, 2k+1: −h).
            let mut samples: Vec<(usize, usize)> =
                (0..10).map(|_| (rng.random_range(0..rows), rng.random_range(0..v))).collect();
            samples.extend((0..rows).map(|r| (r, t[r] as usize))); // the target logits too
            let mut ls = Vec::new();
            let mut ts = Vec::new();
            for &(r, j) in &samples {
                for sign in [1.0f32, -1.0] {
                    let mut row = logits[r * v..(r + 1) * v].to_vec();
                    row[j] += sign * h;
                    ls.extend(row);
                    ts.push(t[r]);
                }
            }
            let (losses, _) = run_ce(&gpu, &ls, &ts, ts.len(), v, (eps, z, gs));
            let fd: Vec<f64> = (0..samples.len())
                .map(|s| gs as f64 * (losses[2 * s] as f64 - losses[2 * s + 1] as f64) / (2.0 * h as f64))
                .collect();
            let got: Vec<f32> = samples.iter().map(|&(r, j)| dl[r * v + j]).collect();
            let e = rel_err(&got, &fd);
            assert!(e < 1e-2, "v={v} ε={eps} z={z}: {e:e}\n{got:?}\n{fd:?}");
        }
    }
}

/// Logits of ±1e4 (and rows where every logit is 1e4): max-subtracted, so everything stays
/// finite and matches the reference.
#[test]
fn large_logits_stay_finite() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("cross_entropy large logits");
    for v in [2usize, 1000] {
        for (eps, z) in SETTINGS {
            let rows = 5;
            let mut logits = uniform(&mut rng, rows * v, -1e4, 1e4);
            logits[..v].fill(1e4);
            for x in &mut logits[v..2 * v] {
                *x = if rng.random_range(0..2) == 0 { 1e4 } else { -1e4 };
            }
            let t: Vec<u32> = (0..rows).map(|_| rng.random_range(0..v as u32)).collect();
            let (losses, dl) = run_ce(&gpu, &logits, &t, rows, v, (eps, z, 0.2));
            assert!(losses.iter().chain(&dl).all(|x| x.is_finite()), "v={v} ε={eps} z={z}: not finite");
            let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, eps, z, 0.2);
            assert_close(&format!("large v={v} ε={eps} z={z}: losses"), &losses, &l_ref, 1e-5);
            assert_close(&format!("large v={v} ε={eps} z={z}: dlogits"), &dl, &dl_ref, 1e-5);
        }
    }
}

/// Confident correct predictions (the target logit above the rest by 15–20, so the loss is
/// ≈ 1e-7 to 1e-9): the loss and the target's gradient p_t − 1 keep their relative accuracy
/// (they are computed from Σ_{j≠t} exp(l_j − m), not from 1 + that sum rounded to f32).
#[test]
fn confident_predictions_keep_precision() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("cross_entropy confident");
    for v in [2usize, 1000] {
        for (eps, z) in SETTINGS {
            let rows = 4;
            let mut logits = uniform(&mut rng, rows * v, -2.0, 2.0);
            let t: Vec<u32> = (0..rows).map(|_| rng.random_range(0..v as u32)).collect();
            for r in 0..rows {
                logits[r * v + t[r] as usize] = rng.random_range(15.0..20.0);
            }
            let (losses, dl) = run_ce(&gpu, &logits, &t, rows, v, (eps, z, 1.0));
            let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, eps, z, 1.0);
            assert_close(&format!("confident v={v} ε={eps} z={z}: losses"), &losses, &l_ref, 1e-5);
            assert_close(&format!("confident v={v} ε={eps} z={z}: dlogits"), &dl, &dl_ref, 1e-5);
            let tgt: Vec<f32> = (0..rows).map(|r| dl[r * v + t[r] as usize]).collect();
            let tgt_ref: Vec<f64> = (0..rows).map(|r| dl_ref[r * v + t[r] as usize]).collect();
            assert_close(&format!("confident v={v} ε={eps} z={z}: target gradients"), &tgt, &tgt_ref, 1e-5);
        }
    }
}

/// More than 65535 rows (2-D grid of rows), tiny vocabulary; then their sum.
#[test]
fn more_than_65535_rows() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("cross_entropy large");
    let max = gpu.limits().max_compute_workgroups_per_dimension as usize;
    let (rows, v) = (max + 1000, 2);
    let logits = uniform(&mut rng, rows * v, -4.0, 4.0);
    let t = targets(&mut rng, rows, v);
    let (losses, dl) = run_ce(&gpu, &logits, &t, rows, v, (0.1, 1e-3, 1.0));
    let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, 0.1, 1e-3, 1.0);
    assert_close("losses, rows past the limit", &losses, &l_ref, 1e-5);
    assert_close("dlogits, rows past the limit", &dl, &dl_ref, 1e-5);
    check_ignored("rows past the limit", &losses, &dl, &t, v);

    let lb = gpu.upload(&losses).unwrap();
    let tb = gpu.upload(&t).unwrap();
    let mut out = gpu.filled(2, f32::NAN).unwrap();
    sum_losses(&gpu, &lb, &tb, &mut out, sum_losses::Params::new(rows as u32, v as u32)).unwrap();
    let out = out.read(&gpu).unwrap();
    let (sum, count) = reference::sum_losses(&losses, &t, v as u32);
    assert_close("sum of losses past the limit", &out[..1], &[sum], 1e-5);
    assert_eq!(out[1], count as f32);
}

#[test]
fn sum_losses_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("sum_losses");
    for n in [1usize, 255, 257, 1000, 100_003] {
        let v = 50;
        let losses = uniform(&mut rng, n, 0.0, 10.0);
        let t = targets(&mut rng, n, v);
        let lb = gpu.upload(&losses).unwrap();
        let tb = gpu.upload(&t).unwrap();
        let mut out = gpu.filled(3, f32::NAN).unwrap();
        sum_losses(&gpu, &lb, &tb, &mut out, sum_losses::Params::new(n as u32, v as u32)).unwrap();
        let got = out.read(&gpu).unwrap();
        let (sum, count) = reference::sum_losses(&losses, &t, v as u32);
        assert_close(&format!("sum n={n}"), &got[..1], &[sum], 1e-6);
        assert_eq!(got[1], count as f32, "count n={n}");
        assert!(got[2].is_nan(), "out[2] was written");
    }
    // n = 0: a sum of nothing.
    let lb = gpu.upload(&[1.0f32]).unwrap();
    let tb = gpu.upload(&[0u32]).unwrap();
    let mut out = gpu.filled(2, f32::NAN).unwrap();
    sum_losses(&gpu, &lb, &tb, &mut out, sum_losses::Params::new(0, 5)).unwrap();
    assert_eq!(out.read(&gpu).unwrap(), vec![0.0, 0.0]);
}

#[test]
fn deterministic_bits() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("loss determinism");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let (rows, v) = (40, 5000);
    let logits = uniform(&mut rng, rows * v, -8.0, 8.0);
    let t = targets(&mut rng, rows, v);
    let (l1, d1) = run_ce(&gpu, &logits, &t, rows, v, (0.1, 1e-3, 0.05));
    let (l2, d2) = run_ce(&gpu, &logits, &t, rows, v, (0.1, 1e-3, 0.05));
    assert_eq!(bits(&l1), bits(&l2), "losses");
    assert_eq!(bits(&d1), bits(&d2), "dlogits");

    let n = 50_000;
    let losses = uniform(&mut rng, n, 0.0, 10.0);
    let t = targets(&mut rng, n, v);
    let lb = gpu.upload(&losses).unwrap();
    let tb = gpu.upload(&t).unwrap();
    let mut a = gpu.filled(2, f32::NAN).unwrap();
    let mut b = gpu.filled(2, f32::NAN).unwrap();
    sum_losses(&gpu, &lb, &tb, &mut a, sum_losses::Params::new(n as u32, v as u32)).unwrap();
    sum_losses(&gpu, &lb, &tb, &mut b, sum_losses::Params::new(n as u32, v as u32)).unwrap();
    assert_eq!(bits(&a.read(&gpu).unwrap()), bits(&b.read(&gpu).unwrap()), "sum_losses");
}

#[test]
fn short_buffers_are_errors() {
    let Some(gpu) = gpu() else { return };
    let (rows, v) = (4, 10);
    let mut logits = gpu.filled(rows * v, 1.0f32).unwrap();
    let t = gpu.filled(rows, 0u32).unwrap();
    let mut losses = gpu.filled(rows - 1, f32::NAN).unwrap();
    let e = cross_entropy(&gpu, &mut logits, &t, &mut losses, cross_entropy::Params::new(4, 10, 0.0, 0.0, 1.0))
        .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(losses) >= p.rows"), "{e}");
    assert!(logits.read(&gpu).unwrap().iter().all(|&x| x == 1.0), "nothing ran");

    let lb = gpu.filled(rows, 1.0f32).unwrap();
    let mut out = gpu.filled(1, f32::NAN).unwrap();
    let e = sum_losses(&gpu, &lb, &t, &mut out, sum_losses::Params::new(4, 10)).unwrap_err();
    assert!(e.to_string().contains("len(out) >= 2"), "{e}");
    let mut out = gpu.filled(2, f32::NAN).unwrap();
    let e = sum_losses(&gpu, &lb, &t, &mut out, sum_losses::Params::new(5, 10)).unwrap_err();
    assert!(e.to_string().contains("len(losses) >= p.n"), "{e}");
}

/// Vocabularies around the 2048 columns an invocation takes per chunk (8 of them): rows of
/// v ≤ 2048 stay in registers between the two passes, wider rows are read again chunk by chunk,
/// and the online max/sum crosses chunks. Targets in the first chunk, the last one and at the
/// very end of the row.
#[test]
fn vocabularies_around_the_chunk() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("cross_entropy chunks");
    for v in [2047usize, 2048, 2049, 4097] {
        let rows = 4;
        let mut logits = uniform(&mut rng, rows * v, -8.0, 8.0);
        let t: Vec<u32> = vec![rng.random_range(0..256), (v - 1) as u32, rng.random_range(0..v as u32), v as u32];
        // The largest logit of row 1 in the last chunk, of row 2 in the first.
        logits[v + v - 2] = 12.0;
        logits[2 * v + 3] = 12.0;
        let (losses, dl) = run_ce(&gpu, &logits, &t, rows, v, (0.1, 1e-3, 0.25));
        let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, 0.1, 1e-3, 0.25);
        assert_close(&format!("v={v}: losses"), &losses, &l_ref, 1e-5);
        assert_close(&format!("v={v}: dlogits"), &dl, &dl_ref, 1e-5);
        check_ignored(&format!("v={v}"), &losses, &dl, &t, v);
    }
}

/// What the loss head (or the chain it replaces) wrote: per-row losses, the f16 dlogits (f16x4
/// rows) and flag[0].
struct Head {
    losses: Vec<f32>,
    d16: Vec<F16x4>,
    flag: u32,
}

fn nan16() -> F16x4 {
    [f16::NAN; 4]
}

/// Poisoned outputs for `rows` × `v`: losses and f16 dlogits NaN with a NaN tail of `TAIL`, the
/// flag 0 with a sentinel 7 after it, and the scaler state with S = `s` (the rest poisoned, as
/// nothing else may be read).
#[allow(clippy::type_complexity)]
fn head_buffers(
    gpu: &Gpu,
    rows: usize,
    v: usize,
    s: f32,
) -> (kernels::Buffer<f32>, kernels::Buffer<F16x4>, kernels::Buffer<u32>, kernels::Buffer<f32>) {
    let losses = common::poisoned(gpu, rows);
    let d16 = gpu.upload(&vec![nan16(); ops::f16x4_len(rows, v) + TAIL]).unwrap();
    let flag = gpu.upload(&[0u32, 7]).unwrap();
    let mut state = vec![f32::NAN; 8];
    state[0] = s;
    (losses, d16, flag, gpu.upload(&state).unwrap())
}

/// Reads the outputs back, checking that nothing past them was written.
#[track_caller]
fn read_head(
    gpu: &Gpu,
    what: &str,
    (losses, d16, flag): (&kernels::Buffer<f32>, &kernels::Buffer<F16x4>, &kernels::Buffer<u32>),
    rows: usize,
    v: usize,
) -> Head {
    let losses = losses.read(gpu).unwrap();
    common::check_tail(&format!("{what}: losses"), &losses, rows);
    let d16 = d16.read(gpu).unwrap();
    let len = ops::f16x4_len(rows, v);
    assert!(d16[len..].iter().all(|g| g.iter().all(|h| h.is_nan())), "{what}: wrote past the f16 dlogits");
    let flag = flag.read(gpu).unwrap();
    assert_eq!(flag[1], 7, "{what}: wrote past the flag");
    Head { losses: losses[..rows].to_vec(), d16: d16[..len].to_vec(), flag: flag[0] }
}

/// `cross_entropy_f16` on `logits`, which it must leave as they are.
fn run_head(gpu: &Gpu, logits: &[f32], t: &[u32], rows: usize, v: usize, p: (f32, f32, f32), s: f32) -> Head {
    let lb = gpu.upload(logits).unwrap();
    let tb = gpu.upload(t).unwrap();
    let (mut losses, mut d16, mut flag, state) = head_buffers(gpu, rows, v, s);
    let params = cross_entropy_f16::Params::new(rows as u32, v as u32, p.0, p.1, p.2);
    cross_entropy_f16(gpu, &lb, &tb, &mut losses, &mut d16, &mut flag, &state, params).unwrap();
    let after = lb.read(gpu).unwrap();
    assert!(common::same_bits(&after, logits), "cross_entropy_f16 wrote to its logits");
    read_head(gpu, "cross_entropy_f16", (&losses, &d16, &flag), rows, v)
}

/// The three kernels the head replaces: `cross_entropy` (dlogits in place), `scale_by_state`,
/// `cast_grad_f16x4`.
fn run_chain(gpu: &Gpu, logits: &[f32], t: &[u32], rows: usize, v: usize, p: (f32, f32, f32), s: f32) -> Head {
    let mut lb = gpu.upload(logits).unwrap();
    let tb = gpu.upload(t).unwrap();
    let (mut losses, mut d16, mut flag, state) = head_buffers(gpu, rows, v, s);
    let params = cross_entropy::Params::new(rows as u32, v as u32, p.0, p.1, p.2);
    cross_entropy(gpu, &mut lb, &tb, &mut losses, params).unwrap();
    let sp = kernels::optimizer::scale_by_state::ScaleParams::new((rows * v) as u32);
    scale_by_state(gpu, &mut lb, &state, sp).unwrap();
    let cp = kernels::cast::cast_grad_f16x4::CastParams::new(rows as u32, v as u32);
    cast_grad_f16x4(gpu, &lb, &mut d16, &mut flag, cp).unwrap();
    read_head(gpu, "the chain", (&losses, &d16, &flag), rows, v)
}

/// The same f16 bits (any NaN matching any NaN).
#[track_caller]
fn same_f16(what: &str, got: &[F16x4], want: &[F16x4]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for c in 0..4 {
            let same = g[c].to_bits() == w[c].to_bits() || (g[c].is_nan() && w[c].is_nan());
            assert!(same, "{what}: vec4 {i} lane {c}: {} vs {}", g[c], w[c]);
        }
    }
}

/// Logits over many magnitudes: ±10^u, u uniform in [−3, 1.2] (|l| from 1e-3 to ≈ 16), so rows
/// hold a few dominant logits among many small ones.
fn spread_logits(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let m = 10f32.powf(rng.random_range(-3.0..1.2));
            if rng.random_bool(0.5) { m } else { -m }
        })
        .collect()
}

/// The head against float64 and against the chain, on `gpu`, for each vocabulary (rows of 2
/// to 5 at the widest, more at the narrow ones), every (ε, z) setting, ignored targets among
/// them, and loss scales that are not powers of two (so that the product by S rounds).
///
/// Bounds: the losses within 1e-5 of float64 as cross_entropy's are (same arithmetic); the f16
/// dlogits, read back as f32, against float64 dlogits·S: cross_entropy's f32 dlogits are within
/// 1e-5 (its test), the product by S adds half an f32 ulp and the f16 rounding half an f16 ulp
/// (2⁻¹¹ ≈ 4.9e-4) per value, so the norm-wise relative error stays below 1e-5 + 4.9e-4 < 1e-3
/// (values below f16's normal range lose at most 2⁻²⁵ absolutely, negligible against the norm).
/// S ≤ 3000 and |dlogit| ≤ grad_scale·(1 + 2z·lse + ε) < 1.1 keep every value inside ±65504.
fn check_head(gpu: &Gpu, label: &str, vocab: &[usize]) {
    let mut rng = rng(label);
    for &v in vocab {
        for (eps, z) in SETTINGS {
            let rows = if v > 10_000 { rng.random_range(2..6) } else { rng.random_range(3..9) };
            let logits = spread_logits(&mut rng, rows * v);
            let t = targets(&mut rng, rows, v);
            let valid = t.iter().filter(|&&x| (x as usize) < v).count();
            let gs = 1.0 / valid as f32;
            let s = rng.random_range(1.0f32..3000.0);
            let what = format!("{label}: v={v} rows={rows} ε={eps} z={z} S={s}");
            let head = run_head(gpu, &logits, &t, rows, v, (eps, z, gs), s);
            let chain = run_chain(gpu, &logits, &t, rows, v, (eps, z, gs), s);
            same_f16(&format!("{what}: f16 dlogits against the chain"), &head.d16, &chain.d16);
            assert_eq!(chain.flag, 0, "{what}: the chain flagged values inside the f16 range");
            assert_eq!(head.flag, 0, "{what}: values inside the f16 range raised the flag");
            if eps == 0.0 {
                assert!(common::same_bits(&head.losses, &chain.losses), "{what}: losses differ from cross_entropy's");
            }

            let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, eps, z, gs);
            assert_close(&format!("{what}: losses"), &head.losses, &l_ref, 1e-5);
            let (d_ref, over) = reference::scaled_f16x4(&dl_ref, rows, v, s as f64);
            assert!(!over, "{what}: the test's bound on S failed");
            let got: Vec<f32> = head.d16.iter().flatten().map(|h| h.to_f32()).collect();
            assert_close(&format!("{what}: f16 dlogits"), &got, &d_ref, 1e-3);
            let cq = v.div_ceil(4);
            for (r, &tr) in t.iter().enumerate() {
                let row = &head.d16[r * cq..(r + 1) * cq];
                let row = row.iter().flatten().map(|h| h.to_bits()).collect::<Vec<_>>();
                assert!(row[v..].iter().all(|&b| b == 0), "{what}: row {r}'s padding is not +0");
                if tr as usize >= v {
                    assert_eq!(head.losses[r], 0.0, "{what}: ignored row {r} has a loss");
                    assert!(row.iter().all(|&b| b == 0), "{what}: ignored row {r} has a gradient");
                }
            }
        }
    }
}

/// Vocabularies: small, not a multiple of 4 (1, 2 or 3 padding lanes), around the 2048 columns
/// of pass 1's chunk and of pass 2's 512 groups, and GPT-2's 50304 with few rows.
#[test]
fn cross_entropy_f16_matches_reference_and_the_chain() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the loss head") {
        return;
    }
    check_head(&gpu, "cross_entropy_f16", &[2, 7, 256, 1001, 2047, 2050, 4097, 50304]);
}

#[test]
fn cross_entropy_f16_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else { return };
    if !has_f16(&gpu, "the loss head") {
        return;
    }
    check_head(&gpu, "cross_entropy_f16 (tree)", &[5, 1001]);
}

/// Rows on the 2-D grid (at most 4 workgroups per dimension, 11 rows).
#[test]
fn cross_entropy_f16_on_the_2d_grid() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    if !has_f16(&gpu, "the loss head") {
        return;
    }
    let mut rng = rng("cross_entropy_f16 2-D");
    let (rows, v) = (11, 13);
    let logits = spread_logits(&mut rng, rows * v);
    let t = targets(&mut rng, rows, v);
    let head = run_head(&gpu, &logits, &t, rows, v, (0.1, 1e-3, 0.5), 300.0);
    let chain = run_chain(&gpu, &logits, &t, rows, v, (0.1, 1e-3, 0.5), 300.0);
    same_f16("2-D grid: f16 dlogits against the chain", &head.d16, &chain.d16);
    let (l_ref, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, 0.1, 1e-3, 0.5);
    assert_close("2-D grid: losses", &head.losses, &l_ref, 1e-5);
    let got: Vec<f32> = head.d16.iter().flatten().map(|h| h.to_f32()).collect();
    assert_close("2-D grid: f16 dlogits", &got, &reference::scaled_f16x4(&dl_ref, rows, v, 300.0).0, 1e-3);
}

/// The overflow flag: raised exactly when some dlogit · S is beyond ±65504 or not finite, as
/// the chain raises it, the values clamped as the cast clamps them.
///
/// With z = 0 and grad_scale 1 every dlogit lies in (−1, 1) (p_j − q_j), so S = 2¹⁵ never
/// overflows; a row whose target logit is 10 below another has p_t < e⁻¹⁰, a target dlogit
/// below −0.9999, and at S = 2¹⁷ (or 2¹⁶: −0.9999·65536 < −65504) it overflows. A NaN logit
/// makes its row's dlogits NaN (whatever the row max makes of it), which raises the flag at any S.
#[test]
fn cross_entropy_f16_flags_overflow() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the loss head") {
        return;
    }
    let mut rng = rng("cross_entropy_f16 overflow");
    for v in [6usize, 300, 5000] {
        let rows = 4;
        let mut logits = uniform(&mut rng, rows * v, -2.0, 2.0);
        let t: Vec<u32> = (0..rows).map(|_| rng.random_range(0..v as u32)).collect();
        // Row 2: confidently wrong (its target 10 below another logit, which sits in the last
        // column but one).
        let j = if t[2] as usize == v - 2 { v - 1 } else { v - 2 };
        logits[2 * v + t[2] as usize] = -4.0;
        logits[2 * v + j] = 6.0;
        for (s, want) in [(32768.0f32, false), (65536.0, true), (131072.0, true)] {
            let what = format!("v={v} S={s}");
            let (_, dl_ref) = reference::cross_entropy(&logits, &t, rows, v, 0.0, 0.0, 1.0);
            let (d_ref, over) = reference::scaled_f16x4(&dl_ref, rows, v, s as f64);
            assert_eq!(over, want, "{what}: the test's own premise");
            let head = run_head(&gpu, &logits, &t, rows, v, (0.0, 0.0, 1.0), s);
            let chain = run_chain(&gpu, &logits, &t, rows, v, (0.0, 0.0, 1.0), s);
            assert_eq!(head.flag, u32::from(want), "{what}: the flag");
            assert_eq!(chain.flag, head.flag, "{what}: the chain's flag");
            same_f16(&format!("{what}: against the chain"), &head.d16, &chain.d16);
            let got: Vec<f32> = head.d16.iter().flatten().map(|h| h.to_f32()).collect();
            assert_close(&format!("{what}: f16 dlogits"), &got, &d_ref, 1e-3);
            let at = 2 * v.div_ceil(4) + t[2] as usize / 4;
            let dt = head.d16[at][t[2] as usize % 4].to_f32();
            assert!(!want || dt == -65504.0, "{what}: the overflowing dlogit is {dt}, not clamped to −65504");
        }
        // A NaN logit in row 1.
        logits[v + rng.random_range(0..v)] = f32::NAN;
        let head = run_head(&gpu, &logits, &t, rows, v, (0.0, 0.0, 1.0), 1.0);
        let chain = run_chain(&gpu, &logits, &t, rows, v, (0.0, 0.0, 1.0), 1.0);
        assert_eq!(head.flag, 1, "v={v}: a NaN logit did not raise the flag");
        assert_eq!(chain.flag, 1, "v={v}: a NaN logit did not raise the chain's flag");
        same_f16(&format!("v={v} with a NaN: against the chain"), &head.d16, &chain.d16);
    }
}

#[test]
fn cross_entropy_f16_short_buffers_are_errors() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the loss head") {
        return;
    }
    let (rows, v) = (4, 10);
    let logits = gpu.filled(rows * v, 1.0f32).unwrap();
    let t = gpu.filled(rows, 0u32).unwrap();
    let mut losses = gpu.filled(rows, f32::NAN).unwrap();
    let mut d16 = gpu.upload(&vec![nan16(); ops::f16x4_len(rows, v) - 1]).unwrap();
    let mut flag = gpu.upload(&[0u32]).unwrap();
    let state = gpu.upload(&[1.0f32]).unwrap();
    let p = cross_entropy_f16::Params::new(rows as u32, v as u32, 0.0, 0.0, 1.0);
    let e = cross_entropy_f16(&gpu, &logits, &t, &mut losses, &mut d16, &mut flag, &state, p).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(dlogits) >= p.rows * ceil_div(p.v, 4)"), "{e}");
    assert!(losses.read(&gpu).unwrap().iter().all(|x| x.is_nan()), "nothing ran");
}
