// Backward of the feed-forward activations (`06_activation.wgsl`): GELU (tanh approximation)
// and the SwiGLU combine.
//
// Element-wise, 1-D: one invocation per element, grid `threads(p.n)` (2-D past the device's
// workgroup limit, `flat_id` recovers the index), the tail past `n` skipped.
//
// Numerics as in the forward file: the sigmoid and σ(1−σ) come from e = exp(−|z|) ∈ (0, 1],
// which never overflows, so no Inf/NaN arises for finite inputs (checked up to |x| = 10⁴).

// √(2/π) and the cubic coefficient of the tanh approximation.
const GELU_C: f32 = 0.7978845608028654;
const GELU_A: f32 = 0.044715;

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

// --- KERNEL: ffn_gelu_backward ---
// `dx[i] = dy[i] · gelu'(x[i])` for i < p.n, the derivative of `gelu_inplace`'s tanh
// approximation at the forward's input `x`. `x`, `dy`, `dx`: n values each. Overwrites `dx`.
// Grid: one invocation per element, 1-D over n.
// @grid threads(p.n)
// @requires len(x) >= p.n
// @requires len(dy) >= p.n
// @requires len(dx) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn ffn_gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        dx[i] = dy[i] * gelu_grad(x[i]);
    }
}

// --- KERNEL: ffn_swiglu_backward ---
// Backward of `swiglu_combine` (out = silu(gate)·up, silu(g) = g·σ(g)) for i < p.n:
// `d_up[i] = d_out[i] · silu(gate[i])`,
// `d_gate[i] = d_out[i] · up[i] · silu'(gate[i])`, silu'(g) = σ(g) + g·σ(g)(1 − σ(g)).
// `gate`, `up`, `d_out`, `d_gate`, `d_up`: n values each. Overwrites `d_gate` and `d_up`.
// Grid: one invocation per element, 1-D over n.
// @grid threads(p.n)
// @requires len(gate) >= p.n
// @requires len(up) >= p.n
// @requires len(d_out) >= p.n
// @requires len(d_gate) >= p.n
// @requires len(d_up) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read> d_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> d_gate: array<f32>;
@group(0) @binding(4) var<storage, read_write> d_up: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn ffn_swiglu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        let g = gate[i];
        let go = d_out[i];
        let s = sigmoid_and_slope(g);
        d_up[i] = go * g * s.x;
        // g·σ(1−σ): σ(1−σ) is 0 once e underflows (|g| > ~88), and g is finite, so no 0·Inf.
        d_gate[i] = go * up[i] * (s.x + g * s.y);
    }
}
