// The batched products of the fast attention path on tensor cores (S = Q·Kᵀ, O = P·V, and
// Pᵀ·X for the backward), f16 operands, f32 sums, causal tiles: a cooperative-matrix body
// (`//#if coop`, 16×16×16 tiles, f16 A/B, f32 C) and a portable body of f32 FMAs over the same
// operands for the edge tiles and adapters without tensor cores. The library's matrix products
// are `kernels::gemm` (`03_linear.wgsl`, `lib/gemm16.wgsl`); these stay while the fast attention
// path runs on them.
//
// Operands. f16 matrices are `array<vec4<f16>>` in the *f16x4 row layout*: row-major with every
// row padded with zeros to a multiple of 4 elements (`cast::cast_f16x4` writes it from f32).
//
// One scheme for every product. A workgroup computes a BM×BN block of the output over the
// contraction range [kb, ke). Each kernel supplies the hooks the shared cores call: `load_a(row,
// kc)` / `load_b(col, kc)` return four operand elements along the operand's contiguous dimension
// (k when A_KC / B_KC, else rows / columns) as f32, zeros outside the matrix (with `load_a16` /
// `load_b16` their f16 forms); `coop_out(c, row, col)` writes one 16×16 f32 tile of a block that
// lies wholly inside the output (tensor cores); `store_out(row, col, v)` writes one element,
// skipping those outside. The block shape, the workgroup size and the operand orientation are
// per-kernel constants (BM, BN, WGS, A_KC, B_KC) that size the shared workgroup arrays.
//
// Tensor-core core (`cm_block`). The operands' BM×CM_BK and CM_BK×BN slices are staged in
// workgroup memory as f16 in their global orientation (rows padded by CM_PAD halves), read by
// `coopLoadT` (row-major) or `coopLoad` (column-major); the next slice is fetched into named
// registers while the current one is multiplied (wgpu bounds every loop, so a loop over a
// private array is not unrolled and the array lands in local memory — measured 2.5× slower on
// the H200). The block's 16×16 tiles are shared out among the subgroups from `subgroup_id` /
// `num_subgroups`, never assuming a subgroup size: with T tiles and n subgroups, each subgroup
// takes per = min(8, T/n) tiles — a whole 4×2 group (in T/(8n) rounds when n < T/8), or 1, 2 or
// 4 tiles when n > T/8 (narrow subgroups): every count that decides control flow depends on n
// only and is uniform; `subgroup_id` only picks addresses. Blocks wholly inside the output store
// their tiles straight from the accumulators; edge blocks run the portable core (a uniform choice
// per workgroup). Workgroup memory 10 + 6.5 KiB, checked against 48 KiB at compile time.
//
// Portable core (`fb_block`, f32 FMAs). Sub-blocks of FB_SR × FB_SC outputs, 8×4 per invocation
// in registers, operands staged as f32 vec4s 16 k at a time; each output is one fixed FMA chain
// over k (deterministic).

// Attention: 64×64 tiles (the causal tile of the fast path), 64 invocations (2 subgroups of 64×32).
const ATT_T: u32 = 64u;
const ATT_WG: u32 = 64u;
// Contraction steps (k staged per barrier pair) of the two cores.
const CM_BK: u32 = 32u;
const_assert CM_BK == 32u; // the tensor-core loop is unrolled for two 16-deep halves
const FB_BK: u32 = 16u;
// Halves of padding per staged row (keeps rows 16-byte aligned, spreads banks).
const CM_PAD: u32 = 8u;
// Accumulator tiles a subgroup holds (a 4×2 group of 16×16 tiles: 64×32 outputs).
const CM_ACC: u32 = 8u;

// The workgroup memory the tensor-core variants may use (the H200's limit; see above).
const WG_MEMORY_MAX: u32 = 49152u;

// The largest finite f16.
const F16_MAX: f32 = 65504.0;
const LANE4: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// The shape of the current product, set by each entry point for its hooks: output rows and
// columns, the contraction length, and the vec4s per row of the f16 operands.
var<private> dim_m: u32;
var<private> dim_n: u32;
var<private> dim_k: u32;
var<private> dim_aq: u32;
var<private> dim_bq: u32;

// x with values beyond the f16 range clamped to ±65504; NaN stays NaN (tested on the bits: WGSL's
// clamp of NaN is implementation-defined).
fn f16_clamp(v: vec4<f32>) -> vec4<f32> {
    return select(clamp(v, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX)), v, is_nan4(v));
}

