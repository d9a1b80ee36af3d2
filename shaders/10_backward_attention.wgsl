// Backward of causal grouped-query attention (`attention_forward` in 05_attention.wgsl): the
// streaming kernels, the fast path's (f32, and `attention_ptx_f16` / `attention_ds_f16` of its
// f16-operand form) and the flash kernels. RoPE's backward is beside its forward (04_rope.wgsl).
//
// Layouts as the forward: Q, O, dO, dQ `[B, S, H, Dh]`; K, V, dK, dV `[B, S, Hkv, Dh]`;
// lse and Δ `[B, H, S]`; query head h uses kv head h / (H / Hkv); causal; 1 ≤ Dh ≤ 256.
// With P_ij = exp(scale · q_i·k_j − lse_i) (j ≤ i), dP_ij = dO_i·v_j, Δ_i = dO_i·O_i and
// dS_ij = P_ij (dP_ij − Δ_i):
//     dQ_i = scale Σ_j dS_ij k_j        dK_j = scale Σ_{h, i} dS_ij q_i        dV_j = Σ_{h, i} P_ij dO_i
// where the sums for dK/dV run over every query head h sharing the kv head.
//
// Two kernels, in this order (one batch is fine: wgpu orders the dispatches):
//   1. `attention_backward_dq`   query-major: dQ and Δ.
//   2. `attention_backward_dkdv` key-major: dK and dV, reading Δ from step 1.
// ONE accumulation convention: every output (dQ, Δ, dK, dV) is OVERWRITTEN, never added to.
// A caller that needs to add to an existing gradient adds afterwards (`axpy`). No float atomics:
// each output element is written by exactly one invocation after a fixed-order loop, so results
// are bitwise identical run to run.
//
// The fast path's backward (over the probabilities `[B, H, S, S]` that the fast forward left,
// see `lib/attention_tiles.wgsl`; `kernels::fast_attention` records it), in this order: `attention_fast_delta` (Δ), `attention_fast_ptx` (dV = Σ_g P_gᵀ·dO_g),
// `attention_fast_ds` (dS = P ⊙ (dO·Vᵀ − Δ) in place of P), `attention_fast_pv` of
// 05_attention.wgsl (dQ = scale·dS·K), `attention_fast_ptx` (dK = scale·Σ_g dS_gᵀ·Q_g). Same
// convention: everything overwritten, deterministic, no atomics.
//
// Block sizes (from Dh at run time; the same formulas in the kernels and their `@grid`), so
// workgroup memory stays under 16 KiB for every Dh:
//   dq:   BQ = min(32, 1024 / Dh), BK = min(1024 / Dh, 256 / BQ)
//         tiles Q, dO, K-or-V ≤ 1024 floats each, pairs 2·256, row values 2·32, plus the
//         preamble's `sh_red` (1 KiB, scratch of the split dot products): 15.25 KiB.
//   dkdv: BK = BQ = min(16, 768 / Dh)
//         tiles K, V, Q, dO ≤ 768 floats each, pairs 2·256, row values 2·16, `sh_red`: 15.1 KiB.
//     Dh:          16  32  64  100  128  256
//     dq   BQ/BK:  32/8  32/8  16/16  10/10  8/8  4/4
//     dkdv BQ=BK:  16  16  12   7    6    3

const HEAD_DIM_MAX: u32 = 256u;
const DQ_TILE_FLOATS: u32 = 1024u;
const DQ_BQ_MAX: u32 = 32u;
const PAIRS_MAX: u32 = 256u;
const DQ_PER_THREAD: u32 = 4u; // DQ_TILE_FLOATS / WG
const DKV_TILE_FLOATS: u32 = 768u;
const DKV_B_MAX: u32 = 16u;
const DKV_PER_THREAD: u32 = 3u; // DKV_TILE_FLOATS / WG

fn dq_bq(dh: u32) -> u32 {
    return min(DQ_BQ_MAX, DQ_TILE_FLOATS / dh);
}

fn dq_bk(dh: u32, bq: u32) -> u32 {
    return min(DQ_TILE_FLOATS / dh, PAIRS_MAX / bq);
}

fn dkv_b(dh: u32) -> u32 {
    return min(DKV_B_MAX, DKV_TILE_FLOATS / dh);
}

// The fast path's tiles, the row contract of P and its products.
//#include "lib/attention_tiles.wgsl"

// The flash-attention kernels (`flash_backward_*`): blocks, staging, the portable products and
// the row layout, shared with the forward.
//#include "lib/flash.wgsl"

// --- KERNEL: attention_backward_dq ---
// Attention backward, query-major part: dQ and Δ = rowsum(dO ⊙ O).
// Inputs `q`, `o`, `d_o` `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]`, `lse` `[B, H, S]` (from
// `attention_forward`), p.scale as in the forward.
// Grid: one workgroup per (b, h, block of BQ queries) — `workgroups(B·H·⌈S/BQ⌉)`, past 65535
// through `flat_wg`. The workgroup keeps Q and dO of its block in workgroup memory, computes Δ
// for its rows, and streams keys 0..=(last query) in tiles of BK: V tile → dP; K tile (same
// memory) → P recomputed from lse, dS = P (dP − Δ) → dQ += dS·K. Dot products are split over
// several invocations when a tile has fewer than 256 pairs and summed in a fixed order.
// Overwrites `dq` (the first B·S·H·Dh elements) and `delta` (the first B·H·S elements).
// Run before `attention_backward_dkdv`, which reads `delta`.
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, min(DQ_BQ_MAX, DQ_TILE_FLOATS / p.head_dim)))
// @requires p.head_dim >= 1
// @requires p.head_dim <= HEAD_DIM_MAX
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(delta) >= p.batch * p.heads * p.seq
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> o: array<f32>;
@group(0) @binding(4) var<storage, read> d_o: array<f32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dq: array<f32>;
@group(0) @binding(7) var<storage, read_write> delta: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;

var<workgroup> sq: array<f32, DQ_TILE_FLOATS>;
var<workgroup> sdo: array<f32, DQ_TILE_FLOATS>;
var<workgroup> skv: array<f32, DQ_TILE_FLOATS>;
// Pair values: [0, PAIRS_MAX) dP then dS, [PAIRS_MAX, 2·PAIRS_MAX) scores.
var<workgroup> spair: array<f32, 512>;
var<workgroup> slse: array<f32, DQ_BQ_MAX>;
var<workgroup> sdelta: array<f32, DQ_BQ_MAX>;

