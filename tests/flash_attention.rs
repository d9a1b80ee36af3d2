//! Flash attention (`kernels::flash_attention`: `flash_forward*`, `flash_backward_*`) against
//! float64 references on fresh random inputs, outputs NaN-poisoned first (with a poisoned tail
//! that must stay NaN): the f32 form against the exact reference and against central finite
//! differences of it, the f16 form against a float64 model that rounds where the kernels do;
//! edge shapes (S = 1, S not a multiple of the 64-row blocks, head dims 6 … 256, GQA 12/4 and
//! 12/1), the 2-D grid, determinism, the loss-scaling overflow flag and misuse.

mod common;
#[path = "reference/attention.rs"]
mod reference;

use common::{assert_close, central_differences, check_tail, gpu, gpu_with, poisoned, rel_err, rng, same_bits};
use kernels::flash_attention::{self, Params};
use kernels::ops::F16x4;
use kernels::{Buffer, Error, Gpu, GpuOptions, KernelDef};
use rand::Rng;
use reference::{Inputs, Shape, halves, inputs, shape, upload16};

fn params(sh: Shape, scale: f32) -> Params {
    Params::new(sh.batch as u32, sh.seq as u32, sh.heads as u32, sh.kv_heads as u32, sh.head_dim as u32, scale)
}

fn scale_of(sh: Shape) -> f32 {
    1.0 / (sh.head_dim as f32).sqrt()
}

/// Says which variant of `kernel` runs here (the H200 log shows whether tensor cores ran).
fn report_variant(gpu: &Gpu, kernel: &KernelDef) {
    let v = match gpu.variant_for(kernel) {
        Ok(v) if !v.coop.is_empty() => "tensor-core",
        Ok(_) => "portable",
        Err(_) => "no",
    };
    eprintln!("{}: {v} variant on `{}`", kernel.qualified_name(), gpu.report().name);
}

/// Everything one forward + backward produced (each with its NaN tail).
struct Out {
    o: Vec<f32>,
    lse: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    /// The overflow flag of the f16 backward (0 before the call; 0 for the f32 form).
    flag: u32,
}

impl Out {
    fn check_tails(&self, sh: Shape) {
        for (name, got, len) in [
            ("O", &self.o, sh.q_len()),
            ("lse", &self.lse, sh.rows()),
            ("dQ", &self.dq, sh.q_len()),
            ("dK", &self.dk, sh.kv_len()),
            ("dV", &self.dv, sh.kv_len()),
        ] {
            check_tail(name, got, len);
        }
    }
}

struct Outputs {
    o: Buffer<f32>,
    lse: Buffer<f32>,
    delta: Buffer<f32>,
    dq: Buffer<f32>,
    dk: Buffer<f32>,
    dv: Buffer<f32>,
}

impl Outputs {
    fn poisoned(gpu: &Gpu, sh: Shape) -> Outputs {
        Outputs {
            o: poisoned(gpu, sh.q_len()),
            lse: poisoned(gpu, sh.rows()),
            delta: poisoned(gpu, sh.rows()),
            dq: poisoned(gpu, sh.q_len()),
            dk: poisoned(gpu, sh.kv_len()),
            dv: poisoned(gpu, sh.kv_len()),
        }
    }

    fn read(&self, gpu: &Gpu, sh: Shape, flag: u32) -> Out {
        let r = |b: &Buffer<f32>| b.read(gpu).unwrap();
        check_tail("delta", &r(&self.delta), sh.rows());
        let out = Out { o: r(&self.o), lse: r(&self.lse), dq: r(&self.dq), dk: r(&self.dk), dv: r(&self.dv), flag };
        out.check_tails(sh);
        out
    }
}

