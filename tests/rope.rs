//! `rope_q` and `rope_k` against the float64 reference, with position offsets, on fresh random
//! inputs; a poisoned tail must stay untouched; the 2-D grid; misuse. `rope_qk` and
//! `rope_qk_backward` (queries and keys in one dispatch) against the reference and the separate
//! kernels' bits. `rope_qk_f16` and `rope_qk_backward_f16` (f16 outputs) against the reference
//! and bit for bit against the f32 kernels followed by the casts they replace, overflow flag
//! included.

mod common;
#[path = "reference/half.rs"]
mod half;
#[path = "reference/attention.rs"]
mod reference;

use common::{TAIL, assert_close, gpu, rel_err, rng, uniform};
use kernels::Error;
use kernels::rope::{
    rope_k, rope_k_backward, rope_q, rope_q_backward, rope_qk, rope_qk_backward, rope_qk_backward_f16, rope_qk_f16,
};

const BASE: f32 = 10_000.0;
/// (batch, seq, heads, head_dim)
type Dims = (usize, usize, usize, usize);

fn run(gpu: &kernels::Gpu, x: &[f32], sh: Dims, off: usize, key: bool) -> Vec<f32> {
    let mut padded = x.to_vec();
    padded.extend([f32::NAN; TAIL]);
    let mut b = gpu.upload(&padded).unwrap();
    let (bb, s, h, d) = (sh.0 as u32, sh.1 as u32, sh.2 as u32, sh.3 as u32);
    if key {
        rope_k(gpu, &mut b, rope_k::Params::new(bb, s, h, d, off as u32, BASE)).unwrap();
    } else {
        rope_q(gpu, &mut b, rope_q::Params::new(bb, s, h, d, off as u32, BASE)).unwrap();
    }
    b.read(gpu).unwrap()
}

#[test]
fn rope_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope");
    // (batch, seq, heads, head_dim), position offset. Head dims 2, 16, 64, 100, 128, 256;
    // positions up to 363.
    let cases: [(Dims, usize); 6] = [
        ((2, 7, 4, 16), 0),
        ((1, 64, 3, 100), 13),
        ((2, 33, 2, 128), 200),
        ((1, 300, 1, 64), 63),
        ((1, 5, 1, 2), 7),
        ((2, 3, 2, 256), 1),
    ];
    for (sh, off) in cases {
        let n = sh.0 * sh.1 * sh.2 * sh.3;
        for key in [false, true] {
            let what = format!("{} {sh:?} offset {off}", if key { "rope_k" } else { "rope_q" });
            let x = uniform(&mut rng, n, -1.0, 1.0);
            let got = run(&gpu, &x, sh, off, key);
            let want = reference::rope(&x, sh.0, sh.1, sh.2, sh.3, off, BASE as f64, false);
            eprintln!("{what}: rel err {:.1e}", rel_err(&got[..n], &want));
            assert_close(&what, &got[..n], &want, 1e-5);
            assert!(got[n..].iter().all(|v| v.is_nan()), "{what}: wrote past the end");
        }
    }
}

#[test]
fn rope_qk_matches_the_reference_and_the_separate_kernels() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope_qk");
    // (batch, seq, heads, kv heads, head_dim), position offset.
    let cases = [((2, 7, 4, 2, 16), 0usize), ((1, 33, 3, 3, 100), 13), ((2, 5, 8, 1, 64), 200), ((1, 3, 1, 1, 2), 7)];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for ((bt, s, h, hkv, d), off) in cases {
        let (nq, nk) = (bt * s * h * d, bt * s * hkv * d);
        let padded = |n: usize, rng: &mut _| {
            let mut x = uniform(rng, n, -1.0, 1.0);
            x.extend([f32::NAN; TAIL]);
            x
        };
        let (xq, xk) = (padded(nq, &mut rng), padded(nk, &mut rng));
        let u = |v: usize| v as u32;
        for inverse in [false, true] {
            let what = format!(
                "{} {:?} offset {off}",
                if inverse { "rope_qk_backward" } else { "rope_qk" },
                (bt, s, h, hkv, d)
            );
            let (mut q, mut k) = (gpu.upload(&xq).unwrap(), gpu.upload(&xk).unwrap());
            let (mut q1, mut k1) = (gpu.upload(&xq).unwrap(), gpu.upload(&xk).unwrap());
            let (b_, s_, h_, kv_, d_, o_) = (u(bt), u(s), u(h), u(hkv), u(d), u(off));
            if inverse {
                let p = rope_qk_backward::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
                rope_qk_backward(&gpu, &mut q, &mut k, p).unwrap();
                rope_q_backward(&gpu, &mut q1, rope_q_backward::Params::new(b_, s_, h_, d_, o_, BASE)).unwrap();
                rope_k_backward(&gpu, &mut k1, rope_k_backward::Params::new(b_, s_, kv_, d_, o_, BASE)).unwrap();
            } else {
                rope_qk(&gpu, &mut q, &mut k, rope_qk::Params::new(b_, s_, h_, kv_, d_, o_, BASE)).unwrap();
                rope_q(&gpu, &mut q1, rope_q::Params::new(b_, s_, h_, d_, o_, BASE)).unwrap();
                rope_k(&gpu, &mut k1, rope_k::Params::new(b_, s_, kv_, d_, o_, BASE)).unwrap();
            }
            for (name, got, sep, x, heads, n) in [
                ("q", q.read(&gpu).unwrap(), q1.read(&gpu).unwrap(), &xq, h, nq),
                ("k", k.read(&gpu).unwrap(), k1.read(&gpu).unwrap(), &xk, hkv, nk),
            ] {
                let want = reference::rope(&x[..n], bt, s, heads, d, off, BASE as f64, inverse);
                eprintln!("{what} {name}: rel err {:.1e}", rel_err(&got[..n], &want));
                assert_close(&format!("{what} {name}"), &got[..n], &want, 1e-5);
                assert!(got[n..].iter().all(|v| v.is_nan()), "{what} {name}: wrote past the end");
                assert_eq!(bits(&got), bits(&sep), "{what} {name}: not the separate kernel's bits");
            }
        }
    }
}

