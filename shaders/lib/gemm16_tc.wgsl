// The f16 core's tensor-core path for exact products, on its own: `lib/gemm16.wgsl`'s product
// where every block lies wholly inside the output and every step of the contraction is whole,
// with nothing else in the kernel. The kernels that include it (`linear::gemm16_tc` and the
// fused `_tc` forms) compute what their `gemm16` counterparts compute, with the same overrides
// and the same order of sums, and `kernels::gemm` records them only where their conditions hold.
//
// Why a second form: on NVIDIA's Vulkan driver the contraction loop of the full core runs about
// 30% slower than this loop alone, and what costs it is code the exact case never executes: the
// clamped, masked operand loads of edge blocks (even behind a branch on a constant), a trip count
// that depends on the workgroup id, strides reached through helper calls
// (`results/2026-12-07-h27/NOTES.md` has the measurements, BENCHMARKS.md §1 the rates). So this
// form has only the exact loads, strides as derived overrides, a trip count that is a constant
// (the shape and the split compiled in), and one tile group per subgroup.
//
// Conditions (the plan's `F16Config::exact_tc`): tensor cores; M_C, N_C, K_C set and M % G_BM,
// N % G_BN, K % G_BK all 0; with G_PARTS = p > 1, K = p·G_CHUNK; the workgroup's subgroups one
// per tile group (G_WG / subgroup size = `F16Config::groups`). Where the subgroups do not match
// (a direct call on another adapter), the workgroup writes NaN through `store_out` instead.
//
// Needs `lib/gemm16.wgsl` (overrides, staging slices, prefetch registers, launch order) before
// it, and the including kernel's `store_out`/`coop_out` hooks and bindings `a`, `b`, `p`. Without
// cooperative matrices the including kernels run `g16_run`'s portable path instead.

//#if coop
// vec4s per staged row of A and B without padding, and per stored row with it.
override G16_ROWA: u32 = select(G_BK, G_BM, A_T) / 4u;
override G16_ROWB: u32 = select(G_BN, G_BK, B_T) / 4u;
override G16_LDA: u32 = G16_ROWA + G_PAD / 4u;
override G16_LDB: u32 = G16_ROWB + G_PAD / 4u;

// The stored column of the product's column v (`G_NMAP`), as `g_ncol` with N compiled in.
fn gx_ncol(v: u32) -> u32 {
    // (max: naga evaluates the division for G_NMAP = 0 too, and rejects a zero divisor.)
    let t = max(G_NMAP, 1u);
    let tile = v / t;
    return select((tile % 2u) * (N_C / 2u) + (tile / 2u) * t + v % t, v, G_NMAP == 0u);
}

// vec4 e of A's slice at contraction index kc of the block at row m0 (rows of M_C / 4 vec4s
// where A is [K, M], of K_C / 4 where it is [M, K]).
fn gx_ga(e: u32, m0: u32, kc: u32) -> vec4<f16> {
    let sr = e / G16_ROWA;
    let q = e % G16_ROWA;
    if (A_T) {
        return a[(kc + sr) * (M_C / 4u) + m0 / 4u + q];
    }
    return a[(m0 + sr) * (K_C / 4u) + kc / 4u + q];
}

fn gx_gb(e: u32, n0: u32, kc: u32) -> vec4<f16> {
    let sr = e / G16_ROWB;
    let q = e % G16_ROWB;
    if (B_T) {
        return b[gx_ncol(n0 + sr) * (K_C / 4u) + kc / 4u + q];
    }
    return b[(kc + sr) * (N_C / 4u) + gx_ncol(n0 + 4u * q) / 4u];
}

fn gx_slot_a(e: u32) -> u32 {
    return (e / G16_ROWA) * G16_LDA + e % G16_ROWA;
}

fn gx_slot_b(e: u32) -> u32 {
    return (e / G16_ROWB) * G16_LDB + e % G16_ROWB;
}

// The invocation's share of the slices at kc, into the prefetch registers (na, nb: vec4 loads
// per invocation per slice, written out rather than through `g_pfa`/`g_pfb`).
fn gx_fetch(tid: u32, m0: u32, n0: u32, kc: u32) {
    let na = G_BM * G_BK / (4u * G_WG);
    g_pa0 = gx_ga(tid, m0, kc);
    if (na > 1u) {
        g_pa1 = gx_ga(tid + G_WG, m0, kc);
    }
    if (na > 2u) {
        g_pa2 = gx_ga(tid + 2u * G_WG, m0, kc);
        g_pa3 = gx_ga(tid + 3u * G_WG, m0, kc);
    }
    if (na > 4u) {
        g_pa4 = gx_ga(tid + 4u * G_WG, m0, kc);
        g_pa5 = gx_ga(tid + 5u * G_WG, m0, kc);
        g_pa6 = gx_ga(tid + 6u * G_WG, m0, kc);
        g_pa7 = gx_ga(tid + 7u * G_WG, m0, kc);
    }
    let nb = G_BN * G_BK / (4u * G_WG);
    g_pb0 = gx_gb(tid, n0, kc);
    if (nb > 1u) {
        g_pb1 = gx_gb(tid + G_WG, n0, kc);
    }
    if (nb > 2u) {
        g_pb2 = gx_gb(tid + 2u * G_WG, n0, kc);
        g_pb3 = gx_gb(tid + 3u * G_WG, n0, kc);
    }
    if (nb > 4u) {
        g_pb4 = gx_gb(tid + 4u * G_WG, n0, kc);
        g_pb5 = gx_gb(tid + 5u * G_WG, n0, kc);
        g_pb6 = gx_gb(tid + 6u * G_WG, n0, kc);
        g_pb7 = gx_gb(tid + 7u * G_WG, n0, kc);
    }
}

