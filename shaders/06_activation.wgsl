// Activations of the feed-forward block: GELU (tanh approximation) and the SwiGLU combine.
//
// Element-wise, 1-D, 8 elements per invocation through `lib/elementwise.wgsl` (enough loads in
// flight to cover the memory latency, the 2-D grid fallback, a guarded tail); the functions and
// their numerics are in `lib/activations.wgsl`, shared with the backward.
//#include "lib/elementwise.wgsl"
//#include "lib/activations.wgsl"

// --- KERNEL: gelu_inplace ---
// `x[i] = gelu(x[i])` for i < p.n, tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). In place (overwrites `x[0..n]`).
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(x) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

fn gelu4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // All 8 loads first, then the stores.
    let a = gelu4(vec4<f32>(x[lo.x], x[lo.y], x[lo.z], x[lo.w]));
    let b = gelu4(vec4<f32>(x[hi.x], x[hi.y], x[hi.z], x[hi.w]));
    x[lo.x] = a.x;
    x[lo.y] = a.y;
    x[lo.z] = a.z;
    x[lo.w] = a.w;
    x[hi.x] = b.x;
    x[hi.y] = b.y;
    x[hi.z] = b.z;
    x[hi.w] = b.w;
}

fn ew_one(j: u32) {
    x[j] = gelu(x[j]);
}

@compute @workgroup_size(WG)
fn gelu_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: swiglu_combine ---
// `out[i] = silu(gate[i]) · up[i]` for i < p.n, silu(z) = z·σ(z). `gate`, `up`, `out`: n
// values each (typically [rows, F] flattened). Overwrites `out`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
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

// silu(g)·u, component-wise.
fn swiglu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    let s = vec4<f32>(sigmoid(g.x), sigmoid(g.y), sigmoid(g.z), sigmoid(g.w));
    return g * s * u;
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let ga = vec4<f32>(gate[lo.x], gate[lo.y], gate[lo.z], gate[lo.w]);
    let gb = vec4<f32>(gate[hi.x], gate[hi.y], gate[hi.z], gate[hi.w]);
    let ua = vec4<f32>(up[lo.x], up[lo.y], up[lo.z], up[lo.w]);
    let ub = vec4<f32>(up[hi.x], up[hi.y], up[hi.z], up[hi.w]);
    let a = swiglu4(ga, ua);
    let b = swiglu4(gb, ub);
    out[lo.x] = a.x;
    out[lo.y] = a.y;
    out[lo.z] = a.z;
    out[lo.w] = a.w;
    out[hi.x] = b.x;
    out[hi.y] = b.y;
    out[hi.z] = b.z;
    out[hi.w] = b.w;
}

fn ew_one(j: u32) {
    out[j] = swiglu4(vec4<f32>(gate[j]), vec4<f32>(up[j])).x;
}

@compute @workgroup_size(WG)
fn swiglu_combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}
