// Test fixture: a kernel with tensor cores and no portable form, so that an adapter without
// cooperative matrices reports `Error::MissingFeature` (and one with them runs the smallest
// cooperative-matrix product there is).

// --- KERNEL: coop_tiles ---
// C = A·B for p.n independent 16×16 tiles on tensor cores only. Tile t: A and B at vec4 t·64 of
// `a` and `b` (16×16 row-major f16, 4 per vec4: row stride 4 vec4s), its product (f32) written by
// every subgroup of workgroup t to its own copy at (t·64 + subgroup)·256 of `c` (at most 64
// subgroups of a 64-invocation workgroup), so copy 0 always exists. Overwrites those copies.
// @grid workgroups(p.n)
// @requires len(a) >= p.n * 64
// @requires len(b) >= p.n * 64
// @requires len(c) >= p.n * 64 * 256
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
struct Params {
    n: u32,
}
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn coop_tiles(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sg: u32) {
    if (wid.x >= p.n) {
        return;
    }
    let at = wid.x * 64u;
    let ma = coopLoadT<coop_mat16x16<f16, A>>(&a[at], 4u);
    let mb = coopLoadT<coop_mat16x16<f16, B>>(&b[at], 4u);
    let out = (wid.x * 64u + sg) * 256u;
    let ld = 16u;
    coopStoreT(coopMultiplyAdd(ma, mb, coop_mat16x16<f32, C>()), &c[out], ld);
}
