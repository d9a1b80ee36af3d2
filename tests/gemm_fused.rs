//! The f16 core's fused epilogues (`gemm::gemm_swiglu`, `gemm::gemm_rope_qkv`) against float64 on
//! fresh random inputs, outputs poisoned with NaN: C as the plain product's bound allows, the
//! epilogue's f16 outputs against the float64 SwiGLU / rotation of the float64 C, and bit for bit
//! against the separate kernels (`activation::swiglu_gu_f16`, `rope::rope_qkv_f16`) run on the C
//! the fused product stored — the trainer's losses rest on that. Several block shapes (the
//! epilogue walks the block the workgroup stored), edge blocks, both orientations of B, and
//! misuse.
//!
//! Bounds: C within γ·Σ|a||b| with γ = (K + 3)·2⁻²⁴ (f16 operands, f32 sums). An f16 output is
//! within half an f16 ulp of its f32 value (2⁻¹¹ relative, 2⁻²⁵ absolute below the normal range)
//! plus what C's error moves it by (SwiGLU's slopes are at most 1.1·|u| and |silu(g)|; a rotation
//! keeps lengths) plus the f32 arithmetic (1e-6 relative, and RoPE's angle 1e-6·(1 + θ)).

mod common;

use common::{gpu, gpu_with, rng, uniform};
use kernels::gemm::{self, Core, Elem, F16Config, Gemm, GemmPlan, Mat, RopeQkv};
use kernels::ops::{self, F16x4};
use kernels::{Buffer, Gpu, GpuOptions};
use rand::rngs::StdRng;

fn round16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| kernels::f16::from_f32(x).to_f32()).collect()
}

fn has_f16(gpu: &Gpu) -> bool {
    if gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        return true;
    }
    assert!(std::env::var("CI").is_err(), "CI's adapter (lavapipe) has SHADER_F16");
    eprintln!("SKIPPED: no SHADER_F16");
    false
}

fn tensor_cores(gpu: &Gpu) -> bool {
    ops::on_tensor_cores(gpu, &kernels::linear::gemm16::KERNEL)
}

/// Block shapes: the default and others that change how a block is walked and stored (128 and
/// 512 invocations, narrower blocks, other subgroup tiles; on tensor cores the larger ones).
fn configs(tc: bool) -> Vec<F16Config> {
    let base = F16Config::default_for(tc);
    let mut v = vec![
        base,
        F16Config { wg: 128, bn: base.bn.min(128), ..base },
        F16Config { tm: 2, tn: 1, bn: 64, ..base },
        F16Config { bm: 128, bn: 128, bk: 16, tm: 2, tn: 2, wg: 512, ..base },
    ];
    if tc {
        v.extend([
            F16Config { bm: 128, bn: 128, bk: 32, tm: 4, tn: 2, prefetch: true, group: 1, ..base },
            F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, ..base },
        ]);
    }
    v
}

/// An f16 operand `[rows, cols]`: its values (f16-exact) and buffer.
fn operand(gpu: &Gpu, rng: &mut StdRng, rows: usize, cols: usize, scale: f32) -> (Vec<f32>, Buffer<F16x4>) {
    let values = round16(&uniform(rng, rows * cols, -scale, scale));
    let buf = gpu.upload(&ops::to_f16x4(&values, rows, cols)).unwrap();
    (values, buf)
}

/// An f16x4 output of `len` elements and a tail, all NaN.
fn poisoned16(gpu: &Gpu, len: usize) -> Buffer<F16x4> {
    gpu.upload(&vec![[kernels::f16::NAN; 4]; len + 3]).unwrap()
}

fn flat16(v: &[F16x4]) -> Vec<f32> {
    v.iter().flat_map(|q| q.iter().map(|h| h.to_f32())).collect()
}

fn check_tail16(what: &str, got: &[F16x4], len: usize) {
    assert!(got[len..].iter().flatten().all(|h| h.is_nan()), "{what}: elements past the output were written");
}

/// X [m, k] · op(B) with B [n, k] (`b_t`) or [k, n]: (C in float64, Σ|x||b| per element).
fn reference(x: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), b_t: bool) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0; m * n];
    let mut abs = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                let bv = if b_t { b[j * k + l] } else { b[l * n + j] } as f64;
                let t = x[i * k + l] as f64 * bv;
                c[i * n + j] += t;
                abs[i * n + j] += t.abs();
            }
        }
    }
    (c, abs)
}

