// --- KERNEL: ok ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(WG)
fn ok(@builtin(global_invocation_id) gid: vec3<u32>) {
    x[gid.x] = twice(x[gid.x]);
}
