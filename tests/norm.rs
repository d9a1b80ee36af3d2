//! RMSNorm kernels (`kernels::norm`) against the float64 references of `reference/norm.rs`, on
//! fresh random inputs with outputs poisoned with NaN (dγ, which accumulates, filled with random
//! values first); the backward also against central finite differences of the GPU forward;
//! determinism in bits; more than 65535 rows and more than 65535 backward blocks; misuse. The
//! backward with dx's f16 copy (`rmsnorm_backward_f16`, `rmsnorm_backward_acc_f16`) bit for bit
//! against the f32 kernels followed by `cast_grad_f16x4`, overflow flag included. Four norms' dγ
//! reduces in one dispatch (`rmsnorm_dgamma_reduce4`) against float64 and bit for bit against
//! four `rmsnorm_dgamma_reduce`.

mod common;
#[path = "reference/half.rs"]
mod half;
#[path = "reference/norm.rs"]
mod reference;

use common::{assert_close, gpu, gpu_with, has_f16, rel_err, rng, uniform};
use kernels::infrastructure::axpy;
use kernels::norm::{
    rmsnorm_backward, rmsnorm_backward_acc, rmsnorm_backward_acc_f16, rmsnorm_backward_f16, rmsnorm_dgamma_reduce,
    rmsnorm_dgamma_reduce_all, rmsnorm_dgamma_reduce4, rmsnorm_forward, rmsnorm_forward_w16,
};
use kernels::{Error, Gpu, GpuOptions, f16};
use rand::Rng;
use rand::rngs::StdRng;
use reference::NORM_BLOCK;

/// (rows, d): d not a multiple of 256 (1, 64, 300, 1000) and rows not multiples of the
/// backward's 8-row block.
const SHAPES: [(usize, usize); 5] = [(3, 1), (33, 64), (70, 300), (5, 1000), (65, 257)];

/// (rows, d) of the backward: [`SHAPES`] and the edges of its walk. One row (a block of one);
/// whole blocks of 8 rows (the straight-line path) and a short last block (the row-by-row
/// path); d = 1, 3, 5, 767 (no vec4 path: element loads, a partial last vec4 of each row) and
/// 768 (the vec4 path, the trainer's width), 2050 (more than one step of pass 1 per lane and
/// more than one vec4 column per invocation in pass 2, with a partial last vec4).
const BACKWARD_SHAPES: [(usize, usize); 12] = [
    (3, 1),
    (33, 64),
    (70, 300),
    (5, 1000),
    (65, 257),
    (1, 768),
    (1, 3),
    (17, 5),
    (19, 767),
    (24, 768),
    (16, 3),
    (11, 2050),
];

/// The partials' rows: one per block of the shader's NORM_BLOCK rows (the reference's constant
/// must be the kernel's).
fn blocks(rows: usize) -> usize {
    assert_eq!(NORM_BLOCK, kernels::norm::NORM_BLOCK as usize, "reference::NORM_BLOCK");
    rows.div_ceil(NORM_BLOCK)
}

/// GPU forward: `(y, rrms)`, outputs poisoned with NaN before the run.
fn forward(gpu: &Gpu, x: &[f32], gamma: &[f32], rows: usize, d: usize, eps: f32) -> (Vec<f32>, Vec<f32>) {
    let xb = gpu.upload(x).unwrap();
    let gb = gpu.upload(gamma).unwrap();
    let mut y = gpu.filled(rows * d, f32::NAN).unwrap();
    let mut rr = gpu.filled(rows, f32::NAN).unwrap();
    rmsnorm_forward(gpu, &xb, &gb, &mut y, &mut rr, rmsnorm_forward::Params::new(rows as u32, d as u32, eps)).unwrap();
    (y.read(gpu).unwrap(), rr.read(gpu).unwrap())
}

/// GPU backward + dγ reduction, in one batch: `(dx, dgamma)` where `dgamma` started as
/// `dgamma0` (accumulated into). dx and the partials are poisoned with NaN first.
fn backward(
    gpu: &Gpu,
    x: &[f32],
    gamma: &[f32],
    rrms: &[f32],
    dy: &[f32],
    dgamma0: &[f32],
    (rows, d): (usize, usize),
) -> (Vec<f32>, Vec<f32>) {
    let xb = gpu.upload(x).unwrap();
    let gb = gpu.upload(gamma).unwrap();
    let rb = gpu.upload(rrms).unwrap();
    let dyb = gpu.upload(dy).unwrap();
    let mut dx = gpu.filled(rows * d, f32::NAN).unwrap();
    let mut partials = gpu.filled(blocks(rows) * d, f32::NAN).unwrap();
    let mut dg = gpu.upload(dgamma0).unwrap();
    let (r, dd) = (rows as u32, d as u32);
    let batch = gpu.batch();
    rmsnorm_backward(&batch, &xb, &gb, &rb, &dyb, &mut dx, &mut partials, rmsnorm_backward::Params::new(r, dd))
        .unwrap();
    rmsnorm_dgamma_reduce(&batch, &partials, &mut dg, rmsnorm_dgamma_reduce::Params::new(r, dd)).unwrap();
    batch.submit().unwrap();
    (dx.read(gpu).unwrap(), dg.read(gpu).unwrap())
}

