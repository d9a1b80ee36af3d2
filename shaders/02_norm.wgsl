// RMSNorm over the rows of a row-major `[rows, d]` matrix (rows = B·S tokens, d the model
// width): y = x · rrms · γ with rrms = 1 / sqrt(mean(x²) + eps), and its backward. Every
// precision is here: f32 (`rmsnorm_forward`), f16 γ (`rmsnorm_forward_w16`), and the f16 outputs of
// mixed precision (`rmsnorm_f16`, `residual_rmsnorm_f16`: their row walk is `lib/norm16.wgsl`).
//
// The forward kernels run one workgroup of 256 invocations per two rows; they save `rrms` per
// row for the backward. Each invocation takes the rows' columns tid + k·256 in chunks of 8
// (k = 0..7 per chunk of 2048 columns: consecutive invocations on consecutive columns), loading
// a chunk's 8 values of x for both rows and of γ before using any, so enough loads are in flight
// to cover the memory latency (two rows per workgroup double what a workgroup has in flight for
// the usual d ≤ 1024); the first chunk (all of a row of d ≤ 2048) stays in registers between the
// sum of squares and the output, so x is read once there. Both rows' sums of squares go through
// one workgroup reduction of a vec2.
//
// The backward runs one workgroup of 256 per block of NORM_BLOCK = 8 consecutive rows
// (`lib/norm_backward.wgsl`: a pass of per-row dot products, 32 invocations per row, then a pass
// in which each invocation owns vec4 columns of all the block's rows): it overwrites (or adds
// into) dx and writes that block's partial dγ (a fixed-order sum over its rows) into a
// `[blocks, d]` partials buffer, blocks = ⌈rows / NORM_BLOCK⌉; then `rmsnorm_dgamma_reduce` adds
// the partials up over the blocks in a fixed order and accumulates the result into dγ
// (`rmsnorm_dgamma_reduce4`: four norms' in one dispatch, the same order). No float
// atomics: dγ is the same bits on every run. For mixed precision, `rmsnorm_backward_f16` and
// `rmsnorm_backward_acc_f16` also write dx's f16 copy for the next linear layer's products,
// with the loss scaler's overflow check (`lib/grad16.wgsl`), from the registers dx is stored
// from. Every 1-D grid here takes the runtime's 2-D fallback past 65535 workgroups (`flat_wg`).

// Rows per backward block (one workgroup): the partials buffer has ⌈rows / NORM_BLOCK⌉ rows.
const NORM_BLOCK: u32 = 8u;

// Columns per forward chunk: 8 per invocation.
const CHUNK: u32 = 2048u;
const_assert CHUNK == 8u * WG;
// Offsets of an invocation's 8 columns in a chunk from its first: steps 0..3 and 4..7.
const STEP_LO: vec4<u32> = vec4<u32>(0u, WG, 2u * WG, 3u * WG);
const STEP_HI: vec4<u32> = vec4<u32>(4u * WG, 5u * WG, 6u * WG, 7u * WG);

// Rows per forward workgroup.
const FWD_ROWS: u32 = 2u;

// Scratch of `wg_reduce_sum2` (2 KiB).
var<workgroup> sh_red2: array<vec2<f32>, WG>;

// The shared `wg_reduce_sum` for two values per invocation at once (component-wise): every
// invocation of the WG calls it in uniform control flow and gets the result; it ends with a
// barrier. The order of the additions is fixed, as in the shared helper.
//#if subgroups
fn wg_reduce_sum2(tid: u32, val: vec2<f32>) -> vec2<f32> {
    let sg = subgroupAdd(1u);
    let partial = subgroupAdd(val);
    if (tid % sg == 0u) {
        sh_red2[tid / sg] = partial;
    }
    workgroupBarrier();
    var acc = vec2<f32>(0.0);
    for (var i = tid % sg; i < WG / sg; i += sg) {
        acc += sh_red2[i];
    }
    let total = subgroupAdd(acc);
    workgroupBarrier();
    return total;
}
//#else
fn wg_reduce_sum2(tid: u32, val: vec2<f32>) -> vec2<f32> {
    sh_red2[tid] = val;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            sh_red2[tid] += sh_red2[tid + s];
        }
        workgroupBarrier();
    }
    let total = sh_red2[0];
    workgroupBarrier();
    return total;
}
//#endif

