// Rotary position embedding (RoPE) on interleaved pairs.
//
// Each head vector x (length Dh, even) of Q `[B, S, H, Dh]` or K `[B, S, Hkv, Dh]` is rotated
// pair by pair: for i < Dh/2, with pos = s + pos_offset and θ_i = pos · base^(−2i/Dh),
//     y[2i]   = x[2i] cos θ_i − x[2i+1] sin θ_i
//     y[2i+1] = x[2i] sin θ_i + x[2i+1] cos θ_i
// `rope_q` / `rope_k` rotate one tensor in place, one invocation per pair; grid
// `threads(B·S·heads·Dh/2)` (the 2-D fallback past the device's workgroup limit is recovered by
// `flat_id`); `rope_q_backward` / `rope_k_backward` apply the inverse rotation.
//
// The trainer computes Q, K and V with one product into a fused row per token (`lib/rope_qkv.wgsl`),
// and attention reads them as separate tensors: `rope_qkv` splits the fused rows into Q and K
// rotated and V as it is, and `rope_qkv_backward` gathers attention's dq, dk, dv into the fused
// gradient, rotated back — each one dispatch, no copies. Their mixed-precision forms
// (`rope_qkv_f16`, `rope_qkv_backward_f16`) write f16 rows (the operands of the f16 attention
// kernels and of the fused projection's products; the backward's with the loss scaler's
// overflow check), one invocation per output vec4.
//
// The angles (and their accuracy) are in `lib/rope.wgsl`.
//#include "lib/rope.wgsl"

// --- KERNEL: rope_q ---
// RoPE on the queries, in place: `q` is `[B, S, H, Dh]` (p.batch, p.seq, p.heads,
// p.head_dim; Dh even), position of row s is `s + p.pos_offset`, frequencies from `p.base`
// (10000 in the trainer). Overwrites `q` (in place); elements past B·S·H·Dh are untouched.
// @grid threads(p.batch * p.seq * p.heads * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_q(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    if (idx < p.batch * p.seq * p.heads * (p.head_dim / 2u)) {
        let r = rope_pair(idx, p.seq, p.heads, p.head_dim, p.pos_offset, p.base);
        let y = rope_rotate(vec2<f32>(q[r.at], q[r.at + 1u]), r.cs);
        q[r.at] = y.x;
        q[r.at + 1u] = y.y;
    }
}

// --- KERNEL: rope_k ---
// RoPE on the keys, in place: `k` is `[B, S, Hkv, Dh]` (p.batch, p.seq, p.kv_heads,
// p.head_dim; Dh even), same rotation and positions as `rope_q`. Overwrites `k` (in place);
// elements past B·S·Hkv·Dh are untouched.
// @grid threads(p.batch * p.seq * p.kv_heads * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> k: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_k(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    if (idx < p.batch * p.seq * p.kv_heads * (p.head_dim / 2u)) {
        let r = rope_pair(idx, p.seq, p.kv_heads, p.head_dim, p.pos_offset, p.base);
        let y = rope_rotate(vec2<f32>(k[r.at], k[r.at + 1u]), r.cs);
        k[r.at] = y.x;
        k[r.at + 1u] = y.y;
    }
}

// --- KERNEL: rope_qkv ---
// RoPE on the fused attention projection, out of place: `qkv` `[B·S, (H + 2·Hkv)·Dh]` holds
// each token's Q, K and V side by side (`lib/rope_qkv.wgsl`); its Q columns rotated go to `q`
// `[B, S, H, Dh]`, its K columns rotated to `k` `[B, S, Hkv, Dh]`, its V columns unchanged to
// `v` `[B, S, Hkv, Dh]` — the separate tensors the attention kernels read. Each pair is the
// f32 arithmetic of `rope_q` / `rope_k` (the same bits as those kernels on the separate parts).
// Position of row s is `s + p.pos_offset` (within its sequence). `qkv` is read only.
// Overwrites `q`, `k`, `v` (the first B·S·heads·Dh values of each). One invocation per pair of
// the fused row.
// @grid threads(p.batch * p.seq * (p.heads + 2 * p.kv_heads) * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(qkv) >= p.batch * p.seq * (p.heads + 2 * p.kv_heads) * p.head_dim
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(v) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
//#include "lib/rope_qkv.wgsl"

@compute @workgroup_size(WG)
fn rope_qkv(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let w = qkv_width();
    let pairs = w / 2u;
    if (idx >= p.batch * p.seq * pairs) {
        return;
    }
    let r = idx / pairs;
    let c = 2u * (idx - r * pairs);
    let x = vec2<f32>(qkv[r * w + c], qkv[r * w + c + 1u]);
    let at = qkv_col(c);
    let o = r * at.width + at.col;
    if (at.part == 2u) {
        v[o] = x.x;
        v[o + 1u] = x.y;
        return;
    }
    let y = rope_rotate(x, qkv_cs(r, at.col));
    if (at.part == 0u) {
        q[o] = y.x;
        q[o + 1u] = y.y;
    } else {
        k[o] = y.x;
        k[o + 1u] = y.y;
    }
}

