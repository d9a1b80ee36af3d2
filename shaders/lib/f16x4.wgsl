// The f16x4 rounding of the fused f16-output kernels of the mixed-precision step, each of which
// does in one pass what would take two or three (an f32 result written, read back and cast to
// f16), laid out for memory speed on a large GPU (many independent loads per invocation,
// coalesced, all issued before any is used; hand-unrolled straight-line stores, no dynamically
// indexed vectors, which drivers spill to local memory):
//
//   norm::rmsnorm_f16, norm::residual_rmsnorm_f16   RMSNorm forward straight to f16 (+ the residual add)
//   activation::swiglu_f16                          silu(gate)·up straight to f16
//   optimizer::adamw_mixed                          AdamW on f32 masters + f16 copy, bias correction
//                                                   that does not advance on steps the loss scaler skipped
//   cast::cast_f16x4                                f32 → f16x4 rows, 4 vec4 per invocation
//
// f16 outputs use the f16x4 row layout of the f16 products (an [R, C] matrix is R·⌈C/4⌉
// vec4<f16>, every row zero-padded to a multiple of 4; exactly row-major f16 when C % 4 == 0).
// Values are rounded to nearest f16 as `ops::to_f16x4` does on the host: beyond ±65504 they
// become ±65504, NaN stays NaN. All f32 inputs are plain row-major `array<f32>` (the trainer's
// buffers). Every grid takes the runtime's 2-D fallback past the device's workgroups-per-dimension
// limit.

const F16_LIMIT: f32 = 65504.0;
const LANES4: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// Which lanes are NaN, from the bits (`v != v` may be folded away by drivers).
fn nan4(v: vec4<f32>) -> vec4<bool> {
    let bits = bitcast<vec4<u32>>(v);
    return ((bits & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u)) & ((bits & vec4<u32>(0x007fffffu)) != vec4<u32>(0u));
}

// Whether any lane would overflow f16 — NaN, ±Inf or beyond ±65504 — the overflow rule of loss
// scaling (`cast::cast_grad_f16x4`'s; NaN and ±Inf from the exponent bits, since comparisons of
// NaN may be folded away).
fn overflows16(v: vec4<f32>) -> bool {
    let inf_nan = (bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u);
    return any(inf_nan | (abs(v) > vec4<f32>(F16_LIMIT)));
}

// v as f16, clamped to ±65504 first (NaN kept): `ops::to_f16x4`'s rounding.
fn to_f16x4(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(select(clamp(v, vec4<f32>(-F16_LIMIT), vec4<f32>(F16_LIMIT)), v, nan4(v)));
}

// Which of the four columns c..c+3 lie below `lim`.
fn below4(c: u32, lim: u32) -> vec4<bool> {
    return vec4<u32>(c) + LANES4 < vec4<u32>(lim);
}
