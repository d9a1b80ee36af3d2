// Casts between f32 and f16: flat (`cast_f32_to_f16`, `cast_f16_to_f32`: f16 copies of the f32
// master weights, and back) and to the f16x4 row layout of the f16 products (`cast_f16x4`, and
// `cast_grad_f16x4` for gradients, with the overflow check of loss scaling). All need SHADER_F16.
//
// The flat casts are element-wise, 1-D, 8 elements per invocation, through `lib/elementwise.wgsl`
// (loads in flight to cover the memory latency, the 2-D grid fallback, a guarded tail).
//#include "lib/elementwise.wgsl"

// The largest finite f16.
const F16_MAX: f32 = 65504.0;

// `transpose_f16x4`'s square tiles (rows and columns); `ops::Transposes` counts its grid in them.
const TP_TILE: u32 = 64u;

// --- KERNEL: cast_f32_to_f16 ---
// `dst[i] = f16(clamp(src[i], −65504, 65504))` for i < p.n: values beyond the f16 range,
// ±Inf included, become ±65504 (never Inf); NaN stays NaN; in-range values
// round to a neighbouring f16 (WGSL allows either neighbour; hardware rounds to nearest).
// `src` (f32) and `dst` (f16): n values each. Overwrites `dst`. Needs SHADER_F16.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(src) >= p.n
// @requires len(dst) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f16>;
@group(0) @binding(2) var<uniform> p: Params;

// The conversion of one value. NaN: exponent all ones, mantissa non-zero, tested on the bits
// (`v != v` may be folded away). WGSL's clamp of NaN is implementation-defined, so a NaN
// bypasses the clamp and goes through the plain conversion, which gives an f16 NaN on Vulkan,
// Metal and D3D (IEEE conversion; the tests check it on the adapter). An explicit f16 NaN
// constant cannot be written: WGSL has no f16 NaN literal and naga rejects the size-changing
// `bitcast<vec2<f16>>(u32)`.
fn to_f16(v: f32) -> f16 {
    let bits = bitcast<u32>(v);
    let is_nan = (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0u;
    return select(f16(clamp(v, -F16_MAX, F16_MAX)), f16(v), is_nan);
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // All 8 loads first, then the stores.
    let a = vec4<f32>(src[lo.x], src[lo.y], src[lo.z], src[lo.w]);
    let b = vec4<f32>(src[hi.x], src[hi.y], src[hi.z], src[hi.w]);
    dst[lo.x] = to_f16(a.x);
    dst[lo.y] = to_f16(a.y);
    dst[lo.z] = to_f16(a.z);
    dst[lo.w] = to_f16(a.w);
    dst[hi.x] = to_f16(b.x);
    dst[hi.y] = to_f16(b.y);
    dst[hi.z] = to_f16(b.z);
    dst[hi.w] = to_f16(b.w);
}

fn ew_one(j: u32) {
    dst[j] = to_f16(src[j]);
}

@compute @workgroup_size(WG)
fn cast_f32_to_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: cast_f16_to_f32 ---
// `dst[i] = f32(src[i])` for i < p.n (exact). `src` (f16) and `dst` (f32): n values each.
// Overwrites `dst`. Needs SHADER_F16.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(src) >= p.n
// @requires len(dst) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let a = vec4<f32>(vec4<f16>(src[lo.x], src[lo.y], src[lo.z], src[lo.w]));
    let b = vec4<f32>(vec4<f16>(src[hi.x], src[hi.y], src[hi.z], src[hi.w]));
    dst[lo.x] = a.x;
    dst[lo.y] = a.y;
    dst[lo.z] = a.z;
    dst[lo.w] = a.w;
    dst[hi.x] = b.x;
    dst[hi.y] = b.y;
    dst[hi.z] = b.z;
    dst[hi.w] = b.w;
}

fn ew_one(j: u32) {
    dst[j] = f32(src[j]);
}

@compute @workgroup_size(WG)
fn cast_f16_to_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.n);
}

