// The optimizer step, entirely on the GPU (no readback): global gradient-norm clipping, then
// AdamW (f32 state, 8-bit state, or f32 masters with an f16 copy: `adamw_mixed`) on every
// parameter tensor, and the loss scaler of mixed precision (below). A "tensor" is any buffer the
// host binds: one parameter's, or a run of parameters that lie in one allocation with zeros
// between them (the trainer's pages), which the same kernels update in one dispatch.
//
// One step over T tensors, recorded in one batch:
//   1. for each tensor k: `reduce_norm_sq(g_k, partials, bad, {n_k, offset_k})`, with
//      offset_0 = 0 and offset_{k+1} = offset_k + ⌈n_k / NORM_BLOCK⌉ (NORM_BLOCK = 4096): the
//      host assigns each tensor its own range of partials in one shared buffer;
//   2. `finalize_grad_stats(partials, bad, stats, {count = Σ_k ⌈n_k / 4096⌉, max_norm})`;
//   3. for each tensor: `adamw_update(…, stats, …)` or `adamw_8bit_update(…, stats, …)`.
//
// `stats` (f32, 4 values, written by `finalize_grad_stats`, read by the updates):
//   stats[0] = norm² = Σ g² over every finite gradient value of every tensor,
//   stats[1] = clip scale = min(1, max_norm / (√norm² + 1e-6)); 1 when max_norm ≤ 0,
//   stats[2] = √norm² (the global gradient norm, for logging),
//   stats[3] = the number of non-finite (NaN or ±Inf) gradient values, as f32 (exact below 2²⁴).
// Non-finite gradient values are left out of the norm (the updates skip them too), and counted,
// so the trainer can flag or skip a step with stats[3] > 0 (e.g. for loss scaling) without a
// NaN norm poisoning every tensor's update. A finite |g| > 1.8e19 overflows g² to +Inf: the norm
// is then +Inf and the clip scale 0 (when clipping is on).
//
// Every result is deterministic: the order of every sum is fixed (per-block partials in a
// fixed order, then one fixed-order pass), no atomics.
//
// The updates (both forms) for each element i < n with raw gradient x = g[i]:
//   g[i] = 0                                    (always — even when skipped; see below)
//   if x is NaN or ±Inf: p, m, v of i unchanged (skipped)
//   else: gc = x · stats[1]
//         m = β1·m + (1−β1)·gc,  v = β2·v + (1−β2)·gc²
//         m̂ = m / bias1,  v̂ = v / bias2     (bias1 = 1−β1^t, bias2 = 1−β2^t from the host, t ≥ 1)
//         p = p − lr·(m̂ / (√v̂ + eps) + weight_decay·p)   (decoupled weight decay, old p)
// The gradient is zeroed after use in every case, so the backward pass of the next step can
// accumulate into it with `+=` without a separate clear.

// Memory traffic: every invocation handles several elements and issues their loads before it
// uses any, so enough loads are in flight to cover the memory latency (`reduce_norm_sq`: 16
// values; `adamw_update`: 8 elements of p, g, m, v; `adamw_8bit_update`: 4 elements, one of each
// of 4 blocks). In each unrolled step consecutive invocations touch consecutive elements
// (coalesced).

// Gradient values each `reduce_norm_sq` workgroup folds into one partial (16 per invocation).
const NORM_BLOCK: u32 = 4096u;
const_assert NORM_BLOCK == 16u * WG;
// Values per 8-bit quantization block (one value per invocation and block).
const QBLOCK: u32 = 256u;
// 8-bit blocks per `adamw_8bit_update` workgroup, and the values they hold.
const QBLOCKS_PER_WG: u32 = 4u;
const QCHUNK: u32 = 1024u;
const_assert QCHUNK == QBLOCKS_PER_WG * QBLOCK;
// `adamw_update` is element-wise: 8 elements per invocation, 2048 per workgroup (EW_CHUNK);
// EW_LO / EW_HI are also the offsets of the other kernels' unrolled loads.
//#include "lib/elementwise.wgsl"

