// Causal grouped-query attention: the training/prefill forward and the one-token decode.
//
// Layouts (row-major, batch first): Q and O `[B, S, H, Dh]`, K and V `[B, S, Hkv, Dh]`,
// log-sum-exp `lse [B, H, S]`. H is a multiple of Hkv; query head h reads kv head
// h / (H / Hkv). Causal: query s attends keys 0..=s. `scale` multiplies q·k (the trainer passes
// 1/√Dh). Head dim 1 ≤ Dh ≤ 256, any value (not only powers of two).
//
// Block sizes of `attention_forward` (chosen from Dh at run time, the same formula in the
// kernel and in its `@grid`), so that workgroup memory stays under 16 KiB for every Dh:
//     BQ = min(32, 1024 / Dh)            queries per workgroup (Q tile BQ·Dh ≤ 1024 floats)
//     BK = min(1536 / Dh, 512 / BQ)      keys per K/V tile (BK·Dh ≤ 1536, scores BQ·BK ≤ 512)
//     Dh:  16  32  64  100  128  256
//     BQ:  32  32  16   10    8    4
//     BK:  16  16  24   15   12    6
// Workgroup memory: Q tile 4 KiB + K/V tile 6 KiB + scores 2 KiB + row factors 128 B + the
// preamble's `sh_red` (1 KiB, reused as scratch for split dot products) = 13.1 KiB.

const HEAD_DIM_MAX: u32 = 256u;
const FWD_Q_FLOATS: u32 = 1024u;
const FWD_KV_FLOATS: u32 = 1536u;
const FWD_S_FLOATS: u32 = 512u;
const FWD_BQ_MAX: u32 = 32u;
// Outputs (query, dim) each invocation owns: FWD_Q_FLOATS / WG.
const FWD_PER_THREAD: u32 = 4u;

fn fwd_bq(dh: u32) -> u32 {
    return min(FWD_BQ_MAX, FWD_Q_FLOATS / dh);
}

fn fwd_bk(dh: u32, bq: u32) -> u32 {
    return min(FWD_KV_FLOATS / dh, FWD_S_FLOATS / bq);
}

// --- KERNEL: attention_forward ---
// Causal GQA attention with an online softmax over blocks of keys (flash-attention style).
// `q` `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]` (p.batch, p.seq, p.heads, p.kv_heads,
// p.head_dim); O[b,s,h,:] = Σ_{j≤s} softmax_j(p.scale · q·k_j) v_j and
// lse[b,h,s] = log Σ_{j≤s} exp(p.scale · q·k_j).
// Grid: one workgroup per (b, h, block of BQ queries) — `workgroups(B·H·⌈S/BQ⌉)`, past 65535
// through `flat_wg`. The workgroup keeps its Q block in workgroup memory and streams the keys
// 0..=(last query of the block) through it in tiles of BK rows: K tile → scores (each dot
// product split over several invocations when the tile has fewer than 256 pairs, summed in a
// fixed order) → running max/sum per query → V tile (same memory) → O update. Every K/V row is
// read once per query block, not once per query. Deterministic (fixed order, no atomics).
// Overwrites `o` (the first B·S·H·Dh elements) and `lse` (the first B·H·S elements).
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, min(FWD_BQ_MAX, FWD_Q_FLOATS / p.head_dim)))
// @requires p.head_dim >= 1
// @requires p.head_dim <= HEAD_DIM_MAX
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
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
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

var<workgroup> sq: array<f32, FWD_Q_FLOATS>;
var<workgroup> skv: array<f32, FWD_KV_FLOATS>;
var<workgroup> ss: array<f32, FWD_S_FLOATS>;
var<workgroup> srow: array<f32, FWD_BQ_MAX>;

