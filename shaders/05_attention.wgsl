// Causal grouped-query attention: the training/prefill forward and the one-token decode.
// Two training forwards: the streaming `attention_forward` (flash-attention style, no
// workspace: the small-memory path) and the fast path `attention_fast_scores` →
// `attention_fast_softmax` → `attention_fast_pv`, batched GEMMs over a materialised probability
// workspace `[B, H, S, S]` (described in the file preamble below; `kernels::fast_attention`
// records the sequence), whose f16-operand form runs its products on tensor cores
// (`attention_scores_f16`, `attention_pv_f16`: `lib/attention_f16.wgsl`).
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

// The fast path (`attention_fast_*` kernels; `kernels::fast_attention` records the sequence):
// its tiles, the row contract of P and the products are in `lib/attention_tiles.wgsl`, shared
// with the backward.
//#include "lib/attention_tiles.wgsl"

// The flash-attention kernels (`flash_forward`, `flash_forward16`): blocks, staging, the
// portable products and the row layout, shared with the backward.
//#include "lib/flash.wgsl"

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

// The dot products of `lib/attention_blocks.wgsl`: query row i of sq with key row j of skv, stored
// scaled into ss.
fn pair_dot(which: u32, i: u32, j: u32, c: u32, step: u32, dh: u32) -> f32 {
    var s = 0.0;
    for (var d = c; d < dh; d += step) {
        s = fma(sq[i * dh + d], skv[j * dh + d], s);
    }
    return s;
}

