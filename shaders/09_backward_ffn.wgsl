// Backward of the feed-forward activations (`06_activation.wgsl`): GELU (tanh approximation)
// and the SwiGLU combine.
//
// Element-wise, 1-D, 8 elements per invocation through `lib/elementwise.wgsl` (enough loads in
// flight to cover the memory latency, the 2-D grid fallback, a guarded tail); the derivatives
// and their numerics are in `lib/activations.wgsl`, beside the forward functions: no Inf/NaN
// arises for finite inputs (checked up to |x| = 10⁴). The `_gu` forms are the backward of
// `activation::swiglu_gu`: they read the fused gate/up rows and write one fused gradient, the
// output gradient of the one gate/up product (the trainer's); `ffn_swiglu_backward_gu_f16`
// (mixed precision) writes it as f16 rows instead, walking the f16x4 row layout
// (`lib/vec4_rows.wgsl`) with the overflow check of loss scaling (`lib/grad16.wgsl`).
//#include "lib/elementwise.wgsl"
//#include "lib/activations.wgsl"

// SwiGLU's two gradients of one element: (d_gate, d_up), shared by `ffn_swiglu_backward` and
// the `_gu` forms (the same f32 arithmetic in all).
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

// --- KERNEL: ffn_swiglu_backward_gu ---
// Backward of `activation::swiglu_gu` (the combine over fused gate/up rows): from `gu`
// `[rows, 2·cols]` (gate in columns 0 … cols − 1, up in cols … 2·cols − 1) and `d_out`
// `[rows, cols]`, the fused gradient `dgu` `[rows, 2·cols]`: `dgu[r, j]` = d_gate and
// `dgu[r, cols + j]` = d_up of `ffn_swiglu_backward` at (r, j) (the same arithmetic and bits)
// — the output gradient of the one product `h·W13ᵀ`. Overwrites `dgu[0 .. rows·2·cols]`. Grid:
// one workgroup per 2048 (r, j), 8 per invocation (file header).
// @grid workgroups(ceil_div(p.rows * p.cols, EW_CHUNK))
// @requires len(gu) >= p.rows * 2 * p.cols
// @requires len(d_out) >= p.rows * p.cols
// @requires len(dgu) >= p.rows * 2 * p.cols
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> gu: array<f32>;
@group(0) @binding(1) var<storage, read> d_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> dgu: array<f32>;
@group(0) @binding(3) var<uniform> p: RowsParams;

// Where element j = r·cols + c of `d_out` has its gate in `gu` (and its d_gate in `dgu`):
// 2·cols·r + c; its up is p.cols further.
fn gate_at(j: vec4<u32>) -> vec4<u32> {
    return j + (j / vec4<u32>(p.cols)) * p.cols;
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // All 24 loads first, then the stores.
    let gl = gate_at(lo);
    let gh = gate_at(hi);
    let ul = gl + p.cols;
    let uh = gh + p.cols;
    let ga = vec4<f32>(gu[gl.x], gu[gl.y], gu[gl.z], gu[gl.w]);
    let gb = vec4<f32>(gu[gh.x], gu[gh.y], gu[gh.z], gu[gh.w]);
    let ua = vec4<f32>(gu[ul.x], gu[ul.y], gu[ul.z], gu[ul.w]);
    let ub = vec4<f32>(gu[uh.x], gu[uh.y], gu[uh.z], gu[uh.w]);
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
    dgu[gl.x] = r0.x;
    dgu[gl.y] = r1.x;
    dgu[gl.z] = r2.x;
    dgu[gl.w] = r3.x;
    dgu[gh.x] = r4.x;
    dgu[gh.y] = r5.x;
    dgu[gh.z] = r6.x;
    dgu[gh.w] = r7.x;
    dgu[ul.x] = r0.y;
    dgu[ul.y] = r1.y;
    dgu[ul.z] = r2.y;
    dgu[ul.w] = r3.y;
    dgu[uh.x] = r4.y;
    dgu[uh.y] = r5.y;
    dgu[uh.z] = r6.y;
    dgu[uh.w] = r7.y;
}

fn ew_one(j: u32) {
    let g = gate_at(vec4<u32>(j)).x;
    let r = swiglu_bwd(gu[g], gu[g + p.cols], d_out[j]);
    dgu[g] = r.x;
    dgu[g + p.cols] = r.y;
}

@compute @workgroup_size(WG)
fn ffn_swiglu_backward_gu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.rows * p.cols);
}

