//! The infrastructure kernels and the shared preamble's reductions against float64 CPU
//! references, on fresh random inputs, outputs poisoned with NaN first.

mod common;

use common::{TAIL, assert_close, check_tail, gpu, gpu_with, poisoned, rng, uniform};
use kernels::infrastructure::{axpy, clamp_inplace, copy, fill_const, fill_zero, scale};
use kernels::ops::{self, ReduceScratch};
use kernels::{Arg, Call, Gpu, GpuOptions, Grid, Record};
use rand::Rng;

kernels::kernels!("tests/shaders/probe.wgsl", shared = "shaders/00_shared.wgsl");
use probe::{grid_probe, reduce_probe, subgroup_only, tuned};

/// Lengths: tiny, around a workgroup, not multiples of 256, and past 65535 workgroups of 256
/// (16,776,960 invocations), which needs the 2-D grid.
const LENGTHS: [usize; 6] = [1, 255, 257, 1000, 65_537, 16_776_961];

#[test]
fn fill_zero_and_fill_const() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("fill");
    for n in LENGTHS {
        let mut x = poisoned(&gpu, n);
        fill_zero(&gpu, &mut x, n as u32).unwrap();
        let got = x.read(&gpu).unwrap();
        assert!(got[..n].iter().all(|&v| v == 0.0), "fill_zero n={n}");
        check_tail("fill_zero", &got, n);

        let value: f32 = rng.random_range(-10.0..10.0);
        let mut x = poisoned(&gpu, n);
        fill_const(&gpu, &mut x, fill_const::Params::new(n as u32, value)).unwrap();
        let got = x.read(&gpu).unwrap();
        assert!(got[..n].iter().all(|&v| v == value), "fill_const n={n}");
        check_tail("fill_const", &got, n);
    }
}

/// `axpy` (y += alpha·x, y with a NaN tail that must stay NaN) and `copy` of `xs` into a
/// poisoned buffer, against float64.
fn check_axpy_and_copy(gpu: &Gpu, xs: &[f32], ys: &[f32], alpha: f32) {
    let n = xs.len();
    let x = gpu.upload(xs).unwrap();
    let mut ypad = ys.to_vec();
    ypad.extend([f32::NAN; TAIL]);
    let mut y = gpu.upload(&ypad).unwrap();
    axpy(gpu, &x, &mut y, axpy::Params::new(n as u32, alpha)).unwrap();
    let got = y.read(gpu).unwrap();
    // Per element, within what f32 allows for y + alpha·x (a rounded product, then a rounded
    // sum, or one fused rounding): 2⁻²³ of |y| + |alpha·x|. Not relative to the result: when
    // the two terms cancel, the result's own size says nothing about the rounding.
    for (i, ((&x, &yv), &g)) in xs.iter().zip(ys).zip(&got[..n]).enumerate() {
        let want = yv as f64 + alpha as f64 * x as f64;
        let bound = (yv.abs() as f64 + (alpha as f64 * x as f64).abs()) * f32::EPSILON as f64;
        assert!((g as f64 - want).abs() <= bound, "axpy n={n} [{i}]: {g} against {want} (bound {bound:e})");
    }
    check_tail("axpy", &got, n);

    let mut dst = poisoned(gpu, n);
    copy(gpu, &x, &mut dst, n as u32).unwrap();
    let got = dst.read(gpu).unwrap();
    assert_eq!(&got[..n], xs, "copy n={n}");
    check_tail("copy", &got, n);
}

