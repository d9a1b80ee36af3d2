// The body of an exact tensor-core kernel's entry point (`lib/gemm16_tc.wgsl`: why it is not a
// function): the product for workgroup `w` with `nsg` subgroups. Include it inside the entry,
// where `w` (the linear workgroup index), `tid`, `sg` and `nsg` are in scope; it declares lets
// named `gx_*` in the entry's scope.
//
// Included text, not a function: every `let` here lands in the entry's scope.
g_m = M_C;
g_n = N_C;
g_k = K_C;
let gx_bm = M_C / G_BM;
let gx_bn = N_C / G_BN;
// (max: every kernel's pipeline is also built with the overrides' defaults, M_C = 0, and a
// constant zero divisor does not build.)
let gx_blocks = max(gx_bm * gx_bn, 1u);
let gx_split = G_PARTS > 1u;
let gx_blk = g_order(w % gx_blocks, gx_bm, gx_bn);
let gx_m0 = gx_blk.x * G_BM;
let gx_n0 = gx_blk.y * G_BN;
g_off = select(0u, (w / gx_blocks) * M_C * N_C, gx_split);
let gx_groups = (G_BM / (16u * G_TM)) * (G_BN / (16u * G_TN));
// p.tiles = blocks × parts: the grid's workgroups past it (the 2-D fallback) do nothing. (A loop
// that runs once or not at all: naga takes `w` for non-uniform, and the tensor-core operations
// need uniform control flow, which it checks at `if`s and `return`s, not at loop bounds.)
let gx_live = w < p.tiles;
for (var fits = u32(nsg == gx_groups) & u32(gx_live); fits == 1u; fits = 0u) {
    // Unsplit, the first index and the trip count are constants.
    let kb = select(0u, (w / gx_blocks) * G_CHUNK, gx_split);
    let steps = select(K_C, G_CHUNK, gx_split) / G_BK;
    let m0 = gx_m0;
    let n0 = gx_n0;
    let gn = G_BN / (16u * G_TN);
    let tr0 = (sg / gn) * G_TM;
    let tc0 = (sg % gn) * G_TN;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();
    if (G_PF) {
        gx_fetch(tid, m0, n0, kb);
    }
    for (var i = 0u; i < steps; i++) {
        let kc = kb + i * G_BK;
        if (G_PF) {
            gx_stage(tid);
            workgroupBarrier();
            if (i + 1u < steps) {
                gx_fetch(tid, m0, n0, kc + G_BK);
            }
        } else {
            gx_fetch(tid, m0, n0, kc);
            gx_stage(tid);
            workgroupBarrier();
        }
        for (var s = 0u; s < G_BK / 16u; s++) {
            let b0 = gx_frag_b(tc0, s);
            var b1 = b0;
            var b2 = b0;
            var b3 = b0;
            if (G_TN > 1u) { b1 = gx_frag_b(tc0 + 1u, s); }
            if (G_TN > 2u) { b2 = gx_frag_b(tc0 + 2u, s); }
            if (G_TN > 3u) { b3 = gx_frag_b(tc0 + 3u, s); }
            {
                let x = gx_frag_a(tr0, s);
                c00 = coopMultiplyAdd(x, b0, c00);
                if (G_TN > 1u) { c01 = coopMultiplyAdd(x, b1, c01); }
                if (G_TN > 2u) { c02 = coopMultiplyAdd(x, b2, c02); }
                if (G_TN > 3u) { c03 = coopMultiplyAdd(x, b3, c03); }
            }
            if (G_TM > 1u) {
                let x = gx_frag_a(tr0 + 1u, s);
                c10 = coopMultiplyAdd(x, b0, c10);
                if (G_TN > 1u) { c11 = coopMultiplyAdd(x, b1, c11); }
                if (G_TN > 2u) { c12 = coopMultiplyAdd(x, b2, c12); }
                if (G_TN > 3u) { c13 = coopMultiplyAdd(x, b3, c13); }
            }
            if (G_TM > 2u) {
                let x = gx_frag_a(tr0 + 2u, s);
                c20 = coopMultiplyAdd(x, b0, c20);
                if (G_TN > 1u) { c21 = coopMultiplyAdd(x, b1, c21); }
                if (G_TN > 2u) { c22 = coopMultiplyAdd(x, b2, c22); }
                if (G_TN > 3u) { c23 = coopMultiplyAdd(x, b3, c23); }
            }
            if (G_TM > 3u) {
                let x = gx_frag_a(tr0 + 3u, s);
                c30 = coopMultiplyAdd(x, b0, c30);
                if (G_TN > 1u) { c31 = coopMultiplyAdd(x, b1, c31); }
                if (G_TN > 2u) { c32 = coopMultiplyAdd(x, b2, c32); }
                if (G_TN > 3u) { c33 = coopMultiplyAdd(x, b3, c33); }
            }
        }
        workgroupBarrier();
    }
    let r0 = m0 + tr0 * 16u;
    let q0 = n0 + tc0 * 16u;
    gx_out(c00, r0, q0);
    if (G_TN > 1u) { gx_out(c01, r0, q0 + 16u); }
    if (G_TN > 2u) { gx_out(c02, r0, q0 + 32u); }
    if (G_TN > 3u) { gx_out(c03, r0, q0 + 48u); }
    if (G_TM > 1u) {
        gx_out(c10, r0 + 16u, q0);
        if (G_TN > 1u) { gx_out(c11, r0 + 16u, q0 + 16u); }
        if (G_TN > 2u) { gx_out(c12, r0 + 16u, q0 + 32u); }
        if (G_TN > 3u) { gx_out(c13, r0 + 16u, q0 + 48u); }
    }
    if (G_TM > 2u) {
        gx_out(c20, r0 + 32u, q0);
        if (G_TN > 1u) { gx_out(c21, r0 + 32u, q0 + 16u); }
        if (G_TN > 2u) { gx_out(c22, r0 + 32u, q0 + 32u); }
        if (G_TN > 3u) { gx_out(c23, r0 + 32u, q0 + 48u); }
    }
    if (G_TM > 3u) {
        gx_out(c30, r0 + 48u, q0);
        if (G_TN > 1u) { gx_out(c31, r0 + 48u, q0 + 16u); }
        if (G_TN > 2u) { gx_out(c32, r0 + 48u, q0 + 32u); }
        if (G_TN > 3u) { gx_out(c33, r0 + 48u, q0 + 48u); }
    }
}
// Subgroups that do not match the tile groups (a direct call on another adapter): NaN in the
// block rather than numbers that look right.
if (nsg != gx_groups && gx_live) {
    let nan = bitcast<f32>(0x7fc00000u);
    for (var e = tid; e < G_BM * G_BN; e += G_WG) {
        store_out(gx_m0 + e / G_BN, gx_n0 + e % G_BN, nan);
    }
}
