// The f16-operand matrix product, written once: C = op(A)·op(B) with f16 operands, f32 sums and
// f32 results, on tensor cores (cooperative matrices, `//#if coop`) and as f32 FMAs everywhere
// (the portable path). Orientation, block shape, contraction depth, staging, launch order and the
// split of the contraction are `override`s: each choice is its own pipeline with the choice
// folded in, made by `kernels::gemm`'s plan (which also keeps each choice within the limits below).
//
// Operands. `a` holds A as [M, K] (A_T = false) or [K, M] (A_T = true); `b` holds B as [K, N]
// (B_T = false) or [N, K] (B_T = true): `array<vec4<f16>>` in the f16x4 row layout (rows
// zero-padded to a multiple of 4 elements). X·Wᵀ is (A_T, B_T) = (false, true), dY·W
// (false, false), Xᵀ·B (true, false).
//
// The including kernel declares `a`, `b`, `p: GemmParams`, the hooks
//   `store_out(row, col, v)`: one output element (row < M and col < N guaranteed);
//   `coop_out(c, row, col)` (tensor cores only): one whole 16×16 tile inside the output, with
//   N % 4 = 0 (16-byte aligned rows);
// both adding `g_off` (the current part's offset, for split contractions) and both given the
// stored column (`G_NMAP`), and calls
// `g16_run(w, tid, sg, nsg)` (`g16_run(w, tid)` without coop) with its linear workgroup index.
//
// Work. Workgroup w computes the G_BM×G_BN output block `g_order(w mod blocks)` of part
// w / blocks: the contraction range [part·chunk, min((part+1)·chunk, K)) when p.parts > 1 (the
// part's output at g_off = part·M·N, summed by `linear::matmul_parts_add`), else all of K. Per
// step of G_BK, the block's A and B slices are staged in workgroup memory in their global
// orientation (rows padded by G_PAD halves, which spreads the rows of a fragment over the banks
// and keeps every fragment 16-byte aligned), loaded as vec4<f16> (8 bytes), either one step
// ahead into named registers (G_PF: register prefetch, the only overlap WGSL allows without
// asynchronous copies) or just before they are staged.
//
// Edges need no second code path: rows and columns past the matrix are read at a clamped index
// (the results there are never stored), k past the range reads as zero (the row layout's padding
// covers the last vec4, and a part ends on a multiple of G_BK), and a block that is not wholly
// inside the output stores through workgroup memory with masks.
//
// Tensor cores. 16×16×16 tiles, f16 A/B, f32 C. Subgroup g of the block's (G_BM/16/G_TM) ×
// (G_BN/16/G_TN) groups holds G_TM×G_TN accumulators (at most 4×4: 128 registers a lane on
// NVIDIA) and loads G_TM A and G_TN B fragments per 16 k. With nsg subgroups each takes
// groups/nsg groups in turn (each a pass over the contraction); a subgroup count that does not
// divide the groups, more than 16 subgroups, or more than 8 on a block that stores through the
// edge tiles' workgroup memory, runs the portable path instead: every count that steers control flow is uniform, `subgroup_id` only
// picks addresses. naga takes function arguments for non-uniform, so guards on them around
// cooperative-matrix operations are loops that run once or not at all (the macro's own
// uniformity pass checks them through the callers).
//
// Portable path: the first P_WG = min(G_WG, 256) invocations as 16 columns by P_WG/16 rows, each
// 8 rows × 4 columns of a (P_WG/2)×64 sub-block in registers, the block's sub-blocks one after
// another (each a pass over the contraction); every invocation stages. The same staged f16
// operands, f32 FMAs in a fixed order (results repeat bit for bit).
//
// Workgroups of 512 (sixteen subgroups of 32, each with a smaller tile: more subgroups in flight
// on a multiprocessor to hide the staging's latency) have no room for sixteen edge tiles beside
// the staged slices, so their blocks that are not wholly inside the output take the portable
// path; the plan gives them only to products whose blocks all fit.
//
// Limits the plan keeps: G_WG 128, 256 or 512; G_BM a multiple of 128, G_BN of 64 (the portable
// sub-block), both multiples of 16·G_TM and 16·G_TN; G_BK 16, 32 or 64; G_BM·G_BK/4 and
// G_BN·G_BK/4 each G_WG times 1, 2, 4, 6 or 8 (whole vec4 loads per invocation, in the named
// registers below); each staged slice at most G16_STAGE vec4s; G_PAD a multiple of 8.

struct GemmParams {
    m: u32,
    n: u32,
    k: u32,
    // Parts of a split contraction (1: no split) and the contraction length of each (a multiple
    // of G_BK).
    parts: u32,
    chunk: u32,
    // Workgroups of the grid: blocks × parts.
    tiles: u32,
}

