// The body of the precise products that write Y [M, N] (`matmul_t_pres`, `matmul_pres`, in
// 03_linear.wgsl): its store hooks (Y = or += the product, with the override ACC) and the
// block dispatch, written once. The including kernel declares `y`, `p` (m, n, k), the overrides
// M_C, N_C, K_C, ACC, and B_KC (true: B stored [N, K], rows of k; false: [K, N], rows of n).

fn store_out(row: u32, col: u32, v: f32) {
    if (row < dim_m && col < dim_n) {
        let at = row * dim_n + col;
        if (ACC) {
            y[at] = y[at] + v;
        } else {
            y[at] = v;
        }
    }
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = row * dim_n + col;
    let ld = dim_n;
    if (ACC) {
        let sum = c + coopLoadT<coop_mat16x16<f32, C>>(&y[at], ld);
        coopStoreT(sum, &y[at], ld);
    } else {
        coopStoreT(c, &y[at], ld);
    }
}
//#endif

// The kernel body for workgroup `w`: the shape (compiled in or the uniform's), the block, then
// the tensor-core core for whole blocks (`sg`, `nsg`: the subgroup and their count) and the
// portable one for edge blocks and adapters without tensor cores.
fn pres_gemm(w: u32, tid: u32, sg: u32, nsg: u32) {
    let m = select(p.m, M_C, M_C != 0u);
    let n = select(p.n, N_C, N_C != 0u);
    let k = select(p.k, K_C, K_C != 0u);
    dim_m = m;
    dim_n = n;
    k_end = k;
    a_q = (k + 3u) / 4u;
    b_q = select((n + 3u) / 4u, (k + 3u) / 4u, B_KC);
    let blk = pb_block(w, m, n);
    if (blk.z == 0u) {
        return;
    }
    let nk = (k + PB_BK - 1u) / PB_BK;
    let fs = pb_factors();
//#if coop
    if (blk.x + PB_BM <= m && blk.y + PB_BN <= n && n % 4u == 0u && PC_GROUPS % nsg == 0u) {
        pc_block(tid, sg, nsg, blk.x, blk.y, 0u, nk, fs);
        return;
    }
//#endif
    pf_block(tid, blk.x, blk.y, 0u, nk, fs);
}