/// The f32 forward then backward in one batch (the backward fed the forward's O and lse, as the
/// trainer does).
fn run32(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> Out {
    let p = params(sh, scale);
    let up = |v: &[f32]| gpu.upload(v).unwrap();
    let (q, k, v, d_o) = (up(&x.q), up(&x.k), up(&x.v), up(&x.d_o));
    let mut y = Outputs::poisoned(gpu, sh);
    let batch = gpu.batch();
    flash_attention::forward(&batch, &q, &k, &v, &mut y.o, &mut y.lse, p).unwrap();
    flash_attention::backward(&batch, &q, &k, &v, &y.o, &d_o, &y.lse, &mut y.delta, &mut y.dq, &mut y.dk, &mut y.dv, p)
        .unwrap();
    assert_eq!(batch.dispatches(), 4);
    batch.submit().unwrap();
    y.read(gpu, sh, 0)
}

/// The f16 forward then backward in one batch.
fn run16(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> Out {
    let p = params(sh, scale);
    let dh = sh.head_dim;
    let (q, k, v) = (upload16(gpu, &x.q, dh), upload16(gpu, &x.k, dh), upload16(gpu, &x.v, dh));
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut y = Outputs::poisoned(gpu, sh);
    let mut flag = gpu.zeros::<u32>(1).unwrap();
    // O's and dO's f16 copies, NaN-poisoned (a tail element past each stays NaN).
    let (rows, cols) = (sh.batch * sh.seq, sh.heads * dh);
    let nan16 = [kernels::f16::from_f32(f32::NAN); 4];
    let mut o16 = gpu.upload(&vec![nan16; kernels::ops::f16x4_len(rows, cols) + 1]).unwrap();
    let mut d_o16 = gpu.upload(&vec![nan16; kernels::ops::f16x4_len(rows, cols) + 1]).unwrap();
    let batch = gpu.batch();
    flash_attention::forward16(&batch, &q, &k, &v, &mut y.o, &mut o16, &mut y.lse, p).unwrap();
    flash_attention::backward16(
        &batch,
        &q,
        &k,
        &v,
        &y.o,
        &d_o,
        &mut d_o16,
        &y.lse,
        &mut y.delta,
        &mut flag,
        &mut y.dq,
        &mut y.dk,
        &mut y.dv,
        p,
    )
    .unwrap();
    assert_eq!(batch.dispatches(), 4);
    batch.submit().unwrap();
    let flag = flag.read(gpu).unwrap()[0];
    let out = y.read(gpu, sh, flag);
    // The f16 copy is the bits the cast to the f16x4 layout makes of O.
    let got16 = o16.read(gpu).unwrap();
    let want16 = kernels::ops::to_f16x4(&out.o, rows, cols);
    let bits = |v: &[kernels::ops::F16x4]| v.iter().flatten().map(|h| h.to_bits()).collect::<Vec<u16>>();
    assert_eq!(bits(&got16[..want16.len()]), bits(&want16), "{sh:?}: O's f16 copy");
    assert!(got16[want16.len()].iter().all(|h| h.to_f32().is_nan()), "{sh:?}: O's f16 copy wrote past its end");
    // Δ is the bits of the f32 path's kernel on the same O and dO.
    let mut delta = poisoned(gpu, sh.rows());
    let dp = kernels::backward_attention::attention_fast_delta::Params::new(
        sh.batch as u32,
        sh.seq as u32,
        sh.heads as u32,
        dh as u32,
    );
    kernels::backward_attention::attention_fast_delta(gpu, &y.o, &d_o, &mut delta, dp).unwrap();
    let got_delta = y.delta.read(gpu).unwrap();
    assert!(same_bits(&got_delta[..sh.rows()], &delta.read(gpu).unwrap()[..sh.rows()]), "{sh:?}: Δ");
    // dO's copy is the bits the gradient cast makes (the products read it).
    let got16 = d_o16.read(gpu).unwrap();
    let want16 = kernels::ops::to_f16x4(&x.d_o, rows, cols);
    assert_eq!(bits(&got16[..want16.len()]), bits(&want16), "{sh:?}: dO's f16 copy");
    assert!(got16[want16.len()].iter().all(|h| h.to_f32().is_nan()), "{sh:?}: dO's f16 copy wrote past its end");
    out
}

/// The f32 form against the float64 reference: O, lse, dQ, dK, dV. f32 sums over at most a few
/// thousand terms of O(1) values: ≈ 1e-7 relative, so 1e-5 (the streaming kernels' bound) leaves
/// a factor of 100 and still fails a wrong mask, head, block or rescale.
fn check32(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) {
    let t = std::time::Instant::now();
    let got = run32(gpu, x, sh, scale);
    let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
    let (want_dq, want_dk, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
    assert_close(&format!("O {sh:?}"), &got.o[..sh.q_len()], &want_o, 1e-5);
    assert_close(&format!("lse {sh:?}"), &got.lse[..sh.rows()], &want_lse, 1e-5);
    assert_close(&format!("dQ {sh:?}"), &got.dq[..sh.q_len()], &want_dq, 1e-5);
    assert_close(&format!("dK {sh:?}"), &got.dk[..sh.kv_len()], &want_dk, 1e-5);
    assert_close(&format!("dV {sh:?}"), &got.dv[..sh.kv_len()], &want_dv, 1e-5);
    eprintln!("flash f32 {sh:?}: {:?}", t.elapsed());
}

#[test]
fn f32_matches_reference() {
    let Some(gpu) = gpu() else { return };
    report_variant(&gpu, &kernels::attention::flash_forward::KERNEL);
    let mut rng = rng("flash attention f32");
    // (batch, seq, heads, kv_heads, head_dim): S = 1, 7, 65, 130, 200 (partial blocks of 64
    // rows), 64 (one whole block); GQA 12/4 and 12/1, 4/2, none; head dims 6 (a partial vec4),
    // 32, 64, 80, 100, 128 and 256 (four 64-wide chunks).
    let cases = [
        shape(1, 1, 12, 4, 64),
        shape(2, 7, 12, 1, 32),
        shape(1, 65, 4, 2, 80),
        shape(1, 130, 2, 2, 128),
        shape(1, 200, 12, 4, 32),
        shape(1, 64, 2, 1, 256),
        shape(1, 33, 2, 2, 100),
        shape(2, 40, 2, 1, 6),
    ];
    for sh in cases {
        let x = inputs(&mut rng, sh);
        check32(&gpu, &x, sh, scale_of(sh));
    }
}

#[test]
fn f32_sharp_softmax() {
    // Scores spread over ±60: the running maximum grows across key blocks and most weights
    // underflow; the rescale of O and of the row sums must keep everything exact.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("flash attention f32 sharp");
    let sh = shape(1, 200, 2, 1, 64);
    let x = inputs(&mut rng, sh);
    check32(&gpu, &x, sh, 8.0 / 8.0);
}

#[test]
fn f32_gradients_match_finite_differences() {
    // The backward's dQ, dK, dV against central differences of the float64 reference forward's
    // loss L = Σ dO ⊙ O at 24 sampled coordinates of each. h = 1e-2 on O(1) inputs: the
    // truncation error is O(h²·L''') ≈ 1e-4 relative, the f32 rounding of the perturbed input
    // ≈ 1e-5; the GPU's gradients are ≈ 1e-6 from exact. 2e-3 leaves ample margin and fails a
    // gradient off by a scale, a sign or a missing term.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("flash attention finite differences");
    for sh in [shape(1, 70, 4, 2, 16), shape(1, 9, 3, 1, 8)] {
        let x = inputs(&mut rng, sh);
        let scale = scale_of(sh);
        let got = run32(&gpu, &x, sh, scale);
        let loss = |q: &[f32], k: &[f32], v: &[f32]| {
            let (o, _) = reference::attention_forward(q, k, v, sh, scale as f64);
            o.iter().zip(&x.d_o).map(|(a, &b)| a * b as f64).sum::<f64>()
        };
        let h = 1e-2f32;
        let (an, fd) = central_differences(&mut rng, &x.q, &got.dq[..sh.q_len()], h, 24, |q| loss(q, &x.k, &x.v));
        let e = rel_err(&an, &fd);
        assert!(e < 2e-3, "dQ {sh:?} vs finite differences: {e:e}");
        let (an, fd) = central_differences(&mut rng, &x.k, &got.dk[..sh.kv_len()], h, 24, |k| loss(&x.q, k, &x.v));
        let e = rel_err(&an, &fd);
        assert!(e < 2e-3, "dK {sh:?} vs finite differences: {e:e}");
        let (an, fd) = central_differences(&mut rng, &x.v, &got.dv[..sh.kv_len()], h, 24, |v| loss(&x.q, &x.k, v));
        let e = rel_err(&an, &fd);
        assert!(e < 2e-3, "dV {sh:?} vs finite differences: {e:e}");
    }
}

#[test]
fn f32_is_deterministic() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("flash attention f32 determinism");
    let sh = shape(2, 100, 4, 2, 48);
    let x = inputs(&mut rng, sh);
    let (a, b) = (run32(&gpu, &x, sh, 0.2), run32(&gpu, &x, sh, 0.2));
    for (name, u, w) in [("O", &a.o, &b.o), ("lse", &a.lse, &b.lse), ("dQ", &a.dq, &b.dq), ("dK", &a.dk, &b.dk)] {
        assert!(same_bits(u, w), "{name} differs run to run");
    }
    assert!(same_bits(&a.dv, &b.dv), "dV differs run to run");
}

#[test]
fn on_the_2d_grid() {
    // At most 10 workgroups per grid dimension: every kernel runs on a 2-D grid (the fallback
    // past 65535 on real devices: B·H·⌈S/64⌉ = 72 forward, B·Hkv·⌈S/64⌉ = 24 key-major), with
    // surplus workgroups that must write nothing.
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(10)) else { return };
    assert_eq!(gpu.report().max_workgroups_per_dimension, 10);
    let mut rng = rng("flash attention 2-D grid");
    let sh = shape(2, 130, 12, 4, 32);
    let x = inputs(&mut rng, sh);
    check32(&gpu, &x, sh, scale_of(sh));
    if common::has_f16(&gpu, "flash attention f16 on the 2-D grid") {
        check16(&gpu, &x, sh, scale_of(sh));
    }
}

/// x rounded to f16 as the kernels round P and dS (f32 → f16, to nearest even, subnormals
/// included), back in f64.
fn r16(x: f64) -> f64 {
    kernels::f16::from_f32(x as f32).to_f64()
}

/// How the f16 forward that runs rounds P (`flash_attention::forward16_form`): keys walked in
/// steps of `step`, P = exp(s − m_ref) rounded to f16, where a row's reference m_ref is its first
/// step's maximum and then moves — for every row of the 64-query block at once, to max(m_ref,
/// the step's maximum) — only at a step where some row's maximum passes its m_ref by more than
/// `tau`. The sliced kernel takes the running maximum at every block of 64 keys (τ = 0 gives
/// exactly that), the tensor-core one steps of 32 keys and τ = 8.
#[derive(Clone, Copy, Debug)]
struct ForwardRule {
    step: usize,
    tau: f64,
}

fn forward_rule(gpu: &Gpu, sh: Shape) -> ForwardRule {
    match flash_attention::forward16_form(gpu, &params(sh, scale_of(sh))) {
        flash_attention::Flash16Form::Sliced => ForwardRule { step: 64, tau: 0.0 },
        flash_attention::Flash16Form::TensorCores => ForwardRule { step: 32, tau: 8.0 },
    }
}

/// The float64 model of the f16 form. Operands: `x16` holds Q, K, V, dO rounded to f16. The
/// forward rounds P where the kernel does (`ForwardRule`: each step's part of O is rescaled by
/// exp(m_ref − m_final) afterwards), ℓ from the unrounded P. The backward is modelled on the
/// lse and O the GPU gave it (as the trainer feeds them): P = exp(scale·s − lse),
/// Δ = rowsum(dO ⊙ O) from the f32 dO, dS = P ⊙ (dO·Vᵀ − Δ), and P, dS rounded to f16 for
/// dV = Pᵀ·dO, dK = scale·dSᵀ·Q, dQ = scale·dS·K.
struct Model16 {
    o: Vec<f64>,
    lse: Vec<f64>,
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
    /// The largest |dS|.
    ds_max: f64,
}

fn model16(x16: &Inputs, d_o32: &[f32], got: &Out, sh: Shape, scale: f64, rule: ForwardRule) -> Model16 {
    let (s_len, dh) = (sh.seq, sh.head_dim);
    let q_at = |b: usize, s: usize, h: usize| ((b * s_len + s) * sh.heads + h) * dh;
    let kv_at = |b: usize, s: usize, h: usize| ((b * s_len + s) * sh.kv_heads + h) * dh;
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>();
    let mut r = Model16 {
        o: vec![0.0; sh.q_len()],
        lse: vec![0.0; sh.rows()],
        dq: vec![0.0; sh.q_len()],
        dk: vec![0.0; sh.kv_len()],
        dv: vec![0.0; sh.kv_len()],
        ds_max: 0.0,
    };
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let kvh = h / (sh.heads / sh.kv_heads);
            let scores: Vec<Vec<f64>> = (0..s_len)
                .map(|s| {
                    let qa = q_at(b, s, h);
                    (0..=s).map(|j| scale * dot(&x16.q[qa..qa + dh], &x16.k[kv_at(b, j, kvh)..][..dh])).collect()
                })
                .collect();
            // The forward, a block of 64 queries at a time (the rows that share the decisions).
            for q0 in (0..s_len).step_by(64) {
                let rows = q0..s_len.min(q0 + 64);
                let kend = rows.end;
                let mut m_ref = vec![f64::NEG_INFINITY; rows.len()];
                let final_m: Vec<f64> =
                    rows.clone().map(|s| scores[s].iter().copied().fold(f64::NEG_INFINITY, f64::max)).collect();
                let l: Vec<f64> =
                    rows.clone().map(|s| scores[s].iter().map(|x| (x - final_m[s - q0]).exp()).sum()).collect();
                for k0 in (0..kend).step_by(rule.step) {
                    let keys = k0..kend.min(k0 + rule.step);
                    // Each row's maximum over its keys of this step (none past the row).
                    let mx: Vec<f64> = rows
                        .clone()
                        .map(|s| {
                            scores[s][keys.start.min(s + 1)..keys.end.min(s + 1)]
                                .iter()
                                .copied()
                                .fold(f64::NEG_INFINITY, f64::max)
                        })
                        .collect();
                    if k0 == 0 {
                        m_ref.clone_from(&mx);
                    } else if mx.iter().zip(&m_ref).any(|(&x, &m)| x > m + rule.tau) {
                        for (m, &x) in m_ref.iter_mut().zip(&mx) {
                            *m = m.max(x);
                        }
                    }
                    for s in rows.clone() {
                        let (i, qa) = (s - q0, q_at(b, s, h));
                        let end = keys.end.min(s + 1);
                        for (j, &x) in scores[s].iter().enumerate().take(end).skip(keys.start) {
                            let w = r16((x - m_ref[i]).exp()) * (m_ref[i] - final_m[i]).exp() / l[i];
                            let ka = kv_at(b, j, kvh);
                            for d in 0..dh {
                                r.o[qa + d] += w * x16.v[ka + d] as f64;
                            }
                        }
                    }
                }
                for s in rows.clone() {
                    let i = s - q0;
                    r.lse[(b * sh.heads + h) * s_len + s] = final_m[i] + l[i].ln();
                }
            }
            for (s, scores) in scores.iter().enumerate() {
                let row = (b * sh.heads + h) * s_len + s;
                let qa = q_at(b, s, h);
                // The backward, from the GPU's lse and O.
                let lse = got.lse[row] as f64;
                let delta: f64 = (0..dh).map(|d| d_o32[qa + d] as f64 * got.o[qa + d] as f64).sum();
                for (j, x) in scores.iter().enumerate() {
                    let ka = kv_at(b, j, kvh);
                    let pj = (x - lse).exp();
                    let dp = dot(&x16.d_o[qa..qa + dh], &x16.v[ka..ka + dh]);
                    let ds = pj * (dp - delta);
                    r.ds_max = r.ds_max.max(ds.abs());
                    let (p16, ds16) = (r16(pj), r16(ds));
                    for d in 0..dh {
                        r.dv[ka + d] += p16 * x16.d_o[qa + d] as f64;
                        r.dq[qa + d] += scale * ds16 * x16.k[ka + d] as f64;
                        r.dk[ka + d] += scale * ds16 * x16.q[qa + d] as f64;
                    }
                }
            }
        }
    }
    r
}

