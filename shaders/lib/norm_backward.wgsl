// The block walk of RMSNorm's backward, shared by `rmsnorm_backward`, `rmsnorm_backward_acc`,
// `rmsnorm_backward_f16` and `rmsnorm_backward_acc_f16` in `02_norm.wgsl`; the math is in
// `rmsnorm_backward`'s header there.
//
// A workgroup of WG = 256 invocations takes a block of NORM_BLOCK = 8 consecutive rows: small
// blocks give a large GPU many workgroups to keep in flight at the usual few thousand rows.
// Invocation t owns the vec4 columns t + 256·k of every row of the block, in both passes.
//
// Pass 1, the per-row dot products Σ dy·γ·x: for each of its columns the invocation loads the
// block's 8 rows of x and dy (16 loads in flight) and continues one fma chain per row, in
// increasing column order. The 256 × 8 chains meet in workgroup memory (8 KiB); 64 invocations
// add a row's 32 consecutive invocations' sums each, in order, and one invocation per row adds
// its 8 segment sums in order: a fixed order, independent of the subgroup size.
//
// Pass 2, dx and the partial dγ, column by column: dx (its old value loaded first for the
// accumulating kernels) and, for the f16 kernels, dx's f16 copy stored straight from
// registers, and the column's partial dγ as one fma chain over the block's rows in row order.
// Rows of up to 256 vec4 columns (d ≤ 1024, the usual widths) keep pass 1's x and dy in
// registers for it, so they are read once, not a second time in the hope that the L2 still
// holds them (the trainer's 1024 blocks of x and dy are 50 MB, an H100's whole L2). Wider rows
// read their later columns again.
//
// The f16 copy is made from the very values stored into dx, so it is what
// `cast::cast_grad_f16x4` makes of that dx.
//
// Where d % 4 == 0 a row's vec4 columns are 16-byte aligned and loaded and stored as one vec4;
// otherwise element by element, with the columns past d (the last vec4 of a row) as zeros in
// and nothing out. Rows past the last (the last block's) are zeros in and nothing out.
//
// Provides `rmsnorm_backward_block(wid, nwg, tid)`. Expects the bindings `x`, `gamma`, `rrms`,
// `dy`, `dx`, `partials` (all f32) and `p` (rows, d) of those kernels, NORM_BLOCK, and the
// hooks the including kernel defines:
//   const NB_ACC: bool                  dx += the gradient (true) or dx = the gradient (false)
//   fn put_dx16(i: u32, v: vec4<f32>)   vec4 i of dx's f16x4 copy is v (columns past d are 0);
//                                       empty for the f32 kernels

const_assert NORM_BLOCK == 8u;
// Invocations whose sums one segment adds, and the segments of a row.
const NB_SEG: u32 = 32u;
const NB_SEGS: u32 = WG / NB_SEG;
const_assert NB_SEGS * NORM_BLOCK <= WG;
const NB_COLS4: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// Per row and invocation: the invocation's part of Σ dy·γ·x (8 KiB).
var<workgroup> sh_dot: array<f32, 2048>;
const_assert NORM_BLOCK * WG == 2048u;
// Per row and segment: the segment's sum.
var<workgroup> sh_seg: array<f32, 64>;
const_assert NORM_BLOCK * NB_SEGS == 64u;
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

// `op` at columns c..c+3 of row i of the block starting at row r0, zeros for a row past the
// last (i ≥ nr).
fn nb_row4(op: u32, r0: u32, i: u32, nr: u32, c: u32) -> vec4<f32> {
    if (i < nr) {
        return nb_load4(op, (r0 + i) * p.d, c);
    }
    return vec4<f32>(0.0);
}

// `op` at columns c..c+3 of the block's 8 rows, all loads issued together.
fn nb_rows(op: u32, r0: u32, nr: u32, c: u32) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(
        nb_row4(op, r0, 0u, nr, c),
        nb_row4(op, r0, 1u, nr, c),
        nb_row4(op, r0, 2u, nr, c),
        nb_row4(op, r0, 3u, nr, c),
        nb_row4(op, r0, 4u, nr, c),
        nb_row4(op, r0, 5u, nr, c),
        nb_row4(op, r0, 6u, nr, c),
        nb_row4(op, r0, 7u, nr, c),
    );
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

// Each row's chain continued with one vec4 column of x, dy and γ.
fn nb_dots(acc: array<f32, 8>, xs: array<vec4<f32>, 8>, ys: array<vec4<f32>, 8>, g: vec4<f32>) -> array<f32, 8> {
    return array<f32, 8>(
        nb_dot4(acc[0], ys[0], g, xs[0]),
        nb_dot4(acc[1], ys[1], g, xs[1]),
        nb_dot4(acc[2], ys[2], g, xs[2]),
        nb_dot4(acc[3], ys[3], g, xs[3]),
        nb_dot4(acc[4], ys[4], g, xs[4]),
        nb_dot4(acc[5], ys[5], g, xs[5]),
        nb_dot4(acc[6], ys[6], g, xs[6]),
        nb_dot4(acc[7], ys[7], g, xs[7]),
    );
}