/// C against float64; returns each element's bound.
fn check_c(what: &str, got: &[f32], want: &[f64], abs: &[f64], k: usize) -> Vec<f64> {
    let gamma = (k + 3) as f64 * 2f64.powi(-24);
    let mut bounds = Vec::with_capacity(want.len());
    for (i, ((&g, &w), &a)) in got.iter().zip(want).zip(abs).enumerate() {
        let bound = gamma * a + 1e-30;
        assert!((g as f64 - w).abs() <= bound, "{what}: C[{i}] = {g} against {w} (bound {bound:e})");
        bounds.push(bound);
    }
    assert!(got[want.len()..].iter().all(|v| v.is_nan()), "{what}: C's tail was written");
    bounds
}

/// The f16 rounding of a value near `want`: half an ulp.
fn half_ulp(want: f64) -> f64 {
    (want.abs() * 2f64.powi(-11)).max(2f64.powi(-25))
}

fn plan_for(gpu: &Gpu, g: Gemm, config: F16Config) -> Option<GemmPlan> {
    let tc = tensor_cores(gpu);
    if config.validate(g.a_t, g.b_t, tc).is_err() {
        return None;
    }
    let plan = g.plan_with(gpu, config, 1).unwrap();
    assert!(matches!(plan.core(), Core::F16 { .. }) && plan.fuses_epilogue(), "{}", plan.describe());
    Some(plan)
}

/// `gemm_swiglu` under `plan` (m × 2F × k, B stored [n, k] when `b_t`) on fresh operands against
/// float64 and, with `separate`, against `swiglu_gu_f16` on the stored C.
fn check_swiglu(
    gpu: &Gpu,
    rng: &mut StdRng,
    plan: &GemmPlan,
    (m, f, k): (usize, usize, usize),
    b_t: bool,
    separate: bool,
) {
    let n = 2 * f;
    assert!(plan.fuses_swiglu(), "{}", plan.describe());
    let what = format!("swiglu {} ({m}×{n}×{k}, b_t {b_t})", plan.describe());
    let (x, xb) = operand(gpu, rng, m, k, 1.0);
    let (w, wb) = if b_t { operand(gpu, rng, n, k, 1.0) } else { operand(gpu, rng, k, n, 1.0) };
    let wm = if b_t { Mat::f16(&wb, n, k).t() } else { Mat::f16(&wb, k, n) };
    let mut c = gpu.filled(m * n + 7, f32::NAN).unwrap();
    let hl = ops::f16x4_len(m, f);
    let mut h = poisoned16(gpu, hl);
    gemm::gemm_swiglu(gpu, plan, Mat::f16(&xb, m, k), wm, &mut c, &mut h).unwrap();
    let got_c = c.read(gpu).unwrap();
    let got_h = h.read(gpu).unwrap();
    let (want, abs) = reference(&x, &w, (m, n, k), b_t);
    let bounds = check_c(&what, &got_c, &want, &abs, k);
    check_tail16(&what, &got_h, hl);
    let hv = flat16(&got_h[..hl]);
    for r in 0..m {
        for j in 0..f {
            let (gi, ui) = (r * n + j, r * n + f + j);
            let (gv, uv) = (want[gi], want[ui]);
            let s = 1.0 / (1.0 + (-gv).exp());
            let ref_h = gv * s * uv;
            let moved = 1.1 * uv.abs() * bounds[gi] + (gv * s).abs() * bounds[ui];
            let bound = half_ulp(ref_h) + moved + 1e-6 * ref_h.abs();
            let e = (hv[r * f + j] as f64 - ref_h).abs();
            assert!(e <= bound, "{what}: h[{r}, {j}] = {} against {ref_h} (bound {bound:e})", hv[r * f + j]);
        }
    }
    if !separate {
        return;
    }
    // The separate kernel on the stored C: the same bits.
    let mut h2 = poisoned16(gpu, hl);
    let p = kernels::activation::swiglu_gu_f16::RowsParams::new(m as u32, f as u32);
    kernels::activation::swiglu_gu_f16(gpu, &c, &mut h2, p).unwrap();
    let sep = h2.read(gpu).unwrap();
    let same = got_h[..hl].iter().flatten().zip(sep[..hl].iter().flatten()).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{what}: the fused SwiGLU differs from activation::swiglu_gu_f16 on the same C");
}