/// The eps of the backward tests. For d = 1, dx = rrms·γ·dy·eps / (x² + eps): the two terms of
/// the formula cancel to eps / x² relative, so with a small eps f32 loses most of its digits (in
/// any implementation). A large eps keeps the d = 1 cases well-conditioned; wider rows are
/// fine with the usual 1e-5.
fn eps_for(d: usize) -> f32 {
    if d == 1 { 0.5 } else { 1e-5 }
}

fn inputs(rng: &mut StdRng, rows: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    (uniform(rng, rows * d, -2.0, 2.0), uniform(rng, d, 0.5, 1.5))
}

fn check_forward(gpu: &Gpu, label: &str) {
    let mut rng = rng(label);
    for (rows, d) in SHAPES {
        let (x, gamma) = inputs(&mut rng, rows, d);
        let eps = rng.random_range(1e-6..1e-4f32);
        let (y, rr) = forward(gpu, &x, &gamma, rows, d, eps);
        let (y_ref, rr_ref) = reference::rmsnorm_forward(&x, &gamma, rows, d, eps);
        assert_close(&format!("{label}: y rows={rows} d={d}"), &y, &y_ref, 1e-5);
        assert_close(&format!("{label}: rrms rows={rows} d={d}"), &rr, &rr_ref, 1e-5);
    }
}

#[test]
fn forward_matches_reference() {
    let Some(gpu) = gpu() else { return };
    check_forward(&gpu, "rmsnorm_forward");
}

#[test]
fn forward_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    check_forward(&gpu, "rmsnorm_forward (tree)");
}

#[test]
fn forward_w16_matches_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "rmsnorm_forward_w16") {
        return;
    }
    let mut rng = rng("rmsnorm_forward_w16");
    for (rows, d) in SHAPES {
        let (x, gamma32) = inputs(&mut rng, rows, d);
        let gamma: Vec<f16> = gamma32.iter().map(|&g| f16::from_f32(g)).collect();
        // The reference uses the f16 values the kernel sees (exact in f32).
        let gamma_seen: Vec<f32> = gamma.iter().map(|g| g.to_f32()).collect();
        let eps = 1e-5;
        let xb = gpu.upload(&x).unwrap();
        let gb = gpu.upload(&gamma).unwrap();
        let mut y = gpu.filled(rows * d, f32::NAN).unwrap();
        let mut rr = gpu.filled(rows, f32::NAN).unwrap();
        let p = rmsnorm_forward_w16::Params::new(rows as u32, d as u32, eps);
        rmsnorm_forward_w16(&gpu, &xb, &gb, &mut y, &mut rr, p).unwrap();
        let (y_ref, rr_ref) = reference::rmsnorm_forward(&x, &gamma_seen, rows, d, eps);
        assert_close(&format!("w16 y rows={rows} d={d}"), &y.read(&gpu).unwrap(), &y_ref, 2e-3);
        assert_close(&format!("w16 rrms rows={rows} d={d}"), &rr.read(&gpu).unwrap(), &rr_ref, 2e-3);
        // Against the f32 γ the f16 copy stands for: within f16 rounding.
        let (y_f32, _) = reference::rmsnorm_forward(&x, &gamma32, rows, d, eps);
        assert_close(&format!("w16 vs f32 γ rows={rows} d={d}"), &y.read(&gpu).unwrap(), &y_f32, 2e-3);
    }
}

#[test]
fn backward_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm_backward");
    for (rows, d) in BACKWARD_SHAPES {
        let (x, gamma) = inputs(&mut rng, rows, d);
        let dy = uniform(&mut rng, rows * d, -1.0, 1.0);
        let dg0 = uniform(&mut rng, d, -1.0, 1.0);
        let eps = eps_for(d);
        let (_, rr) = forward(&gpu, &x, &gamma, rows, d, eps);
        let (dx, dg) = backward(&gpu, &x, &gamma, &rr, &dy, &dg0, (rows, d));
        let (dx_ref, dg_ref) = reference::rmsnorm_backward(&x, &gamma, &dy, rows, d, eps);
        assert_close(&format!("dx rows={rows} d={d}"), &dx, &dx_ref, 1e-5);
        // Accumulated: dγ = dγ0 + the gradient; the gradient alone is checked too.
        let want: Vec<f64> = dg0.iter().zip(&dg_ref).map(|(&a, &b)| a as f64 + b).collect();
        assert_close(&format!("dgamma rows={rows} d={d}"), &dg, &want, 1e-5);
        let added: Vec<f32> = dg.iter().zip(&dg0).map(|(&a, &b)| a - b).collect();
        // f32 subtraction of dγ0 costs up to |dγ0|·2⁻²⁴ per element: a looser bound.
        assert!(rel_err(&added, &dg_ref) < 1e-4, "dgamma increment rows={rows} d={d}");
    }
}

