// Backward of the feed-forward activations (`06_activation.wgsl`): GELU (tanh approximation)
// and the SwiGLU combine.
//
// Element-wise, 1-D, 8 elements per invocation through `lib/elementwise.wgsl` (enough loads in
// flight to cover the memory latency, the 2-D grid fallback, a guarded tail); the derivatives
// and their numerics are in `lib/activations.wgsl`, beside the forward functions: no Inf/NaN
// arises for finite inputs (checked up to |x| = 10⁴). `ffn_swiglu_backward_f16` (mixed
// precision) writes SwiGLU's gradients as f16 rows instead, walking the f16x4 row layout
// (`lib/vec4_rows.wgsl`) with the overflow check of loss scaling (`lib/grad16.wgsl`).
//#include "lib/elementwise.wgsl"
//#include "lib/activations.wgsl"

// SwiGLU's two gradients of one element: (d_gate, d_up), shared by `ffn_swiglu_backward` and
// `ffn_swiglu_backward_f16` (the same f32 arithmetic in both).
fn swiglu_bwd(g: f32, u: f32, go: f32) -> vec2<f32> {
    let s = sigmoid_and_slope(g);
    // g·σ(1−σ): σ(1−σ) is 0 once e underflows (|g| > ~88), and g is finite, so no 0·Inf.
    return vec2<f32>(go * u * (s.x + g * s.y), go * g * s.x);
}

// --- KERNEL: ffn_gelu_backward ---
// `dx[i] = dy[i] · gelu'(x[i])` for i < p.n, the derivative of `gelu_inplace`'s tanh
// approximation at the forward's input `x`. `x`, `dy`, `dx`: n values each. Overwrites `dx`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
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

// dy · gelu'(x), component-wise.
fn gelu_bwd4(xv: vec4<f32>, d: vec4<f32>) -> vec4<f32> {
    return d * vec4<f32>(gelu_grad(xv.x), gelu_grad(xv.y), gelu_grad(xv.z), gelu_grad(xv.w));
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // All 16 loads first, then the stores.
    let xa = vec4<f32>(x[lo.x], x[lo.y], x[lo.z], x[lo.w]);
    let xb = vec4<f32>(x[hi.x], x[hi.y], x[hi.z], x[hi.w]);
    let da = vec4<f32>(dy[lo.x], dy[lo.y], dy[lo.z], dy[lo.w]);
    let db = vec4<f32>(dy[hi.x], dy[hi.y], dy[hi.z], dy[hi.w]);
    let a = gelu_bwd4(xa, da);
    let b = gelu_bwd4(xb, db);
    dx[lo.x] = a.x;
    dx[lo.y] = a.y;
    dx[lo.z] = a.z;
    dx[lo.w] = a.w;
    dx[hi.x] = b.x;
    dx[hi.y] = b.y;
    dx[hi.z] = b.z;
    dx[hi.w] = b.w;
}

fn ew_one(j: u32) {
    dx[j] = dy[j] * gelu_grad(x[j]);
}

@compute @workgroup_size(WG)
fn ffn_gelu_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: ffn_swiglu_backward ---
// Backward of `swiglu_combine` (out = silu(gate)·up, silu(g) = g·σ(g)) for i < p.n:
// `d_up[i] = d_out[i] · silu(gate[i])`,
// `d_gate[i] = d_out[i] · up[i] · silu'(gate[i])`, silu'(g) = σ(g) + g·σ(g)(1 − σ(g)).
// `gate`, `up`, `d_out`, `d_gate`, `d_up`: n values each. Overwrites `d_gate` and `d_up`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
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

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // All 24 loads first, then the stores.
    let ga = vec4<f32>(gate[lo.x], gate[lo.y], gate[lo.z], gate[lo.w]);
    let gb = vec4<f32>(gate[hi.x], gate[hi.y], gate[hi.z], gate[hi.w]);
    let ua = vec4<f32>(up[lo.x], up[lo.y], up[lo.z], up[lo.w]);
    let ub = vec4<f32>(up[hi.x], up[hi.y], up[hi.z], up[hi.w]);
    let oa = vec4<f32>(d_out[lo.x], d_out[lo.y], d_out[lo.z], d_out[lo.w]);
    let ob = vec4<f32>(d_out[hi.x], d_out[hi.y], d_out[hi.z], d_out[hi.w]);
    let r0 = swiglu_bwd(ga.x, ua.x, oa.x);
    let r1 = swiglu_bwd(ga.y, ua.y, oa.y);
    let r2 = swiglu_bwd(ga.z, ua.z, oa.z);
    let r3 = swiglu_bwd(ga.w, ua.w, oa.w);
    let r4 = swiglu_bwd(gb.x, ub.x, ob.x);
    let r5 = swiglu_bwd(gb.y, ub.y, ob.y);
    let r6 = swiglu_bwd(gb.z, ub.z, ob.z);
    let r7 = swiglu_bwd(gb.w, ub.w, ob.w);
    d_gate[lo.x] = r0.x;
    d_gate[lo.y] = r1.x;
    d_gate[lo.z] = r2.x;
    d_gate[lo.w] = r3.x;
    d_gate[hi.x] = r4.x;
    d_gate[hi.y] = r5.x;
    d_gate[hi.z] = r6.x;
    d_gate[hi.w] = r7.x;
    d_up[lo.x] = r0.y;
    d_up[lo.y] = r1.y;
    d_up[lo.z] = r2.y;
    d_up[lo.w] = r3.y;
    d_up[hi.x] = r4.y;
    d_up[hi.y] = r5.y;
    d_up[hi.z] = r6.y;
    d_up[hi.w] = r7.y;
}

