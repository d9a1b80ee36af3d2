// File preamble with a syntax error on line 3.
const SCALE: f32 = 3.0;
const BROKEN: f32 = (1.0 + ;

// --- KERNEL: k ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(WG)
fn k(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = SCALE; }