fn pair_store(at: u32, v: f32) {
    ss[at] = v * p.scale;
}
//#include "lib/attention_blocks.wgsl"

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
    let blk = query_block(flat_wg(wid, nwg), bq, seq, p.heads, p.kv_heads, dh);
    // Whole workgroups past the end leave together (uniform).
    if (blk.bh >= p.batch * p.heads) {
        return;
    }
    let q0 = blk.q0;
    let nq = blk.nq;

    // The Q block (its nq valid rows; loops below never read past them).
    for (var e = tid; e < nq * dh; e += WG) {
        sq[e] = q[blk.q_base + (q0 + e / dh) * blk.q_stride + e % dh];
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
        // The previous tile's O update is done with skv and ss.
        workgroupBarrier();
        for (var e = tid; e < nk * dh; e += WG) {
            skv[e] = k[blk.kv_base + (k0 + e / dh) * blk.kv_stride + e % dh];
        }
        workgroupBarrier();

        // Scores ss[i·bk + j] = scale · q_i·k_j (ends with a barrier).
        pair_dots(tid, 0u, 0u, nq, nk, bk, dh);

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
            skv[e] = v[blk.kv_base + (k0 + e / dh) * blk.kv_stride + e % dh];
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
        lse[blk.bh * seq + q0 + tid] = m_run + log(l_run);
    }
    workgroupBarrier();
    for (var r = 0u; r < FWD_PER_THREAD; r++) {
        let e = tid + r * WG;
        if (e < nq * dh) {
            let i = e / dh;
            o[blk.q_base + (q0 + i) * blk.q_stride + e - i * dh] = acc[r] * srow[i];
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

// --- KERNEL: attention_fast_scores ---
// Fast path, forward step 1: the causal scores S = scale · Q·Kᵀ of every (b, h), into the
// probability workspace. `q` `[B, S, H, Dh]` and `k` `[B, S, Hkv, Dh]` read in place (row
// strides H·Dh and Hkv·Dh; head h reads kv head h / (H / Hkv)); `probs` `[B, H, S, S]`.
// Grid: one workgroup per (b, h, lower-triangle 64×64 tile) — `workgroups(B·H·T(T+1)/2)` with
// T = ⌈S/64⌉, past 65535 through `flat_wg`; tiles above the diagonal are never launched. Each
// workgroup: a 64×64×Dh product (contraction over Dh in steps of 16, fixed order).
// Overwrites `probs[b, h, s, j]` for j ≤ s (entries above the diagonal are left alone: the
// softmax writes them); any Dh ≥ 1.
// @grid workgroups(p.batch * p.heads * (ceil_div(p.seq, FT_TILE) * (ceil_div(p.seq, FT_TILE) + 1) / 2))
// @requires p.head_dim >= 1
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
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
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(q[i.x], q[i.y], q[i.z], q[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(k[i.x], k[i.y], k[i.z], k[i.w]); }

@compute @workgroup_size(WG)
fn attention_fast_scores(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let ntri = score_tiles(seq);
    let w = flat_wg(wid, nwg);
    // Whole workgroups past the end leave together (uniform).
    if (w >= p.batch * p.heads * ntri) {
        return;
    }
    let t = score_tile(w, tid, ntri, p.heads, p.kv_heads);
    score_product(tid, t, seq, p.heads, p.kv_heads, p.head_dim);
    let p_base = t.bh * seq * seq;
    for (var i = 0u; i < 4u; i++) {
        let r = t.r0 + i;
        for (var j = 0u; j < 4u; j++) {
            let c = t.c0 + j;
            // c ≤ r < S: the causal part only (c ≤ r also keeps c inside the row).
            if (r < seq && c <= r) {
                probs[p_base + r * seq + c] = p.scale * ft_acc[i][j];
            }
        }
    }
}

// --- KERNEL: attention_fast_softmax ---
// Fast path, forward step 2: each causal row of the scores becomes probabilities, in place, and
// its log-sum-exp is written like `attention_forward`'s. `probs` `[B, H, S, S]` holding the
// scores of `attention_fast_scores`; `lse` `[B, H, S]`. Row s: m = max_{j≤s} x_j,
// l = Σ_{j≤s} exp(x_j − m), P_j = exp(x_j − m) / l for j ≤ s, 0 for s < j < min(S, 64·(⌊s/64⌋+1))
// (the rest of its 64-key tile, which the products read); lse = m + log l.
// Grid: one workgroup per row — `workgroups(B·H·S)`, past 65535 through `flat_wg`; the row is
// strided over the 256 invocations, max and sum through the preamble's fixed-order workgroup
// reductions (deterministic). Overwrites `probs[b, h, s, j]` for j < min(S, 64·(⌊s/64⌋+1)) and
// `lse` (the first B·H·S elements).
// @grid workgroups(p.batch * p.heads * p.seq)
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(lse) >= p.batch * p.heads * p.seq
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
}
@group(0) @binding(0) var<storage, read_write> probs: array<f32>;
@group(0) @binding(1) var<storage, read_write> lse: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn attention_fast_softmax(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads * seq) {
        return;
    }
    // Row w = (b·H + h)·S + s: the lse index too.
    let s = w % seq;
    let base = w * seq;
    let n = s + 1u;
    let tile_end = min(seq, (s / FT_TILE + 1u) * FT_TILE);
    // Each invocation touches the same elements j = tid, tid + 256, … in every pass.
    var m = NEG_INF;
    for (var j = tid; j < n; j += WG) {
        m = max(m, probs[base + j]);
    }
    m = wg_reduce_max(tid, m);
    var l = 0.0;
    for (var j = tid; j < n; j += WG) {
        l += exp(probs[base + j] - m);
    }
    l = wg_reduce_sum(tid, l);
    for (var j = tid; j < tile_end; j += WG) {
        var pj = 0.0;
        if (j < n) {
            pj = exp(probs[base + j] - m) / l;
        }
        probs[base + j] = pj;
    }
    if (tid == 0u) {
        lse[w] = m + log(l);
    }
}

// --- KERNEL: attention_fast_pv ---
// Fast path, forward step 3 (and the backward's dQ): Y = alpha · P·X per (b, h) over the
// causal part. `probs` `[B, H, S, S]` (P, or dS in the backward, with the row contract of the
// file preamble), `x` `[B, S, Hkv, Dh]` (V, or K), `y` `[B, S, H, Dh]` (O, or dQ), read and
// written in place; head h reads kv head h / (H / Hkv). Y[b,s,h,:] = alpha Σ_j P[b,h,s,j] X[b,j,kvh,:]
// with the contraction over j < min(S, 64·(⌊s/64⌋+1)): only key tiles 0 … (query tile) are
// read, the tail of the diagonal tile being zeros of P.
// Grid: one workgroup per (query tile, b, h, 64-column slice of Dh) — `workgroups(T·B·H·⌈Dh/64⌉)`,
// T = ⌈S/64⌉, past 65535 through `flat_wg`; the longest contractions (the last query tiles)
// get the first workgroups, for balance. Each output is one fixed chain of FMAs over j
// (deterministic). Overwrites `y` (the first B·S·H·Dh elements).
// @grid workgroups(ceil_div(p.seq, FT_TILE) * p.batch * p.heads * ceil_div(p.head_dim, FT_TILE))
// @requires p.head_dim >= 1
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(x) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(y) >= p.batch * p.seq * p.heads * p.head_dim
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
fn attention_fast_pv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let dh = p.head_dim;
    let nt = (seq + FT_TILE - 1u) / FT_TILE;
    // (query tile from the last, b·H + h, column slice)
    let ct = column_tile(flat_wg(wid, nwg), p.batch, p.heads, dh);
    // Whole workgroups past the end leave together (uniform).
    if (ct.x >= nt) {
        return;
    }
    let h = ct.y % p.heads;
    let b = ct.y / p.heads;
    let kvh = h / (p.heads / p.kv_heads);
    let q_stride = p.heads * dh;
    let kv_stride = p.kv_heads * dh;
    let m0 = (nt - 1u - ct.x) * FT_TILE;
    let n0 = ct.z * FT_TILE;
    // Causal: keys before the end of the query tile (≥ 1).
    let kend = min(seq, m0 + FT_TILE);
    let sa = ft_slot_k(tid, m0, seq, seq, kend);
    let sb = ft_slot_r(tid, n0, dh, kv_stride, kend);
    ft_product(tid, sa, sb, ct.y * seq * seq, b * seq * kv_stride + kvh * dh, kend);
    ft_store(tid, m0, n0, seq, dh, b * seq * q_stride + h * dh, q_stride, p.alpha);
}