#[test]
fn scale_axpy_copy_clamp() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("elementwise");
    for n in LENGTHS {
        let xs = uniform(&mut rng, n, -4.0, 4.0);
        let ys = uniform(&mut rng, n, -4.0, 4.0);
        let alpha: f32 = rng.random_range(-3.0..3.0);
        let (lo, hi) = (rng.random_range(-3.0..-0.5f32), rng.random_range(0.5..3.0f32));

        // scale: poison the tail only (the head is the input).
        let mut padded = xs.clone();
        padded.extend([f32::NAN; TAIL]);
        let mut x = gpu.upload(&padded).unwrap();
        scale(&gpu, &mut x, scale::Params::new(n as u32, alpha)).unwrap();
        let got = x.read(&gpu).unwrap();
        let want: Vec<f64> = xs.iter().map(|&v| v as f64 * alpha as f64).collect();
        assert_close(&format!("scale n={n}"), &got[..n], &want, 1e-6);
        check_tail("scale", &got, n);

        check_axpy_and_copy(&gpu, &xs, &ys, alpha);

        // clamp, exact, on inputs that hold NaNs (quiet, negative, signalling-pattern payloads)
        // and infinities at random places: NaN stays NaN, ±Inf go to the bounds.
        let mut cs = xs.clone();
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffc0_1234),
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for (k, s) in specials.into_iter().enumerate() {
            // One in each sixth of the array (all at element 0 when n = 1: the last one stays).
            cs[(k * n / 6 + rng.random_range(0..(n / 6).max(1))).min(n - 1)] = s;
        }
        let mut x = gpu.upload(&cs.iter().copied().chain([f32::NAN; TAIL]).collect::<Vec<_>>()).unwrap();
        clamp_inplace(&gpu, &mut x, clamp_inplace::Params::new(n as u32, lo, hi)).unwrap();
        let got = x.read(&gpu).unwrap();
        for (i, (&g, &v)) in got.iter().zip(&cs).enumerate() {
            if v.is_nan() {
                assert!(g.is_nan(), "clamp n={n}: element {i} is NaN and became {g}");
            } else {
                assert_eq!(g.to_bits(), v.clamp(lo, hi).to_bits(), "clamp n={n}: element {i} = {v} gave {g}");
            }
        }
        check_tail("clamp_inplace", &got, n);
    }
}

#[test]
fn batch_copy_range() {
    // A ranged copy writes exactly its range (the destination is poisoned everywhere else), in
    // recording order with the kernels around it; out-of-range and misaligned ranges are errors
    // that record nothing.
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("copy_range");
    let src = uniform(&mut rng, 300, -1.0, 1.0);
    let s = gpu.upload(&src).unwrap();
    let mut d = poisoned(&gpu, 200);
    let b = gpu.batch();
    b.copy_range(&s, 17, &mut d, 50, 100).unwrap();
    b.copy_range(&s, 0, &mut d, 150, 0).unwrap();
    let e = b.copy_range(&s, 250, &mut d, 0, 51).unwrap_err();
    assert!(e.to_string().contains("copying 51 elements from element 250"), "{e}");
    let e = b.copy_range(&s, 0, &mut d, 200, 8).unwrap_err();
    assert!(e.to_string().contains("into element 200"), "{e}");
    let halves = gpu.zeros::<kernels::f16>(8).unwrap();
    let mut halves2 = gpu.zeros::<kernels::f16>(8).unwrap();
    let e = b.copy_range(&halves, 1, &mut halves2, 0, 2).unwrap_err();
    assert!(e.to_string().contains("whole 4-byte words"), "{e}");
    assert_eq!(b.dispatches(), 0);
    b.submit().unwrap();
    let got = d.read(&gpu).unwrap();
    assert!(got[..50].iter().chain(&got[150..]).all(|v| v.is_nan()), "written outside the range");
    assert_eq!(&got[50..150], &src[17..117]);
}

#[test]
fn batched_calls_run_in_order() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("batch");
    let n = 100_003;
    let xs = uniform(&mut rng, n, -1.0, 1.0);
    let x = gpu.upload(&xs).unwrap();
    let mut y = gpu.filled(n, f32::NAN).unwrap();
    let batch = gpu.batch();
    // y = 0; y += 2x; y *= -3; y += x  → y = -5x
    fill_zero(&batch, &mut y, n as u32).unwrap();
    axpy(&batch, &x, &mut y, axpy::Params::new(n as u32, 2.0)).unwrap();
    scale(&batch, &mut y, scale::Params::new(n as u32, -3.0)).unwrap();
    axpy(&batch, &x, &mut y, axpy::Params::new(n as u32, 1.0)).unwrap();
    assert_eq!(batch.dispatches(), 4);
    batch.submit().unwrap();
    let want: Vec<f64> = xs.iter().map(|&v| -5.0 * v as f64).collect();
    assert_close("batch", &y.read(&gpu).unwrap(), &want, 1e-6);
}

