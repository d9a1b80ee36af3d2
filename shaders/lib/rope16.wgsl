// The walk of the f16-output RoPE kernels (`rope_qk_f16`, `rope_qk_backward_f16` in
// 04_rope.wgsl) over the vec4s of their f16x4 row outputs: Q's `[B·S, ⌈H·Dh/4⌉]` vec4s, then K's
// `[B·S, ⌈Hkv·Dh/4⌉]`, one invocation each. Vec4 e of row r holds columns c..c+3, c = 4·(e mod
// cq): the pairs (c, c+1) and (c+2, c+3) of that row (a pair never straddles two heads: Dh is
// even), each rotated by `rope_pair` and `rope_rotate` / `rope_rotate_back` of `lib/rope.wgsl` —
// the f32 kernels' functions, so each pair is the same f32 arithmetic as `rope_qk` /
// `rope_qk_backward` makes. Columns past the row (its padding to a multiple of 4, when H·Dh or
// Hkv·Dh is 2 mod 4) are 0.
//
// Provides `rope16(idx, back)`. Expects `lib/rope.wgsl`, the uniform `p` (batch, seq, heads,
// kv_heads, head_dim, pos_offset, base) and the hooks of the including kernel:
//   fn rope16_in(key: bool, i: u32) -> vec2<f32>     elements i, i + 1 of the f32 Q (or K)
//   fn rope16_out(key: bool, e: u32, v: vec4<f32>)   vec4 e of Q's (or K's) output is v

// Vec4 e of one tensor of `heads` heads (`key`: K), rotated forward or (`back`) backward.
fn rope16_vec4(e: u32, heads: u32, key: bool, back: bool) -> vec4<f32> {
    let cols = heads * p.head_dim;
    let cq = (cols + 3u) / 4u;
    let r = e / cq;
    let c = (e - r * cq) * 4u;
    // Pair index over the tensor's pairs, as `rope_qk` numbers them (pair j at element 2j).
    let j = (r * cols + c) / 2u;
    var out = vec4<f32>(0.0);
    let a = rope_pair(j, p.seq, heads, p.head_dim, p.pos_offset, p.base);
    let xa = rope16_in(key, a.at);
    let ya = select(rope_rotate(xa, a.cs), rope_rotate_back(xa, a.cs), back);
    out.x = ya.x;
    out.y = ya.y;
    if (c + 2u < cols) {
        let b = rope_pair(j + 1u, p.seq, heads, p.head_dim, p.pos_offset, p.base);
        let xb = rope16_in(key, b.at);
        let yb = select(rope_rotate(xb, b.cs), rope_rotate_back(xb, b.cs), back);
        out.z = yb.x;
        out.w = yb.y;
    }
    return out;
}

// Invocation `idx` of the grid: a vec4 of Q's output, or past those one of K's.
fn rope16(idx: u32, back: bool) {
    let rows = p.batch * p.seq;
    let nq = rows * ((p.heads * p.head_dim + 3u) / 4u);
    let nk = rows * ((p.kv_heads * p.head_dim + 3u) / 4u);
    if (idx < nq) {
        rope16_out(false, idx, rope16_vec4(idx, p.heads, false, back));
    } else if (idx - nq < nk) {
        rope16_out(true, idx - nq, rope16_vec4(idx - nq, p.kv_heads, true, back));
    }
}