/// `rmsnorm_backward_acc` adds the input gradient into a dx that holds other values: against
/// float64 (dx0 + the reference gradient) within rounding, and against `rmsnorm_backward` then an
/// `axpy` of its dx (what it replaces) within a few f32 roundings (the same operations; a
/// compiler may fuse different products into multiply-adds). The partials are the same bits.
#[test]
fn backward_acc_adds_the_gradient() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm_backward_acc");
    for (rows, d) in BACKWARD_SHAPES {
        let (x, gamma) = inputs(&mut rng, rows, d);
        let dy = uniform(&mut rng, rows * d, -1.0, 1.0);
        let dx0 = uniform(&mut rng, rows * d, -1.0, 1.0);
        let eps = eps_for(d);
        let (_, rr) = forward(&gpu, &x, &gamma, rows, d, eps);
        let up = |v: &[f32]| gpu.upload(v).unwrap();
        let (xb, gb, rb, dyb) = (up(&x), up(&gamma), up(&rr), up(&dy));
        let (r, dd) = (rows as u32, d as u32);
        let mut fused = up(&dx0);
        let mut fused_parts = gpu.filled(blocks(rows) * d, f32::NAN).unwrap();
        let pa = rmsnorm_backward_acc::Params::new(r, dd);
        rmsnorm_backward_acc(&gpu, &xb, &gb, &rb, &dyb, &mut fused, &mut fused_parts, pa).unwrap();
        let mut apart = up(&dx0);
        let mut grad = gpu.filled(rows * d, f32::NAN).unwrap();
        let mut parts = gpu.filled(blocks(rows) * d, f32::NAN).unwrap();
        let pb = rmsnorm_backward::Params::new(r, dd);
        rmsnorm_backward(&gpu, &xb, &gb, &rb, &dyb, &mut grad, &mut parts, pb).unwrap();
        axpy(&gpu, &grad, &mut apart, axpy::Params::new(r * dd, 1.0)).unwrap();
        let (got, sep) = (fused.read(&gpu).unwrap(), apart.read(&gpu).unwrap());
        let (dx_ref, _) = reference::rmsnorm_backward(&x, &gamma, &dy, rows, d, eps);
        let want: Vec<f64> = dx0.iter().zip(&dx_ref).map(|(&a, &b)| a as f64 + b).collect();
        let what = format!("rows={rows} d={d}");
        assert_close(&format!("dx0 + dx {what}"), &got, &want, 1e-5);
        // The same operations, rounded alike up to the compiler's choice of fused multiply-adds
        // (an ulp or two of each term): a few f32 roundings apart, norm-wise.
        let sep64: Vec<f64> = sep.iter().map(|&v| v as f64).collect();
        let e = rel_err(&got, &sep64);
        assert!(e < 1e-6, "{what}: fused and rmsnorm_backward + axpy differ by {e:e} (relative)");
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(bits(fused_parts.read(&gpu).unwrap()), bits(parts.read(&gpu).unwrap()), "{what}: partials");
    }
}