fn check_reductions(gpu: &Gpu, label: &str) {
    let mut rng = rng(label);
    for n in [1usize, 255, 256, 257, 1_000_000, 1_048_577] {
        let xs = uniform(&mut rng, n, -1.0, 1.0);
        let x = gpu.upload(&xs).unwrap();
        let mut scratch = ReduceScratch::new(gpu, n).unwrap();
        let mut out = gpu.filled(1, f32::NAN).unwrap();
        ops::reduce_sum_into(gpu, &x, n, &mut out, &mut scratch).unwrap();
        let got = out.read(gpu).unwrap();
        let want: f64 = xs.iter().map(|&v| v as f64).sum();
        let scale: f64 = xs.iter().map(|&v| (v as f64).abs()).sum();
        assert!((got[0] as f64 - want).abs() <= 1e-6 * scale, "{label}: sum n={n}: {} vs {want}", got[0]);

        // The same inputs give the same bits.
        let mut again = gpu.filled(1, f32::NAN).unwrap();
        ops::reduce_sum_into(gpu, &x, n, &mut again, &mut scratch).unwrap();
        assert_eq!(got[0].to_bits(), again.read(gpu).unwrap()[0].to_bits(), "{label}: sum not deterministic");

        // Max, including all-negative inputs (a 0 identity would be wrong there).
        for negative in [false, true] {
            let vs: Vec<f32> = if negative { xs.iter().map(|v| -v.abs() - 0.5).collect() } else { xs.clone() };
            let v = gpu.upload(&vs).unwrap();
            let mut out = gpu.filled(1, f32::NAN).unwrap();
            ops::reduce_max_into(gpu, &v, n, &mut out, &mut scratch).unwrap();
            let want = vs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(out.read(gpu).unwrap()[0], want, "{label}: max n={n} negative={negative}");
        }
    }
    // Empty input.
    let x = gpu.upload(&[1.0f32]).unwrap();
    let mut scratch = ReduceScratch::new(gpu, 1).unwrap();
    let mut out = gpu.filled(1, f32::NAN).unwrap();
    ops::reduce_sum_into(gpu, &x, 0, &mut out, &mut scratch).unwrap();
    assert_eq!(out.read(gpu).unwrap()[0], 0.0);
}

#[test]
fn whole_array_reductions_with_subgroups() {
    let Some(gpu) = gpu() else { return };
    check_reductions(&gpu, "reductions (subgroups)");
}

#[test]
fn whole_array_reductions_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    assert!(!gpu.variant_for(&kernels::infrastructure::reduce_sum::KERNEL).unwrap().subgroups);
    check_reductions(&gpu, "reductions (tree)");
}

/// The preamble's `wg_reduce_sum` / `wg_reduce_max` directly: every invocation must get the
/// workgroup's result, max then sum then sum back to back.
fn check_probe(gpu: &Gpu, label: &str) {
    let mut rng = rng(label);
    // The seed's defect: with a hard-coded subgroup size of 32, Σ 0..255 came out 7392 on an
    // adapter with subgroups of 8. It must be 32640 at every size.
    let groups = 5usize;
    let mut vals: Vec<f32> = (0..256).map(|t| t as f32).collect();
    vals.extend(uniform(&mut rng, 256 * (groups - 1), -2.0, 2.0));
    let v = gpu.upload(&vals).unwrap();
    let mut sums = gpu.filled(256 * groups, f32::NAN).unwrap();
    let mut maxes = gpu.filled(256 * groups, f32::NAN).unwrap();
    let mut sums2 = gpu.filled(256 * groups, f32::NAN).unwrap();
    reduce_probe(gpu, &v, &mut sums, &mut maxes, &mut sums2, groups as u32).unwrap();
    let (s, m, s2) = (sums.read(gpu).unwrap(), maxes.read(gpu).unwrap(), sums2.read(gpu).unwrap());
    assert!(s[..256].iter().all(|&x| x == 32640.0), "{label}: Σ 0..255 = {} (must be 32640)", s[0]);
    for w in 0..groups {
        let chunk = &vals[w * 256..(w + 1) * 256];
        let want_sum: f64 = chunk.iter().map(|&x| x as f64).sum();
        let want_max = chunk.iter().map(|&x| -x).fold(f32::NEG_INFINITY, f32::max);
        let abs: f64 = chunk.iter().map(|&x| (x as f64).abs()).sum();
        for t in 0..256 {
            let i = w * 256 + t;
            assert!((s[i] as f64 - want_sum).abs() <= 1e-6 * abs, "{label}: sum w={w} t={t}");
            assert_eq!(s[i].to_bits(), s[w * 256].to_bits(), "{label}: invocations disagree");
            assert_eq!(m[i], want_max, "{label}: max w={w} t={t}");
            assert!((s2[i] as f64 - 2.0 * want_sum).abs() <= 2e-6 * abs, "{label}: second sum w={w} t={t}");
        }
    }
}

