// --- KERNEL: fill ---
// Fills x with 1.
// @requires len(x) >= n
// @unchecked len(x) >= n
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> n: u32;
@compute @workgroup_size(WG)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>) { if (gid.x < n) { x[gid.x] = 1.0; } }

// --- KERNEL: fill_twice ---
// Fills x with 2.
// @unchecked
// @requires len(x) >= n
// @unchecked
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> n: u32;
@compute @workgroup_size(WG)
fn fill_twice(@builtin(global_invocation_id) gid: vec3<u32>) { if (gid.x < n) { x[gid.x] = 2.0; } }
