// The tensor-core bodies of `flash_backward_dkdv16_tc` and `flash_backward_dq16_tc` (head dim
// ≤ 64, eight subgroups of 32): FlashAttention-2's two deterministic passes, as in
// `lib/flash_bwd.wgsl`, with the operands held whole in workgroup memory instead of staged in
// slices per product.
//
// Why this form: the sliced kernels re-stage each operand for every product that reads it (Q and
// dO twice per block, K and V once per block though they never change in a key-major walk) and
// pass two barriers per slice; with one workgroup per SM (their registers) every barrier stalls
// the whole SM. Here each pass keeps its invariant pair resident for the whole walk and stages
// the other pair once per step, whole, so a step has five barriers, and the row owners' f32
// accumulators of the sliced kernels are not needed (the results stay in cooperative-matrix
// accumulators until the end), which leaves room for more than one workgroup per SM.
//
//   key-major (`ft_dkdv`): K and V of 64 keys resident; steps of 32 queries (Q, dO staged):
//       S = Q·Kᵀ and dP = dO·Vᵀ (32 × 64), P = exp(scale·S − lse) (0 where masked), dS = P ⊙ (dP −
//       Δ), then dV += Pᵀ·dO and dK += dSᵀ·Q (64 × 64, P and dS as f16);
//   query-major (`ft_dq`): Q and dO of 64 queries resident; steps of 32 keys (K, V staged):
//       S and dP (64 × 32), P, dS, then dQ += dS·K.
// S and dP go through one f32 block (`ft_r`) in turn. Sums run in fixed orders: the bits repeat
// run to run. Subgroup sg owns the 16 × 16 tiles below; results reach global memory through
// `ft_r`, one tile per subgroup per round.
//
// Workgroup memory: resident pair 18 KiB, staged pair 9 KiB, `ft_r` 9 KiB, the f16 P/dS blocks
// 9 KiB, lse and Δ 0.5 KiB: 46,592 bytes, within the 48 KiB of the adapters that run it
// (`flash_attention::WORKGROUP_BYTES_TC`).
//
// Needs `lib/flash.wgsl` (head, the current (b, h)), `lib/flash_f16.wgsl` (`fl_load`),
// `lib/flash_bwd.wgsl` (`fl_lse`, `fl_delta`, `fl_key_block`, `fl_query_block`, FL_F16_MAX) and
// the kernel's `fl_store`.

//#if coop
// vec4<f16>s per staged row: 64 halves and 8 of padding (rows 144 bytes apart fall on distinct
// banks in groups of eight).
const FT_LD: u32 = 18u;
// Rows of the staged pair per step.
const FT_STEP: u32 = 32u;
// The f32 block: 32 × 68 (key-major) or 64 × 36 (query-major) floats.
const FT_LDR_K: u32 = 68u;
const FT_LDR_Q: u32 = 36u;
// vec4<f16>s per row of the query-major pass's dS block (32 halves and 8 of padding).
const FT_LDP_Q: u32 = 10u;
const FT_HALF_RES: u32 = 64u * FT_LD;
const FT_HALF_STR: u32 = FT_STEP * FT_LD;

var<workgroup> ft_res: array<vec4<f16>, 2304>;
var<workgroup> ft_str: array<vec4<f16>, 1152>;
var<workgroup> ft_r: array<f32, 2304>;
var<workgroup> ft_ps: array<vec4<f16>, 1152>;
const_assert 2u * FT_HALF_RES == 2304u && 2u * FT_HALF_STR == 1152u;
const_assert FT_STEP * FT_LDR_K <= 2304u && 64u * FT_LDR_Q <= 2304u;
const_assert 2u * FT_STEP * FT_LD <= 1152u && 64u * FT_LDP_Q <= 1152u;
// What `flash_attention::WORKGROUP_BYTES_TC` says (with fl_lse and fl_delta).
const_assert 2304u * 8u + 1152u * 8u + 2304u * 4u + 1152u * 8u + 512u == 46592u;

var<private> ft_sg: u32;