// The dot products of `lib/attention_blocks.wgsl`: row i of sq (which == 1) or sdo (which == 0) with
// row j of skv, stored into spair.
fn pair_dot(which: u32, i: u32, j: u32, c: u32, step: u32, dh: u32) -> f32 {
    var s = 0.0;
    if (which == 1u) {
        for (var d = c; d < dh; d += step) {
            s = fma(sq[i * dh + d], skv[j * dh + d], s);
        }
    } else {
        for (var d = c; d < dh; d += step) {
            s = fma(sdo[i * dh + d], skv[j * dh + d], s);
        }
    }
    return s;
}

fn pair_store(at: u32, v: f32) {
    spair[at] = v;
}
//#include "lib/attention_blocks.wgsl"

@compute @workgroup_size(WG)
fn attention_backward_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let dh = p.head_dim;
    let seq = p.seq;
    let bq = dq_bq(dh);
    let bk = dq_bk(dh, bq);
    let blk = query_block(flat_wg(wid, nwg), bq, seq, p.heads, p.kv_heads, dh);
    if (blk.bh >= p.batch * p.heads) {
        return;
    }
    let q0 = blk.q0;
    let nq = blk.nq;
    let row_base = blk.bh * seq + q0; // lse / Δ index of query q0

    // Q and dO of the block (its nq valid rows; loops below never read past them).
    for (var e = tid; e < nq * dh; e += WG) {
        let a = blk.q_base + (q0 + e / dh) * blk.q_stride + e % dh;
        sq[e] = q[a];
        sdo[e] = d_o[a];
    }
    if (tid < nq) {
        slse[tid] = lse[row_base + tid];
    }

    // Δ_i = dO_i · O_i, split over min(WG / nq, dh) invocations per row, summed in order.
    {
        let split = min(WG / nq, dh);
        let i = tid % nq;
        let c = tid / nq;
        var s = 0.0;
        if (c < split) {
            let a = blk.q_base + (q0 + i) * blk.q_stride;
            for (var d = c; d < dh; d += split) {
                s = fma(d_o[a + d], o[a + d], s);
            }
        }
        sh_red[tid] = s;
        workgroupBarrier();
        if (tid < nq) {
            var t = 0.0;
            for (var c2 = 0u; c2 < split; c2++) {
                t += sh_red[c2 * nq + tid];
            }
            sdelta[tid] = t;
            delta[row_base + tid] = t;
        }
    }

    var acc: array<f32, DQ_PER_THREAD>;
    for (var r = 0u; r < DQ_PER_THREAD; r++) {
        acc[r] = 0.0;
    }
    // Causal: keys up to the last query of the block.
    let kend = q0 + nq;
    for (var k0 = 0u; k0 < kend; k0 += bk) {
        let nk = min(bk, kend - k0);
        let npairs = nq * nk;
        // The previous tile is done with skv and spair (the first: Δ is done with sh_red).
        workgroupBarrier();
        for (var e = tid; e < nk * dh; e += WG) {
            skv[e] = v[blk.kv_base + (k0 + e / dh) * blk.kv_stride + e % dh];
        }
        workgroupBarrier();
        pair_dots(tid, 0u, 0u, nq, nk, bk, dh); // dP
        for (var e = tid; e < nk * dh; e += WG) {
            skv[e] = k[blk.kv_base + (k0 + e / dh) * blk.kv_stride + e % dh];
        }
        workgroupBarrier();
        pair_dots(tid, 1u, PAIRS_MAX, nq, nk, bk, dh); // q·k
        for (var pi = tid; pi < npairs; pi += WG) {
            let i = pi / nk;
            let j = pi - i * nk;
            let at = i * bk + j;
            var ds = 0.0;
            if (k0 + j <= q0 + i) {
                let pij = exp(p.scale * spair[PAIRS_MAX + at] - slse[i]);
                ds = pij * (spair[at] - sdelta[i]);
            }
            spair[at] = ds;
        }
        workgroupBarrier();
        // dQ[i, d] += Σ_j dS[i, j] · K[j, d].
        for (var r = 0u; r < DQ_PER_THREAD; r++) {
            let e = tid + r * WG;
            if (e < nq * dh) {
                let i = e / dh;
                let d = e - i * dh;
                var a = acc[r];
                for (var j = 0u; j < nk; j++) {
                    a = fma(spair[i * bk + j], skv[j * dh + d], a);
                }
                acc[r] = a;
            }
        }
    }
    for (var r = 0u; r < DQ_PER_THREAD; r++) {
        let e = tid + r * WG;
        if (e < nq * dh) {
            let i = e / dh;
            dq[blk.q_base + (q0 + i) * blk.q_stride + e - i * dh] = p.scale * acc[r];
        }
    }
}

// --- KERNEL: attention_backward_dkdv ---
// Attention backward, key-major part: dK and dV. Inputs as `attention_backward_dq` plus
// `delta` `[B, H, S]` written by it (run it first); `o` is not needed.
// Grid: one workgroup per (b, kv head, block of BK keys) — `workgroups(B·Hkv·⌈S/BK⌉)`, past
// 65535 through `flat_wg`. The workgroup keeps its K and V block in workgroup memory and loops,
// in a fixed order, over the H/Hkv query heads sharing the kv head and, per head, over the
// queries k0.. S−1 in tiles of BQ (Q and dO tiles): scores and dP (split dot products, fixed
// order), P from lse, dS = P (dP − Δ), then dV += Pᵀ·dO and dK += dSᵀ·Q in registers.
// Overwrites `dk` and `dv` (the first B·S·Hkv·Dh elements each).
// @grid workgroups(p.batch * p.kv_heads * ceil_div(p.seq, min(DKV_B_MAX, DKV_TILE_FLOATS / p.head_dim)))
// @requires p.head_dim >= 1
// @requires p.head_dim <= HEAD_DIM_MAX
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dv) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> d_o: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> delta: array<f32>;
@group(0) @binding(6) var<storage, read_write> dk: array<f32>;
@group(0) @binding(7) var<storage, read_write> dv: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;

