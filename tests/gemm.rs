//! `kernels::gemm` against float64 references on fresh random inputs (outputs poisoned with NaN,
//! their tails checked): every core the adapter runs (f16 operands on tensor cores or their
//! portable form, the scaled split, the f32 SIMT product), every orientation and epilogue, edge
//! shapes, split contractions, several block shapes of the f16 core, and misuse.
//!
//! Bounds: an f32 sum of K products of exactly representable operands is within
//! γ = (K + parts + 3)·2⁻²⁴ of Σ|a||b| (+ |C₀| or |R| for what is added), whatever the order;
//! the f16 core's operands are f16 values, so its reference multiplies the rounded values exactly.
//! The scaled split keeps 22 bits of each operand: 2e-6 of Σ|a||b| on top.

mod common;

use common::{TAIL, check_tail, gpu, gpu_with, rng, uniform};
use kernels::gemm::{self, Core, Elem, Epilogue, F16Config, Gemm, GemmPlan, GemmWorkspace, Halves, Mat, Precision};
use kernels::ops::{self, F16x4};
use kernels::{Buffer, Gpu, GpuOptions};
use rand::rngs::StdRng;

/// f32 values rounded to f16 and back (what the f16 core multiplies).
fn round16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| kernels::f16::from_f32(x).to_f32()).collect()
}

/// A stored matrix: its f32 values (for the reference) and buffer.
struct Operand {
    values: Vec<f32>,
    rows: usize,
    cols: usize,
    f32: Option<Buffer<f32>>,
    f16: Option<Buffer<F16x4>>,
}

impl Operand {
    fn new(gpu: &Gpu, rng: &mut StdRng, rows: usize, cols: usize, elem: Elem) -> Operand {
        let raw = uniform(rng, rows * cols, -1.0, 1.0);
        match elem {
            // Prepared halves are made from the f32 matrix by `check_plan`.
            Elem::F32 | Elem::Split => {
                Operand { f32: Some(gpu.upload(&raw).unwrap()), f16: None, values: raw, rows, cols }
            }
            Elem::F16 => {
                let values = round16(&raw);
                let buf = gpu.upload(&ops::to_f16x4(&values, rows, cols)).unwrap();
                Operand { f32: None, f16: Some(buf), values, rows, cols }
            }
        }
    }

    fn mat(&self, transposed: bool) -> Mat<'_> {
        let m = match (&self.f32, &self.f16) {
            (Some(b), _) => Mat::f32(b, self.rows, self.cols),
            (None, Some(b)) => Mat::f16(b, self.rows, self.cols),
            _ => unreachable!(),
        };
        if transposed { m.t() } else { m }
    }

    /// op(M)[i, j].
    fn at(&self, transposed: bool, i: usize, j: usize) -> f64 {
        (if transposed { self.values[j * self.cols + i] } else { self.values[i * self.cols + j] }) as f64
    }
}

