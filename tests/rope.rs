//! `rope_q` and `rope_k` against the float64 reference, with position offsets, on fresh random
//! inputs; a poisoned tail must stay untouched; the 2-D grid; misuse. The fused-row kernels
//! (`rope_qkv`, `rope_qkv_backward`: Q, K and V of one projection's rows split out and rotated,
//! their gradients gathered back) against the reference and the separate kernels' bits; their f16
//! forms (`rope_qkv_f16`, `rope_qkv_backward_f16`) against the reference and bit for bit against
//! the f32 kernels followed by the casts they replace, overflow flag included.

mod common;
#[path = "reference/half.rs"]
mod half;
#[path = "reference/attention.rs"]
mod reference;

use common::{TAIL, assert_close, gpu, rel_err, rng, uniform};
use kernels::Error;
use kernels::rope::{
    rope_k, rope_k_backward, rope_q, rope_q_backward, rope_qkv, rope_qkv_backward, rope_qkv_backward_f16, rope_qkv_f16,
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

/// (batch, seq, heads, kv heads, head_dim) of the fused-row cases.
type Fused = (usize, usize, usize, usize, usize);

/// The fused-row cases and their position offsets: head dims 16, 6 (H·Dh and Hkv·Dh 2 mod 4, so
/// the fused row's vec4s straddle Q and K, K and V), 100, 2; grouped and ungrouped heads.
const FUSED_CASES: [(Fused, usize); 5] = [
    ((2, 7, 4, 2, 16), 0),
    ((2, 5, 3, 1, 6), 9),
    ((1, 33, 3, 3, 100), 13),
    ((2, 5, 8, 1, 64), 200),
    ((1, 3, 1, 1, 2), 7),
];

/// The fused rows `[rows, H·Dh + 2·Hkv·Dh]` of the parts q, k, v (each `[rows, cols]`).
fn fuse<T: Copy>(parts: [&[T]; 3], rows: usize) -> Vec<T> {
    let mut out = Vec::new();
    for r in 0..rows {
        for p in parts {
            let c = p.len() / rows;
            out.extend_from_slice(&p[r * c..(r + 1) * c]);
        }
    }
    out
}

/// The parts of fused rows (`fuse` undone).
fn split(fused: &[f32], rows: usize, widths: [usize; 3]) -> [Vec<f32>; 3] {
    let w: usize = widths.iter().sum();
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for r in 0..rows {
        let mut at = r * w;
        for (o, c) in out.iter_mut().zip(widths) {
            o.extend_from_slice(&fused[at..at + c]);
            at += c;
        }
    }
    out
}

fn with_tail(mut v: Vec<f32>) -> Vec<f32> {
    v.extend([f32::NAN; TAIL]);
    v
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// One case of `rope_qkv` and `rope_qkv_backward` on `kgpu`: every part against the float64
/// reference (V unchanged), and the same bits as `rope_q` / `rope_k` (`_backward`) on the
/// separate parts; outputs poisoned, their tails untouched.
fn rope_qkv_case(kgpu: &kernels::Gpu, rng: &mut rand::rngs::StdRng, (bt, s, h, hkv, d): Fused, off: usize) {
    let (rows, hq, kv) = (bt * s, h * d, hkv * d);
    let u = |v: usize| v as u32;
    let (b_, s_, h_, kv_, d_, o_) = (u(bt), u(s), u(h), u(hkv), u(d), u(off));
    let parts =
        [uniform(rng, rows * hq, -1.0, 1.0), uniform(rng, rows * kv, -1.0, 1.0), uniform(rng, rows * kv, -1.0, 1.0)];
    let what = format!("{:?} offset {off}", (bt, s, h, hkv, d));
    let widths = [hq, kv, kv];
    // Forward: the fused row in, the parts out.
    let qkv = kgpu.upload(&with_tail(fuse([&parts[0], &parts[1], &parts[2]], rows))).unwrap();
    let mut outs = widths.map(|c| common::poisoned(kgpu, rows * c));
    let [q, k, v] = &mut outs;
    rope_qkv(kgpu, &qkv, q, k, v, rope_qkv::Params::new(b_, s_, h_, kv_, d_, o_, BASE)).unwrap();
    // Backward: the parts in, the fused row out.
    let ins = parts.each_ref().map(|x| kgpu.upload(&with_tail(x.clone())).unwrap());
    let mut dqkv = common::poisoned(kgpu, rows * (hq + 2 * kv));
    let p = rope_qkv_backward::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
    rope_qkv_backward(kgpu, &ins[0], &ins[1], &ins[2], &mut dqkv, p).unwrap();
    let back = dqkv.read(kgpu).unwrap();
    common::check_tail(&format!("rope_qkv_backward {what}"), &back, rows * (hq + 2 * kv));
    let back = split(&back[..rows * (hq + 2 * kv)], rows, widths);
    for inverse in [false, true] {
        let name = if inverse { "rope_qkv_backward" } else { "rope_qkv" };
        for (i, (part, heads)) in ["q", "k", "v"].into_iter().zip([h, hkv, hkv]).enumerate() {
            let n = rows * widths[i];
            let got = if inverse {
                back[i].clone()
            } else {
                let got = outs[i].read(kgpu).unwrap();
                common::check_tail(&format!("{name} {what} {part}"), &got, n);
                got[..n].to_vec()
            };
            let what = format!("{name} {what} {part}");
            if i == 2 {
                assert_eq!(bits(&got), bits(&parts[2]), "{what}: V is not passed through unchanged");
                continue;
            }
            let want = reference::rope(&parts[i], bt, s, heads, d, off, BASE as f64, inverse);
            eprintln!("{what}: rel err {:.1e}", rel_err(&got, &want));
            assert_close(&what, &got, &want, 1e-5);
            // The separate in-place kernel on a copy of the part.
            let mut sep = kgpu.upload(&parts[i]).unwrap();
            match (i, inverse) {
                (0, false) => rope_q(kgpu, &mut sep, rope_q::Params::new(b_, s_, h_, d_, o_, BASE)).unwrap(),
                (0, true) => {
                    rope_q_backward(kgpu, &mut sep, rope_q_backward::Params::new(b_, s_, h_, d_, o_, BASE)).unwrap()
                }
                (_, false) => rope_k(kgpu, &mut sep, rope_k::Params::new(b_, s_, kv_, d_, o_, BASE)).unwrap(),
                (_, true) => {
                    rope_k_backward(kgpu, &mut sep, rope_k_backward::Params::new(b_, s_, kv_, d_, o_, BASE)).unwrap()
                }
            }
            assert_eq!(bits(&got), bits(&sep.read(kgpu).unwrap()), "{what}: not the separate kernel's bits");
        }
    }
}

#[test]
fn rope_qkv_kernels_match_the_reference_and_the_separate_kernels() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("rope_qkv");
    for (dims, off) in FUSED_CASES {
        rope_qkv_case(&gpu, &mut rng, dims, off);
    }
    // 34 rows of 64 pairs (2176 invocations, 9 workgroups) where a dimension takes at most 4
    // workgroups: the 2-D fallback, whose `flat_id` must recover every pair and row.
    let small = kernels::GpuOptions::from_env().max_workgroups_per_dimension(4);
    let Some(gpu2d) = common::gpu_with(small) else { return };
    rope_qkv_case(&gpu2d, &mut rng, (2, 17, 4, 2, 16), 5);
}

/// `rope_qkv_f16` and `rope_qkv_backward_f16`: the f16 rows of Q, K, V (of the fused gradient)
/// are the bits of `rope_qkv` (`rope_qkv_backward`) followed by `cast_f16x4` (`cast_grad_f16x4`,
/// whose overflow flag the backward must raise exactly when the cast would) on the same inputs,
/// and within f16 rounding of the float64 reference: each half is within 2⁻¹¹ relative of the
/// f32 value (round to nearest; subnormals within 2⁻²⁵ absolute), which is within 1e-5 of the
/// reference (above), so 6e-4 norm-wise. Widths 2 mod 4 (padded rows; fused vec4s across two
/// parts), the inputs' tails poisoned (never read), a NaN kept; then the values scaled past f16's
/// range: clamped like the cast and (the backward) flagged; then the 2-D grid.
#[test]
fn rope_qkv_f16_kernels_are_the_f32_kernels_then_the_casts() {
    let Some(gpu) = gpu() else { return };
    if !common::has_f16(&gpu, "rope_qkv_f16") {
        return;
    }
    let small = kernels::GpuOptions::from_env().max_workgroups_per_dimension(4);
    let Some(gpu2d) = common::gpu_with(small) else { return };
    let mut rng = rng("rope_qkv_f16");
    let mut cases = FUSED_CASES.to_vec();
    // 34 rows of 32 output vec4s each way (1088 invocations, 5 workgroups): the 2-D fallback.
    cases.push(((2, 17, 4, 2, 16), 5));
    for (ci, ((bt, s, h, hkv, d), off)) in cases.iter().copied().enumerate() {
        // The last case's f16 kernels on the 2-D grid; the references always on `gpu`.
        let kgpu = if ci == cases.len() - 1 { &gpu2d } else { &gpu };
        let (rows, hq, kv) = (bt * s, h * d, hkv * d);
        let w = hq + 2 * kv;
        let u = |v: usize| v as u32;
        let (b_, s_, h_, kv_, d_, o_) = (u(bt), u(s), u(h), u(hkv), u(d), u(off));
        for (scale, nan) in [(1.0f32, false), (1.0, true), (1.0e5, false)] {
            let scaled = |n: usize, rng: &mut _| -> Vec<f32> {
                uniform(rng, n, -1.0, 1.0).into_iter().map(|v| v * scale).collect()
            };
            let what = format!("{:?} offset {off} scale {scale} nan {nan}", (bt, s, h, hkv, d));
            // Forward: the fused rows in.
            let mut x = scaled(rows * w, &mut rng);
            if nan {
                x[rows * w / 2] = f32::NAN;
            }
            let qkv = kgpu.upload(&with_tail(x.clone())).unwrap();
            let mut o16 = [hq, kv, kv].map(|c| half::poisoned16(kgpu, rows, c));
            let [q16, k16, v16] = &mut o16;
            rope_qkv_f16(kgpu, &qkv, q16, k16, v16, rope_qkv_f16::Params::new(b_, s_, h_, kv_, d_, o_, BASE)).unwrap();
            let qkv32 = gpu.upload(&with_tail(x.clone())).unwrap();
            let mut o32 = [hq, kv, kv].map(|c| common::poisoned(&gpu, rows * c));
            let [q, k, v] = &mut o32;
            rope_qkv(&gpu, &qkv32, q, k, v, rope_qkv::Params::new(b_, s_, h_, kv_, d_, o_, BASE)).unwrap();
            let parts = split(&x, rows, [hq, kv, kv]);
            for (i, (name, heads)) in ["q", "k", "v"].into_iter().zip([h, hkv, hkv]).enumerate() {
                let cols = [hq, kv, kv][i];
                let what = format!("rope_qkv_f16 {what} {name}");
                let got = half::read16(kgpu, &o16[i], rows, cols, &what);
                half::same16(&got, &half::cast(&gpu, &o32[i], rows, cols), &what);
                if scale == 1.0 && !nan {
                    let want = if i == 2 {
                        parts[2].iter().map(|&v| v as f64).collect()
                    } else {
                        reference::rope(&parts[i], bt, s, heads, d, off, BASE as f64, false)
                    };
                    assert_close(&what, &half::widen16(&got, rows, cols, &what), &want, 6e-4);
                }
            }
            // Backward: the separate gradients in, the fused rows out.
            let mut grads = [hq, kv, kv].map(|c| scaled(rows * c, &mut rng));
            if nan {
                grads[2][rows * kv / 2] = f32::NAN;
            }
            let ins = grads.each_ref().map(|g| kgpu.upload(&with_tail(g.clone())).unwrap());
            let mut dqkv16 = half::poisoned16(kgpu, rows, w);
            let mut flag = half::flag(kgpu);
            let p = rope_qkv_backward_f16::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
            rope_qkv_backward_f16(kgpu, &ins[0], &ins[1], &ins[2], &mut dqkv16, &mut flag, p).unwrap();
            let what = format!("rope_qkv_backward_f16 {what}");
            let got = half::read16(kgpu, &dqkv16, rows, w, &what);
            let got_flag = half::read_flag(kgpu, &flag, &what);
            let ins32 = grads.each_ref().map(|g| gpu.upload(g).unwrap());
            let mut dqkv = common::poisoned(&gpu, rows * w);
            let p = rope_qkv_backward::Params::new(b_, s_, h_, kv_, d_, o_, BASE);
            rope_qkv_backward(&gpu, &ins32[0], &ins32[1], &ins32[2], &mut dqkv, p).unwrap();
            let (want, want_flag) = half::cast_grad(&gpu, &dqkv, rows, w);
            half::same16(&got, &want, &what);
            assert_eq!(got_flag, want_flag, "{what}: the flag is not the cast's");
            assert_eq!(got_flag, u32::from(scale > 1.0 || nan), "{what}: the flag");
            if scale == 1.0 && !nan {
                let r = |i: usize, heads| reference::rope(&grads[i], bt, s, heads, d, off, BASE as f64, true);
                let dv: Vec<f64> = grads[2].iter().map(|&v| v as f64).collect();
                let want = fuse([&r(0, h), &r(1, hkv), &dv], rows);
                assert_close(&what, &half::widen16(&got, rows, w, &what), &want, 6e-4);
            }
        }
    }
}

#[test]
fn rope_qkv_misuse_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let qkv = gpu.zeros::<f32>(2 * 3 * (4 + 2 * 2) * 8).unwrap();
    let (mut q, mut k, mut v) = (
        gpu.zeros::<f32>(2 * 3 * 4 * 8).unwrap(),
        gpu.zeros::<f32>(2 * 3 * 2 * 8).unwrap(),
        gpu.zeros::<f32>(48).unwrap(),
    );
    let e = rope_qkv(&gpu, &qkv, &mut q, &mut k, &mut v, rope_qkv::Params::new(2, 3, 4, 2, 7, 0, BASE)).unwrap_err();
    assert!(e.to_string().contains("p.head_dim % 2 == 0"), "{e}");
    // V one row short.
    let e = rope_qkv(&gpu, &qkv, &mut q, &mut k, &mut v, rope_qkv::Params::new(2, 3, 4, 2, 8, 0, BASE)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(v)"), "{e}");
    // A fused gradient sized for one key/value head (4 + 2 · 1 heads of 8), the parts for two.
    let mut dqkv = gpu.zeros::<f32>(2 * 3 * (4 + 2) * 8).unwrap();
    let p = rope_qkv_backward::Params::new(2, 3, 4, 2, 8, 0, BASE);
    let e = rope_qkv_backward(&gpu, &q, &k, &k, &mut dqkv, p).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }) && e.to_string().contains("len(dqkv)"), "{e}");
    assert!(q.read(&gpu).unwrap().iter().all(|&x| x == 0.0), "nothing ran");
}
