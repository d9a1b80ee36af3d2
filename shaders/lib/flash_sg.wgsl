// The tensor-core bodies of `flash_backward_dkdv16_tc` and `flash_backward_dq16_tc` (head dim
// ≤ 64): each of four subgroups of 32 owns 16 of the workgroup's 64 rows (keys in the key-major
// pass, queries in the query-major one) and does everything for them itself; the workgroup
// shares only the walked operands, staged in steps of 32 rows.
//
// Why this form: on the NVIDIA driver a workgroup barrier costs about 260 cycles (a loop of
// barriers alone, H100), and a walk whose scores, probabilities and results cross between
// subgroups needs several a step. Here a row's scores, its P and dS and its results stay in its
// subgroup: they go through the subgroup's own region of workgroup memory behind subgroup
// barriers, and a step passes one workgroup barrier, which publishes the step's staged rows
// (loaded into registers one step ahead, stored into the other of two buffers) and tells every
// subgroup that the buffer it is about to fill has been read.
//
//   key-major (`fs_dkdv`): K's and V's 16 rows in registers; per step of 32 queries (every
//       query head of the group in turn) Sᵀ = K·Qᵀ, P = exp(scale·S − lse), dPᵀ = V·dOᵀ,
//       dS = P ⊙ (dP − Δ), then dV += Pᵀ·dO and dK += dSᵀ·Q in accumulators (P, dS as f16);
//   query-major (`fs_dq`): Q's and dO's 16 rows in registers; per step of 32 keys S, P, dP and
//       dS as above, then dQ += dS·K.
// Sums run in fixed orders: the bits repeat run to run; the rounding points and order are the
// sliced pair's. Each step stages the next step's rows and fetches the one after without a
// guard (past the walk's end the last step's rows again, unused): on the NVIDIA driver the
// guards slow the loop. With the kernel's FL_EXACT (S a multiple of 64, head dim 64: every row
// read exists) rows are read without the bounds test, which speeds it again (BENCHMARKS.md §4).
// A lane owns row r = lane / 2 of its subgroup's 16 and the 16 columns 16·(lane % 2) … of a
// step's 32.
//
// The forward keeps `lib/flash_fwd_tc.wgsl`'s design: in this form it measured slower both with
// O in accumulators, rescaled through the subgroup's region on a decision per subgroup
// (`subgroupAny`), and with each step's P·V folded into lane-held O (BENCHMARKS.md §4).
//
// Hooks of the including kernel: `lib/flash.wgsl` (the head, operands, FL_T),
// `lib/flash_bwd.wgsl` (the walks' block order), `lib/f16x4.wgsl` (f16's limit and loss
// scaling's overflow rule), `fl_vec(op, i)` and `fl_store(second, row, col, x)`
// (`lib/flash_*16_io.wgsl`), and the constants FS_LDR (floats per row of a subgroup's f32
// region, ≥ 32 for a step's columns), FS_HLEN (vec4<f16>s of the f16 regions: 640 a block per
// subgroup, 1280 two) and `override FL_EXACT: bool`.

// Subgroups of 32 per workgroup, 16 rows each, and the invocations they make.
const FS_SG: u32 = 4u;
const FS_WG: u32 = 128u;
// vec4<f16>s per staged row: 64 halves and 8 of padding (rows 144 bytes apart, so the eight
// rows a fragment load reads at once fall on distinct banks).
const FS_LD: u32 = 18u;
// Walked rows per step; one operand's rows, and a step buffer (two operands).
const FS_STEP: u32 = 32u;
const FS_HALF: u32 = FS_STEP * FS_LD;
const FS_BUF: u32 = 2u * FS_HALF;
// vec4<f16>s per row of a 16 × 32 f16 block (32 halves and 8 of padding).
const FS_LDH: u32 = 10u;