#[test]
fn reduction_helpers_at_the_adapters_subgroup_size() {
    let Some(gpu) = gpu() else { return };
    let variant = gpu.variant_for(&reduce_probe::KERNEL).unwrap();
    eprintln!("adapter: {}", gpu.report());
    if gpu.features().contains(kernels::wgpu::Features::SUBGROUP) {
        assert!(variant.subgroups, "the subgroup variant must be used where SUBGROUP exists");
        // Record the subgroup size the probe actually ran at (lavapipe: 8).
        let mut out = gpu.filled(256, u32::MAX).unwrap();
        subgroup_only(&gpu, &mut out, kernels::Grid::Workgroups(1)).unwrap();
        let sizes = out.read(&gpu).unwrap();
        eprintln!("subgroup size in use: {}", sizes[0]);
        assert!(sizes.iter().all(|&s| s == sizes[0] && (4..=128).contains(&s)));
    }
    check_probe(&gpu, "probe (subgroups)");
}

#[test]
fn reduction_helpers_tree_variant() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    assert!(!gpu.variant_for(&reduce_probe::KERNEL).unwrap().subgroups);
    check_probe(&gpu, "probe (tree)");
}

#[test]
fn the_2d_fallback_reaches_every_workgroup() {
    let Some(gpu) = gpu() else { return };
    let max = gpu.limits().max_compute_workgroups_per_dimension as usize;
    for n in [1usize, max, max + 1, 2 * max + 3] {
        let mut out = gpu.filled(n, 0u32).unwrap();
        let mut hits = gpu.zeros::<u32>(n).unwrap();
        grid_probe(&gpu, &mut out, &mut hits, n as u32, kernels::Grid::Workgroups(n as u64)).unwrap();
        let got = out.read(&gpu).unwrap();
        let hits = hits.read(&gpu).unwrap();
        assert!(got.iter().enumerate().all(|(w, &v)| v == w as u32 + 1), "n={n}: a workgroup was missed");
        assert!(hits.iter().all(|&h| h == 1), "n={n}: a workgroup ran twice");
    }
}

#[test]
fn override_constants() {
    let Some(gpu) = gpu() else { return };
    let n = 1000;
    for (scale, want) in [(None, 1.0f32), (Some(2.5f32), 2.5)] {
        let mut out = gpu.filled(n, f32::NAN).unwrap();
        tuned(&gpu, &mut out, n as u32, tuned::Overrides { SCALE: scale }).unwrap();
        let got = out.read(&gpu).unwrap();
        assert!(got.iter().enumerate().all(|(i, &v)| v == want * i as f32), "SCALE={scale:?}");
    }
}

/// Lengths around the element-wise kernels' chunk of 2048 elements per workgroup (8 per
/// invocation): one short, exact, one past, a last workgroup where some invocations have all 8
/// elements and others only some (2048 + 1900), and several chunks plus a tail.
const CHUNK_LENGTHS: [usize; 6] = [2047, 2048, 2049, 2048 + 1900, 4096, 5 * 2048 + 77];

#[test]
fn elementwise_lengths_around_the_chunk() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("elementwise chunk");
    for n in CHUNK_LENGTHS {
        let xs = uniform(&mut rng, n, -4.0, 4.0);
        let ys = uniform(&mut rng, n, -4.0, 4.0);
        let alpha: f32 = rng.random_range(-3.0..3.0);
        let mut padded = xs.clone();
        padded.extend([f32::NAN; TAIL]);

        let mut x = poisoned(&gpu, n);
        fill_zero(&gpu, &mut x, n as u32).unwrap();
        let got = x.read(&gpu).unwrap();
        assert!(got[..n].iter().all(|&v| v == 0.0), "fill_zero n={n}");
        check_tail("fill_zero", &got, n);
        fill_const(&gpu, &mut x, fill_const::Params::new(n as u32, alpha)).unwrap();
        let got = x.read(&gpu).unwrap();
        assert!(got[..n].iter().all(|&v| v == alpha), "fill_const n={n}");
        check_tail("fill_const", &got, n);

        let mut x = gpu.upload(&padded).unwrap();
        scale(&gpu, &mut x, scale::Params::new(n as u32, alpha)).unwrap();
        let got = x.read(&gpu).unwrap();
        assert!(got[..n].iter().zip(&xs).all(|(&g, &v)| g == v * alpha), "scale n={n}");
        check_tail("scale", &got, n);

        check_axpy_and_copy(&gpu, &xs, &ys, alpha);

        let mut x = gpu.upload(&padded).unwrap();
        clamp_inplace(&gpu, &mut x, clamp_inplace::Params::new(n as u32, -1.0, 2.0)).unwrap();
        let got = x.read(&gpu).unwrap();
        assert!(got[..n].iter().zip(&xs).all(|(&g, &v)| g == v.clamp(-1.0, 2.0)), "clamp n={n}");
        check_tail("clamp_inplace", &got, n);
    }
}

