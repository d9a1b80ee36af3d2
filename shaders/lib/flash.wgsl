// The machinery every flash-attention kernel shares (`flash_forward*` in 05_attention.wgsl,
// `flash_backward_*` in 10_backward_attention.wgsl): blocks of FL_T = 64 queries and 64 keys of
// one (batch, head), 256 invocations, operands staged from global memory in slices, the portable
// (f32 FMA) forms of the two products, and who holds which per-row values. No S×S buffer: a
// block's scores live in workgroup memory or registers only.
//
// Two products, each over one 64 × 64 block:
//   scores  S[i][j] = Σ_d X[i][d]·Y[j][d]   X, Y: rows of Q, K, V or dO (Q·Kᵀ, dO·Vᵀ); the
//           contraction over the head dim is staged FL_DC dims at a time (X rows, then Y rows,
//           in `fl_st`);
//   values  A·B over the 64 rows of B, one 64-wide chunk c of the head dim at a time: A is the
//           block of P or dS in workgroup memory (`fl_ps_get`, as stored or transposed), B rows
//           of V, dO, Q or K staged FL_KS rows at a time.
// Ownership between the steps:
//   the score tile: invocation (tx, ty) = (tid % 16, tid / 16) holds S[4ty + a][4tx + b] in
//       `fl_s[a][b]` (portable products);
//   rows: invocation (i, qq) = (tid / 4, tid % 4) (`fl_row`, `fl_quarter`, `fl_owner`) holds
//       row i: keys 16qq … 16qq + 15 of a score row (the softmax) and columns 16qq … 16qq + 15
//       of every 64-wide value chunk c in `fl_acc` / `fl_acc2` (vec4 4c + m: columns
//       64c + 16qq + 4m … +3).
// The portable score product stages its Y operand transposed (dims as rows of 64 keys): the
// tile's neighbouring invocations (keys 4tx …) then read neighbouring vec4s, where rows of Y
// would put them 4 rows apart (on a GPU, on the same few banks); the tensor-core products stage
// both operands as rows (lib/flash_coop.wgsl).
// The head dim is at most FL_DH_MAX = 256 (4 chunks); dims past it are zeros in every staged
// slice, so any head dim works. Private arrays are only ever indexed by constants (the loops
// below that touch them are unrolled by hand, and chunk numbers are literals at every call):
// wgpu bounds every loop, so a driver would not unroll one and the array would live in local
// memory. The same unrolling keeps lavapipe's per-invocation loop budget (65535 iterations in
// all) for long sequences.
//
// The including kernel defines (WGSL resolves these module-wide):
//   constants FL_DC (dims per staged score slice, a multiple of 16), FL_KS (rows per staged value
//       slice, a multiple of 16), FL_LDS / FL_LDV / FL_LDT (vec4s per staged score row, value row
//       and transposed score row, padding included), FL_STAGE (vec4s of `fl_st`: ≥ 2·64·FL_LDS,
//       ≥ 64·FL_LDS + FL_DC·FL_LDT and ≥ FL_KS·FL_LDV);
//   `var<workgroup> fl_st: array<vec4<T>, FL_STAGE>` (T = f32 or f16) and
//   fn fl_load(op: u32, row: u32, d4: u32) -> vec4<T>   vec4 d4 (dims 4·d4 … +3) of row `row` of
//       operand `op` (FL_Q, FL_K, FL_V, FL_DO) of the current (b, h), zeros past the sequence or
//       the head dim;
//   fn fl_f32(v: vec4<T>) -> vec4<f32>;
//   fn fl_ps_get(i: u32, j: u32) -> f32   element (row i, column j) of the P / dS block;
//   fn fl_store(second: bool, row: u32, col: u32, v: f32)   one output element (the kernel's
//       first or second output);
//   the uniform `p` with the fields of every flash kernel's `Params` (batch, seq, heads,
//       kv_heads, head_dim, scale).

const FL_T: u32 = 64u;
const FL_DH_MAX: u32 = 256u;
// Operands of `fl_load`: query-side rows (Q, dO) and key-side rows (K, V).
const FL_Q: u32 = 0u;
const FL_K: u32 = 1u;
const FL_V: u32 = 2u;
const FL_DO: u32 = 3u;

// The score tile of the portable products (see above).
var<private> fl_s: array<vec4<f32>, 4>;
// Row-owned value accumulators (O, dQ or dK; dV).
var<private> fl_acc: array<vec4<f32>, 16>;
var<private> fl_acc2: array<vec4<f32>, 16>;