#[test]
fn rope_error_grows_with_position() {
    // The angle pos·θ_i is formed in f32: θ_i = base^(−2i/Dh) carries ≈ 1e-7 relative error (an
    // f32 frequency cannot do better than 3e-8), so the error against exact float64 angles grows
    // linearly with the position — measured on lavapipe ≈ 2e-8·pos relative (8e-6 at 500, 7.5e-5
    // at 4000, 6.4e-4 at 32000), the same as a float32 PyTorch RoPE. The reference test above
    // keeps positions ≤ 363 (error < 1e-5); here the bound 5e-8·pos + 1e-6 up to pos 32000.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope positions");
    for off in [500usize, 2000, 4000, 8000, 32000] {
        let sh = (1, 4, 4, 128);
        let n = sh.0 * sh.1 * sh.2 * sh.3;
        let x = uniform(&mut rng, n, -1.0, 1.0);
        let got = run(&gpu, &x, sh, off, false);
        let want = reference::rope(&x, sh.0, sh.1, sh.2, sh.3, off, BASE as f64, false);
        let e = rel_err(&got[..n], &want);
        eprintln!("pos {off}: rel err {e:.1e}");
        assert!(e < 5e-8 * (off + 4) as f64 + 1e-6, "pos {off}: relative error {e:e}");
    }
}

#[test]
fn rope_past_the_2d_grid_limit() {
    // 16,777,000 pairs = more than 65,535 workgroups of 256 invocations: the grid goes 2-D and
    // `flat_id` must recover every pair (the buffer is 128 MiB minus 1.7 KB, just under
    // lavapipe's binding limit). Batch 2 so that the row → position mapping is exercised too.
    // Then `rope_q_backward` on the same buffer must give the input back.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope 2-D grid");
    let sh: Dims = (2, 250, 16_777, 4);
    let off = 3;
    let n = sh.0 * sh.1 * sh.2 * sh.3;
    assert!(n / 2 > 65_535 * 256);
    let x = uniform(&mut rng, n, -1.0, 1.0);
    let mut buf = gpu.upload(&x).unwrap();
    let (bb, s, h, d) = (sh.0 as u32, sh.1 as u32, sh.2 as u32, sh.3 as u32);
    rope_q(&gpu, &mut buf, rope_q::Params::new(bb, s, h, d, off as u32, BASE)).unwrap();
    let got = buf.read(&gpu).unwrap();
    // The reference one (b, s) slab at a time: seq 1 at position s + off.
    let slab = sh.2 * sh.3;
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for b in 0..sh.0 {
        for s in 0..sh.1 {
            let at = (b * sh.1 + s) * slab;
            let want = reference::rope(&x[at..at + slab], 1, 1, sh.2, sh.3, s + off, BASE as f64, false);
            for (g, w) in got[at..at + slab].iter().zip(&want) {
                num += (*g as f64 - w).powi(2);
                den += w * w;
            }
        }
    }
    let e = (num / den).sqrt();
    assert!(e < 1e-5, "rope_q on 16,777,000 pairs: relative error {e:e}");
    rope_q_backward(&gpu, &mut buf, rope_q_backward::Params::new(bb, s, h, d, off as u32, BASE)).unwrap();
    let back = buf.read(&gpu).unwrap();
    let want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    assert_close("rope_q_backward ∘ rope_q on 16,777,000 pairs", &back, &want, 1e-6);
}

#[test]
fn rope_misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let mut b = gpu.zeros::<f32>(2 * 3 * 4 * 8).unwrap();
    let e = rope_q(&gpu, &mut b, rope_q::Params::new(2, 3, 4, 7, 0, BASE)).unwrap_err();
    assert!(e.to_string().contains("p.head_dim % 2 == 0"), "{e}");
    let e = rope_k(&gpu, &mut b, rope_k::Params::new(2, 3, 5, 8, 0, BASE)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(k)"), "{e}");
    assert!(b.read(&gpu).unwrap().iter().all(|&v| v == 0.0));
}