/// Lengths around the reductions' chunk of 4096 values per workgroup, and 4096² + 1 values:
/// three passes, the second from scratch buffer `a` into `b`.
#[test]
fn reductions_around_the_chunk() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("reductions chunk");
    for n in [4095usize, 4096, 4097, 3 * 4096 + 4000, 4096 * 4096 + 1] {
        let xs = uniform(&mut rng, n, -1.0, 1.0);
        let x = gpu.upload(&xs).unwrap();
        let mut scratch = ReduceScratch::new(&gpu, n).unwrap();
        let mut out = gpu.filled(1, f32::NAN).unwrap();
        ops::reduce_sum_into(&gpu, &x, n, &mut out, &mut scratch).unwrap();
        let got = out.read(&gpu).unwrap()[0];
        let want: f64 = xs.iter().map(|&v| v as f64).sum();
        let scale: f64 = xs.iter().map(|&v| (v as f64).abs()).sum();
        assert!((got as f64 - want).abs() <= 1e-6 * scale, "sum n={n}: {got} vs {want}");
        let mut again = gpu.filled(1, f32::NAN).unwrap();
        ops::reduce_sum_into(&gpu, &x, n, &mut again, &mut scratch).unwrap();
        assert_eq!(got.to_bits(), again.read(&gpu).unwrap()[0].to_bits(), "sum n={n} not deterministic");

        let mut out = gpu.filled(1, f32::NAN).unwrap();
        let batch = gpu.batch();
        ops::reduce_max_into(&batch, &x, n, &mut out, &mut scratch).unwrap();
        assert_eq!(batch.dispatches(), ops::reduce_passes(n), "passes n={n}");
        batch.submit().unwrap();
        let want = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(out.read(&gpu).unwrap()[0], want, "max n={n}");
    }
    assert_eq!(
        [0, 1, 4096, 4097, 4096 * 4096, 4096 * 4096 + 1, 1 << 28].map(ops::reduce_passes),
        [1, 1, 1, 2, 2, 3, 3]
    );
}

/// The chunked kernels under a 2-D grid. On this adapter their own grids stay 1-D (a 2-D grid
/// needs more than 65535 chunks of 2048 or 4096 values, past the 128 MiB binding limit), so
/// dispatch an explicit (4, 2, 1) grid through the untyped API: 8 workgroups for 6 chunks, laid
/// out as the runtime's fallback lays out a long 1-D grid (index = x + y·4, the last two idle).
#[test]
fn chunked_kernels_on_a_2d_grid() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("chunked 2-D");
    use kernels::__private::bytemuck::bytes_of as bytes;

    let n = 5 * 2048 + 7;
    let xs = uniform(&mut rng, n, -4.0, 4.0);
    let mut padded = xs.clone();
    padded.extend([f32::NAN; TAIL]);
    let x = gpu.upload(&padded).unwrap();
    let params = scale::Params::new(n as u32, -1.5);
    let call = Call {
        kernel: &scale::KERNEL,
        grid: Grid::Explicit([4, 2, 1]),
        args: &[Arg::storage(&x, true), Arg::uniform(bytes(&params))],
        overrides: &[],
    };
    (&gpu).record(call).unwrap();
    let got = x.read(&gpu).unwrap();
    assert!(got[..n].iter().zip(&xs).all(|(&g, &v)| g == v * -1.5), "scale on a 2-D grid");
    check_tail("scale on a 2-D grid", &got, n);

    let n = 5 * 4096 + 3;
    let xs = uniform(&mut rng, n, -1.0, 1.0);
    let x = gpu.upload(&xs).unwrap();
    let out = gpu.filled(8, f32::NAN).unwrap();
    let n32 = n as u32;
    let call = Call {
        kernel: &kernels::infrastructure::reduce_sum::KERNEL,
        grid: Grid::Explicit([4, 2, 1]),
        args: &[Arg::storage(&x, false), Arg::storage(&out, true), Arg::uniform(bytes(&n32))],
        overrides: &[],
    };
    (&gpu).record(call).unwrap();
    let got = out.read(&gpu).unwrap();
    for (w, chunk) in xs.chunks(4096).enumerate() {
        let want: f64 = chunk.iter().map(|&v| v as f64).sum();
        let scale: f64 = chunk.iter().map(|&v| (v as f64).abs()).sum();
        assert!((got[w] as f64 - want).abs() <= 1e-6 * scale, "partial {w} on a 2-D grid: {} vs {want}", got[w]);
    }
    assert!(got[6..].iter().all(|v| v.is_nan()), "idle workgroups wrote");
}

