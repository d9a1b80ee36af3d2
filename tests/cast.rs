//! The cast kernels (`shaders/08_cast.wgsl`): f32 → f16 against float64 (2e-3) and against the
//! nearest f16, clamping at ±65504 (values beyond, ±Inf), NaN kept; f16 → f32 exactly; the
//! f16x4 matrices' transposes (`ops::Transposes`) bit for bit.

mod common;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{TAIL, assert_close, gpu, has_f16, rng, uniform};
use kernels::cast::{cast_f16_to_f32, cast_f32_to_f16};
use kernels::{Gpu, f16};
use rand::Rng;

const LENGTHS: [usize; 6] = [1, 255, 257, 1000, 65_537, 300_001];

fn to_f16(gpu: &Gpu, xs: &[f32]) -> Vec<f16> {
    let n = xs.len();
    let src = gpu.upload(xs).unwrap();
    let mut dst = gpu.filled(n + TAIL, f16::NAN).unwrap();
    cast_f32_to_f16(gpu, &src, &mut dst, cast_f32_to_f16::Params::new(n as u32)).unwrap();
    let got = dst.read(gpu).unwrap();
    assert!(got[n..].iter().all(|v| v.is_nan()), "cast_f32_to_f16: elements past n were written");
    got[..n].to_vec()
}

fn to_f32(gpu: &Gpu, xs: &[f16]) -> Vec<f32> {
    let n = xs.len();
    let src = gpu.upload(xs).unwrap();
    let mut dst = gpu.filled(n + TAIL, f32::NAN).unwrap();
    cast_f16_to_f32(gpu, &src, &mut dst, cast_f16_to_f32::Params::new(n as u32)).unwrap();
    let got = dst.read(gpu).unwrap();
    assert!(got[n..].iter().all(|v| v.is_nan()), "cast_f16_to_f32: elements past n were written");
    got[..n].to_vec()
}

/// Whether `got` is the f16 nearest to `x` or its neighbour on the other side of `x` (WGSL
/// allows either).
fn is_a_neighbour(x: f32, got: f16) -> bool {
    let near = f16::from_f32(x);
    if got == near {
        return true;
    }
    let (lo, hi) = if near.to_f32() > x {
        (f16::from_bits(if near.to_f32() > 0.0 { near.to_bits() - 1 } else { near.to_bits() + 1 }), near)
    } else {
        (near, f16::from_bits(if near.to_f32() >= 0.0 { near.to_bits() + 1 } else { near.to_bits() - 1 }))
    };
    got == lo || got == hi
}

#[test]
fn cast_f32_to_f16_matches_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the casts") {
        return;
    }
    let mut rng = rng("cast_f32_to_f16");
    for n in LENGTHS {
        // Values over many binades: ±[1e-3, 1e3] log-uniform.
        let xs: Vec<f32> = uniform(&mut rng, n, -3.0, 3.0)
            .into_iter()
            .map(|e| 10f32.powf(e) * if rng.random_bool(0.5) { 1.0 } else { -1.0 })
            .collect();
        let got = to_f16(&gpu, &xs);
        let got32: Vec<f32> = got.iter().map(|v| v.to_f32()).collect();
        let want: Vec<f64> = xs.iter().map(|&x| reference::cast_to_f16_range(x as f64)).collect();
        assert_close(&format!("cast_f32_to_f16 n={n}"), &got32, &want, 2e-3);
        for (&x, &g) in xs.iter().zip(&got) {
            assert!(is_a_neighbour(x, g), "cast_f32_to_f16({x:e}) = {g} is not a neighbouring f16");
        }
    }
}

#[test]
fn cast_f32_to_f16_clamps_and_keeps_nan() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the casts") {
        return;
    }
    let max = 65504.0f32;
    let cases: [(f32, f32); 16] = [
        (max, max),
        (-max, -max),
        (65519.0, max), // rounds to Inf without the clamp
        (65520.0, max),
        (70000.0, max),
        (-70000.0, -max),
        (1e10, max),
        (-1e30, -max),
        (f32::MAX, max),
        (f32::MIN, -max),
        (f32::INFINITY, max),
        (f32::NEG_INFINITY, -max),
        (1.0, 1.0),
        (-2.5, -2.5),
        (0.0, 0.0),
        (6.103_515_6e-5, 6.103_515_6e-5), // the smallest normal f16
    ];
    let xs: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let got = to_f16(&gpu, &xs);
    for ((x, want), g) in cases.iter().zip(&got) {
        assert_eq!(g.to_f32(), *want, "cast_f32_to_f16({x:e})");
    }
    // -0 keeps its sign.
    assert_eq!(to_f16(&gpu, &[-0.0])[0].to_bits(), 0x8000);
    // NaN stays NaN (quiet, signalling, either sign), among ordinary values.
    let nans = [f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xffc0_1234)];
    let mut xs = vec![3.0f32];
    xs.extend(nans);
    xs.push(-3.0);
    let got = to_f16(&gpu, &xs);
    assert_eq!(got[0].to_f32(), 3.0);
    assert!(got[1..5].iter().all(|v| v.is_nan()), "NaN not kept: {got:?}");
    assert_eq!(got[5].to_f32(), -3.0);
}