// Mixed-precision training: dynamic loss scaling. Everything stays on the GPU: the overflow check, the skip and the scale's growth are
// decided by kernels, never by a read-back inside a step.
//
// One mixed-precision step, recorded in one batch:
//   1. forward with f16 operands (the weights' f16 copies, activations written in f16 by
//      `fused`'s norms and SwiGLU), the loss in f32;
//   2. `scale_by_state(dlogits, state)`: the loss gradient times the loss scale S = state[0];
//   3. backward: every gradient operand cast to f16 by `cast_grad_f16x4`, which raises
//      `flag[0]` when a value is NaN, ±Inf or beyond the f16 range (±65504);
//   4. `optimizer::reduce_norm_sq` + `finalize_grad_stats` over the scaled gradients;
//   5. `scaler_update(stats, flag, state)`: decides skip or not, this step's gradient factor
//      (clip / S), the next S, and clears `flag`;
//   6. `optimizer::adamw_mixed` on every tensor: AdamW on the f32 master, the f16 copy rewritten in
//      the same pass, the gradient zeroed.
//
// `state` (f32, SCALER_STATE = 8 values):
//   state[0] = S, the loss scale the next backward pass uses,
//   state[1] = clean steps since S last changed (exact below 2²⁴),
//   state[2] = steps skipped so far (exact below 2²⁴),
//   state[3] = 1 when the last step was skipped, else 0,
//   state[4] = the last step's gradient factor clip / S_used (0 when skipped),
//   state[5..8] unused (0).
// The rule (PyTorch's GradScaler, with the skip decided on the GPU): a step whose scaled
// gradients hold a NaN or ±Inf (stats[3] > 0, a non-finite norm) or whose gradient casts
// overflowed f16 (flag[0] ≠ 0) is skipped — weights and moments unchanged — and S halves (not
// below MIN_SCALE); otherwise, after `growth_interval` clean steps in a row, S doubles (not above
// MAX_SCALE) and the count restarts.

const MIN_SCALE: f32 = 5.9604645e-8; // 2⁻²⁴
const MAX_SCALE: f32 = 16777216.0; // 2²⁴

// --- KERNEL: reduce_norm_sq ---
// Partial sums of squares of one gradient tensor `g` (n values): workgroup b writes
// `partials[p.offset + b] = Σ g[i]²` over the finite values of its block
// `i ∈ [b·4096, min(n, (b+1)·4096))`, and `bad[p.offset + b]` = the number of NaN/±Inf values
// in the block (left out of the sum). Overwrites `partials[offset .. offset + ⌈n/4096⌉]` and
// `bad[offset .. offset + ⌈n/4096⌉]`; nothing else. The order inside a block is fixed (each
// invocation sums its 16 values b·4096 + tid + k·256 in index order, all 16 loaded first, then
// the workgroup reduction), so the result is the same bits on every run. Grid: one workgroup
// per block (2-D past the device's limit).
// @grid workgroups(ceil_div(p.n, NORM_BLOCK))
// @requires len(g) >= p.n
// @requires len(partials) >= p.offset + ceil_div(p.n, NORM_BLOCK)
// @requires len(bad) >= p.offset + ceil_div(p.n, NORM_BLOCK)
struct Params {
    n: u32,
    offset: u32,
}
@group(0) @binding(0) var<storage, read> g: array<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> bad: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

// The tensor's value j (one tensor: `t` is always 0).
fn norm_load(t: u32, j: u32) -> f32 {
    return g[j];
}

//#include "lib/norm_sq.wgsl"

@compute @workgroup_size(WG)
fn reduce_norm_sq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = flat_wg(wid, nwg);
    let blocks = (p.n + NORM_BLOCK - 1u) / NORM_BLOCK;
    // Whole workgroups past the end (2-D grid tail) leave together: control flow stays uniform.
    if (b >= blocks) {
        return;
    }
    let total = norm_sq_block(0u, b, p.n, tid);
    if (tid == 0u) {
        partials[p.offset + b] = total.x;
        bad[p.offset + b] = u32(total.y);
    }
}