// Rows r0 … r0 + 63 of operands `a` and `b` into the resident pair (a first).
fn ft_stage_res(tid: u32, a: u32, b: u32, r0: u32) {
    for (var e = tid; e < 2u * 64u * 16u; e += WG) {
        let second = e >= 64u * 16u;
        let f = e - select(0u, 64u * 16u, second);
        let r = f / 16u;
        let c = f % 16u;
        ft_res[select(0u, FT_HALF_RES, second) + r * FT_LD + c] = fl_load(select(a, b, second), r0 + r, c);
    }
}

// Rows r0 … r0 + FT_STEP − 1 of operands `a` and `b` into the staged pair (a first).
fn ft_stage_str(tid: u32, a: u32, b: u32, r0: u32) {
    for (var e = tid; e < 2u * FT_STEP * 16u; e += WG) {
        let second = e >= FT_STEP * 16u;
        let f = e - select(0u, FT_STEP * 16u, second);
        let r = f / 16u;
        let c = f % 16u;
        ft_str[select(0u, FT_HALF_STR, second) + r * FT_LD + c] = fl_load(select(a, b, second), r0 + r, c);
    }
}

// lse and Δ of rows q0 … q0 + n − 1 of the current (b, h) (0 past the sequence).
fn ft_stage_rows(tid: u32, q0: u32, n: u32) {
    if (tid < n) {
        let r = q0 + tid;
        let at = (fl_b * p.heads + fl_h) * p.seq + min(r, p.seq - 1u);
        fl_lse[tid] = select(0.0, lse[at], r < p.seq);
        fl_delta[tid] = select(0.0, delta[at], r < p.seq);
    }
}

// Fragments. Row-major A: rows m0 … of an array region, k-columns (halves) 16s …; column-major B
// from rows stored one per n (keys): n rows n0 …, k-columns 16s ….
fn ft_a_res(base: u32, m0: u32, s: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&ft_res[base + m0 * FT_LD + 4u * s], FT_LD);
}

fn ft_a_str(base: u32, m0: u32, s: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&ft_str[base + m0 * FT_LD + 4u * s], FT_LD);
}

fn ft_bt_res(base: u32, n0: u32, s: u32) -> coop_mat16x16<f16, B> {
    return coopLoad<coop_mat16x16<f16, B>>(&ft_res[base + n0 * FT_LD + 4u * s], FT_LD);
}

fn ft_bt_str(base: u32, n0: u32, s: u32) -> coop_mat16x16<f16, B> {
    return coopLoad<coop_mat16x16<f16, B>>(&ft_str[base + n0 * FT_LD + 4u * s], FT_LD);
}

// Row-major B: k rows k0 … of the staged pair's region, n-columns (halves) n0 ….
fn ft_b_str(base: u32, k0: u32, n0: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&ft_str[base + k0 * FT_LD + n0 / 4u], FT_LD);
}

// The products, each in its own function: naga takes an early `return` on the workgroup id for
// non-uniform control flow after it, but checks cooperative-matrix operations only where they
// are written, not at calls (so these stay callable from the walks).

// Σ_d A·B over the 64 dims: A rows m0 … of the staged pair's half `abase`, B = the resident
// half `bbase`'s rows n0 … transposed (the key-major pass's S and dP).
fn ft_sd_kv(abase: u32, bbase: u32, m0: u32, n0: u32) -> coop_mat16x16<f32, C> {
    var c = coop_mat16x16<f32, C>();
    for (var d = 0u; d < 4u; d++) {
        c = coopMultiplyAdd(ft_a_str(abase, m0, d), ft_bt_res(bbase, n0, d), c);
    }
    return c;
}

// The same with A resident and B staged (the query-major pass's S and dP).
fn ft_sd_q(abase: u32, bbase: u32, m0: u32, n0: u32) -> coop_mat16x16<f32, C> {
    var c = coop_mat16x16<f32, C>();
    for (var d = 0u; d < 4u; d++) {
        c = coopMultiplyAdd(ft_a_res(abase, m0, d), ft_bt_str(bbase, n0, d), c);
    }
    return c;
}

