// Matrix products of the trainer: Y = X·W, Y = X·W + R, Y (+)= X·Wᵀ, Y (+)= Xᵀ·B, and f16-weight
// forms. All matrices are row-major f32 (the `_w16` forms read W as f16), sums are f32.
//
// One scheme for every kernel: each workgroup of 16×16 = 256 invocations computes a 128×64 tile
// of the output (128 rows, 64 columns), each invocation an 8×4 block of it held in registers
// (rows 4·ty … 4·ty+3 and 64+4·ty … 64+4·ty+3, columns 4·tx … 4·tx+3, tx = index % 16,
// ty = index / 16). The contraction runs in steps of 16: the operands' 128×16 and 64×16 slices
// are staged in workgroup memory as vec4s (four consecutive output rows, or columns, at one k),
// so the inner loop is three vec4 reads and 32 FMAs per k (a 64×64 tile with 4×4 per invocation
// did two reads per 16 FMAs and ran 5–15% slower on an H200; BENCHMARKS.md). Rows of
// the staged tiles are padded by one vec4, so the transposing stores of operands that are
// contiguous along k hit distinct banks. The next step's global loads are issued before the
// current step is multiplied (register prefetch), to hide their latency without a second buffer.
//
// Edges: each invocation loads four elements per 64 rows of an operand per step; elements past the matrix
// (rows past M or N, k past K) are read at a clamped, in-range index and replaced by 0, so every
// access is in bounds and M, N, K need not be multiples of anything (1 works). Stores skip
// outputs past the matrix. Each output is one fixed chain of FMAs over k = 0, 1, …, K−1, so
// results repeat bit for bit, and X·Wᵀ gives the same bits as X·(Wᵀ stored explicitly).
//
// Grid: `workgroups(ceil_div(n, TILE_N), ceil_div(rows, TILE_M))` with rows = M (K for Xᵀ·B),
// so up to 65535·128 = 8,388,480 output rows and 65535·64 = 4,194,240 columns. Workgroup
// memory: (33 + 17) × 16 × 16 B = 12.5 KiB. Indices are u32 (every matrix under 2³² elements). On lavapipe only, the contraction
// length is capped at 65535 steps = 1,048,560 by llvmpipe's loop limiter (see `acc_step`).

// Output tile of one workgroup: TILE_M rows × TILE_N columns.
const TILE_M: u32 = 128u;
const TILE_N: u32 = 64u;
// Contraction step: the k extent of the staged operand tiles.
const TILE_K: u32 = 16u;
// Invocations per side of the workgroup (TILE_SIDE² = WG), each owning 8 rows × 4 columns.
const TILE_SIDE: u32 = 16u;
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

// Where one invocation loads its four elements of a 64×16 operand slice (64 along the output,
// 16 along k), for any k0: element offsets `at + min(k0 + kk, kn − 1)·ks`, valid where `ok` and
// k0 + kk < kn, stored as one vec4 at `slot` of the staged tile (`tile_row` vec4s per k-row,
// the slice starting `g_off` vec4s in: A's 128 rows are two slices, at 0 and 16).
struct Slot {
    at: vec4<u32>,
    ok: vec4<bool>,
    kk: u32,
    ks: u32,
    kn: u32,
    slot: u32,
}

// An operand stored with k contiguous (element (r, k) at r·row_stride + k): X in X·W, W in
// X·Wᵀ. Lanes tid % 16 take consecutive k, so 16 lanes read 64 contiguous bytes of a row; the
// invocation reads rows r0 + 4g … r0 + 4g + 3 (g = tid / 16) of its k.
fn slot_k_contiguous(tid: u32, r0: u32, rows: u32, row_stride: u32, kn: u32, tile_row: u32, g_off: u32) -> Slot {
    let kk = tid % TILE_SIDE;
    let g = tid / TILE_SIDE;
    let r = vec4<u32>(r0 + 4u * g) + vec4<u32>(0u, 1u, 2u, 3u);
    let rc = min(r, vec4<u32>(max(rows, 1u) - 1u));
    return Slot(rc * row_stride, r < vec4<u32>(rows), kk, 1u, kn, kk * tile_row + g_off + g);
}

