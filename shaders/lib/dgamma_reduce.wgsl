// RMSNorm's dγ reduce (`rmsnorm_dgamma_reduce`, `rmsnorm_dgamma_reduce4` in 02_norm.wgsl): the
// `[blocks, d]` partial dγ rows the backward kernels write (blocks = ⌈rows / NORM_BLOCK⌉) added
// over the blocks into dγ, written once for both kernels so that they sum in the same order.
//
// One workgroup of 256 per 8 columns of one tensor: lane k = tid / 8 of column c sums blocks
// b ≡ k (mod 32) in order (in runs of 64 blocks, to limit rounding growth), then the 32 lane sums
// are added in lane order. The order is fixed, so the result is the same bits on every run.
// Each invocation loops about ⌈blocks/128⌉ times: lavapipe, which stops an invocation's loops
// after 65535 iterations in all, is right up to about 60·10⁶ rows (real GPUs have no such limit).
//
// Provides COLS and `dgamma_reduce(t, w, tid)` (workgroup w of tensor t's ⌈d / COLS⌉; every
// invocation of the workgroup calls it, in uniform control flow: it has a barrier). Expects the
// uniform `p` (rows, d) and the hooks
//   fn dg_partial(t: u32, i: u32) -> f32    value i of tensor t's partials
//   fn dg_add(t: u32, j: u32, v: f32)       dγ[j] += v for tensor t

// Columns per workgroup: 8 consecutive invocations read a block's 8 consecutive partials (one
// 32-byte sector), so that a few hundred blocks spread over many workgroups.
const COLS: u32 = 8u;
// Lanes over the blocks per column: WG / COLS.
const SPLIT: u32 = 32u;
const_assert COLS * SPLIT == WG;
// Blocks summed into one run before the run joins the lane's total (a multiple of 4: a lane
// loads 4 of its blocks before adding them).
const RUN: u32 = 64u;
const_assert RUN % 4u == 0u;

var<workgroup> sh_lane: array<f32, WG>;

// The partial of block b at column j of tensor t, 0 for b ≥ end.
fn part_at(t: u32, b: u32, end: u32, j: u32) -> f32 {
    if (b < end) {
        return dg_partial(t, b * p.d + j);
    }
    return 0.0;
}

fn dgamma_reduce(t: u32, w: u32, tid: u32) {
    let c = tid % COLS;
    let lane = tid / COLS;
    let j = w * COLS + c;
    let blocks = (p.rows + NORM_BLOCK - 1u) / NORM_BLOCK;
    var total = 0.0;
    if (j < p.d) {
        for (var b0 = lane; b0 < blocks; b0 += SPLIT * RUN) {
            let end = min(b0 + SPLIT * RUN, blocks);
            var run = 0.0;
            // Four of the lane's blocks loaded before any is added (independent loads in
            // flight); added in block order.
            for (var b = b0; b < end; b += 4u * SPLIT) {
                let v0 = dg_partial(t, b * p.d + j);
                let v1 = part_at(t, b + SPLIT, end, j);
                let v2 = part_at(t, b + 2u * SPLIT, end, j);
                let v3 = part_at(t, b + 3u * SPLIT, end, j);
                run = run + v0 + v1 + v2 + v3;
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
        dg_add(t, j, sum);
    }
}