var<workgroup> sk: array<f32, DKV_TILE_FLOATS>;
var<workgroup> sv: array<f32, DKV_TILE_FLOATS>;
var<workgroup> sq: array<f32, DKV_TILE_FLOATS>;
var<workgroup> sdo: array<f32, DKV_TILE_FLOATS>;
// Pair values (query i, key j) at i·bk + j: [0, PAIRS_MAX) scores then P, [PAIRS_MAX, 2·PAIRS_MAX)
// dP then dS.
var<workgroup> spair: array<f32, 512>;
var<workgroup> slse: array<f32, DKV_B_MAX>;
var<workgroup> sdelta: array<f32, DKV_B_MAX>;

// The dot products of `lib/attention_blocks.wgsl`: query row i with key row j, sq·sk (which == 1) or
// sdo·sv (which == 0), stored into spair.
fn pair_dot(which: u32, i: u32, j: u32, c: u32, step: u32, dh: u32) -> f32 {
    var s = 0.0;
    if (which == 1u) {
        for (var d = c; d < dh; d += step) {
            s = fma(sq[i * dh + d], sk[j * dh + d], s);
        }
    } else {
        for (var d = c; d < dh; d += step) {
            s = fma(sdo[i * dh + d], sv[j * dh + d], s);
        }
    }
    return s;
}

fn pair_store(at: u32, v: f32) {
    spair[at] = v;
}
//#include "lib/attention_blocks.wgsl"

@compute @workgroup_size(WG)
fn attention_backward_dkdv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let dh = p.head_dim;
    let seq = p.seq;
    let bb = dkv_b(dh);
    let bq = bb;
    let bk = bb;
    let nkb = (seq + bk - 1u) / bk;
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.kv_heads * nkb) {
        return;
    }
    let kb = w % nkb;
    let bkvh = w / nkb;
    let kvh = bkvh % p.kv_heads;
    let b = bkvh / p.kv_heads;
    let group = p.heads / p.kv_heads;
    let k0 = kb * bk;
    let nk = min(bk, seq - k0);
    let q_stride = p.heads * dh;
    let kv_stride = p.kv_heads * dh;
    let kv_base = b * seq * kv_stride + kvh * dh;

    // K and V of the block (its nk valid rows).
    for (var e = tid; e < nk * dh; e += WG) {
        let a = kv_base + (k0 + e / dh) * kv_stride + e % dh;
        sk[e] = k[a];
        sv[e] = v[a];
    }

    var acc_k: array<f32, DKV_PER_THREAD>;
    var acc_v: array<f32, DKV_PER_THREAD>;
    for (var r = 0u; r < DKV_PER_THREAD; r++) {
        acc_k[r] = 0.0;
        acc_v[r] = 0.0;
    }
    for (var hh = 0u; hh < group; hh++) {
        let h = kvh * group + hh;
        let q_base = b * seq * q_stride + h * dh;
        let row_base = (b * p.heads + h) * seq;
        // Causal: queries k0 .. seq − 1 see some key of the block.
        for (var q0 = k0; q0 < seq; q0 += bq) {
            let nq = min(bq, seq - q0);
            let npairs = nq * nk;
            // The previous tile is done with sq, sdo, spair, slse, sdelta.
            workgroupBarrier();
            for (var e = tid; e < nq * dh; e += WG) {
                let a = q_base + (q0 + e / dh) * q_stride + e % dh;
                sq[e] = q[a];
                sdo[e] = d_o[a];
            }
            if (tid < nq) {
                slse[tid] = lse[row_base + q0 + tid];
                sdelta[tid] = delta[row_base + q0 + tid];
            }
            workgroupBarrier();
            pair_dots(tid, 1u, 0u, nq, nk, bk, dh); // q·k
            pair_dots(tid, 0u, PAIRS_MAX, nq, nk, bk, dh); // dP
            for (var pi = tid; pi < npairs; pi += WG) {
                let i = pi / nk;
                let j = pi - i * nk;
                let at = i * bk + j;
                var pij = 0.0;
                if (k0 + j <= q0 + i) {
                    pij = exp(p.scale * spair[at] - slse[i]);
                }
                spair[at] = pij;
                spair[PAIRS_MAX + at] = pij * (spair[PAIRS_MAX + at] - sdelta[i]);
            }
            workgroupBarrier();
            // dV[j, d] += Σ_i P[i, j] dO[i, d];  dK[j, d] += Σ_i dS[i, j] Q[i, d].
            for (var r = 0u; r < DKV_PER_THREAD; r++) {
                let e = tid + r * WG;
                if (e < nk * dh) {
                    let j = e / dh;
                    let d = e - j * dh;
                    var av = acc_v[r];
                    var ak = acc_k[r];
                    for (var i = 0u; i < nq; i++) {
                        av = fma(spair[i * bk + j], sdo[i * dh + d], av);
                        ak = fma(spair[PAIRS_MAX + i * bk + j], sq[i * dh + d], ak);
                    }
                    acc_v[r] = av;
                    acc_k[r] = ak;
                }
            }
        }
    }
    for (var r = 0u; r < DKV_PER_THREAD; r++) {
        let e = tid + r * WG;
        if (e < nk * dh) {
            let j = e / dh;
            let a = kv_base + (k0 + j) * kv_stride + e - j * dh;
            dk[a] = p.scale * acc_k[r];
            dv[a] = acc_v[r];
        }
    }
}

// --- KERNEL: attention_fast_delta ---
// Fast path, backward step 1: Δ = rowsum(dO ⊙ O). `o`, `d_o` `[B, S, H, Dh]`, `delta`
// `[B, H, S]`: Δ[b,h,s] = Σ_d dO[b,s,h,d]·O[b,s,h,d], one fixed FMA chain over d.
// Grid: one invocation per (b, s, h) row — `threads(B·S·H)` (consecutive invocations read
// consecutive rows), past 65535 workgroups through `flat_id`. Overwrites `delta` (the first
// B·H·S elements).
// @grid threads(p.batch * p.seq * p.heads)
// @requires p.head_dim >= 1
// @requires len(o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(delta) >= p.batch * p.heads * p.seq
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
}
@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> d_o: array<f32>;
@group(0) @binding(2) var<storage, read_write> delta: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn attention_fast_delta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_id(gid, nwg);
    if (row >= p.batch * p.seq * p.heads) {
        return;
    }
    let dh = p.head_dim;
    let h = row % p.heads;
    let bs = row / p.heads;
    let s = bs % p.seq;
    let b = bs / p.seq;
    let a = row * dh;
    var t = 0.0;
    for (var d = 0u; d < dh; d++) {
        t = fma(d_o[a + d], o[a + d], t);
    }
    delta[(b * p.heads + h) * p.seq + s] = t;
}

