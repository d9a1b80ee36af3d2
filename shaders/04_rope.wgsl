// Rotary position embedding (RoPE), in place, on interleaved pairs.
//
// Each head vector x (length Dh, even) of Q `[B, S, H, Dh]` or K `[B, S, Hkv, Dh]` is rotated
// pair by pair: for i < Dh/2, with pos = s + pos_offset and θ_i = pos · base^(−2i/Dh),
//     y[2i]   = x[2i] cos θ_i − x[2i+1] sin θ_i
//     y[2i+1] = x[2i] sin θ_i + x[2i+1] cos θ_i
// One invocation per pair; grid `threads(B·S·heads·Dh/2)` (the 2-D fallback past the device's
// workgroup limit is recovered by `flat_id`). The inverse rotation for the backward pass is
// `rope_q_backward` / `rope_k_backward` in `10_backward_attention.wgsl`.
//
// Accuracy: the angle is formed in f32 (base^(−2i/Dh) to about 1e-7 relative, the product
// with pos compensated with an fma where the device fuses it), then reduced to [−π, π] with a
// two-part 2π (exact for |θ| < 2^16·2π ≈ 4·10^5) before cos/sin, so devices whose sin/cos are
// only accurate near zero stay accurate. What remains is about 1e-7·|θ_i| rad, the error of an
// f32 frequency.

// 2π split so that k·TWO_PI_HI is exact for k < 2^16 (6.28125 has 8 significant bits).
const TWO_PI_HI: f32 = 6.28125;
const TWO_PI_LO: f32 = 0.0019353071795864769;
const INV_TWO_PI: f32 = 0.15915494309189535;

// (cos θ, sin θ) for θ = pos · base^(−2i/dh).
fn rope_cos_sin(pos: u32, i: u32, dh: u32, base: f32) -> vec2<f32> {
    let inv_freq = exp2(-(f32(2u * i) / f32(dh)) * log2(base));
    let fp = f32(pos);
    let a = fp * inv_freq;
    // The rounding error of the product (exact where fma is fused, 0 otherwise).
    let a_err = fma(fp, inv_freq, -a);
    let k = round(a * INV_TWO_PI);
    let r = ((a - k * TWO_PI_HI) - k * TWO_PI_LO) + a_err;
    return vec2<f32>(cos(r), sin(r));
}

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
    let half = p.head_dim / 2u;
    if (idx >= p.batch * p.seq * p.heads * half) {
        return;
    }
    let i = idx % half;
    let row = idx / half; // (b·S + s)·H + h
    let s = (row / p.heads) % p.seq;
    let cs = rope_cos_sin(s + p.pos_offset, i, p.head_dim, p.base);
    let a = row * p.head_dim + 2u * i;
    let x0 = q[a];
    let x1 = q[a + 1u];
    q[a] = x0 * cs.x - x1 * cs.y;
    q[a + 1u] = x0 * cs.y + x1 * cs.x;
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
    let half = p.head_dim / 2u;
    if (idx >= p.batch * p.seq * p.kv_heads * half) {
        return;
    }
    let i = idx % half;
    let row = idx / half; // (b·S + s)·Hkv + h
    let s = (row / p.kv_heads) % p.seq;
    let cs = rope_cos_sin(s + p.pos_offset, i, p.head_dim, p.base);
    let a = row * p.head_dim + 2u * i;
    let x0 = k[a];
    let x1 = k[a + 1u];
    k[a] = x0 * cs.x - x1 * cs.y;
    k[a + 1u] = x0 * cs.y + x1 * cs.x;
}
