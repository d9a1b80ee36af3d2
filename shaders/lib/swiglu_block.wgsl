// `gemm16_swiglu`'s epilogue: SwiGLU of the block the workgroup has just stored, read back
// from `y`. Expects `lib/gemm16.wgsl`, `lib/f16x4.wgsl`, `lib/activations.wgsl` and the
// bindings `y` (the product, f32) and `h` (vec4<f16>).

// The block's part of h: gate columns [n0/2, n0/2 + G_BN/2) of rows [m0, m0 + G_BM), 4 a step.
fn swiglu_block(tid: u32, blk: vec3<u32>) {
    let f = g_n / 2u;
    let per_row = G_BN / 8u;
    for (var e = tid; e < G_BM * per_row * blk.z; e += G_WG) {
        let row = blk.x + e / per_row;
        let c = blk.y / 2u + 4u * (e % per_row);
        if (row < g_m && c < f) {
            let i = row * g_n + c;
            let g = vec4<f32>(y[i], y[i + 1u], y[i + 2u], y[i + 3u]);
            let u = vec4<f32>(y[i + f], y[i + f + 1u], y[i + f + 2u], y[i + f + 3u]);
            h[row * (f / 4u) + c / 4u] = to_f16x4(swiglu4(g, u));
        }
    }
}