// Two step buffers; before the walk, the workgroup's own 64 rows of two operands.
var<workgroup> fs_kv: array<vec4<f16>, 2304>;
// Each subgroup's 16 rows of FS_LDR floats, held as vec4s: a lane reads its row's 16 floats as
// four 16-byte loads, and with rows 9 vec4s apart (FS_LDR = 36) the eight lanes of a quarter
// subgroup fall on distinct banks (scalar loads of the same floats would meet 4-way
// conflicts); and its f16 blocks.
var<workgroup> fs_r: array<vec4<f32>, 16u * FS_LDR>;
var<workgroup> fs_h: array<vec4<f16>, FS_HLEN>;
const_assert 2u * FS_BUF == 2304u && 2u * 64u * FS_LD == 2304u && FS_SG * 32u == FS_WG;
const_assert FS_LDR % 4u == 0u;

// The next step's rows, loaded a step ahead: vec4 tid + 128e of each operand's 32 rows.
var<private> fs_p0: vec4<f16>;
var<private> fs_p1: vec4<f16>;
var<private> fs_p2: vec4<f16>;
var<private> fs_p3: vec4<f16>;
var<private> fs_p4: vec4<f16>;
var<private> fs_p5: vec4<f16>;
var<private> fs_p6: vec4<f16>;
var<private> fs_p7: vec4<f16>;

// Vec4 d4 of row `row` of operand `op` of batch b, head `head` (a query head for Q and dO, a
// kv head for K and V); zeros past the sequence or the head dim.
fn fs_load(op: u32, b: u32, head: u32, row: u32, d4: u32) -> vec4<f16> {
    let heads = select(p.heads, p.kv_heads, op == FL_K || op == FL_V);
    if (FL_EXACT) {
        return fl_vec(op, ((b * p.seq + row) * heads + head) * 16u + d4);
    }
    let dq = fl_head_dim() / 4u;
    let ok = row < p.seq && d4 < dq;
    return select(vec4<f16>(), fl_vec(op, select(0u, ((b * p.seq + row) * heads + head) * dq + d4, ok)), ok);
}

// Rows r0 … r0 + 31 of operands `oa` and `ob` into the registers.
fn fs_fetch(tid: u32, oa: u32, ob: u32, b: u32, head: u32, r0: u32) {
    let c = tid % 16u;
    let r = r0 + tid / 16u;
    fs_p0 = fs_load(oa, b, head, r, c);
    fs_p1 = fs_load(oa, b, head, r + 8u, c);
    fs_p2 = fs_load(oa, b, head, r + 16u, c);
    fs_p3 = fs_load(oa, b, head, r + 24u, c);
    fs_p4 = fs_load(ob, b, head, r, c);
    fs_p5 = fs_load(ob, b, head, r + 8u, c);
    fs_p6 = fs_load(ob, b, head, r + 16u, c);
    fs_p7 = fs_load(ob, b, head, r + 24u, c);
}

// The registers into step buffer `buf` (the first operand's rows, then the second's).
fn fs_stage(tid: u32, buf: u32) {
    let at = buf * FS_BUF + (tid / 16u) * FS_LD + tid % 16u;
    fs_kv[at] = fs_p0;
    fs_kv[at + 8u * FS_LD] = fs_p1;
    fs_kv[at + 16u * FS_LD] = fs_p2;
    fs_kv[at + 24u * FS_LD] = fs_p3;
    fs_kv[at + FS_HALF] = fs_p4;
    fs_kv[at + FS_HALF + 8u * FS_LD] = fs_p5;
    fs_kv[at + FS_HALF + 16u * FS_LD] = fs_p6;
    fs_kv[at + FS_HALF + 24u * FS_LD] = fs_p7;
}