// --- KERNEL: attention_delta_cast16 ---
// The f16 backward's first step: Δ = rowsum(dO ⊙ O) as `attention_fast_delta` computes it (the
// same FMA chain over d, so the same bits) and, in the same pass, dO's f16 copy in the f16x4 row
// layout with loss scaling's overflow check, as `cast::cast_grad_f16x4` makes it (values beyond
// ±65504 clamped, NaN kept; any NaN, ±Inf or value beyond ±65504 sets `flag[0]` to 1, never
// clears it). `o`, `d_o` `[B, S, H, Dh]` f32; `d_o16` `[B·S, H·Dh/4]` vec4<f16> (Dh % 4 == 0, so
// the rows have no padding); `delta` `[B, H, S]`. Overwrites `delta` and `d_o16`.
// Each invocation loads one vec4 of dO and of O (consecutive invocations, consecutive vec4s: the
// loads coalesce) and writes its f16 copy; the workgroup's rows' FMA chains then run from
// workgroup memory, one invocation a row. Grid: one workgroup per ⌊WG / (Dh/4)⌋ (b, s, h) rows,
// past 65535 workgroups through `flat_wg`.
// @grid workgroups(ceil_div(p.batch * p.seq * p.heads, WG / (p.head_dim / 4)))
// @requires p.head_dim >= 4
// @requires p.head_dim % 4 == 0
// @requires p.head_dim <= 4 * WG
// @requires len(o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(d_o16) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(flag) >= 1
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
}
@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> d_o: array<f32>;
@group(0) @binding(2) var<storage, read_write> d_o16: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> delta: array<f32>;
@group(0) @binding(4) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"

var<workgroup> dc_g: array<vec4<f32>, WG>;
var<workgroup> dc_x: array<vec4<f32>, WG>;

@compute @workgroup_size(WG)
fn attention_delta_cast16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let q = p.head_dim / 4u;
    let per = WG / q;
    let r = tid / q;
    let c = tid % q;
    let row = flat_wg(wid, nwg) * per + r;
    let live = r < per && row < p.batch * p.seq * p.heads;
    if (live) {
        let a = row * p.head_dim + 4u * c;
        let g = vec4<f32>(d_o[a], d_o[a + 1u], d_o[a + 2u], d_o[a + 3u]);
        let x = vec4<f32>(o[a], o[a + 1u], o[a + 2u], o[a + 3u]);
        dc_g[tid] = g;
        dc_x[tid] = x;
        if (overflows16(g)) {
            atomicOr(&flag[0], 1u);
        }
        d_o16[a / 4u] = to_f16x4(g);
    }
    workgroupBarrier();
    if (live && c == 0u) {
        var t = 0.0;
        for (var j = 0u; j < q; j++) {
            let g = dc_g[tid + j];
            let x = dc_x[tid + j];
            t = fma(g.x, x.x, t);
            t = fma(g.y, x.y, t);
            t = fma(g.z, x.z, t);
            t = fma(g.w, x.w, t);
        }
        let h = row % p.heads;
        let bs = row / p.heads;
        let s = bs % p.seq;
        let b = bs / p.seq;
        delta[(b * p.heads + h) * p.seq + s] = t;
    }
}

