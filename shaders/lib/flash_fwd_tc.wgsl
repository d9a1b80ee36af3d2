// The tensor-core body of `flash_forward16_tc` (head dim ≤ 64, eight subgroups of 32): the
// causal GQA forward of `lib/flash_fwd.wgsl` with Q held in registers, K and V staged whole per
// step of 32 keys into two alternating buffers, and O kept in cooperative-matrix accumulators
// for the whole walk.
//
// Why this form: the sliced forward re-stages Q for every key block, passes two barriers per
// staged slice, and folds each P·V block into the row owners' registers through workgroup
// memory (a store, a barrier and a read of 64 × 64 floats per block), because the online
// softmax rescales O by α = exp(m − m_new) every time a row's maximum grows and WGSL gives no
// element access to an accumulator. Here a row's probabilities are taken relative to a
// reference maximum m_ref that moves only when some row's block maximum passes it by more than
// FW_TAU (P ≤ e^FW_TAU ≈ 2981, well inside f16 and f32): the decision is one value for the whole
// workgroup (`workgroupUniformLoad`), and only then O takes the round trip through workgroup
// memory to be rescaled. With scores of realistic spread that happens in the first steps or
// never. While the row owners work on step t's softmax, step t + 1's K and V are loaded and
// stored into the other buffer, so a step passes two barriers: after the scores' store, and the
// uniform load (which also publishes P and the next step's operands).
//
// A step (keys k0 … k0 + 31, query rows q0 … q0 + 63):
//   1. S = Q·Kᵀ (64 × 32): subgroup sg's tile rows 16·(sg / 2) …, keys 16·(sg % 2) …, stored
//      unscaled to `fw_r`;
//   2. the row owners (row er = vt / 4, keys ec = 8·(vt % 4) … +7, vt = 32·sg + lane): scores
//      scale·S, the causal mask, the row's step maximum across its four owners (lanes of one
//      subgroup), P = exp(s − m_ref) rounded to f16 into `fw_p`, and whether the row passed
//      m_ref + FW_TAU (one flag per subgroup);
//   3. if any row did (uniform): every row's m_ref = max(m_ref, step maximum), its part of ℓ
//      and its O rows scaled by α, P written again;
//   4. O += P·V (64 × 64): subgroup sg's two tiles rows 16·(sg / 2) …, dims 32·(sg % 2) + 16t ….
// ℓ sums the unrounded P (f32); at the end O / ℓ and lse = m_ref + log ℓ. The first step sets
// m_ref to its maxima (every row in the sequence has key 0). Rows past the sequence are masked
// whole and take no part in the decision. Everything in f32 but Q, K, V and P. Fixed orders: the
// bits repeat run to run. The rounding points are the sliced forward's, with P relative to
// m_ref instead of the running maximum and steps of 32 keys instead of blocks of 64 (the tests'
// float64 model takes the form that runs).
//
// With the kernel's FL_EXACT (S a multiple of 64, head dim 64: every walked row exists) K's and
// V's rows are read without the bounds test, which on the NVIDIA driver runs the loop faster
// (BENCHMARKS.md §4); the values read are the same.
//
// Workgroup memory: the two step buffers 18 KiB (Q's 64 rows pass through the first before the
// walk), `fw_r` 9 KiB, `fw_p` 5 KiB, the flags 32 bytes: 32,800 bytes
// (`flash_attention::WORKGROUP_BYTES_FWD_TC`).
//
// Needs `lib/flash.wgsl` (the head, `fl_write4`), `lib/flash_f16.wgsl` (`fl_load`),
// `lib/flash_fwd.wgsl` (`fl_p4`, `fl_max4`, `fl_sum4`) and the kernel's `fl_store`, `lse`, `k`, `v`
// and `override FL_EXACT: bool`.

