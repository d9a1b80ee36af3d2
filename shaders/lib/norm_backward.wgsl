// The block walk of RMSNorm's backward, shared by `rmsnorm_backward`, `rmsnorm_backward_acc`,
// `rmsnorm_backward_f16` and `rmsnorm_backward_acc_f16` in `02_norm.wgsl`; the math and the
// order of every sum are in `rmsnorm_backward`'s header there.
//
// A workgroup of WG = 256 invocations takes a block of NORM_BLOCK = 8 consecutive rows: small
// blocks give a large GPU many workgroups to keep in flight at the usual few thousand rows, and
// every invocation issues many independent loads before it uses any, since the walk is bound by
// memory latency, not by bandwidth.
//
// Pass 1, the per-row dot products Σ dy·γ·x: 32 invocations per row, each on the row's vec4
// columns lane + 32·k, NB_UNROLL of them loaded per step; each invocation's sum is one fma
// chain in increasing column order; the 32 lane sums of a row meet in workgroup memory and one
// invocation per row adds them in lane order. A fixed order, independent of the subgroup size.
//
// Pass 2, dx and the partial dγ: invocation t owns the vec4 columns t + 256·k for every row of
// the block. It loads the block's 8 rows of x and dy at those columns (and dx for the
// accumulating kernels) before storing anything, then stores dx and, for the f16 kernels, dx's
// f16 copy straight from registers: the f16 copy is made from the very values stored into dx,
// so it is what `cast::cast_grad_f16x4` makes of that dx. The column's partial dγ is one fma
// chain over the block's rows in row order.
//
// Where d % 4 == 0 a row's vec4 columns are 16-byte aligned and loaded and stored as one vec4;
// otherwise element by element, with the columns past d (the last vec4 of a row) as zeros in
// and nothing out.
//
// Provides `rmsnorm_backward_block(wid, nwg, tid)`. Expects the bindings `x`, `gamma`, `rrms`,
// `dy`, `dx`, `partials` (all f32) and `p` (rows, d) of those kernels, NORM_BLOCK, and the
// hooks the including kernel defines:
//   const NB_ACC: bool                  dx += the gradient (true) or dx = the gradient (false)
//   fn put_dx16(i: u32, v: vec4<f32>)   vec4 i of dx's f16x4 copy is v (columns past d are 0);
//                                       empty for the f32 kernels

// Invocations per row in pass 1.
const NB_LANES: u32 = 32u;
const_assert NB_LANES * NORM_BLOCK == WG;
// Vec4 columns an invocation loads per step of pass 1.
const NB_UNROLL: u32 = 4u;
const NB_COLS4: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// Per row and lane: the lane's part of Σ dy·γ·x (1 KiB).
var<workgroup> sh_part: array<f32, WG>;
// Per row of the block: rrms, and rrms³ · (Σ dy·γ·x) / d.
var<workgroup> sh_r: array<f32, NORM_BLOCK>;
var<workgroup> sh_coef: array<f32, NORM_BLOCK>;

// Which of the columns c..c+3 lie below d.
fn nb_in(c: u32) -> vec4<bool> {
    return vec4<u32>(c) + NB_COLS4 < vec4<u32>(p.d);
}

// The operands `nb_load4` reads.
const NB_X: u32 = 0u;
const NB_DY: u32 = 1u;
const NB_DX: u32 = 2u;
const NB_GAMMA: u32 = 3u;

// Element i of operand `op` (a literal at every call: the switch folds away).
fn nb_elem(op: u32, i: u32) -> f32 {
    switch op {
        case NB_X: {
            return x[i];
        }
        case NB_DY: {
            return dy[i];
        }
        case NB_DX: {
            return dx[i];
        }
        default: {
            return gamma[i];
        }
    }
}

// `op` at columns c..c+3 of the row starting at element `base` (c < d; γ with base 0), zeros
// past d.
fn nb_load4(op: u32, base: u32, c: u32) -> vec4<f32> {
    let i = base + c;
    if (p.d % 4u == 0u) {
        // i is a multiple of 4 here; written as 4·q so that a compiler can see the four loads
        // are one aligned 16-byte load.
        let q = 4u * (i / 4u);
        return vec4<f32>(nb_elem(op, q), nb_elem(op, q + 1u), nb_elem(op, q + 2u), nb_elem(op, q + 3u));
    }
    var v = vec4<f32>(nb_elem(op, i), 0.0, 0.0, 0.0);
    if (c + 1u < p.d) {
        v.y = nb_elem(op, i + 1u);
    }
    if (c + 2u < p.d) {
        v.z = nb_elem(op, i + 2u);
    }
    if (c + 3u < p.d) {
        v.w = nb_elem(op, i + 3u);
    }
    return v;
}

