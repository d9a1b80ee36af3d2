// The bodies of the flash-attention backwards (`flash_backward_dkdv*`, `flash_backward_dq*` in
// 10_backward_attention.wgsl), on the machinery of `lib/flash.wgsl`: FlashAttention-2's
// backward without atomics, as two passes that each own their outputs.
//
// Both recompute, per (query block, key block) pair, the 64 × 64 tile of
//   S = Q·Kᵀ (the score product), P = exp(scale·S − lse) (0 where masked),
//   dP = dO·Vᵀ (the score product again), dS = P ⊙ (dP − Δ)
// in f32, held by the score-tile owners (`fl_p`, `fl_ds`; lse and Δ of the block's 64 queries
// staged in `fl_lse`, `fl_delta`), then:
//   key-major (`flash_dkdv_body`): a workgroup owns 64 keys of one (b, kv head) and walks, for
//       each query head of its group in order, the query blocks from the diagonal to the end:
//       dV += Pᵀ·dO and dK += dSᵀ·Q in the row owners' registers (key rows), P and dS staged in
//       turn through `fl_ps`; at the end dK·scale and dV are written;
//   query-major (`flash_dq_body`): a workgroup owns 64 queries of one (b, h) and walks the key
//       blocks 0 … its own: dQ += dS·K; at the end dQ·scale is written.
// Every sum runs in a fixed order, so the bits repeat run to run. `fl_bad` records whether a
// dS is NaN, ±Inf or beyond f16's range (the f16 kernels round dS to f16 for their products:
// loss scaling must then skip the step).
//
// Hooks of the including kernel, beyond `lib/flash.wgsl`'s:
//   fn fl_bwd_scores(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, dh: u32, coop: bool)
//       the unscaled score product into `fl_s`, in uniform control flow;
//   fn fl_ps_put4(i: u32, j: u32, v: vec4<f32>)   P or dS [i][j … j + 3];
//   the bindings `lse` and `delta` (f32, [B, H, S]).

const FL_F16_MAX: f32 = 65504.0;

var<workgroup> fl_lse: array<f32, FL_T>;
var<workgroup> fl_delta: array<f32, FL_T>;
// P and dS of the score tile.
var<private> fl_p: array<vec4<f32>, 4>;
var<private> fl_ds: array<vec4<f32>, 4>;
// Whether some dS was NaN, ±Inf or beyond ±65504.
var<private> fl_bad: bool;

// The tile's pairs (query q0 + 4ty + a, keys k0 + 4tx …) that are causal, with the query in the
// sequence.
fn fl_causal4(tid: u32, q0: u32, k0: u32, a: u32, seq: u32) -> vec4<bool> {
    let i = q0 + 4u * (tid / 16u) + a;
    let j = vec4<u32>(k0 + 4u * (tid % 16u)) + vec4<u32>(0u, 1u, 2u, 3u);
    return (j <= vec4<u32>(i)) & vec4<bool>(i < seq);
}

// Row a of the tile: P from the scores in fl_s[a] and the row's lse.
fn fl_p_row(tid: u32, q0: u32, k0: u32, a: u32, seq: u32, scale: f32) -> vec4<f32> {
    let lse_a = fl_lse[4u * (tid / 16u) + a];
    let e = exp(vec4<f32>(scale) * fl_s[a] - vec4<f32>(lse_a));
    return select(vec4<f32>(0.0), e, fl_causal4(tid, q0, k0, a, seq));
}

// Row a of the tile: dS = P ⊙ (dP − Δ) with dP in fl_s[a]; records a dS beyond f16's range.
fn fl_ds_row(tid: u32, a: u32) -> vec4<f32> {
    let d = fl_p[a] * (fl_s[a] - vec4<f32>(fl_delta[4u * (tid / 16u) + a]));
    // NaN and ±Inf have their exponent bits all ones (`d != d` may be folded away).
    let special = (bitcast<vec4<u32>>(d) & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u);
    fl_bad = fl_bad | any(special) | any(abs(d) > vec4<f32>(FL_F16_MAX));
    return d;
}