// ss + Σ v² over a's then b's components, in that order (one fma chain).
fn sum_sq8(ss: f32, a: vec4<f32>, b: vec4<f32>) -> f32 {
    var s = fma(a.x, a.x, ss);
    s = fma(a.y, a.y, s);
    s = fma(a.z, a.z, s);
    s = fma(a.w, a.w, s);
    s = fma(b.x, b.x, s);
    s = fma(b.y, b.y, s);
    s = fma(b.z, b.z, s);
    return fma(b.w, b.w, s);
}

// The forward body of `rmsnorm_forward` and `rmsnorm_forward_w16`, which bind `x`, `y`, `rrms`
// (f32) and `p` (rows, d, eps) alike and differ only in γ's type: each defines the hook
//   fn gamma_at(j: u32) -> f32   γ at column j < d, as f32

// x at columns j of the row starting at `base`, 0 at columns ≥ lim (lim = d, or 0 for a row
// that does not exist).
fn load_x(base: u32, j: vec4<u32>, lim: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (j.x < lim) {
        v.x = x[base + j.x];
    }
    if (j.y < lim) {
        v.y = x[base + j.y];
    }
    if (j.z < lim) {
        v.z = x[base + j.z];
    }
    if (j.w < lim) {
        v.w = x[base + j.w];
    }
    return v;
}

// γ at columns j, 0 past d.
fn load_gamma(j: vec4<u32>) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (j.x < p.d) {
        v.x = gamma_at(j.x);
    }
    if (j.y < p.d) {
        v.y = gamma_at(j.y);
    }
    if (j.z < p.d) {
        v.z = gamma_at(j.z);
    }
    if (j.w < p.d) {
        v.w = gamma_at(j.w);
    }
    return v;
}

// y at columns j below lim of the row starting at `base`.
fn store_y(base: u32, j: vec4<u32>, lim: u32, v: vec4<f32>) {
    if (j.x < lim) {
        y[base + j.x] = v.x;
    }
    if (j.y < lim) {
        y[base + j.y] = v.y;
    }
    if (j.z < lim) {
        y[base + j.z] = v.z;
    }
    if (j.w < lim) {
        y[base + j.w] = v.w;
    }
}

