// Matrix products of the trainer: Y = X·W, Y = X·W + R, Y (+)= X·Wᵀ, Y (+)= Xᵀ·B, and f16-weight
// forms. All matrices are row-major f32 (the `_w16` forms read W as f16), sums are f32. After them:
// `gemm16` (f16 operands, `lib/gemm16.wgsl`) and the f32-accurate products on tensor cores
// (`precise_*`, `*_pres*`: scaled, split into two f16 halves, `lib/precise.wgsl`).
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
//#include "lib/parts_sum.wgsl"

@compute @workgroup_size(WG)
fn matmul_parts_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < p.len) {
        let y0 = y[i];
        y[i] = y0 + parts_sum(i, p.parts, p.len);
    }
}

// --- KERNEL: matmul_parts_add4 ---
// `matmul_parts_add` of up to four products in one dispatch, into one buffer `y` in which their
// outputs lie apart (a layer's weight gradients, consecutive in the trainer's gradient
// allocation). Segment t = `p.seg[t]` = (dst, len, parts, src): for i < len,
// `y[dst + i] += parts[src] [i] + parts[src + len] [i] + …` over its `parts` parts in increasing
// order (`lib/parts_sum.wgsl`, as `matmul_parts_add` sums: the same bits). Segments with 0 parts are skipped;
// segments may not overlap; elements of `y` outside every segment are untouched.
// Grid: one invocation per element of `y` up to `p.span` (the end of the last segment), 1-D.
// @grid threads(p.span)
// @requires len(y) >= p.span
// @accumulates y
struct Sums {
    // (dst, len, parts, src) per segment.
    seg: array<vec4<u32>, 4>,
    span: u32,
}
@group(0) @binding(0) var<storage, read> parts: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Sums;
//#include "lib/parts_sum.wgsl"

@compute @workgroup_size(WG)
fn matmul_parts_add4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i >= p.span) {
        return;
    }
    for (var t = 0u; t < 4u; t++) {
        let s = p.seg[t];
        if (s.z > 0u && i >= s.x && i - s.x < s.y) {
            let y0 = y[i];
            y[i] = y0 + parts_sum(s.w + (i - s.x), s.z, s.y);
            return;
        }
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
//#include "lib/gemm16_out.wgsl"

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

// --- KERNEL: gemm16_swiglu ---
// `gemm16`'s Y = op(A)·op(B) over the fused gate/up weight (N = 2·F columns: the gate's F, then
// the up's F), and in the same dispatch SwiGLU of it: `h[r, j] = f16(silu(Y[r, j]) ·
// Y[r, F + j])`, the arithmetic and rounding of `activation::swiglu_gu_f16` on the stored Y (the
// same bits). Y [M, N] f32 row-major (kept for the backward), `h` [M, F] in the f16x4 row
// layout (F % 16 = 0: no padding), the down projection's operand. Overwrites `y` and `h`. The
// product's columns alternate tiles of 16 between the two halves (`G_NMAP` = 16), so each
// workgroup's block holds matching gate and up columns; after storing it the workgroup reads it
// back (its own stores, behind a storage barrier) and writes the block's part of h. No split of
// the contraction.
// Record it through `kernels::gemm::gemm_swiglu`.
// Grid: p.tiles = ⌈M/G_BM⌉·⌈N/G_BN⌉ workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires p.parts <= 1
// @requires p.n % 32 == 0
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(y) >= p.m * p.n
// @requires len(h) >= p.m * (p.n / 8)
//#include "lib/gemm16.wgsl"
//#include "lib/f16x4.wgsl"
//#include "lib/activations.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> h: array<vec4<f16>>;
@group(0) @binding(4) var<uniform> p: GemmParams;
//#include "lib/gemm16_store.wgsl"

// The block's part of h: gate columns [n0/2, n0/2 + G_BN/2) of rows [m0, m0 + G_BM), 4 a step.
fn swiglu_block(tid: u32, blk: vec3<u32>) {
    let f = g_n / 2u;
    let per_row = G_BN / 8u;
    for (var e = tid; e < G_BM * per_row * blk.z; e += G_WG) {
        let row = blk.x + e / per_row;
        let c = blk.y / 2u + 4u * (e % per_row);
        if (row < g_m && c < f) {
            let i = row * g_n + c;
            let g = vec4<f32>(y[i], y[i + 1u], y[i + 2u], y[i + 3u]);
            let u = vec4<f32>(y[i + f], y[i + f + 1u], y[i + f + 2u], y[i + f + 3u]);
            h[row * (f / 4u) + c / 4u] = to_f16x4(swiglu4(g, u));
        }
    }
}


@compute @workgroup_size(G_WG)
fn gemm16_swiglu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
    g16_run(w, tid, sg, nsg);
//#else
    g16_run(w, tid);
//#endif
    storageBarrier();
    swiglu_block(tid, g16_block(w));
}

