//! Float64 CPU references for RoPE and causal grouped-query attention (forward, decode,
//! backward), and the attention tests' shapes and random inputs. Plain functions over row-major
//! slices, batch first: Q, O, dO `[B, S, H, Dh]`, K, V `[B, S, Hkv, Dh]`, lse `[B, H, S]`; query
//! head `h` reads kv head `h / (H / Hkv)`; causal (query `s` sees keys `0..=s`).
#![allow(dead_code)]

use rand::Rng;
use rand::rngs::StdRng;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// `Shape { batch, seq, heads, kv_heads, head_dim }`.
pub fn shape(batch: usize, seq: usize, heads: usize, kv_heads: usize, head_dim: usize) -> Shape {
    Shape { batch, seq, heads, kv_heads, head_dim }
}

/// Host copies of an attention call's inputs, and of an upstream gradient dO.
pub struct Inputs {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub d_o: Vec<f32>,
}

/// Random inputs for `sh`: scores q·k/√Dh with a standard deviation around 1.3, so the softmax is
/// neither flat nor one-hot.
pub fn inputs(rng: &mut StdRng, sh: Shape) -> Inputs {
    let mut uniform = |n: usize, r: f32| (0..n).map(|_| rng.random_range(-r..r)).collect::<Vec<f32>>();
    Inputs {
        q: uniform(sh.q_len(), 2.0),
        k: uniform(sh.kv_len(), 2.0),
        v: uniform(sh.kv_len(), 1.0),
        d_o: uniform(sh.q_len(), 1.0),
    }
}

/// `v` through f16 and back: the operand values the f16 forms multiply.
pub fn halves(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| kernels::f16::from_f32(x).to_f32()).collect()
}

/// `v` (rows of `cols`) uploaded in the f16x4 row layout the f16 forms read.
pub fn upload16(gpu: &kernels::Gpu, v: &[f32], cols: usize) -> kernels::Buffer<kernels::ops::F16x4> {
    gpu.upload(&kernels::ops::to_f16x4(v, v.len() / cols, cols)).unwrap()
}

impl Shape {
    /// Elements of Q (and O, dO, dQ).
    pub fn q_len(&self) -> usize {
        self.batch * self.seq * self.heads * self.head_dim
    }
    /// Elements of K (and V, dK, dV).
    pub fn kv_len(&self) -> usize {
        self.batch * self.seq * self.kv_heads * self.head_dim
    }
    /// Elements of lse (and Δ).
    pub fn rows(&self) -> usize {
        self.batch * self.heads * self.seq
    }
    fn q_at(&self, b: usize, s: usize, h: usize) -> usize {
        ((b * self.seq + s) * self.heads + h) * self.head_dim
    }
    fn kv_at(&self, b: usize, s: usize, h: usize) -> usize {
        ((b * self.seq + s) * self.kv_heads + h) * self.head_dim
    }
    fn kv_head(&self, h: usize) -> usize {
        h / (self.heads / self.kv_heads)
    }
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// The RoPE angle of pair `i` at position `pos`: `pos · base^(−2i/dh)`.
pub fn rope_angle(pos: usize, i: usize, head_dim: usize, base: f64) -> f64 {
    pos as f64 * base.powf(-(2.0 * i as f64) / head_dim as f64)
}

/// RoPE of `x` `[B, S, heads, Dh]` on interleaved pairs (2i, 2i+1), position `s + pos_offset`:
/// `y0 = x0 cos θ − x1 sin θ`, `y1 = x0 sin θ + x1 cos θ`. With `inverse`, the rotation by −θ
/// (the backward: the gradient w.r.t. the input is the inverse rotation of the upstream one).
#[allow(clippy::too_many_arguments)]
pub fn rope(
    x: &[f32],
    batch: usize,
    seq: usize,
    heads: usize,
    head_dim: usize,
    pos_offset: usize,
    base: f64,
    inverse: bool,
) -> Vec<f64> {
    let mut y = vec![0.0; batch * seq * heads * head_dim];
    let sign = if inverse { -1.0 } else { 1.0 };
    for b in 0..batch {
        for s in 0..seq {
            for h in 0..heads {
                let row = ((b * seq + s) * heads + h) * head_dim;
                for i in 0..head_dim / 2 {
                    let t = sign * rope_angle(s + pos_offset, i, head_dim, base);
                    let (x0, x1) = (x[row + 2 * i] as f64, x[row + 2 * i + 1] as f64);
                    y[row + 2 * i] = x0 * t.cos() - x1 * t.sin();
                    y[row + 2 * i + 1] = x0 * t.sin() + x1 * t.cos();
                }
            }
        }
    }
    y
}

/// Causal GQA attention: `(O, lse)` with `O[b,s,h] = Σ_{j≤s} softmax_j(scale·q·k_j) v_j` and
/// `lse[b,h,s] = log Σ_{j≤s} exp(scale·q·k_j)`.
pub fn attention_forward(q: &[f32], k: &[f32], v: &[f32], sh: Shape, scale: f64) -> (Vec<f64>, Vec<f64>) {
    let dh = sh.head_dim;
    let mut o = vec![0.0; sh.q_len()];
    let mut lse = vec![0.0; sh.rows()];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let kvh = sh.kv_head(h);
            for s in 0..sh.seq {
                let qa = sh.q_at(b, s, h);
                let scores: Vec<f64> =
                    (0..=s).map(|j| scale * dot(&q[qa..qa + dh], &k[sh.kv_at(b, j, kvh)..][..dh])).collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                for (j, x) in scores.iter().enumerate() {
                    let pj = (x - m).exp() / l;
                    let va = sh.kv_at(b, j, kvh);
                    for d in 0..dh {
                        o[qa + d] += pj * v[va + d] as f64;
                    }
                }
                lse[(b * sh.heads + h) * sh.seq + s] = m + l.ln();
            }
        }
    }
    (o, lse)
}