// The row-owner layout: invocation tid owns row `fl_row(tid)`, quarter `fl_quarter(tid)`.
fn fl_row(tid: u32) -> u32 {
    return tid / 4u;
}

fn fl_quarter(tid: u32) -> u32 {
    return tid % 4u;
}

// The invocation that owns quarter q of row i.
fn fl_owner(i: u32, q: u32) -> u32 {
    return 4u * i + q;
}

// Copies rows r0 … r0 + nr − 1 of operand `op`, vec4 columns c4 … c4 + nc − 1, into `fl_st`
// from vec4 `at`, `ld` vec4s per row. Invocations take vec4s tid, tid + 256, … .
fn fl_stage(tid: u32, op: u32, r0: u32, nr: u32, c4: u32, nc: u32, ld: u32, at: u32) {
    for (var e = tid; e < nr * nc; e += WG) {
        let r = e / nc;
        let c = e - r * nc;
        fl_st[at + r * ld + c] = fl_load(op, r0 + r, c4 + c);
    }
}

// Stages score slice d0 … d0 + FL_DC − 1 of the portable products: X rows x0 … as rows, Y rows
// y0 … transposed (row d of the slice holds the 64 keys' dim d0 + d: vec4 c is keys 4c … 4c + 3)
// from vec4 64·FL_LDS, FL_LDT vec4s a row. Call in uniform control flow; starts with a barrier
// (earlier readers of `fl_st` are done) and ends with one (the slice is visible).
fn fl_stage_scores_t(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, d0: u32) {
    workgroupBarrier();
    fl_stage(tid, xop, x0, FL_T, d0 / 4u, FL_DC / 4u, FL_LDS, 0u);
    let at = FL_T * FL_LDS;
    for (var e = tid; e < FL_T * (FL_DC / 4u); e += WG) {
        // Consecutive invocations read consecutive vec4s of a row.
        let r = e / (FL_DC / 4u);
        let c = e - r * (FL_DC / 4u);
        let v = fl_load(yop, y0 + r, d0 / 4u + c);
        let slot = at + 4u * c * FL_LDT + r / 4u;
        let lane = r % 4u;
        fl_st[slot][lane] = v.x;
        fl_st[slot + FL_LDT][lane] = v.y;
        fl_st[slot + 2u * FL_LDT][lane] = v.z;
        fl_st[slot + 3u * FL_LDT][lane] = v.w;
    }
    workgroupBarrier();
}

// Stages value slice rows k0 + ks … + FL_KS − 1 of `op`, dims 64c … 64c + 63. Barriers as
// `fl_stage_scores_t`.
fn fl_stage_values(tid: u32, op: u32, k0: u32, ks: u32, c: u32) {
    workgroupBarrier();
    fl_stage(tid, op, k0 + ks, FL_KS, 16u * c, 16u, FL_LDV, 0u);
    workgroupBarrier();
}

// fl_s[a] += x[a] · y for one staged dim: the tile's rows' values x and its four keys' y.
fn fl_dot_dim(x: vec4<f32>, y: vec4<f32>) {
    fl_s[0] = fma(vec4<f32>(x.x), y, fl_s[0]);
    fl_s[1] = fma(vec4<f32>(x.y), y, fl_s[1]);
    fl_s[2] = fma(vec4<f32>(x.z), y, fl_s[2]);
    fl_s[3] = fma(vec4<f32>(x.w), y, fl_s[3]);
}

// The tile's 16 dots over staged dims 4g … 4g + 3 (X rows 4ty + a as rows, Y keys 4tx + b
// transposed), each output one fma chain in dim order.
fn fl_dot_step(tx: u32, ty: u32, g: u32) {
    let xb = 4u * ty * FL_LDS + g;
    let x0 = fl_f32(fl_st[xb]);
    let x1 = fl_f32(fl_st[xb + FL_LDS]);
    let x2 = fl_f32(fl_st[xb + 2u * FL_LDS]);
    let x3 = fl_f32(fl_st[xb + 3u * FL_LDS]);
    let yb = FL_T * FL_LDS + 4u * g * FL_LDT + tx;
    fl_dot_dim(vec4<f32>(x0.x, x1.x, x2.x, x3.x), fl_f32(fl_st[yb]));
    fl_dot_dim(vec4<f32>(x0.y, x1.y, x2.y, x3.y), fl_f32(fl_st[yb + FL_LDT]));
    fl_dot_dim(vec4<f32>(x0.z, x1.z, x2.z, x3.z), fl_f32(fl_st[yb + 2u * FL_LDT]));
    fl_dot_dim(vec4<f32>(x0.w, x1.w, x2.w, x3.w), fl_f32(fl_st[yb + 3u * FL_LDT]));
}