// --- KERNEL: finalize_grad_stats ---
// Sums `partials[0 .. p.count]` (and `bad[0 .. p.count]`) into the global gradient norm² and
// writes `stats` = [norm², clip scale, norm, non-finite count] (layout in the file header):
// clip scale = min(1, p.max_norm / (√norm² + 1e-6)), or 1 when p.max_norm ≤ 0 (clipping off).
// One workgroup; invocation t sums partials t, t+256, t+512, … in that order, then the fixed
// workgroup reduction: the same bits on every run. Overwrites `stats[0..4]`.
// @grid workgroups(1)
// @requires len(partials) >= p.count
// @requires len(bad) >= p.count
// @requires len(stats) >= 4
struct Params {
    count: u32,
    max_norm: f32,
}
@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read> bad: array<u32>;
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn finalize_grad_stats(@builtin(local_invocation_index) tid: u32) {
    var acc = 0.0;
    var nonfinite = 0u;
    for (var i = tid; i < p.count; i += WG) {
        acc += partials[i];
        nonfinite += bad[i];
    }
    let norm_sq = wg_reduce_sum(tid, acc);
    let total_bad = wg_reduce_sum(tid, f32(nonfinite));
    if (tid == 0u) {
        let norm = sqrt(norm_sq);
        var clip = 1.0;
        if (p.max_norm > 0.0) {
            clip = min(1.0, p.max_norm / (norm + 1e-6));
        }
        stats[0] = norm_sq;
        stats[1] = clip;
        stats[2] = norm;
        stats[3] = total_bad;
    }
}

// --- KERNEL: scale_by_state ---
// Multiplies `x[0..p.n]` by the loss scale `state[0]` in place (the loss gradient, before the
// backward pass). Elements past n are untouched. Grid: one invocation per element, 1-D (2-D past
// the device's limit).
// @grid threads(p.n)
// @requires len(x) >= p.n
// @requires len(state) >= 1
struct ScaleParams {
    n: u32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> state: array<f32>;
@group(0) @binding(2) var<uniform> p: ScaleParams;

@compute @workgroup_size(WG)
fn scale_by_state(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        x[i] = x[i] * state[0];
    }
}

// --- KERNEL: scaler_update ---
// The loss scaler's step (the rule and `state`'s layout are in the file header): reads the
// gradient statistics `stats` of `optimizer::finalize_grad_stats` (of the scaled gradients) and
// the cast overflow flag `flag[0]`; updates `state[0..5]` in place and clears `flag[0]`.
// `p.max_norm` is the clip of the unscaled gradients' global norm (≤ 0: off). One invocation.
// @grid workgroups(1)
// @requires len(stats) >= 4
// @requires len(flag) >= 1
// @requires len(state) >= 5
struct ScalerParams {
    growth_interval: u32,
    max_norm: f32,
}
@group(0) @binding(0) var<storage, read> stats: array<f32>;
@group(0) @binding(1) var<storage, read_write> flag: array<u32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<uniform> p: ScalerParams;

@compute @workgroup_size(1)
fn scaler_update() {
    let s = state[0];
    let norm = stats[2];
    let bad = stats[3] > 0.0 || flag[0] != 0u || !is_finite(norm);
    flag[0] = 0u;
    if (bad) {
        state[0] = max(s * 0.5, MIN_SCALE);
        state[1] = 0.0;
        state[2] = state[2] + 1.0;
        state[3] = 1.0;
        state[4] = 0.0;
        return;
    }
    var clip = 1.0;
    if (p.max_norm > 0.0) {
        clip = min(1.0, p.max_norm / (norm / s + 1e-6));
    }
    state[3] = 0.0;
    state[4] = clip / s;
    let clean = state[1] + 1.0;
    if (clean >= f32(p.growth_interval)) {
        state[0] = min(s * 2.0, MAX_SCALE);
        state[1] = 0.0;
    } else {
        state[1] = clean;
    }
}