// --- KERNEL: attention_scores_f16 ---
// The causal scores S = scale · Q·Kᵀ of every (b, h) on tensor cores, into the probability
// workspace of `kernels::fast_attention` (f32, for the softmax). `q` `[B, S, H, Dh]` and `k`
// `[B, S, Hkv, Dh]` f16 (Dh % 4 == 0, so rows are whole vec4s), read in place; head h reads kv
// head h / (H / Hkv); `probs` `[B, H, S, S]` f32. Only lower-triangle 64×64 tiles are computed
// (fully masked tiles are skipped); a diagonal tile is written whole (the softmax then replaces
// its entries above the diagonal). Overwrites `probs[b, h, s, j]` for j in
// the tiles up to the diagonal (j < min(S, 64·(⌊s/64⌋+1))). Grid: one workgroup per (b, h,
// lower-triangle tile), 1-D, 2-D past the device's limit. Needs SHADER_F16; tensor cores for
// full tiles with S % 4 == 0.
// @grid workgroups(p.batch * p.heads * (ceil_div(p.seq, ATT_T) * (ceil_div(p.seq, ATT_T) + 1) / 2))
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
struct ScoreParams {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;
@group(0) @binding(3) var<uniform> p: ScoreParams;
const BM: u32 = ATT_T;
const BN: u32 = ATT_T;
const WGS: u32 = ATT_WG;
const A_KC: bool = true;
const B_KC: bool = true;
// Bases and row strides (in vec4s) of the (b, h) slices of Q and K, and P's first element.
var<private> a_base: u32;
var<private> a_stride: u32;
var<private> b_base: u32;
var<private> b_stride: u32;
var<private> p_base: u32;

fn load_a(row: u32, kc: u32) -> vec4<f32> {
    let qd = kc / 4u;
    let ok = row < dim_m && qd < dim_aq;
    return select(vec4<f32>(0.0), vec4<f32>(q[select(0u, a_base + row * a_stride + qd, ok)]), ok);
}

fn load_b(col: u32, kc: u32) -> vec4<f32> {
    let qd = kc / 4u;
    let ok = col < dim_n && qd < dim_aq;
    return select(vec4<f32>(0.0), vec4<f32>(k[select(0u, b_base + col * b_stride + qd, ok)]), ok);
}

fn store_out(row: u32, col: u32, v: f32) {
    if (row < dim_m && col < dim_n) {
        probs[p_base + row * dim_n + col] = p.scale * v;
    }
}

//#if coop
const_assert CM_BYTES + FB_BYTES <= WG_MEMORY_MAX;

// The tensor-core path's loads: the same elements as f16.
fn load_a16(row: u32, kc: u32) -> vec4<f16> {
    let qd = kc / 4u;
    let ok = row < dim_m && qd < dim_aq;
    return select(vec4<f16>(0.0h), q[select(0u, a_base + row * a_stride + qd, ok)], ok);
}

fn load_b16(col: u32, kc: u32) -> vec4<f16> {
    let qd = kc / 4u;
    let ok = col < dim_n && qd < dim_aq;
    return select(vec4<f16>(0.0h), k[select(0u, b_base + col * b_stride + qd, ok)], ok);
}

fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = p_base + row * dim_n + col;
    let ld = dim_n;
    coopStoreT(p.scale * c, &probs[at], ld);
}
//#endif

