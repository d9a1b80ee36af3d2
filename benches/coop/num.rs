//! Numbers for the cooperative-matrix sweep: f16 conversion (round to nearest even), a seeded
//! generator, operands in the three layouts, and the float64 reference with the error metric
//! max |c − Σab| / Σ|a||b|.
#![allow(dead_code)]

use super::kernel::{Layout, Shape};

/// f32 → IEEE binary16 bits, round to nearest even; overflow gives ±inf, NaN stays NaN.
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal (or zero) in f16: the value in units of 2^-24 is m24 >> (126 - exp).
        let shift = (126 - exp) as u32;
        if shift > 25 {
            return sign;
        }
        let m24 = man | 0x80_0000;
        let q = m24 >> shift;
        let rem = m24 & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        let up = rem > half || (rem == half && q & 1 == 1);
        return sign | (q + up as u32) as u16;
    }
    let q = man >> 13;
    let rem = man & 0x1fff;
    let up = rem > 0x1000 || (rem == 0x1000 && q & 1 == 1);
    sign | (((e as u32) << 10 | q) + up as u32) as u16
}

/// IEEE binary16 bits → f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    match exp {
        0 => sign * man as f32 * (1.0 / 16_777_216.0),
        0x1f => {
            if man == 0 {
                sign * f32::INFINITY
            } else {
                f32::NAN
            }
        }
        _ => f32::from_bits(((h as u32 & 0x8000) << 16) | ((exp + 127 - 15) << 23) | (man << 13)),
    }
}

/// x rounded to the nearest f16, as f32 (what `quantizeToF16` and `vec4<f16>(x)` give).
pub fn q16(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
}

/// hi/lo split of x: hi = q16(x), lo = q16((x − hi)·scale).
pub fn split(x: f32, scale: f32) -> (f32, f32) {
    let hi = q16(x);
    (hi, q16((x - hi) * scale))
}

/// xorshift64*: fast, seeded, good enough for test data.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * n as u64) >> 32) as u32
    }
}

/// Operands of one problem in their stored layouts (leading dimensions included); padding
/// columns are NaN, so a kernel that reads them into a product is caught.
#[derive(Clone)]
pub struct Operands {
    pub shape: Shape,
    pub layout: Layout,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    /// Initial C of the accumulate epilogues ([M, ldc], pad NaN).
    pub c0: Vec<f32>,
}

impl Operands {
    pub fn random(shape: Shape, layout: Layout, rng: &mut Rng, scale: f32) -> Operands {
        let fill = |rows: u32, cols: u32, ld: u32, rng: &mut Rng| {
            let mut v = vec![f32::NAN; rows as usize * ld as usize];
            for r in 0..rows as usize {
                for c in 0..cols as usize {
                    v[r * ld as usize + c] = rng.sym() * scale;
                }
            }
            v
        };
        let s = shape;
        let (ar, ac) = if layout.a_k_major() { (s.k, s.m) } else { (s.m, s.k) };
        let (br, bc) = if layout.b_k_major() { (s.k, s.n) } else { (s.n, s.k) };
        let a = fill(ar, ac, s.lda, rng);
        let b = fill(br, bc, s.ldb, rng);
        let c0 = fill(s.m, s.n, s.ldc, rng);
        Operands { shape, layout, a, b, c0 }
    }

    /// A(i, k) of the product.
    pub fn a_at(&self, i: usize, k: usize) -> f32 {
        let ld = self.shape.lda as usize;
        if self.layout.a_k_major() { self.a[k * ld + i] } else { self.a[i * ld + k] }
    }
    /// B(k, j) of the product.
    pub fn b_at(&self, k: usize, j: usize) -> f32 {
        let ld = self.shape.ldb as usize;
        if self.layout.b_k_major() { self.b[k * ld + j] } else { self.b[j * ld + k] }
    }

    /// (Σ a·b in float64, Σ|a||b|) of output (i, j), from the f32 operands.
    pub fn reference(&self, i: usize, j: usize) -> (f64, f64) {
        let (mut s, mut abs) = (0.0f64, 0.0f64);
        for k in 0..self.shape.k as usize {
            let p = self.a_at(i, k) as f64 * self.b_at(k, j) as f64;
            s += p;
            abs += p.abs();
        }
        (s, abs)
    }
}

/// Outcome of comparing a result with the reference.
#[derive(Clone, Debug, Default)]
pub struct Check {
    /// max |c − ref| / (Σ|a||b| (+ |c0|)) over the sampled outputs.
    pub max_err: f64,
    pub samples: usize,
    /// Non-finite values anywhere in the valid M×N region.
    pub nonfinite: usize,
    /// Padding columns of C that changed (they must stay as they were).
    pub pad_changed: usize,
    /// The first few mismatches, "(i, j): got g, want w".
    pub worst: String,
}

impl Check {
    pub fn ok(&self, tol: f64) -> bool {
        self.nonfinite == 0 && self.pad_changed == 0 && self.max_err <= tol
    }
}

/// The outputs to compare: `count` random ones plus the four corners, the last row and
/// column (sampled) and, for small problems, all of them.
pub fn sample_points(shape: &Shape, count: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
    let (m, n) = (shape.m as usize, shape.n as usize);
    if m * n * shape.k as usize <= 1 << 24 {
        return (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).collect();
    }
    let mut pts: Vec<(usize, usize)> = vec![(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)];
    for _ in 0..count {
        pts.push((rng.below(m as u32) as usize, rng.below(n as u32) as usize));
    }
    for t in 0..64 {
        pts.push((m - 1, t * n / 64));
        pts.push((t * m / 64, n - 1));
    }
    pts
}

/// Compares `got` ([M, ldc]) with the reference at `pts` (computed on `threads` threads), scans
/// the whole valid region for non-finite values and the padding for changes against `before`.
pub fn check(
    ops: &Operands,
    got: &[f32],
    before: &[f32],
    accumulate: bool,
    pts: &[(usize, usize)],
    threads: usize,
) -> Check {
    let s = ops.shape;
    let ldc = s.ldc as usize;
    let mut out = Check { samples: pts.len(), ..Default::default() };
    for i in 0..s.m as usize {
        let row = &got[i * ldc..(i + 1) * ldc];
        out.nonfinite += row[..s.n as usize].iter().filter(|x| !x.is_finite()).count();
        for j in s.n as usize..ldc {
            if row[j].to_bits() != before[i * ldc + j].to_bits() {
                out.pad_changed += 1;
            }
        }
    }
    let threads = threads.max(1);
    let chunk = pts.len().div_ceil(threads).max(1);
    let errs: Vec<(f64, String)> = std::thread::scope(|sc| {
        let hs: Vec<_> = pts
            .chunks(chunk)
            .map(|part| {
                sc.spawn(move || {
                    let mut worst = (0.0f64, String::new());
                    for &(i, j) in part {
                        let (mut want, mut den) = ops.reference(i, j);
                        if accumulate {
                            let c0 = ops.c0[i * ldc + j] as f64;
                            want += c0;
                            den += c0.abs();
                        }
                        let g = got[i * ldc + j] as f64;
                        let err =
                            if g.is_finite() { (g - want).abs() / den.max(f64::MIN_POSITIVE) } else { f64::INFINITY };
                        if err > worst.0 || worst.1.is_empty() {
                            worst = (err, format!("({i}, {j}): got {g}, want {want}"));
                        }
                    }
                    worst
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (e, w) in errs {
        if e > out.max_err || out.worst.is_empty() {
            out.max_err = e;
            out.worst = w;
        }
    }
    out
}