// Which lanes are NaN, from the bits (`v != v` may be folded away).
fn is_nan4(v: vec4<f32>) -> vec4<bool> {
    let bits = bitcast<vec4<u32>>(v);
    return ((bits & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u)) & ((bits & vec4<u32>(0x007fffffu)) != vec4<u32>(0u));
}

// x rounded to f16 precision (11 significant bits, to nearest even), kept as f32, by integer
// arithmetic on the bits. Not quantizeToF16: naga validates it only with its
// SHADER_FLOAT16_IN_FLOAT32 capability, which `kernels!` does not enable; and never f32(f16(x)),
// which drivers fold to x. Exactly f16's value for |x| ≥ 2⁻¹⁴ (f16's normal range); below it f16
// has fewer bits, and f16(round_f16(x)) differs from f16(x) by at most 2⁻²⁵. Needs |x| ≤ 65504
// (callers clamp); NaN stays NaN.
fn round_f16(v: vec4<f32>) -> vec4<f32> {
    let bits = bitcast<vec4<u32>>(v);
    let r = (bits + vec4<u32>(0x0fffu) + ((bits >> vec4<u32>(13u)) & vec4<u32>(1u))) & vec4<u32>(0xffffe000u);
    return select(bitcast<vec4<f32>>(r), v, is_nan4(v));
}

// f32 values rounded to f16 (and clamped to its range), kept as f32: what the f16 operand paths
// multiply, so the portable and tensor-core forms see the same operands.
fn as_f16(v: vec4<f32>) -> vec4<f32> {
    return round_f16(f16_clamp(v));
}

// The four element indices first … first+3 of a row of `len` elements starting at `base`, clamped
// into the row (len ≥ 1), and which of them are inside it.
fn idx4(base: u32, first: u32, len: u32) -> vec4<u32> {
    return vec4<u32>(base) + min(vec4<u32>(first) + LANE4, vec4<u32>(max(len, 1u) - 1u));
}

fn in4(first: u32, len: u32) -> vec4<bool> {
    return vec4<u32>(first) + LANE4 < vec4<u32>(len);
}

// Tile t of the lower triangle in row-major order → (row tile i, column tile j ≤ i). The f32
// square root is a guess; the loops make it exact. Call with a workgroup-uniform t.
fn triangle(t: u32) -> vec2<u32> {
    var i = u32(max((sqrt(8.0 * f32(t) + 1.0) - 1.0) * 0.5, 0.0));
    while (i > 0u && i * (i + 1u) / 2u > t) {
        i -= 1u;
    }
    while ((i + 1u) * (i + 2u) / 2u <= t) {
        i += 1u;
    }
    return vec2<u32>(i, t - i * (i + 1u) / 2u);
}

// ---- Portable core: f32 FMAs ----
// Invocations as FB_TX column groups (4 columns each) by FB_TY row groups (8 rows each): a
// sub-block of FB_SR × FB_SC outputs. vec4s per staged k-row of A and B (one of padding each),
// and prefetched vec4s per invocation.
const FB_TX: u32 = select(16u, 32u, WGS > 256u);
const FB_TY: u32 = WGS / FB_TX;
const FB_SR: u32 = 8u * FB_TY;
const FB_SC: u32 = 4u * FB_TX;
const FB_LDA: u32 = FB_SR / 4u + 1u;
const FB_LDB: u32 = FB_SC / 4u + 1u;
const FB_PFA: u32 = FB_SR * FB_BK / 4u / WGS;
const FB_PFB: u32 = FB_SC * FB_BK / 4u / WGS;
// Staged slices: slot k·LD + g holds rows (A) or columns (B) 4g … 4g+3 at k.
//#if coop
// (Only the tensor-core variants' budget checks read it.)
const FB_BYTES: u32 = FB_BK * (FB_LDA + FB_LDB) * 16u;
//#endif
var<workgroup> fb_sa: array<vec4<f32>, FB_BK * FB_LDA>;
var<workgroup> fb_sb: array<vec4<f32>, FB_BK * FB_LDB>;
// Prefetched vec4s in named registers (as `cm_pa0` … below: loops are bounded, so not unrolled).
const_assert FB_PFA >= 1u && FB_PFA <= 4u && FB_PFB >= 1u && FB_PFB <= 4u;
var<private> fb_pa0: vec4<f32>;
var<private> fb_pa1: vec4<f32>;
var<private> fb_pa2: vec4<f32>;
var<private> fb_pa3: vec4<f32>;
var<private> fb_pb0: vec4<f32>;
var<private> fb_pb1: vec4<f32>;
var<private> fb_pb2: vec4<f32>;
var<private> fb_pb3: vec4<f32>;
// The invocation's 8×4 outputs: fb_acc[i][j] is row `fb_row(ty, i)`, column 4·tx + j.
var<private> fb_acc: array<vec4<f32>, 8>;

