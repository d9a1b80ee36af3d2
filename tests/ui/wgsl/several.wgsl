// Two broken kernels and a good one: both errors are reported, `good` is still generated.

// --- KERNEL: bad_type ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn bad_type(@builtin(global_invocation_id) gid: vec3<u32>) {
    x[gid.x] = undefined_name;
}

// --- KERNEL: good ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn good(@builtin(global_invocation_id) gid: vec3<u32>) {
    x[gid.x] = twice(1.0);
}

// --- KERNEL: bad_barrier ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn bad_barrier(@builtin(local_invocation_index) tid: u32) {
    if (x[tid] > 0.0) {
        workgroupBarrier();
    }
}
