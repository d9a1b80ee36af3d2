// Staging operands of a register-tiled matrix product through workgroup memory: the part that
// `tiled_product.wgsl` (03_linear: 128×64 tiles) and `attention_tiles.wgsl` (the fast attention
// path: 64×64 tiles) share.
//
// A workgroup of TILE_SIDE² = 256 invocations computes one output tile; the contraction runs in
// steps of TILE_K = 16. Per step, each 64-wide slice of an operand (64 along the output, 16
// along k) is staged as vec4s, slot kk·tile_row + g holding the 4 rows (or columns) 4g … 4g+3
// at contraction index k0 + kk; every invocation loads one vec4 of each slice. Loads read at a
// clamped, in-range index and replace elements past the matrix by 0, so any size works.
//
// Provides: `Slot` and `slot_k_contiguous` / `slot_r_contiguous` (where an invocation loads,
// for the two layouts of an operand), `slot_index` / `slot_mask` (the offsets and the mask at
// step k0), and `acc_step` (the 16 staged k of one step, in order).
// Hook the including file defines:
//   fn acc_k(tx: u32, ty: u32, kk: u32)   accumulates staged k-row kk into the invocation's
//                                          outputs (tx = index % 16, ty = index / 16)

// Contraction step: the k extent of the staged operand tiles.
const TILE_K: u32 = 16u;
// Invocations per side of the workgroup (TILE_SIDE² = WG).
const TILE_SIDE: u32 = 16u;

// Where one invocation loads its four elements of a 64×16 operand slice (64 along the output,
// 16 along k), for any k0: element offsets `at + min(k0 + kk, kn − 1)·ks`, valid where `ok` and
// k0 + kk < kn, stored as one vec4 at `slot` of the staged tile (`tile_row` vec4s per k-row,
// the slice starting `g_off` vec4s in: a 128-row operand is two slices, at 0 and 16).
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

// The four element offsets of `s` at step k0 (always in range; kn ≥ 1).
fn slot_index(s: Slot, k0: u32) -> vec4<u32> {
    return s.at + vec4<u32>(min(k0 + s.kk, s.kn - 1u) * s.ks);
}

// Which of the four elements of `s` at step k0 are inside the matrix.
fn slot_mask(s: Slot, k0: u32) -> vec4<bool> {
    return s.ok & vec4<bool>(k0 + s.kk < s.kn);
}

// The TILE_K = 16 staged k of one step, in order. Unrolled by hand rather than a loop: besides
// sparing the compiler the work, llvmpipe (lavapipe) caps the loop iterations of one invocation
// at 65535 *in total* (its loop limiter), and an inner loop of 16 would cut every product off
// after ~3,600 steps (K ≈ 58,000); this way the cap is 65535 steps of the outer loop, a
// contraction of up to 1,048,560 on lavapipe, unlimited elsewhere.
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