fn fb_row(ty: u32, i: u32) -> u32 {
    return 4u * ty + (i % 4u) + (FB_SR / 2u) * (i / 4u);
}

// The invocation's vec4 e of the sub-block's A or B slice at contraction index kc.
fn fb_fa(m0: u32, kc: u32, e: u32) -> vec4<f32> {
    if (A_KC) {
        return load_a(m0 + e / (FB_BK / 4u), kc + (e % (FB_BK / 4u)) * 4u);
    }
    return load_a(m0 + (e % (FB_SR / 4u)) * 4u, kc + e / (FB_SR / 4u));
}

fn fb_fb(n0: u32, kc: u32, e: u32) -> vec4<f32> {
    if (B_KC) {
        return load_b(n0 + e / (FB_BK / 4u), kc + (e % (FB_BK / 4u)) * 4u);
    }
    return load_b(n0 + (e % (FB_SC / 4u)) * 4u, kc + e / (FB_SC / 4u));
}

// Loads the invocation's share of the sub-block's slices at contraction index kc.
fn fb_fetch(tid: u32, m0: u32, n0: u32, kc: u32) {
    fb_pa0 = fb_fa(m0, kc, tid + 0u * WGS);
    if (FB_PFA > 1u) {
        fb_pa1 = fb_fa(m0, kc, tid + 1u * WGS);
    }
    if (FB_PFA > 2u) {
        fb_pa2 = fb_fa(m0, kc, tid + 2u * WGS);
    }
    if (FB_PFA > 3u) {
        fb_pa3 = fb_fa(m0, kc, tid + 3u * WGS);
    }
    fb_pb0 = fb_fb(n0, kc, tid + 0u * WGS);
    if (FB_PFB > 1u) {
        fb_pb1 = fb_fb(n0, kc, tid + 1u * WGS);
    }
    if (FB_PFB > 2u) {
        fb_pb2 = fb_fb(n0, kc, tid + 2u * WGS);
    }
    if (FB_PFB > 3u) {
        fb_pb3 = fb_fb(n0, kc, tid + 3u * WGS);
    }
}

// Writes vec4 e of the A slice into the staged tile (k-contiguous operands are transposed here).
fn fb_put_a(e: u32, v: vec4<f32>) {
    if (A_KC) {
        let row = e / (FB_BK / 4u);
        let k = (e % (FB_BK / 4u)) * 4u;
        let at = k * FB_LDA + row / 4u;
        let c = row % 4u;
        fb_sa[at][c] = v.x;
        fb_sa[at + FB_LDA][c] = v.y;
        fb_sa[at + 2u * FB_LDA][c] = v.z;
        fb_sa[at + 3u * FB_LDA][c] = v.w;
    } else {
        fb_sa[(e / (FB_SR / 4u)) * FB_LDA + e % (FB_SR / 4u)] = v;
    }
}

fn fb_put_b(e: u32, v: vec4<f32>) {
    if (B_KC) {
        let col = e / (FB_BK / 4u);
        let k = (e % (FB_BK / 4u)) * 4u;
        let at = k * FB_LDB + col / 4u;
        let c = col % 4u;
        fb_sb[at][c] = v.x;
        fb_sb[at + FB_LDB][c] = v.y;
        fb_sb[at + 2u * FB_LDB][c] = v.z;
        fb_sb[at + 3u * FB_LDB][c] = v.w;
    } else {
        fb_sb[(e / (FB_SC / 4u)) * FB_LDB + e % (FB_SC / 4u)] = v;
    }
}

