//! Float64 CPU references of the optimizer kernels (`shaders/12_optimizer.wgsl`): gradient
//! norm² and clip scale, AdamW with f32-style state, and 8-bit AdamW with its quantization
//! modelled exactly (codes, scales, rounding). Plain functions over slices, so other tests (the
//! trainer's) can reuse them.
#![allow(dead_code)]

/// Gradient values per `reduce_norm_sq` partial (the kernel file's `NORM_BLOCK`).
pub const NORM_BLOCK: usize = 4096;
/// Values per 8-bit quantization block (the kernel file's `QBLOCK`).
pub const QBLOCK: usize = 256;

/// Number of partials `reduce_norm_sq` writes for a tensor of `n` values.
pub fn norm_blocks(n: usize) -> usize {
    n.div_ceil(NORM_BLOCK)
}

/// Per-block partials of one gradient tensor: `(Σ g² over the finite values, non-finite count)`
/// for each block of `NORM_BLOCK` values, as `reduce_norm_sq` writes them.
pub fn norm_sq_partials(g: &[f32]) -> Vec<(f64, u32)> {
    g.chunks(NORM_BLOCK)
        .map(|c| {
            let mut s = 0.0;
            let mut bad = 0;
            for &x in c {
                if x.is_finite() {
                    s += x as f64 * x as f64;
                } else {
                    bad += 1;
                }
            }
            (s, bad)
        })
        .collect()
}

/// Global `(norm², non-finite count)` over several gradient tensors (finite values only).
pub fn norm_sq(grads: &[&[f32]]) -> (f64, usize) {
    let mut s = 0.0;
    let mut bad = 0;
    for g in grads {
        for (ps, pb) in norm_sq_partials(g) {
            s += ps;
            bad += pb as usize;
        }
    }
    (s, bad)
}

/// The clip scale `min(1, max_norm / (√norm² + 1e-6))`, or 1 when `max_norm ≤ 0`.
pub fn clip_scale(norm_sq: f64, max_norm: f64) -> f64 {
    if max_norm <= 0.0 { 1.0 } else { (max_norm / (norm_sq.sqrt() + 1e-6)).min(1.0) }
}

/// AdamW hyperparameters (the bias corrections come from the step, see [`AdamW::bias`]).
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl AdamW {
    /// `(1 − β1^t, 1 − β2^t)` for step `t ≥ 1`.
    pub fn bias(&self, t: u32) -> (f64, f64) {
        (1.0 - self.beta1.powi(t as i32), 1.0 - self.beta2.powi(t as i32))
    }
}

/// One AdamW element update from `(p, m, v)` with the clipped gradient `gc`; returns the new
/// `(p, m, v)`. Decoupled weight decay on the old p.
pub fn adamw_element(p: f64, m: f64, v: f64, gc: f64, h: &AdamW, bias: (f64, f64)) -> (f64, f64, f64) {
    let m = h.beta1 * m + (1.0 - h.beta1) * gc;
    let v = h.beta2 * v + (1.0 - h.beta2) * gc * gc;
    let m_hat = m / bias.0;
    let v_hat = v / bias.1;
    let p = p - h.lr * (m_hat / (v_hat.sqrt() + h.eps) + h.weight_decay * p);
    (p, m, v)
}

/// One AdamW step of one tensor (what `adamw_update` does), in place: the gradient is
/// multiplied by `clip`; elements whose gradient is NaN/±Inf are skipped (p, m, v unchanged).
/// `g` is not modified here (the kernel zeroes it).
pub fn adamw_step(p: &mut [f64], g: &[f32], m: &mut [f64], v: &mut [f64], clip: f64, h: &AdamW, t: u32) {
    let bias = h.bias(t);
    for i in 0..p.len() {
        if !g[i].is_finite() {
            continue;
        }
        (p[i], m[i], v[i]) = adamw_element(p[i], m[i], v[i], g[i] as f64 * clip, h, bias);
    }
}

/// The 8-bit AdamW state of one tensor, unpacked: one signed m code and one unsigned √v code
/// per value, and per block of `QBLOCK` values the m absmax and the √v max.
#[derive(Clone, Debug, PartialEq)]
pub struct Quant8 {
    pub m_code: Vec<i8>,
    pub v_code: Vec<u8>,
    pub m_scale: Vec<f64>,
    pub v_scale: Vec<f64>,
}

impl Quant8 {
    /// The all-zero initial state for `n` values.
    pub fn zeros(n: usize) -> Self {
        let blocks = n.div_ceil(QBLOCK);
        Quant8 { m_code: vec![0; n], v_code: vec![0; n], m_scale: vec![0.0; blocks], v_scale: vec![0.0; blocks] }
    }