/// `rope_qk_f16` and `rope_qk_backward_f16`: the f16 rows of Q and K are the bits of `rope_qk`
/// (`rope_qk_backward`) followed by `cast_f16x4` (`cast_grad_f16x4`, whose overflow flag the
/// backward must raise exactly when the cast would) on the same inputs, and within f16 rounding
/// of the float64 reference: each half is within 2⁻¹¹ relative of the f32 value (round to
/// nearest; subnormals within 2⁻²⁵ absolute), which is within 1e-5 of the reference (above), so
/// 6e-4 norm-wise. Widths 2 mod 4 (H·Dh = 18, 6, 2: padded rows), the inputs' tails poisoned
/// (never read), a NaN kept; then the values scaled past f16's range: clamped like the cast and
/// (the backward) flagged.
#[test]
fn rope_qk_f16_kernels_are_the_f32_kernels_then_the_casts() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "rope_qk_f16") {
        return;
    }
    let mut rng = rng("rope_qk_f16");
    // (batch, seq, heads, kv heads, head_dim), position offset.
    let cases = [((2, 7, 4, 2, 16), 0usize), ((2, 5, 3, 1, 6), 9), ((1, 33, 3, 3, 100), 13), ((1, 3, 1, 1, 2), 7)];
    for ((bt, s, h, hkv, d), off) in cases {
        let (rows, hq, kv) = (bt * s, h * d, hkv * d);
        let u = |v: usize| v as u32;
        let (b_, s_, h_, kv_, d_, o_) = (u(bt), u(s), u(h), u(hkv), u(d), u(off));
        for (scale, nan) in [(1.0f32, false), (1.0, true), (1.0e5, false)] {
            let padded = |n: usize, rng: &mut _| {
                let mut x: Vec<f32> = uniform(rng, n, -1.0, 1.0).into_iter().map(|v| v * scale).collect();
                x.extend([f32::NAN; TAIL]);
                x
            };
            let (mut xq, xk) = (padded(rows * hq, &mut rng), padded(rows * kv, &mut rng));
            if nan {
                xq[rows * hq / 2] = f32::NAN;
            }
            for inverse in [false, true] {
                let name = if inverse { "rope_qk_backward_f16" } else { "rope_qk_f16" };
                let what = format!("{name} {:?} offset {off} scale {scale} nan {nan}", (bt, s, h, hkv, d));
                let (q, k) = (gpu.upload(&xq).unwrap(), gpu.upload(&xk).unwrap());
                let (mut q16, mut k16) = (half::poisoned16(&gpu, rows, hq), half::poisoned16(&gpu, rows, kv));
                let mut flag = half::flag(&gpu);
                // The f32 kernel on copies, then the separate casts.
                let (mut q32, mut k32) = (gpu.upload(&xq).unwrap(), gpu.upload(&xk).unwrap());
                let (want_q, want_k, want_flag) = if inverse {
                    let p = rope_qk_backward_f16::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
                    rope_qk_backward_f16(&gpu, &q, &k, &mut q16, &mut k16, &mut flag, p).unwrap();
                    let p = rope_qk_backward::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
                    rope_qk_backward(&gpu, &mut q32, &mut k32, p).unwrap();
                    let ((cq, fq), (ck, fk)) =
                        (half::cast_grad(&gpu, &q32, rows, hq), half::cast_grad(&gpu, &k32, rows, kv));
                    (cq, ck, fq | fk)
                } else {
                    let p = rope_qk_f16::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
                    rope_qk_f16(&gpu, &q, &k, &mut q16, &mut k16, p).unwrap();
                    rope_qk(&gpu, &mut q32, &mut k32, rope_qk::Params::new(b_, s_, h_, kv_, d_, o_, BASE)).unwrap();
                    (half::cast(&gpu, &q32, rows, hq), half::cast(&gpu, &k32, rows, kv), 0)
                };
                let got_q = half::read16(&gpu, &q16, rows, hq, &what);
                let got_k = half::read16(&gpu, &k16, rows, kv, &what);
                half::same16(&got_q, &want_q, &format!("{what} q"));
                half::same16(&got_k, &want_k, &format!("{what} k"));
                let got_flag = half::read_flag(&gpu, &flag, &what);
                assert_eq!(got_flag, want_flag, "{what}: the flag is not the cast's");
                if inverse {
                    assert_eq!(got_flag, u32::from(scale > 1.0 || nan), "{what}: the flag");
                }
                if scale == 1.0 && !nan {
                    for (name, got, x, heads, cols) in [("q", &got_q, &xq, h, hq), ("k", &got_k, &xk, hkv, kv)] {
                        let want = reference::rope(&x[..rows * cols], bt, s, heads, d, off, BASE as f64, inverse);
                        let g = half::widen16(got, rows, cols, &what);
                        assert_close(&format!("{what} {name}"), &g, &want, 6e-4);
                    }
                }
            }
        }
    }
}