/// Relative error bound of the f16 form against its float64 model. What the model leaves is
/// f32 arithmetic (scores, exponentials, sums: ≈ 1e-7 relative) and, above it, the P and dS
/// whose f32 value and float64 value lie on two sides of an f16 rounding boundary: their scores
/// differ by the f32 sums' rounding (≈ 1e-6 absolute at Dh = 128), so about 2·1e-6 / 2⁻¹¹ ≈ 0.4%
/// of them round one f16 ulp (≈ 5e-4 of the element) away from the model's, ≈ √0.004 · 5e-4 ≈
/// 3e-5 relative on the sums (measured on lavapipe: 1e-7 … 7e-5, largest for dQ and dK at
/// Dh = 128, where dS = P ⊙ (dP − Δ) cancels most). 2e-4 leaves a factor ~3, and a wrong mask,
/// head, block, scale or operand gives errors of 1e-2 and more.
const TOL16: f64 = 2e-4;

fn check16(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) {
    let t = std::time::Instant::now();
    let x16 = Inputs { q: halves(&x.q), k: halves(&x.k), v: halves(&x.v), d_o: halves(&x.d_o) };
    let got = run16(gpu, x, sh, scale);
    assert_eq!(got.flag, 0, "{sh:?}: the overflow flag was raised, every dS being far inside f16's range");
    let want = model16(&x16, &x.d_o, &got, sh, scale as f64, forward_rule(gpu, sh));
    let (o32, _) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
    let (dq32, dk32, dv32) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
    let (n, kv) = (sh.q_len(), sh.kv_len());
    // (name, the GPU's, the model's, the unrounded reference's)
    type Pair<'a> = (&'a str, &'a [f32], &'a [f64], Option<&'a Vec<f64>>);
    let pairs: [Pair<'_>; 5] = [
        ("O", &got.o[..n], &want.o, Some(&o32)),
        ("lse", &got.lse[..sh.rows()], &want.lse, None),
        ("dQ", &got.dq[..n], &want.dq, Some(&dq32)),
        ("dK", &got.dk[..kv], &want.dk, Some(&dk32)),
        ("dV", &got.dv[..kv], &want.dv, Some(&dv32)),
    ];
    for (name, g, w, unrounded) in pairs {
        let e = rel_err(g, w);
        let e32 = unrounded.map_or(f64::NAN, |r| rel_err(g, r));
        eprintln!("flash f16 {sh:?} {name}: {e:.2e} vs the f16 model, {e32:.2e} vs the unrounded reference");
        if sh.seq == 1 && (name == "dQ" || name == "dK") {
            // One key: softmax is constant, dQ = dK = 0 exactly, and what the f16 form computes
            // is the cancellation of dP − Δ with dO rounded to f16 in dP only (≈ 1e-3 of dP):
            // noise, checked to be small against dV's scale instead.
            let norm = |v: &[f32]| v.iter().map(|&a| (a as f64).powi(2)).sum::<f64>().sqrt();
            let small = norm(g) / norm(&got.dv[..kv]);
            assert!(small < 1e-2, "flash f16 {name} {sh:?}: |{name}| / |dV| = {small:e}, expected noise near 0");
            continue;
        }
        assert!(e < TOL16, "flash f16 {name} {sh:?}: relative error {e:e} ≥ {TOL16:e}");
    }
    eprintln!("flash f16 {sh:?}: {:?}", t.elapsed());
}

