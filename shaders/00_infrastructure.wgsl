// Element-wise utilities over flat f32 arrays, and whole-array reductions.
//
// Memory-bound kernels need many bytes in flight to cover the memory latency (a large GPU needs
// several MB: with one 4-byte load per invocation, even a full device holds only about 1 MB in
// flight). So every invocation here handles several elements and issues all its loads before it
// uses any:
// - The element-wise kernels: 8 elements per invocation, 2048 per workgroup, grid
//   `workgroups(⌈n/2048⌉)` (2-D past the device's limit), through `lib/elementwise.wgsl`; each
//   kernel defines what it does to 8 elements at once (`ew_eight`) and to one (`ew_one`).
// - The reductions: workgroup `w` folds REDUCE_CHUNK = 4096 elements into one partial, 16 per
//   invocation, all 16 loaded before the first addition (the last, partial chunk takes a
//   guarded loop); the host runs them again on the partials until one value is left
//   (`kernels::ops::reduce_sum_into`).
//#include "lib/elementwise.wgsl"

// Elements each reduction workgroup folds into one partial: 16 per invocation.
const REDUCE_CHUNK: u32 = 4096u;
const_assert REDUCE_CHUNK == 16u * WG;

// --- KERNEL: fill_zero ---
// Sets `x[i] = 0` for `i < n`. Overwrites `x`; elements past `n` are untouched.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(n, EW_CHUNK))
// @requires len(x) >= n
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn fill_zero(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let i = flat_wg(wid, nwg) * EW_CHUNK + tid;
    for (var k = 0u; k < EW_PER; k++) {
        let j = i + k * WG;
        if (j < n) {
            x[j] = 0.0;
        }
    }
}

