//! The fast attention path (`kernels::fast_attention`: the `attention_fast_*` kernels over a
//! materialised probability workspace) against the float64 references and against the
//! streaming kernels (`attention_forward`, `attention_backward_dq` / `_dkdv`); P's row
//! contract; central finite differences of the fast forward; determinism; NaN-poisoned outputs
//! and workspaces; misuse.

mod common;
#[path = "reference/attention.rs"]
mod reference;

use common::{assert_close, central_differences, check_tail, gpu, gpu_with, poisoned, rel_err, rng, same_bits};
use kernels::attention::{attention_fast_scores, attention_forward};
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq};
use kernels::fast_attention::{self, Params};
use kernels::{Buffer, Error, Gpu, GpuOptions};
use reference::{Inputs, Shape, halves, inputs, shape, upload16};

fn params(sh: Shape, scale: f32) -> Params {
    Params::new(sh.batch as u32, sh.seq as u32, sh.heads as u32, sh.kv_heads as u32, sh.head_dim as u32, scale)
}

fn to64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&a| a as f64).collect()
}

/// Everything the fast path produced (each with its NaN tail).
struct Fast {
    o: Vec<f32>,
    lse: Vec<f32>,
    /// P after the forward.
    probs: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
}

/// The fast forward and backward in one batch, every output and workspace NaN-poisoned
/// first; P is read back from a copy taken between the two.
fn run_fast(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> Fast {
    let p = params(sh, scale);
    let ws = p.workspace_sizes();
    let q = gpu.upload(&x.q).unwrap();
    let k = gpu.upload(&x.k).unwrap();
    let v = gpu.upload(&x.v).unwrap();
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut o = poisoned(gpu, sh.q_len());
    let mut lse = poisoned(gpu, sh.rows());
    let mut probs = poisoned(gpu, ws.probs);
    let mut probs_copy = poisoned(gpu, ws.probs);
    let mut delta = poisoned(gpu, ws.delta);
    let mut dq = poisoned(gpu, sh.q_len());
    let mut dk = poisoned(gpu, sh.kv_len());
    let mut dv = poisoned(gpu, sh.kv_len());
    let batch = gpu.batch();
    fast_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, &mut probs, p).unwrap();
    batch.copy(&probs, &mut probs_copy).unwrap();
    fast_attention::backward(&batch, &q, &k, &v, &o, &d_o, &mut probs, &mut delta, &mut dq, &mut dk, &mut dv, p)
        .unwrap();
    batch.submit().unwrap();
    let r = |b: &Buffer<f32>| b.read(gpu).unwrap();
    let delta = r(&delta);
    check_tail("delta", &delta, ws.delta);
    check_tail("probs (dS)", &r(&probs), ws.probs);
    Fast { o: r(&o), lse: r(&lse), probs: r(&probs_copy), dq: r(&dq), dk: r(&dk), dv: r(&dv) }
}

/// The streaming kernels' (O, lse, dQ, dK, dV).
fn run_streaming(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> [Vec<f32>; 5] {
    let (b, s, h, hkv, dh) = (sh.batch as u32, sh.seq as u32, sh.heads as u32, sh.kv_heads as u32, sh.head_dim as u32);
    let q = gpu.upload(&x.q).unwrap();
    let k = gpu.upload(&x.k).unwrap();
    let v = gpu.upload(&x.v).unwrap();
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut o = gpu.zeros(sh.q_len()).unwrap();
    let mut lse = gpu.zeros(sh.rows()).unwrap();
    let mut delta = gpu.zeros(sh.rows()).unwrap();
    let mut dq = gpu.zeros(sh.q_len()).unwrap();
    let mut dk = gpu.zeros(sh.kv_len()).unwrap();
    let mut dv = gpu.zeros(sh.kv_len()).unwrap();
    let batch = gpu.batch();
    let fp = attention_forward::Params::new(b, s, h, hkv, dh, scale);
    attention_forward(&batch, &q, &k, &v, &mut o, &mut lse, fp).unwrap();
    let p = kernels::backward_attention::attention_backward_dq::Params::new(b, s, h, hkv, dh, scale);
    attention_backward_dq(&batch, &q, &k, &v, &o, &d_o, &lse, &mut dq, &mut delta, p).unwrap();
    let p = kernels::backward_attention::attention_backward_dkdv::Params::new(b, s, h, hkv, dh, scale);
    attention_backward_dkdv(&batch, &q, &k, &v, &d_o, &lse, &delta, &mut dk, &mut dv, p).unwrap();
    batch.submit().unwrap();
    [o, lse, dq, dk, dv].map(|b| b.read(gpu).unwrap())
}

/// P's contract: row s holds exp(scale·q·k_j − lse) for j ≤ s and zeros up to the end of its
/// 64-key tile (entries further right are never written: they keep the NaN poison).
fn check_probs(sh: Shape, x: &Inputs, scale: f64, probs: &[f32], want_lse: &[f64]) {
    let (s_len, dh) = (sh.seq, sh.head_dim);
    let mut got = Vec::new();
    let mut want = Vec::new();
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let kvh = h / (sh.heads / sh.kv_heads);
            for s in 0..s_len {
                let row = (b * sh.heads + h) * s_len + s;
                let tile_end = s_len.min((s / 64 + 1) * 64);
                let qa = ((b * s_len + s) * sh.heads + h) * dh;
                for j in 0..s_len {
                    let pj = probs[row * s_len + j];
                    if j <= s {
                        let ka = ((b * s_len + j) * sh.kv_heads + kvh) * dh;
                        let dot: f64 = (0..dh).map(|d| x.q[qa + d] as f64 * x.k[ka + d] as f64).sum();
                        got.push(pj);
                        want.push((scale * dot - want_lse[row]).exp());
                    } else if j < tile_end {
                        assert_eq!(pj, 0.0, "P {sh:?} row {row} key {j}: not zero above the diagonal");
                    } else {
                        assert!(pj.is_nan(), "P {sh:?} row {row} key {j}: written past its tile");
                    }
                }
            }
        }
    }
    assert_close(&format!("P {sh:?}"), &got, &want, 1e-5);
}

