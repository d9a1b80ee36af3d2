// Element-wise utilities over flat f32 arrays, and whole-array reductions.
//
// The element-wise kernels are 1-D: one invocation per element, grid `threads(n)` (the runtime
// switches to a 2-D grid past the device's workgroup limit and `flat_id` recovers the index),
// the tail past `n` skipped. The reductions give one partial per workgroup; the host runs them
// again on the partials until one value is left (`kernels::ops::reduce_sum`).

// Elements each reduction workgroup folds into one partial: 4 per invocation.
const REDUCE_CHUNK: u32 = 1024u;

// --- KERNEL: fill_zero ---
// Sets `x[i] = 0` for `i < n`. Overwrites `x`; elements past `n` are untouched.
// @grid threads(n)
// @requires len(x) >= n
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn fill_zero(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < n) {
        x[i] = 0.0;
    }
}

// --- KERNEL: fill_const ---
// Sets `x[i] = p.value` for `i < p.n`. Overwrites `x`.
// @grid threads(p.n)
// @requires len(x) >= p.n
struct Params {
    n: u32,
    value: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn fill_const(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        x[i] = p.value;
    }
}

// --- KERNEL: scale ---
// `x[i] *= p.alpha` for `i < p.n`. In place.
// @grid threads(p.n)
// @requires len(x) >= p.n
struct Params {
    n: u32,
    alpha: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        x[i] = x[i] * p.alpha;
    }
}

// --- KERNEL: axpy ---
// `y[i] += p.alpha * x[i]` for `i < p.n`. Accumulates into `y`.
// @grid threads(p.n)
// @requires len(x) >= p.n
// @requires len(y) >= p.n
struct Params {
    n: u32,
    alpha: f32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn axpy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        y[i] = fma(p.alpha, x[i], y[i]);
    }
}

// --- KERNEL: copy ---
// `dst[i] = src[i]` for `i < n`. Overwrites `dst`.
// @grid threads(n)
// @requires len(src) >= n
// @requires len(dst) >= n
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < n) {
        dst[i] = src[i];
    }
}

// --- KERNEL: clamp_inplace ---
// `x[i] = clamp(x[i], p.lo, p.hi)` for `i < p.n`; NaN stays NaN. In place.
// @grid threads(p.n)
// @requires len(x) >= p.n
struct Params {
    n: u32,
    lo: f32,
    hi: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn clamp_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        let v = x[i];
        // select keeps NaN (WGSL's clamp of NaN is implementation-defined).
        x[i] = select(min(max(v, p.lo), p.hi), v, v != v);
    }
}

// --- KERNEL: reduce_sum ---
// One pass of a whole-array sum: workgroup `w` writes `out[w] = Σ x[i]` over its chunk
// `i ∈ [w·1024, min(n, (w+1)·1024))`. Overwrites `out[0 .. ⌈n/1024⌉]`. The order of the
// additions is fixed, so results are the same on every run.
// @grid workgroups(ceil_div(n, REDUCE_CHUNK))
// @requires len(x) >= n
// @requires len(out) >= ceil_div(n, REDUCE_CHUNK)
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn reduce_sum(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    let groups = (n + REDUCE_CHUNK - 1u) / REDUCE_CHUNK;
    // Whole workgroups past the end leave together: control flow stays uniform.
    if (w >= groups) {
        return;
    }
    let base = w * REDUCE_CHUNK;
    var acc = 0.0;
    for (var k = 0u; k < REDUCE_CHUNK; k += WG) {
        let i = base + k + tid;
        if (i < n) {
            acc += x[i];
        }
    }
    let total = wg_reduce_sum(tid, acc);
    if (tid == 0u) {
        out[w] = total;
    }
}

// --- KERNEL: reduce_max ---
// One pass of a whole-array max: `out[w] = max x[i]` over workgroup `w`'s chunk of 1024, as
// `reduce_sum`. Overwrites `out[0 .. ⌈n/1024⌉]`.
// @grid workgroups(ceil_div(n, REDUCE_CHUNK))
// @requires len(x) >= n
// @requires len(out) >= ceil_div(n, REDUCE_CHUNK)
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn reduce_max(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    let groups = (n + REDUCE_CHUNK - 1u) / REDUCE_CHUNK;
    if (w >= groups) {
        return;
    }
    let base = w * REDUCE_CHUNK;
    var acc = NEG_INF;
    for (var k = 0u; k < REDUCE_CHUNK; k += WG) {
        let i = base + k + tid;
        if (i < n) {
            acc = max(acc, x[i]);
        }
    }
    let total = wg_reduce_max(tid, acc);
    if (tid == 0u) {
        out[w] = total;
    }
}