// --- KERNEL: gemm16_rope_qkv ---
// `gemm16`'s Y = op(A)·op(B) over the fused attention projection (the rows of
// `lib/rope_qkv.wgsl`: N = (H + 2·Hkv)·Dh columns, Q's, K's, V's), and in the same dispatch what
// `rope::rope_qkv_f16` makes of Y: the rotated Q and K and the unrotated V in f16 (the same
// arithmetic and rounding on the stored Y, so the same bits), `q16` [M, H·Dh/4], `k16` and `v16`
// [M, Hkv·Dh/4] vec4<f16> (Dh % 4 = 0: no padding), M = batch·seq rows at positions
// (row mod seq) + pos_offset. Y [M, N] f32. Overwrites `y`, `q16`, `k16`, `v16`. After storing
// its block the workgroup reads it back (its own stores, behind a storage barrier) and writes the
// block's columns of the three (a rotated pair is two neighbouring columns, inside every block).
// No split of the contraction. Record it through `kernels::gemm::gemm_rope_qkv`.
// Grid: p.tiles = ⌈M/G_BM⌉·⌈N/G_BN⌉ workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires p.parts <= 1
// @requires p.head_dim % 4 == 0
// @requires p.head_dim >= 4
// @requires p.n == (p.heads + 2 * p.kv_heads) * p.head_dim
// @requires p.m == p.batch * p.seq
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(y) >= p.m * p.n
// @requires len(q16) >= p.m * (p.heads * p.head_dim / 4)
// @requires len(k16) >= p.m * (p.kv_heads * p.head_dim / 4)
// @requires len(v16) >= p.m * (p.kv_heads * p.head_dim / 4)
//#include "lib/gemm16.wgsl"
//#include "lib/f16x4.wgsl"
//#include "lib/rope.wgsl"
//#include "lib/rope_qkv.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> q16: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> k16: array<vec4<f16>>;
@group(0) @binding(5) var<storage, read_write> v16: array<vec4<f16>>;
@group(0) @binding(6) var<uniform> p: GemmRopeParams;
//#include "lib/gemm16_store.wgsl"
//#include "lib/rope_block.wgsl"

@compute @workgroup_size(G_WG)
fn gemm16_rope_qkv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
    g16_run(w, tid, sg, nsg);
//#else
    g16_run(w, tid);
//#endif
    storageBarrier();
    rope_block(tid, g16_block(w));
}

// --- KERNEL: gemm16_tc ---
// `gemm16` for exact products on tensor cores only (`lib/gemm16_tc.wgsl`: every block inside the
// output, whole steps of the contraction, the shape and the split compiled in, one tile group
// per subgroup, no column map): the same bindings, overrides and results, at the rate of the
// contraction loop alone. Overwrites `y` (G_ACC = false) or accumulates into it (G_ACC = true),
// as `gemm16`. `kernels::gemm` records it for X·Wᵀ products where those conditions hold,
// `gemm16` elsewhere. Where the workgroup's subgroups are not one per tile group it writes NaN
// to its block; without tensor cores it runs `gemm16`'s portable path.
// Grid: p.tiles = (M/G_BM)·(N/G_BN)·parts workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(y) >= p.m * p.n * max(p.parts, 1)
//#include "lib/gemm16.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: GemmParams;
//#include "lib/gemm16_out.wgsl"
//#include "lib/gemm16_tc.wgsl"

