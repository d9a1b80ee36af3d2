// --- KERNEL: first ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn first(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = 1.0; }

@compute @workgroup_size(WG)
fn forgotten_marker(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = 2.0; }