fn fb_stage(tid: u32) {
    fb_put_a(tid + 0u * WGS, fb_pa0);
    if (FB_PFA > 1u) {
        fb_put_a(tid + 1u * WGS, fb_pa1);
    }
    if (FB_PFA > 2u) {
        fb_put_a(tid + 2u * WGS, fb_pa2);
    }
    if (FB_PFA > 3u) {
        fb_put_a(tid + 3u * WGS, fb_pa3);
    }
    fb_put_b(tid + 0u * WGS, fb_pb0);
    if (FB_PFB > 1u) {
        fb_put_b(tid + 1u * WGS, fb_pb1);
    }
    if (FB_PFB > 2u) {
        fb_put_b(tid + 2u * WGS, fb_pb2);
    }
    if (FB_PFB > 3u) {
        fb_put_b(tid + 3u * WGS, fb_pb3);
    }
}

// fb_acc += a·b for one staged k: two vec4s of A (8 rows), one of B (4 columns), 32 FMAs.
fn fb_k(tx: u32, ty: u32, kk: u32) {
    let a = fb_sa[kk * FB_LDA + ty];
    let a2 = fb_sa[kk * FB_LDA + FB_SR / 8u + ty];
    let b = fb_sb[kk * FB_LDB + tx];
    fb_acc[0] = fma(vec4<f32>(a.x), b, fb_acc[0]);
    fb_acc[1] = fma(vec4<f32>(a.y), b, fb_acc[1]);
    fb_acc[2] = fma(vec4<f32>(a.z), b, fb_acc[2]);
    fb_acc[3] = fma(vec4<f32>(a.w), b, fb_acc[3]);
    fb_acc[4] = fma(vec4<f32>(a2.x), b, fb_acc[4]);
    fb_acc[5] = fma(vec4<f32>(a2.y), b, fb_acc[5]);
    fb_acc[6] = fma(vec4<f32>(a2.z), b, fb_acc[6]);
    fb_acc[7] = fma(vec4<f32>(a2.w), b, fb_acc[7]);
}

// The 16 staged k in order, unrolled by hand (lavapipe's loop limiter counts every iteration).
fn fb_step(tx: u32, ty: u32) {
    fb_k(tx, ty, 0u);
    fb_k(tx, ty, 1u);
    fb_k(tx, ty, 2u);
    fb_k(tx, ty, 3u);
    fb_k(tx, ty, 4u);
    fb_k(tx, ty, 5u);
    fb_k(tx, ty, 6u);
    fb_k(tx, ty, 7u);
    fb_k(tx, ty, 8u);
    fb_k(tx, ty, 9u);
    fb_k(tx, ty, 10u);
    fb_k(tx, ty, 11u);
    fb_k(tx, ty, 12u);
    fb_k(tx, ty, 13u);
    fb_k(tx, ty, 14u);
    fb_k(tx, ty, 15u);
}

// The BM×BN block at (m0, n0) over the contraction [kb, ke), sub-block by sub-block; every
// output through `store_out`. Call from uniform control flow with uniform arguments (tid aside).
fn fb_block(tid: u32, m0: u32, n0: u32, kb: u32, ke: u32) {
    let tx = tid % FB_TX;
    let ty = tid / FB_TX;
    for (var sr = 0u; sr < BM / FB_SR; sr++) {
        for (var sc = 0u; sc < BN / FB_SC; sc++) {
            let bm0 = m0 + sr * FB_SR;
            let bn0 = n0 + sc * FB_SC;
            fb_acc = array<vec4<f32>, 8>();
            if (kb < ke) {
                fb_fetch(tid, bm0, bn0, kb);
            }
            for (var kc = kb; kc < ke; kc += FB_BK) {
                fb_stage(tid);
                workgroupBarrier();
                if (kc + FB_BK < ke) {
                    fb_fetch(tid, bm0, bn0, kc + FB_BK);
                }
                fb_step(tx, ty);
                workgroupBarrier();
            }
            for (var i = 0u; i < 8u; i++) {
                let row = bm0 + fb_row(ty, i);
                for (var j = 0u; j < 4u; j++) {
                    store_out(row, bn0 + 4u * tx + j, fb_acc[i][j]);
                }
            }
        }
    }
}

