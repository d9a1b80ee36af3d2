// The block walk of RMSNorm's backward, shared by `rmsnorm_backward` (dx overwritten) and
// `rmsnorm_backward_acc` (dx accumulated) in `02_norm.wgsl`; the math and the order of every sum
// are in `rmsnorm_backward`'s header there.
//
// Provides `rmsnorm_backward_block(wid, nwg, tid)`. Expects the bindings `x`, `gamma`, `rrms`,
// `dy`, `partials` and `p` (rows, d) of those kernels, NORM_BLOCK, and the hook the including
// kernel defines:
//   fn put_dx(k: u32, v: f32)   element k of the input gradient is v (store it, or add it)

// Lanes per row in the dot-product pass: 32 consecutive invocations read 32 consecutive
// elements of one row (coalesced), 8 rows at a time.
const LANES: u32 = 32u;
// Per row and lane: the lane's part of Σ dy·γ·x (4 KiB).
var<workgroup> sh_part: array<f32, 1024>;
// Per row of the block: rrms, and rrms³ · (Σ dy·γ·x) / d.
var<workgroup> sh_r: array<f32, NORM_BLOCK>;
var<workgroup> sh_coef: array<f32, NORM_BLOCK>;

// The block of workgroup `flat_wg(wid, nwg)`.
fn rmsnorm_backward_block(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) {
    let blk = flat_wg(wid, nwg);
    let blocks = (p.rows + NORM_BLOCK - 1u) / NORM_BLOCK;
    if (blk >= blocks) {
        return;
    }
    let r0 = blk * NORM_BLOCK;
    let nr = min(NORM_BLOCK, p.rows - r0);
    // Pass 1: the per-row dot products Σ dy·γ·x for all rows of the block at once. Invocation
    // (group g = tid / 32, lane l = tid % 32) takes rows g, g+8, g+16, g+24 and columns
    // j ≡ l (mod 32); then invocation i < 32 adds row i's 32 lane sums in lane order. A fixed
    // order, independent of the subgroup size, and two barriers instead of 32 reductions.
    // The four rows go through the columns together (one γ load and up to 8 independent loads
    // of dy and x per step, to keep loads in flight); each row's sum is the same chain of fmas
    // in increasing j as one row alone.
    let lane = tid % LANES;
    let ri = vec4<u32>(tid / LANES) + vec4<u32>(0u, 8u, 16u, 24u);
    let ok = ri < vec4<u32>(nr);
    // Row starts (only used for rows below nr, so never past the end).
    let rb = (vec4<u32>(r0) + ri) * p.d;
    var acc = vec4<f32>(0.0);
    for (var j = lane; j < p.d; j += LANES) {
        let gj = gamma[j];
        if (ok.x) {
            acc.x = fma(dy[rb.x + j] * gj, x[rb.x + j], acc.x);
        }
        if (ok.y) {
            acc.y = fma(dy[rb.y + j] * gj, x[rb.y + j], acc.y);
        }
        if (ok.z) {
            acc.z = fma(dy[rb.z + j] * gj, x[rb.z + j], acc.z);
        }
        if (ok.w) {
            acc.w = fma(dy[rb.w + j] * gj, x[rb.w + j], acc.w);
        }
    }
    sh_part[ri.x * LANES + lane] = acc.x;
    sh_part[ri.y * LANES + lane] = acc.y;
    sh_part[ri.z * LANES + lane] = acc.z;
    sh_part[ri.w * LANES + lane] = acc.w;
    workgroupBarrier();
    if (tid < nr) {
        var dot = 0.0;
        for (var l = 0u; l < LANES; l++) {
            dot += sh_part[tid * LANES + l];
        }
        let r = rrms[r0 + tid];
        sh_r[tid] = r;
        sh_coef[tid] = r * r * r * dot / f32(p.d);
    }
    workgroupBarrier();
    // Pass 2: each invocation owns columns j ≡ tid (mod 256): dx for every row of the block,
    // and the column's partial dγ summed over the block's rows in row order. Rows go four at a
    // time (8 loads in flight), then one at a time for the last nr % 4.
    for (var j = tid; j < p.d; j += WG) {
        let g = gamma[j];
        var dg = 0.0;
        var i = 0u;
        for (; i + 4u <= nr; i += 4u) {
            let k0 = (r0 + i) * p.d + j;
            let k = vec4<u32>(k0, k0 + p.d, k0 + 2u * p.d, k0 + 3u * p.d);
            let xv = vec4<f32>(x[k.x], x[k.y], x[k.z], x[k.w]);
            let dyv = vec4<f32>(dy[k.x], dy[k.y], dy[k.z], dy[k.w]);
            let r = vec4<f32>(sh_r[i], sh_r[i + 1u], sh_r[i + 2u], sh_r[i + 3u]);
            let cf = vec4<f32>(sh_coef[i], sh_coef[i + 1u], sh_coef[i + 2u], sh_coef[i + 3u]);
            let dxv = r * g * dyv - xv * cf;
            put_dx(k.x, dxv.x);
            put_dx(k.y, dxv.y);
            put_dx(k.z, dxv.z);
            put_dx(k.w, dxv.w);
            dg = fma(dyv.x * xv.x, r.x, dg);
            dg = fma(dyv.y * xv.y, r.y, dg);
            dg = fma(dyv.z * xv.z, r.z, dg);
            dg = fma(dyv.w * xv.w, r.w, dg);
        }
        for (; i < nr; i++) {
            let k = (r0 + i) * p.d + j;
            let r = sh_r[i];
            let xv = x[k];
            let dyv = dy[k];
            put_dx(k, r * g * dyv - xv * sh_coef[i]);
            dg = fma(dyv * xv, r, dg);
        }
        partials[blk * p.d + j] = dg;
    }
}