// The P and dS tiles of (query block q0, key block k0) of the current (b, h).
fn fl_bwd_block(tid: u32, q0: u32, k0: u32, dh: u32, seq: u32, coop: bool) {
    // Earlier readers of fl_lse / fl_delta passed a barrier since (the values' staging).
    if (tid < FL_T) {
        let r = q0 + tid;
        let at = (fl_b * p.heads + fl_h) * seq + min(r, seq - 1u);
        fl_lse[tid] = select(0.0, lse[at], r < seq);
        fl_delta[tid] = select(0.0, delta[at], r < seq);
    }
    fl_bwd_scores(tid, FL_Q, q0, FL_K, k0, dh, coop);
    let scale = p.scale;
    fl_p[0] = fl_p_row(tid, q0, k0, 0u, seq, scale);
    fl_p[1] = fl_p_row(tid, q0, k0, 1u, seq, scale);
    fl_p[2] = fl_p_row(tid, q0, k0, 2u, seq, scale);
    fl_p[3] = fl_p_row(tid, q0, k0, 3u, seq, scale);
    fl_bwd_scores(tid, FL_DO, q0, FL_V, k0, dh, coop);
    fl_ds[0] = fl_ds_row(tid, 0u);
    fl_ds[1] = fl_ds_row(tid, 1u);
    fl_ds[2] = fl_ds_row(tid, 2u);
    fl_ds[3] = fl_ds_row(tid, 3u);
}

// Writes the tile (P when `ds` is false, else dS) into `fl_ps` after a barrier (earlier readers
// are done); the values' first staging barrier makes it visible.
fn fl_put_tile(tid: u32, ds: bool) {
    workgroupBarrier();
    let i = 4u * (tid / 16u);
    let j = 4u * (tid % 16u);
    if (ds) {
        fl_ps_put4(i, j, fl_ds[0]);
        fl_ps_put4(i + 1u, j, fl_ds[1]);
        fl_ps_put4(i + 2u, j, fl_ds[2]);
        fl_ps_put4(i + 3u, j, fl_ds[3]);
    } else {
        fl_ps_put4(i, j, fl_p[0]);
        fl_ps_put4(i + 1u, j, fl_p[1]);
        fl_ps_put4(i + 2u, j, fl_p[2]);
        fl_ps_put4(i + 3u, j, fl_p[3]);
    }
}

// The key block of workgroup w of the key-major pass (the longest walks first): (key block,
// b·Hkv + kv head), or nothing past the end.
fn fl_key_block(w: u32) -> vec2<u32> {
    let nbk = p.batch * p.kv_heads;
    return vec2<u32>(w / nbk, w % nbk);
}

// The key-major pass with portable products: dK and dV of workgroup w's 64 keys.
fn flash_dkdv_body(w: u32, tid: u32) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nb = (seq + FL_T - 1u) / FL_T;
    let kbb = fl_key_block(w);
    // Whole workgroups past the end leave together (uniform).
    if (kbb.x >= nb) {
        return;
    }
    let k0 = kbb.x * FL_T;
    let group = p.heads / p.kv_heads;
    let b = kbb.y / p.kv_heads;
    let kvh = kbb.y % p.kv_heads;
    fl_acc = array<vec4<f32>, 16>();
    fl_acc2 = array<vec4<f32>, 16>();
    fl_bad = false;
    for (var g = 0u; g < group; g++) {
        fl_set_head(b * p.heads + kvh * group + g);
        for (var qb = kbb.x; qb < nb; qb++) {
            let q0 = qb * FL_T;
            fl_bwd_block(tid, q0, k0, dh, seq, false);
            fl_put_tile(tid, false);
            // dV += Pᵀ·dO (fl_acc2), then dK += dSᵀ·Q (fl_acc).
            fl_values_all_fma(tid, true, true, FL_DO, q0, dh);
            fl_put_tile(tid, true);
            fl_values_all_fma(tid, false, true, FL_Q, q0, dh);
        }
    }
    let row = k0 + fl_row(tid);
    if (row < seq) {
        fl_write_row(false, row, fl_quarter(tid), dh, p.scale);
        fl_write_row(true, row, fl_quarter(tid), dh, 1.0);
    }
}

