// --- KERNEL: gemm16 ---
// Y = op(A)·op(B) with f16 operands and f32 sums, on tensor cores where the device has them
// (f32 FMAs on the same operands elsewhere): the products of mixed precision. A is [M, K]
// (A_T = false) or [K, M] (A_T = true), B [K, N] (B_T = false) or [N, K] (B_T = true), both f16
// in the f16x4 row layout (`lib/gemm16.wgsl` has the scheme and the limits of its overrides);
// Y [M, N] f32 row-major. Overwrites `y` (G_ACC = false) or accumulates into it (G_ACC = true:
// Y += the product). With p.parts > 1, part s of the contraction (p.chunk rows of K each, a
// multiple of G_BK) writes its product to y[s·M·N …] instead, for `matmul_parts_add`.
// Record it through `kernels::gemm`: its plan chooses the overrides for the adapter and the
// shape, and checks every length exactly (the annotations below hold whatever the orientation).
// Grid: p.tiles = ⌈M/G_BM⌉·⌈N/G_BN⌉·parts workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(y) >= p.m * p.n * max(p.parts, 1)
//#include "lib/gemm16.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: GemmParams;
override G_ACC: bool = false;

fn store_out(row: u32, col: u32, v: f32) {
    let at = g_off + row * g_n + col;
    if (G_ACC) {
        y[at] = y[at] + v;
    } else {
        y[at] = v;
    }
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = g_off + row * g_n + col;
    let ld = g_n;
    if (G_ACC) {
        let sum = c + coopLoadT<coop_mat16x16<f32, C>>(&y[at], ld);
        coopStoreT(sum, &y[at], ld);
    } else {
        coopStoreT(c, &y[at], ld);
    }
}
//#endif

@compute @workgroup_size(G_WG)
fn gemm16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
//#endif
) {
//#if coop
    if (p.m == 0u) {
        return;
    }
    g_m = M_C;
    g_n = N_C;
    g_k = K_C;
    g_off = 0u;
    let blk = g_order(wid.x, M_C / G_BM, N_C / G_BN);
    g_group(tid, sg, 8u, 0u, blk.x * G_BM, blk.y * G_BN, 0u, K_C, 1u);
//#else
    g16_run(flat_wg(wid, nwg), tid);
//#endif
}