#[test]
fn fast_path_matches_reference_and_streaming_kernels() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fast attention");
    // (batch, seq, heads, kv_heads, head_dim): sequence lengths 1, 7, 64 (one tile), 65 and 300
    // (not multiples of the 64-tile), 129; GQA ratios 1, 2, 4; batch 1 and 2; head dims 16, 64,
    // 100 (two column slices, the second partial, and 7 contraction steps of 16, the last
    // partial).
    let cases = [
        shape(2, 1, 4, 2, 64),
        shape(1, 7, 4, 1, 100),
        shape(2, 7, 2, 2, 16),
        shape(1, 64, 4, 4, 64),
        shape(2, 65, 4, 2, 100),
        shape(1, 129, 4, 1, 16),
        shape(1, 300, 2, 1, 64),
        shape(2, 300, 4, 2, 16),
        shape(1, 300, 2, 2, 100),
    ];
    for sh in cases {
        let t = std::time::Instant::now();
        let x = inputs(&mut rng, sh);
        let scale = 1.0 / (sh.head_dim as f32).sqrt();
        let fast = run_fast(&gpu, &x, sh, scale);
        let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
        let (want_dq, want_dk, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
        let got = [&fast.o, &fast.lse, &fast.dq, &fast.dk, &fast.dv];
        let want = [&want_o, &want_lse, &want_dq, &want_dk, &want_dv];
        let streaming = run_streaming(&gpu, &x, sh, scale);
        let lens = [sh.q_len(), sh.rows(), sh.q_len(), sh.kv_len(), sh.kv_len()];
        for (n, name) in ["O", "lse", "dQ", "dK", "dV"].into_iter().enumerate() {
            let len = lens[n];
            assert_close(&format!("{name} {sh:?} vs reference"), &got[n][..len], want[n], 1e-5);
            assert_close(&format!("{name} {sh:?} vs streaming"), &got[n][..len], &to64(&streaming[n]), 1e-5);
            check_tail(name, got[n], len);
        }
        check_probs(sh, &x, scale as f64, &fast.probs, &want_lse);
        eprintln!("fast attention {sh:?}: {:?}", t.elapsed());
    }
}

#[test]
fn fast_path_sharp_softmax() {
    // Scores spread over ±60: most weights underflow, P has exact zeros and ones.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fast attention sharp");
    for sh in [shape(1, 100, 2, 1, 64), shape(2, 41, 2, 2, 16)] {
        let x = inputs(&mut rng, sh);
        let scale = 8.0 / (sh.head_dim as f32).sqrt();
        let fast = run_fast(&gpu, &x, sh, scale);
        let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
        let (want_dq, want_dk, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
        assert_close(&format!("O sharp {sh:?}"), &fast.o[..sh.q_len()], &want_o, 1e-5);
        assert_close(&format!("lse sharp {sh:?}"), &fast.lse[..sh.rows()], &want_lse, 1e-5);
        assert_close(&format!("dQ sharp {sh:?}"), &fast.dq[..sh.q_len()], &want_dq, 1e-5);
        assert_close(&format!("dK sharp {sh:?}"), &fast.dk[..sh.kv_len()], &want_dk, 1e-5);
        assert_close(&format!("dV sharp {sh:?}"), &fast.dv[..sh.kv_len()], &want_dv, 1e-5);
    }
}

#[test]
fn fast_path_is_deterministic() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fast attention determinism");
    let sh = shape(2, 130, 4, 2, 100);
    let x = inputs(&mut rng, sh);
    let scale = 0.1;
    let a = run_fast(&gpu, &x, sh, scale);
    let b = run_fast(&gpu, &x, sh, scale);
    for (name, u, v) in [
        ("O", &a.o, &b.o),
        ("lse", &a.lse, &b.lse),
        ("P", &a.probs, &b.probs),
        ("dQ", &a.dq, &b.dq),
        ("dK", &a.dk, &b.dk),
        ("dV", &a.dv, &b.dv),
    ] {
        assert!(same_bits(u, v), "{name} differs run to run");
    }
}

