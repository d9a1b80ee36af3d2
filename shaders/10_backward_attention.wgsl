// Backward of causal grouped-query attention (`attention_forward` in 05_attention.wgsl) and of
// RoPE (`rope_q` / `rope_k` in 04_rope.wgsl).
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

// 2π split so that k·TWO_PI_HI is exact for k < 2^16 (see 04_rope.wgsl).
const TWO_PI_HI: f32 = 6.28125;
const TWO_PI_LO: f32 = 0.0019353071795864769;
const INV_TWO_PI: f32 = 0.15915494309189535;

fn dq_bq(dh: u32) -> u32 {
    return min(DQ_BQ_MAX, DQ_TILE_FLOATS / dh);
}

fn dq_bk(dh: u32, bq: u32) -> u32 {
    return min(DQ_TILE_FLOATS / dh, PAIRS_MAX / bq);
}

fn dkv_b(dh: u32) -> u32 {
    return min(DKV_B_MAX, DKV_TILE_FLOATS / dh);
}

// (cos θ, sin θ) for θ = pos · base^(−2i/dh), exactly as `rope_q` / `rope_k` compute it.
fn rope_cos_sin(pos: u32, i: u32, dh: u32, base: f32) -> vec2<f32> {
    let inv_freq = exp2(-(f32(2u * i) / f32(dh)) * log2(base));
    let fp = f32(pos);
    let a = fp * inv_freq;
    let a_err = fma(fp, inv_freq, -a);
    let k = round(a * INV_TWO_PI);
    let r = ((a - k * TWO_PI_HI) - k * TWO_PI_LO) + a_err;
    return vec2<f32>(cos(r), sin(r));
}

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

// The dot product of row i of sq (which == 1) or sdo (which == 0) with row j of skv, over dims
// c, c + step, … < dh.
fn dq_dot(which: u32, i: u32, j: u32, c: u32, step: u32, dh: u32) -> f32 {
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

// spair[off + i·bk + j] = dq_dot(which, i, j) for i < nq, j < nk (row stride bk); each dot
// split over `min(WG / (nq·nk), dh)` invocations, summed in a fixed order, when there are fewer
// than WG pairs. Call in uniform control flow; ends with a barrier.
fn dq_pairs(tid: u32, which: u32, off: u32, nq: u32, nk: u32, bk: u32, dh: u32) {
    let npairs = nq * nk;
    if (npairs >= WG) {
        for (var pi = tid; pi < npairs; pi += WG) {
            let i = pi / nk;
            let j = pi - i * nk;
            spair[off + i * bk + j] = dq_dot(which, i, j, 0u, 1u, dh);
        }
    } else {
        let split = min(WG / npairs, dh);
        let pi = tid % npairs;
        let c = tid / npairs;
        var s = 0.0;
        if (c < split) {
            s = dq_dot(which, pi / nk, pi % nk, c, split, dh);
        }
        sh_red[tid] = s;
        workgroupBarrier();
        if (tid < npairs) {
            var t = 0.0;
            for (var c2 = 0u; c2 < split; c2++) {
                t += sh_red[c2 * npairs + tid];
            }
            spair[off + (tid / nk) * bk + tid % nk] = t;
        }
    }
    workgroupBarrier();
}

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
    let nqb = (seq + bq - 1u) / bq;
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads * nqb) {
        return;
    }
    let qb = w % nqb;
    let bh = w / nqb;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let kvh = h / (p.heads / p.kv_heads);
    let q0 = qb * bq;
    let nq = min(bq, seq - q0);
    let q_stride = p.heads * dh;
    let kv_stride = p.kv_heads * dh;
    let q_base = b * seq * q_stride + h * dh;
    let kv_base = b * seq * kv_stride + kvh * dh;
    let row_base = bh * seq + q0; // lse / Δ index of query q0

    // Q and dO of the block (its nq valid rows; loops below never read past them).
    for (var e = tid; e < nq * dh; e += WG) {
        let a = q_base + (q0 + e / dh) * q_stride + e % dh;
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
            let a = q_base + (q0 + i) * q_stride;
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
            skv[e] = v[kv_base + (k0 + e / dh) * kv_stride + e % dh];
        }
        workgroupBarrier();
        dq_pairs(tid, 0u, 0u, nq, nk, bk, dh); // dP
        for (var e = tid; e < nk * dh; e += WG) {
            skv[e] = k[kv_base + (k0 + e / dh) * kv_stride + e % dh];
        }
        workgroupBarrier();
        dq_pairs(tid, 1u, PAIRS_MAX, nq, nk, bk, dh); // q·k
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
            dq[q_base + (q0 + i) * q_stride + e - i * dh] = p.scale * acc[r];
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

