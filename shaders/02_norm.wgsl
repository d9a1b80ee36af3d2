// RMSNorm over the rows of a row-major `[rows, d]` matrix (rows = B·S tokens, d the model
// width): y = x · rrms · γ with rrms = 1 / sqrt(mean(x²) + eps), and its backward.
//
// The forward kernels run one workgroup of 256 invocations per row; they save `rrms` per row for
// the backward. The backward runs one workgroup per block of NORM_BLOCK consecutive rows: it
// overwrites dx and writes that block's partial dγ (a fixed-order sum over its rows) into a
// `[blocks, d]` partials buffer, blocks = ⌈rows / NORM_BLOCK⌉ = ⌈rows / 32⌉; then
// `rmsnorm_dgamma_reduce` adds the partials up over the blocks in a fixed order and accumulates
// the result into dγ. No atomics: dγ is the same bits on every run. Every 1-D grid here takes
// the runtime's 2-D fallback past 65535 workgroups (`flat_wg`).

// Rows per backward block (one workgroup): the partials buffer has ⌈rows / NORM_BLOCK⌉ rows.
const NORM_BLOCK: u32 = 32u;

// --- KERNEL: rmsnorm_forward ---
// RMSNorm forward: `y[r, j] = x[r, j] · rrms[r] · gamma[j]` with
// `rrms[r] = 1 / sqrt(Σ_j x[r, j]² / d + eps)`, for the `[rows, d]` row-major x.
// One workgroup of 256 per row (grid `workgroups(rows)`, 2-D past 65535 rows).
// Overwrites `y[0 .. rows·d]` and `rrms[0 .. rows]` (saved for `rmsnorm_backward`).
// @grid workgroups(p.rows)
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

@compute @workgroup_size(WG)
fn rmsnorm_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let row = flat_wg(wid, nwg);
    // Workgroups past the last row (2-D grid tail) leave together: uniform control flow.
    if (row >= p.rows) {
        return;
    }
    let base = row * p.d;
    var ss = 0.0;
    for (var j = tid; j < p.d; j += WG) {
        let v = x[base + j];
        ss = fma(v, v, ss);
    }
    let total = wg_reduce_sum(tid, ss);
    let r = 1.0 / sqrt(total / f32(p.d) + p.eps);
    for (var j = tid; j < p.d; j += WG) {
        y[base + j] = x[base + j] * r * gamma[j];
    }
    if (tid == 0u) {
        rrms[row] = r;
    }
}

// --- KERNEL: rmsnorm_forward_w16 ---
// `rmsnorm_forward` with γ stored as f16 (the f16 weight copy); f32 arithmetic. Needs
// SHADER_F16. `y[r, j] = x[r, j] · rrms[r] · f32(gamma[j])`,
// `rrms[r] = 1 / sqrt(Σ_j x[r, j]² / d + eps)`. One workgroup of 256 per row.
// Overwrites `y[0 .. rows·d]` and `rrms[0 .. rows]`.
// @grid workgroups(p.rows)
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

@compute @workgroup_size(WG)
fn rmsnorm_forward_w16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let row = flat_wg(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.d;
    var ss = 0.0;
    for (var j = tid; j < p.d; j += WG) {
        let v = x[base + j];
        ss = fma(v, v, ss);
    }
    let total = wg_reduce_sum(tid, ss);
    let r = 1.0 / sqrt(total / f32(p.d) + p.eps);
    for (var j = tid; j < p.d; j += WG) {
        y[base + j] = x[base + j] * r * f32(gamma[j]);
    }
    if (tid == 0u) {
        rrms[row] = r;
    }
}

// --- KERNEL: rmsnorm_backward ---
// RMSNorm backward, given x `[rows, d]`, gamma `[d]`, the forward's rrms `[rows]` and the
// upstream gradient dy `[rows, d]`:
//   dx[r, j] = rrms[r]·gamma[j]·dy[r, j] − x[r, j]·rrms[r]³·(Σ_k dy[r, k]·gamma[k]·x[r, k]) / d
//   partials[b, j] = Σ_{r in block b, in row order} dy[r, j]·x[r, j]·rrms[r]
// Block b is rows [b·NORM_BLOCK, min(rows, (b+1)·NORM_BLOCK)), NORM_BLOCK = 32; one workgroup
// of 256 per block (grid `workgroups(⌈rows/32⌉)`, 2-D past 65535 blocks).
// Overwrites `dx[0 .. rows·d]` and `partials[0 .. ⌈rows/32⌉·d]`; dγ itself is accumulated by
// `rmsnorm_dgamma_reduce` (same rows and d) from these partials. The caller allocates
// `partials` with at least ⌈rows/32⌉·d elements.
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

