// --- KERNEL: k ---
enable f16;
@group(0) @binding(0) var<storage, read_write> x: array<f16>;
@compute @workgroup_size(WG)
fn k(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = 1.0h; }
