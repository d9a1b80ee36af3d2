//! Float64 CPU references of the tensor-core products in `shaders/lib/attention_f16.wgsl`, with the
//! scale of each output for the error metric: every result is (value, Σ|a||b|) per output, so a
//! test can check max |c − Σab| / Σ|a||b|, the metric of the products'
//! accuracy requirement (cuBLAS fp16→fp32's is in BENCHMARKS.md). Inputs are the values the GPU multiplies (already rounded to f16 where the
//! kernel reads f16). Layouts as the kernels: row-major, PyTorch's `[out, in]` for weights.
#![allow(dead_code)]

/// Per output: the float64 value and Σ|a·b| over its contraction (plus |y0| or |r| where a
/// value is added).
pub struct Product {
    pub value: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Product {
    /// `rows × cols` outputs, out[i][j] = Σ_p a(i, p)·b(p, j) over `p < len(i, j)`.
    pub fn new(
        rows: usize,
        cols: usize,
        len: impl Fn(usize, usize) -> usize,
        a: impl Fn(usize, usize) -> f64,
        b: impl Fn(usize, usize) -> f64,
    ) -> Product {
        let mut value = vec![0.0; rows * cols];
        let mut scale = vec![0.0; rows * cols];
        for i in 0..rows {
            for j in 0..cols {
                let (mut v, mut s) = (0.0, 0.0);
                for p in 0..len(i, j) {
                    let t = a(i, p) * b(p, j);
                    v += t;
                    s += t.abs();
                }
                value[i * cols + j] = v;
                scale[i * cols + j] = s;
            }
        }
        Product { value, scale }
    }

    /// The product plus `add` (a residual, or the previous contents of an accumulated output).
    pub fn plus(mut self, add: &[f32]) -> Product {
        assert_eq!(add.len(), self.value.len(), "plus: lengths differ");
        for (i, &r) in add.iter().enumerate() {
            self.value[i] += r as f64;
            self.scale[i] += (r as f64).abs();
        }
        self
    }

    /// Every output times `alpha`.
    pub fn times(mut self, alpha: f64) -> Product {
        for (v, s) in self.value.iter_mut().zip(&mut self.scale) {
            *v *= alpha;
            *s *= alpha.abs();
        }
        self
    }

    /// max over outputs of |got − value| / scale (scale 0: the absolute error); NaN or Inf in
    /// `got` gives infinity.
    pub fn max_error(&self, got: &[f32]) -> f64 {
        assert_eq!(got.len(), self.value.len(), "max_error: lengths differ");
        let mut worst = 0.0f64;
        for ((&g, &v), &s) in got.iter().zip(&self.value).zip(&self.scale) {
            if !g.is_finite() {
                return f64::INFINITY;
            }
            let e = (g as f64 - v).abs();
            worst = worst.max(if s > 0.0 { e / s } else { e });
        }
        worst
    }
}

/// `Y = X·Wᵀ`: X `[m, k]`, W `[n, k]`.
pub fn matmul_t(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Product {
    Product::new(m, n, |_, _| k, |i, p| x[i * k + p] as f64, |p, j| w[j * k + p] as f64)
}

/// `Y = X·W`: X `[m, k]`, W `[k, n]`.
pub fn matmul(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Product {
    Product::new(m, n, |_, _| k, |i, p| x[i * k + p] as f64, |p, j| w[p * n + j] as f64)
}

/// `Y = Xᵀ·B`: X `[m, k]`, B `[m, n]`, Y `[k, n]` (the contraction over the m rows).
pub fn matmul_at(x: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Product {
    Product::new(k, n, |_, _| m, |i, p| x[p * k + i] as f64, |p, j| b[p * n + j] as f64)
}

/// The attention shape: batch, sequence, query heads, key/value heads, head dim.
#[derive(Clone, Copy, Debug)]
pub struct Att {
    pub b: usize,
    pub s: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
}

impl Att {
    /// Keys query `s` meets in the fast path's products: up to the end of its 64-key tile.
    pub fn tile_end(&self, s: usize) -> usize {
        self.s.min(64 * (s / 64 + 1))
    }
}

/// Scores S[b,h,s,j] = scale Σ_d Q[b,s,h,d] K[b,j,kvh,d] for every (s, j) (callers compare the
/// causal part), `[B, H, S, S]`.
pub fn scores(q: &[f32], k: &[f32], a: Att, scale: f64) -> Product {
    let mut value = Vec::new();
    let mut sc = Vec::new();
    for b in 0..a.b {
        for h in 0..a.h {
            let kvh = h / (a.h / a.hkv);
            let p = Product::new(
                a.s,
                a.s,
                |_, _| a.d,
                |s, d| q[((b * a.s + s) * a.h + h) * a.d + d] as f64,
                |d, j| k[((b * a.s + j) * a.hkv + kvh) * a.d + d] as f64,
            )
            .times(scale);
            value.extend(p.value);
            sc.extend(p.scale);
        }
    }
    Product { value, scale: sc }
}

/// Y[b,s,h,:] = alpha Σ_{j < tile_end(s)} P[b,h,s,j] X[b,j,kvh,:], `[B, S, H, Dh]`.
pub fn pv(probs: &[f32], x: &[f32], a: Att, alpha: f64) -> Product {
    let (sq, hd) = (a.s, a.h * a.d);
    let mut value = vec![0.0; a.b * sq * hd];
    let mut sc = vec![0.0; a.b * sq * hd];
    for b in 0..a.b {
        for h in 0..a.h {
            let kvh = h / (a.h / a.hkv);
            let p = Product::new(
                sq,
                a.d,
                |s, _| a.tile_end(s),
                |s, j| probs[((b * a.h + h) * sq + s) * sq + j] as f64,
                |j, d| x[((b * sq + j) * a.hkv + kvh) * a.d + d] as f64,
            )
            .times(alpha);
            for s in 0..sq {
                for d in 0..a.d {
                    let o = (b * sq + s) * hd + h * a.d + d;
                    value[o] = p.value[s * a.d + d];
                    sc[o] = p.scale[s * a.d + d];
                }
            }
        }
    }
    Product { value, scale: sc }
}

/// Y[b,j,kvh,:] = alpha Σ_g Σ_{s ≥ 64⌊j/64⌋} P[b,h_g,s,j] X[b,s,h_g,:] with h_g = kvh·(H/Hkv) + g,
/// `[B, S, Hkv, Dh]`.
pub fn ptx(probs: &[f32], x: &[f32], a: Att, alpha: f64) -> Product {
    let sq = a.s;
    let group = a.h / a.hkv;
    let mut value = vec![0.0; a.b * sq * a.hkv * a.d];
    let mut sc = vec![0.0; a.b * sq * a.hkv * a.d];
    for b in 0..a.b {
        for kvh in 0..a.hkv {
            for j in 0..sq {
                let first = 64 * (j / 64);
                for d in 0..a.d {
                    let (mut v, mut s_abs) = (0.0, 0.0);
                    for g in 0..group {
                        let h = kvh * group + g;
                        for s in first..sq {
                            let t = probs[((b * a.h + h) * sq + s) * sq + j] as f64
                                * x[((b * sq + s) * a.h + h) * a.d + d] as f64;
                            v += t;
                            s_abs += t.abs();
                        }
                    }
                    let o = ((b * sq + j) * a.hkv + kvh) * a.d + d;
                    value[o] = alpha * v;
                    sc[o] = alpha.abs() * s_abs;
                }
            }
        }
    }
    Product { value, scale: sc }
}
