// One block of the gradient norm's partial sums, for `reduce_norm_sq` in `12_optimizer.wgsl`;
// the order of every sum is in its header there.
//
// Provides `norm_sq_block(t, b, n, tid)`: (Σ x² over the finite values, count of the others) of
// block b of tensor t (n values), the same on every invocation of the workgroup, which all call
// it (it holds the workgroup reductions). Expects NORM_BLOCK, WG, EW_LO / EW_HI
// (`lib/elementwise.wgsl`), `wg_reduce_sum`, and the hook the including kernel defines:
//   fn norm_load(t: u32, j: u32) -> f32   value j of tensor t

// `st` = (Σ x², count of non-finite x) after one more value: x² of a finite value added, a
// NaN/±Inf counted and left out.
fn fold1(st: vec2<f32>, v: f32) -> vec2<f32> {
    if (is_finite(v)) {
        return vec2<f32>(st.x + v * v, st.y);
    }
    return vec2<f32>(st.x, st.y + 1.0);
}

// `fold1` over the components of `x` in order.
fn fold_sq(st: vec2<f32>, x: vec4<f32>) -> vec2<f32> {
    return fold1(fold1(fold1(fold1(st, x.x), x.y), x.z), x.w);
}

fn norm_load4(t: u32, l: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(norm_load(t, l.x), norm_load(t, l.y), norm_load(t, l.z), norm_load(t, l.w));
}

fn norm_sq_block(t: u32, b: u32, n: u32, tid: u32) -> vec2<f32> {
    let i = b * NORM_BLOCK + tid;
    // (Σ x² over the finite values, count of the others) of the invocation's values, in order.
    var st = vec2<f32>(0.0);
    if (b < n / NORM_BLOCK) {
        // A full block: the 16 loads first, then the sums in index order.
        let l0 = i + EW_LO;
        let l1 = i + EW_HI;
        let l2 = l0 + 8u * WG;
        let l3 = l1 + 8u * WG;
        let x0 = norm_load4(t, l0);
        let x1 = norm_load4(t, l1);
        let x2 = norm_load4(t, l2);
        let x3 = norm_load4(t, l3);
        st = fold_sq(fold_sq(fold_sq(fold_sq(st, x0), x1), x2), x3);
    } else {
        // The last, partial block (the same order).
        for (var k = 0u; k < NORM_BLOCK / WG; k++) {
            let j = i + k * WG;
            if (j < n) {
                st = fold1(st, norm_load(t, j));
            }
        }
    }
    // Counts of at most 16 per invocation and 4096 per block: exact in f32.
    return vec2<f32>(wg_reduce_sum(tid, st.x), wg_reduce_sum(tid, st.y));
}