// --- KERNEL: cast_f16x4 ---
// An f32 matrix `src` [rows, cols] (row-major) to the f16x4 row layout: `dst` [rows, ⌈cols/4⌉]
// vec4<f16>, dst[r][c] = f16(src[r, c]) with every row padded by zeros to a multiple of 4 —
// bit for bit what `ops::to_f16x4` writes on the host (round to nearest, beyond ±65504 →
// ±65504, NaN stays NaN), with 4 vec4s per invocation and all loads issued first. Overwrites `dst` (the
// first rows·⌈cols/4⌉ vec4s). Needs SHADER_F16. Grid: one workgroup per 1024 vec4s of `dst`, 1-D
// (2-D past the device's limit).
// @grid workgroups(ceil_div(p.rows * ceil_div(p.cols, 4), VEC_CHUNK))
// @requires len(src) >= p.rows * p.cols
// @requires len(dst) >= p.rows * ceil_div(p.cols, 4)
struct RowsParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f16>>;
@group(0) @binding(2) var<uniform> p: RowsParams;
//#include "lib/f16x4.wgsl"
//#include "lib/vec4_rows.wgsl"

fn src4(i: u32) -> vec4<f32> {
    return vec4<f32>(src[i], src[i + 1u], src[i + 2u], src[i + 3u]);
}

fn v4_four(e: vec4<u32>) {
    let i = 4u * e;
    let a0 = src4(i.x);
    let a1 = src4(i.y);
    let a2 = src4(i.z);
    let a3 = src4(i.w);
    dst[e.x] = to_f16x4(a0);
    dst[e.y] = to_f16x4(a1);
    dst[e.z] = to_f16x4(a2);
    dst[e.w] = to_f16x4(a3);
}

fn v4_one(e: u32, i: u32, n: u32) {
    var a = vec4<f32>(0.0);
    a.x = src[i];
    if (n > 1u) {
        a.y = src[i + 1u];
    }
    if (n > 2u) {
        a.z = src[i + 2u];
    }
    if (n > 3u) {
        a.w = src[i + 3u];
    }
    dst[e] = to_f16x4(a);
}

@compute @workgroup_size(WG)
fn cast_f16x4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    vec4_rows(wid, nwg, tid, p.rows, p.cols);
}

// --- KERNEL: cast_grad_f16x4 ---
// A gradient `src` [rows, cols] (f32, row-major) to the f16x4 row layout (`dst` [rows,
// ⌈cols/4⌉] vec4<f16>, rows zero-padded to a multiple of 4), as `cast::cast_f16x4` does
// (values beyond ±65504 clamped, NaN kept), and the overflow check of loss scaling: any value
// that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears it). Overwrites `dst`.
// Grid: one invocation per destination vec4, 1-D (2-D past the device's limit).
// @grid threads(p.rows * ceil_div(p.cols, 4))
// @requires len(src) >= p.rows * p.cols
// @requires len(dst) >= p.rows * ceil_div(p.cols, 4)
// @requires len(flag) >= 1
struct CastParams {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> p: CastParams;

const F16_LIMIT: f32 = 65504.0;
const LANES: vec4<u32> = vec4<u32>(0u, 1u, 2u, 3u);

// Which lanes hold NaN or ±Inf (from the bits: comparisons of NaN may be folded away).
fn not_finite4(v: vec4<f32>) -> vec4<bool> {
    let e = bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u);
    return e == vec4<u32>(0x7f800000u);
}

// The element indices of four consecutive columns c..c+3 of row `r` (clamped into the row) and
// which of them lie inside it.
fn row4(r: u32, c: u32, cols: u32) -> vec4<u32> {
    return vec4<u32>(r * cols) + min(vec4<u32>(c) + LANES, vec4<u32>(max(cols, 1u) - 1u));
}

fn inside4(c: u32, cols: u32) -> vec4<bool> {
    return (vec4<u32>(c) + LANES) < vec4<u32>(cols);
}

// Values clamped to ±65504 (NaN passes through as NaN: select on the bits).
fn clamp16(v: vec4<f32>) -> vec4<f32> {
    let nan = not_finite4(v) & ((bitcast<vec4<u32>>(v) & vec4<u32>(0x007fffffu)) != vec4<u32>(0u));
    return select(clamp(v, vec4<f32>(-F16_LIMIT), vec4<f32>(F16_LIMIT)), v, nan);
}

@compute @workgroup_size(WG)
fn cast_grad_f16x4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    let cq = (p.cols + 3u) / 4u;
    if (i >= p.rows * cq) {
        return;
    }
    let r = i / cq;
    let c = (i % cq) * 4u;
    let at = row4(r, c, p.cols);
    let v = select(vec4<f32>(0.0), vec4<f32>(src[at.x], src[at.y], src[at.z], src[at.w]), inside4(c, p.cols));
    if (any(not_finite4(v) | (abs(v) > vec4<f32>(F16_LIMIT)))) {
        atomicOr(&flag[0], 1u);
    }
    dst[i] = vec4<f16>(clamp16(v));
}