override A_T: bool = false;
override B_T: bool = true;
override G_BM: u32 = 128u;
override G_BN: u32 = 128u;
override G_BK: u32 = 16u;
override G_TM: u32 = 4u;
override G_TN: u32 = 2u;
override G_PAD: u32 = 8u;
override G_PF: bool = true;
// Block rows per group of the launch order: consecutive workgroups walk G_GROUP block rows of
// one block column before the next, so the blocks in flight share operand slices in L2.
override G_GROUP: u32 = 1u;
// Column order of the product (0: as stored). With G_NMAP = t (N a multiple of 2t), the
// product's columns are B's and the output's with tiles of t columns alternating between the two
// halves of N: column v is stored column `g_ncol(v)`, so a block of 2t·j columns holds matching
// columns of both halves (the gate and up halves of a fused SwiGLU product, for its epilogue).
override G_NMAP: u32 = 0u;
// The shape compiled in (0: read `p`); when set, equal to p.m, p.n, p.k.
override M_C: u32 = 0u;
override N_C: u32 = 0u;
override K_C: u32 = 0u;
// The split of the contraction compiled in (0: read `p`); when set, equal to p.parts and p.chunk.
// With the shape, the contraction loop's trip count is a constant for the driver.
override G_PARTS: u32 = 0u;
override G_CHUNK: u32 = 0u;
// Every block wholly inside the product and every part's range a multiple of G_BK (M % G_BM,
// N % G_BN and K % G_BK all 0): the operand loads need no clamp and no mask.
override G_EXACT: bool = false;

// Invocations per workgroup: 256, or 128 (fewer registers per workgroup, so more workgroups per
// multiprocessor). The kernels' `@workgroup_size`.
override G_WG: u32 = 256u;
// vec4<f16>s per staged operand slice: 20 KiB each with tensor cores, 8 KiB each without (a
// browser's 16 KiB in all).
//#if coop
const G16_STAGE: u32 = 2560u;
//#else
const G16_STAGE: u32 = 1024u;
//#endif
var<workgroup> g_sa: array<vec4<f16>, G16_STAGE>;
var<workgroup> g_sb: array<vec4<f16>, G16_STAGE>;
//#if coop
// One 16×16 f32 tile per subgroup (at most 8) for the masked stores of edge blocks. With the
// slices: 48 KiB, the H200's limit (wgpu 30 does not check it, and a kernel over it hung the
// driver).
var<workgroup> g_edge: array<f32, 2048>;
const_assert 2u * G16_STAGE * 8u + 2048u * 4u <= 49152u;
//#endif

// The current product: output rows, columns, contraction length, vec4s per stored row of A and
// of B, the end of this part's contraction range and the offset of its output.
var<private> g_m: u32;
var<private> g_n: u32;
var<private> g_k: u32;
var<private> g_aq: u32;
var<private> g_bq: u32;
var<private> g_off: u32;

// The stored column of the product's column v (`G_NMAP`).
fn g_ncol(v: u32) -> u32 {
    if (G_NMAP == 0u) {
        return v;
    }
    // (max: naga evaluates the division for G_NMAP = 0 too, and rejects a zero divisor.)
    let t = max(G_NMAP, 1u);
    let tile = v / t;
    return (tile % 2u) * (g_n / 2u) + (tile / 2u) * t + v % t;
}

// vec4s per staged row (without padding) and per stored row of workgroup memory, of A and B.
fn g_rowa() -> u32 {
    return select(G_BK, G_BM, A_T) / 4u;
}

fn g_rowb() -> u32 {
    return select(G_BN, G_BK, B_T) / 4u;
}

fn g_lda() -> u32 {
    return g_rowa() + G_PAD / 4u;
}

fn g_ldb() -> u32 {
    return g_rowb() + G_PAD / 4u;
}

// vec4 loads per invocation per slice.
fn g_pfa() -> u32 {
    return G_BM * G_BK / (4u * G_WG);
}

fn g_pfb() -> u32 {
    return G_BN * G_BK / (4u * G_WG);
}

// vec4 e of A's slice at contraction index kc of the block at row m0 (zero past ke), and its slot.
fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / g_rowa();
    let q = e % g_rowa();
    if (G_EXACT) {
        if (A_T) {
            return a[(kc + sr) * g_aq + m0 / 4u + q];
        }
        return a[(m0 + sr) * g_aq + kc / 4u + q];
    }
    if (A_T) {
        let kr = kc + sr;
        let at = min(kr, g_k - 1u) * g_aq + min(m0 / 4u + q, g_aq - 1u);
        return select(vec4<f16>(), a[at], kr < ke);
    }
    let kk = kc + 4u * q;
    let at = min(m0 + sr, g_m - 1u) * g_aq + min(kk / 4u, g_aq - 1u);
    return select(vec4<f16>(), a[at], kk < ke);
}

fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / g_rowb();
    let q = e % g_rowb();
    if (G_EXACT) {
        if (B_T) {
            return b[g_ncol(n0 + sr) * g_bq + kc / 4u + q];
        }
        return b[(kc + sr) * g_bq + g_ncol(n0 + 4u * q) / 4u];
    }
    if (B_T) {
        let kk = kc + 4u * q;
        let at = g_ncol(min(n0 + sr, g_n - 1u)) * g_bq + min(kk / 4u, g_bq - 1u);
        return select(vec4<f16>(), b[at], kk < ke);
    }
    let kr = kc + sr;
    let at = min(kr, g_k - 1u) * g_bq + g_ncol(4u * min(n0 / 4u + q, g_bq - 1u)) / 4u;
    return select(vec4<f16>(), b[at], kr < ke);
}

fn g_slot_a(e: u32) -> u32 {
    return (e / g_rowa()) * g_lda() + e % g_rowa();
}