// The workgroup's own rows r0 … r0 + 63 of `oa`, and of `ob` after them.
fn fs_own(tid: u32, oa: u32, ob: u32, b: u32, head: u32, r0: u32) {
    for (var e = tid; e < 64u * 16u; e += FS_WG) {
        let at = (e / 16u) * FS_LD + e % 16u;
        fs_kv[at] = fs_load(oa, b, head, r0 + e / 16u, e % 16u);
        fs_kv[64u * FS_LD + at] = fs_load(ob, b, head, r0 + e / 16u, e % 16u);
    }
}

// The subgroup's rows m0 … m0 + 15 of the own operand at `base`, as A fragments of 16 dims.
fn fs_frags(base: u32, m0: u32) -> array<coop_mat16x16<f16, A>, 4> {
    let at = base + m0 * FS_LD;
    return array<coop_mat16x16<f16, A>, 4>(
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at], FS_LD),
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at + 4u], FS_LD),
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at + 8u], FS_LD),
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at + 12u], FS_LD),
    );
}

// The products, each in its own function (naga checks cooperative-matrix operations where they
// are written, and takes an early `return` on the workgroup id for non-uniform control flow).

// X·Yᵀ over the 64 dims: X the 16 own rows (fragments), Y the 16 staged rows at `at`.
fn fs_xyt(x: array<coop_mat16x16<f16, A>, 4>, at: u32) -> coop_mat16x16<f32, C> {
    var c = coop_mat16x16<f32, C>();
    c = coopMultiplyAdd(x[0], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at], FS_LD), c);
    c = coopMultiplyAdd(x[1], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at + 4u], FS_LD), c);
    c = coopMultiplyAdd(x[2], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at + 8u], FS_LD), c);
    c = coopMultiplyAdd(x[3], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at + 12u], FS_LD), c);
    return c;
}

// acc + H·Y over a step's 32 rows: H the subgroup's 16 × 32 f16 block at `hb`, Y the staged
// rows at `yb`, dims n0 … n0 + 15.
fn fs_hy(acc: coop_mat16x16<f32, C>, hb: u32, yb: u32, n0: u32) -> coop_mat16x16<f32, C> {
    let a0 = coopLoadT<coop_mat16x16<f16, A>>(&fs_h[hb], FS_LDH);
    let a1 = coopLoadT<coop_mat16x16<f16, A>>(&fs_h[hb + 4u], FS_LDH);
    var c = coopMultiplyAdd(a0, coopLoadT<coop_mat16x16<f16, B>>(&fs_kv[yb + n0 / 4u], FS_LD), acc);
    c = coopMultiplyAdd(a1, coopLoadT<coop_mat16x16<f16, B>>(&fs_kv[yb + 16u * FS_LD + n0 / 4u], FS_LD), c);
    return c;
}

// A tile into the f32 region at float `at` (a multiple of 4; rows FS_LDR floats apart).
fn fs_put(c: coop_mat16x16<f32, C>, at: u32) {
    let i = at / 4u;
    let ld = FS_LDR / 4u;
    coopStoreT(c, &fs_r[i], ld);
}

// 16 floats of the region from float `at` (a multiple of 4).
fn fs_r16(at: u32) -> array<vec4<f32>, 4> {
    let i = at / 4u;
    return array<vec4<f32>, 4>(fs_r[i], fs_r[i + 1u], fs_r[i + 2u], fs_r[i + 3u]);
}

// 16 values rounded to f16 into the f16 block at `at` (a dS beyond ±65504 is clamped; the
// flag records it).
fn fs_put_h(at: u32, v: array<vec4<f32>, 4>) {
    let lim = vec4<f32>(F16_LIMIT);
    fs_h[at] = vec4<f16>(clamp(v[0], -lim, lim));
    fs_h[at + 1u] = vec4<f16>(clamp(v[1], -lim, lim));
    fs_h[at + 2u] = vec4<f16>(clamp(v[2], -lim, lim));
    fs_h[at + 3u] = vec4<f16>(clamp(v[3], -lim, lim));
}