/// Central finite differences of the GPU forward. L = Σ_{r,j} G[r,j]·y[r,j] for a random G, so
/// dL/dy = G is the upstream gradient; the analytic dL/dx and dL/dγ come from the backward.
///
/// Numbers: x ∈ [−2, 2], γ ∈ [0.5, 1.5], h = 1e-2 (about 1% of the values' scale). The
/// truncation error of the central difference is h²·|L'''|/6 ≈ 1e-5 here; the f32 rounding of
/// y (a few ulps, ≈ 2e-7 relative) through L (≤ 40 terms of size ≈ 1) is ≈ 1e-6, divided by
/// 2h = 2e-2 that is ≈ 5e-5. The gradients are of size ≈ 1, so 1e-2 relative leaves a wide
/// margin while still catching any wrong term (a missing term is off by ≥ 10%).
#[test]
fn backward_matches_finite_differences() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm finite differences");
    let h = 1e-2f32;
    for (rows, d) in [(3usize, 5usize), (2, 37)] {
        let (x, gamma) = inputs(&mut rng, rows, d);
        let g = uniform(&mut rng, rows * d, -1.0, 1.0);
        let eps = 1e-5;
        let (_, rr) = forward(&gpu, &x, &gamma, rows, d, eps);
        let (dx, dg) = backward(&gpu, &x, &gamma, &rr, &g, &vec![0.0; d], (rows, d));

        // dL/dx: rows are independent, so every perturbed row goes into one forward call as a
        // row of its own: rows 2k and 2k+1 are row r of x with x[r, j] ± h.
        let samples: Vec<(usize, usize)> =
            (0..12).map(|_| (rng.random_range(0..rows), rng.random_range(0..d))).collect();
        let mut xs = Vec::new();
        let mut gs = Vec::new();
        for &(r, j) in &samples {
            for sign in [1.0f32, -1.0] {
                let mut row = x[r * d..(r + 1) * d].to_vec();
                row[j] += sign * h;
                xs.extend(row);
                gs.extend_from_slice(&g[r * d..(r + 1) * d]);
            }
        }
        let (y, _) = forward(&gpu, &xs, &gamma, 2 * samples.len(), d, eps);
        let row_l = |k: usize| -> f64 { (0..d).map(|c| gs[k * d + c] as f64 * y[k * d + c] as f64).sum() };
        let fd: Vec<f64> = (0..samples.len()).map(|s| (row_l(2 * s) - row_l(2 * s + 1)) / (2.0 * h as f64)).collect();
        let got: Vec<f32> = samples.iter().map(|&(r, j)| dx[r * d + j]).collect();
        let e = rel_err(&got, &fd);
        assert!(e < 1e-2, "dx vs finite differences rows={rows} d={d}: {e:e}\n{got:?}\n{fd:?}");

        // dL/dγ: γ is shared by all rows, one forward call per perturbation.
        let total_l = |gamma: &[f32]| -> f64 {
            let (y, _) = forward(&gpu, &x, gamma, rows, d, eps);
            y.iter().zip(&g).map(|(&a, &b)| a as f64 * b as f64).sum()
        };
        let cols: Vec<usize> = (0..d.min(6)).map(|_| rng.random_range(0..d)).collect();
        let fd: Vec<f64> = cols
            .iter()
            .map(|&j| {
                let mut gp = gamma.clone();
                gp[j] += h;
                let mut gm = gamma.clone();
                gm[j] -= h;
                (total_l(&gp) - total_l(&gm)) / (2.0 * h as f64)
            })
            .collect();
        let got: Vec<f32> = cols.iter().map(|&j| dg[j]).collect();
        let e = rel_err(&got, &fd);
        assert!(e < 1e-2, "dgamma vs finite differences rows={rows} d={d}: {e:e}\n{got:?}\n{fd:?}");
    }
}

#[test]
fn deterministic_bits() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm determinism");
    let (rows, d) = (300, 1000);
    let (x, gamma) = inputs(&mut rng, rows, d);
    let dy = uniform(&mut rng, rows * d, -1.0, 1.0);
    let dg0 = uniform(&mut rng, d, -1.0, 1.0);
    let (y1, r1) = forward(&gpu, &x, &gamma, rows, d, 1e-5);
    let (y2, r2) = forward(&gpu, &x, &gamma, rows, d, 1e-5);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&y1), bits(&y2), "forward y");
    assert_eq!(bits(&r1), bits(&r2), "forward rrms");
    let (dx1, dg1) = backward(&gpu, &x, &gamma, &r1, &dy, &dg0, (rows, d));
    let (dx2, dg2) = backward(&gpu, &x, &gamma, &r1, &dy, &dg0, (rows, d));
    assert_eq!(bits(&dx1), bits(&dx2), "backward dx");
    assert_eq!(bits(&dg1), bits(&dg2), "dgamma");
}

/// More than 65535 rows for the forward (2-D grid of rows) and more than 65535 blocks of 8
/// rows for the backward (2-D grid of blocks), with tiny rows.
#[test]
fn more_than_65535_rows_and_blocks() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm large");
    let max = gpu.limits().max_compute_workgroups_per_dimension as usize;

    let (rows, d) = (max + 1000, 3);
    let (x, gamma) = inputs(&mut rng, rows, d);
    let (y, rr) = forward(&gpu, &x, &gamma, rows, d, 1e-5);
    let (y_ref, rr_ref) = reference::rmsnorm_forward(&x, &gamma, rows, d, 1e-5);
    assert_close("forward y, rows past the limit", &y, &y_ref, 1e-5);
    assert_close("forward rrms, rows past the limit", &rr, &rr_ref, 1e-5);

    let (rows, d) = ((max + 2) * NORM_BLOCK + 5, 1);
    assert!(blocks(rows) > max);
    let (x, gamma) = inputs(&mut rng, rows, d);
    let dy = uniform(&mut rng, rows * d, -1.0, 1.0);
    let dg0 = uniform(&mut rng, d, -1.0, 1.0);
    let eps = eps_for(d);
    let rr: Vec<f32> = reference::rrms(&x, rows, d, eps).iter().map(|&v| v as f32).collect();
    let (dx, dg) = backward(&gpu, &x, &gamma, &rr, &dy, &dg0, (rows, d));
    let (dx_ref, dg_ref) = reference::rmsnorm_backward(&x, &gamma, &dy, rows, d, eps);
    assert_close("backward dx, blocks past the limit", &dx, &dx_ref, 1e-5);
    let want: Vec<f64> = dg0.iter().zip(&dg_ref).map(|(&a, &b)| a as f64 + b).collect();
    // dγ sums ~2·10⁶ terms of random sign, so the sum can cancel to near zero and a bound
    // relative to it alone is flaky: allow f32 rounding relative to Σ|terms| (1e-7 of it, about
    // 0.1 here; one dropped row, ~0.5 on average, or a dropped block of 8 rows still fails).
    for j in 0..d {
        let abs_sum: f64 = (0..rows).map(|r| (dy[r * d + j] as f64 * x[r * d + j] as f64 * rr[r] as f64).abs()).sum();
        let (g, w) = (dg[j] as f64, want[j]);
        let bound = 1e-5 * w.abs() + 1e-7 * (abs_sum + dg0[j].abs() as f64);
        assert!((g - w).abs() <= bound, "dgamma[{j}], blocks past the limit: {g} vs {w} (bound {bound:e})");
    }
}