/// Runs `plan` on fresh operands and checks C against float64.
fn check_plan(gpu: &Gpu, rng: &mut StdRng, plan: &GemmPlan, what: &str) {
    let g = *plan.gemm();
    let (m, n, k) = (g.m, g.n, g.k);
    let a = Operand::new(gpu, rng, if g.a_t { k } else { m }, if g.a_t { m } else { k }, g.a);
    let b = Operand::new(gpu, rng, if g.b_t { n } else { k }, if g.b_t { k } else { n }, g.b);
    let c0 = uniform(rng, m * n, -1.0, 1.0);
    let r = uniform(rng, m * n, -1.0, 1.0);
    let mut init: Vec<f32> = match g.epilogue {
        Epilogue::Accumulate => c0.clone(),
        _ => vec![f32::NAN; m * n],
    };
    init.extend([f32::NAN; TAIL]);
    let mut c = gpu.upload(&init).unwrap();
    let rb = gpu.upload(&r).unwrap();
    let mut ws = GemmWorkspace::new(gpu, &[plan]).unwrap();
    let residual = (g.epilogue == Epilogue::Residual).then_some(&rb);
    let got = if g.a == Elem::Split || g.b == Elem::Split {
        // The prepared operands' halves made ahead, A's scale word at slot 1 of one buffer of
        // four, B's at slot 2 of another (the other words then set to a magnitude that would
        // show if the product read them), against the plan that splits both operands itself on
        // the same values: the same bits.
        let prepare = |op: &Operand, slot: usize| {
            let mut halves = Halves::new(gpu, op.rows, op.cols).unwrap();
            let mut scales = gpu.filled(4, u32::MAX).unwrap();
            Halves::clear_scales(gpu, &mut scales).unwrap();
            halves.split(gpu, op.f32.as_ref().unwrap(), &mut scales, slot).unwrap();
            let mut words = scales.read(gpu).unwrap();
            for (i, w) in words.iter_mut().enumerate() {
                if i != slot {
                    *w = 0x7e00_0000;
                }
            }
            scales.write(gpu, &words).unwrap();
            (halves, scales)
        };
        let pa = (g.a == Elem::Split).then(|| prepare(&a, 1));
        let pb = (g.b == Elem::Split).then(|| prepare(&b, 2));
        let am = match &pa {
            Some((h, s)) => Mat::split(h, s, 1),
            None => a.mat(false),
        };
        let bm = match &pb {
            Some((h, s)) => Mat::split(h, s, 2),
            None => b.mat(false),
        };
        let (am, bm) = (if g.a_t { am.t() } else { am }, if g.b_t { bm.t() } else { bm });
        gemm::gemm(gpu, plan, am, bm, residual, &mut c, &mut ws).unwrap();
        let got = c.read(gpu).unwrap();
        let itself = Gemm { a: Elem::F32, b: Elem::F32, ..g }.plan_split(gpu).unwrap();
        let skipped = 2 * (usize::from(pa.is_some()) + usize::from(pb.is_some()));
        assert_eq!(itself.dispatches(), plan.dispatches() + skipped, "prepared halves skip their max and split");
        let mut c2 = gpu.upload(&init).unwrap();
        let mut ws2 = GemmWorkspace::new(gpu, &[&itself]).unwrap();
        gemm::gemm(gpu, &itself, a.mat(g.a_t), b.mat(g.b_t), residual, &mut c2, &mut ws2).unwrap();
        let want = c2.read(gpu).unwrap();
        let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{m}×{n}×{k}: prepared halves give other bits than the product that splits itself");
        got
    } else {
        gemm::gemm(gpu, plan, a.mat(g.a_t), b.mat(g.b_t), residual, &mut c, &mut ws).unwrap();
        c.read(gpu).unwrap()
    };
    let what = format!("{what} {} ({m}×{n}×{k}, a_t {} b_t {}, {:?})", plan.describe(), g.a_t, g.b_t, g.epilogue);
    let split = if plan.core() == Core::Split { 2e-6 } else { 0.0 };
    check_float64(&what, &got, (&a, &b), &g, (&c0, &r), plan.parts(), split);
}

/// C (`got`, its tail past m·n poisoned) against float64 of op(a)·op(b) plus what `g`'s epilogue
/// adds (`c0` accumulated into, `r` the residual): within (K + parts + 3)·2⁻²⁴ (+ `split`) of
/// Σ|a||b| (+ the added value).
fn check_float64(
    what: &str,
    got: &[f32],
    (a, b): (&Operand, &Operand),
    g: &Gemm,
    (c0, r): (&[f32], &[f32]),
    parts: usize,
    split: f64,
) {
    let (m, n, k) = (g.m, g.n, g.k);
    check_tail(what, got, m * n);
    let gamma = (k + parts + 3) as f64 * 2f64.powi(-24);
    let mut worst = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut sum, mut abs) = (0.0f64, 0.0f64);
            for l in 0..k {
                let t = a.at(g.a_t, i, l) * b.at(g.b_t, l, j);
                sum += t;
                abs += t.abs();
            }
            let extra = match g.epilogue {
                Epilogue::Store => 0.0,
                Epilogue::Accumulate => c0[i * n + j] as f64,
                Epilogue::Residual => r[i * n + j] as f64,
            };
            let want = sum + extra;
            let bound = (gamma + split) * (abs + extra.abs()) + 1e-30;
            let e = (got[i * n + j] as f64 - want).abs();
            assert!(e <= bound, "{what}: C[{i}, {j}] = {} against {want} (error {e:e} > {bound:e})", got[i * n + j]);
            worst = worst.max(e / bound);
        }
    }
    eprintln!("{what}: worst error {worst:.3} of the bound");
}

const SHAPES: &[(usize, usize, usize)] = &[(1, 1, 1), (7, 13, 5), (130, 70, 33), (129, 257, 40), (256, 128, 96)];
const EPILOGUES: [Epilogue; 3] = [Epilogue::Store, Epilogue::Accumulate, Epilogue::Residual];

fn tensor_cores(gpu: &Gpu) -> bool {
    ops::on_tensor_cores(gpu, &kernels::linear::gemm16::KERNEL)
}