// --- KERNEL: attention_fast_ptx ---
// Fast path, backward steps 2 and 5: Y = alpha · Σ_{heads g of the kv group} P_gᵀ·X_g, i.e.
// dV = Σ_g P_gᵀ·dO_g (alpha 1) and dK = scale · Σ_g dS_gᵀ·Q_g. `probs` `[B, H, S, S]` (P or dS,
// row contract of the file preamble), `x` `[B, S, H, Dh]` (dO or Q), `y` `[B, S, Hkv, Dh]` (dV or
// dK), read and written in place: Y[b,j,kvh,:] = alpha Σ_{g} Σ_{s ≥ 64·⌊j/64⌋} P[b,h_g,s,j] X[b,s,h_g,:]
// with h_g = kvh·(H/Hkv) + g. The contraction runs over (g, s) — heads in order, then queries
// from the key tile's first row (earlier queries do not see the key tile) — as one fixed FMA
// chain, so results repeat bit for bit and no atomics are needed.
// Grid: one workgroup per (key tile, b, kv head, 64-column slice of Dh) —
// `workgroups(T·B·Hkv·⌈Dh/64⌉)`, T = ⌈S/64⌉, past 65535 through `flat_wg`; the longest
// contractions (the first key tiles) get the first workgroups. Overwrites `y` (the first
// B·S·Hkv·Dh elements).
// @grid workgroups(ceil_div(p.seq, FT_TILE) * p.batch * p.kv_heads * ceil_div(p.head_dim, FT_TILE))
// @requires p.head_dim >= 1
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(x) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(y) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    alpha: f32,
}
@group(0) @binding(0) var<storage, read> probs: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(probs[i.x], probs[i.y], probs[i.z], probs[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = v; }

@compute @workgroup_size(WG)
fn attention_fast_ptx(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let dh = p.head_dim;
    // (key tile, b·Hkv + kv head, column slice)
    let ct = column_tile(flat_wg(wid, nwg), p.batch, p.kv_heads, dh);
    // Whole workgroups past the end leave together (uniform).
    if (ct.x >= (seq + FT_TILE - 1u) / FT_TILE) {
        return;
    }
    let kvh = ct.y % p.kv_heads;
    let b = ct.y / p.kv_heads;
    let group = p.heads / p.kv_heads;
    let q_stride = p.heads * dh;
    let kv_stride = p.kv_heads * dh;
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let r0 = ct.x * FT_TILE;
    let n0 = ct.z * FT_TILE;
    // A(j, s) = P[s, j]: j contiguous, s strided by S. B(d, s) = X[b, s, h, d]: d contiguous.
    let sa = ft_slot_r(tid, r0, seq, seq, seq);
    let sb = ft_slot_r(tid, n0, dh, q_stride, seq);
    // Bases of head h = kvh·group + g: P at ((b·H + h)·S)·S, X at b·S·H·Dh + h·Dh.
    let h0 = kvh * group;
    let p_base0 = (b * p.heads + h0) * seq * seq;
    let x_base0 = b * seq * q_stride + h0 * dh;
    ft_clear();
    var g = 0u;
    var k0 = r0;
    var va = ft_stage_a(sa, p_base0, k0);
    var vb = ft_stage_b(sb, x_base0, k0);
    while (g < group) {
        ft_a[sa.slot] = va;
        ft_b[sb.slot] = vb;
        workgroupBarrier();
        // The next step: the next 16 queries, or the next head from the key tile's first row.
        var k1 = k0 + TILE_K;
        var g1 = g;
        if (k1 >= seq) {
            k1 = r0;
            g1 = g + 1u;
        }
        if (g1 < group) {
            va = ft_stage_a(sa, p_base0 + g1 * seq * seq, k1);
            vb = ft_stage_b(sb, x_base0 + g1 * dh, k1);
        }
        acc_step(tx, ty);
        workgroupBarrier();
        g = g1;
        k0 = k1;
    }
    ft_store(tid, r0, n0, seq, dh, b * seq * kv_stride + kvh * dh, kv_stride, p.alpha);
}

// --- KERNEL: attention_fast_ds ---
// Fast path, backward step 3: dS = P ⊙ (dP − Δ) with dP = dO·Vᵀ, in place of P. `d_o`
// `[B, S, H, Dh]` and `v` `[B, S, Hkv, Dh]` read in place (head h reads kv head h / (H / Hkv)),
// `delta` `[B, H, S]` from `attention_fast_delta`, `probs` `[B, H, S, S]` holding P (row
// contract of the file preamble): probs[b,h,s,j] ← P[b,h,s,j] · (dO[b,s,h,:]·V[b,j,kvh,:] − Δ[b,h,s])
// for j ≤ s. Entries s < j of the diagonal tile stay 0 (= their dS, P being 0 there).
// Grid: one workgroup per (b, h, lower-triangle 64×64 tile) — `workgroups(B·H·T(T+1)/2)`,
// T = ⌈S/64⌉, past 65535 through `flat_wg`; each a 64×64×Dh product (fixed order) with the
// update fused into its stores. Overwrites `probs` (P becomes dS, in place; same entries).
// @grid workgroups(p.batch * p.heads * (ceil_div(p.seq, FT_TILE) * (ceil_div(p.seq, FT_TILE) + 1) / 2))
// @requires p.head_dim >= 1
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
}
@group(0) @binding(0) var<storage, read> d_o: array<f32>;
@group(0) @binding(1) var<storage, read> v: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;
@group(0) @binding(3) var<storage, read_write> probs: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(d_o[i.x], d_o[i.y], d_o[i.z], d_o[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(v[i.x], v[i.y], v[i.z], v[i.w]); }

@compute @workgroup_size(WG)
fn attention_fast_ds(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let ntri = score_tiles(seq);
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads * ntri) {
        return;
    }
    // dP = dO·Vᵀ for the tile (in ft_acc), then dS in place of P.
    let t = score_tile(w, tid, ntri, p.heads, p.kv_heads);
    score_product(tid, t, seq, p.heads, p.kv_heads, p.head_dim);
    let p_base = t.bh * seq * seq;
    let d_base = t.bh * seq;
    for (var i = 0u; i < 4u; i++) {
        let r = t.r0 + i;
        if (r < seq) {
            let dr = delta[d_base + r];
            for (var j = 0u; j < 4u; j++) {
                let c = t.c0 + j;
                if (c <= r) {
                    let at = p_base + r * seq + c;
                    probs[at] = probs[at] * (ft_acc[i][j] - dr);
                }
            }
        }
    }
}

// --- KERNEL: attention_ptx_f16 ---
// Y = alpha · Σ_{heads g of the kv group} P_gᵀ·X_g on tensor cores: the backward's dV = Σ_g
// P_gᵀ·dO_g (alpha 1) and dK = scale · Σ_g dS_gᵀ·Q_g. `probs` `[B, H, S, S]` f32 (P or dS, the fast
// path's row contract; rounded to f16 as read), `x` `[B, S, H, Dh]` f16 (dO or Q; Dh % 4 == 0),
// `y` `[B, S, Hkv, Dh]` f32 (dV or dK): Y[b,j,kvh,:] = alpha Σ_g Σ_{s ≥ 64·⌊j/64⌋} P[b,h_g,s,j]
// X[b,s,h_g,:] with h_g = kvh·(H/Hkv) + g. The contraction runs over (g, s) — heads in order, then
// queries from the key tile's first row (earlier queries do not see the key tile: those tiles are
// skipped), each head's range padded to a multiple of 32 with zeros — as one fixed chain, so the
// bits repeat and no atomics are needed. Overwrites `y` (the first B·S·Hkv·Dh elements). Grid:
// one workgroup per (key tile, b, kv head, 64-column slice of Dh), 1-D (longest contractions
// first), 2-D past the device's limit. Needs SHADER_F16; tensor cores for full 64×64 output tiles.
// @grid workgroups(ceil_div(p.seq, ATT_T) * p.batch * p.kv_heads * ceil_div(p.head_dim, ATT_T))
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(x) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(y) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct AttParams {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    alpha: f32,
}
@group(0) @binding(0) var<storage, read> probs: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: AttParams;
const BM: u32 = ATT_T;
const BN: u32 = ATT_T;
const WGS: u32 = ATT_WG;
const A_KC: bool = false;
const B_KC: bool = false;
// The key tile's first query, each head's padded query span, the group's first head, and bases.
var<private> r_first: u32;
var<private> span: u32;
var<private> p_base: u32;
var<private> b_base: u32;
var<private> b_stride: u32;
var<private> y_base: u32;
var<private> y_stride: u32;

