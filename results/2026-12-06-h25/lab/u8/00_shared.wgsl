// The shared preamble. `kernels!` prepends this file to every kernel in this folder (after the
// `enable` directives that kernel needs), so everything here can be used in any kernel as if it
// were built in. It must not contain kernel markers.

// Invocations per workgroup of 1-D kernels, and the size the reductions below expect.
const WG: u32 = 256u;
// A finite "minus infinity": the identity of max.
const NEG_INF: f32 = -3.4028234e38;

// One linear invocation index in a 1-D dispatch, whether the host dispatched (n, 1, 1) or the
// 2-D fallback (x, y, 1). Use with @workgroup_size(WG); compare with the length and skip
// invocations past the end.
fn flat_id(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

// The linear index of a workgroup in a 1-D dispatch (one workgroup per row, head or block).
fn flat_wg(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Whether x is neither NaN nor ±Inf. WGSL has no isNan/isInf, and `x == x` may be folded away
// by compilers that assume no NaNs, so test the exponent bits.
fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

// Which lanes of v are NaN (exponent bits all ones, mantissa not zero), on the bits for the same
// reason: WGSL lets `v != v` be folded to false, and Chrome on SwiftShader does fold it.
fn nan_lanes(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

// Scratch for the workgroup reductions.
var<workgroup> sh_red: array<f32, WG>;

// Workgroup-wide sum and max. Every invocation of a workgroup of WG invocations must call them
// together, in uniform control flow, with its `local_invocation_index`; every invocation gets
// the result. Each ends with a barrier, so one reduction can follow another (max, then sum)
// without a fast invocation overwriting `sh_red` while a slow one still reads it.
//
// With subgroups: a subgroup reduction, one partial per subgroup in `sh_red`, then every
// subgroup reduces all the partials (redundantly, which keeps control flow uniform). The
// subgroup size is read at run time (`subgroupAdd(1u)`), so this is right for sizes 4 to 128
// (lavapipe runs 8, SwiftShader 4, NVIDIA 32, AMD 32 or 64), not only for 32. Invocations are
// assumed to fill subgroups in order of `local_invocation_index`, as every implementation does
// for 1-D workgroups. The result is the same on every run (no atomics).
//
// Without subgroups: a classic tree reduction over `sh_red`, 8 steps for 256 values.
//#if subgroups
fn wg_reduce_sum(tid: u32, val: f32) -> f32 {
    let sg = subgroupAdd(1u);
    let partial = subgroupAdd(val);
    if (tid % sg == 0u) {
        sh_red[tid / sg] = partial;
    }
    workgroupBarrier();
    var acc = 0.0;
    for (var i = tid % sg; i < WG / sg; i += sg) {
        acc += sh_red[i];
    }
    let total = subgroupAdd(acc);
    workgroupBarrier();
    return total;
}

fn wg_reduce_max(tid: u32, val: f32) -> f32 {
    let sg = subgroupAdd(1u);
    let partial = subgroupMax(val);
    if (tid % sg == 0u) {
        sh_red[tid / sg] = partial;
    }
    workgroupBarrier();
    var acc = NEG_INF;
    for (var i = tid % sg; i < WG / sg; i += sg) {
        acc = max(acc, sh_red[i]);
    }
    let total = subgroupMax(acc);
    workgroupBarrier();
    return total;
}
//#else
fn wg_reduce_sum(tid: u32, val: f32) -> f32 {
    sh_red[tid] = val;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            sh_red[tid] += sh_red[tid + s];
        }
        workgroupBarrier();
    }
    let total = sh_red[0];
    workgroupBarrier();
    return total;
}

fn wg_reduce_max(tid: u32, val: f32) -> f32 {
    sh_red[tid] = val;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            sh_red[tid] = max(sh_red[tid], sh_red[tid + s]);
        }
        workgroupBarrier();
    }
    let total = sh_red[0];
    workgroupBarrier();
    return total;
}
//#endif
