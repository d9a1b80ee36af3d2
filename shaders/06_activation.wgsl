// Activations of the feed-forward block: GELU (tanh approximation) and the SwiGLU combine, in
// f32 and (`swiglu_f16`) with an f16 output for mixed precision (`lib/f16x4.wgsl`). The SwiGLU
// combine reads its gate and up from two buffers (`swiglu_combine`, `swiglu_f16`) or from the
// fused `[rows, 2·F]` rows of one gate/up product (`swiglu_gu`, `swiglu_gu_f16`: the trainer's,
// whose W1 and W3 are one weight so that the two projections are one product).
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

// --- KERNEL: swiglu_gu ---
// The SwiGLU combine over the fused gate/up projection: `gu` `[rows, 2·cols]` holds each
// token's gate (columns 0 … cols − 1) and up (columns cols … 2·cols − 1) side by side — the
// output of one product `h·W13ᵀ` with W13 = [W1; W3] stacked by rows — and
// `out[r, j] = silu(gu[r, j]) · gu[r, cols + j]` (`swiglu_combine`'s expression: the same bits
// as that kernel on the separate halves). `out` `[rows, cols]` row-major. Overwrites
// `out[0 .. rows·cols]`. Grid: one workgroup per 2048 outputs, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.rows * p.cols, EW_CHUNK))
// @requires len(gu) >= p.rows * 2 * p.cols
// @requires len(out) >= p.rows * p.cols
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> gu: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: RowsParams;


// Where output j's gate lies in `gu` (its up is p.cols further): row r = j / cols starts at
// 2·cols·r = j − (j mod cols) + cols·r.
fn gate_at(j: vec4<u32>) -> vec4<u32> {
    return j + (j / vec4<u32>(p.cols)) * p.cols;
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let gl = gate_at(lo);
    let gh = gate_at(hi);
    let ul = gl + p.cols;
    let uh = gh + p.cols;
    let ga = vec4<f32>(gu[gl.x], gu[gl.y], gu[gl.z], gu[gl.w]);
    let gb = vec4<f32>(gu[gh.x], gu[gh.y], gu[gh.z], gu[gh.w]);
    let ua = vec4<f32>(gu[ul.x], gu[ul.y], gu[ul.z], gu[ul.w]);
    let ub = vec4<f32>(gu[uh.x], gu[uh.y], gu[uh.z], gu[uh.w]);
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
    let g = gate_at(vec4<u32>(j)).x;
    out[j] = swiglu4(vec4<f32>(gu[g]), vec4<f32>(gu[g + p.cols])).x;
}

@compute @workgroup_size(WG)
fn swiglu_gu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.rows * p.cols);
}

// --- KERNEL: swiglu_gu_f16 ---
// `swiglu_gu` with an f16 output (mixed precision): `out[r, j] = f16(silu(gu[r, j]) ·
// gu[r, cols + j])` from the fused gate/up rows `gu` `[rows, 2·cols]` f32, the f32 math of
// `swiglu_combine` then rounded as `cast_f16x4` rounds (the same bits as `swiglu_f16` on the
// separate halves); `out` `[rows, ⌈cols/4⌉]` vec4<f16> (f16x4 row layout, padding columns
// written as 0), the operand of the down projection. Overwrites `out[0 .. rows·⌈cols/4⌉]`. Needs
// SHADER_F16. Grid: one workgroup per 1024 output vec4s, 4 per invocation (all loads first),
// 1-D (2-D past the device's limit; `lib/vec4_rows.wgsl`).
// @grid workgroups(ceil_div(p.rows * ceil_div(p.cols, 4), VEC_CHUNK))
// @requires len(gu) >= p.rows * 2 * p.cols
// @requires len(out) >= p.rows * ceil_div(p.cols, 4)
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> gu: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f16>>;
@group(0) @binding(2) var<uniform> p: RowsParams;
//#include "lib/f16x4.wgsl"
//#include "lib/vec4_rows.wgsl"


fn load4(i: u32) -> vec4<f32> {
    return vec4<f32>(gu[i], gu[i + 1u], gu[i + 2u], gu[i + 3u]);
}

// Where element i = r·cols + c of the output lies in `gu`'s gate half: 2·cols·r + c.
fn gate_of(i: u32) -> u32 {
    return i + (i / p.cols) * p.cols;
}

fn v4_four(e: vec4<u32>) {
    // cols % 4 == 0 here: vec4 e holds elements 4e … 4e + 3 of one row.
    let i = vec4<u32>(gate_of(4u * e.x), gate_of(4u * e.y), gate_of(4u * e.z), gate_of(4u * e.w));
    let g0 = load4(i.x);
    let g1 = load4(i.y);
    let g2 = load4(i.z);
    let g3 = load4(i.w);
    let u0 = load4(i.x + p.cols);
    let u1 = load4(i.y + p.cols);
    let u2 = load4(i.z + p.cols);
    let u3 = load4(i.w + p.cols);
    out[e.x] = to_f16x4(swiglu4(g0, u0));
    out[e.y] = to_f16x4(swiglu4(g1, u1));
    out[e.z] = to_f16x4(swiglu4(g2, u2));
    out[e.w] = to_f16x4(swiglu4(g3, u3));
}

fn v4_one(e: u32, i: u32, n: u32) {
    let gi = gate_of(i);
    let ui = gi + p.cols;
    var g = vec4<f32>(0.0);
    var u = vec4<f32>(0.0);
    g.x = gu[gi];
    u.x = gu[ui];
    if (n > 1u) {
        g.y = gu[gi + 1u];
        u.y = gu[ui + 1u];
    }
    if (n > 2u) {
        g.z = gu[gi + 2u];
        u.z = gu[ui + 2u];
    }
    if (n > 3u) {
        g.w = gu[gi + 3u];
        u.w = gu[ui + 3u];
    }
    out[e] = to_f16x4(select(vec4<f32>(0.0), swiglu4(g, u), below4(0u, n)));
}

@compute @workgroup_size(WG)
fn swiglu_gu_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, p.rows, p.cols);
}