// Rows 2w and 2w + 1 of the forward, w = flat_wg(wid, nwg).
fn rmsnorm_rows(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) {
    let r0 = flat_wg(wid, nwg) * FWD_ROWS;
    // Workgroups past the last row (2-D grid tail) leave together: uniform control flow.
    if (r0 >= p.rows) {
        return;
    }
    // Rows r0 and r0 + 1; the second has no columns when r0 is the last row.
    let base0 = r0 * p.d;
    let base1 = base0 + p.d;
    let lim1 = select(0u, p.d, r0 + 1u < p.rows);
    // The first chunk's x (both rows) and γ, kept in registers. Each invocation adds its squares
    // in increasing column order (zeros past d add nothing).
    let j_lo = tid + STEP_LO;
    let j_hi = tid + STEP_HI;
    let xa = load_x(base0, j_lo, p.d);
    let xb = load_x(base0, j_hi, p.d);
    let za = load_x(base1, j_lo, lim1);
    let zb = load_x(base1, j_hi, lim1);
    let ga = load_gamma(j_lo);
    let gb = load_gamma(j_hi);
    var ss = vec2<f32>(sum_sq8(0.0, xa, xb), sum_sq8(0.0, za, zb));
    for (var c = CHUNK; c < p.d; c += CHUNK) {
        let s0 = sum_sq8(ss.x, load_x(base0, c + j_lo, p.d), load_x(base0, c + j_hi, p.d));
        ss = vec2<f32>(s0, sum_sq8(ss.y, load_x(base1, c + j_lo, lim1), load_x(base1, c + j_hi, lim1)));
    }
    let total = wg_reduce_sum2(tid, ss);
    let r = 1.0 / sqrt(total / f32(p.d) + p.eps);
    store_y(base0, j_lo, p.d, xa * r.x * ga);
    store_y(base0, j_hi, p.d, xb * r.x * gb);
    store_y(base1, j_lo, lim1, za * r.y * ga);
    store_y(base1, j_hi, lim1, zb * r.y * gb);
    for (var c = CHUNK; c < p.d; c += CHUNK) {
        let g_lo = load_gamma(c + j_lo);
        let g_hi = load_gamma(c + j_hi);
        let ya = load_x(base0, c + j_lo, p.d) * r.x * g_lo;
        let yb = load_x(base0, c + j_hi, p.d) * r.x * g_hi;
        let wa = load_x(base1, c + j_lo, lim1) * r.y * g_lo;
        let wb = load_x(base1, c + j_hi, lim1) * r.y * g_hi;
        store_y(base0, c + j_lo, p.d, ya);
        store_y(base0, c + j_hi, p.d, yb);
        store_y(base1, c + j_lo, lim1, wa);
        store_y(base1, c + j_hi, lim1, wb);
    }
    if (tid == 0u) {
        rrms[r0] = r.x;
    }
    if (tid == 1u && r0 + 1u < p.rows) {
        rrms[r0 + 1u] = r.y;
    }
}

// --- KERNEL: rmsnorm_forward ---
// RMSNorm forward: `y[r, j] = x[r, j] · rrms[r] · gamma[j]` with
// `rrms[r] = 1 / sqrt(Σ_j x[r, j]² / d + eps)`, for the `[rows, d]` row-major x.
// One workgroup of 256 per two rows (grid `workgroups(⌈rows/2⌉)`, 2-D past 65535 workgroups;
// the last workgroup of an odd count has one row), 8 columns per invocation, row and chunk of
// 2048 (file header).
// Overwrites `y[0 .. rows·d]` and `rrms[0 .. rows]` (saved for `rmsnorm_backward`).
// @grid workgroups(ceil_div(p.rows, FWD_ROWS))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(y) >= p.rows * p.d
// @requires len(rrms) >= p.rows
struct Params {
    rows: u32,
    d: u32,
    eps: f32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> rrms: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

// The hook of `rmsnorm_rows`: γ at column j.
fn gamma_at(j: u32) -> f32 {
    return gamma[j];
}

@compute @workgroup_size(WG)
fn rmsnorm_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    rmsnorm_rows(wid, nwg, tid);
}