fn has_f16(gpu: &Gpu) -> bool {
    if gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        return true;
    }
    assert!(std::env::var("CI").is_err(), "CI's adapter (lavapipe) has SHADER_F16");
    eprintln!("SKIPPED: no SHADER_F16");
    false
}

/// Block shapes the f16 tests run: the default and others that change the code path (deeper
/// steps, wider blocks, other subgroup tiles, no prefetch, padding, grouped launch order).
fn configs(tc: bool) -> Vec<F16Config> {
    let base = F16Config::default_for(tc);
    let mut v = vec![
        base,
        F16Config { prefetch: false, group: 2, ..base },
        F16Config { bn: 128, pad: 16, ..base },
        F16Config { tm: 2, tn: 2, ..base },
        // 128 invocations stage at most 8 vec4s each: a 128-wide block of B.
        F16Config { wg: 128, bn: base.bn.min(128), ..base },
        // 512 invocations: 16 subgroups of 32 on tensor cores (blocks not wholly inside the
        // output on the portable path), the first 256 computing on the portable path.
        F16Config { bm: 128, bn: 128, bk: 16, tm: 2, tn: 2, wg: 512, ..base },
        // Six vec4 loads per invocation of B's slice (unpadded rows: the portable variant's
        // slices hold it too), 4×3 tiles a subgroup.
        F16Config { bm: 128, bn: 192, bk: 16, tm: 4, tn: 3, pad: 0, wg: 128, ..base },
    ];
    if tc {
        v.extend([
            F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, ..base },
            F16Config { bm: 128, bn: 256, bk: 32, tm: 4, tn: 4, group: 4, ..base },
            F16Config { bm: 128, bn: 128, bk: 64, tm: 4, tn: 4, ..base },
            F16Config { bm: 128, bn: 128, bk: 16, tm: 1, tn: 1, prefetch: false, ..base },
            F16Config { bm: 128, bn: 128, bk: 32, tm: 4, tn: 4, prefetch: false, wg: 128, ..base },
            F16Config { bm: 256, bn: 128, bk: 16, tm: 4, tn: 4, wg: 128, ..base },
            F16Config { bm: 128, bn: 256, bk: 32, tm: 4, tn: 2, prefetch: true, group: 4, wg: 512, ..base },
            F16Config { bm: 256, bn: 128, bk: 32, tm: 2, tn: 4, prefetch: false, wg: 512, ..base },
            F16Config { bm: 128, bn: 192, bk: 32, tm: 4, tn: 3, prefetch: true, ..base },
        ]);
    }
    v
}

#[test]
fn f16_products_match_float64() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_f16");
    let tc = tensor_cores(&gpu);
    eprintln!("f16 core on {}", if tc { "tensor cores" } else { "the portable path" });
    for &(m, n, k) in SHAPES {
        for (a_t, b_t) in [(false, true), (false, false), (true, false), (true, true)] {
            for e in EPILOGUES {
                let g = Gemm::new(m, n, k).elems(Elem::F16, Elem::F16).a_t(a_t).b_t(b_t).epilogue(e);
                let plan = g.plan(&gpu).unwrap();
                assert!(matches!(plan.core(), Core::F16 { tensor_cores, .. } if tensor_cores == tc));
                check_plan(&gpu, &mut rng, &plan, "plan");
            }
        }
    }
}

#[test]
fn f16_block_shapes_and_splits_match_float64() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_f16_configs");
    let tc = tensor_cores(&gpu);
    for config in configs(tc) {
        for (i, &(m, n, k)) in [(300, 200, 97), (256, 256, 128)].iter().enumerate() {
            let orient =
                [(false, true), (false, false), (true, false), (true, true)][(i + config.bk as usize / 16) % 4];
            let g = Gemm::new(m, n, k).elems(Elem::F16, Elem::F16).a_t(orient.0).b_t(orient.1);
            check_plan(&gpu, &mut rng, &g.plan_with(&gpu, config, 1).unwrap(), "config");
        }
        // Split contractions: parts of whole steps, the last one short, and a part past the end;
        // then one the blocks cover exactly (the loads without clamps or masks).
        for (parts, e, (m, n, k)) in [
            (2, Epilogue::Accumulate, (140, 130, 200)),
            (3, Epilogue::Store, (140, 130, 200)),
            (2, Epilogue::Store, (256, 256, 256)),
        ] {
            let g = Gemm::new(m, n, k).elems(Elem::F16, Elem::F16).a_t(true).epilogue(e);
            let plan = g.plan_with(&gpu, config, parts).unwrap();
            assert!(plan.parts() > 1, "{}", plan.describe());
            check_plan(&gpu, &mut rng, &plan, "split");
        }
    }
}