    /// From the kernel's buffers: `mq`, `vq` (4 codes per word, element 4j+k in byte k) and
    /// `qscale` (`[2b]` = m absmax, `[2b+1]` = √v max).
    pub fn from_gpu(n: usize, mq: &[u32], vq: &[u32], qscale: &[f32]) -> Self {
        let blocks = n.div_ceil(QBLOCK);
        let byte = |w: &[u32], i: usize| (w[i / 4] >> (8 * (i % 4))) as u8;
        Quant8 {
            m_code: (0..n).map(|i| byte(mq, i) as i8).collect(),
            v_code: (0..n).map(|i| byte(vq, i)).collect(),
            m_scale: (0..blocks).map(|b| qscale[2 * b] as f64).collect(),
            v_scale: (0..blocks).map(|b| qscale[2 * b + 1] as f64).collect(),
        }
    }

    /// The kernel's buffer contents `(mq, vq, qscale)` for this state (scales rounded to f32).
    pub fn to_gpu(&self) -> (Vec<u32>, Vec<u32>, Vec<f32>) {
        let pack = |codes: &mut dyn Iterator<Item = u8>| {
            let bytes: Vec<u8> = codes.collect();
            bytes
                .chunks(4)
                .map(|c| c.iter().enumerate().fold(0u32, |w, (k, &b)| w | (b as u32) << (8 * k)))
                .collect::<Vec<u32>>()
        };
        let mq = pack(&mut self.m_code.iter().map(|&c| c as u8));
        let vq = pack(&mut self.v_code.iter().copied());
        let qscale = self.m_scale.iter().zip(&self.v_scale).flat_map(|(&a, &b)| [a as f32, b as f32]).collect();
        (mq, vq, qscale)
    }

    /// Dequantized m of element i: `code · m_scale / 127`.
    pub fn m(&self, i: usize) -> f64 {
        self.m_code[i] as f64 * self.m_scale[i / QBLOCK] / 127.0
    }

    /// Dequantized v of element i: `(code · v_scale / 255)²`.
    pub fn v(&self, i: usize) -> f64 {
        let r = self.v_code[i] as f64 * self.v_scale[i / QBLOCK] / 255.0;
        r * r
    }
}

/// m code of `m` against the block absmax `m_max`: round-half-even of `m · 127 / m_max`,
/// clamped to ±127 (0 when `m_max` is 0).
pub fn quantize_m(m: f64, m_max: f64) -> i8 {
    if m_max > 0.0 { (m * 127.0 / m_max).round_ties_even().clamp(-127.0, 127.0) as i8 } else { 0 }
}

/// √v code of `v` against the block max `r_max` of √v: round-half-even of `√v · 255 / r_max`,
/// clamped to 0..=255, and at least 1 when v > 0.
pub fn quantize_v(v: f64, r_max: f64) -> u8 {
    let q = if r_max > 0.0 { (v.sqrt() * 255.0 / r_max).round_ties_even().clamp(0.0, 255.0) as u8 } else { 0 };
    if v > 0.0 { q.max(1) } else { q }
}

/// One 8-bit AdamW step of one tensor (what `adamw_8bit_update` does), in place: per block,
/// dequantize m and v, update as [`adamw_step`] (the parameter update uses the unquantized new
/// m and v; skipped elements carry their dequantized m and v), then requantize the block against
/// its new m absmax and √v max.
pub fn adamw_8bit_step(p: &mut [f64], g: &[f32], state: &mut Quant8, clip: f64, h: &AdamW, t: u32) {
    let bias = h.bias(t);
    let n = p.len();
    for b in 0..n.div_ceil(QBLOCK) {
        let range = b * QBLOCK..((b + 1) * QBLOCK).min(n);
        let mut ms = Vec::with_capacity(QBLOCK);
        let mut vs = Vec::with_capacity(QBLOCK);
        for i in range.clone() {
            let (mut m, mut v) = (state.m(i), state.v(i));
            if g[i].is_finite() {
                (p[i], m, v) = adamw_element(p[i], m, v, g[i] as f64 * clip, h, bias);
            }
            ms.push(m);
            vs.push(v);
        }
        let m_max = ms.iter().fold(0.0f64, |a, m| a.max(m.abs()));
        let r_max = vs.iter().fold(0.0f64, |a, v| a.max(v.sqrt()));
        for (k, i) in range.enumerate() {
            state.m_code[i] = quantize_m(ms[k], m_max);
            state.v_code[i] = quantize_v(vs[k], r_max);
        }
        state.m_scale[b] = m_max;
        state.v_scale[b] = r_max;
    }
}