fn g_slot_b(e: u32) -> u32 {
    return (e / g_rowb()) * g_ldb() + e % g_rowb();
}

// The invocation's share of the next slices, in named registers: wgpu bounds every loop (naga
// adds a counter), so a loop over a private array is not unrolled and the array lands in local
// memory (measured 2.5× slower on an H200).
var<private> g_pa0: vec4<f16>;
var<private> g_pa1: vec4<f16>;
var<private> g_pa2: vec4<f16>;
var<private> g_pa3: vec4<f16>;
var<private> g_pa4: vec4<f16>;
var<private> g_pa5: vec4<f16>;
var<private> g_pa6: vec4<f16>;
var<private> g_pa7: vec4<f16>;
var<private> g_pb0: vec4<f16>;
var<private> g_pb1: vec4<f16>;
var<private> g_pb2: vec4<f16>;
var<private> g_pb3: vec4<f16>;
var<private> g_pb4: vec4<f16>;
var<private> g_pb5: vec4<f16>;
var<private> g_pb6: vec4<f16>;
var<private> g_pb7: vec4<f16>;

fn g_fetch(tid: u32, m0: u32, n0: u32, kc: u32, ke: u32) {
    let na = g_pfa();
    g_pa0 = g_ga(tid, m0, kc, ke);
    if (na > 1u) {
        g_pa1 = g_ga(tid + G_WG, m0, kc, ke);
    }
    if (na > 2u) {
        g_pa2 = g_ga(tid + 2u * G_WG, m0, kc, ke);
        g_pa3 = g_ga(tid + 3u * G_WG, m0, kc, ke);
    }
    if (na > 4u) {
        g_pa4 = g_ga(tid + 4u * G_WG, m0, kc, ke);
        g_pa5 = g_ga(tid + 5u * G_WG, m0, kc, ke);
    }
    if (na > 6u) {
        g_pa6 = g_ga(tid + 6u * G_WG, m0, kc, ke);
        g_pa7 = g_ga(tid + 7u * G_WG, m0, kc, ke);
    }
    let nb = g_pfb();
    g_pb0 = g_gb(tid, n0, kc, ke);
    if (nb > 1u) {
        g_pb1 = g_gb(tid + G_WG, n0, kc, ke);
    }
    if (nb > 2u) {
        g_pb2 = g_gb(tid + 2u * G_WG, n0, kc, ke);
        g_pb3 = g_gb(tid + 3u * G_WG, n0, kc, ke);
    }
    if (nb > 4u) {
        g_pb4 = g_gb(tid + 4u * G_WG, n0, kc, ke);
        g_pb5 = g_gb(tid + 5u * G_WG, n0, kc, ke);
    }
    if (nb > 6u) {
        g_pb6 = g_gb(tid + 6u * G_WG, n0, kc, ke);
        g_pb7 = g_gb(tid + 7u * G_WG, n0, kc, ke);
    }
}

fn g_stage(tid: u32) {
    let na = g_pfa();
    g_sa[g_slot_a(tid)] = g_pa0;
    if (na > 1u) {
        g_sa[g_slot_a(tid + G_WG)] = g_pa1;
    }
    if (na > 2u) {
        g_sa[g_slot_a(tid + 2u * G_WG)] = g_pa2;
        g_sa[g_slot_a(tid + 3u * G_WG)] = g_pa3;
    }
    if (na > 4u) {
        g_sa[g_slot_a(tid + 4u * G_WG)] = g_pa4;
        g_sa[g_slot_a(tid + 5u * G_WG)] = g_pa5;
    }
    if (na > 6u) {
        g_sa[g_slot_a(tid + 6u * G_WG)] = g_pa6;
        g_sa[g_slot_a(tid + 7u * G_WG)] = g_pa7;
    }
    let nb = g_pfb();
    g_sb[g_slot_b(tid)] = g_pb0;
    if (nb > 1u) {
        g_sb[g_slot_b(tid + G_WG)] = g_pb1;
    }
    if (nb > 2u) {
        g_sb[g_slot_b(tid + 2u * G_WG)] = g_pb2;
        g_sb[g_slot_b(tid + 3u * G_WG)] = g_pb3;
    }
    if (nb > 4u) {
        g_sb[g_slot_b(tid + 4u * G_WG)] = g_pb4;
        g_sb[g_slot_b(tid + 5u * G_WG)] = g_pb5;
    }
    if (nb > 6u) {
        g_sb[g_slot_b(tid + 6u * G_WG)] = g_pb6;
        g_sb[g_slot_b(tid + 7u * G_WG)] = g_pb7;
    }
}

// Block t of the launch order over bm × bn blocks: (block row, block column).
fn g_order(t: u32, bm: u32, bn: u32) -> vec2<u32> {
    let size = max(G_GROUP, 1u);
    let per_group = size * bn;
    let first = (t / per_group) * size;
    let rows = min(bm - first, size);
    let local = t % per_group;
    return vec2<u32>(first + local % rows, local / rows);
}

// ---- Portable path ----
// The first P_WG invocations as 16 columns × P_WG/16 rows of a sub-block of P_WG/2 rows × 64
// columns; g_acc[i] holds row `g_prow(ty, i)` of the sub-block, columns 4·tx … 4·tx + 3.
var<private> g_acc: array<vec4<f32>, 8>;