// --- KERNEL: rmsnorm_forward_w16 ---
// `rmsnorm_forward` with γ stored as f16 (the f16 weight copy); f32 arithmetic. Needs
// SHADER_F16. `y[r, j] = x[r, j] · rrms[r] · f32(gamma[j])`,
// `rrms[r] = 1 / sqrt(Σ_j x[r, j]² / d + eps)`. One workgroup of 256 per two rows (grid
// `workgroups(⌈rows/2⌉)`, 2-D past 65535 workgroups), 8 columns per invocation, row and chunk
// of 2048 (file header).
// Overwrites `y[0 .. rows·d]` and `rrms[0 .. rows]`.
// @grid workgroups(ceil_div(p.rows, FWD_ROWS))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(y) >= p.rows * p.d
// @requires len(rrms) >= p.rows
struct Params {
    rows: u32,
    d: u32,
    eps: f32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> rrms: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

// The hook of `rmsnorm_rows`: γ at column j, widened.
fn gamma_at(j: u32) -> f32 {
    return f32(gamma[j]);
}

@compute @workgroup_size(WG)
fn rmsnorm_forward_w16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    rmsnorm_rows(wid, nwg, tid);
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
//#include "lib/f16x4.wgsl"
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
//#include "lib/f16x4.wgsl"
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

// --- KERNEL: rmsnorm_backward ---
// RMSNorm backward, given x `[rows, d]`, gamma `[d]`, the forward's rrms `[rows]` and the
// upstream gradient dy `[rows, d]`:
//   dx[r, j] = rrms[r]·gamma[j]·dy[r, j] − x[r, j]·rrms[r]³·(Σ_k dy[r, k]·gamma[k]·x[r, k]) / d
//   partials[b, j] = Σ_{r in block b, in row order} dy[r, j]·x[r, j]·rrms[r]
// Block b is rows [b·NORM_BLOCK, min(rows, (b+1)·NORM_BLOCK)), NORM_BLOCK = 8; one workgroup
// of 256 per block (grid `workgroups(⌈rows/8⌉)`, 2-D past 65535 blocks). Each row's Σ_k is a
// fixed-order sum: 32 lane sums (lane l: the fma chain over its vec4 columns l + 32·i in
// increasing column order) added in lane order (`lib/norm_backward.wgsl`).
// Overwrites `dx[0 .. rows·d]` and `partials[0 .. ⌈rows/8⌉·d]`; dγ itself is accumulated by
// `rmsnorm_dgamma_reduce` (same rows and d) from these partials. The caller allocates
// `partials` with at least ⌈rows/NORM_BLOCK⌉·d elements.
// @grid workgroups(ceil_div(p.rows, NORM_BLOCK))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(rrms) >= p.rows
// @requires len(dy) >= p.rows * p.d
// @requires len(dx) >= p.rows * p.d
// @requires len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> rrms: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const NB_ACC: bool = false;
// No f16 copy.
fn put_dx16(i: u32, v: vec4<f32>) {}

//#include "lib/norm_backward.wgsl"

@compute @workgroup_size(WG)
fn rmsnorm_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    rmsnorm_backward_block(wid, nwg, tid);
}

// --- KERNEL: rmsnorm_backward_acc ---
// `rmsnorm_backward` adding its input gradient into `dx` instead of storing it:
// dx[r, j] += (the gradient `rmsnorm_backward` writes) — one f32 addition per element, the one a
// separate `axpy` of that gradient (α = 1) would make, without its pass over dx. The partials as
// `rmsnorm_backward` (overwritten). Accumulates into `dx[0 .. rows·d]`.
// @grid workgroups(ceil_div(p.rows, NORM_BLOCK))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(rrms) >= p.rows
// @requires len(dy) >= p.rows * p.d
// @requires len(dx) >= p.rows * p.d
// @requires len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @accumulates dx
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> rrms: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const NB_ACC: bool = true;
// No f16 copy.
fn put_dx16(i: u32, v: vec4<f32>) {}

//#include "lib/norm_backward.wgsl"

@compute @workgroup_size(WG)
fn rmsnorm_backward_acc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    rmsnorm_backward_block(wid, nwg, tid);
}

// --- KERNEL: rmsnorm_backward_f16 ---
// `rmsnorm_backward` that also writes dx's f16 copy (mixed precision: dx is the output
// gradient of the linear layer before the norm, whose products take it in f16): dx and the
// partials are `rmsnorm_backward`'s, bit for bit (the same walk); each dx value also goes, from
// the registers it is stored from, to `dx16` `[rows, ⌈d/4⌉]` vec4<f16> (f16x4 row layout,
// padding columns 0) as `cast::cast_grad_f16x4` writes it — rounded (beyond ±65504 → ±65504,
// NaN kept), and any value that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears
// it). Overwrites `dx[0 .. rows·d]`, `dx16[0 .. rows·⌈d/4⌉]` and `partials[0 .. ⌈rows/8⌉·d]`.
// Needs SHADER_F16. One workgroup of 256 per block of 8 rows (grid `workgroups(⌈rows/8⌉)`, 2-D
// past 65535 blocks).
// @grid workgroups(ceil_div(p.rows, NORM_BLOCK))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(rrms) >= p.rows
// @requires len(dy) >= p.rows * p.d
// @requires len(dx) >= p.rows * p.d
// @requires len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(dx16) >= p.rows * ceil_div(p.d, 4)
// @requires len(flag) >= 1
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> rrms: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx16: array<vec4<f16>>;
@group(0) @binding(7) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(8) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"
//#include "lib/grad16.wgsl"

