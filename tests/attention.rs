//! `attention_forward` and `attention_decode` against float64 references, on fresh random
//! inputs, outputs poisoned with NaN first (and a poisoned tail that must stay NaN).

mod common;
#[path = "reference/attention.rs"]
mod reference;

use common::{assert_close, check_tail, gpu, gpu_with, poisoned, rng, uniform};
use kernels::attention::{attention_decode, attention_forward};
use kernels::{Error, Gpu, GpuOptions};
use reference::{Inputs, Shape, inputs, shape};

fn params(sh: Shape, scale: f32) -> attention_forward::Params {
    attention_forward::Params::new(
        sh.batch as u32,
        sh.seq as u32,
        sh.heads as u32,
        sh.kv_heads as u32,
        sh.head_dim as u32,
        scale,
    )
}

/// Runs the forward into NaN-poisoned outputs; returns (O, lse) with their tails.
fn forward(gpu: &Gpu, x: &Inputs, sh: Shape, scale: f32) -> (Vec<f32>, Vec<f32>) {
    let q = gpu.upload(&x.q).unwrap();
    let k = gpu.upload(&x.k).unwrap();
    let v = gpu.upload(&x.v).unwrap();
    let mut o = poisoned(gpu, sh.q_len());
    let mut lse = poisoned(gpu, sh.rows());
    attention_forward(gpu, &q, &k, &v, &mut o, &mut lse, params(sh, scale)).unwrap();
    (o.read(gpu).unwrap(), lse.read(gpu).unwrap())
}

#[test]
fn forward_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_forward");
    // (batch, seq, heads, kv_heads, head_dim): sequence lengths 1, 7, 64, 300 (not multiples of
    // any block), GQA ratios 1, 2, 4, batch 1 and 2, head dims 16, 32, 64, 100 (not a power of
    // two), 128 and 256 (small case).
    let cases = [
        shape(2, 1, 4, 2, 64),
        shape(1, 7, 4, 1, 100),
        shape(2, 7, 2, 2, 16),
        shape(1, 64, 4, 4, 64),
        shape(2, 64, 4, 2, 100),
        shape(1, 64, 8, 2, 128),
        shape(1, 300, 2, 1, 16),
        shape(2, 300, 4, 1, 32),
        shape(1, 300, 1, 1, 100),
        shape(1, 33, 2, 1, 256),
        shape(2, 5, 4, 4, 256),
    ];
    for sh in cases {
        let t = std::time::Instant::now();
        let x = inputs(&mut rng, sh);
        let scale = 1.0 / (sh.head_dim as f32).sqrt();
        let (o, lse) = forward(&gpu, &x, sh, scale);
        let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
        assert_close(&format!("O {sh:?}"), &o[..sh.q_len()], &want_o, 1e-5);
        assert_close(&format!("lse {sh:?}"), &lse[..sh.rows()], &want_lse, 1e-5);
        check_tail("O", &o, sh.q_len());
        check_tail("lse", &lse, sh.rows());
        eprintln!("forward {sh:?}: {:?}", t.elapsed());
    }
}

#[test]
fn forward_sharp_softmax() {
    // Scores spread over ±60: the running max changes across key tiles and most weights
    // underflow; the online rescaling must keep O and lse exact.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_forward sharp");
    for sh in [shape(1, 100, 2, 1, 64), shape(2, 41, 2, 2, 16)] {
        let x = inputs(&mut rng, sh);
        let scale = 8.0 / (sh.head_dim as f32).sqrt();
        let (o, lse) = forward(&gpu, &x, sh, scale);
        let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, scale as f64);
        assert_close(&format!("O sharp {sh:?}"), &o[..sh.q_len()], &want_o, 1e-5);
        assert_close(&format!("lse sharp {sh:?}"), &lse[..sh.rows()], &want_lse, 1e-5);
    }
}

#[test]
fn forward_is_deterministic() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_forward determinism");
    let sh = shape(2, 70, 4, 2, 100);
    let x = inputs(&mut rng, sh);
    let scale = 1.0 / 10.0;
    let (o1, l1) = forward(&gpu, &x, sh, scale);
    let (o2, l2) = forward(&gpu, &x, sh, scale);
    assert!(o1.iter().zip(&o2).all(|(a, b)| a.to_bits() == b.to_bits()), "O differs run to run");
    assert!(l1.iter().zip(&l2).all(|(a, b)| a.to_bits() == b.to_bits()), "lse differs run to run");
}

#[test]
fn forward_past_65535_workgroups() {
    // B·H·⌈S/BQ⌉ = 2·32,768·1 = 65,536 workgroups: the grid goes 2-D and `flat_wg` must
    // recover every (b, h, block). About 10 s on lavapipe (≈ 150 µs per workgroup, whatever its
    // size), so only the smallest count past the limit.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_forward 2-D grid");
    {
        let sh = shape(2, 1, 32_768, 8_192, 2);
        let x = inputs(&mut rng, sh);
        let (o, lse) = forward(&gpu, &x, sh, 0.5);
        let (want_o, want_lse) = reference::attention_forward(&x.q, &x.k, &x.v, sh, 0.5);
        assert_close(&format!("O {sh:?}"), &o[..sh.q_len()], &want_o, 1e-5);
        assert_close(&format!("lse {sh:?}"), &lse[..sh.rows()], &want_lse, 1e-5);
        check_tail("O", &o, sh.q_len());
    }
}