@compute @workgroup_size(WG)
fn attention_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let dh = p.head_dim;
    let seq = p.seq;
    let bq = fwd_bq(dh);
    let bk = fwd_bk(dh, bq);
    let nqb = (seq + bq - 1u) / bq;
    let w = flat_wg(wid, nwg);
    // Whole workgroups past the end leave together (uniform).
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

    // The Q block (its nq valid rows; loops below never read past them).
    for (var e = tid; e < nq * dh; e += WG) {
        sq[e] = q[q_base + (q0 + e / dh) * q_stride + e % dh];
    }

    var acc: array<f32, FWD_PER_THREAD>;
    for (var r = 0u; r < FWD_PER_THREAD; r++) {
        acc[r] = 0.0;
    }
    // Running max and sum of query row `tid` (invocations tid < nq).
    var m_run = NEG_INF;
    var l_run = 0.0;

    // Causal: keys up to the last query of the block.
    let kend = q0 + nq;
    for (var k0 = 0u; k0 < kend; k0 += bk) {
        // Only the nq × nk pairs of this tile are computed (ragged tails cost nothing).
        let nk = min(bk, kend - k0);
        let npairs = nq * nk;
        // The previous tile's O update is done with skv and ss.
        workgroupBarrier();
        for (var e = tid; e < nk * dh; e += WG) {
            skv[e] = k[kv_base + (k0 + e / dh) * kv_stride + e % dh];
        }
        workgroupBarrier();

        // Scores ss[i·bk + j] = scale · q_i·k_j.
        if (npairs >= WG) {
            for (var pi = tid; pi < npairs; pi += WG) {
                let i = pi / nk;
                let j = pi - i * nk;
                let qo = i * dh;
                let ko = j * dh;
                var s = 0.0;
                for (var d = 0u; d < dh; d++) {
                    s = fma(sq[qo + d], skv[ko + d], s);
                }
                ss[i * bk + j] = s * p.scale;
            }
        } else {
            // `split` invocations per pair, each over dims c, c + split, …; summed in order.
            let split = min(WG / npairs, dh);
            let pi = tid % npairs;
            let c = tid / npairs;
            var s = 0.0;
            if (c < split) {
                let qo = (pi / nk) * dh;
                let ko = (pi % nk) * dh;
                for (var d = c; d < dh; d += split) {
                    s = fma(sq[qo + d], skv[ko + d], s);
                }
            }
            sh_red[tid] = s;
            workgroupBarrier();
            if (tid < npairs) {
                var t = 0.0;
                for (var c2 = 0u; c2 < split; c2++) {
                    t += sh_red[c2 * npairs + tid];
                }
                ss[(tid / nk) * bk + tid % nk] = t * p.scale;
            }
        }
        workgroupBarrier();

        // Online softmax, one invocation per query row; scores become probabilities
        // (0 where masked) and srow gets the factor that rescales the row's old O.
        if (tid < nq) {
            let qi = q0 + tid;
            // Causal: keys k0 + j ≤ qi, i.e. j < jn.
            let jn = min(nk, qi + 1u - min(k0, qi + 1u));
            var mt = NEG_INF;
            for (var j = 0u; j < jn; j++) {
                mt = max(mt, ss[tid * bk + j]);
            }
            let m_new = max(m_run, mt);
            let alpha = exp(m_run - m_new);
            var rs = 0.0;
            for (var j = 0u; j < nk; j++) {
                var pj = 0.0;
                if (j < jn) {
                    pj = exp(ss[tid * bk + j] - m_new);
                }
                ss[tid * bk + j] = pj;
                rs += pj;
            }
            l_run = l_run * alpha + rs;
            m_run = m_new;
            srow[tid] = alpha;
        }
        // The V tile into the same memory (the scores are done with K).
        for (var e = tid; e < nk * dh; e += WG) {
            skv[e] = v[kv_base + (k0 + e / dh) * kv_stride + e % dh];
        }
        workgroupBarrier();

        // O[i, d] = alpha_i · O[i, d] + Σ_j P[i, j] · V[j, d].
        for (var r = 0u; r < FWD_PER_THREAD; r++) {
            let e = tid + r * WG;
            if (e < nq * dh) {
                let i = e / dh;
                let d = e - i * dh;
                var a = acc[r] * srow[i];
                for (var j = 0u; j < nk; j++) {
                    a = fma(ss[i * bk + j], skv[j * dh + d], a);
                }
                acc[r] = a;
            }
        }
    }

    workgroupBarrier();
    if (tid < nq) {
        srow[tid] = 1.0 / l_run;
        lse[(b * p.heads + h) * seq + q0 + tid] = m_run + log(l_run);
    }
    workgroupBarrier();
    for (var r = 0u; r < FWD_PER_THREAD; r++) {
        let e = tid + r * WG;
        if (e < nq * dh) {
            let i = e / dh;
            o[q_base + (q0 + i) * q_stride + e - i * dh] = acc[r] * srow[i];
        }
    }
}

