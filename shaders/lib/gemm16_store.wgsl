// `lib/gemm16.wgsl`'s store hooks for a kernel whose product is stored whole, as it is, into
// `y` [M, N] f32 row-major: no split contraction (no `g_off`), no accumulation, no residual —
// the kernels whose epilogue reads the stored block back afterwards.
//
// Provides `store_out` and (tensor cores) `coop_out`. Expects `lib/gemm16.wgsl` included before
// it and the binding
//   var<storage, read_write> y: array<f32>   the product

fn store_out(row: u32, col: u32, v: f32) {
    y[row * g_n + col] = v;
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = row * g_n + col;
    let ld = g_n;
    coopStoreT(c, &y[at], ld);
}
//#endif
