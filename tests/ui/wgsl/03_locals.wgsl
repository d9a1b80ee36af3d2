// Names the generated function body once took for its own locals: a constant `v` (the override
// code bound `v`), and bindings named like the public parameters next to an override.
const v: u32 = 3u;

// --- KERNEL: k ---
override gain: u32 = 1u;
@group(0) @binding(0) var<storage, read_write> grid: array<u32>;
@group(0) @binding(1) var<storage, read_write> rec: array<u32>;
@group(0) @binding(2) var<storage, read_write> overrides: array<u32>;
@compute @workgroup_size(1)
fn k() {
    grid[0] = v * gain;
    rec[0] = v + gain;
    overrides[0] = gain;
}