/// The typed calls on a device whose grid is limited to 4 workgroups per dimension: every
/// length past 4 workgroups runs through the runtime's 2-D fallback.
#[test]
fn typed_calls_through_the_2d_fallback() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().max_workgroups_per_dimension(4)) else {
        return;
    };
    let mut rng = rng("2-D fallback");
    for n in [5 * 2048 + 3, 12 * 2048, 16 * 2048] {
        let xs = uniform(&mut rng, n, -2.0, 2.0);
        let ys = uniform(&mut rng, n, -2.0, 2.0);
        let x = gpu.upload(&xs).unwrap();
        let mut y = gpu.upload(&ys).unwrap();
        axpy(&gpu, &x, &mut y, axpy::Params::new(n as u32, 0.5)).unwrap();
        scale(&gpu, &mut y, scale::Params::new(n as u32, -2.0)).unwrap();
        let want: Vec<f64> = xs.iter().zip(&ys).map(|(&x, &y)| -2.0 * (y as f64 + 0.5 * x as f64)).collect();
        assert_close(&format!("axpy+scale n={n}"), &y.read(&gpu).unwrap(), &want, 1e-6);
        let mut z = gpu.filled(n, f32::NAN).unwrap();
        copy(&gpu, &x, &mut z, n as u32).unwrap();
        assert_eq!(z.read(&gpu).unwrap(), xs);
    }
    // Past 4 × 4 workgroups even two dimensions are not enough: an error, not a wrong result.
    let mut big = gpu.zeros::<f32>(16 * 2048 + 1).unwrap();
    let e = scale(&gpu, &mut big, scale::Params::new(16 * 2048 + 1, 2.0)).unwrap_err();
    assert!(matches!(e, kernels::Error::GridTooLarge { limit: 4, .. }), "{e:?}");
    // A whole-array reduction over more chunks than fit in one dimension.
    let n = 15 * kernels::ops::REDUCE_CHUNK + 17;
    let xs = uniform(&mut rng, n, -1.0, 1.0);
    let x = gpu.upload(&xs).unwrap();
    let mut scratch = ReduceScratch::new(&gpu, n).unwrap();
    let mut out = gpu.filled(1, f32::NAN).unwrap();
    ops::reduce_sum_into(&gpu, &x, n, &mut out, &mut scratch).unwrap();
    let want: f64 = xs.iter().map(|&v| v as f64).sum();
    let got = out.read(&gpu).unwrap()[0] as f64;
    assert!((got - want).abs() <= 1e-5 * xs.iter().map(|v| v.abs() as f64).sum::<f64>(), "{got} vs {want}");
}

/// The pipeline cache holds at most its capacity: the least recently used pipeline (one per
/// kernel and override values) is dropped, and built again, correctly, when called again.
#[test]
fn pipeline_cache_is_bounded() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().pipeline_cache_capacity(3)) else {
        return;
    };
    let mut rng = rng("pipeline cache");
    let n = 300;
    let run = |scale: f32| {
        let mut out = gpu.filled(n, f32::NAN).unwrap();
        tuned(&gpu, &mut out, n as u32, tuned::Overrides { SCALE: Some(scale) }).unwrap();
        let got = out.read(&gpu).unwrap();
        for (i, &v) in got.iter().enumerate() {
            assert_eq!(v, scale * i as f32, "SCALE={scale}: out[{i}]");
        }
    };
    // Distinct scales, none with an exact binary form shared by another.
    let scales: Vec<f32> = (0..12).map(|i| i as f32 + rng.random_range(0.01..0.99f32)).collect();
    let start = gpu.pipeline_stats();
    assert_eq!((start.cached, start.capacity, start.built, start.evicted), (0, 3, 0, 0));
    for (i, &s) in scales.iter().enumerate() {
        run(s);
        let stats = gpu.pipeline_stats();
        assert!(stats.cached <= 3, "{stats:?}");
        assert_eq!(stats.built, i as u64 + 1, "one pipeline per override value: {stats:?}");
        assert_eq!(stats.evicted, (i as u64 + 1).saturating_sub(3), "{stats:?}");
    }
    // The three most recent are still there: no build.
    run(scales[11]);
    run(scales[9]);
    assert_eq!(gpu.pipeline_stats().built, 12);
    // The first was dropped long ago: built again, and right.
    run(scales[0]);
    let stats = gpu.pipeline_stats();
    assert_eq!((stats.cached, stats.built, stats.evicted), (3, 13, 10), "{stats:?}");
    // scales[9] and [11] were used after [10]: [10] went, the others stay.
    run(scales[11]);
    run(scales[9]);
    assert_eq!(gpu.pipeline_stats().built, 13);
    run(scales[10]);
    assert_eq!(gpu.pipeline_stats().built, 14);
}

