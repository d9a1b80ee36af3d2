// Fused memory-bound kernels of the mixed-precision step: each does in one pass what took two or
// three (an f32 result written, read back and cast to f16), and each is laid out for memory
// speed on a large GPU (many independent loads per invocation, coalesced, all issued before any
// is used; hand-unrolled straight-line stores, no dynamically indexed vectors, which drivers
// spill to local memory).
//
// f16 outputs use the f16x4 row layout of `linear16` (an [R, C] matrix is R·⌈C/4⌉ vec4<f16>,
// every row zero-padded to a multiple of 4; exactly row-major f16 when C % 4 == 0). Values are
// rounded to nearest f16 as `ops::to_f16x4` does on the host: beyond ±65504 they become ±65504, NaN
// stays NaN. All f32 inputs are plain row-major `array<f32>` (the trainer's buffers). Every grid
// takes the runtime's 2-D fallback past the device's workgroups-per-dimension limit.
//
//   rmsnorm_f16, residual_rmsnorm_f16   RMSNorm forward straight to f16 (+ the residual add)
//   swiglu_f16                          silu(gate)·up straight to f16
//   adamw_mixed                         AdamW on f32 masters + f16 copy, bias correction that
//                                       does not advance on steps the loss scaler skipped
//   cast_f16x4                          f32 → f16x4 rows, 4 vec4 per invocation

const F16_LIMIT: f32 = 65504.0;
const LANES4: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// Which lanes are NaN, from the bits (`v != v` may be folded away by drivers).
fn nan4(v: vec4<f32>) -> vec4<bool> {
    let bits = bitcast<vec4<u32>>(v);
    return ((bits & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u)) & ((bits & vec4<u32>(0x007fffffu)) != vec4<u32>(0u));
}

// v as f16, clamped to ±65504 first (NaN kept): `ops::to_f16x4`'s rounding.
fn to_f16x4(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(select(clamp(v, vec4<f32>(-F16_LIMIT), vec4<f32>(F16_LIMIT)), v, nan4(v)));
}

// Which of the four columns c..c+3 lie below `lim`.
fn below4(c: u32, lim: u32) -> vec4<bool> {
    return vec4<u32>(c) + LANES4 < vec4<u32>(lim);
}

// --- KERNEL: rmsnorm_f16 ---
// RMSNorm forward with an f16 output: `y[r, j] = f16(x[r, j] · rrms[r] · gamma[j])` with
// `rrms[r] = 1 / sqrt(Σ_j x[r, j]² / d + eps)` (the math of `norm::rmsnorm_forward`, f32
// arithmetic, then rounded as `cast_f16x4` rounds), for the `[rows, d]` row-major f32
// x. `y` is `[rows, ⌈d/4⌉]` vec4<f16> (f16x4 row layout, padding columns written as 0): the
// operand of the f16 products, so no separate cast is needed. Overwrites `y[0 .. rows·⌈d/4⌉]`
// and `rrms[0 .. rows]` (saved for `norm::rmsnorm_backward`, which takes x, gamma and rrms as
// before). Needs SHADER_F16. One workgroup of 256 per 4 rows (grid `workgroups(⌈rows/4⌉)`),
// 64 invocations per row, each on vec4 columns lane + 64·k (lib/norm16.wgsl).
// @grid workgroups(ceil_div(p.rows, NORM_ROWS))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(y) >= p.rows * ceil_div(p.d, 4)
// @requires len(rrms) >= p.rows
struct NormParams {
    rows: u32,
    d: u32,
    eps: f32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> rrms: array<f32>;
@group(0) @binding(4) var<uniform> p: NormParams;
//#include "lib/norm16.wgsl"

// The input of row `base` at columns c..c+3 (zeros at columns ≥ lim).
fn first4(base: u32, c: u32, lim: u32) -> vec4<f32> {
    return load_x4(base, c, lim);
}

@compute @workgroup_size(WG)
fn rmsnorm_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    norm16_rows(wid, nwg, tid);
}

