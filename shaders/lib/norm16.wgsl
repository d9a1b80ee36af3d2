// The row walk of `norm::rmsnorm_f16` and `norm::residual_rmsnorm_f16` (02_norm.wgsl).
//
// A workgroup of WG = 256 invocations takes NORM_ROWS = 4 consecutive rows, NORM_LANES = 64
// invocations per row. Lane l of a row takes the row's vec4 columns l + 64·k (columns
// 4l + 256·k … +3): in each step the row's 64 lanes cover 256 consecutive columns. The first
// NORM_HELD = 4 steps (columns < 1024, all of a row of d ≤ 1024) are loaded up front, 16 loads
// in flight per invocation (and γ's next to them), and stay in registers until the output, so x
// is read once there; wider rows go on one step at a time and read their later columns again
// for the output. Each lane's sum of squares is one fma chain in increasing column order; the
// 64 lane sums of a row meet in workgroup memory after one barrier and every lane adds its row's
// 64 in lane order (broadcast reads): a fixed order, whatever the subgroup size, and the same
// bits on every run.
//
// Provides NORM_ROWS, `load_x4`, `norm16_rows(wid, nwg, tid)`. Hooks of the including kernel:
// bindings `x` (f32), `gamma` (f32), `y` (vec4<f16>), `rrms` (f32), uniform `p` (rows, d, eps),
// and
//   fn first4(base: u32, c: u32, lim: u32) -> vec4<f32>   the row input at columns c..c+3 of
//       the row starting at element `base`, zeros at columns ≥ lim (lim = d, or 0 for a row
//       that does not exist); called once per column, before any `load_x4` of that column.

const NORM_ROWS: u32 = 4u;
const NORM_LANES: u32 = 64u;
const_assert NORM_ROWS * NORM_LANES == WG;
// Columns one step of a row's lanes covers, and the steps held in registers.
const NORM_STEP: u32 = 256u;
const NORM_HELD: u32 = 4u;

var<workgroup> sh_norm: array<f32, WG>;

// x at columns c..c+3 of the row starting at `base`, zeros at columns ≥ lim.
fn load_x4(base: u32, c: u32, lim: u32) -> vec4<f32> {
    let i = base + c;
    if (c + 3u < lim && p.d % 4u == 0u) {
        // i is a multiple of 4 here; written as 4·q so that a compiler can see the four loads
        // are one aligned 16-byte load.
        let q = 4u * (i / 4u);
        return vec4<f32>(x[q], x[q + 1u], x[q + 2u], x[q + 3u]);
    }
    if (c + 3u < lim) {
        return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
    }
    var v = vec4<f32>(0.0);
    if (c < lim) {
        v.x = x[i];
    }
    if (c + 1u < lim) {
        v.y = x[i + 1u];
    }
    if (c + 2u < lim) {
        v.z = x[i + 2u];
    }
    return v;
}

// γ at columns c..c+3, zeros at columns ≥ d.
fn gamma4(c: u32) -> vec4<f32> {
    if (c + 3u < p.d) {
        return vec4<f32>(gamma[c], gamma[c + 1u], gamma[c + 2u], gamma[c + 3u]);
    }
    var v = vec4<f32>(0.0);
    if (c < p.d) {
        v.x = gamma[c];
    }
    if (c + 1u < p.d) {
        v.y = gamma[c + 1u];
    }
    if (c + 2u < p.d) {
        v.z = gamma[c + 2u];
    }
    return v;
}

// s + Σ a², components in order.
fn sum_sq4(s: f32, a: vec4<f32>) -> f32 {
    return fma(a.w, a.w, fma(a.z, a.z, fma(a.y, a.y, fma(a.x, a.x, s))));
}

// Writes the output vec4 of columns c..c+3 (c < lim): f16(a · r · γ), padding columns 0.
fn put16(row_vec: u32, c: u32, lim: u32, a: vec4<f32>, r: f32, g: vec4<f32>) {
    if (c < lim) {
        y[row_vec + c / 4u] = to_f16x4(select(vec4<f32>(0.0), a * r * g, below4(c, lim)));
    }
}

fn norm16_rows(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) {
    let r0 = flat_wg(wid, nwg) * NORM_ROWS;
    // Workgroups past the last row (2-D grid tail) leave together: uniform control flow.
    if (r0 >= p.rows) {
        return;
    }
    let row = r0 + tid / NORM_LANES;
    let lane = tid % NORM_LANES;
    // A row past the end (the last workgroup's) has no columns: no loads, no stores.
    let lim = select(0u, p.d, row < p.rows);
    let base = row * p.d;
    let c0 = 4u * lane;
    let a0 = first4(base, c0, lim);
    let a1 = first4(base, c0 + NORM_STEP, lim);
    let a2 = first4(base, c0 + 2u * NORM_STEP, lim);
    let a3 = first4(base, c0 + 3u * NORM_STEP, lim);
    let g0 = gamma4(c0);
    let g1 = gamma4(c0 + NORM_STEP);
    let g2 = gamma4(c0 + 2u * NORM_STEP);
    let g3 = gamma4(c0 + 3u * NORM_STEP);
    var ss = sum_sq4(sum_sq4(sum_sq4(sum_sq4(0.0, a0), a1), a2), a3);
    for (var c = c0 + NORM_HELD * NORM_STEP; c < lim; c += NORM_STEP) {
        ss = sum_sq4(ss, first4(base, c, lim));
    }
    sh_norm[tid] = ss;
    workgroupBarrier();
    let sb = tid - lane;
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < NORM_LANES; k += 4u) {
        acc += vec4<f32>(sh_norm[sb + k], sh_norm[sb + k + 1u], sh_norm[sb + k + 2u], sh_norm[sb + k + 3u]);
    }
    let total = (acc.x + acc.y) + (acc.z + acc.w);
    let r = 1.0 / sqrt(total / f32(p.d) + p.eps);
    let yb = row * ((p.d + 3u) / 4u);
    put16(yb, c0, lim, a0, r, g0);
    put16(yb, c0 + NORM_STEP, lim, a1, r, g1);
    put16(yb, c0 + 2u * NORM_STEP, lim, a2, r, g2);
    put16(yb, c0 + 3u * NORM_STEP, lim, a3, r, g3);
    for (var c = c0 + NORM_HELD * NORM_STEP; c < lim; c += NORM_STEP) {
        put16(yb, c, lim, load_x4(base, c, lim), r, gamma4(c));
    }
    if (lane == 0u && row < p.rows) {
        rrms[row] = r;
    }
}