#[test]
fn exact_products_take_the_exact_tensor_core_kernels() {
    // X·Wᵀ products whose blocks all lie inside the output run on `linear::gemm16_tc` where
    // tensor cores run with subgroups one per tile group (on an H200 or H100: every block shape
    // below but the last, whose 8 tile groups meet 4 subgroups); the other orientations, split
    // products, that shape and every product elsewhere on the full core. Either way the result
    // is checked against float64: every orientation, store, accumulate, a split contraction.
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_exact_tc");
    let tc = tensor_cores(&gpu);
    let r = gpu.report();
    let fixed32 = r.subgroup_min_size == 32 && r.subgroup_max_size == 32;
    let base = F16Config::default_for(true);
    let cases = [
        (base, true),
        (F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, prefetch: true, ..base }, true),
        (F16Config { bm: 128, bn: 128, bk: 32, tm: 4, tn: 4, wg: 128, group: 2, ..base }, true),
        // Six vec4 loads per invocation of B's slice, 4×3 tiles a subgroup.
        (F16Config { bm: 128, bn: 192, bk: 32, tm: 4, tn: 3, prefetch: true, ..base }, true),
        (F16Config { bm: 128, bn: 128, bk: 16, tm: 2, tn: 2, wg: 128, ..base }, false),
    ];
    let mut ran = 0;
    let mut exact_ran = 0;
    for (config, exact) in cases {
        // The portable variant stages smaller slices: the shapes it cannot hold are tensor-core
        // shapes only.
        if config.validate(false, false, tc).is_err() || config.validate(true, true, tc).is_err() {
            assert!(!tc, "{config:?}");
            continue;
        }
        ran += 1;
        let (m, n, k) = (2 * config.bm as usize, 2 * config.bn as usize, 4 * config.bk as usize);
        for (i, (a_t, b_t)) in [(false, true), (false, false), (true, false), (true, true)].into_iter().enumerate() {
            let e = if i % 2 == 0 { Epilogue::Store } else { Epilogue::Accumulate };
            let g = Gemm::new(m, n, k).elems(Elem::F16, Elem::F16).a_t(a_t).b_t(b_t).epilogue(e);
            let plan = g.plan_with(&gpu, config, 1).unwrap();
            assert_eq!(plan.exact_tc(), tc && fixed32 && exact && !a_t && b_t, "{}", plan.describe());
            exact_ran += usize::from(plan.exact_tc());
            check_plan(&gpu, &mut rng, &plan, "exact");
        }
        let g = Gemm::new(m, n, 2 * k).elems(Elem::F16, Elem::F16).a_t(true);
        let plan = g.plan_with(&gpu, config, 2).unwrap();
        assert_eq!(plan.parts(), 2);
        assert!(!plan.exact_tc(), "{}", plan.describe());
        check_plan(&gpu, &mut rng, &plan, "exact split");
    }
    assert!(ran > 0);
    assert_eq!(exact_ran > 0, tc && fixed32);
    // One row more: the blocks no longer cover the output exactly.
    let g = Gemm::new(2 * base.bm as usize + 1, 2 * base.bn as usize, 128).elems(Elem::F16, Elem::F16);
    let plan = g.plan(&gpu).unwrap();
    assert!(!plan.exact_tc(), "{}", plan.describe());
    check_plan(&gpu, &mut rng, &plan, "inexact");
}