// --- KERNEL: fill_const ---
// Sets `x[i] = p.value` for `i < p.n`. Overwrites `x`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(x) >= p.n
struct Params {
    n: u32,
    value: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn fill_const(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let i = flat_wg(wid, nwg) * EW_CHUNK + tid;
    for (var k = 0u; k < EW_PER; k++) {
        let j = i + k * WG;
        if (j < p.n) {
            x[j] = p.value;
        }
    }
}

// --- KERNEL: scale ---
// `x[i] *= p.alpha` for `i < p.n`. In place.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(x) >= p.n
struct Params {
    n: u32,
    alpha: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let a = vec4<f32>(x[lo.x], x[lo.y], x[lo.z], x[lo.w]) * p.alpha;
    let b = vec4<f32>(x[hi.x], x[hi.y], x[hi.z], x[hi.w]) * p.alpha;
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
    x[j] = x[j] * p.alpha;
}

@compute @workgroup_size(WG)
fn scale(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: axpy ---
// `y[i] += p.alpha * x[i]` for `i < p.n`. Accumulates into `y`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(x) >= p.n
// @requires len(y) >= p.n
// @accumulates y
struct Params {
    n: u32,
    alpha: f32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let xa = vec4<f32>(x[lo.x], x[lo.y], x[lo.z], x[lo.w]);
    let xb = vec4<f32>(x[hi.x], x[hi.y], x[hi.z], x[hi.w]);
    let ya = vec4<f32>(y[lo.x], y[lo.y], y[lo.z], y[lo.w]);
    let yb = vec4<f32>(y[hi.x], y[hi.y], y[hi.z], y[hi.w]);
    let a = fma(vec4<f32>(p.alpha), xa, ya);
    let b = fma(vec4<f32>(p.alpha), xb, yb);
    y[lo.x] = a.x;
    y[lo.y] = a.y;
    y[lo.z] = a.z;
    y[lo.w] = a.w;
    y[hi.x] = b.x;
    y[hi.y] = b.y;
    y[hi.z] = b.z;
    y[hi.w] = b.w;
}

fn ew_one(j: u32) {
    y[j] = fma(p.alpha, x[j], y[j]);
}

@compute @workgroup_size(WG)
fn axpy(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: copy ---
// `dst[i] = src[i]` for `i < n`. Overwrites `dst`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(n, EW_CHUNK))
// @requires len(src) >= n
// @requires len(dst) >= n
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> n: u32;

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let a = vec4<f32>(src[lo.x], src[lo.y], src[lo.z], src[lo.w]);
    let b = vec4<f32>(src[hi.x], src[hi.y], src[hi.z], src[hi.w]);
    dst[lo.x] = a.x;
    dst[lo.y] = a.y;
    dst[lo.z] = a.z;
    dst[lo.w] = a.w;
    dst[hi.x] = b.x;
    dst[hi.y] = b.y;
    dst[hi.z] = b.z;
    dst[hi.w] = b.w;
}

fn ew_one(j: u32) {
    dst[j] = src[j];
}

@compute @workgroup_size(WG)
fn copy(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, n);
}

// --- KERNEL: clamp_inplace ---
// `x[i] = clamp(x[i], p.lo, p.hi)` for `i < p.n` (p.lo ≤ p.hi); NaN stays NaN, −Inf becomes
// p.lo and +Inf p.hi. In place.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(x) >= p.n
struct Params {
    n: u32,
    lo: f32,
    hi: f32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

// select keeps NaN (WGSL's min, max and clamp of NaN are implementation-defined), found on the
// bits (`nan_lanes`), since a `v != v` test may be folded away.
fn clamp_keep_nan(v: vec4<f32>) -> vec4<f32> {
    return select(min(max(v, vec4<f32>(p.lo)), vec4<f32>(p.hi)), v, nan_lanes(v));
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let a = clamp_keep_nan(vec4<f32>(x[lo.x], x[lo.y], x[lo.z], x[lo.w]));
    let b = clamp_keep_nan(vec4<f32>(x[hi.x], x[hi.y], x[hi.z], x[hi.w]));
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
    x[j] = clamp_keep_nan(vec4<f32>(x[j])).x;
}

@compute @workgroup_size(WG)
fn clamp_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: reduce_sum ---
// One pass of a whole-array sum: workgroup `w` writes `out[w] = Σ x[i]` over its chunk
// `i ∈ [w·4096, min(n, (w+1)·4096))`. Overwrites `out[0 .. ⌈n/4096⌉]`. Invocation `tid` adds
// its 16 elements `w·4096 + tid + k·256`, k = 0..15, in order of k (all 16 loaded before the
// first addition), then the workgroup reduction; the order of the additions depends only on n
// and the subgroup size, so results are the same on every run.
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
    let i = w * REDUCE_CHUNK + tid;
    var acc = 0.0;
    if (w < n / REDUCE_CHUNK) {
        // A full chunk: 16 independent loads in flight, then the additions in order.
        let l0 = i + EW_LO;
        let l1 = i + EW_HI;
        let l2 = l0 + 8u * WG;
        let l3 = l1 + 8u * WG;
        let a = vec4<f32>(x[l0.x], x[l0.y], x[l0.z], x[l0.w]);
        let b = vec4<f32>(x[l1.x], x[l1.y], x[l1.z], x[l1.w]);
        let c = vec4<f32>(x[l2.x], x[l2.y], x[l2.z], x[l2.w]);
        let d = vec4<f32>(x[l3.x], x[l3.y], x[l3.z], x[l3.w]);
        acc = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
        acc = acc + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    } else {
        // The last, partial chunk (the same order of additions).
        for (var k = 0u; k < REDUCE_CHUNK / WG; k++) {
            let j = i + k * WG;
            if (j < n) {
                acc += x[j];
            }
        }
    }
    let total = wg_reduce_sum(tid, acc);
    if (tid == 0u) {
        out[w] = total;
    }
}

// --- KERNEL: reduce_max ---
// One pass of a whole-array max: `out[w] = max x[i]` over workgroup `w`'s chunk of 4096, 16
// elements per invocation, as `reduce_sum`. Overwrites `out[0 .. ⌈n/4096⌉]`.
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
    let i = w * REDUCE_CHUNK + tid;
    var acc = NEG_INF;
    if (w < n / REDUCE_CHUNK) {
        let l0 = i + EW_LO;
        let l1 = i + EW_HI;
        let l2 = l0 + 8u * WG;
        let l3 = l1 + 8u * WG;
        let a = vec4<f32>(x[l0.x], x[l0.y], x[l0.z], x[l0.w]);
        let b = vec4<f32>(x[l1.x], x[l1.y], x[l1.z], x[l1.w]);
        let c = vec4<f32>(x[l2.x], x[l2.y], x[l2.z], x[l2.w]);
        let d = vec4<f32>(x[l3.x], x[l3.y], x[l3.z], x[l3.w]);
        // Starting from NEG_INF as the loop does, so a NaN is dropped the same way.
        let m = max(max(max(a, b), max(c, d)), vec4<f32>(NEG_INF));
        acc = max(max(m.x, m.y), max(m.z, m.w));
    } else {
        for (var k = 0u; k < REDUCE_CHUNK / WG; k++) {
            let j = i + k * WG;
            if (j < n) {
                acc = max(acc, x[j]);
            }
        }
    }
    let total = wg_reduce_max(tid, acc);
    if (tid == 0u) {
        out[w] = total;
    }
}
