//! The attention backward (`attention_backward_dq`, `attention_backward_dkdv`) and the RoPE
//! backward (`rope_q_backward`, `rope_k_backward`) against float64 references and against
//! central finite differences of the GPU forward kernels; determinism, the overwrite
//! convention, the 2-D grid and misuse.

mod common;
#[path = "reference/attention.rs"]
mod reference;

use common::{TAIL, assert_close, central_differences, check_tail, gpu, poisoned, rel_err, rng, same_bits, uniform};
use kernels::attention::attention_forward;
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq};
use kernels::rope::{rope_k, rope_k_backward, rope_q, rope_q_backward};
use kernels::{Buffer, Error, Gpu};
use reference::{Inputs, Shape, inputs, shape};

/// Device copies of the inputs and of the forward's O and lse.
struct Device {
    q: Buffer<f32>,
    k: Buffer<f32>,
    v: Buffer<f32>,
    d_o: Buffer<f32>,
    o: Buffer<f32>,
    lse: Buffer<f32>,
}

fn fwd_params(sh: Shape, scale: f32) -> attention_forward::Params {
    attention_forward::Params::new(
        sh.batch as u32,
        sh.seq as u32,
        sh.heads as u32,
        sh.kv_heads as u32,
        sh.head_dim as u32,
        scale,
    )
}

fn dq_params(sh: Shape, scale: f32) -> attention_backward_dq::Params {
    attention_backward_dq::Params::new(
        sh.batch as u32,
        sh.seq as u32,
        sh.heads as u32,
        sh.kv_heads as u32,
        sh.head_dim as u32,
        scale,
    )
}

fn dkdv_params(sh: Shape, scale: f32) -> attention_backward_dkdv::Params {
    attention_backward_dkdv::Params::new(
        sh.batch as u32,
        sh.seq as u32,
        sh.heads as u32,
        sh.kv_heads as u32,
        sh.head_dim as u32,
        scale,
    )
}