// Lanes per row in the dot-product pass: 32 consecutive invocations read 32 consecutive
// elements of one row (coalesced), 8 rows at a time.
const LANES: u32 = 32u;
// Per row and lane: the lane's part of Σ dy·γ·x (4 KiB).
var<workgroup> sh_part: array<f32, 1024>;
// Per row of the block: rrms, and rrms³ · (Σ dy·γ·x) / d.
var<workgroup> sh_r: array<f32, NORM_BLOCK>;
var<workgroup> sh_coef: array<f32, NORM_BLOCK>;

@compute @workgroup_size(WG)
fn rmsnorm_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let blk = flat_wg(wid, nwg);
    let blocks = (p.rows + NORM_BLOCK - 1u) / NORM_BLOCK;
    if (blk >= blocks) {
        return;
    }
    let r0 = blk * NORM_BLOCK;
    let nr = min(NORM_BLOCK, p.rows - r0);
    // Pass 1: the per-row dot products Σ dy·γ·x for all rows of the block at once. Invocation
    // (group g = tid / 32, lane l = tid % 32) takes rows g, g+8, g+16, g+24 and columns
    // j ≡ l (mod 32); then invocation i < 32 adds row i's 32 lane sums in lane order. A fixed
    // order, independent of the subgroup size, and two barriers instead of 32 reductions.
    let lane = tid % LANES;
    for (var i = tid / LANES; i < NORM_BLOCK; i += WG / LANES) {
        var acc = 0.0;
        if (i < nr) {
            let base = (r0 + i) * p.d;
            for (var j = lane; j < p.d; j += LANES) {
                acc = fma(dy[base + j] * gamma[j], x[base + j], acc);
            }
        }
        sh_part[i * LANES + lane] = acc;
    }
    workgroupBarrier();
    if (tid < nr) {
        var dot = 0.0;
        for (var l = 0u; l < LANES; l++) {
            dot += sh_part[tid * LANES + l];
        }
        let r = rrms[r0 + tid];
        sh_r[tid] = r;
        sh_coef[tid] = r * r * r * dot / f32(p.d);
    }
    workgroupBarrier();
    // Pass 2: each invocation owns columns j ≡ tid (mod 256): dx for every row of the block,
    // and the column's partial dγ summed over the block's rows in row order.
    for (var j = tid; j < p.d; j += WG) {
        let g = gamma[j];
        var dg = 0.0;
        for (var i = 0u; i < nr; i++) {
            let k = (r0 + i) * p.d + j;
            let r = sh_r[i];
            let xv = x[k];
            let dyv = dy[k];
            dx[k] = r * g * dyv - xv * sh_coef[i];
            dg = fma(dyv * xv, r, dg);
        }
        partials[blk * p.d + j] = dg;
    }
}

// --- KERNEL: rmsnorm_dgamma_reduce ---
// The second half of RMSNorm's dγ: `dgamma[j] += Σ_b partials[b, j]` over the
// blocks = ⌈rows / 32⌉ rows of the `[blocks, d]` partials written by `rmsnorm_backward` (called
// with the same rows and d). One workgroup of 256 per 32 columns (grid `workgroups(⌈d/32⌉)`):
// lane k = tid / 32 of column c sums blocks b ≡ k (mod 8) in order (in runs of 64 blocks, to
// limit rounding growth), then the 8 lane sums are added in lane order. The order is fixed,
// so the result is the same bits on every run. Accumulates into `dgamma[0 .. d]` (+=).
// Each invocation loops ⌈blocks/8⌉ times: lavapipe, which stops an invocation's loops after
// 65535 iterations in all, is right up to about 15·10⁶ rows (real GPUs have no such limit).
// @grid workgroups(ceil_div(p.d, COLS))
// @requires len(partials) >= ceil_div(p.rows, NORM_BLOCK) * p.d
// @requires len(dgamma) >= p.d
struct Params {
    rows: u32,
    d: u32,
}
@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

// Columns per workgroup (32 consecutive invocations read 32 consecutive partials of a block).
const COLS: u32 = 32u;
// Lanes over the blocks per column: WG / COLS.
const SPLIT: u32 = 8u;
// Blocks summed into one run before the run joins the lane's total.
const RUN: u32 = 64u;

var<workgroup> sh_lane: array<f32, WG>;

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
    let c = tid % COLS;
    let lane = tid / COLS;
    let j = w * COLS + c;
    let blocks = (p.rows + NORM_BLOCK - 1u) / NORM_BLOCK;
    var total = 0.0;
    if (j < p.d) {
        for (var b0 = lane; b0 < blocks; b0 += SPLIT * RUN) {
            let end = min(b0 + SPLIT * RUN, blocks);
            var run = 0.0;
            for (var b = b0; b < end; b += SPLIT) {
                run += partials[b * p.d + j];
            }
            total += run;
        }
    }
    sh_lane[lane * COLS + c] = total;
    workgroupBarrier();
    if (tid < COLS && j < p.d) {
        var sum = 0.0;
        for (var k = 0u; k < SPLIT; k++) {
            sum += sh_lane[k * COLS + tid];
        }
        dgamma[j] += sum;
    }
}
