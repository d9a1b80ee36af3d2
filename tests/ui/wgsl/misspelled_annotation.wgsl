// --- KERNEL: fill ---
// Fills x with 1.
// @require len(x) >= 1
// @grd threads(arrayLength)
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = 1.0; }