//#if coop
// ---- Tensor-core core: f16 operands ----
// vec4s per staged row: of a k-contiguous operand ([row][k]), of a row-contiguous A ([k][row]) and
// of a column-contiguous B ([k][col]).
const CM_LDK: u32 = (CM_BK + CM_PAD) / 4u;
const CM_LDA: u32 = (BM + CM_PAD) / 4u;
const CM_LDB: u32 = (BN + CM_PAD) / 4u;
const CM_SA: u32 = select(CM_BK * CM_LDA, BM * CM_LDK, A_KC);
const CM_SB: u32 = select(CM_BK * CM_LDB, BN * CM_LDK, B_KC);
const CM_PFA: u32 = BM * CM_BK / 4u / WGS;
const CM_PFB: u32 = BN * CM_BK / 4u / WGS;
const CM_BYTES: u32 = (CM_SA + CM_SB) * 8u;
var<workgroup> cm_sa: array<vec4<f16>, CM_SA>;
var<workgroup> cm_sb: array<vec4<f16>, CM_SB>;
// The prefetched vec4s, in named registers: wgpu bounds every loop (naga adds a counter), so a
// loop over a private array would not be unrolled and the array would live in local memory.
const_assert CM_PFA >= 1u && CM_PFA <= 8u && CM_PFB >= 1u && CM_PFB <= 8u;
var<private> cm_pa0: vec4<f16>;
var<private> cm_pa1: vec4<f16>;
var<private> cm_pa2: vec4<f16>;
var<private> cm_pa3: vec4<f16>;
var<private> cm_pa4: vec4<f16>;
var<private> cm_pa5: vec4<f16>;
var<private> cm_pa6: vec4<f16>;
var<private> cm_pa7: vec4<f16>;
var<private> cm_pb0: vec4<f16>;
var<private> cm_pb1: vec4<f16>;
var<private> cm_pb2: vec4<f16>;
var<private> cm_pb3: vec4<f16>;
var<private> cm_pb4: vec4<f16>;
var<private> cm_pb5: vec4<f16>;
var<private> cm_pb6: vec4<f16>;
var<private> cm_pb7: vec4<f16>;

// Staged vec4 e of the A slice: (row in the block, k in the slice) of its first element, and its
// slot in `cm_sa`.
fn cm_a_pos(e: u32) -> vec2<u32> {
    if (A_KC) {
        return vec2<u32>(e / (CM_BK / 4u), (e % (CM_BK / 4u)) * 4u);
    }
    return vec2<u32>((e % (BM / 4u)) * 4u, e / (BM / 4u));
}

fn cm_a_slot(e: u32) -> u32 {
    if (A_KC) {
        return (e / (CM_BK / 4u)) * CM_LDK + e % (CM_BK / 4u);
    }
    return (e / (BM / 4u)) * CM_LDA + e % (BM / 4u);
}

// The same for B: (column in the block, k in the slice), and the slot in `cm_sb`.
fn cm_b_pos(e: u32) -> vec2<u32> {
    if (B_KC) {
        return vec2<u32>(e / (CM_BK / 4u), (e % (CM_BK / 4u)) * 4u);
    }
    return vec2<u32>((e % (BN / 4u)) * 4u, e / (BN / 4u));
}

fn cm_b_slot(e: u32) -> u32 {
    if (B_KC) {
        return (e / (CM_BK / 4u)) * CM_LDK + e % (CM_BK / 4u);
    }
    return (e / (BN / 4u)) * CM_LDB + e % (BN / 4u);
}

// The invocation's share (vec4 i, i < CM_PFA or CM_PFB) of the next slices, as f16.
fn cm_fa(tid: u32, m0: u32, kc: u32, i: u32) -> vec4<f16> {
    let pos = cm_a_pos(tid + i * WGS);
    return load_a16(m0 + pos.x, kc + pos.y);
}

fn cm_fb(tid: u32, n0: u32, kc: u32, i: u32) -> vec4<f16> {
    let pos = cm_b_pos(tid + i * WGS);
    return load_b16(n0 + pos.x, kc + pos.y);
}