//#if coop
// vec4<f16>s per staged row: 64 halves and 8 of padding.
const FW_LD: u32 = 18u;
// Keys per step.
const FW_STEP: u32 = 32u;
// One step buffer: K's 32 rows, then V's.
const FW_BUF: u32 = 2u * FW_STEP * FW_LD;
// Floats per row of the 64 × 32 score block (a multiple of 4: the block is held as vec4s).
const FW_LDR: u32 = 36u;
// vec4<f16>s per row of the 64 × 32 P block (32 halves and 8 of padding).
const FW_LDP: u32 = 10u;
// How far (natural log) a row's maximum may pass the reference before O is rescaled.
const FW_TAU: f32 = 8.0;
const FW_F16_MAX: f32 = 65504.0;

var<workgroup> fw_kv: array<vec4<f16>, 2304>;
// The score block as vec4s: a row owner reads its 8 floats as two 16-byte loads, and with rows
// 9 vec4s apart the eight lanes of a quarter subgroup fall on distinct banks (scalar loads of
// the same floats would meet 4-way conflicts).
var<workgroup> fw_r: array<vec4<f32>, 576>;
var<workgroup> fw_p: array<vec4<f16>, 640>;
var<workgroup> fw_grow: array<u32, 8>;
const_assert 2u * FW_BUF == 2304u && 64u * FW_LD <= FW_BUF;
const_assert 64u * FW_LDR == 4u * 576u && FW_LDR % 4u == 0u && 64u * FW_LDP == 640u;
// What `flash_attention::WORKGROUP_BYTES_FWD_TC` says.
const_assert 2304u * 8u + 576u * 16u + 640u * 8u + 32u == 32800u;

// Step t's loads: vec4s tid + 256e (e = 0 … 3) of K's and V's rows k0 … k0 + 31 (zeros past the
// sequence). Loaded before they are stored so they are in flight during the softmax.
fn fw_load_step(tid: u32, k0: u32) -> array<vec4<f16>, 4> {
    var out: array<vec4<f16>, 4>;
    let f0 = tid;
    let f1 = tid + WG;
    if (FL_EXACT) {
        // Rows of the sequence, 16 vec4s a head.
        let i0 = ((fl_b * p.seq + k0 + f0 / 16u) * p.kv_heads + fl_kvh) * 16u + f0 % 16u;
        let i1 = ((fl_b * p.seq + k0 + f1 / 16u) * p.kv_heads + fl_kvh) * 16u + f1 % 16u;
        out[0] = k[i0];
        out[1] = k[i1];
        out[2] = v[i0];
        out[3] = v[i1];
        return out;
    }
    // e = 0, 1: K (rows f / 16); e = 2, 3: V.
    out[0] = fl_load(FL_K, k0 + f0 / 16u, f0 % 16u);
    out[1] = fl_load(FL_K, k0 + f1 / 16u, f1 % 16u);
    out[2] = fl_load(FL_V, k0 + f0 / 16u, f0 % 16u);
    out[3] = fl_load(FL_V, k0 + f1 / 16u, f1 % 16u);
    return out;
}

fn fw_store_step(tid: u32, buf: u32, x: array<vec4<f16>, 4>) {
    let base = buf * FW_BUF;
    let f0 = tid;
    let f1 = tid + WG;
    fw_kv[base + (f0 / 16u) * FW_LD + f0 % 16u] = x[0];
    fw_kv[base + (f1 / 16u) * FW_LD + f1 % 16u] = x[1];
    fw_kv[base + FW_STEP * FW_LD + (f0 / 16u) * FW_LD + f0 % 16u] = x[2];
    fw_kv[base + FW_STEP * FW_LD + (f1 / 16u) * FW_LD + f1 % 16u] = x[3];
}

// Q's fragment of rows m0 …, dims 16s … (row-major, from the first buffer).
fn fw_q_frag(m0: u32, s: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&fw_kv[m0 * FW_LD + 4u * s], FW_LD);
}

// The products, each in its own function (naga checks cooperative-matrix operations where they
// are written, not at calls; see `lib/flash_bwd_tc.wgsl`).