// acc + Xᵀ·Y over the step's 32 queries: X the f16 block at `pbase` (query rows), columns m0 …
// (keys); Y the staged half `bbase`, columns n0 … (dV += Pᵀ·dO, dK += dSᵀ·Q).
fn ft_acc_t(acc: coop_mat16x16<f32, C>, pbase: u32, m0: u32, bbase: u32, n0: u32) -> coop_mat16x16<f32, C> {
    var c = acc;
    for (var kq = 0u; kq < FT_STEP; kq += 16u) {
        let x = coopLoad<coop_mat16x16<f16, A>>(&ft_ps[pbase + kq * FT_LD + m0 / 4u], FT_LD);
        c = coopMultiplyAdd(x, ft_b_str(bbase, kq, n0), c);
    }
    return c;
}

// acc + dS·K over the step's 32 keys: dS rows m0 … as stored, K the staged half, columns n0 ….
fn ft_acc_n(acc: coop_mat16x16<f32, C>, m0: u32, n0: u32) -> coop_mat16x16<f32, C> {
    var c = acc;
    for (var kk = 0u; kk < FT_STEP; kk += 16u) {
        let x = coopLoadT<coop_mat16x16<f16, A>>(&ft_ps[m0 * FT_LDP_Q + kk / 4u], FT_LDP_Q);
        c = coopMultiplyAdd(x, ft_b_str(0u, kk, n0), c);
    }
    return c;
}

// A tile into ft_r at `at`, rows `ld` floats apart.
fn ft_put(c: coop_mat16x16<f32, C>, at: u32, ld: u32) {
    coopStoreT(c, &ft_r[at], ld);
}

// One f16 vec4 of a P/dS block (a dS beyond ±65504 is clamped; the flag records it).
fn ft_h4(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(clamp(v, vec4<f32>(-FL_F16_MAX), vec4<f32>(FL_F16_MAX)));
}

// Whether some of v is NaN, ±Inf or beyond f16's range.
fn ft_bad4(v: vec4<f32>) -> bool {
    let special = (bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u);
    return any(special) | any(abs(v) > vec4<f32>(FL_F16_MAX));
}

// The 8 causal pairs (query i, keys j … j + 7) with the query in the sequence.
fn ft_causal(i: u32, j: u32) -> array<vec4<bool>, 2> {
    let lo = vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u);
    let hi = lo + vec4<u32>(4u);
    let ok = vec4<bool>(i < p.seq);
    return array<vec4<bool>, 2>((lo <= vec4<u32>(i)) & ok, (hi <= vec4<u32>(i)) & ok);
}

fn ft_r8(at: u32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(ft_r[at], ft_r[at + 1u], ft_r[at + 2u], ft_r[at + 3u]),
        vec4<f32>(ft_r[at + 4u], ft_r[at + 5u], ft_r[at + 6u], ft_r[at + 7u]),
    );
}

// One round of the output: every subgroup's tile `c` to its slot of `ft_r` (16 × 16 tiles laid
// out `per_row` to a row of `ld` floats), a barrier, then the invocations write the 8 elements
// each owns through `fl_store` (`fl_write4`): row = row0 + 16·(slot / 2) + r, col =
// 32·(slot % 2) + 16t + c (the subgroups' output tiles), those in range. Ends with a barrier.
fn ft_emit(tid: u32, c: coop_mat16x16<f32, C>, ld: u32, per_row: u32, second: bool, row0: u32, t: u32, dh: u32) {
    ft_put(c, 16u * (ft_sg / per_row) * ld + 16u * (ft_sg % per_row), ld);
    workgroupBarrier();
    // Invocation tid: block row r, columns c0 … c0 + 7 of the (16·8/per_row) × (16·per_row) block.
    let width = 16u * per_row;
    let r = tid / (width / 8u);
    let c0 = 8u * (tid % (width / 8u));
    let slot = per_row * (r / 16u) + c0 / 16u;
    let row = row0 + 16u * (slot / 2u) + r % 16u;
    let col = 32u * (slot % 2u) + 16u * t + c0 % 16u;
    let v = ft_r8(r * ld + c0);
    if (row < p.seq) {
        fl_write4(second, row, col, dh, v[0]);
        fl_write4(second, row, col + 4u, dh, v[1]);
    }
    workgroupBarrier();
}

