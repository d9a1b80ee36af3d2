// Casts between f32 and f16 (for f16 copies of the f32 master weights, and back).
//
// Element-wise, 1-D, 8 elements per invocation, through `lib/elementwise.wgsl` (loads in flight
// to cover the memory latency, the 2-D grid fallback, a guarded tail). Both need SHADER_F16.
//#include "lib/elementwise.wgsl"

// The largest finite f16.
const F16_MAX: f32 = 65504.0;

// --- KERNEL: cast_f32_to_f16 ---
// `dst[i] = f16(clamp(src[i], −65504, 65504))` for i < p.n: values beyond the f16 range,
// ±Inf included, become ±65504 (never Inf); NaN stays NaN; in-range values
// round to a neighbouring f16 (WGSL allows either neighbour; hardware rounds to nearest).
// `src` (f32) and `dst` (f16): n values each. Overwrites `dst`. Needs SHADER_F16.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(src) >= p.n
// @requires len(dst) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f16>;
@group(0) @binding(2) var<uniform> p: Params;

// The conversion of one value. NaN: exponent all ones, mantissa non-zero, tested on the bits
// (`v != v` may be folded away). WGSL's clamp of NaN is implementation-defined, so a NaN
// bypasses the clamp and goes through the plain conversion, which gives an f16 NaN on Vulkan,
// Metal and D3D (IEEE conversion; the tests check it on the adapter). An explicit f16 NaN
// constant cannot be written: WGSL has no f16 NaN literal and naga rejects the size-changing
// `bitcast<vec2<f16>>(u32)`.
fn to_f16(v: f32) -> f16 {
    let bits = bitcast<u32>(v);
    let is_nan = (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0u;
    return select(f16(clamp(v, -F16_MAX, F16_MAX)), f16(v), is_nan);
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // All 8 loads first, then the stores.
    let a = vec4<f32>(src[lo.x], src[lo.y], src[lo.z], src[lo.w]);
    let b = vec4<f32>(src[hi.x], src[hi.y], src[hi.z], src[hi.w]);
    dst[lo.x] = to_f16(a.x);
    dst[lo.y] = to_f16(a.y);
    dst[lo.z] = to_f16(a.z);
    dst[lo.w] = to_f16(a.w);
    dst[hi.x] = to_f16(b.x);
    dst[hi.y] = to_f16(b.y);
    dst[hi.z] = to_f16(b.z);
    dst[hi.w] = to_f16(b.w);
}

fn ew_one(j: u32) {
    dst[j] = to_f16(src[j]);
}

@compute @workgroup_size(WG)
fn cast_f32_to_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: cast_f16_to_f32 ---
// `dst[i] = f32(src[i])` for i < p.n (exact). `src` (f16) and `dst` (f32): n values each.
// Overwrites `dst`. Needs SHADER_F16.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(src) >= p.n
// @requires len(dst) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let a = vec4<f32>(vec4<f16>(src[lo.x], src[lo.y], src[lo.z], src[lo.w]));
    let b = vec4<f32>(vec4<f16>(src[hi.x], src[hi.y], src[hi.z], src[hi.w]));
    dst[lo.x] = a.x;
    dst[lo.y] = a.y;
    dst[lo.z] = a.z;
    dst[lo.w] = a.w;
    dst[hi.x] = b.x;
    dst[hi.y] = b.y;
    dst[hi.z] = b.z;
    dst[hi.w] = b.w;
}

fn ew_one(j: u32) {
    dst[j] = f32(src[j]);
}

@compute @workgroup_size(WG)
fn cast_f16_to_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}