// --- KERNEL: rope_qkv_f16 ---
// `rope_qkv` with f16 outputs (mixed precision, the operands of the f16 attention kernels): the
// rotated Q and K and the unrotated V of the fused projection `qkv` `[B·S, (H + 2·Hkv)·Dh]`
// f32, each value the f32 arithmetic of `rope_qkv` (so of `rope_q` / `rope_k`: the same bits),
// rounded as `cast::cast_f16x4` rounds (beyond ±65504 → ±65504, NaN kept) into the f16x4 row
// layout: `q16` `[B·S, ⌈H·Dh/4⌉]`, `k16` and `v16` `[B·S, ⌈Hkv·Dh/4⌉]` vec4<f16> (rows padded
// with zeros to a multiple of 4). One dispatch for what would be a rotation, its two casts and
// V's cast. `qkv` is read only. Overwrites `q16`, `k16`, `v16` (the first B·S·⌈heads·Dh/4⌉
// vec4s of each). Needs SHADER_F16. One invocation per output vec4 (two pairs), Q's, then K's,
// then V's.
// @grid threads(p.batch * p.seq * (ceil_div(p.heads * p.head_dim, 4) + 2 * ceil_div(p.kv_heads * p.head_dim, 4)))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(qkv) >= p.batch * p.seq * (p.heads + 2 * p.kv_heads) * p.head_dim
// @requires len(q16) >= p.batch * p.seq * ceil_div(p.heads * p.head_dim, 4)
// @requires len(k16) >= p.batch * p.seq * ceil_div(p.kv_heads * p.head_dim, 4)
// @requires len(v16) >= p.batch * p.seq * ceil_div(p.kv_heads * p.head_dim, 4)
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> q16: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> k16: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> v16: array<vec4<f16>>;
@group(0) @binding(4) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"
//#include "lib/rope_qkv.wgsl"

// Vec4 e of part `part` (`cols` wide, starting at fused column `off`): columns c..c+3 of its
// row, rotated unless V; columns past the part's width are 0.
fn part_vec4(e: u32, part: u32, cols: u32, off: u32) -> vec4<f32> {
    let cq = (cols + 3u) / 4u;
    let r = e / cq;
    let c = (e - r * cq) * 4u;
    let i = r * qkv_width() + off + c;
    let two = c + 2u < cols;
    var a = vec2<f32>(qkv[i], qkv[i + 1u]);
    var b = vec2<f32>(0.0);
    if (two) {
        b = vec2<f32>(qkv[i + 2u], qkv[i + 3u]);
    }
    if (part != 2u) {
        a = rope_rotate(a, qkv_cs(r, c));
        if (two) {
            b = rope_rotate(b, qkv_cs(r, c + 2u));
        }
    }
    return vec4<f32>(a, b);
}

@compute @workgroup_size(WG)
fn rope_qkv_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let rows = p.batch * p.seq;
    let hq = p.heads * p.head_dim;
    let kv = p.kv_heads * p.head_dim;
    let nq = rows * ((hq + 3u) / 4u);
    let nk = rows * ((kv + 3u) / 4u);
    if (idx < nq) {
        q16[idx] = to_f16x4(part_vec4(idx, 0u, hq, 0u));
    } else if (idx - nq < nk) {
        k16[idx - nq] = to_f16x4(part_vec4(idx - nq, 1u, kv, hq));
    } else if (idx - nq - nk < nk) {
        v16[idx - nq - nk] = to_f16x4(part_vec4(idx - nq - nk, 2u, kv, hq + kv));
    }
}

// --- KERNEL: rope_q_backward ---
// Backward of `rope_q`, in place: `dq` `[B, S, H, Dh]` (Dh even) holds dL/d(rotated q) and
// becomes dL/d(q before rotation) — the transpose, i.e. inverse, rotation by −θ_i with the same
// θ_i = (s + p.pos_offset) · p.base^(−2i/Dh):
//     g[2i] = y0 cos θ + y1 sin θ,   g[2i+1] = −y0 sin θ + y1 cos θ.
// Grid `threads(B·S·H·Dh/2)`, one invocation per pair. Overwrites `dq` (in place).
// @grid threads(p.batch * p.seq * p.heads * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> dq: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_q_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    if (idx < p.batch * p.seq * p.heads * (p.head_dim / 2u)) {
        let r = rope_pair(idx, p.seq, p.heads, p.head_dim, p.pos_offset, p.base);
        let x = rope_rotate_back(vec2<f32>(dq[r.at], dq[r.at + 1u]), r.cs);
        dq[r.at] = x.x;
        dq[r.at + 1u] = x.y;
    }
}