#[test]
fn swiglu_epilogue_matches_float64_and_the_separate_kernel() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_swiglu");
    let tc = tensor_cores(&gpu);
    // (rows, F, k): one row; edge blocks in both directions; blocks wholly inside.
    let shapes = [(1, 16, 5), (70, 48, 33), (130, 80, 40), (256, 64, 64)];
    for config in configs(tc) {
        for (i, &(m, f, k)) in shapes.iter().enumerate() {
            // The trainer's orientation (X·Wᵀ), and B stored [k, n] once per block shape.
            let b_t = i != 1;
            let g = Gemm::new(m, 2 * f, k).elems(Elem::F16, Elem::F16).b_t(b_t);
            let Some(plan) = plan_for(&gpu, g, config) else { continue };
            check_swiglu(&gpu, &mut rng, &plan, (m, f, k), b_t, true);
        }
    }
}

/// `gemm_rope_qkv` under `plan` (batch·seq × (heads + 2·kv_heads)·dh × k, B stored [n, k] when
/// `b_t`) on fresh operands against float64 and, with `separate`, against `rope_qkv_f16` on the
/// stored C.
fn check_rope(
    gpu: &Gpu,
    rng: &mut StdRng,
    plan: &GemmPlan,
    (batch, seq, heads, kv_heads, dh, k, pos): (usize, usize, usize, usize, usize, usize, usize),
    b_t: bool,
    separate: bool,
) {
    let (m, n) = (batch * seq, (heads + 2 * kv_heads) * dh);
    let rope = RopeQkv { batch, seq, heads, kv_heads, head_dim: dh, pos_offset: pos, base: 10000.0 };
    assert!(plan.fuses_rope(&rope), "{}", plan.describe());
    let what = format!("rope {} ({m}×{n}×{k}, b_t {b_t}, heads {heads}/{kv_heads}×{dh})", plan.describe());
    let (x, xb) = operand(gpu, rng, m, k, 1.0);
    let (w, wb) = if b_t { operand(gpu, rng, n, k, 1.0) } else { operand(gpu, rng, k, n, 1.0) };
    let wm = if b_t { Mat::f16(&wb, n, k).t() } else { Mat::f16(&wb, k, n) };
    let mut c = gpu.filled(m * n + 7, f32::NAN).unwrap();
    let (lq, lk) = (ops::f16x4_len(m, heads * dh), ops::f16x4_len(m, kv_heads * dh));
    let (mut q, mut kk, mut v) = (poisoned16(gpu, lq), poisoned16(gpu, lk), poisoned16(gpu, lk));
    gemm::gemm_rope_qkv(gpu, plan, Mat::f16(&xb, m, k), wm, &mut c, rope, &mut q, &mut kk, &mut v).unwrap();
    let got_c = c.read(gpu).unwrap();
    let got = [q.read(gpu).unwrap(), kk.read(gpu).unwrap(), v.read(gpu).unwrap()];
    let (want, abs) = reference(&x, &w, (m, n, k), b_t);
    let bounds = check_c(&what, &got_c, &want, &abs, k);
    let widths = [heads * dh, kv_heads * dh, kv_heads * dh];
    let offsets = [0, heads * dh, (heads + kv_heads) * dh];
    for part in 0..3 {
        let len = ops::f16x4_len(m, widths[part]);
        check_tail16(&what, &got[part], len);
        let vals = flat16(&got[part][..len]);
        for r in 0..m {
            for c2 in (0..widths[part]).step_by(2) {
                let at = r * n + offsets[part] + c2;
                let (x0, x1) = (want[at], want[at + 1]);
                let (mut y0, mut y1, mut theta) = (x0, x1, 0.0);
                if part < 2 {
                    let i = (c2 % dh) / 2;
                    let inv = 10000f64.powf(-(2.0 * i as f64) / dh as f64);
                    theta = ((r % seq) + pos) as f64 * inv;
                    (y0, y1) = (x0 * theta.cos() - x1 * theta.sin(), x0 * theta.sin() + x1 * theta.cos());
                }
                let moved = bounds[at] + bounds[at + 1] + 1e-6 * (1.0 + theta) * (x0.abs() + x1.abs());
                for (e, yv) in [(0, y0), (1, y1)] {
                    let gv = vals[r * widths[part] + c2 + e] as f64;
                    let bound = half_ulp(yv) + moved;
                    assert!(
                        (gv - yv).abs() <= bound,
                        "{what}: part {part} [{r}, {}] = {gv} against {yv} (bound {bound:e})",
                        c2 + e
                    );
                }
            }
        }
    }
    if !separate {
        return;
    }
    // The separate kernel on the stored C: the same bits.
    let (mut q2, mut k2, mut v2) = (poisoned16(gpu, lq), poisoned16(gpu, lk), poisoned16(gpu, lk));
    let u = |x: usize| x as u32;
    let p = kernels::rope::rope_qkv_f16::Params::new(u(batch), u(seq), u(heads), u(kv_heads), u(dh), u(pos), 10000.0);
    kernels::rope::rope_qkv_f16(gpu, &c, &mut q2, &mut k2, &mut v2, p).unwrap();
    let sep = [q2.read(gpu).unwrap(), k2.read(gpu).unwrap(), v2.read(gpu).unwrap()];
    for part in 0..3 {
        let len = ops::f16x4_len(m, widths[part]);
        let same = got[part][..len]
            .iter()
            .flatten()
            .zip(sep[part][..len].iter().flatten())
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{what}: part {part} differs from rope::rope_qkv_f16 on the same C");
    }
}

