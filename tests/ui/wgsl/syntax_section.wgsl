// File preamble.
const SCALE: f32 = 3.0;

// --- KERNEL: fine ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn fine(@builtin(global_invocation_id) gid: vec3<u32>) {
    x[gid.x] = SCALE;
}

// --- KERNEL: broken ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn broken(@builtin(global_invocation_id) gid: vec3<u32>) {
    let y = x[gid.x] * SCALE
    x[gid.x] = y;
}