// Which of the lane's 16 pairs (row `row`, columns c0 … c0 + 15) are causal: column ≤ row when
// `keys_are_columns` (a query row over keys), else column ≥ row (a key row over queries); both
// in the sequence.
fn fs_mask(row: u32, c0: u32, keys_are_columns: bool) -> array<vec4<bool>, 4> {
    let ok = vec4<bool>(row < p.seq);
    let c = vec4<u32>(c0) + vec4<u32>(0u, 1u, 2u, 3u);
    let r = vec4<u32>(row);
    let s = vec4<u32>(p.seq);
    let c4 = c + vec4<u32>(4u);
    let c8 = c + vec4<u32>(8u);
    let c12 = c + vec4<u32>(12u);
    return array<vec4<bool>, 4>(
        select(c >= r, c <= r, keys_are_columns) & ok & (c < s),
        select(c4 >= r, c4 <= r, keys_are_columns) & ok & (c4 < s),
        select(c8 >= r, c8 <= r, keys_are_columns) & ok & (c8 < s),
        select(c12 >= r, c12 <= r, keys_are_columns) & ok & (c12 < s),
    );
}

// Two tiles of 16 columns (the output's dims 16·t0 … 16·t0 + 31, times f) of the subgroup's
// rows r0 … r0 + 15 to global memory through its region: each lane writes its row's 16.
fn fs_emit2(c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, rb: u32, lane: u32, second: bool, r0: u32, t0: u32, dh: u32) {
    fs_put(c0, rb);
    fs_put(c1, rb + 16u);
    subgroupBarrier();
    let r = lane / 2u;
    let h = lane % 2u;
    let v = fs_r16(rb + r * FS_LDR + 16u * h);
    if (r0 + r < p.seq) {
        let col = 16u * t0 + 16u * h;
        fl_write4(second, r0 + r, col, dh, v[0]);
        fl_write4(second, r0 + r, col + 4u, dh, v[1]);
        fl_write4(second, r0 + r, col + 8u, dh, v[2]);
        fl_write4(second, r0 + r, col + 12u, dh, v[3]);
    }
    subgroupBarrier();
}

// Whether some of the 16 values is NaN, ±Inf or beyond f16's range (loss scaling's rule).
fn fs_bad(v: array<vec4<f32>, 4>) -> bool {
    return overflows16(v[0]) | overflows16(v[1]) | overflows16(v[2]) | overflows16(v[3]);
}

