// The register-tiled matrix product behind every product kernel of 03_linear.wgsl, written
// once; each kernel supplies its operands and its store through hooks.
//
// Each workgroup of 16×16 = 256 invocations computes a 128×64 tile of the output (128 rows, 64
// columns), each invocation an 8×4 block of it held in registers (rows 4·ty … 4·ty+3 and
// 64+4·ty … 64+4·ty+3, columns 4·tx … 4·tx+3, tx = index % 16, ty = index / 16). The
// contraction runs in steps of 16 (`tile_slots.wgsl`): the operands' 128×16 and 64×16 slices
// are staged in workgroup memory as vec4s (four consecutive output rows, or columns, at one k),
// so the inner loop is three vec4 reads and 32 FMAs per k. Rows of the staged tiles are padded
// by one vec4, so the transposing stores of operands that are contiguous along k hit distinct
// banks. The next step's global loads are issued before the current step is multiplied
// (register prefetch), to hide their latency without a second buffer. Each output is one fixed
// chain of FMAs over k in increasing order, whatever the operands' layouts, so results repeat
// bit for bit and X·Wᵀ gives the same bits as X·(Wᵀ stored explicitly).
//
// Provides the three forms, each a whole kernel body (grid: x over column tiles of TILE_N, y
// over row tiles of TILE_M):
//   product_xw(wid, tid, m, n, k)    Y [M, N] = X [M, K] · W [K, N]
//   product_xwt(wid, tid, m, n, k)   Y [M, N] = X [M, K] · Wᵀ, W stored [N, K]
//   product_xtb(wid, tid, n, k, m_begin, m_end, o0)
//                                    Y [K, N] = Xᵀ · B over rows m_begin … m_end − 1 of X [M, K]
//                                    and B [M, N], Y's element (r, c) at o0 + r·N + c
// Hooks the including kernel defines (A is X or Xᵀ; B is W, Wᵀ or B):
//   fn load_a(i: vec4<u32>) -> vec4<f32>   A's elements at the four offsets i (always in range)
//   fn load_b(i: vec4<u32>) -> vec4<f32>   B's (an f16 operand is widened here)
//   fn store_c(o: u32, v: f32)             output element o gets the product v (=, +=, + R, …)
//#include "tile_slots.wgsl"

// Output tile of one workgroup: TILE_M rows × TILE_N columns.
const TILE_M: u32 = 128u;
const TILE_N: u32 = 64u;
// vec4 slots per staged k-row of the B tile: TILE_N / 4 = 16 plus one of padding against bank
// conflicts.
const TILE_ROW: u32 = 17u;
// vec4 slots per staged k-row of the A tile (TILE_M / 4 = 32, plus one of padding).
const TILE_ROW_A: u32 = 33u;

// The staged operand tiles: slot kk·TILE_ROW_A + g (A) or kk·TILE_ROW + g (B) holds the 4 rows
// (A) or columns (B) 4g … 4g+3 of the tile at contraction index k0 + kk.
var<workgroup> tile_a: array<vec4<f32>, TILE_K * TILE_ROW_A>;
var<workgroup> tile_b: array<vec4<f32>, TILE_K * TILE_ROW>;
// The invocation's 8×4 outputs: acc[i][j] is row `a_row(ty, i)`, column 4·tx + j of the tile.
var<private> acc: array<vec4<f32>, 8>;

// Where an invocation loads A: the tile's 128 rows are two 64-row slices.
struct SlotsA {
    lo: Slot,
    hi: Slot,
}

// A stored with k contiguous (X in X·W and X·Wᵀ), rows r0 … r0 + 127.
fn slots_a_k(tid: u32, r0: u32, rows: u32, row_stride: u32, kn: u32) -> SlotsA {
    let lo = slot_k_contiguous(tid, r0, rows, row_stride, kn, TILE_ROW_A, 0u);
    return SlotsA(lo, slot_k_contiguous(tid, r0 + 64u, rows, row_stride, kn, TILE_ROW_A, TILE_SIDE));
}

// A stored with its rows contiguous (Xᵀ in Xᵀ·B), rows r0 … r0 + 127.
fn slots_a_r(tid: u32, r0: u32, rows: u32, k_stride: u32, kn: u32) -> SlotsA {
    let lo = slot_r_contiguous(tid, r0, rows, k_stride, kn, TILE_ROW_A, 0u);
    return SlotsA(lo, slot_r_contiguous(tid, r0 + 64u, rows, k_stride, kn, TILE_ROW_A, TILE_SIDE));
}