#[allow(clippy::too_many_arguments)]
fn decode_params(
    batch: usize,
    heads: usize,
    kv_heads: usize,
    dh: usize,
    t_max: usize,
    t: usize,
    scale: f32,
) -> attention_decode::Params {
    attention_decode::Params::new(batch as u32, heads as u32, kv_heads as u32, dh as u32, t_max as u32, t as u32, scale)
}

#[test]
fn decode_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_decode");
    // (batch, heads, kv_heads, head_dim, t_max, [t…]): t around the chunk of 256 keys.
    type Case = (usize, usize, usize, usize, usize, &'static [usize]);
    let cases: [Case; 4] = [
        (2, 4, 1, 64, 300, &[1, 5, 255, 256, 257, 300]),
        (1, 2, 2, 100, 40, &[1, 37, 40]),
        (2, 8, 4, 16, 600, &[513, 600]),
        (1, 4, 2, 256, 9, &[9]),
    ];
    for (batch, heads, kv_heads, dh, t_max, ts) in cases {
        let q = uniform(&mut rng, batch * heads * dh, -2.0, 2.0);
        let kc = uniform(&mut rng, batch * t_max * kv_heads * dh, -2.0, 2.0);
        let vc = uniform(&mut rng, batch * t_max * kv_heads * dh, -1.0, 1.0);
        let (qb, kb, vb) = (gpu.upload(&q).unwrap(), gpu.upload(&kc).unwrap(), gpu.upload(&vc).unwrap());
        let scale = 1.0 / (dh as f32).sqrt();
        for &t in ts {
            let n = batch * heads * dh;
            let mut o = poisoned(&gpu, n);
            attention_decode(&gpu, &qb, &kb, &vb, &mut o, decode_params(batch, heads, kv_heads, dh, t_max, t, scale))
                .unwrap();
            let got = o.read(&gpu).unwrap();
            let want = reference::attention_decode(&q, &kc, &vc, batch, heads, kv_heads, dh, t_max, t, scale as f64);
            let what = format!("decode B={batch} H={heads} Hkv={kv_heads} Dh={dh} t={t}/{t_max}");
            assert_close(&what, &got[..n], &want, 1e-5);
            check_tail(&what, &got, n);

            // Twice: the same bits.
            let mut again = poisoned(&gpu, n);
            attention_decode(
                &gpu,
                &qb,
                &kb,
                &vb,
                &mut again,
                decode_params(batch, heads, kv_heads, dh, t_max, t, scale),
            )
            .unwrap();
            let again = again.read(&gpu).unwrap();
            assert!(got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: not deterministic");
        }
    }
}

#[test]
fn decode_tree_reduction_variant() {
    // attention_decode uses the preamble's reductions: check the variant without subgroups too.
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    assert!(!gpu.variant_for(&attention_decode::KERNEL).unwrap().subgroups);
    let mut rng = rng("attention_decode tree");
    let (batch, heads, kv_heads, dh, t_max) = (2, 4, 2, 64, 600);
    let q = uniform(&mut rng, batch * heads * dh, -2.0, 2.0);
    let kc = uniform(&mut rng, batch * t_max * kv_heads * dh, -2.0, 2.0);
    let vc = uniform(&mut rng, batch * t_max * kv_heads * dh, -1.0, 1.0);
    let (qb, kb, vb) = (gpu.upload(&q).unwrap(), gpu.upload(&kc).unwrap(), gpu.upload(&vc).unwrap());
    for t in [1, 300, 600] {
        let n = batch * heads * dh;
        let mut o = poisoned(&gpu, n);
        attention_decode(&gpu, &qb, &kb, &vb, &mut o, decode_params(batch, heads, kv_heads, dh, t_max, t, 0.125))
            .unwrap();
        let want = reference::attention_decode(&q, &kc, &vc, batch, heads, kv_heads, dh, t_max, t, 0.125);
        assert_close(&format!("decode (tree) t={t}"), &o.read(&gpu).unwrap()[..n], &want, 1e-5);
    }
}

#[test]
fn decode_agrees_with_the_forward() {
    // The cache holds the forward's K/V (S = t_max); decoding query s with t = s + 1 is row s
    // of the forward.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_decode vs forward");
    let sh = shape(1, 20, 4, 2, 32);
    let x = inputs(&mut rng, sh);
    let scale = 1.0 / (32f32).sqrt();
    let (o, _) = forward(&gpu, &x, sh, scale);
    let (kb, vb) = (gpu.upload(&x.k).unwrap(), gpu.upload(&x.v).unwrap());
    for s in [0usize, 7, 19] {
        // q of position s, all heads: [1, H, Dh].
        let row = &x.q[s * 4 * 32..(s + 1) * 4 * 32];
        let qb = gpu.upload(row).unwrap();
        let mut od = poisoned(&gpu, 4 * 32);
        attention_decode(&gpu, &qb, &kb, &vb, &mut od, decode_params(1, 4, 2, 32, 20, s + 1, scale)).unwrap();
        let got = od.read(&gpu).unwrap();
        let want: Vec<f64> = o[s * 128..(s + 1) * 128].iter().map(|&v| v as f64).collect();
        assert_close(&format!("decode s={s} vs forward"), &got[..128], &want, 1e-6);
    }
}

#[test]
fn decode_past_65535_workgroups() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("attention_decode 2-D grid");
    let (batch, heads, kv_heads, dh, t_max, t) = (2, 32_772, 8_193, 4, 4, 3);
    let q = uniform(&mut rng, batch * heads * dh, -2.0, 2.0);
    let kc = uniform(&mut rng, batch * t_max * kv_heads * dh, -2.0, 2.0);
    let vc = uniform(&mut rng, batch * t_max * kv_heads * dh, -1.0, 1.0);
    let (qb, kb, vb) = (gpu.upload(&q).unwrap(), gpu.upload(&kc).unwrap(), gpu.upload(&vc).unwrap());
    let n = batch * heads * dh;
    let mut o = poisoned(&gpu, n);
    attention_decode(&gpu, &qb, &kb, &vb, &mut o, decode_params(batch, heads, kv_heads, dh, t_max, t, 0.5)).unwrap();
    let got = o.read(&gpu).unwrap();
    let want = reference::attention_decode(&q, &kc, &vc, batch, heads, kv_heads, dh, t_max, t, 0.5);
    assert_close("decode 65,544 workgroups", &got[..n], &want, 1e-5);
    check_tail("decode", &got, n);
}

