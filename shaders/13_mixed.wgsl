// Mixed-precision training: dynamic loss scaling. Everything stays on the GPU: the overflow check, the skip and the scale's growth are
// decided by kernels, never by a read-back inside a step.
//
// One mixed-precision step, recorded in one batch:
//   1. forward with f16 operands (the weights' f16 copies, activations written in f16 by
//      `fused`'s norms and SwiGLU), the loss in f32;
//   2. `scale_by_state(dlogits, state)`: the loss gradient times the loss scale S = state[0];
//   3. backward: every gradient operand cast to f16 by `cast_grad_f16x4`, which raises
//      `flag[0]` when a value is NaN, ±Inf or beyond the f16 range (±65504);
//   4. `linear16`/`optimizer::reduce_norm_sq` + `finalize_grad_stats` over the scaled gradients;
//   5. `scaler_update(stats, flag, state)`: decides skip or not, this step's gradient factor
//      (clip / S), the next S, and clears `flag`;
//   6. `fused::adamw_mixed` on every tensor: AdamW on the f32 master, the f16 copy rewritten in
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
const F16_LIMIT: f32 = 65504.0;
const LANES: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// Which lanes hold NaN or ±Inf (from the bits: comparisons of NaN may be folded away).
fn not_finite4(v: vec4<f32>) -> vec4<bool> {
    let e = bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u);
    return e == vec4<u32>(0x7f800000u);
}

// The element indices of four consecutive columns c..c+3 of row `r` (clamped into the row) and
// which of them lie inside it.
fn row4(r: u32, c: u32, cols: u32) -> vec4<u32> {
    return vec4<u32>(r * cols) + min(vec4<u32>(c) + LANES, vec4<u32>(max(cols, 1u) - 1u));
}

fn inside4(c: u32, cols: u32) -> vec4<bool> {
    return (vec4<u32>(c) + LANES) < vec4<u32>(cols);
}

// Values clamped to ±65504 (NaN passes through as NaN: select on the bits).
fn clamp16(v: vec4<f32>) -> vec4<f32> {
    let nan = not_finite4(v) & ((bitcast<vec4<u32>>(v) & vec4<u32>(0x007fffffu)) != vec4<u32>(0u));
    return select(clamp(v, vec4<f32>(-F16_LIMIT), vec4<f32>(F16_LIMIT)), v, nan);
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

// --- KERNEL: cast_grad_f16x4 ---
// A gradient `src` [rows, cols] (f32, row-major) to the f16x4 row layout (`dst` [rows,
// ⌈cols/4⌉] vec4<f16>, rows zero-padded to a multiple of 4), as `fused::cast_f16x4` does
// (values beyond ±65504 clamped, NaN kept), and the overflow check of loss scaling: any value
// that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears it). Overwrites `dst`.
// Grid: one invocation per destination vec4, 1-D (2-D past the device's limit).
// @grid threads(p.rows * ceil_div(p.cols, 4))
// @requires len(src) >= p.rows * p.cols
// @requires len(dst) >= p.rows * ceil_div(p.cols, 4)
// @requires len(flag) >= 1
struct CastParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> p: CastParams;

@compute @workgroup_size(WG)
fn cast_grad_f16x4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    let cq = (p.cols + 3u) / 4u;
    if (i >= p.rows * cq) {
        return;
    }
    let r = i / cq;
    let c = (i % cq) * 4u;
    let at = row4(r, c, p.cols);
    let v = select(vec4<f32>(0.0), vec4<f32>(src[at.x], src[at.y], src[at.z], src[at.w]), inside4(c, p.cols));
    if (any(not_finite4(v) | (abs(v) > vec4<f32>(F16_LIMIT)))) {
        atomicOr(&flag[0], 1u);
    }
    dst[i] = vec4<f16>(clamp16(v));
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