// The dot product of query row i with key row j: sq·sk (which == 1) or sdo·sv (which == 0),
// over dims c, c + step, … < dh.
fn dkv_dot(which: u32, i: u32, j: u32, c: u32, step: u32, dh: u32) -> f32 {
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

// spair[off + i·bk + j] = dkv_dot(which, i, j) for i < nq, j < nk, as `dq_pairs`. Ends with a barrier.
fn dkv_pairs(tid: u32, which: u32, off: u32, nq: u32, nk: u32, bk: u32, dh: u32) {
    let npairs = nq * nk;
    if (npairs >= WG) {
        for (var pi = tid; pi < npairs; pi += WG) {
            let i = pi / nk;
            let j = pi - i * nk;
            spair[off + i * bk + j] = dkv_dot(which, i, j, 0u, 1u, dh);
        }
    } else {
        let split = min(WG / npairs, dh);
        let pi = tid % npairs;
        let c = tid / npairs;
        var s = 0.0;
        if (c < split) {
            s = dkv_dot(which, pi / nk, pi % nk, c, split, dh);
        }
        sh_red[tid] = s;
        workgroupBarrier();
        if (tid < npairs) {
            var t = 0.0;
            for (var c2 = 0u; c2 < split; c2++) {
                t += sh_red[c2 * npairs + tid];
            }
            spair[off + (tid / nk) * bk + tid % nk] = t;
        }
    }
    workgroupBarrier();
}

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
            dkv_pairs(tid, 1u, 0u, nq, nk, bk, dh); // q·k
            dkv_pairs(tid, 0u, PAIRS_MAX, nq, nk, bk, dh); // dP
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

// --- KERNEL: rope_q_backward ---
// Backward of `rope_q`, in place: `dq` `[B, S, H, Dh]` (Dh even) holds dL/d(rotated q) and
// becomes dL/d(q before rotation) — the transpose, i.e. inverse, rotation by −θ_i with the same
// θ_i = (s + p.pos_offset) · p.base^(−2i/Dh):
//     g[2i] = y0 cos θ + y1 sin θ,   g[2i+1] = −y0 sin θ + y1 cos θ.
// Grid `threads(B·S·H·Dh/2)`, one invocation per pair. Overwrites `dq` (in place).
// @grid threads(p.batch * p.seq * p.heads * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> dq: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_q_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let half = p.head_dim / 2u;
    if (idx >= p.batch * p.seq * p.heads * half) {
        return;
    }
    let i = idx % half;
    let row = idx / half;
    let s = (row / p.heads) % p.seq;
    let cs = rope_cos_sin(s + p.pos_offset, i, p.head_dim, p.base);
    let a = row * p.head_dim + 2u * i;
    let y0 = dq[a];
    let y1 = dq[a + 1u];
    dq[a] = y0 * cs.x + y1 * cs.y;
    dq[a + 1u] = y1 * cs.x - y0 * cs.y;
}

// --- KERNEL: rope_k_backward ---
// Backward of `rope_k`, in place: `dk` `[B, S, Hkv, Dh]` (Dh even), the inverse rotation as
// `rope_q_backward` with the key/value head count. Grid `threads(B·S·Hkv·Dh/2)`.
// Overwrites `dk` (in place).
// @grid threads(p.batch * p.seq * p.kv_heads * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> dk: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_k_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let half = p.head_dim / 2u;
    if (idx >= p.batch * p.seq * p.kv_heads * half) {
        return;
    }
    let i = idx % half;
    let row = idx / half;
    let s = (row / p.kv_heads) % p.seq;
    let cs = rope_cos_sin(s + p.pos_offset, i, p.head_dim, p.base);
    let a = row * p.head_dim + 2u * i;
    let y0 = dk[a];
    let y1 = dk[a + 1u];
    dk[a] = y0 * cs.x + y1 * cs.y;
    dk[a + 1u] = y1 * cs.x - y0 * cs.y;
}
