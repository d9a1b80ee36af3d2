// Test kernels: one 16×16 tile of C = A·B (A, B f16 row-major, C f32), through tensor cores where
// the adapter offers 16×16×16 with f16 A/B and f32 C, else portably.

@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

// --- KERNEL: tile ---
// `c = a · b` for one 16×16 tile: tensor cores where offered, else a portable loop.
// @requires len(a) >= 256
// @requires len(b) >= 256
// @requires len(c) >= 256
@compute @workgroup_size(32)
fn tile(@builtin(local_invocation_index) lid: u32) {
//#if coop
    let ma = coopLoadT<coop_mat16x16<f16, A>>(&a[0], 16u);
    let mb = coopLoadT<coop_mat16x16<f16, B>>(&b[0], 16u);
    let mc = coopMultiplyAdd(ma, mb, coop_mat16x16<f32, C>());
    coopStoreT(mc, &c[0], 16u);
//#else
    for (var e = lid; e < 256u; e += 32u) {
        var acc = 0.0;
        for (var k = 0u; k < 16u; k++) {
            acc += f32(a[(e / 16u) * 16u + k]) * f32(b[k * 16u + e % 16u]);
        }
        c[e] = acc;
    }
//#endif
}

// --- KERNEL: tile_coop_only ---
// `c = a · b` for one 16×16 tile, through tensor cores only (no fallback).
// @requires len(a) >= 256
// @requires len(b) >= 256
// @requires len(c) >= 256
@compute @workgroup_size(32)
fn tile_coop_only(@builtin(local_invocation_index) lid: u32) {
    let ma = coopLoadT<coop_mat16x16<f16, A>>(&a[0], 16u);
    let mb = coopLoadT<coop_mat16x16<f16, B>>(&b[0], 16u);
    let mc = coopMultiplyAdd(ma, mb, coop_mat16x16<f32, C>());
    coopStoreT(mc, &c[0], 16u);
}
