// The tensor-core forms of the flash-attention products (the f16 kernels' `//#if coop`
// variants; `lib/flash.wgsl` has the portable forms and the layouts): 16×16×16 cooperative
// matrices, f16 operands from workgroup memory, f32 accumulators. Eight subgroups (256
// invocations of 32: the kernels run these only when `num_subgroups` is 8, else the portable
// products); subgroup sg takes rows 16·(sg / 2) … +15 and columns 32·(sg % 2) … +31 of every
// 64 × 64 result, as two tiles side by side (one A fragment, two B fragments per k-step).
// Results reach the invocations through `fl_r` (f32, FL_LDR floats per row): the scores for the
// softmax or dS, and the value blocks for the row owners' registers. Every pointer and stride
// is a multiple of 16 bytes (FL_LDS, FL_LDV, FL_LDP / 4 even, FL_LDR a multiple of 4), every
// `coopStore` index and stride a `let` (naga 30's SPIR-V writer panics otherwise).
//
// Needs, beyond `lib/flash.wgsl`: FL_DC == FL_KS == 32, `fl_r`, FL_LDR, the P/dS block
// `fl_ps: array<vec4<f16>, 64·FL_LDP/4>` and FL_LDP, and `fl_sg` set to `subgroup_id`.

//#if coop
const_assert FL_DC == 32u && FL_KS == 32u;
const_assert FL_LDS % 2u == 0u && FL_LDV % 2u == 0u && FL_LDP % 8u == 0u && FL_LDR % 4u == 0u;

var<private> fl_sg: u32;

// Stages score slice d0 … d0 + FL_DC − 1 of X rows x0 … and Y rows y0 … (64 each), both as rows. Call in
// uniform control flow; starts with a barrier (earlier readers of `fl_st` are done) and ends
// with one (the slice is visible).
fn fl_stage_scores(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, d0: u32) {
    workgroupBarrier();
    fl_stage(tid, xop, x0, FL_T, d0 / 4u, FL_DC / 4u, FL_LDS, 0u);
    fl_stage(tid, yop, y0, FL_T, d0 / 4u, FL_DC / 4u, FL_LDS, FL_T * FL_LDS);
    workgroupBarrier();
}

// A fragment of the staged X rows (16·(sg / 2) …) at staged dims 16s …: row-major.
fn fl_frag_x(s: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&fl_st[16u * (fl_sg / 2u) * FL_LDS + 4u * s], FL_LDS);
}

// B fragment (dims 16s …, Y rows 32·(sg % 2) + 16t …): Y stored one row per key, so column-major.
fn fl_frag_y(s: u32, t: u32) -> coop_mat16x16<f16, B> {
    let row = 32u * (fl_sg % 2u) + 16u * t;
    return coopLoad<coop_mat16x16<f16, B>>(&fl_st[FL_T * FL_LDS + row * FL_LDS + 4u * s], FL_LDS);
}

// Stores the subgroup's two tiles (a left, b right) into `fl_r`.
fn fl_store2(a: coop_mat16x16<f32, C>, b: coop_mat16x16<f32, C>) {
    let at = 16u * (fl_sg / 2u) * FL_LDR + 32u * (fl_sg % 2u);
    let at2 = at + 16u;
    let ld = FL_LDR;
    coopStoreT(a, &fl_r[at], ld);
    coopStoreT(b, &fl_r[at2], ld);
}

// The score product on tensor cores: R = scale · X·Yᵀ (X rows x0 …, Y rows y0 …, head dim dh),
// then a barrier. Call in uniform control flow.
fn fl_scores_coop(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, dh: u32, scale: f32) {
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    for (var d0 = 0u; d0 < dh; d0 += FL_DC) {
        fl_stage_scores(tid, xop, x0, yop, y0, d0);
        let a0 = fl_frag_x(0u);
        c0 = coopMultiplyAdd(a0, fl_frag_y(0u, 0u), c0);
        c1 = coopMultiplyAdd(a0, fl_frag_y(0u, 1u), c1);
        let a1 = fl_frag_x(1u);
        c0 = coopMultiplyAdd(a1, fl_frag_y(1u, 0u), c0);
        c1 = coopMultiplyAdd(a1, fl_frag_y(1u, 1u), c1);
    }
    fl_store2(scale * c0, scale * c1);
    workgroupBarrier();
}

// The score tile of the portable layout (fl_s) from R.
fn fl_tile_from_r(tid: u32) {
    let r0 = 4u * (tid / 16u) * FL_LDR + 4u * (tid % 16u);
    let r1 = r0 + FL_LDR;
    let r2 = r0 + 2u * FL_LDR;
    let r3 = r0 + 3u * FL_LDR;
    fl_s[0] = vec4<f32>(fl_r[r0], fl_r[r0 + 1u], fl_r[r0 + 2u], fl_r[r0 + 3u]);
    fl_s[1] = vec4<f32>(fl_r[r1], fl_r[r1 + 1u], fl_r[r1 + 2u], fl_r[r1 + 3u]);
    fl_s[2] = vec4<f32>(fl_r[r2], fl_r[r2 + 1u], fl_r[r2 + 2u], fl_r[r2 + 3u]);
    fl_s[3] = vec4<f32>(fl_r[r3], fl_r[r3 + 1u], fl_r[r3 + 2u], fl_r[r3 + 3u]);
}