@compute @workgroup_size(G_WG)
fn gemm16_tc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
//#include "lib/gemm16_tc_main.wgsl"
//#else
    g16_run(w, tid);
//#endif
}

// --- KERNEL: gemm16_rope_qkv_tc ---
// `gemm16_rope_qkv` for exact products on tensor cores only (`lib/gemm16_tc.wgsl`, as
// `gemm16_tc`, whose conditions the plan checks): the same bindings, overrides and results.
// Overwrites `y`, `q16`, `k16`, `v16`. No split of the contraction.
// Grid: p.tiles = (M/G_BM)·(N/G_BN) workgroups, 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires p.parts <= 1
// @requires p.head_dim % 4 == 0
// @requires p.head_dim >= 4
// @requires p.n == (p.heads + 2 * p.kv_heads) * p.head_dim
// @requires p.m == p.batch * p.seq
// @requires len(a) >= min(p.m * ceil_div(p.k, 4), p.k * ceil_div(p.m, 4))
// @requires len(b) >= min(p.n * ceil_div(p.k, 4), p.k * ceil_div(p.n, 4))
// @requires len(y) >= p.m * p.n
// @requires len(q16) >= p.m * (p.heads * p.head_dim / 4)
// @requires len(k16) >= p.m * (p.kv_heads * p.head_dim / 4)
// @requires len(v16) >= p.m * (p.kv_heads * p.head_dim / 4)
//#include "lib/gemm16.wgsl"
//#include "lib/f16x4.wgsl"
//#include "lib/rope.wgsl"
//#include "lib/rope_qkv.wgsl"
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> q16: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> k16: array<vec4<f16>>;
@group(0) @binding(5) var<storage, read_write> v16: array<vec4<f16>>;
@group(0) @binding(6) var<uniform> p: GemmRopeParams;
//#include "lib/gemm16_store.wgsl"
//#include "lib/rope_block.wgsl"
//#include "lib/gemm16_tc.wgsl"

@compute @workgroup_size(G_WG)
fn gemm16_rope_qkv_tc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let w = flat_wg(wid, nwg);
//#if coop
//#include "lib/gemm16_tc_main.wgsl"
//#else
    g16_run(w, tid);
//#endif
    storageBarrier();
    rope_block(tid, g16_block(w));
}

// --- KERNEL: precise_clear ---
// Clears the scale bits of the precise products: overwrites amax[0 .. n] with 0 (before
// `precise_absmax` folds operands into them). One workgroup.
// @grid workgroups(1)
// @requires len(amax) >= n
@group(0) @binding(0) var<storage, read_write> amax: array<u32>;
@group(0) @binding(1) var<uniform> n: u32;

//#include "lib/precise.wgsl"

@compute @workgroup_size(64)
fn precise_clear(@builtin(local_invocation_index) tid: u32) {
    for (var i = tid; i < n; i += 64u) {
        amax[i] = 0u;
    }
}

