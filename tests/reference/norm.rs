//! Float64 CPU references for RMSNorm (`kernels::norm`), as plain functions over row-major
//! slices. Inputs are the f32 values the GPU sees (widened exactly); everything after is f64.
#![allow(dead_code)]

/// Rows per block of `rmsnorm_backward`'s dγ partials (the shader's `NORM_BLOCK`): the caller
/// allocates `ceil(rows / NORM_BLOCK) · d` partials.
pub const NORM_BLOCK: usize = 8;

/// `1 / sqrt(mean(x_row²) + eps)` for each row of the `[rows, d]` matrix `x`.
pub fn rrms(x: &[f32], rows: usize, d: usize, eps: f32) -> Vec<f64> {
    (0..rows)
        .map(|r| {
            let ss: f64 = x[r * d..(r + 1) * d].iter().map(|&v| (v as f64) * (v as f64)).sum();
            1.0 / (ss / d as f64 + eps as f64).sqrt()
        })
        .collect()
}

/// RMSNorm forward: returns `(y, rrms)` with `y[r, j] = x[r, j] · rrms[r] · gamma[j]`.
pub fn rmsnorm_forward(x: &[f32], gamma: &[f32], rows: usize, d: usize, eps: f32) -> (Vec<f64>, Vec<f64>) {
    let rr = rrms(x, rows, d, eps);
    let mut y = vec![0.0; rows * d];
    for r in 0..rows {
        for j in 0..d {
            y[r * d + j] = x[r * d + j] as f64 * rr[r] * gamma[j] as f64;
        }
    }
    (y, rr)
}

/// RMSNorm backward for the upstream gradient `dy`: returns `(dx, dgamma)` with
/// `dx[r, j] = rrms·γ_j·dy_j − x_j·rrms³·(Σ_k dy_k·γ_k·x_k) / d` and
/// `dgamma[j] = Σ_r dy[r, j]·x[r, j]·rrms[r]` (the gradient alone, not accumulated into
/// anything), rrms recomputed in f64 from `x` and `eps`.
pub fn rmsnorm_backward(x: &[f32], gamma: &[f32], dy: &[f32], rows: usize, d: usize, eps: f32) -> (Vec<f64>, Vec<f64>) {
    let rr = rrms(x, rows, d, eps);
    let mut dx = vec![0.0; rows * d];
    let mut dgamma = vec![0.0; d];
    for r in 0..rows {
        let row = r * d..(r + 1) * d;
        let (xr, dyr) = (&x[row.clone()], &dy[row]);
        let dot: f64 = (0..d).map(|k| dyr[k] as f64 * gamma[k] as f64 * xr[k] as f64).sum();
        let coef = rr[r].powi(3) * dot / d as f64;
        for j in 0..d {
            let (xv, dyv) = (xr[j] as f64, dyr[j] as f64);
            dx[r * d + j] = rr[r] * gamma[j] as f64 * dyv - xv * coef;
            dgamma[j] += dyv * xv * rr[r];
        }
    }
    (dx, dgamma)
}
