// Rotary position embedding (RoPE), in place, on interleaved pairs.
//
// Each head vector x (length Dh, even) of Q `[B, S, H, Dh]` or K `[B, S, Hkv, Dh]` is rotated
// pair by pair: for i < Dh/2, with pos = s + pos_offset and θ_i = pos · base^(−2i/Dh),
//     y[2i]   = x[2i] cos θ_i − x[2i+1] sin θ_i
//     y[2i+1] = x[2i] sin θ_i + x[2i+1] cos θ_i
// One invocation per pair; grid `threads(B·S·heads·Dh/2)` (the 2-D fallback past the device's
// workgroup limit is recovered by `flat_id`). The inverse rotation for the backward pass is
// `rope_q_backward` / `rope_k_backward` / `rope_qk_backward`, below. For mixed precision,
// `rope_qk_f16` and `rope_qk_backward_f16` rotate the same way out of place into f16 rows (the
// operands of the f16 products; the backward's with the loss scaler's overflow check), one
// invocation per output vec4 (`lib/rope16.wgsl`).
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

// --- KERNEL: rope_qk ---
// `rope_q` on `q` and `rope_k` on `k` in one dispatch (the same rotation, positions and
// arithmetic: the same bits): invocations below B·S·H·Dh/2 take the query pairs, the next
// B·S·Hkv·Dh/2 the key pairs. Overwrites `q` and `k` (in place); elements past each tensor's
// B·S·heads·Dh are untouched.
// @grid threads(p.batch * p.seq * (p.heads + p.kv_heads) * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_qk(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let nq = p.batch * p.seq * p.heads * (p.head_dim / 2u);
    let nk = p.batch * p.seq * p.kv_heads * (p.head_dim / 2u);
    if (idx < nq) {
        let r = rope_pair(idx, p.seq, p.heads, p.head_dim, p.pos_offset, p.base);
        let y = rope_rotate(vec2<f32>(q[r.at], q[r.at + 1u]), r.cs);
        q[r.at] = y.x;
        q[r.at + 1u] = y.y;
    } else if (idx - nq < nk) {
        let r = rope_pair(idx - nq, p.seq, p.kv_heads, p.head_dim, p.pos_offset, p.base);
        let y = rope_rotate(vec2<f32>(k[r.at], k[r.at + 1u]), r.cs);
        k[r.at] = y.x;
        k[r.at + 1u] = y.y;
    }
}

// --- KERNEL: rope_qk_f16 ---
// `rope_qk` out of place with f16 outputs (mixed precision): the rotated q and k, each pair the
// same f32 arithmetic as `rope_qk` (the same bits), rounded as `cast::cast_f16x4` rounds
// (beyond ±65504 → ±65504, NaN kept), written in the f16x4 row layout of the f16 products:
// `q16` `[B·S, ⌈H·Dh/4⌉]` and `k16` `[B·S, ⌈Hkv·Dh/4⌉]` vec4<f16> (rows padded with zeros to a
// multiple of 4), so no cast of the rotated values follows. `q` and `k` are read only.
// Overwrites `q16` and `k16` (the first B·S·⌈heads·Dh/4⌉ vec4s of each). Needs SHADER_F16.
// One invocation per output vec4 (two pairs), Q's then K's (`lib/rope16.wgsl`).
// @grid threads(p.batch * p.seq * (ceil_div(p.heads * p.head_dim, 4) + ceil_div(p.kv_heads * p.head_dim, 4)))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(q) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(k) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(q16) >= p.batch * p.seq * ceil_div(p.heads * p.head_dim, 4)
// @requires len(k16) >= p.batch * p.seq * ceil_div(p.kv_heads * p.head_dim, 4)
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read_write> q16: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> k16: array<vec4<f16>>;
@group(0) @binding(4) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"
//#include "lib/rope16.wgsl"

fn rope16_in(key: bool, i: u32) -> vec2<f32> {
    if (key) {
        return vec2<f32>(k[i], k[i + 1u]);
    }
    return vec2<f32>(q[i], q[i + 1u]);
}