// P_WG: the invocations that compute on the portable path.
fn g_pwg() -> u32 {
    return min(G_WG, 256u);
}

fn g_prow(ty: u32, i: u32) -> u32 {
    return 4u * ty + (i % 4u) + (g_pwg() / 4u) * (i / 4u);
}

// g_acc += the sub-block's products over the 4 staged k at 4·kq (sub-block at rows sm, columns
// sn of the block).
fn g_p4(tx: u32, ty: u32, sm: u32, sn: u32, kq: u32) {
    let lda = g_lda();
    let ldb = g_ldb();
    // B at the invocation's 4 columns, one vec4 per k.
    var b0: vec4<f32>;
    var b1: vec4<f32>;
    var b2: vec4<f32>;
    var b3: vec4<f32>;
    if (B_T) {
        let c = (sn + 4u * tx) * ldb + kq;
        let q0 = vec4<f32>(g_sb[c]);
        let q1 = vec4<f32>(g_sb[c + ldb]);
        let q2 = vec4<f32>(g_sb[c + 2u * ldb]);
        let q3 = vec4<f32>(g_sb[c + 3u * ldb]);
        b0 = vec4<f32>(q0.x, q1.x, q2.x, q3.x);
        b1 = vec4<f32>(q0.y, q1.y, q2.y, q3.y);
        b2 = vec4<f32>(q0.z, q1.z, q2.z, q3.z);
        b3 = vec4<f32>(q0.w, q1.w, q2.w, q3.w);
    } else {
        let c = 4u * kq * ldb + sn / 4u + tx;
        b0 = vec4<f32>(g_sb[c]);
        b1 = vec4<f32>(g_sb[c + ldb]);
        b2 = vec4<f32>(g_sb[c + 2u * ldb]);
        b3 = vec4<f32>(g_sb[c + 3u * ldb]);
    }
    // A at the invocation's rows 0–3 (`lo`) and 4–7 (`hi`), one vec4 per k.
    var l0: vec4<f32>;
    var l1: vec4<f32>;
    var l2: vec4<f32>;
    var l3: vec4<f32>;
    var h0: vec4<f32>;
    var h1: vec4<f32>;
    var h2: vec4<f32>;
    var h3: vec4<f32>;
    if (A_T) {
        let r = 4u * kq * lda + sm / 4u + ty;
        l0 = vec4<f32>(g_sa[r]);
        l1 = vec4<f32>(g_sa[r + lda]);
        l2 = vec4<f32>(g_sa[r + 2u * lda]);
        l3 = vec4<f32>(g_sa[r + 3u * lda]);
        let hi = g_pwg() / 16u;
        h0 = vec4<f32>(g_sa[r + hi]);
        h1 = vec4<f32>(g_sa[r + lda + hi]);
        h2 = vec4<f32>(g_sa[r + 2u * lda + hi]);
        h3 = vec4<f32>(g_sa[r + 3u * lda + hi]);
    } else {
        let r = (sm + 4u * ty) * lda + kq;
        let r0 = vec4<f32>(g_sa[r]);
        let r1 = vec4<f32>(g_sa[r + lda]);
        let r2 = vec4<f32>(g_sa[r + 2u * lda]);
        let r3 = vec4<f32>(g_sa[r + 3u * lda]);
        let hi = (g_pwg() / 4u) * lda;
        let r4 = vec4<f32>(g_sa[r + hi]);
        let r5 = vec4<f32>(g_sa[r + hi + lda]);
        let r6 = vec4<f32>(g_sa[r + hi + 2u * lda]);
        let r7 = vec4<f32>(g_sa[r + hi + 3u * lda]);
        l0 = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
        l1 = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
        l2 = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
        l3 = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
        h0 = vec4<f32>(r4.x, r5.x, r6.x, r7.x);
        h1 = vec4<f32>(r4.y, r5.y, r6.y, r7.y);
        h2 = vec4<f32>(r4.z, r5.z, r6.z, r7.z);
        h3 = vec4<f32>(r4.w, r5.w, r6.w, r7.w);
    }
    g_fma(l0, h0, b0);
    g_fma(l1, h1, b1);
    g_fma(l2, h2, b2);
    g_fma(l3, h3, b3);
}

// One k: rows 0–3 from `lo`, 4–7 from `hi`, times the 4 columns of `bv`.
fn g_fma(lo: vec4<f32>, hi: vec4<f32>, bv: vec4<f32>) {
    g_acc[0] = fma(vec4<f32>(lo.x), bv, g_acc[0]);
    g_acc[1] = fma(vec4<f32>(lo.y), bv, g_acc[1]);
    g_acc[2] = fma(vec4<f32>(lo.z), bv, g_acc[2]);
    g_acc[3] = fma(vec4<f32>(lo.w), bv, g_acc[3]);
    g_acc[4] = fma(vec4<f32>(hi.x), bv, g_acc[4]);
    g_acc[5] = fma(vec4<f32>(hi.y), bv, g_acc[5]);
    g_acc[6] = fma(vec4<f32>(hi.z), bv, g_acc[6]);
    g_acc[7] = fma(vec4<f32>(hi.w), bv, g_acc[7]);
}