// S's tile (rows m0 …, keys n0 … of the step in buffer `buf`) = Q·Kᵀ, into `fw_r`.
fn fw_scores(q: array<coop_mat16x16<f16, A>, 4>, buf: u32, m0: u32, n0: u32) {
    let kb = buf * FW_BUF + n0 * FW_LD;
    var c = coop_mat16x16<f32, C>();
    c = coopMultiplyAdd(q[0], coopLoad<coop_mat16x16<f16, B>>(&fw_kv[kb], FW_LD), c);
    c = coopMultiplyAdd(q[1], coopLoad<coop_mat16x16<f16, B>>(&fw_kv[kb + 4u], FW_LD), c);
    c = coopMultiplyAdd(q[2], coopLoad<coop_mat16x16<f16, B>>(&fw_kv[kb + 8u], FW_LD), c);
    c = coopMultiplyAdd(q[3], coopLoad<coop_mat16x16<f16, B>>(&fw_kv[kb + 12u], FW_LD), c);
    let at = (m0 * FW_LDR + n0) / 4u;
    let ld = FW_LDR / 4u;
    coopStoreT(c, &fw_r[at], ld);
}

// acc + P·V over the step's 32 keys: P rows m0 … as stored, V of buffer `buf`, dims n0 ….
fn fw_pv(acc: coop_mat16x16<f32, C>, buf: u32, m0: u32, n0: u32) -> coop_mat16x16<f32, C> {
    let vb = buf * FW_BUF + FW_STEP * FW_LD + n0 / 4u;
    let a0 = coopLoadT<coop_mat16x16<f16, A>>(&fw_p[m0 * FW_LDP], FW_LDP);
    let a1 = coopLoadT<coop_mat16x16<f16, A>>(&fw_p[m0 * FW_LDP + 4u], FW_LDP);
    var c = coopMultiplyAdd(a0, coopLoadT<coop_mat16x16<f16, B>>(&fw_kv[vb], FW_LD), acc);
    c = coopMultiplyAdd(a1, coopLoadT<coop_mat16x16<f16, B>>(&fw_kv[vb + 16u * FW_LD], FW_LD), c);
    return c;
}

// A tile into `fw_r` at the score tile's slot (rows m0 …, columns n0 …).
fn fw_put(c: coop_mat16x16<f32, C>, m0: u32, n0: u32) {
    let at = (m0 * FW_LDR + n0) / 4u;
    let ld = FW_LDR / 4u;
    coopStoreT(c, &fw_r[at], ld);
}

// The tile back from that slot.
fn fw_get(m0: u32, n0: u32) -> coop_mat16x16<f32, C> {
    return coopLoadT<coop_mat16x16<f32, C>>(&fw_r[(m0 * FW_LDR + n0) / 4u], FW_LDR / 4u);
}

// The 8 floats of the score block from float `at` (a multiple of 4).
fn fw_r8(at: u32) -> array<vec4<f32>, 2> {
    let i = at / 4u;
    return array<vec4<f32>, 2>(fw_r[i], fw_r[i + 1u]);
}

// Scales the row owner's 8 floats of `fw_r` (row er, columns ec …) by f.
fn fw_scale8(er: u32, ec: u32, f: f32) {
    let i = (er * FW_LDR + ec) / 4u;
    fw_r[i] = f * fw_r[i];
    fw_r[i + 1u] = f * fw_r[i + 1u];
}

// One O tile scaled row by row (each owner's α) through its slot of `fw_r`. Call in uniform
// control flow, after every reader of `fw_r` is done; ends with a barrier.
fn fw_rescale(c: coop_mat16x16<f32, C>, m0: u32, n0: u32, er: u32, ec: u32, alpha: f32) -> coop_mat16x16<f32, C> {
    fw_put(c, m0, n0);
    workgroupBarrier();
    fw_scale8(er, ec, alpha);
    workgroupBarrier();
    let out = fw_get(m0, n0);
    workgroupBarrier();
    return out;
}

