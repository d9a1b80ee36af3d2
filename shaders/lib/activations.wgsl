// The feed-forward activations and their derivatives, side by side so that the backward
// (09_backward_ffn.wgsl) differentiates exactly what the forward (06_activation.wgsl) computes.
//
// Provides `sigmoid`, `gelu`, `swiglu4`, `sigmoid_and_slope`, `gelu_grad`; no hooks.
//
// Numerics: everything goes through a sigmoid computed from e = exp(−|z|) ∈ (0, 1], which
// never overflows: σ(z) = 1/(1+e) for z ≥ 0, e/(1+e) for z < 0, and σ(1−σ) = e/(1+e)². GELU's
// tanh form is rewritten with 0.5·(1 + tanh(u)) = σ(2u), so gelu(x) = x·σ(2u): no tanh, no
// Inf/NaN for any finite x (x = −10⁴ gives −0, x = 10⁴ gives 10⁴), and full relative accuracy
// in the negative tail where 1 + tanh(u) would cancel. A NaN input gives NaN.

// √(2/π) and the cubic coefficient of the tanh approximation.
const GELU_C: f32 = 0.7978845608028654;
const GELU_A: f32 = 0.044715;

// σ(z), stable for every z.
fn sigmoid(z: f32) -> f32 {
    let e = exp(-abs(z));
    let r = 1.0 / (1.0 + e);
    return select(e * r, r, z >= 0.0);
}

// silu(g)·u, component-wise: SwiGLU's combine of gate g and up u (every form of it, so they all
// give the same bits).
fn swiglu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    let s = vec4<f32>(sigmoid(g.x), sigmoid(g.y), sigmoid(g.z), sigmoid(g.w));
    return g * s * u;
}

// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) = x·σ(2·√(2/π)·(…)).
fn gelu(x: f32) -> f32 {
    let z = 2.0 * GELU_C * (x + GELU_A * x * x * x);
    return x * sigmoid(z);
}

// (σ(z), σ(z)·(1 − σ(z))), stable for every z.
fn sigmoid_and_slope(z: f32) -> vec2<f32> {
    let e = exp(-abs(z));
    let r = 1.0 / (1.0 + e);
    return vec2<f32>(select(e * r, r, z >= 0.0), e * r * r);
}

// d/dx of gelu(x) = x·σ(z), z = 2·√(2/π)·(x + 0.044715·x³):
// gelu'(x) = σ(z) + x·σ(z)(1 − σ(z))·z'(x), z'(x) = 2·√(2/π)·(1 + 3·0.044715·x²)
// (the same as 0.5·(1 + tanh u) + 0.5·x·sech²(u)·u'). For |x| ≥ 16, σ(1 − σ) underflows
// to 0 (|z| > 600), so the second term is dropped there: it keeps x·z'(x) from overflowing to
// Inf (0·Inf = NaN) for huge x.
fn gelu_grad(x: f32) -> f32 {
    let z = 2.0 * GELU_C * (x + GELU_A * x * x * x);
    let s = sigmoid_and_slope(z);
    let dz = 2.0 * GELU_C * (1.0 + 3.0 * GELU_A * x * x);
    return s.x + select(0.0, x * s.y * dz, abs(x) < 16.0);
}