// The block (m0, n0) over [kb, ke), sub-block by sub-block, through `store_out`. Call in uniform
// control flow with uniform arguments (tid aside).
fn g_portable(tid: u32, m0: u32, n0: u32, kb: u32, ke: u32) {
    let tx = tid % 16u;
    let ty = tid / 16u;
    let computes = tid < g_pwg();
    for (var sm = 0u; sm < G_BM; sm += g_pwg() / 2u) {
        for (var sn = 0u; sn < G_BN; sn += 64u) {
            g_acc = array<vec4<f32>, 8>();
            if (G_PF && kb < ke) {
                g_fetch(tid, m0, n0, kb, ke);
            }
            for (var kc = kb; kc < ke; kc += G_BK) {
                if (G_PF) {
                    g_stage(tid);
                    workgroupBarrier();
                    if (kc + G_BK < ke) {
                        g_fetch(tid, m0, n0, kc + G_BK, ke);
                    }
                } else {
                    g_fetch(tid, m0, n0, kc, ke);
                    g_stage(tid);
                    workgroupBarrier();
                }
                if (computes) {
                    for (var kq = 0u; kq < G_BK / 4u; kq++) {
                        g_p4(tx, ty, sm, sn, kq);
                    }
                }
                workgroupBarrier();
            }
            for (var i = 0u; i < 8u; i++) {
                let row = m0 + sm + g_prow(ty, i);
                let col = n0 + sn + 4u * tx;
                if (computes && row < g_m) {
                    for (var j = 0u; j < 4u; j++) {
                        if (col + j < g_n) {
                            store_out(row, g_ncol(col + j), g_acc[i][j]);
                        }
                    }
                }
            }
        }
    }
}

//#if coop
// ---- Tensor-core path ----
// The A fragment of block tile row `tr` and the B fragment of tile column `tc`, at the staged
// slice's 16-deep part s.
fn g_frag_a(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    let ld = g_lda();
    if (A_T) {
        let at = s * 16u * ld + tr * 4u;
        return coopLoad<coop_mat16x16<f16, A>>(&g_sa[at], ld);
    }
    let at = tr * 16u * ld + s * 4u;
    return coopLoadT<coop_mat16x16<f16, A>>(&g_sa[at], ld);
}

fn g_frag_b(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    let ld = g_ldb();
    if (B_T) {
        let at = tc * 16u * ld + s * 4u;
        return coopLoad<coop_mat16x16<f16, B>>(&g_sb[at], ld);
    }
    let at = s * 16u * ld + tc * 4u;
    return coopLoadT<coop_mat16x16<f16, B>>(&g_sb[at], ld);
}

// A whole tile at the product's (row, col) to the includer's store, at its stored column.
fn g_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    coop_out(c, row, g_ncol(col));
}

// Tile (i, j) of the groups first … first + nsg − 1 (one per subgroup) through workgroup memory,
// masked: every subgroup stores its tile `c` in its slot, then the workgroup copies the slots'
// elements inside the output. Call in uniform control flow with uniform i, j, first.
fn g_edge_out(c: coop_mat16x16<f32, C>, tid: u32, sg: u32, nsg: u32, first: u32, i: u32, j: u32, m0: u32, n0: u32) {
    let gn = G_BN / (16u * G_TN);
    workgroupBarrier();
    let at = sg * 256u;
    let ld = 16u;
    coopStoreT(c, &g_edge[at], ld);
    workgroupBarrier();
    for (var e = tid; e < nsg * 256u; e += G_WG) {
        let g = first + e / 256u;
        let row = m0 + ((g / gn) * G_TM + i) * 16u + (e % 256u) / 16u;
        let col = n0 + ((g % gn) * G_TN + j) * 16u + e % 16u;
        if (row < g_m && col < g_n) {
            store_out(row, g_ncol(col), g_edge[e]);
        }
    }
}