#[test]
fn cast_f16_to_f32_is_exact() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the casts") {
        return;
    }
    let mut rng = rng("cast_f16_to_f32");
    for n in LENGTHS {
        // Random finite, normal f16 bit patterns (every binade, both signs).
        let xs: Vec<f16> = (0..n)
            .map(|_| {
                loop {
                    let v = f16::from_bits(rng.random());
                    if v.is_finite() && (v.is_normal() || v == f16::ZERO) {
                        break v;
                    }
                }
            })
            .collect();
        let got = to_f32(&gpu, &xs);
        let want: Vec<f64> = xs.iter().map(|v| v.to_f64()).collect();
        assert_close(&format!("cast_f16_to_f32 n={n}"), &got, &want, 1e-7);
        assert!(got.iter().zip(&xs).all(|(&g, v)| g == v.to_f32()), "cast_f16_to_f32 n={n}: not exact");
    }
    // Specials: ±Inf, NaN, ±max, -0; subnormals exact or flushed to a zero of the same sign.
    let specials = [f16::INFINITY, f16::NEG_INFINITY, f16::MAX, f16::MIN, f16::NEG_ZERO];
    let got = to_f32(&gpu, &specials);
    for (g, v) in got.iter().zip(&specials) {
        assert_eq!(g.to_bits(), v.to_f32().to_bits(), "cast_f16_to_f32({v})");
    }
    assert!(to_f32(&gpu, &[f16::NAN])[0].is_nan());
    let subnormals = [f16::from_bits(0x0001), f16::from_bits(0x83ff)];
    for (g, v) in to_f32(&gpu, &subnormals).iter().zip(&subnormals) {
        let exact = *g == v.to_f32();
        let flushed = *g == 0.0 && g.is_sign_negative() == v.is_sign_negative();
        assert!(exact || flushed, "cast_f16_to_f32({v:e}) = {g:e}");
    }
}

#[test]
fn round_trip_within_f16_precision() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the casts") {
        return;
    }
    let mut rng = rng("cast_round_trip");
    let xs = uniform(&mut rng, 100_003, -100.0, 100.0);
    let back = to_f32(&gpu, &to_f16(&gpu, &xs));
    assert_close("f32 → f16 → f32", &back, &reference::widen(&xs), 2e-3);
}

#[test]
fn short_buffer_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let src = gpu.upload(&[1.0f32; 10]).unwrap();
    let mut dst = gpu.zeros::<f16>(9).unwrap();
    let e = cast_f32_to_f16(&gpu, &src, &mut dst, cast_f32_to_f16::Params::new(10)).unwrap_err();
    assert!(matches!(e, kernels::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(dst) >= p.n"), "{e}");
}

/// `[rows, cols]` in the f16x4 row layout from row-major values (padding zero).
fn rows16(values: &[f16], rows: usize, cols: usize) -> Vec<[f16; 4]> {
    let cq = cols.div_ceil(4);
    let mut out = vec![[f16::ZERO; 4]; rows * cq];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cq + c / 4][c % 4] = values[r * cols + c];
        }
    }
    out
}

#[test]
fn transposes_move_every_matrix_bit_for_bit() {
    use kernels::ops::{Transpose, Transposes, f16x4_len};
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the transposes") {
        return;
    }
    let mut rng = rng("transpose_f16x4");
    // Edge shapes: one row or column, widths not a multiple of 4, tiles cut at 64 both ways,
    // empty matrices (no tiles) between others, and a trainer-like weight.
    let shapes =
        [(1, 1), (3, 5), (64, 64), (0, 5), (65, 63), (4, 0), (130, 7), (1, 200), (200, 1), (96, 768), (77, 129)];
    let (mut src, mut items, mut want) = (Vec::new(), Vec::new(), Vec::new());
    let mut dst_at = 3; // destinations with gaps between them, the first not at 0
    for &(rows, cols) in &shapes {
        // Random bit patterns, NaN and ±Inf included: the transposes copy bits.
        let values: Vec<f16> = (0..rows * cols).map(|_| f16::from_bits(rng.random())).collect();
        // A few elements of junk before each source matrix.
        src.extend((0..rng.random_range(0..5)).map(|_| [f16::from_f32(7.0); 4]));
        items.push(Transpose { src: src.len(), dst: dst_at, rows, cols });
        src.extend(rows16(&values, rows, cols));
        let t: Vec<f16> = (0..cols * rows).map(|i| values[(i % rows) * cols + i / rows]).collect();
        want.push(rows16(&t, cols, rows));
        dst_at += f16x4_len(cols, rows) + 2;
    }
    let set = Transposes::new(&gpu, &items).unwrap();
    let poison = [f16::from_bits(0x7e01); 4];
    let src_buf = gpu.upload(&src).unwrap();
    let mut dst = gpu.filled(dst_at, poison).unwrap();
    let b = gpu.batch();
    set.record(&b, &src_buf, &mut dst).unwrap();
    b.submit().unwrap();
    let got = dst.read(&gpu).unwrap();
    let bits = |v: &[[f16; 4]]| v.iter().flatten().map(|h| h.to_bits()).collect::<Vec<u16>>();
    let mut covered = vec![false; dst_at];
    for ((item, want), shape) in items.iter().zip(&want).zip(&shapes) {
        let span = item.dst..item.dst + want.len();
        assert_eq!(bits(&got[span.clone()]), bits(want), "transpose of {shape:?}");
        covered[span].fill(true);
    }
    for (i, v) in got.iter().enumerate().filter(|(i, _)| !covered[*i]) {
        assert_eq!(bits(&[*v]), bits(&[poison]), "element {i} between the destinations was written");
    }

    // Overlapping destinations and short buffers are errors, not corrupted weights.
    let overlap = [Transpose { src: 0, dst: 0, rows: 8, cols: 8 }, Transpose { src: 0, dst: 15, rows: 8, cols: 8 }];
    assert!(Transposes::new(&gpu, &overlap).is_err());
    let b = gpu.batch();
    assert!(set.record(&b, &src_buf, &mut gpu.filled(dst_at - 3, poison).unwrap()).is_err());
    assert!(set.record(&b, &gpu.filled(src.len() - 1, poison).unwrap(), &mut dst).is_err());
}
