// --- KERNEL: sample ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var image: texture_multisampled_2d<f32>;
@compute @workgroup_size(WG)
fn sample(@builtin(global_invocation_id) gid: vec3<u32>) {
    x[gid.x] = textureLoad(image, vec2<i32>(i32(gid.x), 0), 0).x;
}