#[test]
fn short_buffers_are_errors() {
    let Some(gpu) = gpu() else { return };
    let (rows, d) = (40, 10);
    let x = gpu.filled(rows * d, 1.0f32).unwrap();
    let gamma = gpu.filled(d, 1.0f32).unwrap();
    let rr = gpu.filled(rows, 1.0f32).unwrap();
    let mut dx = gpu.filled(rows * d, f32::NAN).unwrap();
    // Four blocks short: 40 rows are 5 blocks of 8.
    let mut partials = gpu.filled(d, f32::NAN).unwrap();
    let p = rmsnorm_backward::Params::new(rows as u32, d as u32);
    let e = rmsnorm_backward(&gpu, &x, &gamma, &rr, &x, &mut dx, &mut partials, p).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d"), "{e}");
    assert!(dx.read(&gpu).unwrap().iter().all(|v| v.is_nan()), "nothing ran");

    let mut dg = gpu.filled(d - 1, 0.0f32).unwrap();
    let e =
        rmsnorm_dgamma_reduce(&gpu, &partials, &mut dg, rmsnorm_dgamma_reduce::Params::new(1, d as u32)).unwrap_err();
    assert!(e.to_string().contains("len(dgamma) >= p.d"), "{e}");

    let mut y = gpu.filled(rows * d, f32::NAN).unwrap();
    let mut short_rr = gpu.filled(rows - 1, f32::NAN).unwrap();
    let p = rmsnorm_forward::Params::new(rows as u32, d as u32, 1e-5);
    let e = rmsnorm_forward(&gpu, &x, &gamma, &mut y, &mut short_rr, p).unwrap_err();
    assert!(e.to_string().contains("len(rrms) >= p.rows"), "{e}");
}

/// Rows of 2048 columns and wider: the forward keeps the first 2048 columns of a row (8 per
/// invocation) in registers and reads the rest again for the output, chunk by chunk.
#[test]
fn forward_rows_wider_than_a_chunk() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm wide rows");
    let f16_ok = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    for (rows, d) in [(3usize, 2048usize), (4, 2049), (2, 4500)] {
        let (x, gamma) = inputs(&mut rng, rows, d);
        let (y, rr) = forward(&gpu, &x, &gamma, rows, d, 1e-5);
        let (y_ref, rr_ref) = reference::rmsnorm_forward(&x, &gamma, rows, d, 1e-5);
        assert_close(&format!("y rows={rows} d={d}"), &y, &y_ref, 1e-5);
        assert_close(&format!("rrms rows={rows} d={d}"), &rr, &rr_ref, 1e-5);
        if f16_ok {
            let g16: Vec<f16> = gamma.iter().map(|&g| f16::from_f32(g)).collect();
            let seen: Vec<f32> = g16.iter().map(|g| g.to_f32()).collect();
            let xb = gpu.upload(&x).unwrap();
            let gb = gpu.upload(&g16).unwrap();
            let mut y = gpu.filled(rows * d, f32::NAN).unwrap();
            let mut rr = gpu.filled(rows, f32::NAN).unwrap();
            let p = rmsnorm_forward_w16::Params::new(rows as u32, d as u32, 1e-5);
            rmsnorm_forward_w16(&gpu, &xb, &gb, &mut y, &mut rr, p).unwrap();
            let (y_ref, rr_ref) = reference::rmsnorm_forward(&x, &seen, rows, d, 1e-5);
            assert_close(&format!("w16 y rows={rows} d={d}"), &y.read(&gpu).unwrap(), &y_ref, 1e-5);
            assert_close(&format!("w16 rrms rows={rows} d={d}"), &rr.read(&gpu).unwrap(), &rr_ref, 1e-5);
        }
    }
}