#[test]
fn fast_path_tree_reduction_variant() {
    // `attention_fast_softmax` uses the preamble's workgroup reductions: check the variant
    // without subgroups too (rows longer than 256 keys, so every invocation holds a partial).
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    assert!(!gpu.variant_for(&kernels::attention::attention_fast_softmax::KERNEL).unwrap().subgroups);
    let mut rng = rng("fast attention tree");
    let sh = shape(1, 300, 2, 1, 16);
    let x = inputs(&mut rng, sh);
    let fast = run_fast(&gpu, &x, sh, 0.25);
    let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, 0.25);
    let (_, _, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, 0.25);
    assert_close("O (tree)", &fast.o[..sh.q_len()], &want_o, 1e-5);
    assert_close("lse (tree)", &fast.lse[..sh.rows()], &want_lse, 1e-5);
    assert_close("dV (tree)", &fast.dv[..sh.kv_len()], &want_dv, 1e-5);
}

/// L = Σ dO · O with O from the fast GPU forward, in float64.
fn loss(gpu: &Gpu, q: &[f32], k: &[f32], v: &[f32], d_o: &[f32], sh: Shape, scale: f32) -> f64 {
    let p = params(sh, scale);
    let (q, k, v) = (gpu.upload(q).unwrap(), gpu.upload(k).unwrap(), gpu.upload(v).unwrap());
    let mut o = gpu.filled(sh.q_len(), f32::NAN).unwrap();
    let mut lse = gpu.filled(sh.rows(), f32::NAN).unwrap();
    let mut probs = gpu.filled(p.probs_len(), f32::NAN).unwrap();
    fast_attention::forward(gpu, &q, &k, &v, &mut o, &mut lse, &mut probs, p).unwrap();
    o.read(gpu).unwrap().iter().zip(d_o).map(|(&a, &b)| a as f64 * b as f64).sum()
}

#[test]
fn fast_backward_matches_finite_differences() {
    // Central differences of L = Σ dO·O (dO random) through the fast GPU forward, for a sample
    // of coordinates of Q, K and V. Inputs are O(1), h = 1e-2: the truncation error is
    // O(h²·L''') ≈ 1e-4 relative; the f32 rounding of O (≈ 6e-8 relative per element, only
    // the rows the coordinate touches change) over 2h gives ≈ 1e-5 absolute. A 1e-2 relative
    // tolerance on the sampled gradient vector leaves ample margin and still catches a wrong
    // sign, scale or missing term.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fast attention finite differences");
    let h = 1e-2f32;
    for sh in [shape(1, 7, 4, 2, 16), shape(2, 5, 4, 1, 10)] {
        let x = inputs(&mut rng, sh);
        let scale = 1.0 / (sh.head_dim as f32).sqrt();
        let fast = run_fast(&gpu, &x, sh, scale);
        for (name, which, grad) in [("dQ", 0, &fast.dq), ("dK", 1, &fast.dk), ("dV", 2, &fast.dv)] {
            let qkv = [x.q.as_slice(), &x.k, &x.v];
            let (an, fd) = central_differences(&mut rng, qkv[which], grad, h, 8, |t| {
                let mut p = qkv;
                p[which] = t;
                loss(&gpu, p[0], p[1], p[2], &x.d_o, sh, scale)
            });
            let e = rel_err(&an, &fd);
            assert!(e < 1e-2, "{name} {sh:?}: backward vs finite differences: relative error {e:e}\n{an:?}\n{fd:?}");
        }
    }
}