#[test]
fn the_exact_kernel_called_directly_runs_on_every_adapter() {
    // `linear::gemm16_tc` with the overrides the plan gives it (the shape compiled in), called
    // directly: its tensor-core variant uses them all, its portable variant (the one that runs
    // without tensor cores) declares fewer, and the runtime passes each variant the ones it
    // declares. Against float64 either way.
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let r = gpu.report();
    if tensor_cores(&gpu) && !(r.subgroup_min_size == 32 && r.subgroup_max_size == 32) {
        eprintln!("SKIPPED: tensor cores with subgroups other than 32 (one subgroup of 32 per tile group)");
        return;
    }
    let mut rng = rng("gemm16_tc_direct");
    let (m, n, k) = (256usize, 512usize, 96usize);
    let a = Operand::new(&gpu, &mut rng, m, k, Elem::F16);
    let b = Operand::new(&gpu, &mut rng, n, k, Elem::F16);
    let mut y = gpu.filled(m * n + TAIL, f32::NAN).unwrap();
    use kernels::linear::gemm16_tc;
    let u = |v: usize| v as u32;
    // The plan's shape on tensor cores; without them one the portable variant's smaller slices
    // hold (128×128 blocks 16 deep), with the tensor-core tiling's overrides set all the same.
    let tc = tensor_cores(&gpu);
    let c = if tc {
        F16Config::default_for(true)
    } else {
        F16Config { bm: 128, bn: 128, bk: 16, tm: 4, tn: 4, wg: 128, ..F16Config::default_for(true) }
    };
    assert!(c.validate(false, true, tc).is_ok(), "{c:?}");
    let tiles = u((m / c.bm as usize) * (n / c.bn as usize));
    let p = gemm16_tc::GemmParams::new(u(m), u(n), u(k), 1, u(k), tiles);
    let o = gemm16_tc::Overrides {
        A_T: Some(false),
        B_T: Some(true),
        G_BM: Some(c.bm),
        G_BN: Some(c.bn),
        G_BK: Some(c.bk),
        G_TM: Some(c.tm),
        G_TN: Some(c.tn),
        G_WG: Some(c.wg),
        G_PF: Some(true),
        M_C: Some(u(m)),
        N_C: Some(u(n)),
        K_C: Some(u(k)),
        G_PARTS: Some(1),
        G_CHUNK: Some(u(k)),
        ..Default::default()
    };
    gemm16_tc(&gpu, a.f16.as_ref().unwrap(), b.f16.as_ref().unwrap(), &mut y, p, o).unwrap();
    let g = Gemm::new(m, n, k).elems(Elem::F16, Elem::F16).b_t(true);
    check_float64("gemm16_tc called directly", &y.read(&gpu).unwrap(), (&a, &b), &g, (&[], &[]), 1, 0.0);
}

#[test]
fn deferred_parts_add_to_the_bits_of_the_whole_product() {
    // Three split weight-gradient products (dW += Aᵀ·B) leave their parts in one buffer
    // (`gemm_parts`) and one dispatch adds them into one output holding the three results apart
    // (`add_parts`): the bits `gemm` gives for each, the gaps between them untouched.
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_deferred_parts");
    let config = F16Config::default_for(tensor_cores(&gpu));
    // Parts past the eight whose loads the sum issues together (10), and fewer.
    let shapes = [(40, 24, 300, 10), (16, 33, 257, 3), (64, 64, 256, 4)];
    let mut sums = Vec::new();
    let (mut dst, mut src) = (5usize, 0usize);
    let mut cases = Vec::new();
    for &(m, n, k, parts) in &shapes {
        let g = Gemm::new(m, n, k).elems(Elem::F16, Elem::F16).a_t(true).epilogue(Epilogue::Accumulate);
        let plan = g.plan_with(&gpu, config, parts).unwrap();
        assert!(plan.defers_parts(), "{}", plan.describe());
        sums.push(gemm::PartsSum { dst, len: m * n, parts: plan.parts(), src });
        dst += m * n + 3;
        // The next product's parts start on the binding alignment.
        src = (src + plan.scratch_len()).next_multiple_of(gpu.storage_alignment() as usize / 4);
        let a = Operand::new(&gpu, &mut rng, k, m, Elem::F16);
        let b = Operand::new(&gpu, &mut rng, k, n, Elem::F16);
        cases.push((plan, a, b));
    }
    let init: Vec<f32> = (0..dst)
        .map(|i| if sums.iter().any(|s| (s.dst..s.dst + s.len).contains(&i)) { (i % 7) as f32 - 3.0 } else { f32::NAN })
        .collect();
    let mut c = gpu.upload(&init).unwrap();
    let mut parts = gpu.filled(src, f32::NAN).unwrap();
    let batch = gpu.batch();
    for ((plan, a, b), s) in cases.iter().zip(&sums) {
        // Each product's parts bound from its own start.
        let mut at = parts.part(s.src..s.src + plan.scratch_len()).unwrap();
        gemm::gemm_parts(&batch, plan, a.mat(true), b.mat(false), &mut at).unwrap();
    }
    gemm::add_parts(&batch, &parts, &sums, &mut c).unwrap();
    assert_eq!(batch.dispatches(), shapes.len() + 1);
    batch.submit().unwrap();
    let got = c.read(&gpu).unwrap();
    for ((plan, a, b), s) in cases.iter().zip(&sums) {
        let mut whole = gpu.upload(&init[s.dst..s.dst + s.len]).unwrap();
        let mut ws = GemmWorkspace::new(&gpu, &[plan]).unwrap();
        gemm::gemm(&gpu, plan, a.mat(true), b.mat(false), None, &mut whole, &mut ws).unwrap();
        let want = whole.read(&gpu).unwrap();
        assert!(common::same_bits(&got[s.dst..s.dst + s.len], &want), "{s:?}: not the whole product's bits");
        assert!(want.iter().zip(&init[s.dst..]).any(|(x, y)| x != y), "{s:?}: the product added nothing");
    }
    for (i, v) in got.iter().enumerate() {
        if !sums.iter().any(|s| (s.dst..s.dst + s.len).contains(&i)) {
            assert!(v.is_nan(), "element {i} between the outputs was written");
        }
    }
    // Misuse: overlapping outputs, a range past the parts, more than four, a plan that does not split.
    let bad =
        [gemm::PartsSum { dst: 0, len: 10, parts: 1, src: 0 }, gemm::PartsSum { dst: 9, len: 2, parts: 1, src: 0 }];
    assert!(gemm::add_parts(&gpu, &parts, &bad, &mut c).is_err());
    let past = [gemm::PartsSum { dst: 0, len: 10, parts: 2, src: parts.len() - 15 }];
    assert!(gemm::add_parts(&gpu, &parts, &past, &mut c).is_err());
    assert!(gemm::add_parts(&gpu, &parts, &[sums[0]; 5], &mut c).is_err());
    let whole = Gemm::new(8, 8, 8).elems(Elem::F16, Elem::F16).a_t(true).epilogue(Epilogue::Accumulate);
    let plan = whole.plan_with(&gpu, config, 1).unwrap();
    let (a, b) = (Operand::new(&gpu, &mut rng, 8, 8, Elem::F16), Operand::new(&gpu, &mut rng, 8, 8, Elem::F16));
    assert!(gemm::gemm_parts(&gpu, &plan, a.mat(true), b.mat(false), &mut parts).is_err());
}