// Unrolled by hand, guarded by constants (see the registers above).
fn cm_fetch(tid: u32, m0: u32, n0: u32, kc: u32) {
    cm_pa0 = cm_fa(tid, m0, kc, 0u);
    if (CM_PFA > 1u) {
        cm_pa1 = cm_fa(tid, m0, kc, 1u);
    }
    if (CM_PFA > 2u) {
        cm_pa2 = cm_fa(tid, m0, kc, 2u);
    }
    if (CM_PFA > 3u) {
        cm_pa3 = cm_fa(tid, m0, kc, 3u);
    }
    if (CM_PFA > 4u) {
        cm_pa4 = cm_fa(tid, m0, kc, 4u);
    }
    if (CM_PFA > 5u) {
        cm_pa5 = cm_fa(tid, m0, kc, 5u);
    }
    if (CM_PFA > 6u) {
        cm_pa6 = cm_fa(tid, m0, kc, 6u);
    }
    if (CM_PFA > 7u) {
        cm_pa7 = cm_fa(tid, m0, kc, 7u);
    }
    cm_pb0 = cm_fb(tid, n0, kc, 0u);
    if (CM_PFB > 1u) {
        cm_pb1 = cm_fb(tid, n0, kc, 1u);
    }
    if (CM_PFB > 2u) {
        cm_pb2 = cm_fb(tid, n0, kc, 2u);
    }
    if (CM_PFB > 3u) {
        cm_pb3 = cm_fb(tid, n0, kc, 3u);
    }
    if (CM_PFB > 4u) {
        cm_pb4 = cm_fb(tid, n0, kc, 4u);
    }
    if (CM_PFB > 5u) {
        cm_pb5 = cm_fb(tid, n0, kc, 5u);
    }
    if (CM_PFB > 6u) {
        cm_pb6 = cm_fb(tid, n0, kc, 6u);
    }
    if (CM_PFB > 7u) {
        cm_pb7 = cm_fb(tid, n0, kc, 7u);
    }
}

fn cm_stage(tid: u32) {
    cm_sa[cm_a_slot(tid + 0u * WGS)] = cm_pa0;
    if (CM_PFA > 1u) {
        cm_sa[cm_a_slot(tid + 1u * WGS)] = cm_pa1;
    }
    if (CM_PFA > 2u) {
        cm_sa[cm_a_slot(tid + 2u * WGS)] = cm_pa2;
    }
    if (CM_PFA > 3u) {
        cm_sa[cm_a_slot(tid + 3u * WGS)] = cm_pa3;
    }
    if (CM_PFA > 4u) {
        cm_sa[cm_a_slot(tid + 4u * WGS)] = cm_pa4;
    }
    if (CM_PFA > 5u) {
        cm_sa[cm_a_slot(tid + 5u * WGS)] = cm_pa5;
    }
    if (CM_PFA > 6u) {
        cm_sa[cm_a_slot(tid + 6u * WGS)] = cm_pa6;
    }
    if (CM_PFA > 7u) {
        cm_sa[cm_a_slot(tid + 7u * WGS)] = cm_pa7;
    }
    cm_sb[cm_b_slot(tid + 0u * WGS)] = cm_pb0;
    if (CM_PFB > 1u) {
        cm_sb[cm_b_slot(tid + 1u * WGS)] = cm_pb1;
    }
    if (CM_PFB > 2u) {
        cm_sb[cm_b_slot(tid + 2u * WGS)] = cm_pb2;
    }
    if (CM_PFB > 3u) {
        cm_sb[cm_b_slot(tid + 3u * WGS)] = cm_pb3;
    }
    if (CM_PFB > 4u) {
        cm_sb[cm_b_slot(tid + 4u * WGS)] = cm_pb4;
    }
    if (CM_PFB > 5u) {
        cm_sb[cm_b_slot(tid + 5u * WGS)] = cm_pb5;
    }
    if (CM_PFB > 6u) {
        cm_sb[cm_b_slot(tid + 6u * WGS)] = cm_pb6;
    }
    if (CM_PFB > 7u) {
        cm_sb[cm_b_slot(tid + 7u * WGS)] = cm_pb7;
    }
}

// The A fragment of tile row `tr` (rows 16·tr …) at k 16·s … of the staged slice.
fn cm_frag_a(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    if (A_KC) {
        return coopLoadT<coop_mat16x16<f16, A>>(&cm_sa[tr * 16u * CM_LDK + s * 4u], CM_LDK);
    }
    return coopLoad<coop_mat16x16<f16, A>>(&cm_sa[s * 16u * CM_LDA + tr * 4u], CM_LDA);
}

// The B fragment of tile column `tc` (columns 16·tc …) at k 16·s … of the staged slice.
fn cm_frag_b(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    if (B_KC) {
        return coopLoad<coop_mat16x16<f16, B>>(&cm_sb[tc * 16u * CM_LDK + s * 4u], CM_LDK);
    }
    return coopLoadT<coop_mat16x16<f16, B>>(&cm_sb[s * 16u * CM_LDB + tc * 4u], CM_LDB);
}

