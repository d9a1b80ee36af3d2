// f32-accurate matrix products on tensor cores over the whole f32 range: each f32 operand is
// scaled by a power of two, split into two f16 arrays, and multiplied as three f16 products with
// f32 sums; the scale is undone, exactly, in the epilogue.
//
// The pipeline of one product C = A·B (`kernels::ops::matmul_t_precise` and friends record it):
//   1. `precise_clear`: amax[0..2] = 0;
//   2. `precise_absmax` on each operand: amax[slot] = the bits of max |x| over its finite values
//      (the bits of non-negative floats order like the floats: an integer atomicMax);
//   3. `precise_split` on each operand: s = 2^e with e = `scale_exp(amax[slot])`, chosen so that
//      max |x|·s lies in [2¹⁴, 2¹⁵) (e clamped to ±100), and for every element
//        hi = f16(x·s) (rounded to nearest),  lo = f16((x·s − hi)·2¹¹),
//      into two arrays in the f16x4 row layout (rows zero-padded to a multiple of 4);
//   4. the product: C = (Σ hi_a·hi_b + 2⁻¹¹·Σ (hi_a·lo_b + lo_a·hi_b)) · 2^−(e_a + e_b), the
//      hi·hi sum and the cross sums in separate f32 accumulators (lo·lo, ~2⁻²² of the terms, is
//      dropped), the power of two applied as two factors 2^−⌊e/2⌋ and 2^(⌊e/2⌋ − e) so that no
//      factor leaves f32's normal range.
//
// Why it is f32-accurate. After scaling, an element x with |x| ≥ max·2⁻²⁸ has a normal f16 hi
// (|x·s| ≥ 2⁻¹⁴), so hi + lo·2⁻¹¹ holds x to about 2⁻²² relative (11 bits each, lo scaled up by
// 2¹¹ so that it stays a normal f16 too); smaller elements keep an absolute error of at most
// ~2⁻³⁶ in scaled units, 2⁻⁵⁰ of the tensor's largest magnitude. With one scale per tensor the
// error of each output stays within 5e-7 of Σ|a||b| (tests; BENCHMARKS.md §2) whatever the
// tensor's overall magnitude (1e-30 … 1e+30 tested), as long as no element that matters is more
// than ~2²⁸ below its tensor's largest one. Values that do not survive the scaling: NaN stays NaN;
// ±Inf and elements of tensors holding them are not meaningful (±Inf is left out of the max and
// clamped to ±65504 after scaling).
//
// Product kernels (the fastest split design of the tensor-core sweep; its speed: BENCHMARKS.md
// §2): 128×128 output blocks, 256 invocations; the operands' hi and lo slices (BM×32 and
// 32×BN, global orientation, rows padded by 8 halves) staged in workgroup memory, the next slice fetched into named registers while the
// current one is multiplied; on tensor cores 8 subgroups of 64×32 outputs (a 2×4 grid), 8 hi·hi
// and 8 cross accumulators each; with n < 8 subgroups (wider than 32) each takes 8/n groups in
// turn (the contraction re-staged per round). Blocks wholly inside the output (and N % 4 = 0,
// and a subgroup count dividing 8: with narrower subgroups a spare one could not skip its stores
// uniformly) store from the accumulators; edge blocks, blocks on other subgroup counts, and every
// block of the portable variant, run the
// portable path: the same staged hi/lo values, f32 FMAs (8×8 outputs per invocation, hi·hi and
// cross sums apart, as on tensor cores), masked stores. The portable variant stages 16 deep
// (20 KiB; lavapipe allows 32 KiB), the tensor-core one 32 (≤ 40 KiB of the H200's 48).

// ---- Block shape ----
const PB_BM: u32 = 128u;
const PB_BN: u32 = 128u;
const PB_WG: u32 = 256u;
//#if coop
const PB_BK: u32 = 32u;
//#else
const PB_BK: u32 = 16u;
//#endif
// (The portable variant's limit: lavapipe's 32 KiB.)
const PB_PORTABLE_MEMORY_MAX: u32 = 32768u;
// Halves of padding per staged row (16 bytes: keeps coop pointers aligned, spreads banks).
const PB_PAD: u32 = 8u;
// lo is stored times 2¹¹.
const LO_SCALE: f32 = 2048.0;
const LO_INV: f32 = 0.00048828125;
const F16_MAX: f32 = 65504.0;
const LANE4: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// The scale exponent e of a tensor whose largest finite magnitude has the bits `bits`: max·2^e
// in [2¹⁴, 2¹⁵) (f32's biased exponent E: e = 14 − (E − 127)), clamped to ±100 so that the
// epilogue's factors stay normal f32s; 0 for an all-zero tensor.
fn scale_exp(bits: u32) -> i32 {
    let biased = i32(max(bits >> 23u, 1u));
    return select(clamp(141 - biased, -100, 100), 0, bits == 0u);
}

