//! Float64 CPU references for the cross-entropy loss (`kernels::loss`), as plain functions over
//! row-major slices. Inputs are the f32 values the GPU sees (widened exactly).
#![allow(dead_code)]

/// Cross-entropy with label smoothing `smoothing` (ε) and z-loss `z_loss` (z) over the
/// `[rows, v]` logits, targets `[rows]`. Returns `(losses, dlogits)`:
/// for a row with target t < v, lse = log Σ exp(l), p = softmax(l),
/// `loss = lse − (1−ε)·l_t − (ε/v)·Σ_j l_j + z·lse²` and
/// `dlogits_j = grad_scale · ((1 + 2·z·lse)·p_j − (1−ε)·[j = t] − ε/v)`;
/// rows with t ≥ v have loss 0 and dlogits 0.
pub fn cross_entropy(
    logits: &[f32],
    targets: &[u32],
    rows: usize,
    v: usize,
    smoothing: f32,
    z_loss: f32,
    grad_scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let (eps, z, gs) = (smoothing as f64, z_loss as f64, grad_scale as f64);
    let mut losses = vec![0.0; rows];
    let mut dlogits = vec![0.0; rows * v];
    for r in 0..rows {
        let t = targets[r] as usize;
        if t >= v {
            continue;
        }
        let l: Vec<f64> = logits[r * v..(r + 1) * v].iter().map(|&x| x as f64).collect();
        let m = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = l.iter().map(|&x| (x - m).exp()).sum();
        let lse = m + s.ln();
        let shifted: f64 = l.iter().map(|&x| x - m).sum();
        losses[r] = s.ln() - (1.0 - eps) * (l[t] - m) - eps / v as f64 * shifted + z * lse * lse;
        for j in 0..v {
            let p = (l[j] - m).exp() / s;
            let q = if j == t { 1.0 - eps } else { 0.0 } + eps / v as f64;
            dlogits[r * v + j] = gs * ((1.0 + 2.0 * z * lse) * p - q);
        }
    }
    (losses, dlogits)
}

/// `(Σ losses, number of targets < v)`, what `sum_losses` writes to `out[0]` and `out[1]`.
pub fn sum_losses(losses: &[f32], targets: &[u32], v: u32) -> (f64, usize) {
    (losses.iter().map(|&x| x as f64).sum(), targets.iter().filter(|&&t| t < v).count())
}

/// What the mixed-precision loss head writes for `dlogits` (from [`cross_entropy`]) and the
/// loss scale `s`: the f16x4 row layout of `dlogits · s` ([rows, ⌈v/4⌉·4], rows zero-padded),
/// each value clamped to ±65504 as the f16 rounding clamps it (not rounded: the comparison's
/// bound covers f16's half ulp), and whether any `dlogits · s` lies beyond ±65504 or is not
/// finite (the overflow flag).
pub fn scaled_f16x4(dlogits: &[f64], rows: usize, v: usize, s: f64) -> (Vec<f64>, bool) {
    let cq = v.div_ceil(4);
    let mut out = vec![0.0; rows * cq * 4];
    let mut over = false;
    for r in 0..rows {
        for j in 0..v {
            let d = dlogits[r * v + j] * s;
            over |= !d.is_finite() || d.abs() > 65504.0;
            out[r * cq * 4 + j] = d.clamp(-65504.0, 65504.0);
        }
    }
    (out, over)
}
