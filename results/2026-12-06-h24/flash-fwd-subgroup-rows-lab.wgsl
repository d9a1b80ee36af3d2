// --- KERNEL: flash_forward16_sg ---
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
//#include "lib/flash.wgsl"
//#include "lib/flash_fwd16_io.wgsl"
//#include "lib/flash_f16.wgsl"
//#include "lib/flash_coop.wgsl"
//#include "lib/flash_fwd.wgsl"
//#include "lib/f16x4.wgsl"
//#include "lib/flash_sg.wgsl"
//#include "lib/flash_sg_fwd.wgsl"
const FS_LDR: u32 = 36u;
const FS_HLEN: u32 = 640u;

@compute @workgroup_size(FS_WG)
fn flash_forward16_sg(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let w = flat_wg(wid, nwg);
    for (var fits = u32(nsg == FS_SG); fits == 1u; fits = 0u) {
        fs_forward(w, tid, sg, lane);
    }
    let nqb = (p.seq + FL_T - 1u) / FL_T;
    if (nsg != FS_SG && w < p.batch * p.heads * nqb) {
        fl_set_head(w % (p.batch * p.heads));
        fs_poison(tid, false, (nqb - 1u - w / (p.batch * p.heads)) * FL_T);
    }
}

// The forward in the subgroup-row form of `lib/flash_sg.wgsl` (head dim ≤ 64): each of four
// subgroups of 32 owns 16 of the workgroup's 64 queries, Q's fragments in registers; K and V
// are staged per step of 32 keys into alternating buffers (one workgroup barrier a step); S and
// P pass through the subgroup's own workgroup memory; O stays in four cooperative-matrix
// accumulators for the whole walk.
//
// The online softmax takes a row's P relative to a reference maximum m_ref that moves only when
// some row of the subgroup passes its reference by more than FS_TAU (P ≤ e^FS_TAU ≈ 2981,
// inside f16): the decision is one value for the subgroup (`subgroupAny`), and only then O's
// tiles take a round trip through the subgroup's region to be scaled row by row by
// α = exp(m_ref − m_new). With scores of realistic spread that happens in the first steps or
// never. The first step sets m_ref to its maxima (every row has key 0). ℓ sums the unrounded P
// (f32); at the end O / ℓ and lse = m_ref + log ℓ. Fixed orders: the bits repeat run to run.

const FS_TAU: f32 = 8.0;

// Scales the lane's 16 floats of the region from float `at` by f.
fn fs_scale16(at: u32, f: f32) {
    let i = at / 4u;
    let fv = vec4<f32>(f);
    fs_r[i] = fv * fs_r[i];
    fs_r[i + 1u] = fv * fs_r[i + 1u];
    fs_r[i + 2u] = fv * fs_r[i + 2u];
    fs_r[i + 3u] = fv * fs_r[i + 3u];
}

// A tile back from the region at float `at`.
fn fs_get(at: u32) -> coop_mat16x16<f32, C> {
    let i = at / 4u;
    let ld = FS_LDR / 4u;
    return coopLoadT<coop_mat16x16<f32, C>>(&fs_r[i], ld);
}

// Two tiles of the subgroup's rows scaled row by row (each lane's α) through the region. Call
// when every lane is done reading the region; ends with a subgroup barrier.
fn fs_rescale2(c: array<coop_mat16x16<f32, C>, 2>, rb: u32, mine: u32, alpha: f32) -> array<coop_mat16x16<f32, C>, 2> {
    fs_put(c[0], rb);
    fs_put(c[1], rb + 16u);
    subgroupBarrier();
    fs_scale16(mine, alpha);
    subgroupBarrier();
    let out = array<coop_mat16x16<f32, C>, 2>(fs_get(rb), fs_get(rb + 16u));
    subgroupBarrier();
    return out;
}

// Two O tiles (dims 16·t0 … 16·t0 + 31) of the subgroup's rows r0 … divided by ℓ (each lane
// its row's 1/ℓ) into O and its f16 copy: each lane writes its row's 16 elements.
fn fs_emit_o(c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, rb: u32, mine: u32, row: u32, col: u32, dh: u32, inv_l: f32) {
    fs_put(c0, rb);
    fs_put(c1, rb + 16u);
    subgroupBarrier();
    let v = fs_r16(mine);
    if (row < p.seq) {
        let f = vec4<f32>(inv_l);
        fl_write4(false, row, col, dh, f * v[0]);
        fl_write4(false, row, col + 4u, dh, f * v[1]);
        fl_write4(false, row, col + 8u, dh, f * v[2]);
        fl_write4(false, row, col + 12u, dh, f * v[3]);
    }
    subgroupBarrier();
}