//#include "lib/attention_f16.wgsl"

@compute @workgroup_size(WGS)
fn attention_scores_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let seq = p.seq;
    let nt = (seq + ATT_T - 1u) / ATT_T;
    let ntri = nt * (nt + 1u) / 2u;
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads * ntri) {
        return;
    }
    let bh = w / ntri;
    let ij = triangle(w - bh * ntri);
    let h = bh % p.heads;
    let bb = bh / p.heads;
    let kvh = h / (p.heads / p.kv_heads);
    let dq = p.head_dim / 4u;
    dim_m = seq;
    dim_n = seq;
    dim_aq = dq;
    a_stride = p.heads * dq;
    b_stride = p.kv_heads * dq;
    a_base = bb * seq * a_stride + h * dq;
    b_base = bb * seq * b_stride + kvh * dq;
    p_base = bh * seq * seq;
    let m0 = ij.x * ATT_T;
    let n0 = ij.y * ATT_T;
//#if coop
    if (m0 + ATT_T <= seq && seq % 4u == 0u) {
        cm_block(tid, sg, nsg, m0, n0, 0u, dq * 4u);
        return;
    }
//#endif
    fb_block(tid, m0, n0, 0u, dq * 4u);
}

// --- KERNEL: attention_pv_f16 ---
// Y = alpha · P·X per (b, h) over the causal part on tensor cores: O = P·V (alpha 1) and the
// backward's dQ = scale · dS·K. `probs` `[B, H, S, S]` f32 (P, or dS, with the fast path's row
// contract; rounded to f16 as it is read: the fused cast), `x` `[B, S, Hkv, Dh]` f16 (V, or K;
// Dh % 4 == 0), `y` `[B, S, H, Dh]` f32 (O, or dQ); head h reads kv head h / (H / Hkv).
// Y[b,s,h,:] = alpha Σ_j P[b,h,s,j] X[b,j,kvh,:] over j < min(S, 64·(⌊s/64⌋+1)): key tiles past
// the diagonal are skipped. Overwrites `y` (the first B·S·H·Dh elements). Grid: one workgroup
// per (query tile, b, h, 64-column slice of Dh), 1-D (longest contractions first), 2-D past the
// device's limit. Needs SHADER_F16; tensor cores for full 64×64 output tiles.
// @grid workgroups(ceil_div(p.seq, ATT_T) * p.batch * p.heads * ceil_div(p.head_dim, ATT_T))
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(x) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(y) >= p.batch * p.seq * p.heads * p.head_dim
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
const A_KC: bool = true;
const B_KC: bool = false;
var<private> p_base: u32;
var<private> kend: u32;
var<private> b_base: u32;
var<private> b_stride: u32;
var<private> y_base: u32;
var<private> y_stride: u32;

// A(row, kc) = P[s = row, j = kc … kc+3].
fn raw_a(row: u32, kc: u32) -> vec4<f32> {
    let ok = in4(kc, kend) & vec4<bool>(row < dim_m);
    let at = idx4(p_base + min(row, dim_m - 1u) * dim_m, kc, kend);
    return select(vec4<f32>(0.0), vec4<f32>(probs[at.x], probs[at.y], probs[at.z], probs[at.w]), ok);
}

fn load_a(row: u32, kc: u32) -> vec4<f32> {
    return as_f16(raw_a(row, kc));
}

