// --- KERNEL: KERNELS ---
// A kernel named like the generated list of kernels.
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1)
fn KERNELS() {
    x[0] = 1u;
}