// A(row, kc) = P[b, h_g, s, j = row … row+3] with (g, s) from kc.
fn raw_a(row: u32, kc: u32) -> vec4<f32> {
    let g = kc / span;
    let s = r_first + kc % span;
    let ok = in4(row, dim_m) & vec4<bool>(s < dim_m);
    let at = idx4(p_base + g * dim_m * dim_m + min(s, dim_m - 1u) * dim_m, row, dim_m);
    return select(vec4<f32>(0.0), vec4<f32>(probs[at.x], probs[at.y], probs[at.z], probs[at.w]), ok);
}

fn load_a(row: u32, kc: u32) -> vec4<f32> {
    return as_f16(raw_a(row, kc));
}

// B(kc, col) = X[b, s, h_g, col … col+3].
fn load_b(col: u32, kc: u32) -> vec4<f32> {
    let g = kc / span;
    let s = r_first + kc % span;
    let qd = col / 4u;
    let ok = s < dim_m && qd < dim_bq;
    return select(vec4<f32>(0.0), vec4<f32>(x[select(0u, b_base + g * dim_bq + s * b_stride + qd, ok)]), ok);
}

fn store_out(row: u32, col: u32, v: f32) {
    if (row < dim_m && col < dim_n) {
        y[y_base + row * y_stride + col] = p.alpha * v;
    }
}

//#if coop
const_assert CM_BYTES + FB_BYTES <= WG_MEMORY_MAX;

// The tensor-core path's loads: the same elements as f16.
fn load_a16(row: u32, kc: u32) -> vec4<f16> {
    return vec4<f16>(f16_clamp(raw_a(row, kc)));
}

fn load_b16(col: u32, kc: u32) -> vec4<f16> {
    let g = kc / span;
    let s = r_first + kc % span;
    let qd = col / 4u;
    let ok = s < dim_m && qd < dim_bq;
    return select(vec4<f16>(0.0h), x[select(0u, b_base + g * dim_bq + s * b_stride + qd, ok)], ok);
}

fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = y_base + row * y_stride + col;
    let ld = y_stride;
    coopStoreT(p.alpha * c, &y[at], ld);
}
//#endif

//#include "lib/attention_f16.wgsl"

@compute @workgroup_size(WGS)
fn attention_ptx_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let seq = p.seq;
    let dh = p.head_dim;
    let nt = (seq + ATT_T - 1u) / ATT_T;
    let ncol = (dh + ATT_T - 1u) / ATT_T;
    let per_tile = p.batch * p.kv_heads * ncol;
    let w = flat_wg(wid, nwg);
    if (w >= nt * per_tile) {
        return;
    }
    let jt = w / per_tile;
    let rest = w % per_tile;
    let bkv = rest / ncol;
    let ct = rest % ncol;
    let kvh = bkv % p.kv_heads;
    let bb = bkv / p.kv_heads;
    let group = p.heads / p.kv_heads;
    let h0 = kvh * group;
    dim_m = seq;
    dim_n = dh;
    dim_bq = dh / 4u;
    let r0 = jt * ATT_T;
    r_first = r0;
    let sp = (seq - r0 + 31u) / 32u * 32u;
    span = sp;
    p_base = (bb * p.heads + h0) * seq * seq;
    b_stride = p.heads * dim_bq;
    b_base = bb * seq * b_stride + h0 * dim_bq;
    y_stride = p.kv_heads * dh;
    y_base = bb * seq * y_stride + kvh * dh;
    let n0 = ct * ATT_T;
//#if coop
    if (r0 + ATT_T <= seq && n0 + ATT_T <= dh) {
        cm_block(tid, sg, nsg, r0, n0, 0u, group * sp);
        return;
    }
//#endif
    fb_block(tid, r0, n0, 0u, group * sp);
}

// --- KERNEL: attention_ds_f16 ---
// dS = P ⊙ (dP − Δ), over dP: `probs` `[B, H, S, S]` holding P (as
// `attention_fast_softmax` left it), `ds` `[B, H, S, S]` holding dP = dO·Vᵀ (as
// `attention::attention_scores_f16` writes it with scale 1: the tiles up to the diagonal, diagonal
// tiles whole), `delta` `[B, H, S]` (Δ = rowsum(dO ⊙ O), `attention_fast_delta`). Row (b, h, s):
// ds[j] ← P[j]·(dP[j] − Δ) for j ≤ s, 0 for s < j < min(S, 64·(⌊s/64⌋+1)) (written as 0 whatever
// dP holds there, so the products read zeros past the diagonal). The products round dS to f16
// (clamping it to ±65504) as they load it, so the overflow check of loss scaling is made here:
// any dS that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears it), as
// `cast::cast_grad_f16x4` does for the gradients it casts. Overwrites those entries of `ds`;
// `probs` is only read. Grid: one workgroup per row, `workgroups(B·H·S)`, 1-D (2-D past the
// device's limit); the row strided over the 256 invocations.
// @grid workgroups(p.batch * p.heads * p.seq)
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(ds) >= p.batch * p.heads * p.seq * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(flag) >= 1
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
}
@group(0) @binding(0) var<storage, read> probs: array<f32>;
@group(0) @binding(1) var<storage, read> delta: array<f32>;
@group(0) @binding(2) var<storage, read_write> ds: array<f32>;
@group(0) @binding(3) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> p: Params;

// The step of the f16-operand backward (`fast_attention::backward16`) between its tensor-core
// products (`attention::attention_scores_f16` for dP, then `attention_ptx_f16` and
// `attention::attention_pv_f16` over dS): P, dP and dS keep the fast path's row contract
// (`lib/attention_tiles.wgsl`); the products read the zeros past the diagonal in a row's tile.

// The causal tile of the fast path (64 keys).
const TILE: u32 = 64u;
// The largest finite f16.
const F16_MAX: f32 = 65504.0;

@compute @workgroup_size(WG)
fn attention_ds_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads * seq) {
        return;
    }
    // Row w = (b·H + h)·S + s: Δ's index too.
    let s = w % seq;
    let base = w * seq;
    let tile_end = min(seq, (s / TILE + 1u) * TILE);
    let dr = delta[w];
    var bad = false;
    for (var j = tid; j < tile_end; j += WG) {
        var v = 0.0;
        if (j <= s) {
            v = probs[base + j] * (ds[base + j] - dr);
        }
        ds[base + j] = v;
        // NaN and ±Inf have the exponent bits all ones (`v != v` may be folded away); NaN fails
        // the comparison, so both tests are needed.
        bad = bad || !is_finite(v) || abs(v) > F16_MAX;
    }
    if (bad) {
        atomicOr(&flag[0], 1u);
    }
}