// B(kc, col) = X[b, j = kc, kvh, col … col+3].
fn load_b(col: u32, kc: u32) -> vec4<f32> {
    let qd = col / 4u;
    let ok = kc < kend && qd < dim_bq;
    return select(vec4<f32>(0.0), vec4<f32>(x[select(0u, b_base + kc * b_stride + qd, ok)]), ok);
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
    let qd = col / 4u;
    let ok = kc < kend && qd < dim_bq;
    return select(vec4<f16>(0.0h), x[select(0u, b_base + kc * b_stride + qd, ok)], ok);
}

fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = y_base + row * y_stride + col;
    let ld = y_stride;
    coopStoreT(p.alpha * c, &y[at], ld);
}
//#endif

//#include "lib/attention_f16.wgsl"

@compute @workgroup_size(WGS)
fn attention_pv_f16(
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
    let per_tile = p.batch * p.heads * ncol;
    let w = flat_wg(wid, nwg);
    if (w >= nt * per_tile) {
        return;
    }
    let it = nt - 1u - w / per_tile;
    let rest = w % per_tile;
    let bh = rest / ncol;
    let ct = rest % ncol;
    let h = bh % p.heads;
    let bb = bh / p.heads;
    let kvh = h / (p.heads / p.kv_heads);
    dim_m = seq;
    dim_n = dh;
    dim_bq = dh / 4u;
    p_base = bh * seq * seq;
    b_stride = p.kv_heads * dim_bq;
    b_base = bb * seq * b_stride + kvh * dim_bq;
    y_stride = p.heads * dh;
    y_base = bb * seq * y_stride + h * dh;
    let m0 = it * ATT_T;
    let n0 = ct * ATT_T;
    // Causal: keys before the end of the query tile.
    let ke = min(seq, m0 + ATT_T);
    kend = ke;
//#if coop
    if (m0 + ATT_T <= seq && n0 + ATT_T <= dh) {
        cm_block(tid, sg, nsg, m0, n0, 0u, ke);
        return;
    }
//#endif
    fb_block(tid, m0, n0, 0u, ke);
}

// --- KERNEL: flash_forward ---
// Fused causal GQA attention (flash attention), f32: O and lse as `attention_forward` computes
// them (`q` `[B, S, H, Dh]`, `k`, `v` `[B, S, Hkv, Dh]`, `o` `[B, S, H, Dh]`, `lse` `[B, H, S]`,
// head h reads kv head h / (H / Hkv), O[b,s,h,:] = Σ_{j≤s} softmax_j(p.scale · q·k_j) v_j,
// lse[b,h,s] = log Σ_{j≤s} exp(p.scale · q·k_j)), any 1 ≤ Dh ≤ 256, in blocks of 64 queries ×
// 64 keys with the online softmax of `lib/flash_fwd.wgsl`, f32 FMAs (`lib/flash_f32.wgsl`).
// No workspace: memory O(B·H·S). Grid: one workgroup per (b, h, block of 64 queries) —
// `workgroups(B·H·⌈S/64⌉)`, the blocks with the most keys first, past 65535 through `flat_wg`.
// Deterministic (fixed order, no atomics). Overwrites `o` (the first B·S·H·Dh elements) and
// `lse` (the first B·H·S elements).
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 1
// @requires p.head_dim <= FL_DH_MAX
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

fn fl_elem(op: u32, i: u32) -> f32 {
    switch op {
        case FL_Q: {
            return q[i];
        }
        case FL_K: {
            return k[i];
        }
        default: {
            return v[i];
        }
    }
}

fn fl_store(second: bool, row: u32, col: u32, x: f32) {
    o[((fl_b * p.seq + row) * p.heads + fl_h) * fl_head_dim() + col] = x;
}
//#include "lib/flash_f32.wgsl"
//#include "lib/flash_fwd.wgsl"

@compute @workgroup_size(WG)
fn flash_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    flash_forward_body(flat_wg(wid, nwg), tid, false);
}