// --- KERNEL: adamw_update ---
// One AdamW step of one tensor with f32 state (the update is in the file header): parameters
// `p`, gradient `g`, first and second moments `m`, `v`, n values each, the clip scale from
// `stats[1]`. Updates `p`, `m`, `v` in place (elements with a NaN/±Inf gradient keep theirs);
// overwrites `g[0..n]` with zeros in every case. Elements past n are untouched. Grid: one
// workgroup per 2048 elements (2-D past the device's limit), invocation `tid` of workgroup `w`
// updating elements w·2048 + tid + k·256, k = 0..7, with all 32 loads issued before any store
// (the last workgroup's invocations take a guarded loop). Element-wise: deterministic.
// @grid workgroups(ceil_div(h.n, EW_CHUNK))
// @requires len(p) >= h.n
// @requires len(g) >= h.n
// @requires len(m) >= h.n
// @requires len(v) >= h.n
// @requires len(stats) >= 2
struct Params {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    // 1 − β1^t and 1 − β2^t for the step t ≥ 1 about to be taken, computed on the host.
    bias1: f32,
    bias2: f32,
}
@group(0) @binding(0) var<storage, read_write> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read> stats: array<f32>;
@group(0) @binding(5) var<uniform> h: Params;
//#include "lib/adam.wgsl"

// Element i's stores: g zeroed; m, v, p updated where its gradient x is finite.
fn put1(i: u32, x: f32, mi: f32, vi: f32, w: f32, old: f32) {
    g[i] = 0.0;
    if (is_finite(x)) {
        m[i] = mi;
        v[i] = vi;
        p[i] = w;
    }
}
//#include "lib/adam_f32.wgsl"

@compute @workgroup_size(WG)
fn adamw_update(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, h.n);
}

// --- KERNEL: adamw_mixed ---
// One AdamW step of one tensor [rows, cols] with f32 master weights `p` and moments `m`, `v`,
// and its f16 copy `p16` (f16x4 row layout, [rows, ⌈cols/4⌉] vec4<f16>) rewritten in the same
// pass from the new master, at memory speed, with the bias correction of the effective step.
// The gradient `g` (scaled by the loss scale) is multiplied by
// `state[4]` = clip / S (the loss scaler's state, `optimizer::scaler_update`, run before this in
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
//#include "lib/f16x4.wgsl"
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