#[test]
fn fast_path_misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let sh = shape(1, 8, 4, 2, 16);
    let p = params(sh, 0.25);
    let ws = p.workspace_sizes();
    assert_eq!(ws.probs, 4 * 8 * 8);
    assert_eq!(ws.delta, 4 * 8);
    assert!(p.fits(&gpu));
    let x = inputs(&mut common::rng("fast attention misuse"), sh);
    let q = gpu.upload(&x.q).unwrap();
    let k = gpu.upload(&x.k).unwrap();
    let v = gpu.upload(&x.v).unwrap();
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut o = gpu.zeros(sh.q_len()).unwrap();
    let mut lse = gpu.zeros(sh.rows()).unwrap();
    let mut probs = gpu.zeros(ws.probs).unwrap();
    let mut delta = gpu.zeros(ws.delta).unwrap();
    let mut dq = gpu.zeros(sh.q_len()).unwrap();
    let mut dk = gpu.zeros(sh.kv_len()).unwrap();
    let mut dv = gpu.zeros(sh.kv_len()).unwrap();
    let mut short_probs = gpu.zeros(ws.probs - 1).unwrap();
    let mut short_delta = gpu.zeros(ws.delta - 1).unwrap();

    // A short workspace, before anything is recorded.
    let batch = gpu.batch();
    let e = fast_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, &mut short_probs, p).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }) && e.to_string().contains("probs"), "{e}");
    let e = fast_attention::backward(
        &batch,
        &q,
        &k,
        &v,
        &o,
        &d_o,
        &mut probs,
        &mut short_delta,
        &mut dq,
        &mut dk,
        &mut dv,
        p,
    )
    .unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }) && e.to_string().contains("delta"), "{e}");
    let e = fast_attention::backward(
        &batch,
        &q,
        &k,
        &v,
        &o,
        &d_o,
        &mut short_probs,
        &mut delta,
        &mut dq,
        &mut dk,
        &mut dv,
        p,
    )
    .unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }) && e.to_string().contains("probs"), "{e}");
    assert_eq!(batch.dispatches(), 0, "a failed call recorded dispatches");
    // A short output and inconsistent heads.
    let mut short_o = gpu.zeros(sh.q_len() - 1).unwrap();
    let e = fast_attention::forward(&gpu, &q, &k, &v, &mut short_o, &mut lse, &mut probs, p).unwrap_err();
    assert!(e.to_string().contains("`o`"), "{e}");
    let bad = Params { kv_heads: 3, ..p };
    let e = fast_attention::forward(&gpu, &q, &k, &v, &mut o, &mut lse, &mut probs, bad).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("heads % kv_heads"), "{e}");
    // A kernel's own `@requires`.
    let kp = attention_fast_scores::Params::new(1, 8, 4, 2, 16, 0.25);
    let e = attention_fast_scores(&gpu, &q, &k, &mut short_probs, kp).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(probs)"), "{e}");
    // The right sizes work.
    fast_attention::forward(&gpu, &q, &k, &v, &mut o, &mut lse, &mut probs, p).unwrap();
    fast_attention::backward(&gpu, &q, &k, &v, &o, &d_o, &mut probs, &mut delta, &mut dq, &mut dk, &mut dv, p).unwrap();
}

