// Casts between f32 and f16 (for f16 copies of the f32 master weights, and back).
//
// Element-wise, 1-D: one invocation per element, grid `threads(p.n)` (2-D past the device's
// workgroup limit, `flat_id` recovers the index), the tail past `n` skipped. Both need
// SHADER_F16.

// The largest finite f16.
const F16_MAX: f32 = 65504.0;

// --- KERNEL: cast_f32_to_f16 ---
// `dst[i] = f16(clamp(src[i], −65504, 65504))` for i < p.n: values beyond the f16 range,
// ±Inf included, become ±65504 (never Inf); NaN stays NaN; in-range values
// round to a neighbouring f16 (WGSL allows either neighbour; hardware rounds to nearest).
// `src` (f32) and `dst` (f16): n values each. Overwrites `dst`. Needs SHADER_F16.
// Grid: one invocation per element, 1-D over n.
// @grid threads(p.n)
// @requires len(src) >= p.n
// @requires len(dst) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f16>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn cast_f32_to_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        let v = src[i];
        let bits = bitcast<u32>(v);
        // NaN: exponent all ones, mantissa non-zero, tested on the bits (`v != v` may be
        // folded away). WGSL's clamp of NaN is implementation-defined, so a NaN bypasses the
        // clamp and goes through the plain conversion, which gives an f16 NaN on Vulkan, Metal
        // and D3D (IEEE conversion; the tests check it on the adapter). An explicit f16 NaN
        // constant cannot be written: WGSL has no f16 NaN literal and naga rejects the
        // size-changing `bitcast<vec2<f16>>(u32)`.
        let is_nan = (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0u;
        dst[i] = select(f16(clamp(v, -F16_MAX, F16_MAX)), f16(v), is_nan);
    }
}

// --- KERNEL: cast_f16_to_f32 ---
// `dst[i] = f32(src[i])` for i < p.n (exact). `src` (f16) and `dst` (f32): n values each.
// Overwrites `dst`. Needs SHADER_F16.
// Grid: one invocation per element, 1-D over n.
// @grid threads(p.n)
// @requires len(src) >= p.n
// @requires len(dst) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn cast_f16_to_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.n) {
        dst[i] = f32(src[i]);
    }
}