#[test]
fn f16_matches_float64_model() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "f16_matches_float64_model") {
        return;
    }
    for k in [
        &kernels::attention::flash_forward16::KERNEL,
        &kernels::attention::flash_forward16_tc::KERNEL,
        &kernels::backward_attention::flash_backward_dkdv16::KERNEL,
        &kernels::backward_attention::flash_backward_dq16::KERNEL,
        &kernels::backward_attention::flash_backward_dkdv16_tc::KERNEL,
        &kernels::backward_attention::flash_backward_dq16_tc::KERNEL,
    ] {
        report_variant(&gpu, k);
    }
    let form = |sh: Shape| flash_attention::backward16_form(&gpu, &params(sh, scale_of(sh)));
    eprintln!("backward at head dim 64: {:?}", form(shape(1, 1, 1, 1, 64)));
    eprintln!("forward at head dim 64: {:?}", forward_rule(&gpu, shape(1, 1, 1, 1, 64)));
    let mut rng = rng("flash attention f16");
    // Head dims 16, 32, 48, 64 (the tensor-core kernels' range where they run), 80, 128 (the
    // sliced tensor-core path's) and 256 (the portable products inside the tensor-core
    // variant); S = 1, 7, 65, 130, 161, 200 (steps of 32 across 64-key blocks) and 256 (rows
    // read without bounds tests where the tensor-core kernels run); GQA 12/4, 12/1, 4/2.
    let cases = [
        shape(1, 1, 12, 4, 64),
        shape(2, 256, 4, 2, 64),
        shape(2, 161, 4, 2, 48),
        shape(2, 7, 12, 1, 32),
        shape(1, 65, 4, 2, 80),
        shape(1, 130, 2, 2, 128),
        shape(1, 200, 4, 1, 16),
        shape(1, 64, 2, 1, 256),
    ];
    for sh in cases {
        let x = inputs(&mut rng, sh);
        check16(&gpu, &x, sh, scale_of(sh));
    }
}