// The query-major backward: dQ of workgroup w's 64 queries (the sliced pass's order), subgroup
// sg, lane `lane`. Needs FS_LDR ≥ 36 and FS_HLEN ≥ 640.
fn fs_dq(w: u32, tid: u32, sg: u32, lane: u32) {
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
    let m0 = 16u * sg;
    fs_own(tid, FL_Q, FL_DO, fl_b, fl_h, q0);
    workgroupBarrier();
    let qf = fs_frags(0u, m0);
    let df = fs_frags(64u * FS_LD, m0);
    workgroupBarrier();
    let steps = (min(q0 + FL_T, seq) + FS_STEP - 1u) / FS_STEP;
    fs_fetch(tid, FL_K, FL_V, fl_b, fl_kvh, 0u);
    fs_stage(tid, 0u);
    if (steps > 1u) {
        fs_fetch(tid, FL_K, FL_V, fl_b, fl_kvh, FS_STEP);
    }
    let r = lane / 2u;
    let h = lane % 2u;
    let row = q0 + m0 + r;
    let at = (fl_b * p.heads + fl_h) * seq + min(row, seq - 1u);
    let l = vec4<f32>(lse[at]);
    let dl = vec4<f32>(delta[at]);
    let sc = vec4<f32>(p.scale);
    let rb = m0 * FS_LDR;
    let hb = m0 * FS_LDH;
    var dq0 = coop_mat16x16<f32, C>();
    var dq1 = coop_mat16x16<f32, C>();
    var dq2 = coop_mat16x16<f32, C>();
    var dq3 = coop_mat16x16<f32, C>();
    for (var t = 0u; t < steps; t++) {
        let buf = t % 2u;
        // Step t's rows are visible; every subgroup is done with the other buffer.
        workgroupBarrier();
        fs_stage(tid, 1u - buf);
        fs_fetch(tid, FL_K, FL_V, fl_b, fl_kvh, min(t + 2u, steps - 1u) * FS_STEP);
        let kb = buf * FS_BUF;
        let vb = kb + FS_HALF;
        fs_put(fs_xyt(qf, kb), rb);
        fs_put(fs_xyt(qf, kb + 16u * FS_LD), rb + 16u);
        subgroupBarrier();
        let s = fs_r16(rb + r * FS_LDR + 16u * h);
        let mask = fs_mask(row, t * FS_STEP + 16u * h, true);
        let p0 = select(vec4<f32>(0.0), exp(sc * s[0] - l), mask[0]);
        let p1 = select(vec4<f32>(0.0), exp(sc * s[1] - l), mask[1]);
        let p2 = select(vec4<f32>(0.0), exp(sc * s[2] - l), mask[2]);
        let p3 = select(vec4<f32>(0.0), exp(sc * s[3] - l), mask[3]);
        // Every lane has read the scores.
        subgroupBarrier();
        fs_put(fs_xyt(df, vb), rb);
        fs_put(fs_xyt(df, vb + 16u * FS_LD), rb + 16u);
        subgroupBarrier();
        let d = fs_r16(rb + r * FS_LDR + 16u * h);
        let ds = array<vec4<f32>, 4>(p0 * (d[0] - dl), p1 * (d[1] - dl), p2 * (d[2] - dl), p3 * (d[3] - dl));
        fs_put_h(hb + r * FS_LDH + 4u * h, ds);
        subgroupBarrier();
        dq0 = fs_hy(dq0, hb, kb, 0u);
        dq1 = fs_hy(dq1, hb, kb, 16u);
        dq2 = fs_hy(dq2, hb, kb, 32u);
        dq3 = fs_hy(dq3, hb, kb, 48u);
    }
    let f = p.scale;
    fs_emit2(f * dq0, f * dq1, rb, lane, false, q0 + m0, 0u, dh);
    fs_emit2(f * dq2, f * dq3, rb, lane, false, q0 + m0, 2u, dh);
}

// lse and Δ of the key-major pass's steps: per buffer the 32 queries' lse, then their Δ.
var<workgroup> fs_ld: array<f32, 128>;
// The next step's value of them (invocations 0 … 63).
var<private> fs_pl: f32;

// lse (tid < 32) or Δ (32 ≤ tid < 64) of query q0 + tid % 32 of (b, head) into the register.
fn fs_fetch_rows(tid: u32, b: u32, head: u32, q0: u32) {
    let q = q0 + tid % 32u;
    let at = (b * p.heads + head) * p.seq + min(q, p.seq - 1u);
    // One load an invocation, and none past the first 64 (a whole subgroup takes each branch).
    if (tid < 32u) {
        fs_pl = select(lse[at], 0.0, q >= p.seq);
    } else if (tid < 64u) {
        fs_pl = select(delta[at], 0.0, q >= p.seq);
    }
}

// The query step of step t of the key-major walk, which runs every query head of the group in
// turn: (head g of the group, first query).
fn fs_qstep(t: u32, k0: u32, nsteps: u32) -> vec2<u32> {
    return vec2<u32>(t / nsteps, k0 + FS_STEP * (t % nsteps));
}