#[test]
fn f32_products_match_float64() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("gemm_f32");
    for &(m, n, k) in SHAPES {
        for (a_t, b_t) in [(false, true), (false, false), (true, false)] {
            for e in EPILOGUES {
                let g = Gemm::new(m, n, k).a_t(a_t).b_t(b_t).epilogue(e);
                for precision in [Precision::F32, Precision::F32Simt] {
                    check_plan(&gpu, &mut rng, &g.precision(precision).plan(&gpu).unwrap(), "plan");
                }
                check_plan(&gpu, &mut rng, &g.plan_split(&gpu).unwrap(), "split core");
            }
        }
    }
    // The weight-gradient form over many rows: split into parts on every core.
    let g = Gemm::new(96, 80, 2100).a_t(true).epilogue(Epilogue::Accumulate);
    let simt = g.precision(Precision::F32Simt).plan(&gpu).unwrap();
    assert!(simt.parts() > 1, "{}", simt.describe());
    check_plan(&gpu, &mut rng, &simt, "weight gradient");
    let split = g.plan_split(&gpu).unwrap();
    assert!(split.parts() > 1, "{}", split.describe());
    check_plan(&gpu, &mut rng, &split, "weight gradient");
}

/// Operands split ahead of their products (a weight's halves, made once a step; an output
/// gradient's, made once for its two products) through the split core: A, B or both, every
/// orientation and epilogue, against float64 and bit for bit against the product that splits
/// them itself. Where the adapter runs f32 products on the SIMT core, a plan for prepared halves
/// is refused (only the split core reads them).
#[test]
fn prepared_halves_match_the_product_that_splits_itself() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let mut rng = rng("gemm_prepared");
    for &(m, n, k) in SHAPES {
        for (a_t, b_t) in [(false, true), (false, false), (true, false)] {
            for e in EPILOGUES {
                for (ea, eb, what) in [
                    (Elem::F32, Elem::Split, "prepared B"),
                    (Elem::Split, Elem::F32, "prepared A"),
                    (Elem::Split, Elem::Split, "prepared A and B"),
                ] {
                    let g = Gemm::new(m, n, k).elems(ea, eb).a_t(a_t).b_t(b_t).epilogue(e);
                    check_plan(&gpu, &mut rng, &g.plan_split(&gpu).unwrap(), what);
                }
            }
        }
    }
    let g = Gemm::new(64, 64, 64).elems(Elem::F32, Elem::Split).b_t(true);
    let split_on_tc = ops::on_tensor_cores(&gpu, &kernels::linear::matmul_t_pres::KERNEL);
    match g.plan(&gpu) {
        Ok(p) => assert!(split_on_tc && p.core() == Core::Split, "{}", p.describe()),
        Err(e) => assert!(!split_on_tc && e.to_string().contains("split core only"), "{e}"),
    }
    assert!(g.precision(Precision::F32Simt).plan(&gpu).is_err(), "the SIMT core reads no halves");
    // A scale slot past the scale words is an error before anything is recorded.
    let plan = g.plan_split(&gpu).unwrap();
    let (x, w) = (gpu.zeros::<f32>(64 * 64).unwrap(), gpu.zeros::<f32>(64 * 64).unwrap());
    let mut halves = Halves::new(&gpu, 64, 64).unwrap();
    let mut scales = gpu.zeros::<u32>(1).unwrap();
    assert!(halves.split(&gpu, &w, &mut scales, 1).is_err());
    halves.split(&gpu, &w, &mut scales, 0).unwrap();
    let (mut y, mut ws) = (gpu.zeros::<f32>(64 * 64).unwrap(), GemmWorkspace::new(&gpu, &[&plan]).unwrap());
    let bad = Mat::split(&halves, &scales, 1).t();
    let e = gemm::gemm(&gpu, &plan, Mat::f32(&x, 64, 64), bad, None, &mut y, &mut ws).unwrap_err();
    assert!(e.to_string().contains("B's scale word"), "{e}");
    let both = Gemm::new(64, 64, 64).elems(Elem::Split, Elem::Split).b_t(true).plan_split(&gpu).unwrap();
    let mut ws = GemmWorkspace::new(&gpu, &[&both]).unwrap();
    let (good, bad) = (Mat::split(&halves, &scales, 0), Mat::split(&halves, &scales, 1));
    let e = gemm::gemm(&gpu, &both, bad, good.t(), None, &mut y, &mut ws).unwrap_err();
    assert!(e.to_string().contains("A's scale word"), "{e}");
    // Halves take another shape within their buffers, and refuse one past them.
    assert!(halves.set_shape(128, 64).is_err());
    halves.set_shape(32, 100).unwrap();
    assert_eq!((halves.rows(), halves.cols()), (32, 100));
}