#[test]
fn f16_sharp_softmax() {
    // Scores spread over ±60 (scale 1): row maxima grow by more than e^8 from step to step in
    // most blocks, so the tensor-core forward moves its reference and rescales O many times, and
    // a single weight carries most of a row. Checked against the unrounded float64 reference
    // on the same f16 operands, by what rounding allows: each weight is rounded to f16 once
    // (relative 2⁻¹¹, whatever its reference), and each score is an f32 sum of 64 exact
    // products, |Δs| ≤ 64 · 2 · 2⁻²⁴ · Σ|q_d·k_d| ≤ 2e-3 here (|q_d|, |k_d| ≤ 2; twice the
    // round-to-nearest bound, for accumulators that truncate), which moves a normalised weight
    // by at most 2|Δs| relative. So |O − O_ref| ≤ (2⁻¹¹ + 4e-3) · Σ_j p_j |v_j| and
    // |lse − lse_ref| ≤ 2e-3 plus f32 rounding. A lost rescale or a wrong reference is off by a
    // factor of e^8 or more, a wrong mask by O(1).
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "f16_sharp_softmax") {
        return;
    }
    let mut rng = rng("flash attention f16 sharp");
    for sh in [shape(1, 200, 2, 1, 64), shape(2, 130, 4, 2, 32)] {
        let x = inputs(&mut rng, sh);
        let got = run16(&gpu, &x, sh, 1.0);
        let x16 = Inputs { q: halves(&x.q), k: halves(&x.k), v: halves(&x.v), d_o: halves(&x.d_o) };
        let (o, lse) = reference::attention_forward(&x16.q, &x16.k, &x16.v, sh, 1.0);
        let abs_v: Vec<f32> = x16.v.iter().map(|a| a.abs()).collect();
        let (weight, _) = reference::attention_forward(&x16.q, &x16.k, &abs_v, sh, 1.0);
        let (u16, ds) = (2f64.powi(-11), 2e-3);
        let mut worst = 0.0f64;
        for (i, (&g, (&w, &bound))) in got.o.iter().zip(o.iter().zip(&weight)).enumerate() {
            let allowed = (u16 + 2.0 * ds) * bound + 1e-6;
            let e = (g as f64 - w).abs();
            assert!(e <= allowed, "flash f16 sharp {sh:?}: O[{i}] = {g}, reference {w}: {e:e} > {allowed:e}");
            worst = worst.max(e / allowed);
        }
        for (i, (&g, &w)) in got.lse.iter().zip(&lse).enumerate() {
            let allowed = ds + 1e-6 * w.abs();
            assert!((g as f64 - w).abs() <= allowed, "flash f16 sharp {sh:?}: lse[{i}] = {g}, reference {w}");
        }
        eprintln!("flash f16 sharp {sh:?}: O within {worst:.2} of its rounding bound");
    }
}

