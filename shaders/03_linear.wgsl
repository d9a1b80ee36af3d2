// Matrix products of the trainer: Y = X·W, Y = X·W + R, Y (+)= X·Wᵀ, Y (+)= Xᵀ·B, and f16-weight
// forms. All matrices are row-major f32 (the `_w16` forms read W as f16), sums are f32.
//
// One scheme for every product, written once in `lib/tiled_product.wgsl`: 256 invocations per
// 128×64 output tile, 8×4 outputs per invocation in registers, the contraction staged through
// workgroup memory 16 at a time with register prefetch (a 64×64 tile with 4×4 per invocation
// does two reads per 16 FMAs, and measured slower on an H200). Each kernel below
// names its form (`product_xw`, `product_xwt`, `product_xtb`) and defines the hooks: `load_a` /
// `load_b` read its operands (widening f16 weights), `store_c` writes an output (overwrite,
// accumulate, add the residual, or write one part of a split product).
//
// Edges: each invocation loads four elements per 64 rows of an operand per step; elements past
// the matrix (rows past M or N, k past K) are read at a clamped, in-range index and replaced by
// 0, so every access is in bounds and M, N, K need not be multiples of anything (1 works).
// Stores skip outputs past the matrix. Each output is one fixed chain of FMAs over
// k = 0, 1, …, K−1, so results repeat bit for bit, and X·Wᵀ gives the same bits as
// X·(Wᵀ stored explicitly).
//
// Grid: `workgroups(ceil_div(n, TILE_N), ceil_div(rows, TILE_M))` with rows = M (K for Xᵀ·B),
// so up to 65535·128 = 8,388,480 output rows and 65535·64 = 4,194,240 columns. Workgroup
// memory: (33 + 17) × 16 × 16 B = 12.5 KiB. Indices are u32 (every matrix under 2³² elements).
// On lavapipe only, the contraction length is capped at 65535 steps = 1,048,560 by llvmpipe's
// loop limiter (see `acc_step` in `lib/tile_slots.wgsl`).
//#include "lib/tiled_product.wgsl"

// The dimensions of the products: Y [M, N] = X [M, K] · W [K, N] (or Wᵀ, W [N, K]), and for
// Xᵀ·B, X [M, K], B [M, N], Y [K, N].
struct Params {
    m: u32,
    n: u32,
    k: u32,
}

// --- KERNEL: matmul ---
// Y = X · W. X [M, K], W [K, N], Y [M, N], all row-major f32; f32 sums. Overwrites `y`
// (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.k * p.n
// @requires len(y) >= p.m * p.n
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = v; }

@compute @workgroup_size(WG)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xw(wid, tid, p.m, p.n, p.k);
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
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = v + r[o]; }

@compute @workgroup_size(WG)
fn matmul_residual(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xw(wid, tid, p.m, p.n, p.k);
}

// --- KERNEL: matmul_t ---
// Y = X · Wᵀ with W stored [N, K] (the tied output head: logits = X · Eᵀ, E [V, D]). X [M, K],
// Y [M, N], all row-major f32; f32 sums. Overwrites `y` (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.n * p.k
// @requires len(y) >= p.m * p.n
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = v; }

@compute @workgroup_size(WG)
fn matmul_t(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xwt(wid, tid, p.m, p.n, p.k);
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
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = y[o] + v; }

@compute @workgroup_size(WG)
fn matmul_t_acc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xwt(wid, tid, p.m, p.n, p.k);
}

// --- KERNEL: matmul_t_residual ---
// Y = R + X · Wᵀ with W stored [N, K] (a residual branch: x_out = x_in + a · Wᵀ). X [M, K],
// R and Y [M, N], all row-major f32; the product is summed in f32, then added to R — the one
// addition a copy of R into Y and `matmul_t_acc` make, without the copy. R is read only and must
// be a different buffer from Y. Overwrites `y` (elements past M·N untouched).
// Grid: one workgroup per 128×64 output tile (rows × columns), x over columns, y over rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.m, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(w) >= p.n * p.k
// @requires len(r) >= p.m * p.n
// @requires len(y) >= p.m * p.n
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(w[i.x], w[i.y], w[i.z], w[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = r[o] + v; }

@compute @workgroup_size(WG)
fn matmul_t_residual(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xwt(wid, tid, p.m, p.n, p.k);
}

// --- KERNEL: matmul_at ---
// Y = Xᵀ · B (weight gradients: dW = Xᵀ · dY). X [M, K], B [M, N], Y [K, N], all row-major f32;
// the sum runs over the M rows, in f32. Overwrites `y` (elements past K·N untouched).
// Grid: one workgroup per 128×64 tile of Y, x over its N columns, y over its K rows.
// @grid workgroups(ceil_div(p.n, TILE_N), ceil_div(p.k, TILE_M))
// @requires len(x) >= p.m * p.k
// @requires len(b) >= p.m * p.n
// @requires len(y) >= p.k * p.n
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(b[i.x], b[i.y], b[i.z], b[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = v; }

@compute @workgroup_size(WG)
fn matmul_at(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xtb(wid, tid, p.n, p.k, 0u, p.m, 0u);
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
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(b[i.x], b[i.y], b[i.z], b[i.w]); }
fn store_c(o: u32, v: f32) { y[o] = y[o] + v; }

@compute @workgroup_size(WG)
fn matmul_at_acc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xtb(wid, tid, p.n, p.k, 0u, p.m, 0u);
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

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(b[i.x], b[i.y], b[i.z], b[i.w]); }
fn store_c(o: u32, v: f32) { parts[o] = v; }

@compute @workgroup_size(WG)
fn matmul_at_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    // Part wid.z: contraction rows [begin, end), written at parts[wid.z, :, :].
    let begin = min(wid.z * p.chunk, p.m);
    let end = min(begin + p.chunk, p.m);
    product_xtb(wid, tid, p.n, p.k, begin, end, wid.z * p.k * p.n);
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
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(f32(w[i.x]), f32(w[i.y]), f32(w[i.z]), f32(w[i.w])); }
fn store_c(o: u32, v: f32) { y[o] = v; }