/// The forward runs two rows per workgroup: more than 2 · 65535 rows (an odd count, so the last
/// workgroup has one row) take the 2-D grid.
#[test]
fn forward_past_65535_workgroups_of_two_rows() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm 2-D forward");
    let max = gpu.limits().max_compute_workgroups_per_dimension as usize;
    let (rows, d) = (2 * max + 3, 3);
    let (x, gamma) = inputs(&mut rng, rows, d);
    let (y, rr) = forward(&gpu, &x, &gamma, rows, d, 1e-5);
    let (y_ref, rr_ref) = reference::rmsnorm_forward(&x, &gamma, rows, d, 1e-5);
    assert_close("forward y, workgroups past the limit", &y, &y_ref, 1e-5);
    assert_close("forward rrms, workgroups past the limit", &rr, &rr_ref, 1e-5);
}

/// `rmsnorm_backward_f16` and `rmsnorm_backward_acc_f16`: dx and the partials are the bits of
/// `rmsnorm_backward` (`rmsnorm_backward_acc`) on the same inputs, dx's f16 copy the bits of
/// `cast_grad_f16x4` of that dx, and the flag is raised exactly when the cast raises it. Against
/// float64: dx within 1e-5 as the f32 kernels (above), its copy within f16 rounding (each half
/// within 2⁻¹¹ relative of the f32 value, subnormals within 2⁻²⁵ absolute: 6e-4 norm-wise). Then
/// dy scaled by 10⁵, which takes dx past ±65504: clamped like the cast, and flagged. Widths not
/// multiples of 4 (1, 3, 5, 257, 300, 767, 2050: padded rows) and row counts not multiples of the
/// 8-row block.
#[test]
fn backward_f16_is_the_f32_backward_then_the_cast() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "rmsnorm_backward_f16") {
        return;
    }
    let mut rng = rng("rmsnorm_backward_f16");
    let mut overflowed = 0;
    for (rows, d) in BACKWARD_SHAPES {
        let (x, gamma) = inputs(&mut rng, rows, d);
        let eps = eps_for(d);
        let (_, rr) = forward(&gpu, &x, &gamma, rows, d, eps);
        let dx0 = uniform(&mut rng, rows * d, -1.0, 1.0);
        for (acc, scale) in [(false, 1.0f32), (true, 1.0), (false, 1.0e5), (true, 1.0e5)] {
            let what = format!("{} rows={rows} d={d} scale {scale}", if acc { "acc" } else { "store" });
            let mut dy: Vec<f32> = uniform(&mut rng, rows * d, -1.0, 1.0).into_iter().map(|v| v * scale).collect();
            // The overflow cases of the wide shapes overflow for certain: where the projection
            // on x leaves every float64 |dx| below twice f16's range (few values, by chance), dy
            // grows until one is past it, so the count below does not depend on the draw.
            let wide = d > 1 && rows * d >= 32;
            for _ in 0..40 {
                let (dx_ref, _) = reference::rmsnorm_backward(&x, &gamma, &dy, rows, d, eps);
                if scale == 1.0 || !wide || dx_ref.iter().any(|v| v.abs() > 2.0 * 65504.0) {
                    break;
                }
                dy.iter_mut().for_each(|v| *v *= 4.0);
            }
            let up = |v: &[f32]| gpu.upload(v).unwrap();
            let (xb, gb, rb, dyb) = (up(&x), up(&gamma), up(&rr), up(&dy));
            let start = |acc: bool| if acc { up(&dx0) } else { gpu.filled(rows * d, f32::NAN).unwrap() };
            let (r, dd) = (rows as u32, d as u32);
            let (mut dx, mut parts) = (start(acc), gpu.filled(blocks(rows) * d, f32::NAN).unwrap());
            let mut dx16 = half::poisoned16(&gpu, rows, d);
            let mut flag = half::flag(&gpu);
            let (mut dx32, mut parts32) = (start(acc), gpu.filled(blocks(rows) * d, f32::NAN).unwrap());
            if acc {
                let p = rmsnorm_backward_acc_f16::Params::new(r, dd);
                rmsnorm_backward_acc_f16(&gpu, &xb, &gb, &rb, &dyb, &mut dx, &mut parts, &mut dx16, &mut flag, p)
                    .unwrap();
                let p = rmsnorm_backward_acc::Params::new(r, dd);
                rmsnorm_backward_acc(&gpu, &xb, &gb, &rb, &dyb, &mut dx32, &mut parts32, p).unwrap();
            } else {
                let p = rmsnorm_backward_f16::Params::new(r, dd);
                rmsnorm_backward_f16(&gpu, &xb, &gb, &rb, &dyb, &mut dx, &mut parts, &mut dx16, &mut flag, p).unwrap();
                let p = rmsnorm_backward::Params::new(r, dd);
                rmsnorm_backward(&gpu, &xb, &gb, &rb, &dyb, &mut dx32, &mut parts32, p).unwrap();
            }
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            let got = dx.read(&gpu).unwrap();
            assert_eq!(bits(got.clone()), bits(dx32.read(&gpu).unwrap()), "{what}: dx");
            assert_eq!(bits(parts.read(&gpu).unwrap()), bits(parts32.read(&gpu).unwrap()), "{what}: partials");
            let (want16, want_flag) = half::cast_grad(&gpu, &dx32, rows, d);
            let got16 = half::read16(&gpu, &dx16, rows, d, &what);
            half::same16(&got16, &want16, &what);
            let got_flag = half::read_flag(&gpu, &flag, &what);
            assert_eq!(got_flag, want_flag, "{what}: the flag is not the cast's");
            let over = got.iter().any(|v| v.abs() > 65504.0);
            assert_eq!(got_flag, u32::from(over), "{what}: flag {got_flag} with dx beyond ±65504: {over}");
            overflowed += usize::from(over);
            if scale == 1.0 {
                let (dx_ref, _) = reference::rmsnorm_backward(&x, &gamma, &dy, rows, d, eps);
                let base = |i: usize| if acc { dx0[i] as f64 } else { 0.0 };
                let want: Vec<f64> = dx_ref.iter().enumerate().map(|(i, &v)| base(i) + v).collect();
                assert_close(&format!("{what}: dx"), &got, &want, 1e-5);
                assert_close(&format!("{what}: dx16"), &half::widen16(&got16, rows, d, &what), &want, 6e-4);
            }
        }
    }
    // dy of 10⁵ (grown where needed, above) takes dx past f16's range at every width but d = 1
    // (where dx ∝ eps / (x² + eps)) and the shapes of fewer than 32 values.
    let wide = BACKWARD_SHAPES.iter().filter(|&&(rows, d)| d > 1 && rows * d >= 32).count();
    assert!(overflowed >= 2 * wide, "only {overflowed} cases overflowed");
}