#[test]
fn rope_epilogue_matches_float64_and_the_separate_kernel() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_rope_qkv");
    let tc = tensor_cores(&gpu);
    // (batch, seq, heads, kv_heads, head_dim, k, pos_offset): one row; grouped heads with edge
    // blocks; a block boundary inside a part; the trainer's head dim with grouped heads.
    let shapes = [(1, 1, 1, 1, 4, 5, 0), (2, 7, 3, 1, 8, 33, 3), (3, 50, 4, 2, 16, 40, 0), (2, 65, 4, 2, 64, 48, 11)];
    for config in configs(tc) {
        for (i, &shape) in shapes.iter().enumerate() {
            let (batch, seq, heads, kv_heads, dh, k, _) = shape;
            let b_t = i != 2;
            let g = Gemm::new(batch * seq, (heads + 2 * kv_heads) * dh, k).elems(Elem::F16, Elem::F16).b_t(b_t);
            let Some(plan) = plan_for(&gpu, g, config) else { continue };
            check_rope(&gpu, &mut rng, &plan, shape, b_t, true);
        }
    }
}

#[test]
fn fused_epilogues_on_exact_blocks() {
    // Shapes every block of the default and a 256×128 block shape covers exactly: on tensor
    // cores with subgroups of 32 the X·Wᵀ plans are exact and the RoPE product runs on
    // `gemm16_rope_qkv_tc` (the SwiGLU product, whose column map the exact form lacks, on the
    // full kernel), elsewhere the full ones; against float64 and the separate kernels.
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_fused_exact");
    let tc = tensor_cores(&gpu);
    let r = gpu.report();
    let exact = tc && r.subgroup_min_size == 32 && r.subgroup_max_size == 32;
    let base = F16Config::default_for(tc);
    let mut configs = vec![base];
    if tc {
        configs.push(F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, prefetch: true, ..base });
    }
    for config in configs {
        for b_t in [true, false] {
            let (m, f, k) = (256, 256, 96);
            let Some(plan) = plan_for(&gpu, Gemm::new(m, 2 * f, k).elems(Elem::F16, Elem::F16).b_t(b_t), config) else {
                continue;
            };
            assert_eq!(plan.exact_tc(), exact && b_t, "{}", plan.describe());
            check_swiglu(&gpu, &mut rng, &plan, (m, f, k), b_t, true);
            // batch·seq = 256 rows, (4 + 2·2)·64 = 512 columns.
            let shape = (2, 128, 4, 2, 64, 64, 7);
            let g = Gemm::new(256, 512, 64).elems(Elem::F16, Elem::F16).b_t(b_t);
            let Some(plan) = plan_for(&gpu, g, config) else { continue };
            assert_eq!(plan.exact_tc(), exact && b_t, "{}", plan.describe());
            check_rope(&gpu, &mut rng, &plan, shape, b_t, true);
        }
    }
}