#[test]
fn fast_path_long_sequence() {
    // S = 1100: 18 query/key tiles (171 lower-triangle tiles per head, the triangular index past
    // its first rows), contractions of up to 69 steps of 16 in the P·V and Pᵀ·X products.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fast attention long");
    let sh = shape(1, 1100, 2, 1, 3);
    let x = inputs(&mut rng, sh);
    let scale = 0.7;
    let fast = run_fast(&gpu, &x, sh, scale);
    let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
    let (want_dq, want_dk, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
    assert_close("O long", &fast.o[..sh.q_len()], &want_o, 1e-5);
    assert_close("lse long", &fast.lse[..sh.rows()], &want_lse, 1e-5);
    assert_close("dQ long", &fast.dq[..sh.q_len()], &want_dq, 1e-5);
    assert_close("dK long", &fast.dk[..sh.kv_len()], &want_dk, 1e-5);
    assert_close("dV long", &fast.dv[..sh.kv_len()], &want_dv, 1e-5);
    check_probs(sh, &x, scale as f64, &fast.probs, &want_lse);
}

#[test]
fn fast_scores_past_65535_workgroups() {
    // B·H = 2·32,768 = 65,536 (b, h) pairs at S = 1: `attention_fast_scores` gets 65,536
    // workgroups, the grid goes 2-D and `flat_wg` must recover each (b, h, tile). The other
    // kernels share the scheme; each such dispatch takes ≈ 9 s on lavapipe (≈ 130 µs per
    // workgroup, whatever its size), so only this one is run.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fast attention 2-D grid");
    let sh = shape(2, 1, 32_768, 8_192, 2);
    let x = inputs(&mut rng, sh);
    let p = attention_fast_scores::Params::new(2, 1, 32_768, 8_192, 2, 0.5);
    let q = gpu.upload(&x.q).unwrap();
    let k = gpu.upload(&x.k).unwrap();
    let mut probs = poisoned(&gpu, sh.rows());
    attention_fast_scores(&gpu, &q, &k, &mut probs, p).unwrap();
    let got = probs.read(&gpu).unwrap();
    // S = 1: the one score of (b, h) is 0.5·q[b, 0, h]·k[b, 0, h / 4].
    let want: Vec<f64> = (0..sh.rows())
        .map(|bh| {
            let (b, h) = (bh / sh.heads, bh % sh.heads);
            let qa = (b * sh.heads + h) * 2;
            let ka = (b * sh.kv_heads + h / 4) * 2;
            0.5 * (x.q[qa] as f64 * x.k[ka] as f64 + x.q[qa + 1] as f64 * x.k[ka + 1] as f64)
        })
        .collect();
    assert_close("scores 2-D grid", &got[..sh.rows()], &want, 1e-6);
    check_tail("scores", &got, sh.rows());
}

// ---- The f16-operand path (`forward16` / `backward16`) ----

/// `x` rounded to f16's 11 significant bits the way the f16 products round the f32 P and dS as
/// they load them (`round_f16` of shaders/lib/attention_f16.wgsl: to nearest even on the f32 bits;
/// the portable bodies lavapipe runs). On tensor cores values below 2⁻¹⁴ keep fewer bits (true
/// f16 subnormals): at most 2⁻²⁵ apart, far below the bounds used here.
fn r16(x: f64) -> f64 {
    let bits = (x as f32).to_bits();
    let r = bits.wrapping_add(0x0fff).wrapping_add((bits >> 13) & 1) & 0xffff_e000;
    f32::from_bits(r) as f64
}

/// The float64 model of the f16 path, stage by stage. Operands: `x16` holds Q, K, V, dO rounded
/// to f16 (what the products multiply). The f32 stages — scores, softmax, lse (exact from the
/// f16 operands), Δ = rowsum(dO ⊙ O) from the f32 dO (`d_o32`) and the O the backward was given
/// (the GPU's, `got.o`), dS = P ⊙ (dO·Vᵀ − Δ) — are computed exactly. The products are computed
/// exactly from the P and dS the GPU's products actually read (`got.probs`, `got.ds`, rounded by
/// [`r16`] as they load them), so each stage is compared on its own inputs: a rounding boundary
/// crossed differently in f32 and float64 does not move the products' comparison.
struct Ref16 {
    o: Vec<f64>,
    lse: Vec<f64>,
    /// dS `[B, H, S, S]` (0 where j > s).
    ds: Vec<f64>,
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
}

fn reference16(x16: &Inputs, d_o32: &[f32], got: &Fast16, sh: Shape, scale: f64) -> Ref16 {
    let (s_len, dh) = (sh.seq, sh.head_dim);
    let q_at = |b: usize, s: usize, h: usize| ((b * s_len + s) * sh.heads + h) * dh;
    let kv_at = |b: usize, s: usize, h: usize| ((b * s_len + s) * sh.kv_heads + h) * dh;
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>();
    let mut r = Ref16 {
        o: vec![0.0; sh.q_len()],
        lse: vec![0.0; sh.rows()],
        ds: vec![0.0; sh.rows() * s_len],
        dq: vec![0.0; sh.q_len()],
        dk: vec![0.0; sh.kv_len()],
        dv: vec![0.0; sh.kv_len()],
    };
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let kvh = h / (sh.heads / sh.kv_heads);
            for s in 0..s_len {
                let row = (b * sh.heads + h) * s_len + s;
                let qa = q_at(b, s, h);
                let scores: Vec<f64> =
                    (0..=s).map(|j| scale * dot(&x16.q[qa..qa + dh], &x16.k[kv_at(b, j, kvh)..][..dh])).collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                r.lse[row] = m + l.ln();
                let delta: f64 = (0..dh).map(|d| d_o32[qa + d] as f64 * got.o[qa + d] as f64).sum();
                for (j, x) in scores.iter().enumerate() {
                    let ka = kv_at(b, j, kvh);
                    let dp = dot(&x16.d_o[qa..qa + dh], &x16.v[ka..ka + dh]);
                    r.ds[row * s_len + j] = (x - m).exp() / l * (dp - delta);
                    let p16 = r16(got.probs[row * s_len + j] as f64);
                    let ds16 = r16(got.ds[row * s_len + j] as f64);
                    for d in 0..dh {
                        r.o[qa + d] += p16 * x16.v[ka + d] as f64;
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

/// What the f16 path produced (each output with its NaN tail).
struct Fast16 {
    o: Vec<f32>,
    lse: Vec<f32>,
    /// P after the backward (which only reads it).
    probs: Vec<f32>,
    /// dS, the backward's second workspace.
    ds: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    /// The overflow flag (0 before the call).
    flag: u32,
}

/// `forward16` then `backward16` in one batch (the backward fed the forward's O, as the trainer
/// does), every output and workspace NaN-poisoned first.
fn run_fast16(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> Fast16 {
    let p = params(sh, scale);
    let ws = p.workspace_sizes();
    let dh = sh.head_dim;
    let (q, k, v, d_o16) =
        (upload16(gpu, &x.q, dh), upload16(gpu, &x.k, dh), upload16(gpu, &x.v, dh), upload16(gpu, &x.d_o, dh));
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut o = poisoned(gpu, sh.q_len());
    let mut lse = poisoned(gpu, sh.rows());
    let mut probs = poisoned(gpu, ws.probs);
    let mut ds = poisoned(gpu, ws.probs);
    let mut delta = poisoned(gpu, ws.delta);
    let mut dq = poisoned(gpu, sh.q_len());
    let mut dk = poisoned(gpu, sh.kv_len());
    let mut dv = poisoned(gpu, sh.kv_len());
    let mut flag = gpu.zeros::<u32>(1).unwrap();
    let batch = gpu.batch();
    fast_attention::forward16(&batch, &q, &k, &v, &mut o, &mut lse, &mut probs, p).unwrap();
    fast_attention::backward16(
        &batch, &q, &k, &v, &o, &d_o, &d_o16, &probs, &mut ds, &mut delta, &mut flag, &mut dq, &mut dk, &mut dv, p,
    )
    .unwrap();
    batch.submit().unwrap();
    let r = |b: &Buffer<f32>| b.read(gpu).unwrap();
    check_tail("delta", &r(&delta), ws.delta);
    let flag = flag.read(gpu).unwrap()[0];
    let out = Fast16 { o: r(&o), lse: r(&lse), probs: r(&probs), ds: r(&ds), dq: r(&dq), dk: r(&dk), dv: r(&dv), flag };
    for (name, got, len) in [
        ("O", &out.o, sh.q_len()),
        ("lse", &out.lse, sh.rows()),
        ("dQ", &out.dq, sh.q_len()),
        ("dK", &out.dk, sh.kv_len()),
        ("dV", &out.dv, sh.kv_len()),
        ("P", &out.probs, ws.probs),
        ("dS", &out.ds, ws.probs),
    ] {
        check_tail(name, got, len);
    }
    out
}

/// dS's contract (the same as P's): row s holds dS for j ≤ s, zeros up to the end of its 64-key
/// tile, and the poison further right. Returns the j ≤ s entries for comparison.
fn ds_entries(sh: Shape, ds: &[f32], want: &[f64]) -> (Vec<f32>, Vec<f64>) {
    let s_len = sh.seq;
    let (mut got, mut w) = (Vec::new(), Vec::new());
    for row in 0..sh.rows() {
        let s = row % s_len;
        let tile_end = s_len.min((s / 64 + 1) * 64);
        for j in 0..s_len {
            let v = ds[row * s_len + j];
            if j <= s {
                got.push(v);
                w.push(want[row * s_len + j]);
            } else if j < tile_end {
                assert_eq!(v, 0.0, "dS {sh:?} row {row} key {j}: not zero above the diagonal");
            } else {
                assert!(v.is_nan(), "dS {sh:?} row {row} key {j}: written past its tile");
            }
        }
    }
    (got, w)
}

/// Relative error bound of every stage of the f16 path against its float64 model
/// ([`reference16`]), which rounds the operands exactly as the GPU does. What is left is f32
/// arithmetic: the products' f32 sums (≈ 1e-7 relative over ≤ 200-term chains), the f32 scores,
/// softmax, Δ and dS (≈ 1e-7, more where dP − Δ cancels). Measured on lavapipe over repeated
/// runs: ≤ 4.5e-7 (printed by the tests). The bound leaves a factor 20 and stays a factor ~25
/// below what ignoring the f16 rounding costs (the float64 reference of the unrounded inputs is
/// 2.5e-4 … 6e-4 away from O, dQ, dK, dV, also printed), so a missed or extra rounding, a wrong
/// operand, head or scale fails. (P is checked by `check_probs` at 1e-5, as the f32 path's.)
const TOL16: f64 = 1e-5;

/// Runs the f16 path on `sh` and checks every output against the float64 model.
fn check_fast16(gpu: &Gpu, rng: &mut rand::rngs::StdRng, sh: Shape, scale: f32) {
    let x = inputs(rng, sh);
    let x16 = Inputs { q: halves(&x.q), k: halves(&x.k), v: halves(&x.v), d_o: halves(&x.d_o) };
    let got = run_fast16(gpu, &x, sh, scale);
    assert_eq!(got.flag, 0, "{sh:?}: the overflow flag was raised, every dS being far inside f16's range");
    let want = reference16(&x16, &x.d_o, &got, sh, scale as f64);
    let (o_len, kv_len) = (sh.q_len(), sh.kv_len());
    // P's contract and values (against the f16 operands' scores).
    check_probs(sh, &x16, scale as f64, &got.probs, &want.lse);
    let (ds_got, ds_want) = ds_entries(sh, &got.ds, &want.ds);
    let pairs: [(&str, &[f32], &[f64], f64); 6] = [
        ("O", &got.o[..o_len], &want.o, TOL16),
        ("lse", &got.lse[..sh.rows()], &want.lse, TOL16),
        ("dS", &ds_got, &ds_want, TOL16),
        ("dQ", &got.dq[..o_len], &want.dq, TOL16),
        ("dK", &got.dk[..kv_len], &want.dk, TOL16),
        ("dV", &got.dv[..kv_len], &want.dv, TOL16),
    ];
    // For scale: the f32 path's float64 reference of the unrounded inputs.
    let (o32, _) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
    let (dq32, dk32, dv32) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
    let unrounded = [Some(&o32), None, None, Some(&dq32), Some(&dk32), Some(&dv32)];
    for ((name, g, w, tol), f32_ref) in pairs.into_iter().zip(unrounded) {
        let e = rel_err(g, w);
        let e32 = f32_ref.map_or(f64::NAN, |r| rel_err(g, r));
        eprintln!("f16 attention {sh:?} {name}: {e:.2e} vs the f16 model, {e32:.2e} vs the unrounded f32 reference");
        assert!(e < tol, "f16 attention {name} {sh:?}: relative error {e:e} ≥ {tol:e}");
    }
}

#[test]
fn fast16_matches_float64_model() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "fast16_matches_float64_model") {
        return;
    }
    let mut rng = rng("fast attention f16");
    // (batch, seq, heads, kv_heads, head_dim): S = 7, 65, 130, 200 (not multiples of the 64
    // tile: partial diagonal tiles), 64 (one whole tile); GQA ratios 1, 2, 4; head dims 8, 64,
    // 100 (two 64-column slices, the second partial) and 12.
    let cases = [
        shape(2, 7, 2, 2, 8),
        shape(2, 65, 4, 2, 64),
        shape(1, 64, 2, 1, 12),
        shape(1, 130, 4, 1, 100),
        shape(1, 200, 2, 2, 32),
    ];
    for sh in cases {
        let t = std::time::Instant::now();
        check_fast16(&gpu, &mut rng, sh, 1.0 / (sh.head_dim as f32).sqrt());
        eprintln!("f16 attention {sh:?}: {:?}", t.elapsed());
    }
}

#[test]
fn fast16_on_the_2d_grid() {
    // The 2-D grid fallback: with at most L workgroups per dimension, a dispatch of more than L
    // (and at most L²) workgroups goes 2-D and each kernel must recover its (b, h, tile) from
    // `flat_wg`. (L, shape) pairs chosen so that:
    //   L = 10, S = 4, B·H = 24, B·Hkv = 12: every dispatch but Δ's one workgroup is 2-D
    //     (scores and dP 24, softmax and dS 96, P·V and dS·K 24, Pᵀ·X 12 workgroups);
    //   L = 33, S = 130 (three tiles), B·H = 8: the triangle of tiles through the 2-D grid
    //     (scores and dP 48 workgroups, softmax and dS 1040; the others stay 1-D).
    for (limit, sh) in [(10, shape(2, 4, 12, 6, 8)), (33, shape(2, 130, 4, 2, 16))] {
        let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(limit)) else {
            return;
        };
        if !common::has_f16(&gpu, "fast16_on_the_2d_grid") {
            return;
        }
        assert_eq!(gpu.report().max_workgroups_per_dimension, limit);
        let mut rng = rng("fast attention f16 2-D grid");
        check_fast16(&gpu, &mut rng, sh, 0.3);
    }
}

#[test]
fn fast16_is_deterministic() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "fast16_is_deterministic") {
        return;
    }
    let mut rng = rng("fast attention f16 determinism");
    let sh = shape(1, 90, 4, 2, 20);
    let x = inputs(&mut rng, sh);
    let a = run_fast16(&gpu, &x, sh, 0.2);
    let b = run_fast16(&gpu, &x, sh, 0.2);
    for (name, u, v) in [
        ("O", &a.o, &b.o),
        ("lse", &a.lse, &b.lse),
        ("P", &a.probs, &b.probs),
        ("dS", &a.ds, &b.ds),
        ("dQ", &a.dq, &b.dq),
        ("dK", &a.dk, &b.dk),
        ("dV", &a.dv, &b.dv),
    ] {
        assert!(same_bits(u, v), "{name} differs run to run");
    }
}

#[test]
fn fast16_misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "fast16_misuse_is_an_error") {
        return;
    }
    let sh = shape(1, 8, 4, 2, 16);
    let p = params(sh, 0.25);
    let x = inputs(&mut common::rng("fast attention f16 misuse"), sh);
    let dh = sh.head_dim;
    let (q, k, v, d_o16) =
        (upload16(&gpu, &x.q, dh), upload16(&gpu, &x.k, dh), upload16(&gpu, &x.v, dh), upload16(&gpu, &x.d_o, dh));
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut ws = fast_attention::Workspace16::new(&gpu, &p).unwrap();
    assert_eq!((ws.probs.len(), ws.ds.len(), ws.delta.len()), (4 * 8 * 8, 4 * 8 * 8, 4 * 8));
    let mut o = gpu.zeros(sh.q_len()).unwrap();
    let mut lse = gpu.zeros(sh.rows()).unwrap();
    let mut dq = gpu.zeros(sh.q_len()).unwrap();
    let mut dk = gpu.zeros(sh.kv_len()).unwrap();
    let mut dv = gpu.zeros(sh.kv_len()).unwrap();
    let short_k = gpu.zeros::<kernels::ops::F16x4>(sh.kv_len() / 4 - 1).unwrap();
    let mut short_ds = gpu.zeros(p.probs_len() - 1).unwrap();
    let mut flag = gpu.zeros::<u32>(1).unwrap();

    let batch = gpu.batch();
    let e = fast_attention::forward16(&batch, &q, &short_k, &v, &mut o, &mut lse, &mut ws.probs, p).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }) && e.to_string().contains("`k`"), "{e}");
    let e = fast_attention::backward16(
        &batch,
        &q,
        &k,
        &v,
        &o,
        &d_o,
        &d_o16,
        &ws.probs,
        &mut short_ds,
        &mut ws.delta,
        &mut flag,
        &mut dq,
        &mut dk,
        &mut dv,
        p,
    )
    .unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { .. }) && e.to_string().contains("ds"), "{e}");
    // Dh % 4 ≠ 0: f16 operands are whole vec4s.
    let odd = Params { head_dim: 6, ..p };
    let e = fast_attention::forward16(&batch, &q, &k, &v, &mut o, &mut lse, &mut ws.probs, odd).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("head_dim % 4"), "{e}");
    let bad = Params { kv_heads: 3, ..p };
    let e = fast_attention::backward16(
        &batch,
        &q,
        &k,
        &v,
        &o,
        &d_o,
        &d_o16,
        &ws.probs,
        &mut ws.ds,
        &mut ws.delta,
        &mut flag,
        &mut dq,
        &mut dk,
        &mut dv,
        bad,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("heads % kv_heads"), "{e}");
    assert_eq!(batch.dispatches(), 0, "a failed call recorded dispatches");
    // The right sizes work.
    fast_attention::forward16(&batch, &q, &k, &v, &mut o, &mut lse, &mut ws.probs, p).unwrap();
    fast_attention::backward16(
        &batch,
        &q,
        &k,
        &v,
        &o,
        &d_o,
        &d_o16,
        &ws.probs,
        &mut ws.ds,
        &mut ws.delta,
        &mut flag,
        &mut dq,
        &mut dk,
        &mut dv,
        p,
    )
    .unwrap();
    assert_eq!(batch.dispatches(), 9);
    batch.submit().unwrap();
}