// The portable score product: fl_s = X·Yᵀ for the invocation's 4×4 tile (unscaled), X rows
// x0 …, Y rows y0 …, over head dim dh. Call in uniform control flow (dh uniform); the last
// slice is read after the call (no barrier at the end).
fn fl_scores_fma(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, dh: u32) {
    let tx = tid % 16u;
    let ty = tid / 16u;
    fl_s = array<vec4<f32>, 4>();
    for (var d0 = 0u; d0 < dh; d0 += FL_DC) {
        fl_stage_scores_t(tid, xop, x0, yop, y0, d0);
        // FL_DC / 4 staged vec4s, four per iteration.
        for (var g = 0u; g < FL_DC / 4u; g += 4u) {
            fl_dot_step(tx, ty, g);
            fl_dot_step(tx, ty, g + 1u);
            fl_dot_step(tx, ty, g + 2u);
            fl_dot_step(tx, ty, g + 3u);
        }
    }
}

// acc[4c + m] += a · (staged value row kk, the row owner's vec4 m), m = 0 … 3 (fl_acc, or
// fl_acc2 when `second`).
fn fl_value_fma(second: bool, c: u32, at: u32, a: f32) {
    let b0 = fl_f32(fl_st[at]);
    let b1 = fl_f32(fl_st[at + 1u]);
    let b2 = fl_f32(fl_st[at + 2u]);
    let b3 = fl_f32(fl_st[at + 3u]);
    let av = vec4<f32>(a);
    if (second) {
        fl_acc2[4u * c] = fma(av, b0, fl_acc2[4u * c]);
        fl_acc2[4u * c + 1u] = fma(av, b1, fl_acc2[4u * c + 1u]);
        fl_acc2[4u * c + 2u] = fma(av, b2, fl_acc2[4u * c + 2u]);
        fl_acc2[4u * c + 3u] = fma(av, b3, fl_acc2[4u * c + 3u]);
    } else {
        fl_acc[4u * c] = fma(av, b0, fl_acc[4u * c]);
        fl_acc[4u * c + 1u] = fma(av, b1, fl_acc[4u * c + 1u]);
        fl_acc[4u * c + 2u] = fma(av, b2, fl_acc[4u * c + 2u]);
        fl_acc[4u * c + 3u] = fma(av, b3, fl_acc[4u * c + 3u]);
    }
}

// A(i, k) of a value product: P/dS[i][k], or P/dS[k][i] when `trans`.
fn fl_a(trans: bool, i: u32, k: u32) -> f32 {
    if (trans) {
        return fl_ps_get(k, i);
    }
    return fl_ps_get(i, k);
}

// The portable value product for chunk c (a literal at every call): row i's accumulators
// += Σ_k A(i, k)·B[k] over the 64 rows of B = `op` rows k0 …, k in order (one fma chain per
// output). Call in uniform control flow.
fn fl_values_fma(tid: u32, second: bool, c: u32, trans: bool, op: u32, k0: u32) {
    let i = fl_row(tid);
    let col = 4u * fl_quarter(tid);
    for (var ks = 0u; ks < FL_T; ks += FL_KS) {
        fl_stage_values(tid, op, k0, ks, c);
        // FL_KS staged rows, four per iteration.
        for (var kk = 0u; kk < FL_KS; kk += 4u) {
            fl_value_fma(second, c, kk * FL_LDV + col, fl_a(trans, i, ks + kk));
            fl_value_fma(second, c, (kk + 1u) * FL_LDV + col, fl_a(trans, i, ks + kk + 1u));
            fl_value_fma(second, c, (kk + 2u) * FL_LDV + col, fl_a(trans, i, ks + kk + 2u));
            fl_value_fma(second, c, (kk + 3u) * FL_LDV + col, fl_a(trans, i, ks + kk + 3u));
        }
    }
}

// The value product over every chunk of head dim dh (portable; dh uniform).
fn fl_values_all_fma(tid: u32, second: bool, trans: bool, op: u32, k0: u32, dh: u32) {
    fl_values_fma(tid, second, 0u, trans, op, k0);
    if (dh > 64u) {
        fl_values_fma(tid, second, 1u, trans, op, k0);
    }
    if (dh > 128u) {
        fl_values_fma(tid, second, 2u, trans, op, k0);
    }
    if (dh > 192u) {
        fl_values_fma(tid, second, 3u, trans, op, k0);
    }
}