// B fragment of a staged value slice: slice rows 16s …, columns 32·(sg % 2) + 16t … of the
// chunk; row-major.
fn fl_frag_v(s: u32, t: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&fl_st[16u * s * FL_LDV + 8u * (fl_sg % 2u) + 4u * t], FL_LDV);
}

// A fragment of the P/dS block as stored (rows 16·(sg / 2) …, columns k …): row-major.
fn fl_frag_pn(k: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&fl_ps[16u * (fl_sg / 2u) * (FL_LDP / 4u) + k / 4u], FL_LDP / 4u);
}

// A fragment of the block transposed (A(m, k) = block[k][m], m = 16·(sg / 2) …): column-major.
fn fl_frag_pt(k: u32) -> coop_mat16x16<f16, A> {
    return coopLoad<coop_mat16x16<f16, A>>(&fl_ps[k * (FL_LDP / 4u) + 4u * (fl_sg / 2u)], FL_LDP / 4u);
}

// acc += block[rows][ks … ks + 31] · slice (columns 32·(sg % 2) + 16t …): one staged value
// slice of a value product with the block as stored.
fn fl_mma_n(acc: coop_mat16x16<f32, C>, ks: u32, t: u32) -> coop_mat16x16<f32, C> {
    let c = coopMultiplyAdd(fl_frag_pn(ks), fl_frag_v(0u, t), acc);
    return coopMultiplyAdd(fl_frag_pn(ks + 16u), fl_frag_v(1u, t), c);
}

// The same with the block transposed.
fn fl_mma_t(acc: coop_mat16x16<f32, C>, ks: u32, t: u32) -> coop_mat16x16<f32, C> {
    let c = coopMultiplyAdd(fl_frag_pt(ks), fl_frag_v(0u, t), acc);
    return coopMultiplyAdd(fl_frag_pt(ks + 16u), fl_frag_v(1u, t), c);
}

// Row owner's accumulators of chunk c (a literal; fl_acc, or fl_acc2 when `second`) ←
// alpha · themselves + R's row i, columns 16qq … 16qq + 15.
fn fl_fold(tid: u32, second: bool, c: u32, alpha: f32) {
    let at = fl_row(tid) * FL_LDR + 16u * fl_quarter(tid);
    let r0 = vec4<f32>(fl_r[at], fl_r[at + 1u], fl_r[at + 2u], fl_r[at + 3u]);
    let r1 = vec4<f32>(fl_r[at + 4u], fl_r[at + 5u], fl_r[at + 6u], fl_r[at + 7u]);
    let r2 = vec4<f32>(fl_r[at + 8u], fl_r[at + 9u], fl_r[at + 10u], fl_r[at + 11u]);
    let r3 = vec4<f32>(fl_r[at + 12u], fl_r[at + 13u], fl_r[at + 14u], fl_r[at + 15u]);
    let av = vec4<f32>(alpha);
    if (second) {
        fl_acc2[4u * c] = fma(av, fl_acc2[4u * c], r0);
        fl_acc2[4u * c + 1u] = fma(av, fl_acc2[4u * c + 1u], r1);
        fl_acc2[4u * c + 2u] = fma(av, fl_acc2[4u * c + 2u], r2);
        fl_acc2[4u * c + 3u] = fma(av, fl_acc2[4u * c + 3u], r3);
    } else {
        fl_acc[4u * c] = fma(av, fl_acc[4u * c], r0);
        fl_acc[4u * c + 1u] = fma(av, fl_acc[4u * c + 1u], r1);
        fl_acc[4u * c + 2u] = fma(av, fl_acc[4u * c + 2u], r2);
        fl_acc[4u * c + 3u] = fma(av, fl_acc[4u * c + 3u], r3);
    }
}

// Two accumulator tiles (of chunk c) into the row owners' registers: store, barrier, fold
// (alpha 0: a copy of the zeroed registers plus R), barrier. Call in uniform control flow.
fn fl_take2(tid: u32, second: bool, c: u32, a: coop_mat16x16<f32, C>, b: coop_mat16x16<f32, C>) {
    workgroupBarrier();
    fl_store2(a, b);
    workgroupBarrier();
    fl_fold(tid, second, c, 0.0);
}

// The forward's value product for chunk c on tensor cores: O_c ← α·O_c + P·V_c (P the block as
// stored, V rows k0 …), through R.
fn fl_values_coop(tid: u32, c: u32, k0: u32, alpha: f32) {
    var a = coop_mat16x16<f32, C>();
    var b = coop_mat16x16<f32, C>();
    for (var ks = 0u; ks < FL_T; ks += FL_KS) {
        fl_stage_values(tid, FL_V, k0, ks, c);
        a = fl_mma_n(a, ks, 0u);
        b = fl_mma_n(b, ks, 1u);
    }
    fl_store2(a, b);
    workgroupBarrier();
    fl_fold(tid, false, c, alpha);
}
//#endif