// The key-major pass: dK and dV of workgroup w's 64 keys. Call with eight subgroups.
fn ft_dkdv(w: u32, tid: u32) {
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
    fl_set_head(b * p.heads + kvh * group);
    ft_stage_res(tid, FL_K, FL_V, k0);
    // S/dP tiles: query rows 16·(sg / 4) …, keys 16·(sg % 4) … of the 32 × 64 step.
    let sm = 16u * (ft_sg / 4u);
    let sn = 16u * (ft_sg % 4u);
    // dK/dV tiles: keys 16·(sg / 2) …, dims 32·(sg % 2) + 16t ….
    let om = 16u * (ft_sg / 2u);
    let on = 32u * (ft_sg % 2u);
    // The element owners: query row er, keys ec … ec + 7 of the step's block.
    let er = tid / 8u;
    let ec = 8u * (tid % 8u);
    var dk0 = coop_mat16x16<f32, C>();
    var dk1 = coop_mat16x16<f32, C>();
    var dv0 = coop_mat16x16<f32, C>();
    var dv1 = coop_mat16x16<f32, C>();
    var bad = false;
    for (var g = 0u; g < group; g++) {
        fl_set_head(b * p.heads + kvh * group + g);
        for (var q0 = k0; q0 < seq; q0 += FT_STEP) {
            // Earlier readers of the staged pair, lse, Δ and the blocks are done.
            workgroupBarrier();
            ft_stage_str(tid, FL_Q, FL_DO, q0);
            ft_stage_rows(tid, q0, FT_STEP);
            workgroupBarrier();
            let dp = ft_sd_kv(FT_HALF_STR, FT_HALF_RES, sm, sn);
            let at = sm * FT_LDR_K + sn;
            ft_put(ft_sd_kv(0u, 0u, sm, sn), at, FT_LDR_K);
            workgroupBarrier();
            let i = q0 + er;
            let mask = ft_causal(i, k0 + ec);
            let sv = ft_r8(er * FT_LDR_K + ec);
            let l = vec4<f32>(fl_lse[er]);
            let sc = vec4<f32>(p.scale);
            let p0 = select(vec4<f32>(0.0), exp(sc * sv[0] - l), mask[0]);
            let p1 = select(vec4<f32>(0.0), exp(sc * sv[1] - l), mask[1]);
            ft_ps[er * FT_LD + ec / 4u] = ft_h4(p0);
            ft_ps[er * FT_LD + ec / 4u + 1u] = ft_h4(p1);
            workgroupBarrier();
            ft_put(dp, at, FT_LDR_K);
            // dV += Pᵀ·dO (P as stored: query rows, so column-major for Pᵀ).
            dv0 = ft_acc_t(dv0, 0u, om, FT_HALF_STR, on);
            dv1 = ft_acc_t(dv1, 0u, om, FT_HALF_STR, on + 16u);
            workgroupBarrier();
            let dpv = ft_r8(er * FT_LDR_K + ec);
            let dl = vec4<f32>(fl_delta[er]);
            let ds0 = p0 * (dpv[0] - dl);
            let ds1 = p1 * (dpv[1] - dl);
            bad = bad | ft_bad4(ds0) | ft_bad4(ds1);
            ft_ps[FT_HALF_STR + er * FT_LD + ec / 4u] = ft_h4(ds0);
            ft_ps[FT_HALF_STR + er * FT_LD + ec / 4u + 1u] = ft_h4(ds1);
            workgroupBarrier();
            // dK += dSᵀ·Q.
            dk0 = ft_acc_t(dk0, FT_HALF_STR, om, 0u, on);
            dk1 = ft_acc_t(dk1, FT_HALF_STR, om, 0u, on + 16u);
        }
    }
    fl_bad = bad;
    // Earlier readers of ft_r are done.
    workgroupBarrier();
    let sc = p.scale;
    ft_emit(tid, sc * dk0, FT_LDR_K, 4u, false, k0, 0u, dh);
    ft_emit(tid, sc * dk1, FT_LDR_K, 4u, false, k0, 1u, dh);
    ft_emit(tid, dv0, FT_LDR_K, 4u, true, k0, 0u, dh);
    ft_emit(tid, dv1, FT_LDR_K, 4u, true, k0, 1u, dh);
}