// --- KERNEL: precise_absmax ---
// Accumulates max |x| over x[0 .. p.n] into amax[p.slot] (as bits; the bits of non-negative
// floats order like the floats): amax[p.slot] = max(amax[p.slot], bits of max |x_i|) over the
// finite x_i (NaN and ±Inf left out). Clear it first (`precise_clear`). Order-independent, so
// deterministic. Grid: one workgroup per 4096 values (16 per invocation, a tree in workgroup
// memory, one atomic per workgroup), 1-D (2-D past the device's limit).
// @grid workgroups(ceil_div(p.n, ABS_CHUNK))
// @requires len(x) >= p.n
// @requires len(amax) >= p.slot + 1
struct AbsParams {
    n: u32,
    slot: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> amax: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> p: AbsParams;
const ABS_CHUNK: u32 = 4096u;
var<workgroup> abs_tree: array<u32, WG>;

// The bits of max |v| over the lanes of v at element indices first … first+3 that lie below n
// and are finite (0 if none).
fn abs_bits(first: u32) -> u32 {
    let idx = vec4<u32>(first) + LANE4;
    let at = min(idx, vec4<u32>(max(p.n, 1u) - 1u));
    let bits = bitcast<vec4<u32>>(vec4<f32>(x[at.x], x[at.y], x[at.z], x[at.w])) & vec4<u32>(0x7fffffffu);
    let b = select(vec4<u32>(0u), bits, (idx < vec4<u32>(p.n)) & (bits < vec4<u32>(0x7f800000u)));
    return max(max(b.x, b.y), max(b.z, b.w));
}

//#include "lib/precise.wgsl"

@compute @workgroup_size(WG)
fn precise_absmax(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    if (w >= (p.n + ABS_CHUNK - 1u) / ABS_CHUNK) {
        return;
    }
    let base = w * ABS_CHUNK + 4u * tid;
    let m = max(max(abs_bits(base), abs_bits(base + 4u * WG)), max(abs_bits(base + 8u * WG), abs_bits(base + 12u * WG)));
    abs_tree[tid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (tid < s) {
            abs_tree[tid] = max(abs_tree[tid], abs_tree[tid + s]);
        }
        workgroupBarrier();
    }
    if (tid == 0u && abs_tree[0] != 0u) {
        atomicMax(&amax[p.slot], abs_tree[0]);
    }
}

// --- KERNEL: precise_split ---
// One operand of a precise product, scaled and split (the file header): `src` [rows, cols] f32
// row-major to `hi` and `lo` in the f16x4 row layout ([rows, ⌈cols/4⌉] vec4<f16>, rows padded
// with zeros), hi = f16(x·2^e), lo = f16((x·2^e − hi)·2¹¹), e = scale_exp(amax[p.slot]).
// Overwrites hi and lo. Grid: one invocation per destination vec4, 1-D (2-D past the limit).
// @grid threads(p.rows * ceil_div(p.cols, 4))
// @requires len(src) >= p.rows * p.cols
// @requires len(amax) >= p.slot + 1
// @requires len(hi) >= p.rows * ceil_div(p.cols, 4)
// @requires len(lo) >= p.rows * ceil_div(p.cols, 4)
struct HalvesParams {
    rows: u32,
    cols: u32,
    slot: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> amax: array<u32>;
@group(0) @binding(2) var<storage, read_write> hi: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> lo: array<vec4<f16>>;
@group(0) @binding(4) var<uniform> p: HalvesParams;

//#include "lib/precise.wgsl"

@compute @workgroup_size(WG)
fn precise_split(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    let cq = (p.cols + 3u) / 4u;
    if (i >= p.rows * cq) {
        return;
    }
    let r = i / cq;
    let c = (i % cq) * 4u;
    let at = vec4<u32>(r * p.cols) + min(vec4<u32>(c) + LANE4, vec4<u32>(max(p.cols, 1u) - 1u));
    let inside = (vec4<u32>(c) + LANE4) < vec4<u32>(p.cols);
    let v = select(vec4<f32>(0.0), vec4<f32>(src[at.x], src[at.y], src[at.z], src[at.w]), inside);
    let scaled = ldexp(v, vec4<i32>(scale_exp(amax[p.slot])));
    let xs = select(clamp(scaled, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX)), scaled, nan4(scaled));
    let h = vec4<f16>(round_half(xs));
    hi[i] = h;
    lo[i] = vec4<f16>((xs - vec4<f32>(h)) * LO_SCALE);
}

// --- KERNEL: matmul_t_pres ---
// Y = X · Wᵀ to f32 accuracy over the f32 range (the file header): from X [M, K] and W [N, K]
// split by `precise_split` (a_hi/a_lo of X with amax[0], b_hi/b_lo of W with amax[1], f16x4
// rows), Y [M, N] f32 row-major. Overwrites `y`, or accumulates into it (Y += X·Wᵀ) with the
// override ACC = true (elements past M·N untouched). Grid: one workgroup per 128×128 output
// block, 1-D (row-major), 2-D past the device's limit. Overrides M_C, N_C, K_C: the shape
// compiled in (0 = the uniform's; `kernels::ops` sets both), and ACC.
// @grid workgroups(ceil_div(p.n, PB_BN) * ceil_div(p.m, PB_BM))
// @requires len(a_hi) >= p.m * ceil_div(p.k, 4)
// @requires len(a_lo) >= p.m * ceil_div(p.k, 4)
// @requires len(b_hi) >= p.n * ceil_div(p.k, 4)
// @requires len(b_lo) >= p.n * ceil_div(p.k, 4)
// @requires len(amax) >= 2
// @requires len(y) >= p.m * p.n
@group(0) @binding(0) var<storage, read> a_hi: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> a_lo: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> b_hi: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> b_lo: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read> amax: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
override M_C: u32 = 0u;
override N_C: u32 = 0u;
override K_C: u32 = 0u;
// true: Y += the product (accumulate) instead of Y = the product.
override ACC: bool = false;
const A_KC: bool = true;
const B_KC: bool = true;

//#include "lib/precise.wgsl"
//#include "lib/pres_gemm.wgsl"

@compute @workgroup_size(PB_WG)
fn matmul_t_pres(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
//#if coop
    pres_gemm(flat_wg(wid, nwg), tid, sg, nsg);
//#else
    pres_gemm(flat_wg(wid, nwg), tid, 0u, 1u);
//#endif
}

// --- KERNEL: matmul_pres ---
// Y = X · W to f32 accuracy over the f32 range (input gradients dX = dY·W): from X [M, K] and
// W [K, N] split by `precise_split` (X with amax[0], W with amax[1]), Y [M, N] f32. Overwrites
// `y`, or accumulates into it with ACC = true (elements past M·N untouched). Grid and overrides
// as `matmul_t_pres`.
// @grid workgroups(ceil_div(p.n, PB_BN) * ceil_div(p.m, PB_BM))
// @requires len(a_hi) >= p.m * ceil_div(p.k, 4)
// @requires len(a_lo) >= p.m * ceil_div(p.k, 4)
// @requires len(b_hi) >= p.k * ceil_div(p.n, 4)
// @requires len(b_lo) >= p.k * ceil_div(p.n, 4)
// @requires len(amax) >= 2
// @requires len(y) >= p.m * p.n
@group(0) @binding(0) var<storage, read> a_hi: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> a_lo: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> b_hi: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> b_lo: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read> amax: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
override M_C: u32 = 0u;
override N_C: u32 = 0u;
override K_C: u32 = 0u;
// true: Y += the product (accumulate) instead of Y = the product.
override ACC: bool = false;
const A_KC: bool = true;
const B_KC: bool = false;

//#include "lib/precise.wgsl"
//#include "lib/pres_gemm.wgsl"

@compute @workgroup_size(PB_WG)
fn matmul_pres(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
//#if coop
    pres_gemm(flat_wg(wid, nwg), tid, sg, nsg);
//#else
    pres_gemm(flat_wg(wid, nwg), tid, 0u, 1u);
//#endif
}

// --- KERNEL: matmul_at_pres_split ---
// One part of a weight gradient Xᵀ · B to f32 accuracy over the f32 range, split along the
// contraction: part s sums rows [s·p.chunk, min((s+1)·p.chunk, M)) of X [M, K] and B [M, N]
// (split by `precise_split`: X with amax[0], B with amax[1]) into parts[s] [K, N]. Overwrites
// `parts` (the first parts·K·N elements); add them with `linear::matmul_parts_add`
// (`ops::weight_grad_precise`). Grid: one workgroup per (128×128 block of the K×N output,
// part), 1-D, 2-D past the device's limit. Overrides M_C (tokens), N_C, K_C as `matmul_t_pres`.
// @grid workgroups(ceil_div(p.n, PB_BN) * ceil_div(p.k, PB_BM) * p.parts)
// @requires p.parts >= 1
// @requires p.chunk * p.parts >= p.m
// @requires len(a_hi) >= p.m * ceil_div(p.k, 4)
// @requires len(a_lo) >= p.m * ceil_div(p.k, 4)
// @requires len(b_hi) >= p.m * ceil_div(p.n, 4)
// @requires len(b_lo) >= p.m * ceil_div(p.n, 4)
// @requires len(amax) >= 2
// @requires len(parts) >= p.parts * p.k * p.n
struct SplitParams {
    m: u32,
    n: u32,
    k: u32,
    parts: u32,
    chunk: u32,
}
@group(0) @binding(0) var<storage, read> a_hi: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> a_lo: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> b_hi: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> b_lo: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read> amax: array<u32>;
@group(0) @binding(5) var<storage, read_write> parts: array<f32>;
@group(0) @binding(6) var<uniform> p: SplitParams;
override M_C: u32 = 0u;
override N_C: u32 = 0u;
override K_C: u32 = 0u;
const A_KC: bool = false;
const B_KC: bool = false;
var<private> part_base: u32;

fn store_out(row: u32, col: u32, v: f32) {
    if (row < dim_m && col < dim_n) {
        parts[part_base + row * dim_n + col] = v;
    }
}

//#if coop
fn coop_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = part_base + row * dim_n + col;
    let ld = dim_n;
    coopStoreT(c, &parts[at], ld);
}
//#endif