// --- KERNEL: residual_rmsnorm_f16 ---
// The residual add and the next RMSNorm in one pass: `x[r, j] + res[r, j]` (one f32 addition)
// stored back into the residual stream x, then `rmsnorm_f16` of that sum:
// `y[r, j] = f16(x[r, j] · rrms[r] · gamma[j])`, `rrms[r] = 1 / sqrt(Σ_j x[r, j]² / d + eps)`.
// Shapes: x, res `[rows, d]` row-major f32; y `[rows, ⌈d/4⌉]` vec4<f16> (f16x4 row layout,
// padding columns written as 0). Updates `x[0 .. rows·d]` in place; overwrites
// `y[0 .. rows·⌈d/4⌉]` and `rrms[0 .. rows]` (rrms and the new x are what
// `norm::rmsnorm_backward` takes). `res` must not be `x` (the borrow rules of the generated
// function see to that). Needs SHADER_F16. One workgroup of 256 per 4 rows (grid
// `workgroups(⌈rows/4⌉)`), as `rmsnorm_f16`.
// @grid workgroups(ceil_div(p.rows, NORM_ROWS))
// @requires len(x) >= p.rows * p.d
// @requires len(res) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(y) >= p.rows * ceil_div(p.d, 4)
// @requires len(rrms) >= p.rows
struct NormParams {
    rows: u32,
    d: u32,
    eps: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> res: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> rrms: array<f32>;
@group(0) @binding(5) var<uniform> p: NormParams;
//#include "lib/norm16.wgsl"

// x[i..i+4] + res[i..i+4], stored back to x.
fn add4(i: u32) -> vec4<f32> {
    let s = vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]) + vec4<f32>(res[i], res[i + 1u], res[i + 2u], res[i + 3u]);
    x[i] = s.x;
    x[i + 1u] = s.y;
    x[i + 2u] = s.z;
    x[i + 3u] = s.w;
    return s;
}

// x + res of row `base` at columns c..c+3 below lim, written back to x (zeros at columns ≥ lim).
fn first4(base: u32, c: u32, lim: u32) -> vec4<f32> {
    if (c + 3u < lim && p.d % 4u == 0u) {
        // base + c is a multiple of 4 here, written as 4·q (as in `load_x4`).
        return add4(4u * ((base + c) / 4u));
    }
    if (c + 3u < lim) {
        return add4(base + c);
    }
    let i = base + c;
    var s = vec4<f32>(0.0);
    if (c < lim) {
        s.x = x[i] + res[i];
        x[i] = s.x;
    }
    if (c + 1u < lim) {
        s.y = x[i + 1u] + res[i + 1u];
        x[i + 1u] = s.y;
    }
    if (c + 2u < lim) {
        s.z = x[i + 2u] + res[i + 2u];
        x[i + 2u] = s.z;
    }
    return s;
}

@compute @workgroup_size(WG)
fn residual_rmsnorm_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    norm16_rows(wid, nwg, tid);
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

// --- KERNEL: adamw_mixed ---
// One AdamW step of one tensor [rows, cols] with f32 master weights `p` and moments `m`, `v`,
// and its f16 copy `p16` (f16x4 row layout, [rows, ⌈cols/4⌉] vec4<f16>) rewritten in the same
// pass from the new master, at memory speed, with the bias correction of the effective step.
// The gradient `g` (scaled by the loss scale) is multiplied by
// `state[4]` = clip / S (the loss scaler's state, `mixed::scaler_update`, run before this in
// the same step); when `state[3]` ≠ 0 the step is skipped (p, m, v unchanged; p16 rewritten from
// p). Otherwise the update is `optimizer::adamw_update`'s formula (decoupled weight decay) with
// the bias corrections 1 − β^t of the effective step t = `h.step` − `state[2]` (at least 1):
// `h.step` is the 1-based number of this step counting skipped ones, `state[2]` the steps the
// scaler has skipped so far, so a skipped step does not advance Adam's step count (as PyTorch's
// GradScaler skips `optimizer.step()`); the learning rate `h.lr` is the caller's (its schedule
// follows `h.step`). 1 − β^t = −expm1(t·ln β) from `h.ln_beta1` = ln β1 and `h.ln_beta2` = ln β2
// (computed on the host in f64; −∞ for β = 0): a series for |t·ln β| < 0.5, where 1 − exp would
// cancel, 1 − exp otherwise; within a few f32 ulps of the exact value. Updates `p`, `m`, `v` in
// place, overwrites `p16` and zeroes `g` in every case. Grid: one workgroup per 1024 vec4s of
// `p16`, 4 per invocation, 1-D (2-D past the device's limit).
// @grid workgroups(ceil_div(h.rows * ceil_div(h.cols, 4), VEC_CHUNK))
// @requires len(p) >= h.rows * h.cols
// @requires len(g) >= h.rows * h.cols
// @requires len(m) >= h.rows * h.cols
// @requires len(v) >= h.rows * h.cols
// @requires len(p16) >= h.rows * ceil_div(h.cols, 4)
// @requires len(state) >= 5
struct AdamParams {
    rows: u32,
    cols: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    // The 1-based number of this step, skipped steps included.
    step: u32,
    // ln β1 and ln β2 (host, f64 rounded to f32).
    ln_beta1: f32,
    ln_beta2: f32,
}
@group(0) @binding(0) var<storage, read_write> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> p16: array<vec4<f16>>;
@group(0) @binding(5) var<storage, read> state: array<f32>;
@group(0) @binding(6) var<uniform> h: AdamParams;
//#include "lib/adam.wgsl"
//#include "lib/vec4_rows.wgsl"