@compute @workgroup_size(WG)
fn matmul_w16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xw(wid, tid, p.m, p.n, p.k);
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
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f16>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(f32(w[i.x]), f32(w[i.y]), f32(w[i.z]), f32(w[i.w])); }
fn store_c(o: u32, v: f32) { y[o] = v + r[o]; }

@compute @workgroup_size(WG)
fn matmul_residual_w16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xw(wid, tid, p.m, p.n, p.k);
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
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn load_a(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(x[i.x], x[i.y], x[i.z], x[i.w]); }
fn load_b(i: vec4<u32>) -> vec4<f32> { return vec4<f32>(f32(w[i.x]), f32(w[i.y]), f32(w[i.z]), f32(w[i.w])); }
fn store_c(o: u32, v: f32) { y[o] = v; }

@compute @workgroup_size(WG)
fn matmul_t_w16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    product_xwt(wid, tid, p.m, p.n, p.k);
}

// --- KERNEL: gemm16 ---
// Y = op(A)·op(B) with f16 operands and f32 sums, on tensor cores where the device has them
// (f32 FMAs on the same operands elsewhere): the products of mixed precision. A is [M, K]
// (A_T = false) or [K, M] (A_T = true), B [K, N] (B_T = false) or [N, K] (B_T = true), both f16
// in the f16x4 row layout (`lib/gemm16.wgsl` has the scheme and the limits of its overrides);
// Y [M, N] f32 row-major. Overwrites `y` (G_ACC = false) or accumulates into it (G_ACC = true:
// Y += the product). With p.parts > 1, part s of the contraction (p.chunk rows of K each, a
// multiple of G_BK) writes its product to y[s·M·N …] instead, for `matmul_parts_add`.
// Record it through `kernels::gemm`: its plan chooses the overrides for the adapter and the
// shape, and checks every length exactly (the annotations below hold whatever the orientation).
// Grid: p.tiles = ⌈M/G_BM⌉·⌈N/G_BN⌉·parts workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(y) >= p.m * p.n * max(p.parts, 1)
//#include "lib/gemm16.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: GemmParams;
override G_ACC: bool = false;

fn store_out(row: u32, col: u32, v: f32) {
    let at = g_off + row * g_n + col;
    if (G_ACC) {
        y[at] = y[at] + v;
    } else {
        y[at] = v;
    }
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = g_off + row * g_n + col;
    let ld = g_n;
    if (G_ACC) {
        let sum = c + coopLoadT<coop_mat16x16<f32, C>>(&y[at], ld);
        coopStoreT(sum, &y[at], ld);
    } else {
        coopStoreT(c, &y[at], ld);
    }
}
//#endif

@compute @workgroup_size(G_WG)
fn gemm16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
//#if coop
    g16_run(flat_wg(wid, nwg), tid, sg, nsg);
//#else
    g16_run(flat_wg(wid, nwg), tid);
//#endif
}

// --- KERNEL: gemm16_residual ---
// Y = op(A)·op(B) + R with f16 operands (as `gemm16`; the product summed in f32, then R added):
// R and Y [M, N] f32, R read only and a different buffer from Y. Overwrites `y`. No split of the
// contraction (p.parts = 1).
// Grid: p.tiles = ⌈M/G_BM⌉·⌈N/G_BN⌉ workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires p.parts <= 1
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(r) >= p.m * p.n
// @requires len(y) >= p.m * p.n
//#include "lib/gemm16.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: GemmParams;

fn store_out(row: u32, col: u32, v: f32) {
    let at = row * g_n + col;
    y[at] = v + r[at];
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = row * g_n + col;
    let ld = g_n;
    let sum = c + coopLoadT<coop_mat16x16<f32, C>>(&r[at], ld);
    coopStoreT(sum, &y[at], ld);
}
//#endif

@compute @workgroup_size(G_WG)
fn gemm16_residual(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
//#if coop
    g16_run(flat_wg(wid, nwg), tid, sg, nsg);
//#else
    g16_run(flat_wg(wid, nwg), tid);
//#endif
}

// --- KERNEL: precise_take_scale ---
// Readies the scale words of a split-core product whose B operand was split ahead of it
// (`gemm::Halves`): amax[0] = 0, for `precise_absmax` to fold A's largest magnitude into, and
// amax[1] = scales[slot], B's word as its halves were made with. Overwrites amax[0] and
// amax[1]; `scales` is read only. One dispatch where a product that splits both operands
// records the clear, B's max and B's split.
// @grid workgroups(1)
// @requires len(scales) >= slot + 1
// @requires len(amax) >= 2
@group(0) @binding(0) var<storage, read> scales: array<u32>;
@group(0) @binding(1) var<storage, read_write> amax: array<u32>;
@group(0) @binding(2) var<uniform> slot: u32;

@compute @workgroup_size(1)
fn precise_take_scale() {
    amax[0] = 0u;
    amax[1] = scales[slot];
}