/// One `rmsnorm_dgamma_reduce4` on `kgpu` of four fresh `[blocks, d]` partials into four dγ that
/// hold random values (it accumulates): each against float64 (dγ0 + the column sums) and bit for
/// bit against `rmsnorm_dgamma_reduce` of the same partials on `gpu`; the partials' rows past
/// the blocks and the dγ past d poisoned, never read or written.
fn reduce4_case(kgpu: &Gpu, gpu: &Gpu, rng: &mut StdRng, rows: usize, d: usize) {
    let n = blocks(rows) * d;
    let parts: Vec<Vec<f32>> = (0..4).map(|_| uniform(rng, n, -1.0, 1.0)).collect();
    let dg0: Vec<Vec<f32>> = (0..4).map(|_| uniform(rng, d, -1.0, 1.0)).collect();
    let tail = |v: &[f32]| {
        let mut v = v.to_vec();
        v.extend([f32::NAN; common::TAIL]);
        v
    };
    let pb: Vec<_> = parts.iter().map(|v| kgpu.upload(&tail(v)).unwrap()).collect();
    let mut dg: Vec<_> = dg0.iter().map(|v| kgpu.upload(&tail(v)).unwrap()).collect();
    let [d0, d1, d2, d3] = &mut dg[..] else { unreachable!() };
    let p = rmsnorm_dgamma_reduce4::Params::new(rows as u32, d as u32);
    rmsnorm_dgamma_reduce4(kgpu, &pb[0], &pb[1], &pb[2], &pb[3], d0, d1, d2, d3, p).unwrap();
    for t in 0..4 {
        let what = format!("rmsnorm_dgamma_reduce4 rows={rows} d={d} norm {t}");
        let got = dg[t].read(kgpu).unwrap();
        common::check_tail(&what, &got, d);
        let want: Vec<f64> = (0..d)
            .map(|j| dg0[t][j] as f64 + (0..blocks(rows)).map(|b| parts[t][b * d + j] as f64).sum::<f64>())
            .collect();
        assert_close(&what, &got[..d], &want, 1e-5);
        let one = gpu.upload(&parts[t]).unwrap();
        let mut sep = gpu.upload(&dg0[t]).unwrap();
        rmsnorm_dgamma_reduce(gpu, &one, &mut sep, rmsnorm_dgamma_reduce::Params::new(rows as u32, d as u32)).unwrap();
        assert!(common::same_bits(&got[..d], &sep.read(gpu).unwrap()), "{what}: not rmsnorm_dgamma_reduce's bits");
    }
}

