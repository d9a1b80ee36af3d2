// The tiled products of the fast attention path (the `attention_fast_*` kernels of
// 05_attention.wgsl and 10_backward_attention.wgsl; `kernels::fast_attention` records them),
// written once.
//
// The fast path materialises the attention probabilities P `[B, H, S, S]` (row-major per
// (b, h), row stride S) and runs the products as register-tiled batched GEMMs, the scheme of
// 03_linear.wgsl at a smaller tile: a workgroup of 16×16 invocations computes a 64×64 output
// tile, each invocation a 4×4 block in registers (rows 4·ty … 4·ty+3, columns 4·tx … 4·tx+3,
// tx = index % 16, ty = index / 16); the contraction goes in steps of 16 with both operands'
// 64×16 slices staged in workgroup memory as vec4s (`tile_slots.wgsl`; rows padded by one vec4
// against bank conflicts), and the next step's global loads are issued before the current step
// is multiplied. Operands are read in place through strides and per-(b, h) base offsets;
// elements past the matrices are read at clamped in-range indices and replaced by 0, so every
// size works. Workgroup memory 2 × 17 × 16 × 16 B = 8.5 KiB.
//
// Causality is handled by tiles of FT_TILE = 64 keys and queries: query tile i (queries
// 64i … 64i+63) only meets key tiles 0 … i. The score-shaped kernels run one workgroup per
// lower-triangle tile (a flattened triangular index, no idle workgroups); the products with P
// stop (or start) their contraction at the diagonal tile. P's contract: row s holds the
// probabilities of keys 0 … s and zeros for keys s+1 … up to the end of its 64-key tile
// (min(S, 64·(⌊s/64⌋+1)) − 1); entries further right are never written nor read.
//
// Provides: `ft_slot_k` / `ft_slot_r` (operand layouts), `ft_stage_a` / `ft_stage_b` (one
// step's loads), `ft_clear` and `ft_product` (a whole contraction into `ft_acc`),
// `score_tiles` / `score_tile` / `score_product` (the score-shaped kernels' grid, tile and
// product), `column_tile` (the tile of the kernels that multiply by P), `ft_store` (plain
// stores), `ft_triangle`.
// Hooks the including kernel defines:
//   fn load_a(i: vec4<u32>) -> vec4<f32>   A's elements at the four offsets i (always in range)
//   fn load_b(i: vec4<u32>) -> vec4<f32>   B's
//   fn store_c(o: u32, v: f32)             output element o (only for `ft_store`)
//#include "tile_slots.wgsl"

const FT_TILE: u32 = 64u;
// vec4 slots per staged k-row: 16 plus one of padding.
const FT_ROW: u32 = 17u;

// Staged operand tiles: slot kk·FT_ROW + g holds the 4 rows (A) or columns (B) 4g … 4g+3 at
// contraction index k0 + kk.
var<workgroup> ft_a: array<vec4<f32>, TILE_K * FT_ROW>;
var<workgroup> ft_b: array<vec4<f32>, TILE_K * FT_ROW>;
// The invocation's 4×4 outputs: ft_acc[i][j] is row 4·ty + i, column 4·tx + j of the tile.
var<private> ft_acc: array<vec4<f32>, 4>;

// An operand stored with k contiguous (element (r, k) at r·row_stride + k): 16 lanes read 64
// contiguous bytes of a row.
fn ft_slot_k(tid: u32, r0: u32, rows: u32, row_stride: u32, kn: u32) -> Slot {
    return slot_k_contiguous(tid, r0, rows, row_stride, kn, FT_ROW, 0u);
}

// An operand stored with the output dimension contiguous (element (r, k) at r + k·k_stride):
// 16 lanes read 256 contiguous bytes of one k-row.
fn ft_slot_r(tid: u32, r0: u32, rows: u32, k_stride: u32, kn: u32) -> Slot {
    return slot_r_contiguous(tid, r0, rows, k_stride, kn, FT_ROW, 0u);
}

// The invocation's four elements of A (or B) at step k0, offsets from `base`, 0 outside the
// matrix.
fn ft_stage_a(s: Slot, base: u32, k0: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), load_a(vec4<u32>(base) + slot_index(s, k0)), slot_mask(s, k0));
}

fn ft_stage_b(s: Slot, base: u32, k0: u32) -> vec4<f32> {
    return select(vec4<f32>(0.0), load_b(vec4<u32>(base) + slot_index(s, k0)), slot_mask(s, k0));
}

fn ft_clear() {
    ft_acc = array<vec4<f32>, 4>();
}

// ft_acc += a·b for one staged k: 16 FMAs.
fn acc_k(tx: u32, ty: u32, kk: u32) {
    let a = ft_a[kk * FT_ROW + ty];
    let b = ft_b[kk * FT_ROW + tx];
    ft_acc[0] = fma(vec4<f32>(a.x), b, ft_acc[0]);
    ft_acc[1] = fma(vec4<f32>(a.y), b, ft_acc[1]);
    ft_acc[2] = fma(vec4<f32>(a.z), b, ft_acc[2]);
    ft_acc[3] = fma(vec4<f32>(a.w), b, ft_acc[3]);
}