// Which lanes are NaN, from the bits (`v != v` may be folded away).
fn nan4(v: vec4<f32>) -> vec4<bool> {
    let bits = bitcast<vec4<u32>>(v);
    return ((bits & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u)) & ((bits & vec4<u32>(0x007fffffu)) != vec4<u32>(0u));
}

// v rounded to f16 precision (11 significant bits, ties to even) on the bits, kept as f32: never
// an f32(f16(x)) round trip, which drivers fold away. Needs |v| ≤ 65504; NaN stays NaN.
fn round_half(v: vec4<f32>) -> vec4<f32> {
    let bits = bitcast<vec4<u32>>(v);
    let r = (bits + vec4<u32>(0x0fffu) + ((bits >> vec4<u32>(13u)) & vec4<u32>(1u))) & vec4<u32>(0xffffe000u);
    return select(bitcast<vec4<f32>>(r), v, nan4(v));
}

// ---- The products' shared code ----
// Each product kernel declares the operands `a_hi`, `a_lo`, `b_hi`, `b_lo` (array<vec4<f16>>),
// `amax` (array<u32>: [0] of A, [1] of B), the constants A_KC / B_KC (the operand is stored with
// k contiguous: A [M, K], B [N, K]; otherwise A [K, M], B [K, N]) and the hooks
// `store_out(row, col, v)` (masked) and, on tensor cores, `coop_out(c, row, col)`.

// The current product: output rows and columns, the end of the contraction range, vec4s per
// stored row of A and B.
var<private> dim_m: u32;
var<private> dim_n: u32;
var<private> k_end: u32;
var<private> a_q: u32;
var<private> b_q: u32;

// vec4s per staged row and per stored row of workgroup memory.
const PB_ROWA: u32 = select(PB_BM / 4u, PB_BK / 4u, A_KC);
const PB_ROWB: u32 = select(PB_BN / 4u, PB_BK / 4u, B_KC);
const PB_LDA: u32 = PB_ROWA + PB_PAD / 4u;
const PB_LDB: u32 = PB_ROWB + PB_PAD / 4u;
const PB_SA: u32 = select(PB_BK, PB_BM, A_KC) * PB_LDA;
const PB_SB: u32 = select(PB_BK, PB_BN, B_KC) * PB_LDB;
// vec4 loads per invocation per operand slice (2 or 4).
const PB_SLOTS: u32 = PB_BM * PB_BK / 4u / PB_WG;
// Workgroup memory at most the H200's 48 KiB with tensor cores (32-deep slices), lavapipe's
// 32 KiB without (16-deep): checked in `pb_stage` (a module-scope assert would reach A_KC from
// every kernel of the file).
const PB_MEMORY_MAX: u32 = 49152u;
var<workgroup> pb_sah: array<vec4<f16>, PB_SA>;
var<workgroup> pb_sal: array<vec4<f16>, PB_SA>;
var<workgroup> pb_sbh: array<vec4<f16>, PB_SB>;
var<workgroup> pb_sbl: array<vec4<f16>, PB_SB>;
// The next slice, in named registers (a private array indexed in a bounded loop would not be
// unrolled and would land in local memory).
var<private> pah0: vec4<f16>;
var<private> pah1: vec4<f16>;
var<private> pah2: vec4<f16>;
var<private> pah3: vec4<f16>;
var<private> pal0: vec4<f16>;
var<private> pal1: vec4<f16>;
var<private> pal2: vec4<f16>;
var<private> pal3: vec4<f16>;
var<private> pbh0: vec4<f16>;
var<private> pbh1: vec4<f16>;
var<private> pbh2: vec4<f16>;
var<private> pbh3: vec4<f16>;
var<private> pbl0: vec4<f16>;
var<private> pbl1: vec4<f16>;
var<private> pbl2: vec4<f16>;
var<private> pbl3: vec4<f16>;