#[test]
fn the_plan_follows_the_adapter_and_the_operands() {
    let Some(gpu) = gpu() else { return };
    let tc = tensor_cores(&gpu);
    let split_on_tc = ops::on_tensor_cores(&gpu, &kernels::linear::matmul_t_pres::KERNEL);
    let f32_plan = Gemm::new(64, 64, 64).b_t(true).plan(&gpu).unwrap();
    assert_eq!(f32_plan.core(), if split_on_tc { Core::Split } else { Core::Simt }, "{}", f32_plan.describe());
    if has_f16(&gpu) {
        let p = Gemm::new(64, 64, 64).elems(Elem::F16, Elem::F16).plan(&gpu).unwrap();
        assert!(matches!(p.core(), Core::F16 { tensor_cores, .. } if tensor_cores == tc));
    }
    // Tensor cores off: the portable forms.
    let off = gpu_with(GpuOptions::from_env().cooperative_matrix(false)).unwrap();
    assert_eq!(Gemm::new(64, 64, 64).plan(&off).unwrap().core(), Core::Simt);
    // What no core does is refused at plan time, with the reason.
    let e = Gemm::new(8, 8, 8).elems(Elem::F32, Elem::F16).precision(Precision::F16).plan(&gpu).unwrap_err();
    assert!(e.to_string().contains("f16 operands"), "{e}");
    let e = Gemm::new(8, 8, 8).a_t(true).b_t(true).plan(&gpu).unwrap_err();
    assert!(e.to_string().contains("both operands transposed"), "{e}");
    let bad = F16Config { bk: 48, ..F16Config::default() };
    assert!(Gemm::new(8, 8, 8).elems(Elem::F16, Elem::F16).plan_with(&gpu, bad, 1).is_err());
}