// The key-major backward: dK and dV of workgroup w's 64 keys (the sliced pass's order),
// subgroup sg, lane `lane`; `bad` records a dS beyond f16's range. Needs FS_LDR ≥ 36 and
// FS_HLEN ≥ 1280.
fn fs_dkdv(w: u32, tid: u32, sg: u32, lane: u32) -> bool {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nb = (seq + FL_T - 1u) / FL_T;
    let kbb = fl_key_block(w);
    // Whole workgroups past the end leave together (uniform).
    if (kbb.x >= nb) {
        return false;
    }
    let k0 = kbb.x * FL_T;
    let group = p.heads / p.kv_heads;
    let b = kbb.y / p.kv_heads;
    let kvh = kbb.y % p.kv_heads;
    // The output's (b, kv head) for `fl_store`.
    fl_set_head(b * p.heads + kvh * group);
    let m0 = 16u * sg;
    fs_own(tid, FL_K, FL_V, b, kvh, k0);
    workgroupBarrier();
    let kf = fs_frags(0u, m0);
    let vf = fs_frags(64u * FS_LD, m0);
    workgroupBarrier();
    let nsteps = (seq - k0 + FS_STEP - 1u) / FS_STEP;
    let steps = group * nsteps;
    let first = fs_qstep(0u, k0, nsteps);
    fs_fetch(tid, FL_Q, FL_DO, b, kvh * group + first.x, first.y);
    fs_fetch_rows(tid, b, kvh * group + first.x, first.y);
    fs_stage(tid, 0u);
    if (tid < 64u) {
        fs_ld[tid] = fs_pl;
    }
    if (steps > 1u) {
        let next = fs_qstep(1u, k0, nsteps);
        fs_fetch(tid, FL_Q, FL_DO, b, kvh * group + next.x, next.y);
        fs_fetch_rows(tid, b, kvh * group + next.x, next.y);
    }
    let r = lane / 2u;
    let h = lane % 2u;
    let key = k0 + m0 + r;
    let sc = vec4<f32>(p.scale);
    let rb = m0 * FS_LDR;
    let hp = m0 * FS_LDH;
    let hs = 640u + m0 * FS_LDH;
    var dk0 = coop_mat16x16<f32, C>();
    var dk1 = coop_mat16x16<f32, C>();
    var dk2 = coop_mat16x16<f32, C>();
    var dk3 = coop_mat16x16<f32, C>();
    var dv0 = coop_mat16x16<f32, C>();
    var dv1 = coop_mat16x16<f32, C>();
    var dv2 = coop_mat16x16<f32, C>();
    var dv3 = coop_mat16x16<f32, C>();
    var bad = false;
    for (var t = 0u; t < steps; t++) {
        let buf = t % 2u;
        // Step t's rows are visible; every subgroup is done with the other buffer.
        workgroupBarrier();
        fs_stage(tid, 1u - buf);
        if (tid < 64u) {
            fs_ld[64u * (1u - buf) + tid] = fs_pl;
        }
        let next = fs_qstep(min(t + 2u, steps - 1u), k0, nsteps);
        fs_fetch(tid, FL_Q, FL_DO, b, kvh * group + next.x, next.y);
        fs_fetch_rows(tid, b, kvh * group + next.x, next.y);
        let q0 = fs_qstep(t, k0, nsteps).y;
        let qb = buf * FS_BUF;
        let ob = qb + FS_HALF;
        let lb = 64u * buf + 16u * h;
        fs_put(fs_xyt(kf, qb), rb);
        fs_put(fs_xyt(kf, qb + 16u * FS_LD), rb + 16u);
        subgroupBarrier();
        let s = fs_r16(rb + r * FS_LDR + 16u * h);
        // A key row over the step's queries q0 + 16h …: causal where the query is at or past it.
        let mask = fs_mask(key, q0 + 16u * h, false);
        let lse4 = array<vec4<f32>, 4>(
            vec4<f32>(fs_ld[lb], fs_ld[lb + 1u], fs_ld[lb + 2u], fs_ld[lb + 3u]),
            vec4<f32>(fs_ld[lb + 4u], fs_ld[lb + 5u], fs_ld[lb + 6u], fs_ld[lb + 7u]),
            vec4<f32>(fs_ld[lb + 8u], fs_ld[lb + 9u], fs_ld[lb + 10u], fs_ld[lb + 11u]),
            vec4<f32>(fs_ld[lb + 12u], fs_ld[lb + 13u], fs_ld[lb + 14u], fs_ld[lb + 15u]),
        );
        let pr = array<vec4<f32>, 4>(
            select(vec4<f32>(0.0), exp(sc * s[0] - lse4[0]), mask[0] & vec4<bool>(key < seq)),
            select(vec4<f32>(0.0), exp(sc * s[1] - lse4[1]), mask[1] & vec4<bool>(key < seq)),
            select(vec4<f32>(0.0), exp(sc * s[2] - lse4[2]), mask[2] & vec4<bool>(key < seq)),
            select(vec4<f32>(0.0), exp(sc * s[3] - lse4[3]), mask[3] & vec4<bool>(key < seq)),
        );
        // Every lane has read the scores.
        subgroupBarrier();
        fs_put(fs_xyt(vf, ob), rb);
        fs_put(fs_xyt(vf, ob + 16u * FS_LD), rb + 16u);
        subgroupBarrier();
        let d = fs_r16(rb + r * FS_LDR + 16u * h);
        let lc = lb + 32u;
        let ds = array<vec4<f32>, 4>(
            pr[0] * (d[0] - vec4<f32>(fs_ld[lc], fs_ld[lc + 1u], fs_ld[lc + 2u], fs_ld[lc + 3u])),
            pr[1] * (d[1] - vec4<f32>(fs_ld[lc + 4u], fs_ld[lc + 5u], fs_ld[lc + 6u], fs_ld[lc + 7u])),
            pr[2] * (d[2] - vec4<f32>(fs_ld[lc + 8u], fs_ld[lc + 9u], fs_ld[lc + 10u], fs_ld[lc + 11u])),
            pr[3] * (d[3] - vec4<f32>(fs_ld[lc + 12u], fs_ld[lc + 13u], fs_ld[lc + 14u], fs_ld[lc + 15u])),
        );
        bad = bad | fs_bad(ds);
        fs_put_h(hp + r * FS_LDH + 4u * h, pr);
        fs_put_h(hs + r * FS_LDH + 4u * h, ds);
        subgroupBarrier();
        dv0 = fs_hy(dv0, hp, ob, 0u);
        dv1 = fs_hy(dv1, hp, ob, 16u);
        dv2 = fs_hy(dv2, hp, ob, 32u);
        dv3 = fs_hy(dv3, hp, ob, 48u);
        dk0 = fs_hy(dk0, hs, qb, 0u);
        dk1 = fs_hy(dk1, hs, qb, 16u);
        dk2 = fs_hy(dk2, hs, qb, 32u);
        dk3 = fs_hy(dk3, hs, qb, 48u);
    }
    let f = p.scale;
    fs_emit2(f * dk0, f * dk1, rb, lane, false, k0 + m0, 0u, dh);
    fs_emit2(f * dk2, f * dk3, rb, lane, false, k0 + m0, 2u, dh);
    fs_emit2(dv0, dv1, rb, lane, true, k0 + m0, 0u, dh);
    fs_emit2(dv2, dv3, rb, lane, true, k0 + m0, 2u, dh);
    return bad;
}

// Where the workgroup is not four subgroups of 32 the rows have no owner: the kernels are
// recorded only where it is (`flash_attention`'s forms), and a direct call gets NaN in the
// workgroup's rows of its outputs rather than plausible numbers.
fn fs_poison(tid: u32, second: bool, r0: u32) {
    let nan = bitcast<f32>(0x7fc00000u);
    let dh = fl_head_dim();
    for (var e = tid; e < FL_T * dh; e += FS_WG) {
        if (r0 + e / dh < p.seq) {
            fl_store(second, r0 + e / dh, e % dh, nan);
        }
    }
}