fn ew_one(j: u32) {
    let r = swiglu_bwd(gate[j], up[j], d_out[j]);
    d_gate[j] = r.x;
    d_up[j] = r.y;
}

@compute @workgroup_size(WG)
fn ffn_swiglu_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: ffn_swiglu_backward_f16 ---
// `ffn_swiglu_backward` with the gradients in f16 only (mixed precision: they are the output
// gradients of W1 and W3, which read nothing else): each element the same f32 arithmetic as
// `ffn_swiglu_backward` (the same bits), then what `cast::cast_grad_f16x4` makes of it — rounded
// (beyond ±65504 → ±65504, NaN kept) into the f16x4 row layout, `d_gate16` and `d_up16`
// `[rows, ⌈cols/4⌉]` vec4<f16> (rows padded with zeros), and the overflow check of loss scaling:
// any gradient that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears it).
// `gate`, `up`, `d_out`: `[rows, cols]` row-major f32. Overwrites `d_gate16` and `d_up16` (the
// first rows·⌈cols/4⌉ vec4s). Needs SHADER_F16. Grid: one workgroup per 1024 output vec4s of each
// gradient, 4 per invocation (all loads first), 1-D (2-D past the device's limit).
// @grid workgroups(ceil_div(p.rows * ceil_div(p.cols, 4), VEC_CHUNK))
// @requires len(gate) >= p.rows * p.cols
// @requires len(up) >= p.rows * p.cols
// @requires len(d_out) >= p.rows * p.cols
// @requires len(d_gate16) >= p.rows * ceil_div(p.cols, 4)
// @requires len(d_up16) >= p.rows * ceil_div(p.cols, 4)
// @requires len(flag) >= 1
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read> d_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> d_gate16: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> d_up16: array<vec4<f16>>;
@group(0) @binding(5) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(6) var<uniform> p: RowsParams;
//#include "lib/f16x4.wgsl"
//#include "lib/grad16.wgsl"
//#include "lib/vec4_rows.wgsl"

fn load4(i: u32) -> array<vec4<f32>, 3> {
    return array<vec4<f32>, 3>(
        vec4<f32>(gate[i], gate[i + 1u], gate[i + 2u], gate[i + 3u]),
        vec4<f32>(up[i], up[i + 1u], up[i + 2u], up[i + 3u]),
        vec4<f32>(d_out[i], d_out[i + 1u], d_out[i + 2u], d_out[i + 3u]),
    );
}

// vec4 e of both gradients from four elements' gate, up and d_out (zeros give zeros).
fn store4(e: u32, a: array<vec4<f32>, 3>) {
    let r0 = swiglu_bwd(a[0].x, a[1].x, a[2].x);
    let r1 = swiglu_bwd(a[0].y, a[1].y, a[2].y);
    let r2 = swiglu_bwd(a[0].z, a[1].z, a[2].z);
    let r3 = swiglu_bwd(a[0].w, a[1].w, a[2].w);
    d_gate16[e] = grad16(vec4<f32>(r0.x, r1.x, r2.x, r3.x));
    d_up16[e] = grad16(vec4<f32>(r0.y, r1.y, r2.y, r3.y));
}

fn v4_four(e: vec4<u32>) {
    // All 48 loads first, then the stores.
    let i = 4u * e;
    let a0 = load4(i.x);
    let a1 = load4(i.y);
    let a2 = load4(i.z);
    let a3 = load4(i.w);
    store4(e.x, a0);
    store4(e.y, a1);
    store4(e.z, a2);
    store4(e.w, a3);
}

fn v4_one(e: u32, i: u32, n: u32) {
    // Padding lanes: gate = up = d_out = 0, whose gradients are 0 (σ(0)·0).
    var a = array<vec4<f32>, 3>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    a[0].x = gate[i];
    a[1].x = up[i];
    a[2].x = d_out[i];
    if (n > 1u) {
        a[0].y = gate[i + 1u];
        a[1].y = up[i + 1u];
        a[2].y = d_out[i + 1u];
    }
    if (n > 2u) {
        a[0].z = gate[i + 2u];
        a[1].z = up[i + 2u];
        a[2].z = d_out[i + 2u];
    }
    if (n > 3u) {
        a[0].w = gate[i + 3u];
        a[1].w = up[i + 3u];
        a[2].w = d_out[i + 3u];
    }
    store4(e, a);
}

@compute @workgroup_size(WG)
fn ffn_swiglu_backward_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, p.rows, p.cols);
}