// fl_acc scaled by `alpha` (the online softmax's rescale of O), every chunk.
fn fl_rescale(alpha: f32) {
    fl_acc[0] = alpha * fl_acc[0];
    fl_acc[1] = alpha * fl_acc[1];
    fl_acc[2] = alpha * fl_acc[2];
    fl_acc[3] = alpha * fl_acc[3];
    fl_acc[4] = alpha * fl_acc[4];
    fl_acc[5] = alpha * fl_acc[5];
    fl_acc[6] = alpha * fl_acc[6];
    fl_acc[7] = alpha * fl_acc[7];
    fl_acc[8] = alpha * fl_acc[8];
    fl_acc[9] = alpha * fl_acc[9];
    fl_acc[10] = alpha * fl_acc[10];
    fl_acc[11] = alpha * fl_acc[11];
    fl_acc[12] = alpha * fl_acc[12];
    fl_acc[13] = alpha * fl_acc[13];
    fl_acc[14] = alpha * fl_acc[14];
    fl_acc[15] = alpha * fl_acc[15];
}

// Vec4 j (a literal) of fl_acc, or of fl_acc2 when `second`.
fn fl_acc_at(second: bool, j: u32) -> vec4<f32> {
    return select(fl_acc[j], fl_acc2[j], second);
}

// Columns col … col + 3 of `row` (f·v), those below dh, through the kernel's
// `fl_store(second, row, col, value)`.
fn fl_write4(second: bool, row: u32, col: u32, dh: u32, v: vec4<f32>) {
    if (col < dh) {
        fl_store(second, row, col, v.x);
    }
    if (col + 1u < dh) {
        fl_store(second, row, col + 1u, v.y);
    }
    if (col + 2u < dh) {
        fl_store(second, row, col + 2u, v.z);
    }
    if (col + 3u < dh) {
        fl_store(second, row, col + 3u, v.w);
    }
}

// Writes row `row` of the row-owned accumulators (fl_acc, or fl_acc2 when `second`) times f:
// the owner's columns 64c + 16qq + 4m … below dh.
fn fl_write_row(second: bool, row: u32, qq: u32, dh: u32, f: f32) {
    let c0 = 16u * qq;
    fl_write4(second, row, c0, dh, f * fl_acc_at(second, 0u));
    fl_write4(second, row, c0 + 4u, dh, f * fl_acc_at(second, 1u));
    fl_write4(second, row, c0 + 8u, dh, f * fl_acc_at(second, 2u));
    fl_write4(second, row, c0 + 12u, dh, f * fl_acc_at(second, 3u));
    if (dh > 64u) {
        fl_write4(second, row, c0 + 64u, dh, f * fl_acc_at(second, 4u));
        fl_write4(second, row, c0 + 68u, dh, f * fl_acc_at(second, 5u));
        fl_write4(second, row, c0 + 72u, dh, f * fl_acc_at(second, 6u));
        fl_write4(second, row, c0 + 76u, dh, f * fl_acc_at(second, 7u));
    }
    if (dh > 128u) {
        fl_write4(second, row, c0 + 128u, dh, f * fl_acc_at(second, 8u));
        fl_write4(second, row, c0 + 132u, dh, f * fl_acc_at(second, 9u));
        fl_write4(second, row, c0 + 136u, dh, f * fl_acc_at(second, 10u));
        fl_write4(second, row, c0 + 140u, dh, f * fl_acc_at(second, 11u));
    }
    if (dh > 192u) {
        fl_write4(second, row, c0 + 192u, dh, f * fl_acc_at(second, 12u));
        fl_write4(second, row, c0 + 196u, dh, f * fl_acc_at(second, 13u));
        fl_write4(second, row, c0 + 200u, dh, f * fl_acc_at(second, 14u));
        fl_write4(second, row, c0 + 204u, dh, f * fl_acc_at(second, 15u));
    }
}

// The head dim: compiled in (the override, where `kernels::flash_attention` sets it) or the
// uniform's. Uniform either way.
override FL_DH: u32 = 0u;

fn fl_head_dim() -> u32 {
    return select(p.head_dim, FL_DH, FL_DH != 0u);
}

// The current (b, h) and its kv head, set by the bodies for the kernel's hooks.
var<private> fl_b: u32;
var<private> fl_h: u32;
var<private> fl_kvh: u32;

// Sets (b, h) from bh = b·H + h.
fn fl_set_head(bh: u32) {
    fl_h = bh % p.heads;
    fl_b = bh / p.heads;
    fl_kvh = fl_h / (p.heads / p.kv_heads);
}