//#include "lib/precise.wgsl"

@compute @workgroup_size(PB_WG)
fn matmul_at_pres_split(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
//#endif
) {
    let tokens = select(p.m, M_C, M_C != 0u);
    let n = select(p.n, N_C, N_C != 0u);
    let k = select(p.k, K_C, K_C != 0u);
    dim_m = k;
    dim_n = n;
    a_q = (k + 3u) / 4u;
    b_q = (n + 3u) / 4u;
    let per_part = ((n + PB_BN - 1u) / PB_BN) * ((k + PB_BM - 1u) / PB_BM);
    let w = flat_wg(wid, nwg);
    let part = w / max(per_part, 1u);
    if (part >= p.parts) {
        return;
    }
    let blk = pb_block(w % max(per_part, 1u), k, n);
    let begin = min(part * p.chunk, tokens);
    let end = min(begin + p.chunk, tokens);
    k_end = end;
    part_base = part * k * n;
    let nk = (end - begin + PB_BK - 1u) / PB_BK;
    let fs = pb_factors();
//#if coop
    if (blk.x + PB_BM <= k && blk.y + PB_BN <= n && n % 4u == 0u && PC_GROUPS % nsg == 0u) {
        pc_block(tid, sg, nsg, blk.x, blk.y, begin, nk, fs);
        return;
    }
//#endif
    pf_block(tid, blk.x, blk.y, begin, nk, fs);
}

