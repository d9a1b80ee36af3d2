//! Float64 CPU references of the embedding, activation, cast and feed-forward backward kernels
//! (`shaders/01_embedding.wgsl`, `06_activation.wgsl`, `08_cast.wgsl`,
//! `09_backward_ffn.wgsl`). Plain functions over slices, row-major like the kernels; include
//! with `#[path = "reference/elementwise.rs"] mod reference;`.
#![allow(dead_code)]

/// √(2/π), the GELU tanh approximation's scale.
pub const GELU_C: f64 = 0.797_884_560_802_865_4;
/// The GELU tanh approximation's cubic coefficient.
pub const GELU_A: f64 = 0.044715;
/// The largest finite f16.
pub const F16_MAX: f64 = 65504.0;

/// `embed_lookup`: `out[r, c] = table[ids[r], c]` for `rows = ids.len()`, a zero row for an id
/// ≥ `vocab`. `table` is `[vocab, dim]`; returns `[rows, dim]`.
pub fn embed_lookup(ids: &[u32], table: &[f64], vocab: usize, dim: usize) -> Vec<f64> {
    assert!(table.len() >= vocab * dim);
    let mut out = vec![0.0; ids.len() * dim];
    for (r, &id) in ids.iter().enumerate() {
        let id = id as usize;
        if id < vocab {
            out[r * dim..(r + 1) * dim].copy_from_slice(&table[id * dim..(id + 1) * dim]);
        }
    }
    out
}

/// `embed_backward`: `d_table[v, c] += Σ_{r : ids[r] = v} d_out[r, c]`; ids ≥ `vocab` are
/// ignored. `d_out` is `[ids.len(), dim]`, `d_table` `[vocab, dim]` (accumulated into).
pub fn embed_backward(d_out: &[f64], ids: &[u32], d_table: &mut [f64], vocab: usize, dim: usize) {
    assert!(d_out.len() >= ids.len() * dim && d_table.len() >= vocab * dim);
    for (r, &id) in ids.iter().enumerate() {
        let id = id as usize;
        if id < vocab {
            for c in 0..dim {
                d_table[id * dim + c] += d_out[r * dim + c];
            }
        }
    }
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_C * (x + GELU_A * x * x * x)).tanh())
}

/// d/dx of [`gelu`]: `0.5·(1 + tanh u) + 0.5·x·(1 − tanh² u)·√(2/π)·(1 + 3·0.044715·x²)`.
pub fn gelu_grad(x: f64) -> f64 {
    let t = (GELU_C * (x + GELU_A * x * x * x)).tanh();
    let sech2 = 1.0 - t * t;
    let tail = if sech2 == 0.0 { 0.0 } else { 0.5 * x * sech2 * GELU_C * (1.0 + 3.0 * GELU_A * x * x) };
    0.5 * (1.0 + t) + tail
}

/// The logistic function σ(z), stable for every z.
pub fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// `silu(z) = z·σ(z)`.
pub fn silu(z: f64) -> f64 {
    z * sigmoid(z)
}

/// d/dz of [`silu`]: `σ(z) + z·σ(z)·(1 − σ(z))`.
pub fn silu_grad(z: f64) -> f64 {
    let s = sigmoid(z);
    s + z * s * (1.0 - s)
}

/// `gelu_inplace` over a slice.
pub fn gelu_all(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| gelu(v)).collect()
}

/// `swiglu_combine`: `out[i] = silu(gate[i])·up[i]`.
pub fn swiglu(gate: &[f64], up: &[f64]) -> Vec<f64> {
    gate.iter().zip(up).map(|(&g, &u)| silu(g) * u).collect()
}

/// `ffn_gelu_backward`: `dx[i] = dy[i]·gelu'(x[i])`.
pub fn gelu_backward(x: &[f64], dy: &[f64]) -> Vec<f64> {
    x.iter().zip(dy).map(|(&x, &d)| d * gelu_grad(x)).collect()
}

/// `ffn_swiglu_backward`: `(d_gate, d_up)` with `d_gate[i] = d_out[i]·up[i]·silu'(gate[i])`
/// and `d_up[i] = d_out[i]·silu(gate[i])`.
pub fn swiglu_backward(gate: &[f64], up: &[f64], d_out: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let d_gate = gate.iter().zip(up).zip(d_out).map(|((&g, &u), &d)| d * u * silu_grad(g)).collect();
    let d_up = gate.iter().zip(d_out).map(|(&g, &d)| d * silu(g)).collect();
    (d_gate, d_up)
}

/// `cast_f32_to_f16`'s value map before rounding: clamped to ±65504 (±∞ included), NaN kept.
/// The kernel's result is the f16 nearest to this (or its other neighbour).
pub fn cast_to_f16_range(x: f64) -> f64 {
    if x.is_nan() { x } else { x.clamp(-F16_MAX, F16_MAX) }
}

/// Widens f32 values to f64.
pub fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// Inputs far out in both tails (|x| up to 1e4, past where exp over- or underflows), zeros and
/// tiny values, for the activations and their derivatives, which must stay finite on them.
pub fn extreme_inputs() -> Vec<f32> {
    let mut v = vec![0.0f32, -0.0, 1e-30, -1e-30, 1e-6, -1e-6];
    for m in [0.5f32, 1.0, 3.0, 5.0, 8.0, 10.0, 15.0, 16.0, 20.0, 50.0, 88.0, 100.0, 1e3, 5e3, 1e4] {
        v.push(m);
        v.push(-m);
    }
    v
}

/// The fused rows `[rows, 2·cols]` of two `[rows, cols]` halves side by side (the gate/up
/// projection's output: gate in columns 0 … cols − 1, up in cols … 2·cols − 1).
pub fn fuse_halves<T: Copy>(a: &[T], b: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(2 * rows * cols);
    for r in 0..rows {
        out.extend_from_slice(&a[r * cols..(r + 1) * cols]);
        out.extend_from_slice(&b[r * cols..(r + 1) * cols]);
    }
    out
}
