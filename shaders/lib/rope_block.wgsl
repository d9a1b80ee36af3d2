// `gemm16_rope_qkv`'s epilogue: the rotated Q and K and the unrotated V in f16 of the block the
// workgroup has just stored, read back from `y`. Expects `lib/gemm16.wgsl`, `lib/f16x4.wgsl`,
// `lib/rope.wgsl`, `lib/rope_qkv.wgsl` and the bindings `y`, `q16`, `k16`, `v16` and
// `p: GemmRopeParams` (declared here: `lib/gemm16.wgsl`'s fields, then the rotation's).

struct GemmRopeParams {
    m: u32,
    n: u32,
    k: u32,
    parts: u32,
    chunk: u32,
    tiles: u32,
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}

// The block's columns of Q, K and V: fused columns [n0, n0 + G_BN) of rows [m0, m0 + G_BM),
// 4 a step (Dh % 4 = 0: the 4 lie in one head of one part).
fn rope_block(tid: u32, blk: vec3<u32>) {
    let per_row = G_BN / 4u;
    for (var e = tid; e < G_BM * per_row * blk.z; e += G_WG) {
        let row = blk.x + e / per_row;
        let c = blk.y + 4u * (e % per_row);
        if (row < g_m && c < g_n) {
            let i = row * g_n + c;
            var lo = vec2<f32>(y[i], y[i + 1u]);
            var hi = vec2<f32>(y[i + 2u], y[i + 3u]);
            let at = qkv_col(c);
            if (at.part != 2u) {
                lo = rope_rotate(lo, qkv_cs(row, at.col));
                hi = rope_rotate(hi, qkv_cs(row, at.col + 2u));
            }
            let o = row * (at.width / 4u) + at.col / 4u;
            let v = to_f16x4(vec4<f32>(lo, hi));
            if (at.part == 0u) {
                q16[o] = v;
            } else if (at.part == 1u) {
                k16[o] = v;
            } else {
                v16[o] = v;
            }
        }
    }
}