/// The report says whether tensor cores are on and which configurations the adapter offers;
/// `cooperative_matrix: false` turns them off.
#[test]
fn adapter_report_lists_tensor_cores() {
    let Some(gpu) = gpu() else { return };
    let report = gpu.report();
    let text = report.to_string();
    eprintln!("adapter: {text}");
    let coop = kernels::wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    assert_eq!(report.cooperative_matrix, gpu.features().contains(coop));
    assert_eq!(report.cooperative_matrix, !gpu.cooperative_matrices().is_empty());
    if report.cooperative_matrix {
        assert!(text.contains("tensor cores: on ("), "{text}");
        for c in gpu.cooperative_matrices() {
            assert!(report.cooperative_matrix_configs.contains(c) && text.contains(&c.to_string()), "{text}");
        }
    } else if report.cooperative_matrix_configs.is_empty() {
        assert!(text.contains("tensor cores: none"), "{text}");
    } else {
        assert!(text.contains("tensor cores: off ("), "{text}");
    }
    if report.name.contains("llvmpipe") {
        assert!(!report.cooperative_matrix && report.cooperative_matrix_configs.is_empty(), "{text}");
    }
    let Some(off) = gpu_with(GpuOptions::from_env().cooperative_matrix(false)) else { return };
    let off_text = off.report().to_string();
    assert!(!off.report().cooperative_matrix && !off.features().contains(coop), "{off_text}");
    assert_eq!(off.report().cooperative_matrix_configs, report.cooperative_matrix_configs);
    if !report.cooperative_matrix_configs.is_empty() {
        assert!(off_text.contains("tensor cores: off (turned off by KERNELS_COOPERATIVE_MATRIX=0"), "{off_text}");
    }
}

/// Everything wgpu holds for a context, by the hub report of the instance it came from: after
/// the last handle (a `Gpu` clone or a buffer) drops, no device, queue, buffer, pipeline, bind
/// group or encoder of it is left, so wgpu destroys the device. (A leaked reference to any of
/// them — the uniform pool once leaked one per submission — keeps the device alive.)
#[test]
fn a_context_releases_everything_when_its_last_handle_drops() {
    use kernels::wgpu;
    if gpu().is_none() {
        return;
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
        .expect("an adapter (common::gpu found one)");
    let live = |what: &str| {
        let hub = instance.generate_report().expect("a wgpu-core instance").hub;
        let kinds = [
            ("devices", hub.devices),
            ("queues", hub.queues),
            ("buffers", hub.buffers),
            ("bind groups", hub.bind_groups),
            ("bind group layouts", hub.bind_group_layouts),
            ("pipeline layouts", hub.pipeline_layouts),
            ("shader modules", hub.shader_modules),
            ("compute pipelines", hub.compute_pipelines),
            ("command encoders", hub.command_encoders),
            ("command buffers", hub.command_buffers),
            ("query sets", hub.query_sets),
        ];
        let left: Vec<String> = kinds
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(k, r)| format!("{k}: {}", r.num_allocated + r.num_kept_from_user))
            .collect();
        eprintln!("{what}: {left:?}");
        left
    };
    let gpu = pollster::block_on(Gpu::from_adapter(adapter, &GpuOptions::from_env())).unwrap();
    let mut rng = rng("release");
    let xs = uniform(&mut rng, 5000, -1.0, 1.0);
    let x = gpu.upload(&xs).unwrap();
    let mut y = gpu.filled(5000, f32::NAN).unwrap();
    // Single calls and a batch (both submit through the uniform pool), reads, a profile.
    copy(&gpu, &x, &mut y, 5000).unwrap();
    let batch = gpu.batch();
    for _ in 0..3 {
        scale(&batch, &mut y, scale::Params::new(5000, 2.0)).unwrap();
    }
    batch.submit().unwrap();
    if gpu.features().contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES) {
        let batch = gpu.profiled_batch(4).unwrap();
        axpy(&batch, &x, &mut y, axpy::Params::new(5000, 1.0)).unwrap();
        assert_eq!(batch.submit_profiled().unwrap().dispatches.len(), 1);
    } else {
        axpy(&gpu, &x, &mut y, axpy::Params::new(5000, 1.0)).unwrap();
    }
    let want: Vec<f64> = xs.iter().map(|&v| 9.0 * v as f64).collect();
    assert_close("release", &y.read(&gpu).unwrap(), &want, 1e-6);
    assert_eq!(y.read_range(&gpu, 7..9).unwrap().len(), 2);
    gpu.wait().unwrap();
    // A buffer keeps its context alive.
    drop((gpu, x));
    assert!(live("with one buffer left").iter().any(|k| k.starts_with("devices")));
    drop(y);
    let left = live("after the last handle");
    assert!(left.is_empty(), "wgpu objects outlive their context: {left:?}");
}