const NB_ACC: bool = false;
fn put_dx16(i: u32, v: vec4<f32>) {
    dx16[i] = grad16(v);
}

//#include "lib/norm_backward.wgsl"

@compute @workgroup_size(WG)
fn rmsnorm_backward_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    rmsnorm_backward_block(wid, nwg, tid);
}

// --- KERNEL: rmsnorm_backward_acc_f16 ---
// `rmsnorm_backward_acc` that also writes the accumulated dx's f16 copy: dx (+=) and the
// partials are `rmsnorm_backward_acc`'s, bit for bit (the same walk); each sum stored into dx
// also goes, from registers, to `dx16` `[rows, ⌈d/4⌉]` vec4<f16> as in `rmsnorm_backward_f16`
// (rounded as `cast::cast_grad_f16x4` rounds, `flag[0]` set to 1 by any value that is NaN, ±Inf
// or beyond ±65504). Accumulates into `dx[0 .. rows·d]`; overwrites `dx16[0 .. rows·⌈d/4⌉]` and
// the partials. Needs SHADER_F16. Grid as `rmsnorm_backward`.
// @grid workgroups(ceil_div(p.rows, NORM_BLOCK))
// @requires len(x) >= p.rows * p.d
// @requires len(gamma) >= p.d
// @requires len(rrms) >= p.rows
// @requires len(dy) >= p.rows * p.d
// @requires len(dx) >= p.rows * p.d
// @requires len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(dx16) >= p.rows * ceil_div(p.d, 4)
// @requires len(flag) >= 1
// @accumulates dx
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> rrms: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx16: array<vec4<f16>>;
@group(0) @binding(7) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(8) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"
//#include "lib/grad16.wgsl"

const NB_ACC: bool = true;
fn put_dx16(i: u32, v: vec4<f32>) {
    dx16[i] = grad16(v);
}

//#include "lib/norm_backward.wgsl"

@compute @workgroup_size(WG)
fn rmsnorm_backward_acc_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    rmsnorm_backward_block(wid, nwg, tid);
}

// --- KERNEL: rmsnorm_dgamma_reduce ---
// The second half of RMSNorm's dγ: `dgamma[j] += Σ_b partials[b, j]` over the
// blocks = ⌈rows / 8⌉ rows of the `[blocks, d]` partials written by `rmsnorm_backward` (called
// with the same rows and d). One workgroup of 256 per 8 columns (grid `workgroups(⌈d/8⌉)`), in
// the fixed order of `lib/dgamma_reduce.wgsl`: the same bits on every run. Accumulates into
// `dgamma[0 .. d]` (+=).
// @grid workgroups(ceil_div(p.d, COLS))
// @requires len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(dgamma) >= p.d
// @accumulates dgamma
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
//#include "lib/dgamma_reduce.wgsl"

fn dg_partial(t: u32, i: u32) -> f32 {
    return partials[i];
}

fn dg_add(t: u32, j: u32, v: f32) {
    dgamma[j] += v;
}

@compute @workgroup_size(WG)
fn rmsnorm_dgamma_reduce(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    if (w >= (p.d + COLS - 1u) / COLS) {
        return;
    }
    dgamma_reduce(0u, w, tid);
}