#[test]
fn fused_epilogues_take_the_two_d_grid() {
    // Against float64 only: the separate kernels' grids pass this small limit.
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(8)) else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_fused_2d");
    // More blocks than 8 workgroups a dimension with either default block shape (128×64 portable,
    // 128×256 on tensor cores), fewer than 8².
    let (m, f, k) = (600, 160, 40);
    let plan = Gemm::new(m, 2 * f, k).elems(Elem::F16, Elem::F16).b_t(true).plan(&gpu).unwrap();
    check_swiglu(&gpu, &mut rng, &plan, (m, f, k), true, false);
    let shape = (5, 120, 8, 4, 32, 40, 2);
    let g = Gemm::new(5 * 120, (8 + 2 * 4) * 32, 40).elems(Elem::F16, Elem::F16).b_t(true);
    check_rope(&gpu, &mut rng, &g.plan(&gpu).unwrap(), shape, true, false);
}

#[test]
fn fused_epilogues_refuse_what_they_cannot_do() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_fused_misuse");
    let config = F16Config::default_for(tensor_cores(&gpu));
    let (m, k) = (8, 16);
    let (_, xb) = operand(&gpu, &mut rng, m, k, 1.0);
    let msg = |r: kernels::Result<()>| r.expect_err("misuse must be an error").to_string();
    // SwiGLU: n not a multiple of 32.
    let (_, wb) = operand(&gpu, &mut rng, 48, k, 1.0);
    let plan = Gemm::new(m, 48, k).elems(Elem::F16, Elem::F16).b_t(true).plan_with(&gpu, config, 1).unwrap();
    let mut c = gpu.zeros::<f32>(m * 48).unwrap();
    let mut h = gpu.zeros::<F16x4>(ops::f16x4_len(m, 24)).unwrap();
    assert!(plan.fuses_epilogue() && !plan.fuses_swiglu());
    let e = msg(gemm::gemm_swiglu(&gpu, &plan, Mat::f16(&xb, m, k), Mat::f16(&wb, 48, k).t(), &mut c, &mut h));
    assert!(e.contains("multiple of 32"), "{e}");
    // A split contraction.
    let (_, wb) = operand(&gpu, &mut rng, 64, k, 1.0);
    let split = Gemm::new(m, 64, k).elems(Elem::F16, Elem::F16).b_t(true).plan_with(&gpu, config, 2);
    if let Some(split) = split.ok().filter(|p| p.parts() > 1) {
        assert!(!split.fuses_epilogue());
        let mut c = gpu.zeros::<f32>(m * 64).unwrap();
        let mut h = gpu.zeros::<F16x4>(ops::f16x4_len(m, 32)).unwrap();
        let e = msg(gemm::gemm_swiglu(&gpu, &split, Mat::f16(&xb, m, k), Mat::f16(&wb, 64, k).t(), &mut c, &mut h));
        assert!(e.contains("1 part"), "{e}");
    }
    // H too short.
    let plan = Gemm::new(m, 64, k).elems(Elem::F16, Elem::F16).b_t(true).plan_with(&gpu, config, 1).unwrap();
    let mut c = gpu.zeros::<f32>(m * 64).unwrap();
    let mut h = gpu.zeros::<F16x4>(ops::f16x4_len(m, 32) - 1).unwrap();
    let e = msg(gemm::gemm_swiglu(&gpu, &plan, Mat::f16(&xb, m, k), Mat::f16(&wb, 64, k).t(), &mut c, &mut h));
    assert!(e.contains("H needs"), "{e}");
    // RoPE: a head dim not a multiple of 4, and a shape that is not the plan's.
    let mut q = gpu.zeros::<F16x4>(64).unwrap();
    let mut kk = gpu.zeros::<F16x4>(64).unwrap();
    let mut v = gpu.zeros::<F16x4>(64).unwrap();
    for (rope, want) in [
        (RopeQkv { batch: 1, seq: 8, heads: 4, kv_heads: 2, head_dim: 6, pos_offset: 0, base: 1e4 }, "multiple of 4"),
        (RopeQkv { batch: 2, seq: 8, heads: 2, kv_heads: 1, head_dim: 16, pos_offset: 0, base: 1e4 }, "the product is"),
    ] {
        assert!(!plan.fuses_rope(&rope), "{rope:?}");
        let wm = Mat::f16(&wb, 64, k).t();
        let e = msg(gemm::gemm_rope_qkv(&gpu, &plan, Mat::f16(&xb, m, k), wm, &mut c, rope, &mut q, &mut kk, &mut v));
        assert!(e.contains(want), "{e}");
    }
}