// --- KERNEL: adamw_8bit_update ---
// The AdamW step of `adamw_update` with the moments stored in 8 bits, in blocks of 256 values
// (block b = elements [256·b, min(n, 256·(b+1)))):
// - `mq[j]` packs the m codes of elements 4j..4j+3 (element 4j+k in byte k, little end first),
//   signed two's-complement codes q ∈ [−127, 127] with m = q · qscale[2b] / 127, where
//   qscale[2b] = max |m| over the block (absmax, symmetric: m has either sign).
// - `vq[j]` packs the v codes the same way, unsigned codes q ∈ [0, 255] of √v:
//   v = (q · qscale[2b+1] / 255)², where qscale[2b+1] = max √v over the block. Why √v: the
//   update divides by √v̂, and √v is in the units of the gradient like m, so the same linear
//   absmax grid gives m and √v the same relative resolution (an element whose m has a nonzero
//   code has a nonzero √v code too); a linear code of v itself would square the dynamic range
//   and flush every v below max v / 510 — i.e. |g| below max|g| / 23 — to 0, turning
//   m̂/(√v̂+eps) into m̂/eps. As a further guard a nonzero v never gets code 0 (code ≥ 1).
// - Rounding is to nearest, ties to even; codes are clamped to their range.
// Each step: dequantize, update in f32 exactly as `adamw_update` (the parameter update uses the
// fresh f32 m and v), then requantize the block against its new absmax. A skipped element
// (NaN/±Inf gradient) keeps its p and carries its dequantized m and v over unchanged, but they
// are requantized against the block's new scales like the rest. State starts as all zeros
// (codes and scales). Updates `p`, `mq`, `vq`, `qscale` in place; overwrites
// `g[offset .. offset + n]` with zeros; the code bytes of a last partial word past n are written
// 0; words and scales past the last block are untouched. Grid: one workgroup per 4 blocks (1024 values; invocation `tid`
// takes value `tid` of each, so 4 independent sets of loads are in flight and each load step is
// coalesced; the four blocks' maxima come from one vec4 workgroup reduction), with the 2-D
// fallback past the device's limit (the workgroup index comes from `flat_wg`, so tensors over
// 65535 × 1024 values update every block). Deterministic (fixed-order block reductions).
// The tensor's parameters and gradients are `p[h.offset + i]` and `g[h.offset + i]`, i < n: a
// range of larger buffers where `h.offset` > 0 (the trainer keeps several LLaMA tensors stacked
// in one weight, and each keeps its own 8-bit state: `mq`, `vq` and `qscale` are the tensor's
// alone, its blocks counted from its first value); nothing of `p` or `g` outside the range is
// read or written.
// @grid workgroups(ceil_div(h.n, QCHUNK))
// @requires len(p) >= h.offset + h.n
// @requires len(g) >= h.offset + h.n
// @requires len(mq) >= ceil_div(h.n, 4)
// @requires len(vq) >= ceil_div(h.n, 4)
// @requires len(qscale) >= 2 * ceil_div(h.n, QBLOCK)
// @requires len(stats) >= 2
struct Params {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    // 1 − β1^t and 1 − β2^t for the step t ≥ 1 about to be taken, computed on the host.
    bias1: f32,
    bias2: f32,
    // The tensor's first element in `p` and `g`.
    offset: u32,
}
@group(0) @binding(0) var<storage, read_write> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> mq: array<u32>;
@group(0) @binding(3) var<storage, read_write> vq: array<u32>;
@group(0) @binding(4) var<storage, read_write> qscale: array<f32>;
@group(0) @binding(5) var<storage, read> stats: array<f32>;
@group(0) @binding(6) var<uniform> h: Params;

// The new codes of the workgroup's 1024 values, in value order: m code in bits 0..8, v code in
// bits 8..16 (4 KiB).
var<workgroup> sh_codes: array<u32, QCHUNK>;
// Scratch of `wg_max4` (4 KiB).
var<workgroup> sh_red4: array<vec4<f32>, WG>;

// Component-wise workgroup max of four values per invocation (the maxima of the four blocks),
// as the shared `wg_reduce_max`: every invocation of the WG calls it in uniform control flow and
// gets the result; it ends with a barrier.
//#if subgroups
fn wg_max4(tid: u32, val: vec4<f32>) -> vec4<f32> {
    let sg = subgroupAdd(1u);
    let partial = subgroupMax(val);
    if (tid % sg == 0u) {
        sh_red4[tid / sg] = partial;
    }
    workgroupBarrier();
    var acc = vec4<f32>(NEG_INF);
    for (var i = tid % sg; i < WG / sg; i += sg) {
        acc = max(acc, sh_red4[i]);
    }
    let total = subgroupMax(acc);
    workgroupBarrier();
    return total;
}
//#else
fn wg_max4(tid: u32, val: vec4<f32>) -> vec4<f32> {
    sh_red4[tid] = val;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            sh_red4[tid] = max(sh_red4[tid], sh_red4[tid + s]);
        }
        workgroupBarrier();
    }
    let total = sh_red4[0];
    workgroupBarrier();
    return total;
}
//#endif

// (m scale, √v scale) of block b, or zeros for a block past the last (never read).
fn scales_of(b: u32) -> vec2<f32> {
    var sc = vec2<f32>(0.0);
    if (b < (h.n + QBLOCK - 1u) / QBLOCK) {
        sc = vec2<f32>(qscale[2u * b], qscale[2u * b + 1u]);
    }
    return sc;
}