// The row owner's P (keys ec … ec + 7 of its row; s is NEG_INF where masked, P 0 there) relative
// to m, into `fw_p`; returns the unrounded values.
fn fw_put_p(er: u32, ec: u32, s: array<vec4<f32>, 2>, m: f32) -> array<vec4<f32>, 2> {
    let p0 = fl_p4(s[0], m);
    let p1 = fl_p4(s[1], m);
    // A row that passed m_ref + FW_TAU has its P written again after the rescale; until then the
    // clamp keeps it finite.
    fw_p[er * FW_LDP + ec / 4u] = vec4<f16>(min(p0, vec4<f32>(FW_F16_MAX)));
    fw_p[er * FW_LDP + ec / 4u + 1u] = vec4<f16>(min(p1, vec4<f32>(FW_F16_MAX)));
    return array<vec4<f32>, 2>(p0, p1);
}

// One O tile (t: dims 16t … of each subgroup's 32) divided by the rows' ℓ into `o`: every
// subgroup's tile to its slot, a barrier, the row owners write their 8 elements (`fl_write4`),
// a barrier.
fn fw_emit(c: coop_mat16x16<f32, C>, m0: u32, n0: u32, er: u32, ec: u32, row: u32, t: u32, dh: u32, inv_l: f32) {
    fw_put(c, m0, n0);
    workgroupBarrier();
    if (row < p.seq) {
        let v = fw_r8(er * FW_LDR + ec);
        // Slot column ec lies in subgroup (ec / 16)'s tiles: dims 32·(ec / 16) + 16t + ec % 16 ….
        let col = 32u * (ec / 16u) + 16u * t + ec % 16u;
        fl_write4(false, row, col, dh, inv_l * v[0]);
        fl_write4(false, row, col + 4u, dh, inv_l * v[1]);
    }
    workgroupBarrier();
}