// 1 − β^t = −expm1(t·ln β) for t ≥ 1, ln β ≤ 0.
fn one_minus_pow(ln_b: f32, t: f32) -> f32 {
    let z = t * ln_b;
    if (z > -0.5) {
        // −expm1(z) by its Taylor series to z⁸ (the next term is below 1.1e-8 relative).
        let s = 1.0 + z * (0.5 + z * (1.0 / 6.0 + z * (1.0 / 24.0 + z * (1.0 / 120.0 + z * (1.0 / 720.0 + z * (1.0 / 5040.0 + z * (1.0 / 40320.0)))))));
        return -z * s;
    }
    return 1.0 - exp(z);
}

// This step's gradient factor, skip and bias corrections, read once per invocation.
struct StepInfo {
    skip: bool,
    factor: f32,
    bias1: f32,
    bias2: f32,
}

fn step_info() -> StepInfo {
    let t = max(f32(h.step) - state[2], 1.0);
    return StepInfo(state[3] != 0.0, state[4], one_minus_pow(h.ln_beta1, t), one_minus_pow(h.ln_beta2, t));
}

fn load4(i: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(
        vec4<f32>(g[i], g[i + 1u], g[i + 2u], g[i + 3u]),
        vec4<f32>(m[i], m[i + 1u], m[i + 2u], m[i + 3u]),
        vec4<f32>(v[i], v[i + 1u], v[i + 2u], v[i + 3u]),
        vec4<f32>(p[i], p[i + 1u], p[i + 2u], p[i + 3u]),
    );
}

// Stores one whole vec4 (elements i..i+3) and returns the new master.
fn step4(i: u32, a: array<vec4<f32>, 4>, s: StepInfo) -> vec4<f32> {
    g[i] = 0.0;
    g[i + 1u] = 0.0;
    g[i + 2u] = 0.0;
    g[i + 3u] = 0.0;
    if (s.skip) {
        return a[3];
    }
    let r = adam4_bias(a[0], a[1], a[2], a[3], s.factor, s.bias1, s.bias2);
    m[i] = r.m.x;
    m[i + 1u] = r.m.y;
    m[i + 2u] = r.m.z;
    m[i + 3u] = r.m.w;
    v[i] = r.v.x;
    v[i + 1u] = r.v.y;
    v[i + 2u] = r.v.z;
    v[i + 3u] = r.v.w;
    p[i] = r.p.x;
    p[i + 1u] = r.p.y;
    p[i + 2u] = r.p.z;
    p[i + 3u] = r.p.w;
    return r.p;
}

fn v4_four(e: vec4<u32>) {
    let s = step_info();
    let i = 4u * e;
    let a0 = load4(i.x);
    let a1 = load4(i.y);
    let a2 = load4(i.z);
    let a3 = load4(i.w);
    p16[e.x] = to_f16x4(step4(i.x, a0, s));
    p16[e.y] = to_f16x4(step4(i.y, a1, s));
    p16[e.z] = to_f16x4(step4(i.z, a2, s));
    p16[e.w] = to_f16x4(step4(i.w, a3, s));
}