// Stores v into dx at columns c..c+3 of the row starting at `base` (c < d), columns below d.
fn nb_store_dx4(base: u32, c: u32, v: vec4<f32>) {
    let i = base + c;
    if (p.d % 4u == 0u) {
        let q = 4u * (i / 4u);
        dx[q] = v.x;
        dx[q + 1u] = v.y;
        dx[q + 2u] = v.z;
        dx[q + 3u] = v.w;
        return;
    }
    dx[i] = v.x;
    if (c + 1u < p.d) {
        dx[i + 1u] = v.y;
    }
    if (c + 2u < p.d) {
        dx[i + 2u] = v.z;
    }
    if (c + 3u < p.d) {
        dx[i + 3u] = v.w;
    }
}

// Stores v into the partials at element i (= block·d + c, c < d) on, columns below d.
fn nb_store_part4(i: u32, c: u32, v: vec4<f32>) {
    if (p.d % 4u == 0u) {
        let q = 4u * (i / 4u);
        partials[q] = v.x;
        partials[q + 1u] = v.y;
        partials[q + 2u] = v.z;
        partials[q + 3u] = v.w;
        return;
    }
    partials[i] = v.x;
    if (c + 1u < p.d) {
        partials[i + 1u] = v.y;
    }
    if (c + 2u < p.d) {
        partials[i + 2u] = v.z;
    }
    if (c + 3u < p.d) {
        partials[i + 3u] = v.w;
    }
}

// acc + Σ dy·γ·x over the four columns, in column order (one fma chain).
fn nb_dot4(acc: f32, dyv: vec4<f32>, g: vec4<f32>, xv: vec4<f32>) -> f32 {
    var s = fma(dyv.x * g.x, xv.x, acc);
    s = fma(dyv.y * g.y, xv.y, s);
    s = fma(dyv.z * g.z, xv.z, s);
    return fma(dyv.w * g.w, xv.w, s);
}

// Row i of the block at the invocation's vec4 column q (columns c = 4q..4q+3), x and dy (and
// for the accumulating kernels the old dx) already loaded: stores dx and its f16 copy, returns
// the partial dγ chain continued with this row's dy·x·rrms.
fn nb_row_out(row: u32, i: u32, q: u32, c: u32, g: vec4<f32>, xv: vec4<f32>, dyv: vec4<f32>, old: vec4<f32>, dg: vec4<f32>) -> vec4<f32> {
    let r = sh_r[i];
    let grad = r * g * dyv - xv * sh_coef[i];
    var v = grad;
    if (NB_ACC) {
        v = old + grad;
    }
    nb_store_dx4(row * p.d, c, v);
    put_dx16(row * ((p.d + 3u) / 4u) + q, select(vec4<f32>(0.0), v, nb_in(c)));
    return fma(dyv * xv, vec4<f32>(r), dg);
}

// The old dx of the accumulating kernels at row `base`, column c; zeros for the others (never
// used there, and not loaded).
fn nb_old4(base: u32, c: u32) -> vec4<f32> {
    if (NB_ACC) {
        return nb_load4(NB_DX, base, c);
    }
    return vec4<f32>(0.0);
}

