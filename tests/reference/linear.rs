//! Float64 CPU references of the matrix products in `shaders/03_linear.wgsl`.
//!
//! Plain functions over row-major slices: inputs are the f32 values the GPU sees (for the
//! f16-weight kernels pass the weights already rounded to f16 and widened back to f32), results
//! are float64 without intermediate rounding. Shapes follow the kernels: X `[m, k]`, W `[k, n]`
//! (or `[n, k]` for the transposed forms), B `[m, n]`, Y `[m, n]` (or `[k, n]` for Xᵀ·B).
#![allow(dead_code)]

/// `Y = X · W`: X `[m, k]`, W `[k, n]`, Y `[m, n]`.
pub fn matmul(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    assert!(x.len() >= m * k && w.len() >= k * n, "matmul: inputs too short");
    let mut y = vec![0.0f64; m * n];
    for i in 0..m {
        let row = &mut y[i * n..(i + 1) * n];
        for p in 0..k {
            let a = x[i * k + p] as f64;
            for (j, out) in row.iter_mut().enumerate() {
                *out += a * w[p * n + j] as f64;
            }
        }
    }
    y
}

/// `Y = X · W + R`: X `[m, k]`, W `[k, n]`, R and Y `[m, n]`.
pub fn matmul_residual(x: &[f32], w: &[f32], r: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    add(&matmul(x, w, m, n, k), r)
}

/// `Y = X · Wᵀ` with W stored `[n, k]`: X `[m, k]`, Y `[m, n]`.
pub fn matmul_t(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    assert!(x.len() >= m * k && w.len() >= n * k, "matmul_t: inputs too short");
    let mut y = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|p| x[i * k + p] as f64 * w[j * k + p] as f64).sum();
        }
    }
    y
}

/// `Y0 + X · Wᵀ` with W stored `[n, k]`: the result of the accumulating form on `Y0 [m, n]`.
pub fn matmul_t_acc(y0: &[f32], x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    add(&matmul_t(x, w, m, n, k), y0)
}

/// `Y = Xᵀ · B`: X `[m, k]`, B `[m, n]`, Y `[k, n]` (the sum runs over the m rows).
pub fn matmul_at(x: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    assert!(x.len() >= m * k && b.len() >= m * n, "matmul_at: inputs too short");
    let mut y = vec![0.0f64; k * n];
    for i in 0..m {
        for p in 0..k {
            let a = x[i * k + p] as f64;
            let row = &mut y[p * n..(p + 1) * n];
            for (j, out) in row.iter_mut().enumerate() {
                *out += a * b[i * n + j] as f64;
            }
        }
    }
    y
}

/// `Y0 + Xᵀ · B`: the result of the accumulating form on `Y0 [k, n]`.
pub fn matmul_at_acc(y0: &[f32], x: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    add(&matmul_at(x, b, m, n, k), y0)
}

/// `a + b` elementwise, in float64.
pub fn add(a: &[f64], b: &[f32]) -> Vec<f64> {
    assert_eq!(a.len(), b.len(), "add: lengths differ");
    a.iter().zip(b).map(|(&a, &b)| a + b as f64).collect()
}

/// The transpose of a row-major `[rows, cols]` matrix: `[cols, rows]`.
pub fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    assert!(a.len() >= rows * cols, "transpose: input too short");
    let mut t = vec![0.0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}
