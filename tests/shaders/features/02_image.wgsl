// Images: a box blur through a sampler (after webgpu-samples' image blur), a storage texture
// written from a sampled one, and a read-write storage texture updated in place.

struct Dims {
    width: u32,
    height: u32,
}

// --- KERNEL: blur ---
// `dst` = the 3×3 box average of `src` around each texel, sampled at texel centres through
// `samp` (clamp to edge: a border texel repeats).
// @grid workgroups(ceil_div(dims.width, 8), ceil_div(dims.height, 8))
@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var samp: sampler;
@group(0) @binding(2) var dst: texture_storage_2d<rgba32float, write>;
@group(0) @binding(3) var<uniform> dims: Dims;
@compute @workgroup_size(8, 8)
fn blur(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x >= dims.width || gid.y >= dims.height) {
        return;
    }
    let size = vec2<f32>(f32(dims.width), f32(dims.height));
    var sum = vec4<f32>(0.0);
    for (var dy = -1; dy <= 1; dy++) {
        for (var dx = -1; dx <= 1; dx++) {
            let at = vec2<f32>(f32(i32(gid.x) + dx), f32(i32(gid.y) + dy)) + 0.5;
            sum += textureSampleLevel(src, samp, at / size, 0.0);
        }
    }
    textureStore(dst, vec2<i32>(gid.xy), sum / 9.0);
}

// --- KERNEL: invert ---
// `dst` = 1 − `src`, texel by texel (loads, no sampler), into an 8-bit storage texture.
// @grid workgroups(ceil_div(dims.width, 8), ceil_div(dims.height, 8))
@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var dst: texture_storage_2d<rgba8unorm, write>;
@group(0) @binding(2) var<uniform> dims: Dims;
@compute @workgroup_size(8, 8)
fn invert(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < dims.width && gid.y < dims.height) {
        textureStore(dst, vec2<i32>(gid.xy), vec4<f32>(1.0) - textureLoad(src, vec2<i32>(gid.xy), 0));
    }
}

// --- KERNEL: accumulate ---
// `acc` = 2·`acc` + `counts` in place: a read-write storage texture and an integer texture.
// @grid workgroups(ceil_div(dims.width, 8), ceil_div(dims.height, 8))
@group(0) @binding(0) var acc: texture_storage_2d<r32float, read_write>;
@group(0) @binding(1) var counts: texture_2d<u32>;
@group(0) @binding(2) var<uniform> dims: Dims;
@compute @workgroup_size(8, 8)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < dims.width && gid.y < dims.height) {
        let at = vec2<i32>(gid.xy);
        let v = textureLoad(acc, at).x * 2.0 + f32(textureLoad(counts, at, 0).x);
        textureStore(acc, at, vec4<f32>(v, 0.0, 0.0, 0.0));
    }
}