// Workgroup w (query block, longest first, and (b, h), as the sliced forward), subgroup sg,
// lane `lane`. Call with eight subgroups of 32.
fn fw_forward(w: u32, tid: u32, sg: u32, lane: u32) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nqb = (seq + FL_T - 1u) / FL_T;
    let nbh = p.batch * p.heads;
    // Whole workgroups past the end leave together (uniform).
    if (w >= nbh * nqb) {
        return;
    }
    let qb = nqb - 1u - w / nbh;
    let bh = w % nbh;
    fl_set_head(bh);
    let q0 = qb * FL_T;
    // Q's 64 rows through the first buffer into registers.
    for (var e = tid; e < 64u * 16u; e += WG) {
        fw_kv[(e / 16u) * FW_LD + e % 16u] = fl_load(FL_Q, q0 + e / 16u, e % 16u);
    }
    workgroupBarrier();
    let m0 = 16u * (sg / 2u);
    let sn = 16u * (sg % 2u);
    let on = 32u * (sg % 2u);
    let q = array<coop_mat16x16<f16, A>, 4>(fw_q_frag(m0, 0u), fw_q_frag(m0, 1u), fw_q_frag(m0, 2u), fw_q_frag(m0, 3u));
    // Every fragment of Q is read before the first step overwrites the buffer.
    workgroupBarrier();
    let kend = min(q0 + FL_T, seq);
    let steps = (kend + FW_STEP - 1u) / FW_STEP;
    fw_store_step(tid, 0u, fw_load_step(tid, 0u));
    workgroupBarrier();
    // The row owner: row er of the block, keys ec … ec + 7 of a step.
    let vt = 32u * sg + lane;
    let er = vt / 4u;
    let ec = 8u * (vt % 4u);
    let row = q0 + er;
    let inside = row < seq;
    let sc = vec4<f32>(p.scale);
    var o0 = coop_mat16x16<f32, C>();
    var o1 = coop_mat16x16<f32, C>();
    var m_ref = NEG_INF;
    var l_part = 0.0;
    for (var t = 0u; t < steps; t++) {
        let buf = t % 2u;
        let k0 = t * FW_STEP;
        fw_scores(q, buf, m0, sn);
        // S is visible, and every reader of the other buffer (the last step's V) is done.
        workgroupBarrier();
        let next = t + 1u < steps;
        var nx: array<vec4<f16>, 4>;
        if (next) {
            nx = fw_load_step(tid, k0 + FW_STEP);
        }
        let raw = fw_r8(er * FW_LDR + ec);
        let keys = vec4<u32>(k0 + ec) + vec4<u32>(0u, 1u, 2u, 3u);
        let ok = vec4<bool>(inside);
        let mask = array<vec4<bool>, 2>((keys <= vec4<u32>(row)) & ok, (keys + vec4<u32>(4u) <= vec4<u32>(row)) & ok);
        let s = array<vec4<f32>, 2>(
            select(vec4<f32>(NEG_INF), sc * raw[0], mask[0]),
            select(vec4<f32>(NEG_INF), sc * raw[1], mask[1]),
        );
        // The row's step maximum: its four owners are lanes 4j … 4j + 3 of this subgroup.
        var mx = max(fl_max4(s[0]), fl_max4(s[1]));
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        mx = max(mx, subgroupShuffleXor(mx, 2u));
        if (t == 0u) {
            m_ref = mx;
        }
        let grow = subgroupAny(inside && mx > m_ref + FW_TAU);
        if (lane == 0u) {
            fw_grow[sg] = u32(grow);
        }
        var pr = fw_put_p(er, ec, s, m_ref);
        if (next) {
            fw_store_step(tid, 1u - buf, nx);
        }
        // Publishes P, the next step's K and V, and the flags.
        let g = workgroupUniformLoad(&fw_grow);
        if ((g[0] | g[1] | g[2] | g[3] | g[4] | g[5] | g[6] | g[7]) != 0u) {
            let m_new = max(m_ref, mx);
            let alpha = select(1.0, exp(m_ref - m_new), inside);
            m_ref = m_new;
            l_part = l_part * alpha;
            pr = fw_put_p(er, ec, s, m_ref);
            // The scores' readers are done (the uniform load); P is published by the barriers
            // of the round trips.
            o0 = fw_rescale(o0, m0, sn, er, ec, alpha);
            o1 = fw_rescale(o1, m0, sn, er, ec, alpha);
        }
        l_part = l_part + (fl_sum4(pr[0]) + fl_sum4(pr[1]));
        o0 = fw_pv(o0, buf, m0, on);
        o1 = fw_pv(o1, buf, m0, on + 16u);
    }
    // ℓ: the row's four parts, in a fixed order.
    let l2 = l_part + subgroupShuffleXor(l_part, 1u);
    let l = l2 + subgroupShuffleXor(l2, 2u);
    // The last readers of `fw_r` are done.
    workgroupBarrier();
    let inv_l = 1.0 / l;
    fw_emit(o0, m0, sn, er, ec, row, 0u, dh, inv_l);
    fw_emit(o1, m0, sn, er, ec, row, 1u, dh, inv_l);
    if (inside && ec == 0u) {
        lse[bh * seq + row] = m_ref + log(l);
    }
}

// Where the workgroup does not have eight subgroups the tiles have no owner:
// `flash_attention::forward16` never runs this kernel there, and a direct call gets NaN in the
// workgroup's rows of O rather than plausible numbers.
fn fw_poison(w: u32, tid: u32) {
    let nqb = (p.seq + FL_T - 1u) / FL_T;
    let nbh = p.batch * p.heads;
    if (w < nbh * nqb) {
        fl_set_head(w % nbh);
        let q0 = (nqb - 1u - w / nbh) * FL_T;
        let dh = fl_head_dim();
        let nan = bitcast<f32>(0x7fc00000u);
        for (var e = tid; e < FL_T * dh; e += WG) {
            if (q0 + e / dh < p.seq) {
                fl_store(false, q0 + e / dh, e % dh, nan);
            }
        }
    }
}
//#endif