// The block of workgroup `flat_wg(wid, nwg)`.
fn rmsnorm_backward_block(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) {
    let blk = flat_wg(wid, nwg);
    let blocks = (p.rows + NORM_BLOCK - 1u) / NORM_BLOCK;
    // Workgroups past the last block (2-D grid tail) leave together: uniform control flow.
    if (blk >= blocks) {
        return;
    }
    let r0 = blk * NORM_BLOCK;
    let nr = min(NORM_BLOCK, p.rows - r0);
    let cq = (p.d + 3u) / 4u;

    // Pass 1. Row g of the block, lane l; a row past the end (the last block's) has no columns.
    let g = tid / NB_LANES;
    let lane = tid % NB_LANES;
    let lim = select(0u, cq, g < nr);
    let base = (r0 + g) * p.d;
    var acc = 0.0;
    for (var q0 = lane; q0 < lim; q0 += NB_UNROLL * NB_LANES) {
        // All loads of the step first (zeros for columns past the row), then the chain.
        let q1 = q0 + NB_LANES;
        let q2 = q0 + 2u * NB_LANES;
        let q3 = q0 + 3u * NB_LANES;
        let x0 = nb_load4(NB_X, base, 4u * q0);
        let y0 = nb_load4(NB_DY, base, 4u * q0);
        let g0 = nb_load4(NB_GAMMA, 0u, 4u * q0);
        var x1 = vec4<f32>(0.0);
        var y1 = vec4<f32>(0.0);
        var g1 = vec4<f32>(0.0);
        if (q1 < lim) {
            x1 = nb_load4(NB_X, base, 4u * q1);
            y1 = nb_load4(NB_DY, base, 4u * q1);
            g1 = nb_load4(NB_GAMMA, 0u, 4u * q1);
        }
        var x2 = vec4<f32>(0.0);
        var y2 = vec4<f32>(0.0);
        var g2 = vec4<f32>(0.0);
        if (q2 < lim) {
            x2 = nb_load4(NB_X, base, 4u * q2);
            y2 = nb_load4(NB_DY, base, 4u * q2);
            g2 = nb_load4(NB_GAMMA, 0u, 4u * q2);
        }
        var x3 = vec4<f32>(0.0);
        var y3 = vec4<f32>(0.0);
        var g3 = vec4<f32>(0.0);
        if (q3 < lim) {
            x3 = nb_load4(NB_X, base, 4u * q3);
            y3 = nb_load4(NB_DY, base, 4u * q3);
            g3 = nb_load4(NB_GAMMA, 0u, 4u * q3);
        }
        acc = nb_dot4(nb_dot4(nb_dot4(nb_dot4(acc, y0, g0, x0), y1, g1, x1), y2, g2, x2), y3, g3, x3);
    }
    sh_part[tid] = acc;
    workgroupBarrier();
    if (tid < nr) {
        var dot = 0.0;
        for (var l = 0u; l < NB_LANES; l++) {
            dot += sh_part[tid * NB_LANES + l];
        }
        let r = rrms[r0 + tid];
        sh_r[tid] = r;
        sh_coef[tid] = r * r * r * dot / f32(p.d);
    }
    workgroupBarrier();

    // Pass 2.
    for (var q = tid; q < cq; q += WG) {
        let c = 4u * q;
        let gv = nb_load4(NB_GAMMA, 0u, c);
        var dg = vec4<f32>(0.0);
        if (nr == NORM_BLOCK) {
            let b0 = r0 * p.d;
            let b1 = b0 + p.d;
            let b2 = b1 + p.d;
            let b3 = b2 + p.d;
            let b4 = b3 + p.d;
            let b5 = b4 + p.d;
            let b6 = b5 + p.d;
            let b7 = b6 + p.d;
            let x0 = nb_load4(NB_X, b0, c);
            let x1 = nb_load4(NB_X, b1, c);
            let x2 = nb_load4(NB_X, b2, c);
            let x3 = nb_load4(NB_X, b3, c);
            let x4 = nb_load4(NB_X, b4, c);
            let x5 = nb_load4(NB_X, b5, c);
            let x6 = nb_load4(NB_X, b6, c);
            let x7 = nb_load4(NB_X, b7, c);
            let y0 = nb_load4(NB_DY, b0, c);
            let y1 = nb_load4(NB_DY, b1, c);
            let y2 = nb_load4(NB_DY, b2, c);
            let y3 = nb_load4(NB_DY, b3, c);
            let y4 = nb_load4(NB_DY, b4, c);
            let y5 = nb_load4(NB_DY, b5, c);
            let y6 = nb_load4(NB_DY, b6, c);
            let y7 = nb_load4(NB_DY, b7, c);
            let o0 = nb_old4(b0, c);
            let o1 = nb_old4(b1, c);
            let o2 = nb_old4(b2, c);
            let o3 = nb_old4(b3, c);
            let o4 = nb_old4(b4, c);
            let o5 = nb_old4(b5, c);
            let o6 = nb_old4(b6, c);
            let o7 = nb_old4(b7, c);
            dg = nb_row_out(r0, 0u, q, c, gv, x0, y0, o0, dg);
            dg = nb_row_out(r0 + 1u, 1u, q, c, gv, x1, y1, o1, dg);
            dg = nb_row_out(r0 + 2u, 2u, q, c, gv, x2, y2, o2, dg);
            dg = nb_row_out(r0 + 3u, 3u, q, c, gv, x3, y3, o3, dg);
            dg = nb_row_out(r0 + 4u, 4u, q, c, gv, x4, y4, o4, dg);
            dg = nb_row_out(r0 + 5u, 5u, q, c, gv, x5, y5, o5, dg);
            dg = nb_row_out(r0 + 6u, 6u, q, c, gv, x6, y6, o6, dg);
            dg = nb_row_out(r0 + 7u, 7u, q, c, gv, x7, y7, o7, dg);
        } else {
            // The last block of a row count that is not a multiple of NORM_BLOCK: row by row,
            // the same per-row step and the same row order.
            for (var i = 0u; i < nr; i++) {
                let b = (r0 + i) * p.d;
                dg = nb_row_out(r0 + i, i, q, c, gv, nb_load4(NB_X, b, c), nb_load4(NB_DY, b, c), nb_old4(b, c), dg);
            }
        }
        nb_store_part4(blk * p.d + c, c, dg);
    }
}
