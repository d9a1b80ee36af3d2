//! The model in float64 on the CPU, written straight from its definition, for tests: the loss
//! of a batch, and gradients by central differences of that loss (exact to ~1e-9 in float64,
//! and independent of any hand-derived backward pass).
#![allow(dead_code)]

use kernels_train::config::ModelConfig;

fn rmsnorm(x: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(g).map(|(v, g)| v * r * g).collect()
}

/// y[m, out] = x[m, in] · w[out, in]ᵀ
fn linear(x: &[f64], w: &[f64], rows: usize, inp: usize, out: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * out];
    for m in 0..rows {
        for o in 0..out {
            y[m * out + o] = (0..inp).map(|i| x[m * inp + i] * w[o * inp + i]).sum();
        }
    }
    y
}

/// Rotates interleaved pairs (2i, 2i+1) of each head vector by pos · base^(−2i/dh).
fn rope(x: &mut [f64], batch: usize, seq: usize, heads: usize, dh: usize, base: f64) {
    for b in 0..batch {
        for s in 0..seq {
            for h in 0..heads {
                let o = ((b * seq + s) * heads + h) * dh;
                for i in 0..dh / 2 {
                    let theta = s as f64 * base.powf(-2.0 * i as f64 / dh as f64);
                    let (c, sn) = (theta.cos(), theta.sin());
                    let (a, bb) = (x[o + 2 * i], x[o + 2 * i + 1]);
                    x[o + 2 * i] = a * c - bb * sn;
                    x[o + 2 * i + 1] = a * sn + bb * c;
                }
            }
        }
    }
}

/// Causal grouped-query attention; q [B,S,H,dh], k/v [B,S,Hkv,dh] → [B,S,H,dh].
#[allow(clippy::too_many_arguments)]
fn attention(q: &[f64], k: &[f64], v: &[f64], batch: usize, seq: usize, h: usize, hkv: usize, dh: usize) -> Vec<f64> {
    let mut o = vec![0.0; batch * seq * h * dh];
    let scale = 1.0 / (dh as f64).sqrt();
    for b in 0..batch {
        for hh in 0..h {
            let kh = hh / (h / hkv);
            for s in 0..seq {
                let qo = ((b * seq + s) * h + hh) * dh;
                let scores: Vec<f64> = (0..=s)
                    .map(|t| {
                        let ko = ((b * seq + t) * hkv + kh) * dh;
                        (0..dh).map(|d| q[qo + d] * k[ko + d]).sum::<f64>() * scale
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for (t, w) in e.iter().enumerate() {
                    let vo = ((b * seq + t) * hkv + kh) * dh;
                    for d in 0..dh {
                        o[qo + d] += w / z * v[vo + d];
                    }
                }
            }
        }
    }
    o
}

/// The mean cross-entropy (nats per token) of the batch.
pub fn loss(c: &ModelConfig, params: &[Vec<f64>], tokens: &[u32], targets: &[u32], batch: usize) -> f64 {
    let (d, s, f, v) = (c.dim, c.seq_len, c.ffn_hidden, c.vocab);
    let (h, hkv, dh) = (c.heads, c.kv_heads, c.head_dim());
    let rows = batch * s;
    let eps = c.norm_eps as f64;
    let emb = &params[0];
    let mut x: Vec<f64> = tokens.iter().flat_map(|&t| emb[t as usize * d..(t as usize + 1) * d].to_vec()).collect();
    for l in 0..c.layers {
        let p = &params[1 + 9 * l..1 + 9 * (l + 1)];
        let hn: Vec<f64> = x.chunks(d).flat_map(|r| rmsnorm(r, &p[0], eps)).collect();
        let mut q = linear(&hn, &p[1], rows, d, h * dh);
        let mut k = linear(&hn, &p[2], rows, d, hkv * dh);
        let vv = linear(&hn, &p[3], rows, d, hkv * dh);
        rope(&mut q, batch, s, h, dh, c.rope_base as f64);
        rope(&mut k, batch, s, hkv, dh, c.rope_base as f64);
        let att = attention(&q, &k, &vv, batch, s, h, hkv, dh);
        let proj = linear(&att, &p[4], rows, h * dh, d);
        for (a, b) in x.iter_mut().zip(&proj) {
            *a += b;
        }
        let h2: Vec<f64> = x.chunks(d).flat_map(|r| rmsnorm(r, &p[5], eps)).collect();
        let g = linear(&h2, &p[6], rows, d, f);
        let u = linear(&h2, &p[7], rows, d, f);
        let a: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
        let down = linear(&a, &p[8], rows, f, d);
        for (a, b) in x.iter_mut().zip(&down) {
            *a += b;
        }
    }
    let fin: Vec<f64> = x.chunks(d).flat_map(|r| rmsnorm(r, params.last().unwrap(), eps)).collect();
    let logits = linear(&fin, emb, rows, d, v);
    let mut total = 0.0;
    for (r, &t) in targets.iter().enumerate() {
        let row = &logits[r * v..(r + 1) * v];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        total += lse - row[t as usize];
    }
    total / targets.len() as f64
}

/// Every parameter's gradient by central differences of [`loss`] (step `h` relative to 1).
pub fn gradients(
    c: &ModelConfig,
    params: &[Vec<f64>],
    tokens: &[u32],
    targets: &[u32],
    batch: usize,
    h: f64,
) -> Vec<Vec<f64>> {
    let mut p = params.to_vec();
    let mut out = Vec::with_capacity(p.len());
    for t in 0..p.len() {
        let mut g = vec![0.0; p[t].len()];
        for i in 0..p[t].len() {
            let x0 = p[t][i];
            p[t][i] = x0 + h;
            let up = loss(c, &p, tokens, targets, batch);
            p[t][i] = x0 - h;
            let down = loss(c, &p, tokens, targets, batch);
            p[t][i] = x0;
            g[i] = (up - down) / (2.0 * h);
        }
        out.push(g);
    }
    out
}