// --- KERNEL: attention_decode ---
// One new query per (b, h) against a key/value cache: `q` `[B, H, Dh]`, `k_cache`, `v_cache`
// `[B, T_max, Hkv, Dh]` (p.batch, p.heads, p.kv_heads, p.head_dim, p.t_max) of which the first
// `p.t` positions are valid (the new token's own key/value already written at t − 1);
// O[b,h,:] = Σ_{j<t} softmax_j(p.scale · q·k_j) v_j. No causal mask beyond t.
// Grid: one workgroup per (b, h) — `workgroups(B·H)`, past 65535 through `flat_wg`. The keys go
// by in chunks of 256 (one score per invocation), an online softmax across chunks with the
// workgroup reductions, then invocation d < Dh accumulates output dim d over the chunk (V rows
// read coalesced). Deterministic (fixed order, no atomics). Overwrites `o` (the first B·H·Dh
// elements).
// @grid workgroups(p.batch * p.heads)
// @requires p.head_dim >= 1
// @requires p.head_dim <= HEAD_DIM_MAX
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires p.t >= 1
// @requires p.t <= p.t_max
// @requires len(q) >= p.batch * p.heads * p.head_dim
// @requires len(k_cache) >= p.batch * p.t_max * p.kv_heads * p.head_dim
// @requires len(v_cache) >= p.batch * p.t_max * p.kv_heads * p.head_dim
// @requires len(o) >= p.batch * p.heads * p.head_dim
struct Params {
    batch: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    t_max: u32,
    t: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> sqd: array<f32, HEAD_DIM_MAX>;
var<workgroup> sp: array<f32, WG>;

@compute @workgroup_size(WG)
fn attention_decode(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads) {
        return;
    }
    let dh = p.head_dim;
    let h = w % p.heads;
    let b = w / p.heads;
    let kvh = h / (p.heads / p.kv_heads);
    let stride = p.kv_heads * dh;
    let base = b * p.t_max * stride + kvh * dh;

    if (tid < dh) {
        sqd[tid] = q[w * dh + tid];
    }
    workgroupBarrier();

    var m_run = NEG_INF;
    var l_run = 0.0;
    var acc = 0.0;
    for (var c0 = 0u; c0 < p.t; c0 += WG) {
        let j = c0 + tid;
        var s = NEG_INF;
        if (j < p.t) {
            let ko = base + j * stride;
            var dot = 0.0;
            for (var d = 0u; d < dh; d++) {
                dot = fma(sqd[d], k_cache[ko + d], dot);
            }
            s = dot * p.scale;
        }
        let m_new = max(m_run, wg_reduce_max(tid, s));
        var pj = 0.0;
        if (j < p.t) {
            pj = exp(s - m_new);
        }
        let alpha = exp(m_run - m_new);
        l_run = l_run * alpha + wg_reduce_sum(tid, pj);
        m_run = m_new;
        sp[tid] = pj;
        workgroupBarrier();
        if (tid < dh) {
            let nk = min(WG, p.t - c0);
            var a = acc * alpha;
            for (var jj = 0u; jj < nk; jj++) {
                a = fma(sp[jj], v_cache[base + (c0 + jj) * stride + tid], a);
            }
            acc = a;
        }
        workgroupBarrier();
    }
    if (tid < dh) {
        o[w * dh + tid] = acc / l_run;
    }
}