#[test]
fn f16_is_deterministic() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "f16_is_deterministic") {
        return;
    }
    let mut rng = rng("flash attention f16 determinism");
    let sh = shape(1, 150, 4, 2, 64);
    let x = inputs(&mut rng, sh);
    let (a, b) = (run16(&gpu, &x, sh, 0.125), run16(&gpu, &x, sh, 0.125));
    for (name, u, w) in [("O", &a.o, &b.o), ("lse", &a.lse, &b.lse), ("dQ", &a.dq, &b.dq), ("dK", &a.dk, &b.dk)] {
        assert!(same_bits(u, w), "{name} differs run to run");
    }
    assert!(same_bits(&a.dv, &b.dv), "dV differs run to run");
}

#[test]
fn f16_ds_overflow_raises_the_flag() {
    // V and dO of magnitude up to 1000 (exact enough in f16): dP = dO·V reaches ~1e6, so some
    // dS = P ⊙ (dP − Δ) lie beyond ±65504, where their f16 rounding would clamp them: the flag
    // is raised (loss scaling then skips the step). Unscaled inputs leave it at 0 (checked by
    // every `check16` too).
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "f16_ds_overflow_raises_the_flag") {
        return;
    }
    let mut rng = rng("flash attention f16 overflow");
    let sh = shape(1, 40, 2, 1, 16);
    let mut x = inputs(&mut rng, sh);
    assert_eq!(run16(&gpu, &x, sh, 0.25).flag, 0);
    for a in x.v.iter_mut().chain(x.d_o.iter_mut()) {
        *a *= 1000.0;
    }
    let x16 = Inputs { q: halves(&x.q), k: halves(&x.k), v: halves(&x.v), d_o: halves(&x.d_o) };
    let got = run16(&gpu, &x, sh, 0.25);
    let want = model16(&x16, &x.d_o, &got, sh, 0.25, forward_rule(&gpu, sh));
    assert!(want.ds_max > 65504.0 * 1.5, "the test's dS stay inside f16's range (largest {})", want.ds_max);
    assert_eq!(got.flag, 1, "dS up to {} did not raise the overflow flag", want.ds_max);
}