// (dequantized m, dequantized v, gradient, parameter) of value i, with its block's scales `sc`;
// zeros past n.
fn load_value(i: u32, sc: vec2<f32>) -> vec4<f32> {
    var e = vec4<f32>(0.0);
    if (i < h.n) {
        let shift = (i % 4u) * 8u;
        let mcode = bitcast<i32>(((mq[i / 4u] >> shift) & 0xffu) << 24u) >> 24u;
        let vcode = (vq[i / 4u] >> shift) & 0xffu;
        let root = f32(vcode) * (sc.y / 255.0);
        e = vec4<f32>(f32(mcode) * (sc.x / 127.0), root * root, g[h.offset + i], p[h.offset + i]);
    }
    return e;
}

// The step of value i from `e` (`load_value`): zeroes g[i], writes the new p[i] where the
// gradient is finite, and returns (m, v) after the step (carried over where the gradient is not
// finite; zeros past n, which take part in the block maxima as zeros).
fn step_value(i: u32, e: vec4<f32>, clip: f32) -> vec2<f32> {
    var mi = e.x;
    var vi = e.y;
    if (i < h.n) {
        g[h.offset + i] = 0.0;
        if (is_finite(e.z)) {
            let gc = e.z * clip;
            mi = h.beta1 * mi + (1.0 - h.beta1) * gc;
            vi = h.beta2 * vi + (1.0 - h.beta2) * (gc * gc);
            let m_hat = mi / h.bias1;
            let v_hat = vi / h.bias2;
            let w = e.w;
            p[h.offset + i] = w - h.lr * (m_hat / (sqrt(v_hat) + h.eps) + h.weight_decay * w);
        }
    }
    return vec2<f32>(mi, vi);
}

// The codes of (m, v) against the block's inverse steps: m code in bits 0..8, v code in 8..16.
fn encode(mi: f32, vi: f32, m_inv: f32, r_inv: f32) -> u32 {
    let qm = i32(clamp(round(mi * m_inv), -127.0, 127.0));
    var qv = u32(clamp(round(sqrt(vi) * r_inv), 0.0, 255.0));
    if (vi > 0.0) {
        qv = max(qv, 1u);
    }
    return (bitcast<u32>(qm) & 0xffu) | (qv << 8u);
}

@compute @workgroup_size(WG)
fn adamw_8bit_update(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    // Whole workgroups past the end (2-D grid tail) leave together: control flow stays uniform.
    if (w >= (h.n + QCHUNK - 1u) / QCHUNK) {
        return;
    }
    // Value tid of the blocks b0 … b0 + 3.
    let b0 = w * QBLOCKS_PER_WG;
    let i = w * QCHUNK + tid + EW_LO;
    // All loads first: the scales, then the codes, gradients and parameters of the 4 values.
    let s0 = scales_of(b0);
    let s1 = scales_of(b0 + 1u);
    let s2 = scales_of(b0 + 2u);
    let s3 = scales_of(b0 + 3u);
    let e0 = load_value(i.x, s0);
    let e1 = load_value(i.y, s1);
    let e2 = load_value(i.z, s2);
    let e3 = load_value(i.w, s3);
    let clip = stats[1];
    let r0 = step_value(i.x, e0, clip);
    let r1 = step_value(i.y, e1, clip);
    let r2 = step_value(i.z, e2, clip);
    let r3 = step_value(i.w, e3, clip);
    let mi = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
    let vi = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
    let m_max = wg_max4(tid, abs(mi));
    let r_max = wg_max4(tid, sqrt(vi));
    let m_inv = select(vec4<f32>(0.0), 127.0 / m_max, m_max > vec4<f32>(0.0));
    let r_inv = select(vec4<f32>(0.0), 255.0 / r_max, r_max > vec4<f32>(0.0));
    sh_codes[tid] = encode(mi.x, vi.x, m_inv.x, r_inv.x);
    sh_codes[WG + tid] = encode(mi.y, vi.y, m_inv.y, r_inv.y);
    sh_codes[2u * WG + tid] = encode(mi.z, vi.z, m_inv.z, r_inv.z);
    sh_codes[3u * WG + tid] = encode(mi.w, vi.w, m_inv.w, r_inv.w);
    // Every invocation has read its old code words (they fed the reductions above) before any
    // is rewritten below.
    workgroupBarrier();
    // Invocation tid packs code word tid of the workgroup's 256 (values 4·tid … 4·tid + 3).
    let word = w * (QCHUNK / 4u) + tid;
    if (word * 4u < h.n) {
        var mw = 0u;
        var vw = 0u;
        for (var k = 0u; k < 4u; k++) {
            let c = sh_codes[4u * tid + k];
            mw |= (c & 0xffu) << (8u * k);
            vw |= ((c >> 8u) & 0xffu) << (8u * k);
        }
        mq[word] = mw;
        vq[word] = vw;
    }
    // Invocation k < 4 writes block b0 + k's scales.
    if (tid < QBLOCKS_PER_WG && b0 + tid < (h.n + QBLOCK - 1u) / QBLOCK) {
        qscale[2u * (b0 + tid)] = m_max[tid];
        qscale[2u * (b0 + tid) + 1u] = r_max[tid];
    }
}