// Load slot s of invocation tid: (staged row, vec4 within the row).
fn pb_pos(tid: u32, s: u32, per_row: u32) -> vec2<u32> {
    return vec2<u32>(tid / per_row + s * (PB_WG / per_row), tid % per_row);
}

// Slot s of A's slice at contraction index kb: (vec4 index, 1 if inside). Elements past the
// matrix within an inside vec4 are the layout's zero padding.
fn pb_ga(tid: u32, s: u32, m0: u32, kb: u32) -> vec2<u32> {
    let q = pb_pos(tid, s, PB_ROWA);
    if (A_KC) {
        let row = m0 + q.x;
        let kc = kb + 4u * q.y;
        let ok = row < dim_m && kc < k_end;
        return vec2<u32>(select(0u, row * a_q + kc / 4u, ok), u32(ok));
    }
    let kr = kb + q.x;
    let col = m0 + 4u * q.y;
    let ok = kr < k_end && col < dim_m;
    return vec2<u32>(select(0u, kr * a_q + col / 4u, ok), u32(ok));
}

fn pb_gb(tid: u32, s: u32, n0: u32, kb: u32) -> vec2<u32> {
    let q = pb_pos(tid, s, PB_ROWB);
    if (B_KC) {
        let row = n0 + q.x;
        let kc = kb + 4u * q.y;
        let ok = row < dim_n && kc < k_end;
        return vec2<u32>(select(0u, row * b_q + kc / 4u, ok), u32(ok));
    }
    let kr = kb + q.x;
    let col = n0 + 4u * q.y;
    let ok = kr < k_end && col < dim_n;
    return vec2<u32>(select(0u, kr * b_q + col / 4u, ok), u32(ok));
}

fn pb_ah(g: vec2<u32>) -> vec4<f16> {
    return select(vec4<f16>(), a_hi[g.x], g.y != 0u);
}

fn pb_al(g: vec2<u32>) -> vec4<f16> {
    return select(vec4<f16>(), a_lo[g.x], g.y != 0u);
}

fn pb_bh(g: vec2<u32>) -> vec4<f16> {
    return select(vec4<f16>(), b_hi[g.x], g.y != 0u);
}

fn pb_bl(g: vec2<u32>) -> vec4<f16> {
    return select(vec4<f16>(), b_lo[g.x], g.y != 0u);
}

// The slices at contraction index kb into the registers.
fn pb_fetch(tid: u32, m0: u32, n0: u32, kb: u32) {
    let a0 = pb_ga(tid, 0u, m0, kb);
    pah0 = pb_ah(a0);
    pal0 = pb_al(a0);
    let a1 = pb_ga(tid, 1u, m0, kb);
    pah1 = pb_ah(a1);
    pal1 = pb_al(a1);
    let b0 = pb_gb(tid, 0u, n0, kb);
    pbh0 = pb_bh(b0);
    pbl0 = pb_bl(b0);
    let b1 = pb_gb(tid, 1u, n0, kb);
    pbh1 = pb_bh(b1);
    pbl1 = pb_bl(b1);
    if (PB_SLOTS > 2u) {
        let a2 = pb_ga(tid, 2u, m0, kb);
        pah2 = pb_ah(a2);
        pal2 = pb_al(a2);
        let a3 = pb_ga(tid, 3u, m0, kb);
        pah3 = pb_ah(a3);
        pal3 = pb_al(a3);
        let b2 = pb_gb(tid, 2u, n0, kb);
        pbh2 = pb_bh(b2);
        pbl2 = pb_bl(b2);
        let b3 = pb_gb(tid, 3u, n0, kb);
        pbh3 = pb_bh(b3);
        pbl3 = pb_bl(b3);
    }
}

fn pb_at_a(tid: u32, s: u32) -> u32 {
    let q = pb_pos(tid, s, PB_ROWA);
    return q.x * PB_LDA + q.y;
}

fn pb_at_b(tid: u32, s: u32) -> u32 {
    let q = pb_pos(tid, s, PB_ROWB);
    return q.x * PB_LDB + q.y;
}