// --- KERNEL: ffn_swiglu_backward_gu_f16 ---
// `ffn_swiglu_backward_gu` with the fused gradient in f16 only (mixed precision: it is the
// output gradient of the fused gate/up projection's two products, which read nothing else):
// each value the f32 arithmetic of `ffn_swiglu_backward` (the same bits), then what
// `cast::cast_grad_f16x4` makes of it — rounded (beyond ±65504 → ±65504, NaN kept) into the
// f16x4 row layout, `dgu16` `[rows, ⌈2·cols/4⌉]` vec4<f16> (d_gate in columns 0 … cols − 1,
// d_up in cols … 2·cols − 1, rows padded with zeros), and the overflow check of loss scaling:
// any gradient that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears it).
// `gu` `[rows, 2·cols]` and `d_out` `[rows, cols]` row-major f32. Overwrites `dgu16` (the
// first rows·⌈2·cols/4⌉ vec4s). Needs SHADER_F16. Grid: one workgroup per 1024 vec4s of
// `d_out`'s `[rows, ⌈cols/4⌉]`, 4 per invocation (all loads first), 1-D (2-D past the device's
// limit). When cols % 4 == 0 each takes four columns and writes their d_gate vec4 and their
// d_up vec4; otherwise vec4 k of a row writes the output vec4s 2k and 2k + 1 of that row
// (⌈2·cols/4⌉ ≤ 2·⌈cols/4⌉), each lane from its own column, since the halves' vec4s do not
// line up.
// @grid workgroups(ceil_div(p.rows * ceil_div(p.cols, 4), VEC_CHUNK))
// @requires len(gu) >= p.rows * 2 * p.cols
// @requires len(d_out) >= p.rows * p.cols
// @requires len(dgu16) >= p.rows * ceil_div(2 * p.cols, 4)
// @requires len(flag) >= 1
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> gu: array<f32>;
@group(0) @binding(1) var<storage, read> d_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> dgu16: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> p: RowsParams;
//#include "lib/f16x4.wgsl"
//#include "lib/grad16.wgsl"
//#include "lib/vec4_rows.wgsl"

// cols % 4 == 0: d_out's vec4 e (row r = e / (cols/4)) and its gate and up vec4s, which start
// at 4e + r·cols and p.cols further.
fn load_row4(e: u32) -> array<vec4<f32>, 3> {
    let o = 4u * e;
    let g = o + (e / (p.cols / 4u)) * p.cols;
    let u = g + p.cols;
    return array<vec4<f32>, 3>(
        vec4<f32>(gu[g], gu[g + 1u], gu[g + 2u], gu[g + 3u]),
        vec4<f32>(gu[u], gu[u + 1u], gu[u + 2u], gu[u + 3u]),
        vec4<f32>(d_out[o], d_out[o + 1u], d_out[o + 2u], d_out[o + 3u]),
    );
}

// cols % 4 == 0: the d_gate and d_up vec4s of d_out's vec4 e (row r), output vec4s
// r·cols/2 + k and cols/4 further (k = e − r·cols/4, so r·cols/2 + k = e + r·cols/4).
fn store_row4(e: u32, a: array<vec4<f32>, 3>) {
    let cq = p.cols / 4u;
    let o = e + (e / cq) * cq;
    let r0 = swiglu_bwd(a[0].x, a[1].x, a[2].x);
    let r1 = swiglu_bwd(a[0].y, a[1].y, a[2].y);
    let r2 = swiglu_bwd(a[0].z, a[1].z, a[2].z);
    let r3 = swiglu_bwd(a[0].w, a[1].w, a[2].w);
    dgu16[o] = grad16(vec4<f32>(r0.x, r1.x, r2.x, r3.x));
    dgu16[o + cq] = grad16(vec4<f32>(r0.y, r1.y, r2.y, r3.y));
}

fn v4_four(e: vec4<u32>) {
    // All 48 loads first, then the stores.
    let a0 = load_row4(e.x);
    let a1 = load_row4(e.y);
    let a2 = load_row4(e.z);
    let a3 = load_row4(e.w);
    store_row4(e.x, a0);
    store_row4(e.y, a1);
    store_row4(e.z, a2);
    store_row4(e.w, a3);
}

// Fused column c of row r's gradient (0 past the row: padding).
fn lane(r: u32, c: u32) -> f32 {
    if (c >= 2u * p.cols) {
        return 0.0;
    }
    let j = select(c, c - p.cols, c >= p.cols);
    let g = 2u * p.cols * r + j;
    let d = swiglu_bwd(gu[g], gu[g + p.cols], d_out[p.cols * r + j]);
    return select(d.x, d.y, c >= p.cols);
}

// Output vec4 o of row r (cols % 4 != 0), if the row has it.
fn store_lanes(r: u32, o: u32) {
    let cw = (2u * p.cols + 3u) / 4u;
    if (o < cw) {
        let c = 4u * o;
        let v = vec4<f32>(lane(r, c), lane(r, c + 1u), lane(r, c + 2u), lane(r, c + 3u));
        dgu16[r * cw + o] = grad16(v);
    }
}

fn v4_one(e: u32, i: u32, n: u32) {
    if (p.cols % 4u == 0u) {
        store_row4(e, load_row4(e));
        return;
    }
    let cq = (p.cols + 3u) / 4u;
    let r = e / cq;
    let k = e - r * cq;
    store_lanes(r, 2u * k);
    store_lanes(r, 2u * k + 1u);
}

@compute @workgroup_size(WG)
fn ffn_swiglu_backward_gu_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, p.rows, p.cols);
}