// --- KERNEL: flash_backward_dkdv ---
// Flash attention backward, key-major pass, f32: dK and dV of the causal GQA attention of
// `flash_forward` (or `attention_forward`: the same O and lse). `q`, `d_o` `[B, S, H, Dh]`, `k`,
// `v` `[B, S, Hkv, Dh]`, `lse` `[B, H, S]` (the forward's), `delta` `[B, H, S]` = rowsum(dO ⊙ O)
// (`attention_fast_delta`, run first); dK[b,j,kvh,:] = p.scale Σ_{h of the group} Σ_{i≥j} dS_ij
// q_i and dV[b,j,kvh,:] = Σ_h Σ_{i≥j} P_ij dO_i with P and dS recomputed from Q, K, V, dO, lse and
// Δ (`lib/flash_bwd.wgsl`), f32 FMAs (`lib/flash_f32.wgsl`). No workspace. Grid: one workgroup
// per (b, kv head, block of 64 keys) — `workgroups(B·Hkv·⌈S/64⌉)`, the first key blocks (the most
// queries) first, past 65535 through `flat_wg`; each walks the group's query heads in order and
// the query blocks from its diagonal on. Deterministic (fixed order, no atomics). Overwrites `dk`
// and `dv` (the first B·S·Hkv·Dh elements each).
// @grid workgroups(p.batch * p.kv_heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 1
// @requires p.head_dim <= FL_DH_MAX
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dv) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> d_o: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> delta: array<f32>;
@group(0) @binding(6) var<storage, read_write> dk: array<f32>;
@group(0) @binding(7) var<storage, read_write> dv: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;

fn fl_elem(op: u32, i: u32) -> f32 {
    switch op {
        case FL_Q: {
            return q[i];
        }
        case FL_K: {
            return k[i];
        }
        case FL_V: {
            return v[i];
        }
        default: {
            return d_o[i];
        }
    }
}

// dK (first) or dV (second) at key row `row`.
fn fl_store(second: bool, row: u32, col: u32, x: f32) {
    let at = ((fl_b * p.seq + row) * p.kv_heads + fl_kvh) * fl_head_dim() + col;
    if (second) {
        dv[at] = x;
    } else {
        dk[at] = x;
    }
}
//#include "lib/flash_f32.wgsl"
//#include "lib/flash_bwd.wgsl"

@compute @workgroup_size(WG)
fn flash_backward_dkdv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    flash_dkdv_body(flat_wg(wid, nwg), tid);
}

// --- KERNEL: flash_backward_dq ---
// Flash attention backward, query-major pass, f32: dQ[b,i,h,:] = p.scale Σ_{j≤i} dS_ij k_j,
// with dS recomputed as in `flash_backward_dkdv` (inputs alike; `delta` from
// `attention_fast_delta`). Grid: one workgroup per (b, h, block of 64 queries) —
// `workgroups(B·H·⌈S/64⌉)`, the blocks with the most keys first, past 65535 through `flat_wg`.
// Deterministic (fixed order, no atomics). Overwrites `dq` (the first B·S·H·Dh elements).
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 1
// @requires p.head_dim <= FL_DH_MAX
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> d_o: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> delta: array<f32>;
@group(0) @binding(6) var<storage, read_write> dq: array<f32>;
@group(0) @binding(7) var<uniform> p: Params;

fn fl_elem(op: u32, i: u32) -> f32 {
    switch op {
        case FL_Q: {
            return q[i];
        }
        case FL_K: {
            return k[i];
        }
        case FL_V: {
            return v[i];
        }
        default: {
            return d_o[i];
        }
    }
}

fn fl_store(second: bool, row: u32, col: u32, x: f32) {
    dq[((fl_b * p.seq + row) * p.heads + fl_h) * fl_head_dim() + col] = x;
}
//#include "lib/flash_f32.wgsl"
//#include "lib/flash_bwd.wgsl"

@compute @workgroup_size(WG)
fn flash_backward_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    flash_dq_body(flat_wg(wid, nwg), tid);
}

// --- KERNEL: flash_backward_dkdv16 ---
// `flash_backward_dkdv` with f16 operands (mixed precision's): `q`, `k`, `v`, `d_o` in the f16x4
// row layout (as `flash_forward16`'s; Dh % 4 == 0; `d_o` the upstream gradient as cast by
// `cast::cast_grad_f16x4`), `lse` and `delta` f32 (Δ from the f32 O and dO), dK and dV f32. S,
// P, dP and dS in f32; P and dS rounded to f16 for the two products (`lib/flash_f16.wgsl`).
// Tensor-core variant (head dim ≤ 128, 8 subgroups of 32): the four products on 16×16×16
// cooperative matrices, dK and dV in cooperative-matrix accumulators for the whole walk
// (`lib/flash_coop.wgsl`, `lib/flash_bwd.wgsl`); else the portable variant's f32 FMAs. The
// overflow check of loss scaling: any dS that is NaN, ±Inf or beyond ±65504 (which its f16
// rounding would clamp) sets `flag[0]` to 1 (never clears it), as `attention_ds_f16` does. Grid
// and order as `flash_backward_dkdv`. Deterministic. Overwrites `dk` and `dv` (the first
// B·S·Hkv·Dh elements each). Needs SHADER_F16.
// @grid workgroups(p.batch * p.kv_heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 4
// @requires p.head_dim <= FL_DH_MAX
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dv) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(flag) >= 1
//#include "lib/flash_dkdv16_io.wgsl"
//#include "lib/flash_f16.wgsl"
//#include "lib/flash_coop.wgsl"
//#include "lib/flash_bwd.wgsl"

@compute @workgroup_size(WG)
fn flash_backward_dkdv16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
    fl_sg = sg;
    if (nsg == 8u && fl_head_dim() <= 128u) {
        flash_dkdv_coop(w, tid);
    } else {
        flash_dkdv_body(w, tid);
    }
//#else
    flash_dkdv_body(w, tid);
//#endif
    if (fl_bad) {
        atomicOr(&flag[0], 1u);
    }
}