// The query block of workgroup w of a query-major pass (the longest walks first): (query block,
// b·H + h); the block is past the end when w ≥ B·H·⌈S/64⌉.
fn fl_query_block(w: u32) -> vec2<u32> {
    let nb = (p.seq + FL_T - 1u) / FL_T;
    let nbh = p.batch * p.heads;
    return vec2<u32>(nb - 1u - min(w / nbh, nb - 1u), w % nbh);
}

// The query-major pass with portable products: dQ of workgroup w's 64 queries.
fn flash_dq_body(w: u32, tid: u32) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nb = (seq + FL_T - 1u) / FL_T;
    // Whole workgroups past the end leave together (uniform).
    if (w >= p.batch * p.heads * nb) {
        return;
    }
    let qbh = fl_query_block(w);
    fl_set_head(qbh.y);
    let q0 = qbh.x * FL_T;
    fl_acc = array<vec4<f32>, 16>();
    fl_bad = false;
    for (var kb = 0u; kb <= qbh.x; kb++) {
        let k0 = kb * FL_T;
        fl_bwd_block(tid, q0, k0, dh, seq, false);
        fl_put_tile(tid, true);
        // dQ += dS·K.
        fl_values_all_fma(tid, false, false, FL_K, k0, dh);
    }
    let row = q0 + fl_row(tid);
    if (row < seq) {
        fl_write_row(false, row, fl_quarter(tid), dh, p.scale);
    }
}

//#if coop
// The key-major pass on tensor cores (the f16 kernels, head dim ≤ 128): as `flash_dkdv_body`,
// with dK and dV held in cooperative-matrix accumulators for the whole walk (two 16×16 tiles
// per subgroup and 64-wide chunk: `dkCt`, `dvCt` for chunk C, tile t) and handed to the row
// owners' registers at the end.
fn flash_dkdv_coop(w: u32, tid: u32) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nb = (seq + FL_T - 1u) / FL_T;
    let kbb = fl_key_block(w);
    // Whole workgroups past the end leave together (uniform).
    if (kbb.x >= nb) {
        return;
    }
    let k0 = kbb.x * FL_T;
    let group = p.heads / p.kv_heads;
    let b = kbb.y / p.kv_heads;
    let kvh = kbb.y % p.kv_heads;
    var dk00 = coop_mat16x16<f32, C>();
    var dk01 = coop_mat16x16<f32, C>();
    var dk10 = coop_mat16x16<f32, C>();
    var dk11 = coop_mat16x16<f32, C>();
    var dv00 = coop_mat16x16<f32, C>();
    var dv01 = coop_mat16x16<f32, C>();
    var dv10 = coop_mat16x16<f32, C>();
    var dv11 = coop_mat16x16<f32, C>();
    fl_bad = false;
    for (var g = 0u; g < group; g++) {
        fl_set_head(b * p.heads + kvh * group + g);
        for (var qb = kbb.x; qb < nb; qb++) {
            let q0 = qb * FL_T;
            fl_bwd_block(tid, q0, k0, dh, seq, true);
            // dV += Pᵀ·dO.
            fl_put_tile(tid, false);
            for (var ks = 0u; ks < FL_T; ks += FL_KS) {
                fl_stage_values(tid, FL_DO, q0, ks, 0u);
                dv00 = fl_mma_t(dv00, ks, 0u);
                dv01 = fl_mma_t(dv01, ks, 1u);
            }
            for (var ks = select(FL_T, 0u, dh > 64u); ks < FL_T; ks += FL_KS) {
                fl_stage_values(tid, FL_DO, q0, ks, 1u);
                dv10 = fl_mma_t(dv10, ks, 0u);
                dv11 = fl_mma_t(dv11, ks, 1u);
            }
            // dK += dSᵀ·Q.
            fl_put_tile(tid, true);
            for (var ks = 0u; ks < FL_T; ks += FL_KS) {
                fl_stage_values(tid, FL_Q, q0, ks, 0u);
                dk00 = fl_mma_t(dk00, ks, 0u);
                dk01 = fl_mma_t(dk01, ks, 1u);
            }
            for (var ks = select(FL_T, 0u, dh > 64u); ks < FL_T; ks += FL_KS) {
                fl_stage_values(tid, FL_Q, q0, ks, 1u);
                dk10 = fl_mma_t(dk10, ks, 0u);
                dk11 = fl_mma_t(dk11, ks, 1u);
            }
        }
    }
    fl_acc = array<vec4<f32>, 16>();
    fl_acc2 = array<vec4<f32>, 16>();
    fl_take2(tid, false, 0u, dk00, dk01);
    fl_take2(tid, true, 0u, dv00, dv01);
    for (var more = select(0u, 1u, dh > 64u); more == 1u; more = 0u) {
        fl_take2(tid, false, 1u, dk10, dk11);
        fl_take2(tid, true, 1u, dv10, dv11);
    }
    let row = k0 + fl_row(tid);
    if (row < seq) {
        fl_write_row(false, row, fl_quarter(tid), dh, p.scale);
        fl_write_row(true, row, fl_quarter(tid), dh, 1.0);
    }
}