fn gx_stage(tid: u32) {
    let na = G_BM * G_BK / (4u * G_WG);
    g_sa[gx_slot_a(tid)] = g_pa0;
    if (na > 1u) {
        g_sa[gx_slot_a(tid + G_WG)] = g_pa1;
    }
    if (na > 2u) {
        g_sa[gx_slot_a(tid + 2u * G_WG)] = g_pa2;
        g_sa[gx_slot_a(tid + 3u * G_WG)] = g_pa3;
    }
    if (na > 4u) {
        g_sa[gx_slot_a(tid + 4u * G_WG)] = g_pa4;
        g_sa[gx_slot_a(tid + 5u * G_WG)] = g_pa5;
        g_sa[gx_slot_a(tid + 6u * G_WG)] = g_pa6;
        g_sa[gx_slot_a(tid + 7u * G_WG)] = g_pa7;
    }
    let nb = G_BN * G_BK / (4u * G_WG);
    g_sb[gx_slot_b(tid)] = g_pb0;
    if (nb > 1u) {
        g_sb[gx_slot_b(tid + G_WG)] = g_pb1;
    }
    if (nb > 2u) {
        g_sb[gx_slot_b(tid + 2u * G_WG)] = g_pb2;
        g_sb[gx_slot_b(tid + 3u * G_WG)] = g_pb3;
    }
    if (nb > 4u) {
        g_sb[gx_slot_b(tid + 4u * G_WG)] = g_pb4;
        g_sb[gx_slot_b(tid + 5u * G_WG)] = g_pb5;
        g_sb[gx_slot_b(tid + 6u * G_WG)] = g_pb6;
        g_sb[gx_slot_b(tid + 7u * G_WG)] = g_pb7;
    }
}

// The A fragment of block tile row `tr` and the B fragment of tile column `tc`, at the staged
// slice's 16-deep part s.
fn gx_frag_a(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    let ld = G16_LDA;
    if (A_T) {
        let at = s * 16u * ld + tr * 4u;
        return coopLoad<coop_mat16x16<f16, A>>(&g_sa[at], ld);
    }
    let at = tr * 16u * ld + s * 4u;
    return coopLoadT<coop_mat16x16<f16, A>>(&g_sa[at], ld);
}

fn gx_frag_b(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    let ld = G16_LDB;
    if (B_T) {
        let at = tc * 16u * ld + s * 4u;
        return coopLoad<coop_mat16x16<f16, B>>(&g_sb[at], ld);
    }
    let at = s * 16u * ld + tc * 4u;
    return coopLoadT<coop_mat16x16<f16, B>>(&g_sb[at], ld);
}

// A whole tile at the product's (row, col) to the includer's store, at its stored column.
fn gx_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    coop_out(c, row, gx_ncol(col));
}

// Subgroup sg's tile group of the block (m0, n0) over the contraction [kb, kb + steps·G_BK).
fn gx_group(tid: u32, sg: u32, m0: u32, n0: u32, kb: u32, steps: u32) {
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

// The product for workgroup `w` (the 2-D fallback's linear index) with `nsg` subgroups.
fn gx_run(w: u32, tid: u32, sg: u32, nsg: u32) {
    g_m = M_C;
    g_n = N_C;
    g_k = K_C;
    let bm = M_C / G_BM;
    let bn = N_C / G_BN;
    let blocks = bm * bn;
    let split = G_PARTS > 1u;
    // p.tiles = blocks × parts: the grid's workgroups past it (the 2-D fallback) leave.
    if (w >= p.tiles) {
        return;
    }
    let part = w / blocks;
    let blk = g_order(w % blocks, bm, bn);
    let m0 = blk.x * G_BM;
    let n0 = blk.y * G_BN;
    // Unsplit, the first index and the trip count fold to constants.
    let kb = select(0u, part * G_CHUNK, split);
    let steps = select(K_C, G_CHUNK, split) / G_BK;
    g_off = select(0u, part * M_C * N_C, split);
    let groups = (G_BM / (16u * G_TM)) * (G_BN / (16u * G_TN));
    for (var fits = u32(nsg == groups); fits == 1u; fits = 0u) {
        gx_group(tid, sg, m0, n0, kb, steps);
    }
    if (nsg != groups) {
        let nan = bitcast<f32>(0x7fc00000u);
        for (var e = tid; e < G_BM * G_BN; e += G_WG) {
            store_out(m0 + e / G_BN, gx_ncol(n0 + e % G_BN), nan);
        }
    }
}
//#endif