#[test]
fn dgamma_reduce4_is_four_reduces() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm_dgamma_reduce4");
    // Widths not multiples of a workgroup's 8 columns; one block; a short last block; more blocks
    // than one run of the 32 lanes (20,000 rows: 2500 blocks, past 32 × 64).
    for (rows, d) in [(3, 1), (33, 64), (70, 300), (1, 768), (20_000, 5), (4096, 768)] {
        reduce4_case(&gpu, &gpu, &mut rng, rows, d);
    }
    // 4 × 3 workgroups where a dimension takes at most 4: the 2-D grid.
    let Some(gpu2d) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    reduce4_case(&gpu2d, &gpu, &mut rng, 50, 24);
}

/// One `rmsnorm_dgamma_reduce_all` of `count` norms at strides with gaps: each norm against
/// float64 and bit for bit against `rmsnorm_dgamma_reduce`; the gaps of both buffers NaN, never
/// read into a sum nor written.
fn reduce_all_case(kgpu: &Gpu, gpu: &Gpu, rng: &mut StdRng, rows: usize, d: usize, count: usize) {
    let n = blocks(rows) * d;
    let (pstride, gstride) = (n + 5, d + 3);
    let parts: Vec<Vec<f32>> = (0..count).map(|_| uniform(rng, n, -1.0, 1.0)).collect();
    let dg0: Vec<Vec<f32>> = (0..count).map(|_| uniform(rng, d, -1.0, 1.0)).collect();
    let mut pall = vec![f32::NAN; count * pstride];
    let mut gall = vec![f32::NAN; count * gstride];
    for t in 0..count {
        pall[t * pstride..t * pstride + n].copy_from_slice(&parts[t]);
        gall[t * gstride..t * gstride + d].copy_from_slice(&dg0[t]);
    }
    let pb = kgpu.upload(&pall).unwrap();
    let mut gb = kgpu.upload(&gall).unwrap();
    let p = rmsnorm_dgamma_reduce_all::Params::new(rows as u32, d as u32, count as u32, pstride as u32, gstride as u32);
    rmsnorm_dgamma_reduce_all(kgpu, &pb, &mut gb, p).unwrap();
    let got = gb.read(kgpu).unwrap();
    for t in 0..count {
        let what = format!("rmsnorm_dgamma_reduce_all rows={rows} d={d} norm {t} of {count}");
        let row = &got[t * gstride..(t + 1) * gstride];
        assert!(row[d..].iter().all(|v| v.is_nan()), "{what}: wrote between the norms");
        let want: Vec<f64> = (0..d)
            .map(|j| dg0[t][j] as f64 + (0..blocks(rows)).map(|b| parts[t][b * d + j] as f64).sum::<f64>())
            .collect();
        assert_close(&what, &row[..d], &want, 1e-5);
        let one = gpu.upload(&parts[t]).unwrap();
        let mut sep = gpu.upload(&dg0[t]).unwrap();
        rmsnorm_dgamma_reduce(gpu, &one, &mut sep, rmsnorm_dgamma_reduce::Params::new(rows as u32, d as u32)).unwrap();
        assert!(common::same_bits(&row[..d], &sep.read(gpu).unwrap()), "{what}: not rmsnorm_dgamma_reduce's bits");
    }
}

#[test]
fn dgamma_reduce_all_is_one_reduce_per_norm() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rmsnorm_dgamma_reduce_all");
    for (rows, d, count) in [(3, 1, 1), (33, 64, 5), (70, 300, 3), (4096, 768, 25), (20_000, 5, 2)] {
        reduce_all_case(&gpu, &gpu, &mut rng, rows, d, count);
    }
    // 3 norms × 3 workgroups where a dimension takes at most 4: the 2-D grid.
    let Some(gpu2d) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    reduce_all_case(&gpu2d, &gpu, &mut rng, 50, 24, 3);
}

#[test]
fn dgamma_reduce4_short_buffers_are_errors() {
    let Some(gpu) = gpu() else { return };
    let (rows, d) = (40, 10);
    let p = gpu.filled(blocks(rows) * d, 1.0f32).unwrap();
    let short = gpu.filled(blocks(rows) * d - 1, 1.0f32).unwrap();
    let mut dg: Vec<_> = (0..4).map(|_| gpu.filled(d, 0.0f32).unwrap()).collect();
    let [d0, d1, d2, d3] = &mut dg[..] else { unreachable!() };
    let params = rmsnorm_dgamma_reduce4::Params::new(rows as u32, d as u32);
    let e = rmsnorm_dgamma_reduce4(&gpu, &p, &p, &short, &p, d0, d1, d2, d3, params).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(partials2)"), "{e}");
    let mut d3 = gpu.filled(d - 1, 0.0f32).unwrap();
    let e = rmsnorm_dgamma_reduce4(&gpu, &p, &p, &p, &p, d0, d1, d2, &mut d3, params).unwrap_err();
    assert!(e.to_string().contains("len(dgamma3) >= p.d"), "{e}");
    assert!(dg.iter().all(|b| b.read(&gpu).unwrap().iter().all(|&v| v == 0.0)), "nothing ran");
}
