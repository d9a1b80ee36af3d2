// --- KERNEL: diverge ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn diverge(@builtin(local_invocation_index) tid: u32) {
    if (tid < 32u) {
        x[tid] = subgroupAdd(x[tid]);
    }
}
