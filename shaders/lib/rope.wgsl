// Rotary position embedding's angles and pairs, shared by the forward and backward kernels of
// 04_rope.wgsl (and their fused-row walk, `lib/rope_qkv.wgsl`), so all rotate by exactly the
// same θ, with the rotation's arithmetic written once for each direction.
//
// Provides `rope_cos_sin`, `rope_pair`, `rope_rotate` and `rope_rotate_back`; no hooks.
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

// Pair `idx` of a `[B, S, heads, Dh]` tensor (Dh even; idx < B·S·heads·Dh/2, row-major over
// (b, s, head, i)): the offset `at` of its first element x[2i] and (cos θ_i, sin θ_i) at
// position s + pos_offset.
struct RopePair {
    at: u32,
    cs: vec2<f32>,
}

fn rope_pair(idx: u32, seq: u32, heads: u32, head_dim: u32, pos_offset: u32, base: f32) -> RopePair {
    let half = head_dim / 2u;
    let i = idx % half;
    let row = idx / half; // (b·S + s)·heads + head
    let s = (row / heads) % seq;
    return RopePair(row * head_dim + 2u * i, rope_cos_sin(s + pos_offset, i, head_dim, base));
}

// The pair (x[2i], x[2i+1]) rotated by θ (`cs` = (cos θ, sin θ)): the forward.
fn rope_rotate(x: vec2<f32>, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(x.x * cs.x - x.y * cs.y, x.x * cs.y + x.y * cs.x);
}

// The pair's gradient rotated back by θ (the transpose of `rope_rotate`): the backward.
fn rope_rotate_back(y: vec2<f32>, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(y.x * cs.x + y.y * cs.y, y.y * cs.x - y.x * cs.y);
}
