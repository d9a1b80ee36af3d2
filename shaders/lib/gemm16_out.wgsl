// `gemm16`'s store hooks: the product into `y` [M, N] f32 row-major at the current part's
// offset (`g_off`), overwriting it (G_ACC = false) or added to what it holds (G_ACC = true).
//
// Provides `store_out`, `coop_out` (tensor cores) and the override G_ACC. Expects
// `lib/gemm16.wgsl` included before it and the binding
//   var<storage, read_write> y: array<f32>   the product

override G_ACC: bool = false;

fn store_out(row: u32, col: u32, v: f32) {
    let at = g_off + row * g_n + col;
    if (G_ACC) {
        y[at] = y[at] + v;
    } else {
        y[at] = v;
    }
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = g_off + row * g_n + col;
    let ld = g_n;
    if (G_ACC) {
        let sum = c + coopLoadT<coop_mat16x16<f32, C>>(&y[at], ld);
        coopStoreT(sum, &y[at], ld);
    } else {
        coopStoreT(c, &y[at], ld);
    }
}
//#endif