#[test]
fn f16_do_overflow_raises_the_flag() {
    // One value of dO beyond f16's range (a loss scale too large for the upstream gradient):
    // its f16 copy clamps it, and the flag is raised; every other value is left as it was.
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "f16_do_overflow_raises_the_flag") {
        return;
    }
    let mut rng = rng("flash attention f16 dO overflow");
    let sh = shape(1, 9, 2, 1, 16);
    let mut x = inputs(&mut rng, sh);
    let at = rng.random_range(0..x.d_o.len());
    x.d_o[at] = if at % 2 == 0 { 70000.0 } else { -1.0e6 };
    assert_eq!(run16(&gpu, &x, sh, 0.25).flag, 1, "dO[{at}] = {} did not raise the overflow flag", x.d_o[at]);
}

/// The tensor-core kernels called directly with `FL_EXACT` = `exact`: (O, lse, dQ, dK, dV), each
/// with its NaN tail.
fn run16_tc(gpu: &Gpu, x: &Inputs, sh: Shape, exact: bool) -> [Vec<f32>; 5] {
    use kernels::attention::flash_forward16_tc as fwd;
    use kernels::backward_attention::{
        attention_delta_cast16 as delta16, flash_backward_dkdv16_tc as dkdv, flash_backward_dq16_tc as dq,
    };
    let (b, s, h, hkv, dh) = (sh.batch as u32, sh.seq as u32, sh.heads as u32, sh.kv_heads as u32, sh.head_dim as u32);
    let scale = scale_of(sh);
    let (q, k, v) =
        (upload16(gpu, &x.q, sh.head_dim), upload16(gpu, &x.k, sh.head_dim), upload16(gpu, &x.v, sh.head_dim));
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut y = Outputs::poisoned(gpu, sh);
    let len16 = kernels::ops::f16x4_len(sh.batch * sh.seq, sh.heads * sh.head_dim);
    let mut o16 = gpu.zeros::<F16x4>(len16).unwrap();
    let mut d_o16 = gpu.zeros::<F16x4>(len16).unwrap();
    let mut flag = gpu.zeros::<u32>(1).unwrap();
    let batch = gpu.batch();
    let ov = fwd::Overrides { FL_DH: Some(dh), FL_EXACT: Some(exact) };
    fwd(&batch, &q, &k, &v, &mut y.o, &mut y.lse, &mut o16, fwd::Params::new(b, s, h, hkv, dh, scale), ov).unwrap();
    let dp = delta16::Params::new(b, s, h, dh);
    delta16(&batch, &y.o, &d_o, &mut d_o16, &mut y.delta, &mut flag, dp).unwrap();
    let ko = dkdv::Overrides { FL_DH: Some(dh), FL_EXACT: Some(exact) };
    let kp = dkdv::Params::new(b, s, h, hkv, dh, scale);
    dkdv(&batch, &q, &k, &v, &d_o16, &y.lse, &y.delta, &mut y.dk, &mut y.dv, &mut flag, kp, ko).unwrap();
    let qo = dq::Overrides { FL_DH: Some(dh), FL_EXACT: Some(exact) };
    dq(&batch, &q, &k, &v, &d_o16, &y.lse, &y.delta, &mut y.dq, dq::Params::new(b, s, h, hkv, dh, scale), qo).unwrap();
    batch.submit().unwrap();
    let r = |v: &Buffer<f32>| v.read(gpu).unwrap();
    [r(&y.o), r(&y.lse), r(&y.dq), r(&y.dk), r(&y.dv)]
}

