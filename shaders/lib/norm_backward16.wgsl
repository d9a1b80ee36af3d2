// The f16 copy of RMSNorm's input gradient for `rmsnorm_backward_f16` and
// `rmsnorm_backward_acc_f16` (02_norm.wgsl): after the block walk of `lib/norm_backward.wgsl`
// has stored the block's rows of dx (the f32 kernels' values, bit for bit: the same walk and
// hook), and a storage barrier has made them visible to the whole workgroup, the workgroup
// reads those rows back (just written, so from cache rather than a separate pass over memory)
// and writes them in the f16x4 row layout with the overflow check of loss scaling
// (`lib/grad16.wgsl`): what `cast::cast_grad_f16x4` would make of the f32 dx.
//
// Provides `rmsnorm_dx16_block(wid, nwg, tid)`. Expects the bindings `dx` (f32, [rows, d]),
// `dx16` (vec4<f16>, [rows, ⌈d/4⌉]), `flag` and `p` (rows, d), NORM_BLOCK, `lib/f16x4.wgsl` and
// `lib/grad16.wgsl`.

// The block of workgroup `flat_wg(wid, nwg)`: invocation tid takes the block's vec4s
// tid + k·WG (consecutive invocations on consecutive vec4s of a row).
fn rmsnorm_dx16_block(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) {
    let blk = flat_wg(wid, nwg);
    let blocks = (p.rows + NORM_BLOCK - 1u) / NORM_BLOCK;
    if (blk >= blocks) {
        return;
    }
    let r0 = blk * NORM_BLOCK;
    let nr = min(NORM_BLOCK, p.rows - r0);
    let cq = (p.d + 3u) / 4u;
    for (var e = tid; e < nr * cq; e += WG) {
        let i = e / cq;
        let c = (e - i * cq) * 4u;
        let k = (r0 + i) * p.d + c;
        var v = vec4<f32>(0.0);
        v.x = dx[k];
        if (c + 1u < p.d) {
            v.y = dx[k + 1u];
        }
        if (c + 2u < p.d) {
            v.z = dx[k + 2u];
        }
        if (c + 3u < p.d) {
            v.w = dx[k + 3u];
        }
        dx16[r0 * cq + e] = grad16(v);
    }
}