// The registers into workgroup memory.
fn pb_stage(tid: u32) {
    const_assert PB_BM == PB_BN;
    const_assert PB_SLOTS == 2u || PB_SLOTS == 4u;
    const_assert 2u * (PB_SA + PB_SB) * 8u <= select(PB_PORTABLE_MEMORY_MAX, PB_MEMORY_MAX, PB_BK == 32u);
    let a0 = pb_at_a(tid, 0u);
    pb_sah[a0] = pah0;
    pb_sal[a0] = pal0;
    let a1 = pb_at_a(tid, 1u);
    pb_sah[a1] = pah1;
    pb_sal[a1] = pal1;
    let b0 = pb_at_b(tid, 0u);
    pb_sbh[b0] = pbh0;
    pb_sbl[b0] = pbl0;
    let b1 = pb_at_b(tid, 1u);
    pb_sbh[b1] = pbh1;
    pb_sbl[b1] = pbl1;
    if (PB_SLOTS > 2u) {
        let a2 = pb_at_a(tid, 2u);
        pb_sah[a2] = pah2;
        pb_sal[a2] = pal2;
        let a3 = pb_at_a(tid, 3u);
        pb_sah[a3] = pah3;
        pb_sal[a3] = pal3;
        let b2 = pb_at_b(tid, 2u);
        pb_sbh[b2] = pbh2;
        pb_sbl[b2] = pbl2;
        let b3 = pb_at_b(tid, 3u);
        pb_sbh[b3] = pbh3;
        pb_sbl[b3] = pbl3;
    }
}

// The epilogue's factors (2^−⌊e/2⌋, 2^(⌊e/2⌋ − e)), e = e_a + e_b: each within f32's normal range.
fn pb_factors() -> vec2<f32> {
    let e = scale_exp(amax[0]) + scale_exp(amax[1]);
    let h = e / 2;
    return vec2<f32>(ldexp(1.0f, -h), ldexp(1.0f, h - e));
}

// The output block of workgroup w (row-major over blocks): (m0, n0, 1), or (…, 0) past the end
// (the 2-D fallback's tail).
fn pb_block(w: u32, m: u32, n: u32) -> vec3<u32> {
    let tiles_n = (n + PB_BN - 1u) / PB_BN;
    let tiles_m = (m + PB_BM - 1u) / PB_BM;
    return vec3<u32>((w / max(tiles_n, 1u)) * PB_BM, (w % max(tiles_n, 1u)) * PB_BN, select(0u, 1u, w < tiles_n * tiles_m));
}

// ---- Portable path: f32 FMAs on the staged halves ----
// Invocation (tx, ty) = (tid % 16, tid / 16) holds rows ty + 16i (i < 8) and columns
// 64j + 4tx … +3 (j < 2): pf_hh[2i + j] the hi·hi sums, pf_x[2i + j] the cross sums.
var<private> pf_hh: array<vec4<f32>, 16>;
var<private> pf_x: array<vec4<f32>, 16>;

// A's (hi, lo) at block row r, slice index kk.
fn pf_a(r: u32, kk: u32) -> vec2<f32> {
    if (A_KC) {
        let s = r * PB_LDA + kk / 4u;
        return vec2<f32>(f32(pb_sah[s][kk % 4u]), f32(pb_sal[s][kk % 4u]));
    }
    let s = kk * PB_LDA + r / 4u;
    return vec2<f32>(f32(pb_sah[s][r % 4u]), f32(pb_sal[s][r % 4u]));
}

// B's hi at block columns c … c+3 (c % 4 = 0), slice index kk.
fn pf_bh(c: u32, kk: u32) -> vec4<f32> {
    if (B_KC) {
        let s = c * PB_LDB + kk / 4u;
        let l = kk % 4u;
        return vec4<f32>(f32(pb_sbh[s][l]), f32(pb_sbh[s + PB_LDB][l]), f32(pb_sbh[s + 2u * PB_LDB][l]), f32(pb_sbh[s + 3u * PB_LDB][l]));
    }
    return vec4<f32>(pb_sbh[kk * PB_LDB + c / 4u]);
}

fn pf_bl(c: u32, kk: u32) -> vec4<f32> {
    if (B_KC) {
        let s = c * PB_LDB + kk / 4u;
        let l = kk % 4u;
        return vec4<f32>(f32(pb_sbl[s][l]), f32(pb_sbl[s + PB_LDB][l]), f32(pb_sbl[s + 2u * PB_LDB][l]), f32(pb_sbl[s + 3u * PB_LDB][l]));
    }
    return vec4<f32>(pb_sbl[kk * PB_LDB + c / 4u]);
}