fn rope16_out(key: bool, e: u32, v: vec4<f32>) {
    if (key) {
        k16[e] = to_f16x4(v);
    } else {
        q16[e] = to_f16x4(v);
    }
}

@compute @workgroup_size(WG)
fn rope_qk_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    rope16(flat_id(gid, nwg), false);
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

// --- KERNEL: rope_qk_backward ---
// `rope_q_backward` on `dq` and `rope_k_backward` on `dk` in one dispatch (the same inverse
// rotation and arithmetic: the same bits): invocations below B·S·H·Dh/2 take the query pairs,
// the next B·S·Hkv·Dh/2 the key pairs. Overwrites `dq` and `dk` (in place).
// @grid threads(p.batch * p.seq * (p.heads + p.kv_heads) * (p.head_dim / 2))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos_offset: u32,
    base: f32,
}
@group(0) @binding(0) var<storage, read_write> dq: array<f32>;
@group(0) @binding(1) var<storage, read_write> dk: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn rope_qk_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat_id(gid, nwg);
    let nq = p.batch * p.seq * p.heads * (p.head_dim / 2u);
    let nk = p.batch * p.seq * p.kv_heads * (p.head_dim / 2u);
    if (idx < nq) {
        let r = rope_pair(idx, p.seq, p.heads, p.head_dim, p.pos_offset, p.base);
        let x = rope_rotate_back(vec2<f32>(dq[r.at], dq[r.at + 1u]), r.cs);
        dq[r.at] = x.x;
        dq[r.at + 1u] = x.y;
    } else if (idx - nq < nk) {
        let r = rope_pair(idx - nq, p.seq, p.kv_heads, p.head_dim, p.pos_offset, p.base);
        let x = rope_rotate_back(vec2<f32>(dk[r.at], dk[r.at + 1u]), r.cs);
        dk[r.at] = x.x;
        dk[r.at + 1u] = x.y;
    }
}

// --- KERNEL: rope_qk_backward_f16 ---
// `rope_qk_backward` with the input gradients in f16 only (mixed precision: they are the
// output gradients of Wq and Wk, which read nothing else): each pair the same f32 arithmetic as
// `rope_qk_backward` (the same bits), then what `cast::cast_grad_f16x4` makes of them — rounded
// (beyond ±65504 → ±65504, NaN kept) into the f16x4 row layout, `dq16` `[B·S, ⌈H·Dh/4⌉]` and
// `dk16` `[B·S, ⌈Hkv·Dh/4⌉]` vec4<f16> (rows padded with zeros), and the overflow check of loss
// scaling: any gradient that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears
// it; `lib/grad16.wgsl`). `dq` and `dk` are read only. Overwrites `dq16` and `dk16`.
// Needs SHADER_F16. One invocation per output vec4 (two pairs), Q's then K's
// (`lib/rope16.wgsl`).
// @grid threads(p.batch * p.seq * (ceil_div(p.heads * p.head_dim, 4) + ceil_div(p.kv_heads * p.head_dim, 4)))
// @requires p.head_dim % 2 == 0
// @requires p.head_dim >= 2
// @requires len(dq) >= p.batch * p.seq * p.heads * p.head_dim
// @requires len(dk) >= p.batch * p.seq * p.kv_heads * p.head_dim
// @requires len(dq16) >= p.batch * p.seq * ceil_div(p.heads * p.head_dim, 4)
// @requires len(dk16) >= p.batch * p.seq * ceil_div(p.kv_heads * p.head_dim, 4)
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
@group(0) @binding(2) var<storage, read_write> dq16: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> dk16: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"
//#include "lib/grad16.wgsl"
//#include "lib/rope16.wgsl"

fn rope16_in(key: bool, i: u32) -> vec2<f32> {
    if (key) {
        return vec2<f32>(dk[i], dk[i + 1u]);
    }
    return vec2<f32>(dq[i], dq[i + 1u]);
}

fn rope16_out(key: bool, e: u32, v: vec4<f32>) {
    if (key) {
        dk16[e] = grad16(v);
    } else {
        dq16[e] = grad16(v);
    }
}

@compute @workgroup_size(WG)
fn rope_qk_backward_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    rope16(flat_id(gid, nwg), true);
}