#[test]
fn exact_rows_give_the_bounds_tested_bits() {
    // Where S is a multiple of 64 and the head dim 64, the tensor-core kernels read their rows
    // without bounds tests (`FL_EXACT`, what `flash_attention` records there): the same values
    // reach the same sums, so every output has the bits of the bounds-tested reads. S = 128 and
    // 192 (GQA 4/2, three 64-row blocks). A call with `FL_EXACT` at another S gets NaN rather
    // than reads past the rows.
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "exact_rows_give_the_bounds_tested_bits") {
        return;
    }
    let tc = |sh: Shape| {
        let p = params(sh, scale_of(sh));
        flash_attention::forward16_form(&gpu, &p) == flash_attention::Flash16Form::TensorCores
            && flash_attention::backward16_form(&gpu, &p) == flash_attention::Flash16Form::TensorCores
    };
    if !tc(shape(1, 128, 2, 1, 64)) {
        eprintln!(
            "exact_rows_give_the_bounds_tested_bits: the tensor-core kernels do not run on `{}` (their portable form is tested by the other tests)",
            gpu.report().name
        );
        return;
    }
    let mut rng = rng("flash attention exact rows");
    let names = ["O", "lse", "dQ", "dK", "dV"];
    for sh in [shape(1, 128, 2, 1, 64), shape(2, 192, 4, 2, 64)] {
        let x = inputs(&mut rng, sh);
        let lens = [sh.q_len(), sh.rows(), sh.q_len(), sh.kv_len(), sh.kv_len()];
        let tested = run16_tc(&gpu, &x, sh, false);
        let exact = run16_tc(&gpu, &x, sh, true);
        for ((name, len), (t, e)) in names.iter().zip(lens).zip(tested.iter().zip(&exact)) {
            assert!(t[..len].iter().all(|v| v.is_finite()), "{sh:?}: {name} of the bounds-tested reads is not finite");
            assert!(same_bits(t, e), "{sh:?}: {name} read without bounds tests differs");
        }
        eprintln!("flash f16 exact rows {sh:?}: the bounds-tested reads' bits");
    }
    let sh = shape(1, 130, 2, 1, 64);
    let wrong = run16_tc(&gpu, &inputs(&mut rng, sh), sh, true);
    for (i, len) in [(0, sh.q_len()), (2, sh.q_len()), (3, sh.kv_len()), (4, sh.kv_len())] {
        assert!(
            wrong[i][..len].iter().all(|v| v.is_nan()),
            "{sh:?}: {} with FL_EXACT at S = 130 is not all NaN",
            names[i]
        );
    }
}

#[test]
fn misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let sh = shape(1, 8, 4, 2, 16);
    let z = |n: usize| gpu.zeros::<f32>(n).unwrap();
    let (q, k, v) = (z(sh.q_len()), z(sh.kv_len()), z(sh.kv_len()));
    let short = z(sh.kv_len() - 1);
    let (mut o, mut lse) = (z(sh.q_len()), z(sh.rows()));
    let p = params(sh, 0.25);
    let batch = gpu.batch();
    let e = flash_attention::forward(&batch, &q, &short, &v, &mut o, &mut lse, p).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }) && e.to_string().contains("`k`"), "{e}");
    for (dh, what) in [(0, "head_dim"), (257, "head_dim <= 256")] {
        let e = flash_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, params(shape(1, 8, 4, 2, dh), 0.25))
            .unwrap_err();
        assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains(what), "{e}");
    }
    let e = flash_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, params(shape(1, 8, 4, 3, 16), 0.25))
        .unwrap_err();
    assert!(e.to_string().contains("heads % kv_heads"), "{e}");
    let mut delta = z(sh.rows() - 1);
    let (mut dq, mut dk, mut dv) = (z(sh.q_len()), z(sh.kv_len()), z(sh.kv_len()));
    let e = flash_attention::backward(&batch, &q, &k, &v, &o, &q, &lse, &mut delta, &mut dq, &mut dk, &mut dv, p)
        .unwrap_err();
    assert!(e.to_string().contains("delta"), "{e}");
    if gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        // f16 operands are whole vec4s: Dh % 4 == 0.
        let sh6 = shape(1, 8, 4, 2, 6);
        let h = |n: usize| gpu.zeros::<F16x4>(n).unwrap();
        let (q16, k16) = (h(sh6.q_len()), h(sh6.kv_len()));
        let mut o16 = h(sh6.q_len());
        let e = flash_attention::forward16(&batch, &q16, &k16, &k16, &mut o, &mut o16, &mut lse, params(sh6, 0.25))
            .unwrap_err();
        assert!(e.to_string().contains("head_dim % 4"), "{e}");
    }
    // On a CPU adapter (lavapipe stops loops past 65535 iterations per invocation), a key-major
    // walk too long for it is refused rather than computed wrong; elsewhere it runs.
    let long = Params::new(1, 16_384, 12, 1, 64, 0.125);
    assert_eq!(long.flash_fits(&gpu, false), gpu.report().device_type != "Cpu");
    assert!(Params::new(1, 2048, 12, 1, 64, 0.125).flash_fits(&gpu, false));
    assert_eq!(batch.dispatches(), 0, "a failed call recorded work");
    batch.submit().unwrap();
}