// --- KERNEL: precise_take_scales ---
// Readies the scale words of a split-core product with an operand split ahead of it
// (`gemm::Halves`): amax[0] = scales_a[p.a_slot] where p.take has bit 0 (A's halves), else 0
// for `precise_absmax` to fold A's largest magnitude into; amax[1] likewise from
// scales_b[p.b_slot] with bit 1. The product kernels read their operands' words at amax[0]
// and amax[1]; the words of prepared halves live elsewhere, one buffer for many operands.
// Overwrites amax[0] and amax[1]; `scales_a` and `scales_b` are read only (the same buffer may
// be both). One dispatch in place of a clear, or of an operand's max and split.
// @grid workgroups(1)
// @requires len(scales_a) >= p.a_slot + 1
// @requires len(scales_b) >= p.b_slot + 1
// @requires len(amax) >= 2
struct TakeParams {
    a_slot: u32,
    b_slot: u32,
    take: u32,
}

@group(0) @binding(0) var<storage, read> scales_a: array<u32>;
@group(0) @binding(1) var<storage, read> scales_b: array<u32>;
@group(0) @binding(2) var<storage, read_write> amax: array<u32>;
@group(0) @binding(3) var<uniform> p: TakeParams;

@compute @workgroup_size(1)
fn precise_take_scales() {
    amax[0] = select(0u, scales_a[p.a_slot], (p.take & 1u) != 0u);
    amax[1] = select(0u, scales_b[p.b_slot], (p.take & 2u) != 0u);
}