// --- KERNEL: adamw_update_absmax ---
// `adamw_update` (the same step, bit for bit) that also folds the largest finite magnitude of
// the updated parameters into a scale word: amax[h.slot] = max(amax[h.slot], bits of max |p_i|
// over i < n with p_i finite), as `precise_absmax` folds it (the bits of non-negative floats
// order like the floats). So f32 training on tensor cores, which keeps each weight's scaled f16
// halves (`gemm::Halves`), splits the new weight right after its update by a word this pass
// already wrote, without a separate max pass over the weight. Updates `p`, `m`, `v` in place and
// overwrites `g` as `adamw_update` does; raises amax[h.slot] (an atomic max, the other words
// untouched), which must be cleared (or hold a smaller value) before. Grid and element walk as `adamw_update`; the workgroup's
// maximum meets in one workgroup atomic, then one global atomicMax per workgroup.
// @grid workgroups(ceil_div(h.n, EW_CHUNK))
// @requires len(p) >= h.n
// @requires len(g) >= h.n
// @requires len(m) >= h.n
// @requires len(v) >= h.n
// @requires len(stats) >= 2
// @requires len(amax) >= h.slot + 1
struct AbsmaxParams {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias1: f32,
    bias2: f32,
    // The scale word of this tensor in `amax`.
    slot: u32,
}
@group(0) @binding(0) var<storage, read_write> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> amax: array<atomic<u32>>;
@group(0) @binding(6) var<uniform> h: AbsmaxParams;
//#include "lib/adam.wgsl"

// This invocation's largest finite |p| (as bits) over the elements it wrote or kept.
var<private> top: u32 = 0u;
var<workgroup> wg_top: atomic<u32>;

fn note(w: f32) {
    let b = bitcast<u32>(w) & 0x7fffffffu;
    if (b < 0x7f800000u) {
        top = max(top, b);
    }
}

// Element i's stores: g zeroed; m, v, p updated where its gradient x is finite (else p kept,
// and noted as it stands).
fn put1(i: u32, x: f32, mi: f32, vi: f32, w: f32, old: f32) {
    g[i] = 0.0;
    if (is_finite(x)) {
        m[i] = mi;
        v[i] = vi;
        p[i] = w;
        note(w);
    } else {
        note(old);
    }
}

//#include "lib/adam_f32.wgsl"

@compute @workgroup_size(WG)
fn adamw_update_absmax(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, h.n);
    atomicMax(&wg_top, top);
    workgroupBarrier();
    let t = atomicLoad(&wg_top);
    if (tid == 0u && t != 0u) {
        atomicMax(&amax[h.slot], t);
    }
}