// Row i of the block at the invocation's vec4 column q (columns c = 4q..4q+3), a row that
// exists (i < nr): stores dx and its f16 copy, returns the partial dγ chain continued with this
// row's dy·x·rrms.
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

// Pass 2 at vec4 column q of block `blk` (rows r0 … r0 + nr − 1), x and dy of its rows given.
fn nb_column_out(blk: u32, r0: u32, nr: u32, q: u32, xs: array<vec4<f32>, 8>, ys: array<vec4<f32>, 8>) {
    let c = 4u * q;
    let g = nb_load4(NB_GAMMA, 0u, c);
    // The old dx of every row before anything is stored; never loaded for the others.
    var old = array<vec4<f32>, 8>();
    if (NB_ACC) {
        old = nb_rows(NB_DX, r0, nr, c);
    }
    // Rows past the last (the last block of a row count that is not a multiple of NORM_BLOCK)
    // are skipped; every index is a constant, so the arrays stay in registers.
    var dg = nb_row_out(r0, 0u, q, c, g, xs[0], ys[0], old[0], vec4<f32>(0.0));
    if (1u < nr) {
        dg = nb_row_out(r0 + 1u, 1u, q, c, g, xs[1], ys[1], old[1], dg);
    }
    if (2u < nr) {
        dg = nb_row_out(r0 + 2u, 2u, q, c, g, xs[2], ys[2], old[2], dg);
    }
    if (3u < nr) {
        dg = nb_row_out(r0 + 3u, 3u, q, c, g, xs[3], ys[3], old[3], dg);
    }
    if (4u < nr) {
        dg = nb_row_out(r0 + 4u, 4u, q, c, g, xs[4], ys[4], old[4], dg);
    }
    if (5u < nr) {
        dg = nb_row_out(r0 + 5u, 5u, q, c, g, xs[5], ys[5], old[5], dg);
    }
    if (6u < nr) {
        dg = nb_row_out(r0 + 6u, 6u, q, c, g, xs[6], ys[6], old[6], dg);
    }
    if (7u < nr) {
        dg = nb_row_out(r0 + 7u, 7u, q, c, g, xs[7], ys[7], old[7], dg);
    }
    nb_store_part4(blk * p.d + c, c, dg);
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

    // Pass 1. The first column stays in registers for pass 2; later ones (d > 1024) are read
    // again there.
    var xs = array<vec4<f32>, 8>();
    var ys = array<vec4<f32>, 8>();
    var acc = array<f32, 8>();
    if (tid < cq) {
        let c = 4u * tid;
        xs = nb_rows(NB_X, r0, nr, c);
        ys = nb_rows(NB_DY, r0, nr, c);
        acc = nb_dots(acc, xs, ys, nb_load4(NB_GAMMA, 0u, c));
    }
    for (var q = tid + WG; q < cq; q += WG) {
        let c = 4u * q;
        acc = nb_dots(acc, nb_rows(NB_X, r0, nr, c), nb_rows(NB_DY, r0, nr, c), nb_load4(NB_GAMMA, 0u, c));
    }
    sh_dot[tid] = acc[0];
    sh_dot[WG + tid] = acc[1];
    sh_dot[2u * WG + tid] = acc[2];
    sh_dot[3u * WG + tid] = acc[3];
    sh_dot[4u * WG + tid] = acc[4];
    sh_dot[5u * WG + tid] = acc[5];
    sh_dot[6u * WG + tid] = acc[6];
    sh_dot[7u * WG + tid] = acc[7];
    workgroupBarrier();
    // Segment s of row i: invocations 32s … 32s + 31, in order.
    if (tid < NORM_BLOCK * NB_SEGS) {
        let at = (tid / NB_SEGS) * WG + (tid % NB_SEGS) * NB_SEG;
        var s = 0.0;
        for (var j = 0u; j < NB_SEG; j++) {
            s += sh_dot[at + j];
        }
        sh_seg[tid] = s;
    }
    workgroupBarrier();
    if (tid < nr) {
        var dot = 0.0;
        for (var s = 0u; s < NB_SEGS; s++) {
            dot += sh_seg[tid * NB_SEGS + s];
        }
        let r = rrms[r0 + tid];
        sh_r[tid] = r;
        sh_coef[tid] = r * r * r * dot / f32(p.d);
    }
    workgroupBarrier();

    // Pass 2.
    if (tid < cq) {
        nb_column_out(blk, r0, nr, tid, xs, ys);
    }
    for (var q = tid + WG; q < cq; q += WG) {
        let c = 4u * q;
        nb_column_out(blk, r0, nr, q, nb_rows(NB_X, r0, nr, c), nb_rows(NB_DY, r0, nr, c));
    }
}