// The block (m0, n0) over nk slices from contraction index kb, stored through `store_out`.
fn pf_block(tid: u32, m0: u32, n0: u32, kb: u32, nk: u32, fs: vec2<f32>) {
    let tx = tid % 16u;
    let ty = tid / 16u;
    for (var i = 0u; i < 16u; i++) {
        pf_hh[i] = vec4<f32>(0.0);
        pf_x[i] = vec4<f32>(0.0);
    }
    pb_fetch(tid, m0, n0, kb);
    for (var t = 0u; t < nk; t++) {
        pb_stage(tid);
        workgroupBarrier();
        if (t + 1u < nk) {
            pb_fetch(tid, m0, n0, kb + (t + 1u) * PB_BK);
        }
        for (var kk = 0u; kk < PB_BK; kk++) {
            let bh0 = pf_bh(4u * tx, kk);
            let bl0 = pf_bl(4u * tx, kk);
            let bh1 = pf_bh(64u + 4u * tx, kk);
            let bl1 = pf_bl(64u + 4u * tx, kk);
            for (var i = 0u; i < 8u; i++) {
                let a = pf_a(ty + 16u * i, kk);
                pf_hh[2u * i] += a.x * bh0;
                pf_hh[2u * i + 1u] += a.x * bh1;
                pf_x[2u * i] += a.x * bl0 + a.y * bh0;
                pf_x[2u * i + 1u] += a.x * bl1 + a.y * bh1;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + ty + 16u * i;
        for (var j = 0u; j < 2u; j++) {
            let v = fs.y * (fs.x * (pf_hh[2u * i + j] + LO_INV * pf_x[2u * i + j]));
            let col = n0 + 64u * j + 4u * tx;
            store_out(row, col, v.x);
            store_out(row, col + 1u, v.y);
            store_out(row, col + 2u, v.z);
            store_out(row, col + 3u, v.w);
        }
    }
}

//#if coop
// ---- Tensor-core path ----
// Subgroup groups of 64×32 outputs: a 2×4 grid over the 128×128 block.
const PC_GROUPS: u32 = 8u;
const PC_SGN: u32 = 4u;

// Fragments: A's 16-row tile tr, B's 16-column tile tc, at the slice's 16-deep half kk.
fn pc_ah(tr: u32, kk: u32) -> coop_mat16x16<f16, A> {
    if (A_KC) {
        let at = tr * 16u * PB_LDA + kk * 4u;
        return coopLoadT<coop_mat16x16<f16, A>>(&pb_sah[at], PB_LDA);
    }
    let at = kk * 16u * PB_LDA + tr * 4u;
    return coopLoad<coop_mat16x16<f16, A>>(&pb_sah[at], PB_LDA);
}

fn pc_al(tr: u32, kk: u32) -> coop_mat16x16<f16, A> {
    if (A_KC) {
        let at = tr * 16u * PB_LDA + kk * 4u;
        return coopLoadT<coop_mat16x16<f16, A>>(&pb_sal[at], PB_LDA);
    }
    let at = kk * 16u * PB_LDA + tr * 4u;
    return coopLoad<coop_mat16x16<f16, A>>(&pb_sal[at], PB_LDA);
}

fn pc_bh(tc: u32, kk: u32) -> coop_mat16x16<f16, B> {
    if (B_KC) {
        let at = tc * 16u * PB_LDB + kk * 4u;
        return coopLoad<coop_mat16x16<f16, B>>(&pb_sbh[at], PB_LDB);
    }
    let at = kk * 16u * PB_LDB + tc * 4u;
    return coopLoadT<coop_mat16x16<f16, B>>(&pb_sbh[at], PB_LDB);
}

fn pc_bl(tc: u32, kk: u32) -> coop_mat16x16<f16, B> {
    if (B_KC) {
        let at = tc * 16u * PB_LDB + kk * 4u;
        return coopLoad<coop_mat16x16<f16, B>>(&pb_sbl[at], PB_LDB);
    }
    let at = kk * 16u * PB_LDB + tc * 4u;
    return coopLoadT<coop_mat16x16<f16, B>>(&pb_sbl[at], PB_LDB);
}

// The block (m0, n0) on tensor cores: group g of 64×32 outputs per subgroup and round, for a
// subgroup count nsg dividing 8 (the callers check).
fn pc_block(tid: u32, sg: u32, nsg: u32, m0: u32, n0: u32, kb: u32, nk: u32, fs: vec2<f32>) {
    let rounds = PC_GROUPS / nsg;
    for (var r = 0u; r < rounds; r++) {
        pc_group(tid, sg + r * nsg, m0, n0, kb, nk, fs);
    }
}

// One group: 4×2 tiles of 16×16, hi·hi in acc, the cross products in accx (written out as the
// sweep's generator unrolls it, benches/coop/kernel.rs).
const_assert PB_BK == 32u; // pc_group is unrolled for two 16-deep halves

fn pc_group(tid: u32, g: u32, m0: u32, n0: u32, kb: u32, nk: u32, fs: vec2<f32>) {
    let wm = g / PC_SGN;
    let wn = g % PC_SGN;
    var acc00 = coop_mat16x16<f32, C>();
    var accx00 = coop_mat16x16<f32, C>();
    var acc01 = coop_mat16x16<f32, C>();
    var accx01 = coop_mat16x16<f32, C>();
    var acc10 = coop_mat16x16<f32, C>();
    var accx10 = coop_mat16x16<f32, C>();
    var acc11 = coop_mat16x16<f32, C>();
    var accx11 = coop_mat16x16<f32, C>();
    var acc20 = coop_mat16x16<f32, C>();
    var accx20 = coop_mat16x16<f32, C>();
    var acc21 = coop_mat16x16<f32, C>();
    var accx21 = coop_mat16x16<f32, C>();
    var acc30 = coop_mat16x16<f32, C>();
    var accx30 = coop_mat16x16<f32, C>();
    var acc31 = coop_mat16x16<f32, C>();
    var accx31 = coop_mat16x16<f32, C>();
    pb_fetch(tid, m0, n0, kb);
    for (var t = 0u; t < nk; t++) {
        pb_stage(tid);
        workgroupBarrier();
        if (t + 1u < nk) {
            pb_fetch(tid, m0, n0, kb + (t + 1u) * PB_BK);
        }
        let bh00 = pc_bh(wn * 2u + 0u, 0u);
        let bl00 = pc_bl(wn * 2u + 0u, 0u);
        let bh01 = pc_bh(wn * 2u + 1u, 0u);
        let bl01 = pc_bl(wn * 2u + 1u, 0u);
        let ah00 = pc_ah(wm * 4u + 0u, 0u);
        let al00 = pc_al(wm * 4u + 0u, 0u);
        let ah01 = pc_ah(wm * 4u + 1u, 0u);
        let al01 = pc_al(wm * 4u + 1u, 0u);
        let ah02 = pc_ah(wm * 4u + 2u, 0u);
        let al02 = pc_al(wm * 4u + 2u, 0u);
        let ah03 = pc_ah(wm * 4u + 3u, 0u);
        let al03 = pc_al(wm * 4u + 3u, 0u);
        accx00 = coopMultiplyAdd(ah00, bl00, accx00);
        accx00 = coopMultiplyAdd(al00, bh00, accx00);
        acc00 = coopMultiplyAdd(ah00, bh00, acc00);
        accx01 = coopMultiplyAdd(ah00, bl01, accx01);
        accx01 = coopMultiplyAdd(al00, bh01, accx01);
        acc01 = coopMultiplyAdd(ah00, bh01, acc01);
        accx10 = coopMultiplyAdd(ah01, bl00, accx10);
        accx10 = coopMultiplyAdd(al01, bh00, accx10);
        acc10 = coopMultiplyAdd(ah01, bh00, acc10);
        accx11 = coopMultiplyAdd(ah01, bl01, accx11);
        accx11 = coopMultiplyAdd(al01, bh01, accx11);
        acc11 = coopMultiplyAdd(ah01, bh01, acc11);
        accx20 = coopMultiplyAdd(ah02, bl00, accx20);
        accx20 = coopMultiplyAdd(al02, bh00, accx20);
        acc20 = coopMultiplyAdd(ah02, bh00, acc20);
        accx21 = coopMultiplyAdd(ah02, bl01, accx21);
        accx21 = coopMultiplyAdd(al02, bh01, accx21);
        acc21 = coopMultiplyAdd(ah02, bh01, acc21);
        accx30 = coopMultiplyAdd(ah03, bl00, accx30);
        accx30 = coopMultiplyAdd(al03, bh00, accx30);
        acc30 = coopMultiplyAdd(ah03, bh00, acc30);
        accx31 = coopMultiplyAdd(ah03, bl01, accx31);
        accx31 = coopMultiplyAdd(al03, bh01, accx31);
        acc31 = coopMultiplyAdd(ah03, bh01, acc31);
        let bh10 = pc_bh(wn * 2u + 0u, 1u);
        let bl10 = pc_bl(wn * 2u + 0u, 1u);
        let bh11 = pc_bh(wn * 2u + 1u, 1u);
        let bl11 = pc_bl(wn * 2u + 1u, 1u);
        let ah10 = pc_ah(wm * 4u + 0u, 1u);
        let al10 = pc_al(wm * 4u + 0u, 1u);
        let ah11 = pc_ah(wm * 4u + 1u, 1u);
        let al11 = pc_al(wm * 4u + 1u, 1u);
        let ah12 = pc_ah(wm * 4u + 2u, 1u);
        let al12 = pc_al(wm * 4u + 2u, 1u);
        let ah13 = pc_ah(wm * 4u + 3u, 1u);
        let al13 = pc_al(wm * 4u + 3u, 1u);
        accx00 = coopMultiplyAdd(ah10, bl10, accx00);
        accx00 = coopMultiplyAdd(al10, bh10, accx00);
        acc00 = coopMultiplyAdd(ah10, bh10, acc00);
        accx01 = coopMultiplyAdd(ah10, bl11, accx01);
        accx01 = coopMultiplyAdd(al10, bh11, accx01);
        acc01 = coopMultiplyAdd(ah10, bh11, acc01);
        accx10 = coopMultiplyAdd(ah11, bl10, accx10);
        accx10 = coopMultiplyAdd(al11, bh10, accx10);
        acc10 = coopMultiplyAdd(ah11, bh10, acc10);
        accx11 = coopMultiplyAdd(ah11, bl11, accx11);
        accx11 = coopMultiplyAdd(al11, bh11, accx11);
        acc11 = coopMultiplyAdd(ah11, bh11, acc11);
        accx20 = coopMultiplyAdd(ah12, bl10, accx20);
        accx20 = coopMultiplyAdd(al12, bh10, accx20);
        acc20 = coopMultiplyAdd(ah12, bh10, acc20);
        accx21 = coopMultiplyAdd(ah12, bl11, accx21);
        accx21 = coopMultiplyAdd(al12, bh11, accx21);
        acc21 = coopMultiplyAdd(ah12, bh11, acc21);
        accx30 = coopMultiplyAdd(ah13, bl10, accx30);
        accx30 = coopMultiplyAdd(al13, bh10, accx30);
        acc30 = coopMultiplyAdd(ah13, bh10, acc30);
        accx31 = coopMultiplyAdd(ah13, bl11, accx31);
        accx31 = coopMultiplyAdd(al13, bh11, accx31);
        acc31 = coopMultiplyAdd(ah13, bh11, acc31);
        workgroupBarrier();
    }
    let r0 = m0 + wm * 64u;
    let q0 = n0 + wn * 32u;
    coop_out(fs.y * (fs.x * (acc00 + LO_INV * accx00)), r0 + 0u, q0 + 0u);
    coop_out(fs.y * (fs.x * (acc01 + LO_INV * accx01)), r0 + 0u, q0 + 16u);
    coop_out(fs.y * (fs.x * (acc10 + LO_INV * accx10)), r0 + 16u, q0 + 0u);
    coop_out(fs.y * (fs.x * (acc11 + LO_INV * accx11)), r0 + 16u, q0 + 16u);
    coop_out(fs.y * (fs.x * (acc20 + LO_INV * accx20)), r0 + 32u, q0 + 0u);
    coop_out(fs.y * (fs.x * (acc21 + LO_INV * accx21)), r0 + 32u, q0 + 16u);
    coop_out(fs.y * (fs.x * (acc30 + LO_INV * accx30)), r0 + 48u, q0 + 0u);
    coop_out(fs.y * (fs.x * (acc31 + LO_INV * accx31)), r0 + 48u, q0 + 16u);
}
//#endif