// --- KERNEL: rmsnorm_dgamma_reduce4 ---
// `rmsnorm_dgamma_reduce` of four norms in one dispatch: `dgamma{t}[j] += Σ_b partials{t}[b, j]`
// for t = 0 … 3, each `[blocks, d]` partials buffer written by a backward kernel over the same
// rows and d (a model's norms all have the model's width), each sum in the order of
// `rmsnorm_dgamma_reduce` (the same bits as four of those). The workgroups of norm t follow
// those of norm t − 1 (⌈d/8⌉ each). Four because a dispatch may bind at most 8 storage buffers
// (WebGPU's default). Accumulates into `dgamma0 … dgamma3` (`[0 .. d]`, +=).
// @grid workgroups(4 * ceil_div(p.d, COLS))
// @requires len(partials0) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(partials1) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(partials2) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(partials3) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(dgamma0) >= p.d
// @requires len(dgamma1) >= p.d
// @requires len(dgamma2) >= p.d
// @requires len(dgamma3) >= p.d
// @accumulates dgamma0, dgamma1, dgamma2, dgamma3
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> partials0: array<f32>;
@group(0) @binding(1) var<storage, read> partials1: array<f32>;
@group(0) @binding(2) var<storage, read> partials2: array<f32>;
@group(0) @binding(3) var<storage, read> partials3: array<f32>;
@group(0) @binding(4) var<storage, read_write> dgamma0: array<f32>;
@group(0) @binding(5) var<storage, read_write> dgamma1: array<f32>;
@group(0) @binding(6) var<storage, read_write> dgamma2: array<f32>;
@group(0) @binding(7) var<storage, read_write> dgamma3: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;
//#include "lib/dgamma_reduce.wgsl"

fn dg_partial(t: u32, i: u32) -> f32 {
    switch t {
        case 0u: {
            return partials0[i];
        }
        case 1u: {
            return partials1[i];
        }
        case 2u: {
            return partials2[i];
        }
        default: {
            return partials3[i];
        }
    }
}

fn dg_add(t: u32, j: u32, v: f32) {
    switch t {
        case 0u: {
            dgamma0[j] += v;
        }
        case 1u: {
            dgamma1[j] += v;
        }
        case 2u: {
            dgamma2[j] += v;
        }
        default: {
            dgamma3[j] += v;
        }
    }
}

@compute @workgroup_size(WG)
fn rmsnorm_dgamma_reduce4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let per = (p.d + COLS - 1u) / COLS;
    let w = flat_wg(wid, nwg);
    if (w >= 4u * per) {
        return;
    }
    dgamma_reduce(w / per, w % per, tid);
}

// --- KERNEL: rmsnorm_dgamma_reduce_all ---
// `rmsnorm_dgamma_reduce` of `p.count` norms in one dispatch, for a model whose norms' partials
// and gradients lie at fixed strides in one buffer each (the trainer's: its norm gains are
// consecutive in its gradient allocation): `dgamma[t·gstride + j] += Σ_b partials[t·pstride +
// b·d + j]` for t < count, j < d, each sum in the order of `rmsnorm_dgamma_reduce` (the same
// bits). The workgroups of norm t follow those of norm t − 1 (⌈d/8⌉ each). Accumulates into
// `dgamma` (+=); what lies between the norms' ranges is untouched.
// @grid workgroups(p.count * ceil_div(p.d, COLS))
// @requires p.pstride >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires p.gstride >= p.d
// @requires len(partials) >= p.count * p.pstride
// @requires len(dgamma) >= p.count * p.gstride
// @accumulates dgamma
struct Params {
    rows: u32,
    d: u32,
    count: u32,
    pstride: u32,
    gstride: u32,
}
@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
//#include "lib/dgamma_reduce.wgsl"

fn dg_partial(t: u32, i: u32) -> f32 {
    return partials[t * p.pstride + i];
}

fn dg_add(t: u32, j: u32, v: f32) {
    dgamma[t * p.gstride + j] += v;
}

@compute @workgroup_size(WG)
fn rmsnorm_dgamma_reduce_all(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let per = (p.d + COLS - 1u) / COLS;
    let w = flat_wg(wid, nwg);
    if (w >= p.count * per) {
        return;
    }
    dgamma_reduce(w / per, w % per, tid);
}