// Group g (of `first` … first + nsg − 1) of the block (m0, n0) over [kb, ke): its G_TM×G_TN
// tiles, stored by `coop_out` when `direct` is 1 (a block wholly inside the output), else masked.
fn g_group(tid: u32, sg: u32, nsg: u32, first: u32, m0: u32, n0: u32, kb: u32, ke: u32, direct: u32) {
    let gn = G_BN / (16u * G_TN);
    let g = first + sg;
    let tr0 = (g / gn) * G_TM;
    let tc0 = (g % gn) * G_TN;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();
    if (G_PF && kb < ke) {
        g_fetch(tid, m0, n0, kb, ke);
    }
    for (var kc = kb; kc < ke; kc += G_BK) {
        if (G_PF) {
            g_stage(tid);
            workgroupBarrier();
            if (kc + G_BK < ke) {
                g_fetch(tid, m0, n0, kc + G_BK, ke);
            }
        } else {
            g_fetch(tid, m0, n0, kc, ke);
            g_stage(tid);
            workgroupBarrier();
        }
        // The slice's 16-deep parts, unrolled (G_BK ≤ 64), each tile guarded by the group shape.
        if (G_BK > 0u) {
            let b0 = g_frag_b(tc0, 0u);
            var b1 = b0;
            var b2 = b0;
            var b3 = b0;
            if (G_TN > 1u) { b1 = g_frag_b(tc0 + 1u, 0u); }
            if (G_TN > 2u) { b2 = g_frag_b(tc0 + 2u, 0u); }
            if (G_TN > 3u) { b3 = g_frag_b(tc0 + 3u, 0u); }
            {
                let a = g_frag_a(tr0 + 0u, 0u);
                { c00 = coopMultiplyAdd(a, b0, c00); }
                if (G_TN > 1u) { c01 = coopMultiplyAdd(a, b1, c01); }
                if (G_TN > 2u) { c02 = coopMultiplyAdd(a, b2, c02); }
                if (G_TN > 3u) { c03 = coopMultiplyAdd(a, b3, c03); }
            }
            if (G_TM > 1u) {
                let a = g_frag_a(tr0 + 1u, 0u);
                { c10 = coopMultiplyAdd(a, b0, c10); }
                if (G_TN > 1u) { c11 = coopMultiplyAdd(a, b1, c11); }
                if (G_TN > 2u) { c12 = coopMultiplyAdd(a, b2, c12); }
                if (G_TN > 3u) { c13 = coopMultiplyAdd(a, b3, c13); }
            }
            if (G_TM > 2u) {
                let a = g_frag_a(tr0 + 2u, 0u);
                { c20 = coopMultiplyAdd(a, b0, c20); }
                if (G_TN > 1u) { c21 = coopMultiplyAdd(a, b1, c21); }
                if (G_TN > 2u) { c22 = coopMultiplyAdd(a, b2, c22); }
                if (G_TN > 3u) { c23 = coopMultiplyAdd(a, b3, c23); }
            }
            if (G_TM > 3u) {
                let a = g_frag_a(tr0 + 3u, 0u);
                { c30 = coopMultiplyAdd(a, b0, c30); }
                if (G_TN > 1u) { c31 = coopMultiplyAdd(a, b1, c31); }
                if (G_TN > 2u) { c32 = coopMultiplyAdd(a, b2, c32); }
                if (G_TN > 3u) { c33 = coopMultiplyAdd(a, b3, c33); }
            }
        }
        if (G_BK > 16u) {
            let b0 = g_frag_b(tc0, 1u);
            var b1 = b0;
            var b2 = b0;
            var b3 = b0;
            if (G_TN > 1u) { b1 = g_frag_b(tc0 + 1u, 1u); }
            if (G_TN > 2u) { b2 = g_frag_b(tc0 + 2u, 1u); }
            if (G_TN > 3u) { b3 = g_frag_b(tc0 + 3u, 1u); }
            {
                let a = g_frag_a(tr0 + 0u, 1u);
                { c00 = coopMultiplyAdd(a, b0, c00); }
                if (G_TN > 1u) { c01 = coopMultiplyAdd(a, b1, c01); }
                if (G_TN > 2u) { c02 = coopMultiplyAdd(a, b2, c02); }
                if (G_TN > 3u) { c03 = coopMultiplyAdd(a, b3, c03); }
            }
            if (G_TM > 1u) {
                let a = g_frag_a(tr0 + 1u, 1u);
                { c10 = coopMultiplyAdd(a, b0, c10); }
                if (G_TN > 1u) { c11 = coopMultiplyAdd(a, b1, c11); }
                if (G_TN > 2u) { c12 = coopMultiplyAdd(a, b2, c12); }
                if (G_TN > 3u) { c13 = coopMultiplyAdd(a, b3, c13); }
            }
            if (G_TM > 2u) {
                let a = g_frag_a(tr0 + 2u, 1u);
                { c20 = coopMultiplyAdd(a, b0, c20); }
                if (G_TN > 1u) { c21 = coopMultiplyAdd(a, b1, c21); }
                if (G_TN > 2u) { c22 = coopMultiplyAdd(a, b2, c22); }
                if (G_TN > 3u) { c23 = coopMultiplyAdd(a, b3, c23); }
            }
            if (G_TM > 3u) {
                let a = g_frag_a(tr0 + 3u, 1u);
                { c30 = coopMultiplyAdd(a, b0, c30); }
                if (G_TN > 1u) { c31 = coopMultiplyAdd(a, b1, c31); }
                if (G_TN > 2u) { c32 = coopMultiplyAdd(a, b2, c32); }
                if (G_TN > 3u) { c33 = coopMultiplyAdd(a, b3, c33); }
            }
        }
        if (G_BK > 32u) {
            let b0 = g_frag_b(tc0, 2u);
            var b1 = b0;
            var b2 = b0;
            var b3 = b0;
            if (G_TN > 1u) { b1 = g_frag_b(tc0 + 1u, 2u); }
            if (G_TN > 2u) { b2 = g_frag_b(tc0 + 2u, 2u); }
            if (G_TN > 3u) { b3 = g_frag_b(tc0 + 3u, 2u); }
            {
                let a = g_frag_a(tr0 + 0u, 2u);
                { c00 = coopMultiplyAdd(a, b0, c00); }
                if (G_TN > 1u) { c01 = coopMultiplyAdd(a, b1, c01); }
                if (G_TN > 2u) { c02 = coopMultiplyAdd(a, b2, c02); }
                if (G_TN > 3u) { c03 = coopMultiplyAdd(a, b3, c03); }
            }
            if (G_TM > 1u) {
                let a = g_frag_a(tr0 + 1u, 2u);
                { c10 = coopMultiplyAdd(a, b0, c10); }
                if (G_TN > 1u) { c11 = coopMultiplyAdd(a, b1, c11); }
                if (G_TN > 2u) { c12 = coopMultiplyAdd(a, b2, c12); }
                if (G_TN > 3u) { c13 = coopMultiplyAdd(a, b3, c13); }
            }
            if (G_TM > 2u) {
                let a = g_frag_a(tr0 + 2u, 2u);
                { c20 = coopMultiplyAdd(a, b0, c20); }
                if (G_TN > 1u) { c21 = coopMultiplyAdd(a, b1, c21); }
                if (G_TN > 2u) { c22 = coopMultiplyAdd(a, b2, c22); }
                if (G_TN > 3u) { c23 = coopMultiplyAdd(a, b3, c23); }
            }
            if (G_TM > 3u) {
                let a = g_frag_a(tr0 + 3u, 2u);
                { c30 = coopMultiplyAdd(a, b0, c30); }
                if (G_TN > 1u) { c31 = coopMultiplyAdd(a, b1, c31); }
                if (G_TN > 2u) { c32 = coopMultiplyAdd(a, b2, c32); }
                if (G_TN > 3u) { c33 = coopMultiplyAdd(a, b3, c33); }
            }
        }
        if (G_BK > 48u) {
            let b0 = g_frag_b(tc0, 3u);
            var b1 = b0;
            var b2 = b0;
            var b3 = b0;
            if (G_TN > 1u) { b1 = g_frag_b(tc0 + 1u, 3u); }
            if (G_TN > 2u) { b2 = g_frag_b(tc0 + 2u, 3u); }
            if (G_TN > 3u) { b3 = g_frag_b(tc0 + 3u, 3u); }
            {
                let a = g_frag_a(tr0 + 0u, 3u);
                { c00 = coopMultiplyAdd(a, b0, c00); }
                if (G_TN > 1u) { c01 = coopMultiplyAdd(a, b1, c01); }
                if (G_TN > 2u) { c02 = coopMultiplyAdd(a, b2, c02); }
                if (G_TN > 3u) { c03 = coopMultiplyAdd(a, b3, c03); }
            }
            if (G_TM > 1u) {
                let a = g_frag_a(tr0 + 1u, 3u);
                { c10 = coopMultiplyAdd(a, b0, c10); }
                if (G_TN > 1u) { c11 = coopMultiplyAdd(a, b1, c11); }
                if (G_TN > 2u) { c12 = coopMultiplyAdd(a, b2, c12); }
                if (G_TN > 3u) { c13 = coopMultiplyAdd(a, b3, c13); }
            }
            if (G_TM > 2u) {
                let a = g_frag_a(tr0 + 2u, 3u);
                { c20 = coopMultiplyAdd(a, b0, c20); }
                if (G_TN > 1u) { c21 = coopMultiplyAdd(a, b1, c21); }
                if (G_TN > 2u) { c22 = coopMultiplyAdd(a, b2, c22); }
                if (G_TN > 3u) { c23 = coopMultiplyAdd(a, b3, c23); }
            }
            if (G_TM > 3u) {
                let a = g_frag_a(tr0 + 3u, 3u);
                { c30 = coopMultiplyAdd(a, b0, c30); }
                if (G_TN > 1u) { c31 = coopMultiplyAdd(a, b1, c31); }
                if (G_TN > 2u) { c32 = coopMultiplyAdd(a, b2, c32); }
                if (G_TN > 3u) { c33 = coopMultiplyAdd(a, b3, c33); }
            }
        }
        workgroupBarrier();
    }
    let r0 = m0 + tr0 * 16u;
    let q0 = n0 + tc0 * 16u;
    for (var d = direct; d == 1u; d = 0u) {
        g_out(c00, r0, q0);
        if (G_TN > 1u) { g_out(c01, r0, q0 + 16u); }
        if (G_TN > 2u) { g_out(c02, r0, q0 + 32u); }
        if (G_TN > 3u) { g_out(c03, r0, q0 + 48u); }
        if (G_TM > 1u) {
            g_out(c10, r0 + 16u, q0);
            if (G_TN > 1u) { g_out(c11, r0 + 16u, q0 + 16u); }
            if (G_TN > 2u) { g_out(c12, r0 + 16u, q0 + 32u); }
            if (G_TN > 3u) { g_out(c13, r0 + 16u, q0 + 48u); }
        }
        if (G_TM > 2u) {
            g_out(c20, r0 + 32u, q0);
            if (G_TN > 1u) { g_out(c21, r0 + 32u, q0 + 16u); }
            if (G_TN > 2u) { g_out(c22, r0 + 32u, q0 + 32u); }
            if (G_TN > 3u) { g_out(c23, r0 + 32u, q0 + 48u); }
        }
        if (G_TM > 3u) {
            g_out(c30, r0 + 48u, q0);
            if (G_TN > 1u) { g_out(c31, r0 + 48u, q0 + 16u); }
            if (G_TN > 2u) { g_out(c32, r0 + 48u, q0 + 32u); }
            if (G_TN > 3u) { g_out(c33, r0 + 48u, q0 + 48u); }
        }
    }
    for (var d = direct; d == 0u; d = 1u) {
        g_edge_out(c00, tid, sg, nsg, first, 0u, 0u, m0, n0);
        if (G_TN > 1u) { g_edge_out(c01, tid, sg, nsg, first, 0u, 1u, m0, n0); }
        if (G_TN > 2u) { g_edge_out(c02, tid, sg, nsg, first, 0u, 2u, m0, n0); }
        if (G_TN > 3u) { g_edge_out(c03, tid, sg, nsg, first, 0u, 3u, m0, n0); }
        if (G_TM > 1u) {
            g_edge_out(c10, tid, sg, nsg, first, 1u, 0u, m0, n0);
            if (G_TN > 1u) { g_edge_out(c11, tid, sg, nsg, first, 1u, 1u, m0, n0); }
            if (G_TN > 2u) { g_edge_out(c12, tid, sg, nsg, first, 1u, 2u, m0, n0); }
            if (G_TN > 3u) { g_edge_out(c13, tid, sg, nsg, first, 1u, 3u, m0, n0); }
        }
        if (G_TM > 2u) {
            g_edge_out(c20, tid, sg, nsg, first, 2u, 0u, m0, n0);
            if (G_TN > 1u) { g_edge_out(c21, tid, sg, nsg, first, 2u, 1u, m0, n0); }
            if (G_TN > 2u) { g_edge_out(c22, tid, sg, nsg, first, 2u, 2u, m0, n0); }
            if (G_TN > 3u) { g_edge_out(c23, tid, sg, nsg, first, 2u, 3u, m0, n0); }
        }
        if (G_TM > 3u) {
            g_edge_out(c30, tid, sg, nsg, first, 3u, 0u, m0, n0);
            if (G_TN > 1u) { g_edge_out(c31, tid, sg, nsg, first, 3u, 1u, m0, n0); }
            if (G_TN > 2u) { g_edge_out(c32, tid, sg, nsg, first, 3u, 2u, m0, n0); }
            if (G_TN > 3u) { g_edge_out(c33, tid, sg, nsg, first, 3u, 3u, m0, n0); }
        }
    }
}
//#endif

