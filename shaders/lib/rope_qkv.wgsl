// The fused attention projection's row layout, for the RoPE kernels that read or write it
// (`rope_qkv`, `rope_qkv_f16`, `rope_qkv_backward`, `rope_qkv_backward_f16` in 04_rope.wgsl):
// one row per token of W = (H + 2·Hkv)·Dh columns, Q's H·Dh, then K's Hkv·Dh, then V's Hkv·Dh —
// the output of one product `h·Wqkvᵀ` with Wqkv = [Wq; Wk; Wv] stacked by rows (and, in the
// backward, the output gradient of that product). The parts' boundaries are multiples of Dh,
// which is even, so a rotated pair (2i, 2i+1) never straddles two parts or two heads.
//
// Each pair is rotated by the angle `rope_pair` (lib/rope.wgsl) gives it in the separate
// `[B, S, heads, Dh]` tensor: position s + pos_offset with s = row mod seq, frequency index
// i = (column mod Dh) / 2 — the same `rope_cos_sin` call, so the same bits as `rope_q` /
// `rope_k` (and their backward forms) on the separate tensors.
//
// Provides `qkv_width()`, `qkv_col(c)`, `qkv_cs(r, c)` and, for the backward kernels,
// `qkv_back_pair(r, c)`. Expects `lib/rope.wgsl` and the uniform `p` (batch, seq, heads,
// kv_heads, head_dim, pos_offset, base); `qkv_back_pair` the bindings `dq`, `dk`, `dv` (f32,
// attention's input gradients).

// Columns of a fused row: (H + 2·Hkv)·Dh.
fn qkv_width() -> u32 {
    return (p.heads + 2u * p.kv_heads) * p.head_dim;
}

// Fused column c as (part: 0 Q, 1 K, 2 V; its column in that part; that part's width).
struct QkvCol {
    part: u32,
    col: u32,
    width: u32,
}

fn qkv_col(c: u32) -> QkvCol {
    let hq = p.heads * p.head_dim;
    let kv = p.kv_heads * p.head_dim;
    if (c < hq) {
        return QkvCol(0u, c, hq);
    }
    if (c < hq + kv) {
        return QkvCol(1u, c - hq, kv);
    }
    return QkvCol(2u, c - hq - kv, kv);
}

// (cos θ, sin θ) of the pair at column c (of a part, or of the fused row: the parts start at
// multiples of Dh) of row r.
fn qkv_cs(r: u32, c: u32) -> vec2<f32> {
    return rope_cos_sin((r % p.seq) + p.pos_offset, (c % p.head_dim) / 2u, p.head_dim, p.base);
}

// The gradient pair at fused column c of row r: dq's and dk's rotated back, dv's as it is.
fn qkv_back_pair(r: u32, c: u32) -> vec2<f32> {
    let at = qkv_col(c);
    let o = r * at.width + at.col;
    if (at.part == 2u) {
        return vec2<f32>(dv[o], dv[o + 1u]);
    }
    var x = vec2<f32>(dq[o], dq[o + 1u]);
    if (at.part == 1u) {
        x = vec2<f32>(dk[o], dk[o + 1u]);
    }
    return rope_rotate_back(x, qkv_cs(r, at.col));
}