// The invocation's four elements of A (or B) at step k0, 0 outside the matrix.
fn stage_a(s: Slot, k0: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), load_a(slot_index(s, k0)), slot_mask(s, k0));
}

fn stage_b(s: Slot, k0: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), load_b(slot_index(s, k0)), slot_mask(s, k0));
}

// The tile row of the invocation's i-th output row (i < 8): rows 4·ty … 4·ty+3, then the same
// 64 rows further down.
fn a_row(ty: u32, i: u32) -> u32 {
    return 4u * ty + i + 60u * (i / 4u);
}

// acc += a·b for one staged k: two vec4s of A (the invocation's 8 rows), one of B (its 4
// columns), 32 FMAs.
fn acc_k(tx: u32, ty: u32, kk: u32) {
    let a = tile_a[kk * TILE_ROW_A + ty];
    let a2 = tile_a[kk * TILE_ROW_A + TILE_SIDE + ty];
    let b = tile_b[kk * TILE_ROW + tx];
    acc[0] = fma(vec4<f32>(a.x), b, acc[0]);
    acc[1] = fma(vec4<f32>(a.y), b, acc[1]);
    acc[2] = fma(vec4<f32>(a.z), b, acc[2]);
    acc[3] = fma(vec4<f32>(a.w), b, acc[3]);
    acc[4] = fma(vec4<f32>(a2.x), b, acc[4]);
    acc[5] = fma(vec4<f32>(a2.y), b, acc[5]);
    acc[6] = fma(vec4<f32>(a2.z), b, acc[6]);
    acc[7] = fma(vec4<f32>(a2.w), b, acc[7]);
}

// acc = A·B over the contraction indices k_begin … k_end − 1, in order (the slots clamp and
// mask against k_end). Call in uniform control flow.
fn tile_product(tid: u32, a: SlotsA, b: Slot, k_begin: u32, k_end: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    acc = array<vec4<f32>, 8>();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (k_begin < k_end) {
        va = stage_a(a.lo, k_begin);
        va2 = stage_a(a.hi, k_begin);
        vb = stage_b(b, k_begin);
    }
    for (var k0 = k_begin; k0 < k_end; k0 += TILE_K) {
        tile_a[a.lo.slot] = va;
        tile_a[a.hi.slot] = va2;
        tile_b[b.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < k_end) {
            va = stage_a(a.lo, k0 + TILE_K);
            va2 = stage_a(a.hi, k0 + TILE_K);
            vb = stage_b(b, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
}

// Hands the tile's outputs inside the rows × cols matrix to `store_c`: element (r, c) of the
// matrix at o0 + r·cols + c.
fn tile_store(tid: u32, r0: u32, c0: u32, rows: u32, cols: u32, o0: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    for (var i = 0u; i < 8u; i++) {
        let r = r0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = c0 + 4u * tx + j;
            if (r < rows && c < cols) {
                store_c(o0 + r * cols + c, acc[i][j]);
            }
        }
    }
}

// Y = X · W: A = X [M, K] (k contiguous), B = W [K, N] (columns contiguous).
fn product_xw(wid: vec3<u32>, tid: u32, m: u32, n: u32, k: u32) {
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    tile_product(tid, slots_a_k(tid, m0, m, k, k), slot_r_contiguous(tid, n0, n, n, k, TILE_ROW, 0u), 0u, k);
    tile_store(tid, m0, n0, m, n, 0u);
}

// Y = X · Wᵀ: A = X [M, K], B(k, c) = W[c, k] with W [N, K] (both k contiguous).
fn product_xwt(wid: vec3<u32>, tid: u32, m: u32, n: u32, k: u32) {
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    tile_product(tid, slots_a_k(tid, m0, m, k, k), slot_k_contiguous(tid, n0, n, k, k, TILE_ROW, 0u), 0u, k);
    tile_store(tid, m0, n0, m, n, 0u);
}

// Y = Xᵀ · B over rows m_begin … m_end − 1: A(r, c) = X[c, r] (r runs over K, contiguous; the
// contraction c over M), B [M, N] (columns contiguous); Y [K, N] at offset o0.
fn product_xtb(wid: vec3<u32>, tid: u32, n: u32, k: u32, m_begin: u32, m_end: u32, o0: u32) {
    let r0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sb = slot_r_contiguous(tid, n0, n, n, m_end, TILE_ROW, 0u);
    tile_product(tid, slots_a_r(tid, r0, k, k, m_end), sb, m_begin, m_end);
    tile_store(tid, r0, n0, k, n, o0);
}
