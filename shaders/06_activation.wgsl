// Activations of the feed-forward block: GELU (tanh approximation) and the SwiGLU combine.
//
// Element-wise, 1-D: one invocation per element, grid `threads(p.n)` (2-D past the device's
// workgroup limit, `flat_id` recovers the index), the tail past `n` skipped.
//
// Numerics: everything goes through a sigmoid computed from e = exp(−|z|) ∈ (0, 1], which
// never overflows: σ(z) = 1/(1+e) for z ≥ 0, e/(1+e) for z < 0. GELU's tanh form is rewritten
// with 0.5·(1 + tanh(u)) = σ(2u), so gelu(x) = x·σ(2u): no tanh, no Inf/NaN for any finite x
// (x = −10⁴ gives −0, x = 10⁴ gives 10⁴), and full relative accuracy in the negative tail where
// 1 + tanh(u) would cancel. A NaN input gives NaN.

// √(2/π) and the cubic coefficient of the tanh approximation.
const GELU_C: f32 = 0.7978845608028654;
const GELU_A: f32 = 0.044715;

// σ(z), stable for every z.
fn sigmoid(z: f32) -> f32 {
    let e = exp(-abs(z));
    let r = 1.0 / (1.0 + e);
    return select(e * r, r, z >= 0.0);
}

// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) = x·σ(2·√(2/π)·(…)).
fn gelu(x: f32) -> f32 {
    let z = 2.0 * GELU_C * (x + GELU_A * x * x * x);
    return x * sigmoid(z);
}

// --- KERNEL: gelu_inplace ---
// `x[i] = gelu(x[i])` for i < p.n, tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). In place (overwrites `x[0..n]`).
// Grid: one invocation per element, 1-D over n.
// @grid threads(p.n)
// @requires len(x) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn gelu_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        x[i] = gelu(x[i]);
    }
}

// --- KERNEL: swiglu_combine ---
// `out[i] = silu(gate[i]) · up[i]` for i < p.n, silu(z) = z·σ(z). `gate`, `up`, `out`: n
// values each (typically [rows, F] flattened). Overwrites `out`.
// Grid: one invocation per element, 1-D over n.
// @grid threads(p.n)
// @requires len(gate) >= p.n
// @requires len(up) >= p.n
// @requires len(out) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn swiglu_combine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        let g = gate[i];
        out[i] = g * sigmoid(g) * up[i];
    }
}