// Workgroup w (query block, longest first, and (b, h), as the sliced forward), subgroup sg,
// lane `lane`. Needs FS_LDR ≥ 36 and FS_HLEN ≥ 640.
@diagnostic(off, subgroup_uniformity)
fn fs_forward(w: u32, tid: u32, sg: u32, lane: u32) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nqb = (seq + FL_T - 1u) / FL_T;
    let nbh = p.batch * p.heads;
    // Whole workgroups past the end leave together (uniform).
    if (w >= nbh * nqb) {
        return;
    }
    let bh = w % nbh;
    fl_set_head(bh);
    let q0 = (nqb - 1u - w / nbh) * FL_T;
    let m0 = 16u * sg;
    for (var e = tid; e < 64u * 16u; e += FS_WG) {
        fs_kv[(e / 16u) * FS_LD + e % 16u] = fs_load(FL_Q, fl_b, fl_h, q0 + e / 16u, e % 16u);
    }
    workgroupBarrier();
    let qf = fs_frags(0u, m0);
    // Every fragment of Q is read before the first step overwrites the buffer.
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
    let inside = row < seq;
    let sc = vec4<f32>(p.scale);
    let ninf = vec4<f32>(NEG_INF);
    let rb = m0 * FS_LDR;
    let mine = rb + r * FS_LDR + 16u * h;
    let hb = m0 * FS_LDH;
    var o01 = array<coop_mat16x16<f32, C>, 2>(coop_mat16x16<f32, C>(), coop_mat16x16<f32, C>());
    var o23 = array<coop_mat16x16<f32, C>, 2>(coop_mat16x16<f32, C>(), coop_mat16x16<f32, C>());
    var m_ref = NEG_INF;
    var l_part = 0.0;
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
        fs_put(fs_xyt(qf, kb), rb);
        fs_put(fs_xyt(qf, kb + 16u * FS_LD), rb + 16u);
        subgroupBarrier();
        let raw = fs_r16(mine);
        let mask = fs_mask(row, t * FS_STEP + 16u * h, true);
        let s = array<vec4<f32>, 4>(
            select(ninf, sc * raw[0], mask[0]),
            select(ninf, sc * raw[1], mask[1]),
            select(ninf, sc * raw[2], mask[2]),
            select(ninf, sc * raw[3], mask[3]),
        );
        // The row's step maximum: its two owners are lanes 2r and 2r + 1.
        var mx = max(max(fl_max4(s[0]), fl_max4(s[1])), max(fl_max4(s[2]), fl_max4(s[3])));
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        if (t == 0u) {
            m_ref = mx;
        }
        // One decision for the subgroup: every lane takes the branch or none does (the
        // diagnostic is off for this function; a loop, because naga checks the conditions of
        // `if`s around cooperative-matrix operations and not those of loops).
        for (var grow = u32(subgroupAny(inside && mx > m_ref + FS_TAU)); grow == 1u; grow = 0u) {
            let m_new = max(m_ref, mx);
            let alpha = select(1.0, exp(m_ref - m_new), inside);
            m_ref = m_new;
            l_part = l_part * alpha;
            // Every lane has its scores in registers: the region is free.
            subgroupBarrier();
            o01 = fs_rescale2(o01, rb, mine, alpha);
            o23 = fs_rescale2(o23, rb, mine, alpha);
        }
        let pr = array<vec4<f32>, 4>(fl_p4(s[0], m_ref), fl_p4(s[1], m_ref), fl_p4(s[2], m_ref), fl_p4(s[3], m_ref));
        l_part = l_part + ((fl_sum4(pr[0]) + fl_sum4(pr[1])) + (fl_sum4(pr[2]) + fl_sum4(pr[3])));
        fs_put_h(hb + r * FS_LDH + 4u * h, pr);
        subgroupBarrier();
        let vb = kb + FS_HALF;
        o01[0] = fs_hy(o01[0], hb, vb, 0u);
        o01[1] = fs_hy(o01[1], hb, vb, 16u);
        o23[0] = fs_hy(o23[0], hb, vb, 32u);
        o23[1] = fs_hy(o23[1], hb, vb, 48u);
    }
    // ℓ: the row's two parts, in a fixed order.
    let l = l_part + subgroupShuffleXor(l_part, 1u);
    // The last reads of the region are done.
    subgroupBarrier();
    let inv_l = 1.0 / l;
    fs_emit_o(o01[0], o01[1], rb, mine, row, 16u * h, dh, inv_l);
    fs_emit_o(o23[0], o23[1], rb, mine, row, 32u + 16u * h, dh, inv_l);
    if (inside && h == 0u) {
        lse[bh * seq + row] = m_ref + log(l);
    }
}
