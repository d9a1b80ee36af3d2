// The shared pieces of the streaming attention kernels (`attention_forward` in
// 05_attention.wgsl, `attention_backward_dq` / `attention_backward_dkdv` in
// 10_backward_attention.wgsl), written once: the query block a query-major workgroup owns, and
// the (query, key) dot products of a tile of nq query rows and nk key rows staged in workgroup
// memory, in a fixed order.
//
// Provides `query_block` and `pair_dots(tid, which, off, nq, nk, bk, dh)`.
// Hooks the including kernel defines (for `pair_dots`):
//   fn pair_dot(which: u32, i: u32, j: u32, c: u32, step: u32, dh: u32) -> f32
//       the fma chain over dims d = c, c + step, … < dh of query row i with key row j (`which`
//       chooses the pair of tiles, for kernels with two)
//   fn pair_store(at: u32, v: f32)   stores the dot product of pair (i, j) at at = off + i·bk + j

// The block of workgroup w of a query-major kernel (one workgroup per (b, h, block of bq
// queries), w < B·H·⌈S/bq⌉; bh ≥ B·H for workgroups past the end): bh = b·H + h, its first
// query and query count, the row strides of `[B, S, H, Dh]` and `[B, S, Hkv, Dh]` tensors, and
// the offsets of (b, 0, h, 0) and (b, 0, kv head of h, 0) in them.
struct QueryBlock {
    bh: u32,
    q0: u32,
    nq: u32,
    q_stride: u32,
    kv_stride: u32,
    q_base: u32,
    kv_base: u32,
}

fn query_block(w: u32, bq: u32, seq: u32, heads: u32, kv_heads: u32, dh: u32) -> QueryBlock {
    let nqb = (seq + bq - 1u) / bq;
    let bh = w / nqb;
    let h = bh % heads;
    let b = bh / heads;
    let kvh = h / (heads / kv_heads);
    let q0 = (w % nqb) * bq;
    let q_stride = heads * dh;
    let kv_stride = kv_heads * dh;
    let q_base = b * seq * q_stride + h * dh;
    return QueryBlock(bh, q0, min(bq, seq - q0), q_stride, kv_stride, q_base, b * seq * kv_stride + kvh * dh);
}

// pair_store(off + i·bk + j, pair_dot(which, i, j, …)) for i < nq, j < nk. With at least WG
// pairs each invocation takes whole pairs; with fewer, each dot product is split over
// min(WG / (nq·nk), dh) invocations (dims c, c + split, …) whose partial sums are added in a
// fixed order through the preamble's `sh_red`. Call in uniform control flow; ends with a
// barrier.
fn pair_dots(tid: u32, which: u32, off: u32, nq: u32, nk: u32, bk: u32, dh: u32) {
    let npairs = nq * nk;
    if (npairs >= WG) {
        for (var pi = tid; pi < npairs; pi += WG) {
            let i = pi / nk;
            let j = pi - i * nk;
            pair_store(off + i * bk + j, pair_dot(which, i, j, 0u, 1u, dh));
        }
    } else {
        let split = min(WG / npairs, dh);
        let pi = tid % npairs;
        let c = tid / npairs;
        var s = 0.0;
        if (c < split) {
            s = pair_dot(which, pi / nk, pi % nk, c, split, dh);
        }
        sh_red[tid] = s;
        workgroupBarrier();
        if (tid < npairs) {
            var t = 0.0;
            for (var c2 = 0u; c2 < split; c2++) {
                t += sh_red[c2 * npairs + tid];
            }
            pair_store(off + (tid / nk) * bk + tid % nk, t);
        }
    }
    workgroupBarrier();
}
