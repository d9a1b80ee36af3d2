// Activations of the feed-forward block: GELU (tanh approximation) and the SwiGLU combine, in
// f32 and (`swiglu_f16`) with an f16 output for mixed precision (`lib/f16x4.wgsl`).
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

// --- KERNEL: swiglu_f16 ---
// The SwiGLU combine with an f16 output: `out[r, j] = f16(silu(gate[r, j]) · up[r, j])`,
// silu(z) = z·σ(z) (the f32 math of `activation::swiglu_combine`, then rounded as
// `cast_f16x4` rounds). gate, up `[rows, cols]` row-major f32; `out` `[rows,
// ⌈cols/4⌉]` vec4<f16> (f16x4 row layout, padding columns written as 0), the operand of the down
// projection. Overwrites `out[0 .. rows·⌈cols/4⌉]`. Needs SHADER_F16. Grid: one workgroup per
// 1024 output vec4s, 4 per invocation (vec4 e = 1024·w + tid + 256·k, k = 0..3, all loads
// first), 1-D (2-D past the device's limit).
// @grid workgroups(ceil_div(p.rows * ceil_div(p.cols, 4), VEC_CHUNK))
// @requires len(gate) >= p.rows * p.cols
// @requires len(up) >= p.rows * p.cols
// @requires len(out) >= p.rows * ceil_div(p.cols, 4)
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f16>>;
@group(0) @binding(3) var<uniform> p: RowsParams;
//#include "lib/f16x4.wgsl"
//#include "lib/activations.wgsl"
//#include "lib/vec4_rows.wgsl"

// silu(g)·u, component-wise (`activation::swiglu_combine`'s expression).
fn swiglu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    let s = vec4<f32>(sigmoid(g.x), sigmoid(g.y), sigmoid(g.z), sigmoid(g.w));
    return g * s * u;
}

fn gate4(i: u32) -> vec4<f32> {
    return vec4<f32>(gate[i], gate[i + 1u], gate[i + 2u], gate[i + 3u]);
}

fn up4(i: u32) -> vec4<f32> {
    return vec4<f32>(up[i], up[i + 1u], up[i + 2u], up[i + 3u]);
}

fn v4_four(e: vec4<u32>) {
    let i = 4u * e;
    let g0 = gate4(i.x);
    let g1 = gate4(i.y);
    let g2 = gate4(i.z);
    let g3 = gate4(i.w);
    let u0 = up4(i.x);
    let u1 = up4(i.y);
    let u2 = up4(i.z);
    let u3 = up4(i.w);
    out[e.x] = to_f16x4(swiglu4(g0, u0));
    out[e.y] = to_f16x4(swiglu4(g1, u1));
    out[e.z] = to_f16x4(swiglu4(g2, u2));
    out[e.w] = to_f16x4(swiglu4(g3, u3));
}

fn v4_one(e: u32, i: u32, n: u32) {
    var g = vec4<f32>(0.0);
    var u = vec4<f32>(0.0);
    g.x = gate[i];
    u.x = up[i];
    if (n > 1u) {
        g.y = gate[i + 1u];
        u.y = up[i + 1u];
    }
    if (n > 2u) {
        g.z = gate[i + 2u];
        u.z = up[i + 2u];
    }
    if (n > 3u) {
        g.w = gate[i + 3u];
        u.w = up[i + 3u];
    }
    out[e] = to_f16x4(select(vec4<f32>(0.0), swiglu4(g, u), below4(0u, n)));
}

@compute @workgroup_size(WG)
fn swiglu_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, p.rows, p.cols);
}