// An operand stored with the output dimension contiguous (element (r, k) at r + k·k_stride): W
// in X·W, X and B in Xᵀ·B. Lanes tid % 16 take consecutive groups of 4 elements, so 16 lanes
// read 256 contiguous bytes of one k-row.
fn slot_r_contiguous(tid: u32, r0: u32, rows: u32, k_stride: u32, kn: u32, tile_row: u32, g_off: u32) -> Slot {
    let kk = tid / TILE_SIDE;
    let g = tid % TILE_SIDE;
    let r = vec4<u32>(r0 + 4u * g) + vec4<u32>(0u, 1u, 2u, 3u);
    let rc = min(r, vec4<u32>(max(rows, 1u) - 1u));
    return Slot(rc, r < vec4<u32>(rows), kk, k_stride, kn, kk * tile_row + g_off + g);
}

// The four element offsets of `s` at step k0 (always in range).
fn slot_index(s: Slot, k0: u32) -> vec4<u32> {
    return s.at + vec4<u32>(min(k0 + s.kk, s.kn - 1u) * s.ks);
}

// Which of the four elements of `s` at step k0 are inside the matrix.
fn slot_mask(s: Slot, k0: u32) -> vec4<bool> {
    return s.ok & vec4<bool>(k0 + s.kk < s.kn);
}

// The tile row of the invocation's i-th output row (i < 8): rows 4·ty … 4·ty+3, then the same
// 64 rows further down.
fn a_row(ty: u32, i: u32) -> u32 {
    return 4u * ty + i + 60u * (i / 4u);
}

fn acc_clear() {
    acc = array<vec4<f32>, 8>();
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

// acc += (staged A tile)·(staged B tile) over the TILE_K = 16 staged k, in order. Unrolled by
// hand rather than a loop: besides sparing the compiler the work, llvmpipe (lavapipe) caps the
// loop iterations of one invocation at 65535 *in total* (its loop limiter), and an inner loop
// of 16 would cut every product off after ~3,600 steps (K ≈ 58,000); now the cap is 65535 steps
// of the outer loop, K (or M for Xᵀ·B) up to 1,048,560 on lavapipe, unlimited elsewhere.
fn acc_step(tx: u32, ty: u32) {
    acc_k(tx, ty, 0u);
    acc_k(tx, ty, 1u);
    acc_k(tx, ty, 2u);
    acc_k(tx, ty, 3u);
    acc_k(tx, ty, 4u);
    acc_k(tx, ty, 5u);
    acc_k(tx, ty, 6u);
    acc_k(tx, ty, 7u);
    acc_k(tx, ty, 8u);
    acc_k(tx, ty, 9u);
    acc_k(tx, ty, 10u);
    acc_k(tx, ty, 11u);
    acc_k(tx, ty, 12u);
    acc_k(tx, ty, 13u);
    acc_k(tx, ty, 14u);
    acc_k(tx, ty, 15u);
}

// --- KERNEL: matmul ---
// Y = X · W. X [M, K], W [K, N], Y [M, N], all row-major f32; f32 sums. Overwrites `y`
// (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.k * p.n
// @requires len(y) >= p.m * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.m && c < p.n) {
                y[r * p.n + c] = acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_residual ---
// Y = X · W + R. X [M, K], W [K, N], R and Y [M, N], all row-major f32; f32 sums, R added last.
// R is read only and must be a different buffer from Y. Overwrites `y` (elements past M·N
// untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.k * p.n
// @requires len(r) >= p.m * p.n
// @requires len(y) >= p.m * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_residual(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (row < p.m && c < p.n) {
                let o = row * p.n + c;
                y[o] = acc[i][j] + r[o];
            }
        }
    }
}

// --- KERNEL: matmul_t ---
// Y = X · Wᵀ with W stored [N, K] (the tied output head: logits = X · Eᵀ, E [V, D]). X [M, K],
// Y [M, N], all row-major f32; f32 sums. Overwrites `y` (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.n * p.k
// @requires len(y) >= p.m * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_t(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_k_contiguous(tid, n0, p.n, p.k, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.m && c < p.n) {
                y[r * p.n + c] = acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_t_acc ---