/// Uploads the inputs and runs the GPU forward for O and lse.
fn prepare(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> Device {
    let q = gpu.upload(&x.q).unwrap();
    let k = gpu.upload(&x.k).unwrap();
    let v = gpu.upload(&x.v).unwrap();
    let d_o = gpu.upload(&x.d_o).unwrap();
    let mut o = gpu.filled(sh.q_len(), f32::NAN).unwrap();
    let mut lse = gpu.filled(sh.rows(), f32::NAN).unwrap();
    attention_forward(gpu, &q, &k, &v, &mut o, &mut lse, fwd_params(sh, scale)).unwrap();
    Device { q, k, v, d_o, o, lse }
}

/// Output buffers of the backward.
struct Grads {
    dq: Buffer<f32>,
    dk: Buffer<f32>,
    dv: Buffer<f32>,
    delta: Buffer<f32>,
}

impl Grads {
    /// NaN everywhere, with a tail past each output.
    fn poisoned(gpu: &Gpu, sh: Shape) -> Grads {
        Grads {
            dq: poisoned(gpu, sh.q_len()),
            dk: poisoned(gpu, sh.kv_len()),
            dv: poisoned(gpu, sh.kv_len()),
            delta: poisoned(gpu, sh.rows()),
        }
    }

    fn read(&self, gpu: &Gpu) -> [Vec<f32>; 4] {
        [
            self.dq.read(gpu).unwrap(),
            self.dk.read(gpu).unwrap(),
            self.dv.read(gpu).unwrap(),
            self.delta.read(gpu).unwrap(),
        ]
    }
}

/// dq (and Δ), then dk/dv, in one batch.
fn backward(gpu: &Gpu, d: &Device, g: &mut Grads, sh: Shape, scale: f32) {
    let batch = gpu.batch();
    attention_backward_dq(
        &batch,
        &d.q,
        &d.k,
        &d.v,
        &d.o,
        &d.d_o,
        &d.lse,
        &mut g.dq,
        &mut g.delta,
        dq_params(sh, scale),
    )
    .unwrap();
    attention_backward_dkdv(
        &batch,
        &d.q,
        &d.k,
        &d.v,
        &d.d_o,
        &d.lse,
        &g.delta,
        &mut g.dk,
        &mut g.dv,
        dkdv_params(sh, scale),
    )
    .unwrap();
    batch.submit().unwrap();
}

#[test]
fn backward_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention backward");
    // Sequence lengths 1, 7, 64, 300; GQA ratios 1, 2, 4; batch 1 and 2; head dims 16, 32, 64,
    // 100 (not a power of two), 128 and 256 (small case).
    let cases = [
        shape(2, 1, 4, 2, 64),
        shape(1, 7, 4, 1, 100),
        shape(2, 7, 2, 2, 16),
        shape(1, 64, 4, 4, 64),
        shape(2, 64, 4, 2, 100),
        shape(1, 64, 8, 2, 128),
        shape(1, 300, 2, 1, 16),
        shape(2, 300, 4, 1, 16),
        shape(1, 33, 2, 1, 256),
        shape(2, 5, 4, 4, 256),
    ];
    for sh in cases {
        let t = std::time::Instant::now();
        let x = inputs(&mut rng, sh);
        let scale = 1.0 / (sh.head_dim as f32).sqrt();
        let d = prepare(&gpu, &x, sh, scale);
        let mut g = Grads::poisoned(&gpu, sh);
        backward(&gpu, &d, &mut g, sh, scale);
        let [dq, dk, dv, delta] = g.read(&gpu);
        let (want_dq, want_dk, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
        let (want_o, _) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
        // Δ[b, h, s] = dO · O (O exact).
        let mut want_delta = vec![0.0; sh.rows()];
        for b in 0..sh.batch {
            for s in 0..sh.seq {
                for h in 0..sh.heads {
                    let a = ((b * sh.seq + s) * sh.heads + h) * sh.head_dim;
                    want_delta[(b * sh.heads + h) * sh.seq + s] =
                        (0..sh.head_dim).map(|d| x.d_o[a + d] as f64 * want_o[a + d]).sum();
                }
            }
        }
        assert_close(&format!("dQ {sh:?}"), &dq[..sh.q_len()], &want_dq, 1e-5);
        assert_close(&format!("dK {sh:?}"), &dk[..sh.kv_len()], &want_dk, 1e-5);
        assert_close(&format!("dV {sh:?}"), &dv[..sh.kv_len()], &want_dv, 1e-5);
        assert_close(&format!("delta {sh:?}"), &delta[..sh.rows()], &want_delta, 1e-5);
        check_tail("dQ", &dq, sh.q_len());
        check_tail("dK", &dk, sh.kv_len());
        check_tail("dV", &dv, sh.kv_len());
        check_tail("delta", &delta, sh.rows());
        eprintln!(
            "backward {sh:?}: rel err dQ {:.1e} dK {:.1e} dV {:.1e}; {:?}",
            rel_err(&dq[..sh.q_len()], &want_dq),
            rel_err(&dk[..sh.kv_len()], &want_dk),
            rel_err(&dv[..sh.kv_len()], &want_dv),
            t.elapsed()
        );
    }
}

#[test]
fn backward_is_deterministic_and_overwrites() {
    // Run 1 into NaN-poisoned buffers; run 2 into the same buffers (now holding run 1's result,
    // which an accumulating kernel would add to); run 3 into fresh random buffers. All three
    // must agree bit for bit: deterministic, and every output overwritten.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention backward determinism");
    for sh in [shape(2, 70, 4, 2, 100), shape(1, 37, 8, 2, 16)] {
        let x = inputs(&mut rng, sh);
        let scale = 1.0 / (sh.head_dim as f32).sqrt();
        let d = prepare(&gpu, &x, sh, scale);
        let mut g = Grads::poisoned(&gpu, sh);
        backward(&gpu, &d, &mut g, sh, scale);
        let first = g.read(&gpu);
        backward(&gpu, &d, &mut g, sh, scale);
        let second = g.read(&gpu);
        let mut fresh = Grads {
            dq: gpu.upload(&uniform(&mut rng, sh.q_len() + TAIL, -5.0, 5.0)).unwrap(),
            dk: gpu.upload(&uniform(&mut rng, sh.kv_len() + TAIL, -5.0, 5.0)).unwrap(),
            dv: gpu.upload(&uniform(&mut rng, sh.kv_len() + TAIL, -5.0, 5.0)).unwrap(),
            delta: gpu.upload(&uniform(&mut rng, sh.rows() + TAIL, -5.0, 5.0)).unwrap(),
        };
        backward(&gpu, &d, &mut fresh, sh, scale);
        let third = fresh.read(&gpu);
        let lens = [sh.q_len(), sh.kv_len(), sh.kv_len(), sh.rows()];
        for (n, name) in ["dQ", "dK", "dV", "delta"].iter().enumerate() {
            let len = lens[n];
            assert!(first[n][..len].iter().all(|v| v.is_finite()), "{name} {sh:?}: not finite");
            assert!(same_bits(&first[n], &second[n]), "{name} {sh:?}: differs run to run (or accumulates)");
            assert!(same_bits(&first[n][..len], &third[n][..len]), "{name} {sh:?}: depends on the old contents");
        }
    }
}

/// L = Σ dO · O with O from the GPU forward, in float64.
fn loss(gpu: &Gpu, q: &[f32], k: &[f32], v: &[f32], d_o: &[f32], sh: Shape, scale: f32) -> f64 {
    let (q, k, v) = (gpu.upload(q).unwrap(), gpu.upload(k).unwrap(), gpu.upload(v).unwrap());
    let mut o = gpu.filled(sh.q_len(), f32::NAN).unwrap();
    let mut lse = gpu.filled(sh.rows(), f32::NAN).unwrap();
    attention_forward(gpu, &q, &k, &v, &mut o, &mut lse, fwd_params(sh, scale)).unwrap();
    o.read(gpu).unwrap().iter().zip(d_o).map(|(&a, &b)| a as f64 * b as f64).sum()
}

#[test]
fn backward_matches_finite_differences() {
    // Central differences of L = Σ dO·O (dO random) through the GPU forward, for a sample of
    // coordinates of Q, K and V. Inputs are O(1), h = 1e-2: the truncation error is
    // O(h²·L''') ≈ 1e-4 relative; the f32 rounding of O (≈ 6e-8 relative per element, only the
    // rows the coordinate touches change — the others are bit-identical and cancel) over 2h
    // gives ≈ 1e-5 absolute. A 1e-2 relative tolerance on the sampled gradient vector leaves
    // ample margin and still catches a wrong sign, scale or missing term.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention backward finite differences");
    let h = 1e-2f32;
    for sh in [shape(1, 7, 4, 2, 16), shape(2, 5, 4, 1, 10), shape(1, 20, 2, 2, 6)] {
        let x = inputs(&mut rng, sh);
        let scale = 1.0 / (sh.head_dim as f32).sqrt();
        let d = prepare(&gpu, &x, sh, scale);
        let mut g = Grads::poisoned(&gpu, sh);
        backward(&gpu, &d, &mut g, sh, scale);
        let [dq, dk, dv, _] = g.read(&gpu);
        for (name, which, grad) in [("dQ", 0, &dq), ("dK", 1, &dk), ("dV", 2, &dv)] {
            let qkv = [x.q.as_slice(), &x.k, &x.v];
            let (an, fd) = central_differences(&mut rng, qkv[which], grad, h, 12, |t| {
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
fn backward_past_65535_workgroups() {
    // dq: B·H·⌈S/BQ⌉ = 65,536 workgroups; dkdv: B·Hkv·⌈S/BK⌉ = 65,536. O and lse come from the
    // float64 reference (S = 1, so O = v and lse = scale·q·k). About 10 s per kernel on lavapipe.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention backward 2-D grid");
    let sh = shape(2, 1, 32_768, 32_768, 2);
    let scale = 0.5f32;
    let x = inputs(&mut rng, sh);
    let (o, lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
    let to32 = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    let d = Device {
        q: gpu.upload(&x.q).unwrap(),
        k: gpu.upload(&x.k).unwrap(),
        v: gpu.upload(&x.v).unwrap(),
        d_o: gpu.upload(&x.d_o).unwrap(),
        o: gpu.upload(&to32(&o)).unwrap(),
        lse: gpu.upload(&to32(&lse)).unwrap(),
    };
    let mut g = Grads::poisoned(&gpu, sh);
    backward(&gpu, &d, &mut g, sh, scale);
    let [dq, dk, dv, _] = g.read(&gpu);
    let (want_dq, want_dk, want_dv) = reference::attention_backward(&x.q, &x.k, &x.v, &x.d_o, sh, scale as f64);
    // With one key, P = 1 and dS = 0: dQ and dK are exactly zero, dV = dO.
    assert!(want_dq.iter().chain(&want_dk).all(|&v| v.abs() < 1e-12));
    assert!(dq[..sh.q_len()].iter().chain(&dk[..sh.kv_len()]).all(|&v| v.abs() < 1e-6), "dQ/dK not zero");
    assert_close("dV 2-D grid", &dv[..sh.kv_len()], &want_dv, 1e-6);
    check_tail("dQ", &dq, sh.q_len());
    check_tail("dV", &dv, sh.kv_len());
}

#[test]
fn attention_backward_misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let sh = shape(1, 8, 4, 2, 16);
    let x = inputs(&mut common::rng("attention backward misuse"), sh);
    let d = prepare(&gpu, &x, sh, 0.25);
    let mut g = Grads::poisoned(&gpu, sh);
    let short = gpu.zeros::<f32>(sh.rows() - 1).unwrap();
    let e = attention_backward_dkdv(
        &gpu,
        &d.q,
        &d.k,
        &d.v,
        &d.d_o,
        &d.lse,
        &short,
        &mut g.dk,
        &mut g.dv,
        dkdv_params(sh, 0.25),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(delta)"), "{e}");
    let mut short_dq = gpu.zeros::<f32>(sh.q_len() - 1).unwrap();
    let e = attention_backward_dq(
        &gpu,
        &d.q,
        &d.k,
        &d.v,
        &d.o,
        &d.d_o,
        &d.lse,
        &mut short_dq,
        &mut g.delta,
        dq_params(sh, 0.25),
    )
    .unwrap_err();
    assert!(e.to_string().contains("len(dq)"), "{e}");
    let e = attention_backward_dq(
        &gpu,
        &d.q,
        &d.k,
        &d.v,
        &d.o,
        &d.d_o,
        &d.lse,
        &mut g.dq,
        &mut g.delta,
        dq_params(shape(1, 1, 1, 1, 300), 0.25),
    )
    .unwrap_err();
    assert!(e.to_string().contains("HEAD_DIM_MAX"), "{e}");
    // Nothing ran.
    assert!(g.dq.read(&gpu).unwrap().iter().all(|v| v.is_nan()));
}

// ---- RoPE backward ----

const BASE: f32 = 10_000.0;

fn rq(sh: (usize, usize, usize, usize), off: usize) -> rope_q::Params {
    rope_q::Params::new(sh.0 as u32, sh.1 as u32, sh.2 as u32, sh.3 as u32, off as u32, BASE)
}
fn rqb(sh: (usize, usize, usize, usize), off: usize) -> rope_q_backward::Params {
    rope_q_backward::Params::new(sh.0 as u32, sh.1 as u32, sh.2 as u32, sh.3 as u32, off as u32, BASE)
}
fn rk(sh: (usize, usize, usize, usize), off: usize) -> rope_k::Params {
    rope_k::Params::new(sh.0 as u32, sh.1 as u32, sh.2 as u32, sh.3 as u32, off as u32, BASE)
}
fn rkb(sh: (usize, usize, usize, usize), off: usize) -> rope_k_backward::Params {
    rope_k_backward::Params::new(sh.0 as u32, sh.1 as u32, sh.2 as u32, sh.3 as u32, off as u32, BASE)
}

/// Runs the forward (`inverse == false`) or backward RoPE kernel for Q (`key == false`) or K on
/// `x` followed by a NaN tail; returns the whole buffer.
fn run_rope(gpu: &Gpu, x: &[f32], sh: (usize, usize, usize, usize), off: usize, key: bool, inverse: bool) -> Vec<f32> {
    let mut padded = x.to_vec();
    padded.extend([f32::NAN; TAIL]);
    let mut b = gpu.upload(&padded).unwrap();
    match (key, inverse) {
        (false, false) => rope_q(gpu, &mut b, rq(sh, off)).unwrap(),
        (false, true) => rope_q_backward(gpu, &mut b, rqb(sh, off)).unwrap(),
        (true, false) => rope_k(gpu, &mut b, rk(sh, off)).unwrap(),
        (true, true) => rope_k_backward(gpu, &mut b, rkb(sh, off)).unwrap(),
    }
    b.read(gpu).unwrap()
}

#[test]
fn rope_backward_matches_reference_and_inverts_rope() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope backward");
    // (batch, seq, heads, head_dim), offset.
    for (sh, off) in [((2, 7, 4, 16), 0), ((1, 64, 3, 100), 13), ((2, 33, 2, 128), 200), ((1, 5, 1, 2), 7)] {
        let n = sh.0 * sh.1 * sh.2 * sh.3;
        for key in [false, true] {
            let what = format!("{} backward {sh:?} offset {off}", if key { "rope_k" } else { "rope_q" });
            let g = uniform(&mut rng, n, -1.0, 1.0);
            let got = run_rope(&gpu, &g, sh, off, key, true);
            let want = reference::rope(&g, sh.0, sh.1, sh.2, sh.3, off, BASE as f64, true);
            assert_close(&what, &got[..n], &want, 1e-5);
            check_tail(&what, &got, n);
            // backward ∘ forward = identity.
            let y = run_rope(&gpu, &g, sh, off, key, false);
            let back = run_rope(&gpu, &y[..n], sh, off, key, true);
            let want: Vec<f64> = g.iter().map(|&v| v as f64).collect();
            assert_close(&format!("{what}: backward ∘ forward"), &back[..n], &want, 1e-6);
        }
    }
}

#[test]
fn rope_backward_matches_finite_differences() {
    // L = Σ G · rope(x) through the GPU forward; rope is linear, so the central difference has
    // no truncation error: only the f32 rounding of the two outputs (≈ 1e-7·‖G‖·‖x‖ over 2h
    // with h = 1e-2 ⇒ ≈ 1e-5 absolute on gradients of size ≈ 1). Tolerance 1e-3 relative.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope backward finite differences");
    let h = 1e-2f32;
    for (sh, off, key) in [((2, 6, 3, 8), 5usize, false), ((1, 9, 2, 10), 100, true)] {
        let n = sh.0 * sh.1 * sh.2 * sh.3;
        let x = uniform(&mut rng, n, -1.0, 1.0);
        let g = uniform(&mut rng, n, -1.0, 1.0);
        let grad = run_rope(&gpu, &g, sh, off, key, true);
        let (an, fd) = central_differences(&mut rng, &x, &grad, h, 16, |xp| {
            let y = run_rope(&gpu, xp, sh, off, key, false);
            y[..n].iter().zip(&g).map(|(&a, &b)| a as f64 * b as f64).sum()
        });
        let e = rel_err(&an, &fd);
        assert!(e < 1e-3, "rope backward {sh:?} key={key}: vs finite differences {e:e}");
    }
}

#[test]
fn rope_backward_misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let mut b = gpu.zeros::<f32>(2 * 3 * 4 * 8).unwrap();
    let e = rope_q_backward(&gpu, &mut b, rqb((2, 3, 4, 9), 0)).unwrap_err();
    assert!(e.to_string().contains("p.head_dim % 2 == 0"), "{e}");
    let e = rope_k_backward(&gpu, &mut b, rkb((2, 3, 5, 8), 0)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(dk)"), "{e}");
}