// --- KERNEL: flash_forward16 ---
// `flash_forward` with f16 operands (mixed precision's): `q` `[B, S, H, Dh]`, `k`, `v`
// `[B, S, Hkv, Dh]` in the f16x4 row layout (`ops::cast_f16x4` of the f32 tensors as
// `[B·S, H·Dh]` / `[B·S, Hkv·Dh]` matrices; Dh % 4 == 0), O `[B, S, H, Dh]` and lse `[B, H, S]`
// f32 as `flash_forward`'s. Scores, softmax, lse and O accumulate in f32; P is rounded to f16 for
// P·V (`lib/flash_f16.wgsl`). Tensor-core variant: Q·Kᵀ and P·V on 16×16×16 cooperative
// matrices (`lib/flash_coop.wgsl`; the scores stored to workgroup memory for the softmax, each
// P·V block stored and folded into the row owners' O with the rescale), where the adapter has
// them and runs 8 subgroups of 32; else the portable variant's f32 FMAs on the same operands.
// Grid and order as `flash_forward`. Deterministic. Overwrites `o` (the first B·S·H·Dh elements),
// its f16 copy `o16` (in the f16x4 row layout of `[B·S, H·Dh]`: what `cast::cast_f16x4` makes
// of `o`) and `lse` (the first B·H·S elements). Needs SHADER_F16.
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 4
// @requires p.head_dim <= FL_DH_MAX
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(o16) * 4 >= p.batch * p.seq * p.heads * p.head_dim
//#include "lib/flash_fwd16_io.wgsl"
//#include "lib/flash_f16.wgsl"
//#include "lib/flash_coop.wgsl"
//#include "lib/flash_fwd.wgsl"

@compute @workgroup_size(WG)
fn flash_forward16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
//#if coop
    fl_sg = sg;
    flash_forward_body(flat_wg(wid, nwg), tid, nsg == 8u);
//#else
    flash_forward_body(flat_wg(wid, nwg), tid, false);
//#endif
}

// --- KERNEL: flash_forward16_tc ---
// `flash_forward16` for head dims up to 64 on tensor cores (`lib/flash_fwd_tc.wgsl`): Q in
// registers, K and V staged whole per step of 32 keys into alternating buffers, O in
// cooperative-matrix accumulators rescaled only when a row's maximum passes its reference by
// more than e^8. The same inputs and outputs; P is rounded to f16 relative to that reference
// (≤ e^8) instead of the running maximum. Its tensor-core form needs eight subgroups (subgroups
// of 32) and 32,800 bytes of workgroup memory; `flash_attention::forward16` runs it only where
// that form runs (else `flash_forward16`), and its portable form is `flash_forward16`'s.
// Deterministic. Overwrites `o` (the first B·S·H·Dh elements), `o16` and `lse` (the first
// B·H·S), as `flash_forward16`. Needs SHADER_F16.
// @grid workgroups(p.batch * p.heads * ceil_div(p.seq, FL_T))
// @requires p.head_dim >= 4
// @requires p.head_dim <= 64
// @requires p.head_dim % 4 == 0
// @requires p.kv_heads >= 1
// @requires p.heads % p.kv_heads == 0
// @requires len(q) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) * 4 >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(o) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(lse) >= p.batch * p.heads * p.seq
// @requires len(o16) * 4 >= p.batch * p.seq * p.heads * p.head_dim
// @unchecked
//#include "lib/flash_fwd16_io.wgsl"
//#include "lib/flash_f16.wgsl"
//#include "lib/flash_coop.wgsl"
//#include "lib/flash_fwd.wgsl"
//#include "lib/flash_fwd_tc.wgsl"

// Every row the walk reads exists (S a multiple of 64, head dim 64): the rows are read without
// the bounds test (faster on the NVIDIA driver, the same values). A call with other values gets
// NaN from the tensor-core form; the portable form ignores it.
override FL_EXACT: bool = false;

@compute @workgroup_size(WG)
fn flash_forward16_tc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
    let exact_ok = !FL_EXACT || (p.seq % 64u == 0u && p.head_dim == 64u);
    for (var fits = u32(nsg == 8u && exact_ok); fits == 1u; fits = 0u) {
        fw_forward(w, tid, sg, lane);
    }
    if (nsg != 8u || !exact_ok) {
        fw_poison(w, tid);
    }
//#else
    flash_forward_body(w, tid, false);
//#endif
}
