// The f16 core's tensor-core path for exact products, on its own: `lib/gemm16.wgsl`'s product
// where every block lies wholly inside the output and every step of the contraction is whole,
// with nothing else in the kernel. The kernels that include it (`linear::gemm16_tc`,
// `linear::gemm16_rope_qkv_tc`) compute what their `gemm16` counterparts compute, with the same
// overrides and the same order of sums, and `kernels::gemm` records them only where their
// conditions hold.
//
// Why a second form: on NVIDIA's Vulkan driver (H100, driver 580.159.04) the contraction loop
// of the full core runs at about 0.7 of this loop's rate, and what costs it is code the exact
// case never executes or that folds to a constant: the clamped, masked operand loads of edge
// blocks (even behind a branch on a constant override), a trip count that depends on the
// workgroup id, strides reached through nested helper calls, the column map of `G_NMAP` (even
// as a `select` on a constant), and the loop sitting in a function the entry calls rather than
// in the entry itself. Each alone was enough (`results/2026-12-07-h27/NOTES.md`; the rates:
// BENCHMARKS.md §1). A NaN path after the loop, for the case that never runs, did not cost it. So this form has only the exact loads, strides as derived overrides, a
// trip count that is a constant (the shape and the split compiled in), no column map (G_NMAP
// = 0), one tile group per subgroup, and its loop written into each entry
// (`lib/gemm16_tc_main.wgsl`, included inside the entry's body).
//
// Conditions (the plan's `F16Config::exact_tc`, which the kernels do not check): tensor cores;
// M_C, N_C, K_C set and M % G_BM, N % G_BN, K % G_BK all 0; with G_PARTS = p > 1,
// K = p·G_CHUNK; the workgroup's subgroups one per tile group (G_WG / subgroup size =
// `F16Config::groups`); G_NMAP = 0. A workgroup whose subgroups do not match writes NaN to its
// block. Every orientation and the split compute right (tested on the H100); the plan takes
// this form for X·Wᵀ products whole, where it is the faster one (for dY·W, Xᵀ·dY and split
// products the full core's loop measured faster).
//
// Needs `lib/gemm16.wgsl` (overrides, staging slices, prefetch registers, launch order) before
// it, and the including kernel's `store_out`/`coop_out` hooks and bindings `a`, `b`, `p`.
// Without cooperative matrices the including kernels run `g16_run`'s portable path instead.

//#if coop
// vec4s per staged row of A and B without padding, and per stored row with it.
override G16_ROWA: u32 = select(G_BK, G_BM, A_T) / 4u;
override G16_ROWB: u32 = select(G_BN, G_BK, B_T) / 4u;
override G16_LDA: u32 = G16_ROWA + G_PAD / 4u;
override G16_LDB: u32 = G16_ROWB + G_PAD / 4u;

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
        return b[(n0 + sr) * (K_C / 4u) + kc / 4u + q];
    }
    return b[(kc + sr) * (N_C / 4u) + n0 / 4u + q];
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
    }
    if (na > 6u) {
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
    }
    if (nb > 6u) {
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
    }
    if (na > 6u) {
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
    }
    if (nb > 6u) {
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

// A whole tile at the product's (row, col) to the includer's store.
fn gx_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    coop_out(c, row, col);
}

//#endif