// Guards. naga 30 rejects an `if` around cooperative-matrix operations unless it can prove the
// condition uniform, and it takes every function argument and `num_subgroups` for non-uniform;
// it does not check loop bounds. The guards on how many tiles a subgroup holds (uniform: they
// depend on `num_subgroups` only) are therefore loops that run once or not at all, e.g.
// `for (var g2 = 1u; g2 < nb; g2 = 2u)` for "nb ≥ 2"; the macro's own uniformity pass checks
// them, through the callers' arguments.

// The first tile (row, column) of this subgroup's share in round `round`: `per` consecutive tiles
// of the block numbered in 4×2 groups (a group is 64×32 outputs; groups row-major over the block).
fn cm_share(sg: u32, nsg: u32, round: u32, per: u32) -> vec2<u32> {
    let t0 = (round * nsg + sg) * per;
    let group = t0 / CM_ACC;
    let w0 = t0 % CM_ACC;
    let per_row = BN / 32u;
    return vec2<u32>((group / per_row) * 4u + w0 / 2u, (group % per_row) * 2u + w0 % 2u);
}

// The BM×BN block at (m0, n0) over [kb, ke) on tensor cores; every tile through `coop_out`. Call
// from uniform control flow with uniform arguments (tid and sg aside), for a block wholly inside
// the output. Each subgroup takes per = min(8, T/nsg) of the block's T tiles: a whole 4×2 group
// (in T/(8·nsg) rounds when the subgroups are fewer than the groups), or 1, 2 or 4 tiles when
// they are more (narrow subgroups). Needs nsg ≤ T, a power of two.
fn cm_block(tid: u32, sg: u32, nsg: u32, m0: u32, n0: u32, kb: u32, ke: u32) {
    let tiles = (BM / 16u) * (BN / 16u);
    let per = clamp(tiles / nsg, 1u, CM_ACC);
    let rounds = max(tiles / (nsg * CM_ACC), 1u);
    for (var whole = per; whole == CM_ACC; whole = 0u) {
        for (var round = 0u; round < rounds; round++) {
            cm_group(tid, cm_share(sg, nsg, round, CM_ACC), m0, n0, kb, ke);
        }
    }
    for (var few = per; few < CM_ACC; few = CM_ACC) {
        cm_few(tid, cm_share(sg, nsg, 0u, per), per, m0, n0, kb, ke);
    }
}

// One subgroup's 4×2 group of tiles from tile (tr, tc) = `at`: 8 accumulators, 4 A and 2 B
// fragments per 16 k, no guards.
fn cm_group(tid: u32, at: vec2<u32>, m0: u32, n0: u32, kb: u32, ke: u32) {
    let tr = at.x;
    let tc = at.y;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    var c2 = coop_mat16x16<f32, C>();
    var c3 = coop_mat16x16<f32, C>();
    var c4 = coop_mat16x16<f32, C>();
    var c5 = coop_mat16x16<f32, C>();
    var c6 = coop_mat16x16<f32, C>();
    var c7 = coop_mat16x16<f32, C>();
    if (kb < ke) {
        cm_fetch(tid, m0, n0, kb);
    }
    for (var kc = kb; kc < ke; kc += CM_BK) {
        cm_stage(tid);
        workgroupBarrier();
        if (kc + CM_BK < ke) {
            cm_fetch(tid, m0, n0, kc + CM_BK);
        }
        // The staged slice's two 16-deep halves, unrolled (CM_BK = 32).
        {
            let b0 = cm_frag_b(tc, 0u);
            let b1 = cm_frag_b(tc + 1u, 0u);
            let a0 = cm_frag_a(tr, 0u);
            c0 = coopMultiplyAdd(a0, b0, c0);
            c1 = coopMultiplyAdd(a0, b1, c1);
            let a1 = cm_frag_a(tr + 1u, 0u);
            c2 = coopMultiplyAdd(a1, b0, c2);
            c3 = coopMultiplyAdd(a1, b1, c3);
            let a2 = cm_frag_a(tr + 2u, 0u);
            c4 = coopMultiplyAdd(a2, b0, c4);
            c5 = coopMultiplyAdd(a2, b1, c5);
            let a3 = cm_frag_a(tr + 3u, 0u);
            c6 = coopMultiplyAdd(a3, b0, c6);
            c7 = coopMultiplyAdd(a3, b1, c7);
        }
        {
            let b0 = cm_frag_b(tc, 1u);
            let b1 = cm_frag_b(tc + 1u, 1u);
            let a0 = cm_frag_a(tr, 1u);
            c0 = coopMultiplyAdd(a0, b0, c0);
            c1 = coopMultiplyAdd(a0, b1, c1);
            let a1 = cm_frag_a(tr + 1u, 1u);
            c2 = coopMultiplyAdd(a1, b0, c2);
            c3 = coopMultiplyAdd(a1, b1, c3);
            let a2 = cm_frag_a(tr + 2u, 1u);
            c4 = coopMultiplyAdd(a2, b0, c4);
            c5 = coopMultiplyAdd(a2, b1, c5);
            let a3 = cm_frag_a(tr + 3u, 1u);
            c6 = coopMultiplyAdd(a3, b0, c6);
            c7 = coopMultiplyAdd(a3, b1, c7);
        }
        workgroupBarrier();
    }
    let r0 = m0 + tr * 16u;
    let q0 = n0 + tc * 16u;
    coop_out(c0, r0, q0);
    coop_out(c1, r0, q0 + 16u);
    coop_out(c2, r0 + 16u, q0);
    coop_out(c3, r0 + 16u, q0 + 16u);
    coop_out(c4, r0 + 32u, q0);
    coop_out(c5, r0 + 32u, q0 + 16u);
    coop_out(c6, r0 + 48u, q0);
    coop_out(c7, r0 + 48u, q0 + 16u);
}