// The query-major pass: dQ of workgroup w's 64 queries. Call with eight subgroups.
fn ft_dq(w: u32, tid: u32) {
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
    ft_stage_res(tid, FL_Q, FL_DO, q0);
    ft_stage_rows(tid, q0, FL_T);
    // S/dP tiles: query rows 16·(sg / 2) …, keys 16·(sg % 2) … of the 64 × 32 step; dQ tiles:
    // query rows 16·(sg / 2) …, dims 32·(sg % 2) + 16t ….
    let sm = 16u * (ft_sg / 2u);
    let sn = 16u * (ft_sg % 2u);
    let on = 32u * (ft_sg % 2u);
    // The element owners: query row er, keys ec … ec + 7 of the step's block.
    let er = tid / 4u;
    let ec = 8u * (tid % 4u);
    var dq0 = coop_mat16x16<f32, C>();
    var dq1 = coop_mat16x16<f32, C>();
    let kend = min(q0 + FL_T, seq);
    for (var k0 = 0u; k0 < kend; k0 += FT_STEP) {
        // Earlier readers of the staged pair and the dS block are done.
        workgroupBarrier();
        ft_stage_str(tid, FL_K, FL_V, k0);
        workgroupBarrier();
        let dp = ft_sd_q(FT_HALF_RES, FT_HALF_STR, sm, sn);
        let at = sm * FT_LDR_Q + sn;
        ft_put(ft_sd_q(0u, 0u, sm, sn), at, FT_LDR_Q);
        workgroupBarrier();
        let i = q0 + er;
        let mask = ft_causal(i, k0 + ec);
        let sv = ft_r8(er * FT_LDR_Q + ec);
        let l = vec4<f32>(fl_lse[er]);
        let sc = vec4<f32>(p.scale);
        let p0 = select(vec4<f32>(0.0), exp(sc * sv[0] - l), mask[0]);
        let p1 = select(vec4<f32>(0.0), exp(sc * sv[1] - l), mask[1]);
        workgroupBarrier();
        ft_put(dp, at, FT_LDR_Q);
        workgroupBarrier();
        let dpv = ft_r8(er * FT_LDR_Q + ec);
        let dl = vec4<f32>(fl_delta[er]);
        ft_ps[er * FT_LDP_Q + ec / 4u] = ft_h4(p0 * (dpv[0] - dl));
        ft_ps[er * FT_LDP_Q + ec / 4u + 1u] = ft_h4(p1 * (dpv[1] - dl));
        workgroupBarrier();
        // dQ += dS·K (dS as stored: query rows; K rows one per key).
        dq0 = ft_acc_n(dq0, sm, on);
        dq1 = ft_acc_n(dq1, sm, on + 16u);
    }
    // Earlier readers of ft_r are done.
    workgroupBarrier();
    let sc = p.scale;
    ft_emit(tid, sc * dq0, FT_LDR_Q, 2u, false, q0, 0u, dh);
    ft_emit(tid, sc * dq1, FT_LDR_Q, 2u, false, q0, 1u, dh);
}
// Where the workgroup does not have eight subgroups, the resident layout's tiles have no owner:
// `flash_attention::backward16` never runs these kernels there, and a direct call gets NaN in
// the workgroup's rows (dK and dV, or dQ) rather than plausible numbers.
fn ft_poison_rows(tid: u32, second: bool, r0: u32, dh: u32) {
    let nan = bitcast<f32>(0x7fc00000u);
    for (var e = tid; e < FL_T * dh; e += WG) {
        let row = r0 + e / dh;
        if (row < p.seq) {
            fl_store(second, row, e % dh, nan);
        }
    }
}

fn ft_poison_dkdv(w: u32, tid: u32) {
    let kbb = fl_key_block(w);
    if (kbb.x < (p.seq + FL_T - 1u) / FL_T) {
        fl_set_head(kbb.y / p.kv_heads * p.heads + kbb.y % p.kv_heads * (p.heads / p.kv_heads));
        ft_poison_rows(tid, false, kbb.x * FL_T, fl_head_dim());
        ft_poison_rows(tid, true, kbb.x * FL_T, fl_head_dim());
    }
}

fn ft_poison_dq(w: u32, tid: u32) {
    if (w < p.batch * p.heads * ((p.seq + FL_T - 1u) / FL_T)) {
        let qbh = fl_query_block(w);
        fl_set_head(qbh.y);
        ft_poison_rows(tid, false, qbh.x * FL_T, fl_head_dim());
    }
}
//#endif