// --- KERNEL: rope_k_backward ---
// Backward of `rope_k`, in place: `dk` `[B, S, Hkv, Dh]` (Dh even), the inverse rotation as
// `rope_q_backward` with the key/value head count. Grid `threads(B·S·Hkv·Dh/2)`.
// Overwrites `dk` (in place).
// @grid threads(p.batch * p.seq * p.kv_heads * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> dk: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_k_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    if (idx < p.batch * p.seq * p.kv_heads * (p.head_dim / 2u)) {
        let r = rope_pair(idx, p.seq, p.kv_heads, p.head_dim, p.pos_offset, p.base);
        let x = rope_rotate_back(vec2<f32>(dk[r.at], dk[r.at + 1u]), r.cs);
        dk[r.at] = x.x;
        dk[r.at + 1u] = x.y;
    }
}

// --- KERNEL: rope_qkv_backward ---
// Backward of `rope_qkv`: from attention's input gradients `dq` `[B, S, H, Dh]`, `dk` and `dv`
// `[B, S, Hkv, Dh]` (f32, as the attention backward writes them), the gradient of the fused
// projection `dqkv` `[B·S, (H + 2·Hkv)·Dh]` (`lib/rope_qkv.wgsl`'s layout): dq's and dk's pairs
// rotated back as `rope_q_backward` / `rope_k_backward` rotate them (the same bits), dv's
// unchanged — the output gradient of the one product `h·Wqkvᵀ`. `dq`, `dk`, `dv` are read only.
// Overwrites `dqkv[0 .. B·S·(H + 2·Hkv)·Dh]`. One invocation per pair of the fused row.
// @grid threads(p.batch * p.seq * (p.heads + 2 * p.kv_heads) * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dv) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dqkv) >= p.batch * p.seq * (p.heads + 2 * p.kv_heads) * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read> dq: array<f32>;
@group(0) @binding(1) var<storage, read> dk: array<f32>;
@group(0) @binding(2) var<storage, read> dv: array<f32>;
@group(0) @binding(3) var<storage, read_write> dqkv: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
//#include "lib/rope_qkv.wgsl"

@compute @workgroup_size(WG)
fn rope_qkv_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let w = qkv_width();
    let pairs = w / 2u;
    if (idx >= p.batch * p.seq * pairs) {
        return;
    }
    let r = idx / pairs;
    let c = 2u * (idx - r * pairs);
    let y = qkv_back_pair(r, c);
    dqkv[r * w + c] = y.x;
    dqkv[r * w + c + 1u] = y.y;
}

// --- KERNEL: rope_qkv_backward_f16 ---
// `rope_qkv_backward` with the fused gradient in f16 only (mixed precision: it is the output
// gradient of the fused projection's two products, which read nothing else): each value the
// f32 arithmetic of `rope_qkv_backward` (the same bits), then what `cast::cast_grad_f16x4`
// makes of it — rounded (beyond ±65504 → ±65504, NaN kept) into the f16x4 row layout, `dqkv16`
// `[B·S, ⌈(H + 2·Hkv)·Dh/4⌉]` vec4<f16> (rows padded with zeros), and the overflow check of loss
// scaling: any gradient that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears
// it; `lib/grad16.wgsl`). One dispatch for what would be a rotation and the casts of dq, dk and
// dv. `dq`, `dk`, `dv` are read only. Overwrites `dqkv16` (the first B·S·⌈(H + 2·Hkv)·Dh/4⌉
// vec4s). Needs SHADER_F16. One invocation per output vec4 (two pairs; when H·Dh or Hkv·Dh is
// 2 mod 4 a vec4 takes its pairs from two parts).
// @grid threads(p.batch * p.seq * ceil_div((p.heads + 2 * p.kv_heads) * p.head_dim, 4))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dv) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dqkv16) >= p.batch * p.seq * ceil_div((p.heads + 2 * p.kv_heads) * p.head_dim, 4)
// @requires len(flag) >= 1
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read> dq: array<f32>;
@group(0) @binding(1) var<storage, read> dk: array<f32>;
@group(0) @binding(2) var<storage, read> dv: array<f32>;
@group(0) @binding(3) var<storage, read_write> dqkv16: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"
//#include "lib/grad16.wgsl"
//#include "lib/rope_qkv.wgsl"

@compute @workgroup_size(WG)
fn rope_qkv_backward_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let w = qkv_width();
    let cw = (w + 3u) / 4u;
    if (idx >= p.batch * p.seq * cw) {
        return;
    }
    let r = idx / cw;
    let c = 4u * (idx - r * cw);
    var out = vec4<f32>(qkv_back_pair(r, c), 0.0, 0.0);
    if (c + 2u < w) {
        let b = qkv_back_pair(r, c + 2u);
        out.z = b.x;
        out.w = b.y;
    }
    dqkv16[idx] = grad16(out);
}
