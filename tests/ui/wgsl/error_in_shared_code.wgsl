// A helper of the file preamble with an error, used by two kernels: one error, at the helper,
// naming both kernels.
fn count() -> u32 { return 1.5; }

// --- KERNEL: a ---
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(WG)
fn a(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = count(); }

// --- KERNEL: b ---
@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(WG)
fn b(@builtin(global_invocation_id) gid: vec3<u32>) { y[gid.x] = 2u * count(); }
