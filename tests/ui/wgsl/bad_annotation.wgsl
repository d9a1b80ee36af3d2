// --- KERNEL: k ---
// Scales x.
// @grid threads(p.n)
// @requires len(y) >= p.n
struct P { n: u32, a: f32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(WG)
fn k(@builtin(global_invocation_id) gid: vec3<u32>) { x[gid.x] = p.a; }