// `per` = 1, 2 or 4 tiles from (tr, tc) = `at`: 1×1, 1×2 or 2×2 (nb columns, na rows), guarded.
fn cm_few(tid: u32, at: vec2<u32>, per: u32, m0: u32, n0: u32, kb: u32, ke: u32) {
    let tr = at.x;
    let tc = at.y;
    let nb = min(per, 2u);
    let na = per / nb;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    var c2 = coop_mat16x16<f32, C>();
    var c3 = coop_mat16x16<f32, C>();
    if (kb < ke) {
        cm_fetch(tid, m0, n0, kb);
    }
    for (var kc = kb; kc < ke; kc += CM_BK) {
        cm_stage(tid);
        workgroupBarrier();
        if (kc + CM_BK < ke) {
            cm_fetch(tid, m0, n0, kc + CM_BK);
        }
        {
            let a0 = cm_frag_a(tr, 0u);
            let b0 = cm_frag_b(tc, 0u);
            c0 = coopMultiplyAdd(a0, b0, c0);
            for (var g2 = 1u; g2 < nb; g2 = 2u) {
                let b1 = cm_frag_b(tc + 1u, 0u);
                c1 = coopMultiplyAdd(a0, b1, c1);
                // na > 1 only with nb = 2.
                for (var r2 = 1u; r2 < na; r2 = 2u) {
                    let a1 = cm_frag_a(tr + 1u, 0u);
                    c2 = coopMultiplyAdd(a1, b0, c2);
                    c3 = coopMultiplyAdd(a1, b1, c3);
                }
            }
        }
        {
            let a0 = cm_frag_a(tr, 1u);
            let b0 = cm_frag_b(tc, 1u);
            c0 = coopMultiplyAdd(a0, b0, c0);
            for (var g2 = 1u; g2 < nb; g2 = 2u) {
                let b1 = cm_frag_b(tc + 1u, 1u);
                c1 = coopMultiplyAdd(a0, b1, c1);
                // na > 1 only with nb = 2.
                for (var r2 = 1u; r2 < na; r2 = 2u) {
                    let a1 = cm_frag_a(tr + 1u, 1u);
                    c2 = coopMultiplyAdd(a1, b0, c2);
                    c3 = coopMultiplyAdd(a1, b1, c3);
                }
            }
        }
        workgroupBarrier();
    }
    let r0 = m0 + tr * 16u;
    let q0 = n0 + tc * 16u;
    coop_out(c0, r0, q0);
    for (var g2 = 1u; g2 < nb; g2 = 2u) {
        coop_out(c1, r0, q0 + 16u);
        for (var r2 = 1u; r2 < na; r2 = 2u) {
            coop_out(c2, r0 + 16u, q0);
            coop_out(c3, r0 + 16u, q0 + 16u);
        }
    }
}

//#endif