// Y += X · Wᵀ with W stored [N, K]. X [M, K], Y [M, N], all row-major f32; the product is summed
// in f32, then added to Y. Accumulates into `y` (+=).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.n * p.k
// @requires len(y) >= p.m * p.n
// @accumulates y
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_t_acc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_k_contiguous(tid, n0, p.n, p.k, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.m && c < p.n) {
                let o = r * p.n + c;
                y[o] = y[o] + acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_at ---
// Y = Xᵀ · B (weight gradients: dW = Xᵀ · dY). X [M, K], B [M, N], Y [K, N], all row-major f32;
// the sum runs over the M rows, in f32. Overwrites `y` (elements past K·N untouched).
// Grid: one workgroup per 128×64 tile of Y, x over its N columns, y over its K rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.k, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(b) >= p.m * p.n
// @requires len(y) >= p.k * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(b[i.x], b[i.y], b[i.z], b[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_at(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let r0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    // A(r, c) = X[c, r]: r runs over K (contiguous), the contraction c over M.
    let sa = slot_r_contiguous(tid, r0, p.k, p.k, p.m, TILE_ROW_A, 0u);
    let sa2 = slot_r_contiguous(tid, r0 + 64u, p.k, p.k, p.m, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, p.m, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.m > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var c0 = 0u; c0 < p.m; c0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (c0 + TILE_K < p.m) {
            va = load_a(sa, c0 + TILE_K);
            va2 = load_a(sa2, c0 + TILE_K);
            vb = load_b(sb, c0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = r0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.k && c < p.n) {
                y[r * p.n + c] = acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_at_acc ---
// Y += Xᵀ · B (accumulating weight gradients: dW += Xᵀ · dY). X [M, K], B [M, N], Y [K, N], all
// row-major f32; the product is summed over the M rows in f32, then added to Y. Accumulates
// into `y` (+=).
// Grid: one workgroup per 128×64 tile of Y, x over its N columns, y over its K rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.k, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(b) >= p.m * p.n
// @requires len(y) >= p.k * p.n
// @accumulates y
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(b[i.x], b[i.y], b[i.z], b[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_at_acc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let r0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_r_contiguous(tid, r0, p.k, p.k, p.m, TILE_ROW_A, 0u);
    let sa2 = slot_r_contiguous(tid, r0 + 64u, p.k, p.k, p.m, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, p.m, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.m > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var c0 = 0u; c0 < p.m; c0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (c0 + TILE_K < p.m) {
            va = load_a(sa, c0 + TILE_K);
            va2 = load_a(sa2, c0 + TILE_K);
            vb = load_b(sb, c0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = r0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.k && c < p.n) {
                let o = r * p.n + c;
                y[o] = y[o] + acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_at_split ---
// One part of a weight gradient split along its contraction, for products whose output has
// too few tiles to fill the GPU (a 768×768 gradient is 144 tiles; its contraction is every
// token). Part s sums rows [s·p.chunk, min((s+1)·p.chunk, M)) in order:
// parts[s, :, :] = Σ X[m, :]ᵀ · B[m, :] over those rows. X [M, K], B [M, N], parts
// [p.parts, K, N], row-major f32. Overwrites `parts` (the first parts·K·N elements; a part
// with no rows is written as zeros). `matmul_parts_add` then adds the parts to Y in a fixed
// order, so the split product is deterministic (`kernels::ops::matmul_at_acc_split` records
// both).
// Grid: one workgroup per (128×64 tile of the K×N output, part): x over N, y over K, z over parts.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.k, TILE_M), p.parts)
// @requires p.parts >= 1
// @requires p.chunk * p.parts >= p.m
// @requires len(x) >= p.m * p.k
// @requires len(b) >= p.m * p.n
// @requires len(parts) >= p.parts * p.k * p.n
struct SplitParams {
    m: u32,
    n: u32,
    k: u32,
    parts: u32,
    chunk: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> parts: array<f32>;
@group(0) @binding(3) var<uniform> p: SplitParams;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(b[i.x], b[i.y], b[i.z], b[i.w]), slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_at_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let r0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let part = wid.z;
    let begin = min(part * p.chunk, p.m);
    let end = min(begin + p.chunk, p.m);
    // The slots clamp and mask the contraction index against `end`; it starts at `begin`.
    let sa = slot_r_contiguous(tid, r0, p.k, p.k, end, TILE_ROW_A, 0u);
    let sa2 = slot_r_contiguous(tid, r0 + 64u, p.k, p.k, end, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, end, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (begin < end) {
        va = load_a(sa, begin);
        va2 = load_a(sa2, begin);
        vb = load_b(sb, begin);
    }
    for (var c0 = begin; c0 < end; c0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (c0 + TILE_K < end) {
            va = load_a(sa, c0 + TILE_K);
            va2 = load_a(sa2, c0 + TILE_K);
            vb = load_b(sb, c0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    let base = part * p.k * p.n;
    for (var i = 0u; i < 8u; i++) {
        let r = r0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.k && c < p.n) {
                parts[base + r * p.n + c] = acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_parts_add ---
// Y[i] += (parts[0, i] + parts[1, i] + … + parts[p.parts − 1, i]) for i < p.len, the parts
// summed in increasing order (deterministic). `parts` [p.parts, p.len], `y` [p.len], f32.
// Accumulates into `y` (+=).
// Grid: one invocation per output element, 1-D over p.len.
// @grid threads(p.len)
// @requires p.parts >= 1
// @requires len(parts) >= p.parts * p.len
// @requires len(y) >= p.len
// @accumulates y
struct AddParams {
    len: u32,
    parts: u32,
}
@group(0) @binding(0) var<storage, read> parts: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: AddParams;

@compute @workgroup_size(WG)
fn matmul_parts_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.len) {
        var sum = parts[i];
        for (var s = 1u; s < p.parts; s++) {
            sum += parts[s * p.len + i];
        }
        y[i] = y[i] + sum;
    }
}

// --- KERNEL: matmul_w16 ---
// Y = X · W with f16 weights. X [M, K] f32, W [K, N] f16, Y [M, N] f32, all row-major; weights
// are widened to f32 on load, sums are f32. Needs SHADER_F16. Overwrites `y` (elements past
// M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.k * p.n
// @requires len(y) >= p.m * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    let v = vec4<f32>(f32(w[i.x]), f32(w[i.y]), f32(w[i.z]), f32(w[i.w]));
    return select(vec4<f32>(0.0), v, slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_w16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.m && c < p.n) {
                y[r * p.n + c] = acc[i][j];
            }
        }
    }
}

// --- KERNEL: matmul_residual_w16 ---
// Y = X · W + R with f16 weights. X [M, K] f32, W [K, N] f16, R and Y [M, N] f32, all
// row-major; weights widened to f32 on load, sums f32, R added last. R is read only and must be
// a different buffer from Y. Needs SHADER_F16. Overwrites `y` (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.k * p.n
// @requires len(r) >= p.m * p.n
// @requires len(y) >= p.m * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f16>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    let v = vec4<f32>(f32(w[i.x]), f32(w[i.y]), f32(w[i.z]), f32(w[i.w]));
    return select(vec4<f32>(0.0), v, slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_residual_w16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_r_contiguous(tid, n0, p.n, p.n, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (row < p.m && c < p.n) {
                let o = row * p.n + c;
                y[o] = acc[i][j] + r[o];
            }
        }
    }
}

// --- KERNEL: matmul_t_w16 ---
// Y = X · Wᵀ with f16 weights stored [N, K] (the tied output head over an f16 embedding copy).
// X [M, K] f32, Y [M, N] f32, all row-major; weights widened to f32 on load, sums f32. Needs
// SHADER_F16. Overwrites `y` (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.n * p.k
// @requires len(y) >= p.m * p.n
struct Params {
    m: u32,
    n: u32,
    k: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    return select(vec4<f32>(0.0), vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]), slot_mask(s, k0));
}

fn load_b(s: Slot, k0: u32) -> vec4<f32> {
    let i = slot_index(s, k0);
    let v = vec4<f32>(f32(w[i.x]), f32(w[i.y]), f32(w[i.z]), f32(w[i.w]));
    return select(vec4<f32>(0.0), v, slot_mask(s, k0));
}

@compute @workgroup_size(WG)
fn matmul_t_w16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    let m0 = wid.y * TILE_M;
    let n0 = wid.x * TILE_N;
    let sa = slot_k_contiguous(tid, m0, p.m, p.k, p.k, TILE_ROW_A, 0u);
    let sa2 = slot_k_contiguous(tid, m0 + 64u, p.m, p.k, p.k, TILE_ROW_A, TILE_SIDE);
    let sb = slot_k_contiguous(tid, n0, p.n, p.k, p.k, TILE_ROW, 0u);
    acc_clear();
    var va = vec4<f32>(0.0);
    var va2 = vec4<f32>(0.0);
    var vb = vec4<f32>(0.0);
    if (p.k > 0u) {
        va = load_a(sa, 0u);
        va2 = load_a(sa2, 0u);
        vb = load_b(sb, 0u);
    }
    for (var k0 = 0u; k0 < p.k; k0 += TILE_K) {
        tile_a[sa.slot] = va;
        tile_a[sa2.slot] = va2;
        tile_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < p.k) {
            va = load_a(sa, k0 + TILE_K);
            va2 = load_a(sa2, k0 + TILE_K);
            vb = load_b(sb, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
    for (var i = 0u; i < 8u; i++) {
        let r = m0 + a_row(ty, i);
        for (var j = 0u; j < 4u; j++) {
            let c = n0 + 4u * tx + j;
            if (r < p.m && c < p.n) {
                y[r * p.n + c] = acc[i][j];
            }
        }
    }
}
