// --- KERNEL: first ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn first(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = 1.0; }

  // --- KERNEL: second ---
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(WG)
fn second(@builtin(global_invocation_id) gid: vec3<u32>) { y[gid.x] = 2.0; }

// --- kernel: third ---
@group(0) @binding(0) var<storage, read_write> z: array<f32>;
@compute @workgroup_size(WG)
fn third(@builtin(global_invocation_id) gid: vec3<u32>) { z[gid.x] = 3.0; }