/// One query per (b, h) (`q` `[B, H, Dh]`) against the first `t` positions of a cache
/// `[B, t_max, Hkv, Dh]`: `O[b,h] = Σ_{j<t} softmax_j(scale·q·k_j) v_j`, `[B, H, Dh]`.
#[allow(clippy::too_many_arguments)]
pub fn attention_decode(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    batch: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    t_max: usize,
    t: usize,
    scale: f64,
) -> Vec<f64> {
    let dh = head_dim;
    let mut o = vec![0.0; batch * heads * dh];
    for b in 0..batch {
        for h in 0..heads {
            let kvh = h / (heads / kv_heads);
            let qa = (b * heads + h) * dh;
            let at = |j: usize| ((b * t_max + j) * kv_heads + kvh) * dh;
            let scores: Vec<f64> = (0..t).map(|j| scale * dot(&q[qa..qa + dh], &k_cache[at(j)..][..dh])).collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let l: f64 = scores.iter().map(|x| (x - m).exp()).sum();
            for (j, x) in scores.iter().enumerate() {
                let pj = (x - m).exp() / l;
                for d in 0..dh {
                    o[qa + d] += pj * v_cache[at(j) + d] as f64;
                }
            }
        }
    }
    o
}

/// Gradients `(dQ, dK, dV)` of `L = Σ dO · O` for the causal GQA forward, computed exactly from
/// the inputs (softmax recomputed in float64): `dS = P ⊙ (dP − Δ)` with `dP = dO·Vᵀ`,
/// `Δ = rowsum(P ⊙ dP)`; `dQ = scale·dS·K`, `dK = scale·dSᵀ·Q`, `dV = Pᵀ·dO`, dK/dV summed over
/// the query heads sharing a kv head.
pub fn attention_backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: Shape,
    scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let dh = sh.head_dim;
    let mut dq = vec![0.0; sh.q_len()];
    let mut dk = vec![0.0; sh.kv_len()];
    let mut dv = vec![0.0; sh.kv_len()];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let kvh = sh.kv_head(h);
            for s in 0..sh.seq {
                let qa = sh.q_at(b, s, h);
                let qi = &q[qa..qa + dh];
                let gi = &d_o[qa..qa + dh];
                let scores: Vec<f64> = (0..=s).map(|j| scale * dot(qi, &k[sh.kv_at(b, j, kvh)..][..dh])).collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                let pr: Vec<f64> = scores.iter().map(|x| (x - m).exp() / l).collect();
                let dp: Vec<f64> = (0..=s).map(|j| dot(gi, &v[sh.kv_at(b, j, kvh)..][..dh])).collect();
                let delta: f64 = pr.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for j in 0..=s {
                    let ka = sh.kv_at(b, j, kvh);
                    let ds = pr[j] * (dp[j] - delta);
                    for d in 0..dh {
                        dq[qa + d] += scale * ds * k[ka + d] as f64;
                        dk[ka + d] += scale * ds * qi[d] as f64;
                        dv[ka + d] += pr[j] * gi[d] as f64;
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}
