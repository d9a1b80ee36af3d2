// --- KERNEL: tile_product ---
// One 16×16 tile of C = A·B on tensor cores, with a portable fallback. The store's stride is an
// inline expression: naga 30.0.2 validates this, but its SPIR-V writer panics on it.
@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> n: u32;

@compute @workgroup_size(32)
fn tile_product(@builtin(local_invocation_index) lid: u32) {
//#if coop
    let ma = coopLoadT<coop_mat16x16<f16, A>>(&a[0], n);
    let mb = coopLoadT<coop_mat16x16<f16, B>>(&b[0], n);
    let mc = coopMultiplyAdd(ma, mb, coop_mat16x16<f32, C>());
    coopStoreT(mc, &c[0], n * 1u);
//#else
    for (var e = lid; e < 256u; e += 32u) {
        var acc = 0.0;
        for (var k = 0u; k < 16u; k++) {
            acc += f32(a[(e / 16u) * n + k]) * f32(b[k * n + e % 16u]);
        }
        c[(e / 16u) * n + e % 16u] = acc;
    }
//#endif
}