#[test]
fn misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let sh = shape(1, 8, 4, 2, 16);
    let q = gpu.zeros::<f32>(sh.q_len()).unwrap();
    let k = gpu.zeros::<f32>(sh.kv_len() - 1).unwrap();
    let v = gpu.zeros::<f32>(sh.kv_len()).unwrap();
    let mut o = gpu.zeros::<f32>(sh.q_len()).unwrap();
    let mut lse = gpu.zeros::<f32>(sh.rows()).unwrap();
    // K one element short.
    let e = attention_forward(&gpu, &q, &k, &v, &mut o, &mut lse, params(sh, 0.25)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(k)"), "{e}");
    let k = gpu.zeros::<f32>(sh.kv_len()).unwrap();
    // lse one short.
    let mut short = gpu.zeros::<f32>(sh.rows() - 1).unwrap();
    let e = attention_forward(&gpu, &q, &k, &v, &mut o, &mut short, params(sh, 0.25)).unwrap_err();
    assert!(e.to_string().contains("len(lse)"), "{e}");
    // H not a multiple of Hkv, head dim over 256.
    let e = attention_forward(&gpu, &q, &k, &v, &mut o, &mut lse, params(shape(1, 8, 4, 3, 16), 0.25)).unwrap_err();
    assert!(e.to_string().contains("p.heads % p.kv_heads"), "{e}");
    let e = attention_forward(&gpu, &q, &k, &v, &mut o, &mut lse, params(shape(1, 1, 1, 1, 257), 0.25)).unwrap_err();
    assert!(e.to_string().contains("HEAD_DIM_MAX"), "{e}");
    // Decode: t past the cache, t = 0, a short cache.
    let mut od = gpu.zeros::<f32>(4 * 16).unwrap();
    let q1 = gpu.zeros::<f32>(4 * 16).unwrap();
    let e = attention_decode(&gpu, &q1, &k, &v, &mut od, decode_params(1, 4, 2, 16, 8, 9, 0.25)).unwrap_err();
    assert!(e.to_string().contains("p.t <= p.t_max"), "{e}");
    let e = attention_decode(&gpu, &q1, &k, &v, &mut od, decode_params(1, 4, 2, 16, 8, 0, 0.25)).unwrap_err();
    assert!(e.to_string().contains("p.t >= 1"), "{e}");
    let e = attention_decode(&gpu, &q1, &k, &v, &mut od, decode_params(1, 4, 2, 16, 9, 9, 0.25)).unwrap_err();
    assert!(e.to_string().contains("len(k_cache)"), "{e}");
    // Nothing ran: the output is still zero, and the context still works.
    assert!(o.read(&gpu).unwrap().iter().all(|&x| x == 0.0));
    attention_forward(&gpu, &q, &k, &v, &mut o, &mut lse, params(sh, 0.25)).unwrap();
    assert!(o.read(&gpu).unwrap().iter().all(|&x| x == 0.0), "v = 0 gives O = 0");
}