// Element i of g, m, v, p (as a column of a[]) when k < n, else zeros.
fn load1(i: u32, k: u32, n: u32) -> vec4<f32> {
    if (k < n) {
        return vec4<f32>(g[i + k], m[i + k], v[i + k], p[i + k]);
    }
    return vec4<f32>(0.0);
}

// Stores the new m, v, p of element i + k when k < n, and zeroes its gradient.
fn store1(i: u32, k: u32, n: u32, skip: bool, mv: vec2<f32>, w: f32) {
    if (k < n) {
        g[i + k] = 0.0;
        if (!skip) {
            m[i + k] = mv.x;
            v[i + k] = mv.y;
            p[i + k] = w;
        }
    }
}

fn v4_one(e: u32, i: u32, n: u32) {
    let s = step_info();
    let c0 = load1(i, 0u, n);
    let c1 = load1(i, 1u, n);
    let c2 = load1(i, 2u, n);
    let c3 = load1(i, 3u, n);
    let gv = vec4<f32>(c0.x, c1.x, c2.x, c3.x);
    let mv = vec4<f32>(c0.y, c1.y, c2.y, c3.y);
    let vv = vec4<f32>(c0.z, c1.z, c2.z, c3.z);
    let pv = vec4<f32>(c0.w, c1.w, c2.w, c3.w);
    let r = adam4_bias(gv, mv, vv, pv, s.factor, s.bias1, s.bias2);
    store1(i, 0u, n, s.skip, vec2<f32>(r.m.x, r.v.x), r.p.x);
    store1(i, 1u, n, s.skip, vec2<f32>(r.m.y, r.v.y), r.p.y);
    store1(i, 2u, n, s.skip, vec2<f32>(r.m.z, r.v.z), r.p.z);
    store1(i, 3u, n, s.skip, vec2<f32>(r.m.w, r.v.w), r.p.w);
    let w = select(r.p, pv, s.skip);
    p16[e] = to_f16x4(select(vec4<f32>(0.0), w, below4(0u, n)));
}

@compute @workgroup_size(WG)
fn adamw_mixed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, h.rows, h.cols);
}

// --- KERNEL: cast_f16x4 ---
// An f32 matrix `src` [rows, cols] (row-major) to the f16x4 row layout: `dst` [rows, ⌈cols/4⌉]
// vec4<f16>, dst[r][c] = f16(src[r, c]) with every row padded by zeros to a multiple of 4 —
// bit for bit what `ops::to_f16x4` writes on the host (round to nearest, beyond ±65504 →
// ±65504, NaN stays NaN), with 4 vec4s per invocation and all loads issued first. Overwrites `dst` (the
// first rows·⌈cols/4⌉ vec4s). Needs SHADER_F16. Grid: one workgroup per 1024 vec4s of `dst`, 1-D
// (2-D past the device's limit).
// @grid workgroups(ceil_div(p.rows * ceil_div(p.cols, 4), VEC_CHUNK))
// @requires len(src) >= p.rows * p.cols
// @requires len(dst) >= p.rows * ceil_div(p.cols, 4)
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f16>>;
@group(0) @binding(2) var<uniform> p: RowsParams;
//#include "lib/vec4_rows.wgsl"

fn src4(i: u32) -> vec4<f32> {
    return vec4<f32>(src[i], src[i + 1u], src[i + 2u], src[i + 3u]);
}

fn v4_four(e: vec4<u32>) {
    let i = 4u * e;
    let a0 = src4(i.x);
    let a1 = src4(i.y);
    let a2 = src4(i.z);
    let a3 = src4(i.w);
    dst[e.x] = to_f16x4(a0);
    dst[e.y] = to_f16x4(a1);
    dst[e.z] = to_f16x4(a2);
    dst[e.w] = to_f16x4(a3);
}

fn v4_one(e: u32, i: u32, n: u32) {
    var a = vec4<f32>(0.0);
    a.x = src[i];
    if (n > 1u) {
        a.y = src[i + 1u];
    }
    if (n > 2u) {
        a.z = src[i + 2u];
    }
    if (n > 3u) {
        a.w = src[i + 3u];
    }
    dst[e] = to_f16x4(a);
}

@compute @workgroup_size(WG)
fn cast_f16x4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, p.rows, p.cols);
}
