// The backward passes of the subgroup-row form (`lib/flash_sg.wgsl`), the bodies of
// `flash_backward_dkdv16_tc` and `flash_backward_dq16_tc`:
//
//   key-major (`fs_dkdv`): K's and V's 16 rows in registers; per step of 32 queries (every
//       query head of the group in turn) Sᵀ = K·Qᵀ, P = exp(scale·S − lse), dPᵀ = V·dOᵀ,
//       dS = P ⊙ (dP − Δ), then dV += Pᵀ·dO and dK += dSᵀ·Q in accumulators (P, dS as f16);
//   query-major (`fs_dq`): Q's and dO's 16 rows in registers; per step of 32 keys S, P, dP and
//       dS as above, then dQ += dS·K.
// The rounding points and order are the sliced pair's.
//
// Needs, beyond `lib/flash_sg.wgsl`, `lib/flash_bwd.wgsl` (the walks' block order) and the
// kernel's `lse` and `delta`.

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
        if (t + 1u < steps) {
            fs_stage(tid, 1u - buf);
        }
        if (t + 2u < steps) {
            fs_fetch(tid, FL_K, FL_V, fl_b, fl_kvh, (t + 2u) * FS_STEP);
        }
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
        if (t + 1u < steps) {
            fs_stage(tid, 1u - buf);
            if (tid < 64u) {
                fs_ld[64u * (1u - buf) + tid] = fs_pl;
            }
        }
        if (t + 2u < steps) {
            let next = fs_qstep(t + 2u, k0, nsteps);
            fs_fetch(tid, FL_Q, FL_DO, b, kvh * group + next.x, next.y);
            fs_fetch_rows(tid, b, kvh * group + next.x, next.y);
        }
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