// --- KERNEL: flash_backward_dq16 ---
// `flash_backward_dq` with f16 operands (mixed precision's; inputs as `flash_backward_dkdv16`'s,
// dQ f32): dS rounded to f16 for dS·K. Tensor-core variant (head dim ≤ 128, 8 subgroups of 32):
// the three products on 16×16×16 cooperative matrices, dQ in cooperative-matrix accumulators;
// else the portable variant's f32 FMAs. The overflow flag is raised by `flash_backward_dkdv16`
// (the same dS). Grid and order as `flash_backward_dq`. Deterministic. Overwrites `dq` (the first
// B·S·H·Dh elements). Needs SHADER_F16.
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 4
// @requires p.head_dim <= FL_DH_MAX
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
//#include "lib/flash_dq16_io.wgsl"
//#include "lib/flash_f16.wgsl"
//#include "lib/flash_coop.wgsl"
//#include "lib/flash_bwd.wgsl"

@compute @workgroup_size(WG)
fn flash_backward_dq16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
    fl_sg = sg;
    if (nsg == 8u && fl_head_dim() <= 128u) {
        flash_dq_coop(w, tid);
    } else {
        flash_dq_body(w, tid);
    }
//#else
    flash_dq_body(w, tid);
//#endif
}

// --- KERNEL: flash_backward_dkdv16_tc ---
// `flash_backward_dkdv16` for head dims up to 64 on tensor cores, each of four subgroups owning
// 16 of the block's 64 keys (`lib/flash_sg.wgsl`): K and V in registers, Q, dO, lse and Δ staged
// per step of 32 queries into alternating buffers (one workgroup barrier a step), Sᵀ, dPᵀ, P and
// dS through the subgroup's own workgroup memory, dK and dV in cooperative-matrix accumulators.
// The same inputs, outputs, rounding (P and dS to f16 for the products, everything else f32),
// overflow flag and order of the walk as `flash_backward_dkdv16`. Needs tensor cores, subgroups
// of 32 (four to a workgroup of 128) and SUBGROUP_BARRIER; `flash_attention::backward16` runs
// it only there (else the sliced kernel), and a direct call on other subgroup sizes writes NaN.
// Deterministic. Overwrites `dk` and `dv`. Needs SHADER_F16.
// @grid workgroups(p.batch * p.kv_heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 4
// @requires p.head_dim <= 64
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dv) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(flag) >= 1
// @unchecked
//#include "lib/flash_dkdv16_io.wgsl"
//#include "lib/flash_bwd.wgsl"
//#include "lib/f16x4.wgsl"
//#include "lib/flash_sg.wgsl"
const FS_LDR: u32 = 36u;
const FS_HLEN: u32 = 1280u;
// What `flash_attention::WORKGROUP_BYTES_TC` says (with `fs_ld`).
const_assert 2304u * 8u + 64u * FS_LDR * 4u + FS_HLEN * 8u + 128u * 4u == 38400u;
// Every row the walk reads exists (S a multiple of 64, head dim 64): the rows are read without
// the bounds test (faster on the NVIDIA driver, the same values). A call with other values gets
// NaN.
override FL_EXACT: bool = false;

@compute @workgroup_size(FS_WG)
fn flash_backward_dkdv16_tc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let w = flat_wg(wid, nwg);
    var bad = false;
    let exact_ok = !FL_EXACT || (p.seq % 64u == 0u && p.head_dim == 64u);
    for (var fits = u32(nsg == FS_SG && exact_ok); fits == 1u; fits = 0u) {
        bad = fs_dkdv(w, tid, sg, lane);
    }
    let kbb = fl_key_block(w);
    if ((nsg != FS_SG || !exact_ok) && kbb.x < (p.seq + FL_T - 1u) / FL_T) {
        fl_set_head(kbb.y / p.kv_heads * p.heads + kbb.y % p.kv_heads * (p.heads / p.kv_heads));
        fs_poison(tid, false, kbb.x * FL_T);
        fs_poison(tid, true, kbb.x * FL_T);
    }
    if (bad) {
        atomicOr(&flag[0], 1u);
    }
}

// --- KERNEL: flash_backward_dq16_tc ---
// `flash_backward_dq16` for head dims up to 64 on tensor cores, each of four subgroups owning 16
// of the block's 64 queries (`lib/flash_sg.wgsl`): Q and dO in registers, K and V staged per
// step of 32 keys into alternating buffers (one workgroup barrier a step), S, dP and dS through
// the subgroup's own workgroup memory, dQ in cooperative-matrix accumulators. The same inputs,
// output, rounding and order as `flash_backward_dq16`. Needs tensor cores, subgroups of 32
// (four to a workgroup of 128) and SUBGROUP_BARRIER; `flash_attention::backward16` runs it only
// there, and a direct call on other subgroup sizes writes NaN. Deterministic. Overwrites `dq`.
// Needs SHADER_F16.
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 4
// @requires p.head_dim <= 64
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(d_o) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
// @unchecked
//#include "lib/flash_dq16_io.wgsl"
//#include "lib/flash_bwd.wgsl"
//#include "lib/f16x4.wgsl"
//#include "lib/flash_sg.wgsl"
const FS_LDR: u32 = 36u;
const FS_HLEN: u32 = 640u;
const_assert 2304u * 8u + 64u * FS_LDR * 4u + FS_HLEN * 8u <= 38400u;
// Every row the walk reads exists (S a multiple of 64, head dim 64): the rows are read without
// the bounds test (faster on the NVIDIA driver, the same values). A call with other values gets
// NaN.
override FL_EXACT: bool = false;

@compute @workgroup_size(FS_WG)
fn flash_backward_dq16_tc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let w = flat_wg(wid, nwg);
    let exact_ok = !FL_EXACT || (p.seq % 64u == 0u && p.head_dim == 64u);
    for (var fits = u32(nsg == FS_SG && exact_ok); fits == 1u; fits = 0u) {
        fs_dq(w, tid, sg, lane);
    }
    if ((nsg != FS_SG || !exact_ok) && w < p.batch * p.heads * ((p.seq + FL_T - 1u) / FL_T)) {
        let qbh = fl_query_block(w);
        fl_set_head(qbh.y);
        fs_poison(tid, false, qbh.x * FL_T);
    }
}