#[test]
fn fast16_ds_overflow_raises_the_flag() {
    // V and dO of magnitude up to 1000 (exact enough in f16): dP = dO·V reaches ~1e6, so some
    // dS = P ⊙ (dP − Δ) lie beyond ±65504, where the products' f16 rounding would clamp them:
    // the flag is raised (as loss scaling needs, to skip the step). The same call on the
    // unscaled inputs leaves it at 0 (also checked by every `check_fast16`).
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "fast16_ds_overflow_raises_the_flag") {
        return;
    }
    let mut rng = rng("fast attention f16 overflow");
    let sh = shape(1, 40, 2, 1, 16);
    let mut x = inputs(&mut rng, sh);
    assert_eq!(run_fast16(&gpu, &x, sh, 0.25).flag, 0);
    for a in x.v.iter_mut().chain(x.d_o.iter_mut()) {
        *a *= 1000.0;
    }
    let x16 = Inputs { q: halves(&x.q), k: halves(&x.k), v: halves(&x.v), d_o: halves(&x.d_o) };
    let got = run_fast16(&gpu, &x, sh, 0.25);
    let want = reference16(&x16, &x.d_o, &got, sh, 0.25);
    let largest = want.ds.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(largest > 65504.0 * 1.5, "the test's dS stay inside f16's range (largest {largest})");
    assert_eq!(got.flag, 1, "dS up to {largest} did not raise the overflow flag");
}