#[test]
fn misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let x = gpu.zeros::<f32>(8 * 4).unwrap();
    let w = gpu.zeros::<f32>(4 * 2).unwrap();
    let mut y = gpu.zeros::<f32>(8 * 2).unwrap();
    let plan = Gemm::new(8, 2, 4).plan(&gpu).unwrap();
    let mut ws = GemmWorkspace::new(&gpu, &[&plan]).unwrap();
    // Operands that do not make the plan's product.
    let e = gemm::gemm(&gpu, &plan, Mat::f32(&x, 4, 8).t(), Mat::f32(&w, 4, 2), None, &mut y, &mut ws).unwrap_err();
    assert!(e.to_string().contains("the plan is for"), "{e}");
    // Short buffers.
    let short = gpu.zeros::<f32>(5).unwrap();
    assert!(gemm::gemm(&gpu, &plan, Mat::f32(&short, 8, 4), Mat::f32(&w, 4, 2), None, &mut y, &mut ws).is_err());
    let mut short_y = gpu.zeros::<f32>(15).unwrap();
    assert!(gemm::gemm(&gpu, &plan, Mat::f32(&x, 8, 4), Mat::f32(&w, 4, 2), None, &mut short_y, &mut ws).is_err());
    // A residual where the epilogue takes none, and none where it does.
    let r = gpu.zeros::<f32>(16).unwrap();
    assert!(gemm::gemm(&gpu, &plan, Mat::f32(&x, 8, 4), Mat::f32(&w, 4, 2), Some(&r), &mut y, &mut ws).is_err());
    let res = Gemm::new(8, 2, 4).epilogue(Epilogue::Residual).plan(&gpu).unwrap();
    assert!(gemm::gemm(&gpu, &res, Mat::f32(&x, 8, 4), Mat::f32(&w, 4, 2), None, &mut y, &mut ws).is_err());
    // A workspace too small for the plan.
    let big = Gemm::new(8, 8, 8192).a_t(true).precision(Precision::F32Simt).plan(&gpu).unwrap();
    assert!(big.scratch_len() > 0);
    let (xa, xb) = (gpu.zeros::<f32>(8192 * 8).unwrap(), gpu.zeros::<f32>(8192 * 8).unwrap());
    let mut y8 = gpu.zeros::<f32>(64).unwrap();
    let e =
        gemm::gemm(&gpu, &big, Mat::f32(&xa, 8192, 8).t(), Mat::f32(&xb, 8192, 8), None, &mut y8, &mut ws).unwrap_err();
    assert!(e.to_string().contains("workspace"), "{e}");
}

/// More workgroups than one grid dimension holds (a tiny limit): the 2-D fallback covers each
/// block once.
#[test]
fn two_d_grid_fallback() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else { return };
    let mut rng = rng("gemm_2d");
    if has_f16(&gpu) {
        let g = Gemm::new(300, 200, 40).elems(Elem::F16, Elem::F16).b_t(true);
        check_plan(&gpu, &mut rng, &g.plan(&gpu).unwrap(), "2-D grid");
    }
    check_plan(&gpu, &mut rng, &Gemm::new(300, 200, 40).b_t(true).plan_split(&gpu).unwrap(), "2-D grid");
}

/// The opt-in autotune: the first choice for a shape is measured and written to the cache file,
/// the next is read from it; a damaged file is ignored and rewritten.
#[test]
fn autotune_caches_its_choice() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("kernels-autotune-{}", std::process::id()));
    let path = dir.join("gemm.txt");
    let _ = std::fs::remove_dir_all(&dir);
    let g = Gemm::new(256, 256, 64).elems(Elem::F16, Elem::F16).b_t(true);
    let first = (F16Config::default_for(tensor_cores(&gpu)), 1);
    let chosen = gemm::autotune::choose_in(&gpu, &g, first, Some(&path));
    assert!(chosen.0.validate(false, true, tensor_cores(&gpu)).is_ok(), "{chosen:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.lines().count() == 2 && text.contains("f16 0 1 256 256 64"), "{text}");
    // A file written before (another process): its choice is taken as it is, not measured.
    let other = F16Config { prefetch: !chosen.0.prefetch, group: chosen.0.group + 1, ..chosen.0 };
    let earlier = dir.join("earlier.txt");
    let line = gemm::table_line(&g, &other, 1);
    std::fs::write(&earlier, format!("{}\n{line}\n", gemm::autotune::header(&gpu))).unwrap();
    assert_eq!(gemm::autotune::choose_in(&gpu, &g, first, Some(&earlier)), (other, 1));
    // A new shape is measured and appended.
    let g2 = Gemm::new(256, 256, 96).elems(Elem::F16, Elem::F16).b_t(true);
    gemm::autotune::choose_in(&gpu, &g2, first, Some(&earlier));
    let text = std::fs::read_to_string(&earlier).unwrap();
    assert!(text.lines().count() == 3 && text.contains(&line), "{text}");
    // A damaged file: ignored, rewritten with a valid header.
    let fresh = dir.join("damaged.txt");
    std::fs::write(&fresh, "\u{0}\u{1}not a cache").unwrap();
    let c = gemm::autotune::choose_in(&gpu, &g, first, Some(&fresh));
    assert!(c.0.validate(false, true, tensor_cores(&gpu)).is_ok());
    assert!(std::fs::read_to_string(&fresh).unwrap().starts_with("# kernels gemm autotune: "));
    let _ = std::fs::remove_dir_all(&dir);
}
