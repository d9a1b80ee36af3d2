// --- KERNEL: set_flags ---
// bool is not host-shareable: the parser accepts this, naga's validator does not.
@group(0) @binding(0) var<storage, read_write> flags: array<bool>;
@compute @workgroup_size(WG)
fn set_flags(@builtin(global_invocation_id) gid: vec3<u32>) {
    flags[gid.x] = true;
}