// ft_acc = A·B over k = 0 … kend − 1 (kend ≥ 1), in order: A through `sa` from `a_base`, B
// through `sb` from `b_base`. Call in uniform control flow.
fn ft_product(tid: u32, sa: Slot, sb: Slot, a_base: u32, b_base: u32, kend: u32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    ft_clear();
    var va = ft_stage_a(sa, a_base, 0u);
    var vb = ft_stage_b(sb, b_base, 0u);
    for (var k0 = 0u; k0 < kend; k0 += TILE_K) {
        ft_a[sa.slot] = va;
        ft_b[sb.slot] = vb;
        workgroupBarrier();
        if (k0 + TILE_K < kend) {
            va = ft_stage_a(sa, a_base, k0 + TILE_K);
            vb = ft_stage_b(sb, b_base, k0 + TILE_K);
        }
        acc_step(tx, ty);
        workgroupBarrier();
    }
}

// Tile t of the lower triangle in row-major order → (row tile i, column tile j ≤ i), i.e. the
// i with i(i+1)/2 ≤ t < (i+1)(i+2)/2. The f32 square root is a guess; the loops make it exact.
// Call with a workgroup-uniform t.
fn ft_triangle(t: u32) -> vec2<u32> {
    var i = u32(max((sqrt(8.0 * f32(t) + 1.0) - 1.0) * 0.5, 0.0));
    while (i > 0u && i * (i + 1u) / 2u > t) {
        i -= 1u;
    }
    while ((i + 1u) * (i + 2u) / 2u <= t) {
        i += 1u;
    }
    return vec2<u32>(i, t - i * (i + 1u) / 2u);
}

// Lower-triangle tiles of one (b, h): T(T+1)/2 with T = ⌈S/64⌉.
fn score_tiles(seq: u32) -> u32 {
    let nt = (seq + FT_TILE - 1u) / FT_TILE;
    return nt * (nt + 1u) / 2u;
}

// The tile of workgroup w of a score-shaped kernel (one per (b, h, lower-triangle tile), w <
// B·H·`score_tiles(S)`), seen from invocation tid: (b·H + h), b, h, the kv head, the first
// query (row) and key (column) of the tile, and the first row and column of the invocation's
// 4×4 outputs (its ft_acc[i][j] is row r0 + i, column c0 + j).
struct ScoreTile {
    bh: u32,
    b: u32,
    h: u32,
    kvh: u32,
    m0: u32,
    n0: u32,
    r0: u32,
    c0: u32,
}

fn score_tile(w: u32, tid: u32, ntri: u32, heads: u32, kv_heads: u32) -> ScoreTile {
    let bh = w / ntri;
    let ij = ft_triangle(w - bh * ntri) * FT_TILE;
    let h = bh % heads;
    let r0 = ij.x + 4u * (tid / TILE_SIDE);
    return ScoreTile(bh, bh / heads, h, h / (heads / kv_heads), ij.x, ij.y, r0, ij.y + 4u * (tid % TILE_SIDE));
}

// ft_acc = A·Bᵀ for a score tile: A rows t.m0 … of a `[B, S, H, Dh]` tensor at head t.h, B rows
// t.n0 … of a `[B, S, Hkv, Dh]` tensor at kv head t.kvh, the contraction over the Dh dims.
fn score_product(tid: u32, t: ScoreTile, seq: u32, heads: u32, kv_heads: u32, dh: u32) {
    let a_stride = heads * dh;
    let b_stride = kv_heads * dh;
    let sa = ft_slot_k(tid, t.m0, seq, a_stride, dh);
    let sb = ft_slot_k(tid, t.n0, seq, b_stride, dh);
    ft_product(tid, sa, sb, t.b * seq * a_stride + t.h * dh, t.b * seq * b_stride + t.kvh * dh, dh);
}

// The tile of workgroup w of a kernel producing `[B, S, heads, Dh]` (one per (row tile, b, head,
// 64-column slice of Dh), w < T·B·heads·⌈Dh/64⌉ with T = ⌈S/64⌉): x = the row tile's index in
// the order the workgroups take them, y = b·heads + head, z = the column slice.
fn column_tile(w: u32, batch: u32, heads: u32, dh: u32) -> vec3<u32> {
    let ncol = (dh + FT_TILE - 1u) / FT_TILE;
    let per_tile = batch * heads * ncol;
    let rest = w % per_tile;
    return vec3<u32>(w / per_tile, rest / ncol, rest % ncol);
}

// Hands `alpha` times the tile's outputs inside the rows × cols matrix to `store_c`: element
// (r, c) at base + r·stride + c.
fn ft_store(tid: u32, r0: u32, c0: u32, rows: u32, cols: u32, base: u32, stride: u32, alpha: f32) {
    let tx = tid % TILE_SIDE;
    let ty = tid / TILE_SIDE;
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + 4u * ty + i;
        for (var j = 0u; j < 4u; j++) {
            let c = c0 + 4u * tx + j;
            if (r < rows && c < cols) {
                store_c(base + r * stride + c, alpha * ft_acc[i][j]);
            }
        }
    }
}