/// The last handle of context B dropped inside a wgpu callback that runs while context A is
/// dropped: B's drop must not wait for the lock A's drop holds on the same thread. Run on a
/// thread with a timeout, so that a regression fails instead of hanging.
#[test]
fn a_context_dropped_inside_a_callback_of_another_does_not_deadlock() {
    if gpu().is_none() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (a, b) = (gpu().unwrap(), gpu().unwrap());
        let mut x = a.upload(&[1.0f32; 256]).unwrap();
        scale(&a, &mut x, scale::Params::new(256, 2.0)).unwrap();
        // B lives on only in a buffer that rides in A's callback, which runs when A's drop
        // waits for A's work.
        let last_of_b = b.upload(&[1.0f32; 4]).unwrap();
        drop(b);
        let (ran_tx, ran_rx) = std::sync::mpsc::channel();
        a.queue().on_submitted_work_done(move || {
            drop(last_of_b);
            let _ = ran_tx.send(());
        });
        drop((x, a));
        let ran = ran_rx.try_recv().is_ok();
        let _ = tx.send(ran);
    });
    let ran = rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("dropping a context inside a callback of another one deadlocked");
    assert!(ran, "the callback ran during the drop");
}

/// A context whose drop is waiting for its GPU work does not hold up `Gpu::new` on another
/// thread: A's drop is held inside its wait (by a callback that blocks until another context
/// has opened); were the lifecycle lock held meanwhile, the open could not finish and the
/// callback would give up after a minute.
#[test]
fn opening_a_context_is_not_held_up_by_one_that_drops() {
    if gpu().is_none() {
        return;
    }
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let (entered_tx, entered_rx) = channel();
    let (opened_tx, opened_rx) = channel::<()>();
    let (verdict_tx, verdict_rx) = channel();
    let dropper = std::thread::spawn(move || {
        let a = gpu().unwrap();
        let mut x = a.upload(&[1.0f32; 4096]).unwrap();
        scale(&a, &mut x, scale::Params::new(4096, 2.0)).unwrap();
        a.queue().on_submitted_work_done(move || {
            let _ = entered_tx.send(());
            let _ = verdict_tx.send(opened_rx.recv_timeout(Duration::from_secs(60)).is_ok());
        });
        drop((x, a));
    });
    entered_rx.recv_timeout(Duration::from_secs(300)).expect("the dropping context never waited for its work");
    let opener = std::thread::spawn(move || {
        let b = gpu().unwrap();
        let mut y = b.upload(&[3.0f32; 4]).unwrap();
        scale(&b, &mut y, scale::Params::new(4, 2.0)).unwrap();
        assert_eq!(y.read(&b).unwrap(), vec![6.0; 4]);
        let _ = opened_tx.send(());
    });
    let opened = verdict_rx.recv_timeout(Duration::from_secs(300)).expect("the callback never answered");
    opener.join().unwrap();
    dropper.join().unwrap();
    assert!(opened, "Gpu::new on another thread waited for a context that was dropping");
}