// The query-major pass on tensor cores (head dim ≤ 128): as `flash_dq_body`, dQ in
// cooperative-matrix accumulators (`dqCt`) for the whole walk.
fn flash_dq_coop(w: u32, tid: u32) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nb = (seq + FL_T - 1u) / FL_T;
    // Whole workgroups past the end leave together (uniform).
    if (w >= p.batch * p.heads * nb) {
        return;
    }
    let qbh = fl_query_block(w);
    fl_set_head(qbh.y);
    let q0 = qbh.x * FL_T;
    var dq00 = coop_mat16x16<f32, C>();
    var dq01 = coop_mat16x16<f32, C>();
    var dq10 = coop_mat16x16<f32, C>();
    var dq11 = coop_mat16x16<f32, C>();
    fl_bad = false;
    for (var kb = 0u; kb <= qbh.x; kb++) {
        let k0 = kb * FL_T;
        fl_bwd_block(tid, q0, k0, dh, seq, true);
        // dQ += dS·K.
        fl_put_tile(tid, true);
        for (var ks = 0u; ks < FL_T; ks += FL_KS) {
            fl_stage_values(tid, FL_K, k0, ks, 0u);
            dq00 = fl_mma_n(dq00, ks, 0u);
            dq01 = fl_mma_n(dq01, ks, 1u);
        }
        for (var ks = select(FL_T, 0u, dh > 64u); ks < FL_T; ks += FL_KS) {
            fl_stage_values(tid, FL_K, k0, ks, 1u);
            dq10 = fl_mma_n(dq10, ks, 0u);
            dq11 = fl_mma_n(dq11, ks, 1u);
        }
    }
    fl_acc = array<vec4<f32>, 16>();
    fl_take2(tid, false, 0u, dq00, dq01);
    for (var more = select(0u, 1u, dh > 64u); more == 1u; more = 0u) {
        fl_take2(tid, false, 1u, dq10, dq11);
    }
    let row = q0 + fl_row(tid);
    if (row < seq) {
        fl_write_row(false, row, fl_quarter(tid), dh, p.scale);
    }
}
//#endif