// The output block of workgroup `w` of an unsplit product: (first row, first column of the
// product, 1), or 0s past the grid's blocks. For epilogues that read the block back after
// `g16_run` (behind a `storageBarrier`: its stores are the workgroup's own).
fn g16_block(w: u32) -> vec3<u32> {
    let bm = (g_m + G_BM - 1u) / G_BM;
    let bn = (g_n + G_BN - 1u) / G_BN;
    if (w >= bm * bn) {
        return vec3<u32>(0u);
    }
    let blk = g_order(w, bm, bn);
    return vec3<u32>(blk.x * G_BM, blk.y * G_BN, 1u);
}

// The product for workgroup `w` (the 2-D fallback's linear index).
//#if coop
fn g16_run(w: u32, tid: u32, sg: u32, nsg: u32) {
//#else
fn g16_run(w: u32, tid: u32) {
//#endif
    // Control flow is steered by these lets (uniform); the private copies serve the hooks and
    // the address arithmetic (the uniformity analyses take private memory for non-uniform).
    let m = select(p.m, M_C, M_C != 0u);
    let n = select(p.n, N_C, N_C != 0u);
    let k = select(p.k, K_C, K_C != 0u);
    g_m = m;
    g_n = n;
    g_k = k;
    g_aq = select(k + 3u, m + 3u, A_T) / 4u;
    g_bq = select(n + 3u, k + 3u, B_T) / 4u;
    let bm = (m + G_BM - 1u) / G_BM;
    let bn = (n + G_BN - 1u) / G_BN;
    let blocks = bm * bn;
    let parts = select(max(p.parts, 1u), G_PARTS, G_PARTS != 0u);
    let chunk = select(p.chunk, G_CHUNK, G_CHUNK != 0u);
    if (w >= blocks * parts) {
        return;
    }
    let part = w / blocks;
    let blk = g_order(w % blocks, bm, bn);
    let m0 = blk.x * G_BM;
    let n0 = blk.y * G_BN;
    let kb = select(0u, min(part * chunk, k), parts > 1u);
    let ke = select(k, min(kb + chunk, k), parts > 1u);
    g_off = select(0u, part * m * n, parts > 1u);
    // (Every override is named in every variant: the pipeline is built with all of them.)
    let groups = (G_BM / (16u * G_TM)) * (G_BN / (16u * G_TN));
//#if coop
    let direct = (u32(G_EXACT) | (u32(m0 + G_BM <= m) & u32(n0 + G_BN <= n))) & u32(n % 4u == 0u);
    // Edge blocks store through `g_edge`, one tile per subgroup: at most 8 subgroups there.
    let edge_fits = u32(nsg <= 8u) | direct;
    for (var fits = edge_fits & u32(nsg <= 16u) & u32(groups % nsg == 0u); fits == 1u; fits = 0u) {
        for (var first = 0u; first < groups; first += nsg) {
            g_group(tid, sg, nsg, first, m0, n0, kb, ke, direct);
        }
        return;
    }
//#endif
    g_portable(tid, m0, n0, kb, ke);
}