// --- KERNEL: transpose_f16x4 ---
// Many f16 matrices transposed in one dispatch, in the f16x4 row layout: for each of the
// `p.count` entries of `table` (8 words each: src, dst, rows, cols, first, across, 0, 0), the
// matrix of `src` [rows, ⌈cols/4⌉ vec4s] starting at vec4 `src` is written to `dst` as its
// transpose [cols, ⌈rows/4⌉ vec4s] starting at vec4 `dst`, every row padded with zeros. The
// mixed-precision trainer keeps its weights' transposed copies this way, so that its input
// gradients dY·W run as X·Wᵀ products (`ops::Transposes`, which builds the table and checks it).
// Each workgroup moves one 64 × 64 tile through workgroup memory, reading and writing whole
// vec4s; the entry's tiles are workgroups `first .. first + ⌈rows/64⌉·across` with
// across = ⌈cols/64⌉, row-major over the tiles of the source, and the entries' ranges follow one
// another from 0 in table order. Copies bits: NaN and ±Inf come through as they are.
// Overwrites each entry's destination rows (padding included) and nothing else.
// Grid: p.tiles workgroups (the entries' tiles in all), 1-D, 2-D past the device's limit.
// @grid workgroups(p.tiles)
// @requires len(table) >= 8 * p.count
struct TransposeParams {
    count: u32,
    tiles: u32,
}
@group(0) @binding(0) var<storage, read> src: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> table: array<u32>;
@group(0) @binding(3) var<uniform> p: TransposeParams;

// The tile transposed as it is stored: tp_t[c·65 + r] holds source element (r, c) of the tile.
// The odd row length spreads each phase's accesses over the banks.
const TP_ROW: u32 = 65u;
var<workgroup> tp_t: array<f16, 4160>;

@compute @workgroup_size(WG)
fn transpose_f16x4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    // The 2-D fallback's surplus workgroups load nothing and store nothing, but take part in the
    // barrier.
    let live = w < p.tiles;
    // The last entry whose tiles start at or before w (entries without tiles share the next
    // one's first tile and lose to it), by bisection over the ascending first tiles: a scan
    // would put one load per entry before the tile's own loads.
    var e = 0u;
    var hi = max(p.count, 1u);
    while (hi - e > 1u) {
        let mid = (e + hi) / 2u;
        if (table[8u * mid + 4u] <= w) {
            e = mid;
        } else {
            hi = mid;
        }
    }
    let base = 8u * e;
    let s0 = table[base];
    let d0 = table[base + 1u];
    let rows = table[base + 2u];
    let cols = table[base + 3u];
    let t = w - min(w, table[base + 4u]);
    let across = max(table[base + 5u], 1u);
    let r0 = (t / across) * TP_TILE;
    let c0 = (t % across) * TP_TILE;
    let sq = (cols + 3u) / 4u;
    let dq = (rows + 3u) / 4u;
    // 64 rows × 16 vec4s of the source, 4 per invocation, all loads issued before the stores.
    var v: array<vec4<f16>, 4>;
    for (var j = 0u; j < 4u; j++) {
        let i = tid + WG * j;
        let r = r0 + i / 16u;
        let c4 = c0 / 4u + i % 16u;
        v[j] = vec4<f16>(0.0h);
        if (live && r < rows && c4 < sq) {
            v[j] = src[s0 + r * sq + c4];
        }
    }
    for (var j = 0u; j < 4u; j++) {
        let i = tid + WG * j;
        let r = i / 16u;
        let c = 4u * (i % 16u);
        tp_t[c * TP_ROW + r] = v[j].x;
        tp_t[(c + 1u) * TP_ROW + r] = v[j].y;
        tp_t[(c + 2u) * TP_ROW + r] = v[j].z;
        tp_t[(c + 3u) * TP_ROW + r] = v[j].w;
    }
    workgroupBarrier();
    // 64 destination rows × 16 vec4s; rows past the source's come from the zeros loaded above.
    for (var j = 0u; j < 4u; j++) {
        let i = tid + WG * j;
        let c = i / 16u;
        let r = 4u * (i % 16u);
        let at = c * TP_ROW + r;
        let col = c0 + c;
        let r4 = r0 / 4u + i % 16u;
        if (live && col < cols && r4 < dq) {
            dst[d0 + col * dq + r4] = vec4<f16>(tp_t[at], tp_t[at + 1u], tp_t[at + 2u], tp_t[at + 3u]);
        }
    }
}
