//! What the f16-output kernels are compared with: the separate casts they replace
//! (`cast::cast_f16x4`, `cast::cast_grad_f16x4` over the f32 kernels' outputs) and the f16x4 row
//! layout read back for the float64 references.
#![allow(dead_code)]

use kernels::ops::{self, F16x4};
use kernels::{Buffer, Gpu, f16};

/// Vec4s appended to every poisoned f16 output; they must stay NaN.
pub const TAIL16: usize = 3;

/// An f16x4 output of `[rows, cols]` and [`TAIL16`] vec4s more, all NaN.
pub fn poisoned16(gpu: &Gpu, rows: usize, cols: usize) -> Buffer<F16x4> {
    gpu.upload(&vec![[f16::NAN; 4]; ops::f16x4_len(rows, cols) + TAIL16]).unwrap()
}

/// A flag of two words, 0 and 7: the kernels may only set the first to 1.
pub fn flag(gpu: &Gpu) -> Buffer<u32> {
    gpu.upload(&[0u32, 7]).unwrap()
}

/// The flag's first word, after checking the second is untouched.
#[track_caller]
pub fn read_flag(gpu: &Gpu, flag: &Buffer<u32>, what: &str) -> u32 {
    let f = flag.read(gpu).unwrap();
    assert_eq!(f[1], 7, "{what}: wrote past the flag");
    f[0]
}

/// The `[rows, cols]` f16x4 output read back without its tail (checked still NaN).
#[track_caller]
pub fn read16(gpu: &Gpu, b: &Buffer<F16x4>, rows: usize, cols: usize, what: &str) -> Vec<F16x4> {
    let got = b.read(gpu).unwrap();
    let n = ops::f16x4_len(rows, cols);
    assert!(got[n..].iter().all(|v| v.iter().all(|h| h.is_nan())), "{what}: wrote past the output");
    got[..n].to_vec()
}

/// `cast::cast_grad_f16x4` of `src` `[rows, cols]`: (the halves, the flag it raised).
pub fn cast_grad(gpu: &Gpu, src: &Buffer<f32>, rows: usize, cols: usize) -> (Vec<F16x4>, u32) {
    let mut dst = poisoned16(gpu, rows, cols);
    let mut fl = flag(gpu);
    let p = kernels::cast::cast_grad_f16x4::CastParams::new(rows as u32, cols as u32);
    kernels::cast::cast_grad_f16x4(gpu, src, &mut dst, &mut fl, p).unwrap();
    (read16(gpu, &dst, rows, cols, "cast_grad_f16x4"), read_flag(gpu, &fl, "cast_grad_f16x4"))
}

/// `cast::cast_f16x4` of `src` `[rows, cols]`.
pub fn cast(gpu: &Gpu, src: &Buffer<f32>, rows: usize, cols: usize) -> Vec<F16x4> {
    let mut dst = poisoned16(gpu, rows, cols);
    kernels::cast::cast_f16x4(gpu, src, &mut dst, kernels::cast::cast_f16x4::RowsParams::new(rows as u32, cols as u32))
        .unwrap();
    read16(gpu, &dst, rows, cols, "cast_f16x4")
}

/// Asserts the same halves (any NaN equals any NaN: the casts keep NaN, not its payload).
#[track_caller]
pub fn same16(got: &[F16x4], want: &[F16x4], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for c in 0..4 {
            let same = g[c].to_bits() == w[c].to_bits() || (g[c].is_nan() && w[c].is_nan());
            assert!(same, "{what}: vec4 {i} lane {c}: {} vs {} (the separate cast's)", g[c], w[c]);
        }
    }
}

/// The `[rows, cols]` values of f16x4 rows, widened (exact), after checking the padding is 0.
#[track_caller]
pub fn widen16(v: &[F16x4], rows: usize, cols: usize, what: &str) -> Vec<f32> {
    let cq = cols.div_ceil(4);
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for c in 0..cq * 4 {
            let h = v[r * cq + c / 4][c % 4];
            if c < cols {
                out.push(h.to_f32());
            } else {
                assert_eq!(h.to_bits(), 0, "{what}: padding at row {r} column {c} is {h}");
            }
        }
    }
    out
}
