// Token embedding: lookup (f32 and f16 tables) and its backward into the table gradient.
//
// Shapes: token ids `ids [rows]` with rows = B·S (batch-major [B, S] flattened), table
// `[V, D]` row-major, activations `[rows, D]`. An id ≥ V is "no token": its lookup row is zero
// and its gradient is dropped.
//
// The lookups are element-wise over the rows·D output elements, 8 per invocation through
// `lib/elementwise.wgsl` (grid `workgroups(⌈rows·D/2048⌉)`, 2-D past the device's limit, so any
// number of rows works): each invocation issues its 8 id loads, then its 8 table loads, before
// any store. The two lookups share their body (below) and differ in the table's type. The
// backward is key-major: one workgroup per (vocabulary row, chunk of BWD_COLS columns), which
// scans every id in order and sums the matching dOut rows in position order — deterministic
// without float atomics.
//#include "lib/elementwise.wgsl"

// Columns of the table gradient one `embed_backward` workgroup owns: BWD_PER columns per
// invocation, WG · BWD_PER in all.
const BWD_PER: u32 = 4u;
const BWD_COLS: u32 = 1024u;
// Ids one `embed_backward` workgroup tests per step: one per invocation, as a 256-bit mask of
// BWD_WORDS 32-bit words.
const BWD_WORDS: u32 = 8u;
const_assert BWD_COLS == WG * BWD_PER;

// (row, column) of element i + WG of a row-major [·, dim] matrix, given (row, column) of
// element i and WG = q·dim + rem (q = WG / dim, rem = WG % dim): one carry at most, since
// column + rem < 2·dim. Saves a division per element.
fn step_place(rc: vec2<u32>, q: u32, rem: u32, dim: u32) -> vec2<u32> {
    let c = rc.y + rem;
    let carry = c >= dim;
    return vec2<u32>(rc.x + q + select(0u, 1u, carry), select(c, c - dim, carry));
}

// The body of `embed_lookup` and `embed_lookup_w16` (the hooks of `elementwise`), which bind
// `ids`, `out` and `p` alike and differ only in the table's type: each defines the hook
//   fn table_at(i: u32) -> f32   element i of the table, as f32

// Column c of the table row of token id `id`, or 0 for an id ≥ vocab (tested before
// indexing: id · dim may wrap for a huge id).
fn fetch(id: u32, c: u32) -> f32 {
    var v = 0.0;
    if (id < p.vocab) {
        v = table_at(id * p.dim + c);
    }
    return v;
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    // (row, column) of the 8 elements, one division for all.
    let i = lo.x;
    let q = WG / p.dim;
    let rem = WG - q * p.dim;
    let e0 = vec2<u32>(i / p.dim, i % p.dim);
    let e1 = step_place(e0, q, rem, p.dim);
    let e2 = step_place(e1, q, rem, p.dim);
    let e3 = step_place(e2, q, rem, p.dim);
    let e4 = step_place(e3, q, rem, p.dim);
    let e5 = step_place(e4, q, rem, p.dim);
    let e6 = step_place(e5, q, rem, p.dim);
    let e7 = step_place(e6, q, rem, p.dim);
    // 8 id loads, then 8 table loads, then the stores.
    let ia = vec4<u32>(ids[e0.x], ids[e1.x], ids[e2.x], ids[e3.x]);
    let ib = vec4<u32>(ids[e4.x], ids[e5.x], ids[e6.x], ids[e7.x]);
    let a = vec4<f32>(fetch(ia.x, e0.y), fetch(ia.y, e1.y), fetch(ia.z, e2.y), fetch(ia.w, e3.y));
    let b = vec4<f32>(fetch(ib.x, e4.y), fetch(ib.y, e5.y), fetch(ib.z, e6.y), fetch(ib.w, e7.y));
    out[lo.x] = a.x;
    out[lo.y] = a.y;
    out[lo.z] = a.z;
    out[lo.w] = a.w;
    out[hi.x] = b.x;
    out[hi.y] = b.y;
    out[hi.z] = b.z;
    out[hi.w] = b.w;
}

fn ew_one(j: u32) {
    let r = j / p.dim;
    out[j] = fetch(ids[r], j - r * p.dim);
}

// --- KERNEL: embed_lookup ---
// `out[r, c] = table[ids[r], c]` for r < p.rows, c < p.dim; a row whose id is ≥ p.vocab is
// all zeros. `ids [rows]` (u32), `table [vocab, dim]` (f32), `out [rows, dim]` (f32).
// Overwrites `out` (the first rows·dim elements; the rest untouched).
// Grid: one workgroup per 2048 output elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.rows * p.dim, EW_CHUNK))
// @requires len(ids) >= p.rows
// @requires len(table) >= p.vocab * p.dim
// @requires len(out) >= p.rows * p.dim
struct Params {
    rows: u32,
    dim: u32,
    vocab: u32,
}
@group(0) @binding(0) var<storage, read> ids: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn table_at(i: u32) -> f32 {
    return table[i];
}

@compute @workgroup_size(WG)
fn embed_lookup(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.rows * p.dim);
}

// --- KERNEL: embed_lookup_w16 ---
// `embed_lookup` with an f16 table: `out[r, c] = f32(table[ids[r], c])`, zeros for ids ≥
// p.vocab. `ids [rows]` (u32), `table [vocab, dim]` (f16), `out [rows, dim]` (f32).
// Overwrites `out`. Needs SHADER_F16.
// Grid: one workgroup per 2048 output elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.rows * p.dim, EW_CHUNK))
// @requires len(ids) >= p.rows
// @requires len(table) >= p.vocab * p.dim
// @requires len(out) >= p.rows * p.dim
struct Params {
    rows: u32,
    dim: u32,
    vocab: u32,
}
@group(0) @binding(0) var<storage, read> ids: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<f16>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn table_at(i: u32) -> f32 {
    return f32(table[i]);
}

@compute @workgroup_size(WG)
fn embed_lookup_w16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    elementwise(wid, nwg, tid, p.rows * p.dim);
}

// --- KERNEL: embed_backward ---
// `d_table[v, c] += Σ_{r : ids[r] = v} d_out[r, c]`, the sum taken in increasing r, for
// v < p.vocab, c < p.dim. Ids ≥ p.vocab are ignored. `d_out [rows, dim]` (f32), `ids [rows]`
// (u32), `d_table [vocab, dim]` (f32). Accumulates into `d_table` (+=): the output head is tied
// to the embedding, so `d_table` also holds the head's gradient. Rows of `d_table` whose id
// does not occur are not written. Deterministic (no atomics on floats; the order of the sum
// is fixed), bit for bit from run to run.
// Grid: one workgroup per (vocabulary row v, chunk of BWD_COLS = 1024 columns), w = v·chunks +
// chunk, 1-D (2-D past the device's limit). Each workgroup walks all ids in steps of 256: each
// invocation tests one id and sets its bit in a 256-bit workgroup mask (atomicOr on u32
// words: the result does not depend on the order), then every invocation walks the set bits in
// increasing position and adds dOut[r, c] for its BWD_PER = 4 columns into registers; the
// registers are added to `d_table` once at the end. Masks rotate over three buffers, so one
// barrier per step suffices.
// Cost: V·⌈D/1024⌉·rows id reads (coalesced; ⌈rows/256⌉ steps per workgroup, each one id per
// invocation, 8 mask-word reads and one barrier) plus rows·D reads of dOut and at most V·D
// read-modify-writes of d_table. For the trainer (V = 256, D ≤ 1024) that is 256·rows id
// reads; for V = 50k, rows = 16k it is 8·10⁸ cached u32 reads (3.2 GB from L2/L1, a
// fraction of a millisecond to a few ms on a discrete GPU). Far larger V·rows would want a
// sort-based form (counting sort of the ids, then segment sums).
// @grid workgroups(p.vocab * ceil_div(p.dim, BWD_COLS))
// @requires len(d_out) >= p.rows * p.dim
// @requires len(ids) >= p.rows
// @requires len(d_table) >= p.vocab * p.dim
// @accumulates d_table
struct Params {
    rows: u32,
    dim: u32,
    vocab: u32,
}
@group(0) @binding(0) var<storage, read> d_out: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_table: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// Three rotating 256-bit masks: step t sets mask t % 3, reads it after the barrier, and clears
// mask (t + 2) % 3 (last read in step t − 1, which every invocation finished before this
// step's barrier; next set in step t + 2, after the barrier of step t + 1).
var<workgroup> sh_mask: array<array<atomic<u32>, BWD_WORDS>, 3>;

@compute @workgroup_size(WG)
fn embed_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    let chunks = (p.dim + BWD_COLS - 1u) / BWD_COLS;
    // Whole workgroups past the end leave together: control flow stays uniform.
    if (w >= p.vocab * chunks) {
        return;
    }
    let v = w / chunks;
    let col0 = (w - v * chunks) * BWD_COLS + tid;

    if (tid < 3u * BWD_WORDS) {
        atomicStore(&sh_mask[tid / BWD_WORDS][tid % BWD_WORDS], 0u);
    }
    workgroupBarrier();

    var acc = array<f32, BWD_PER>(0.0, 0.0, 0.0, 0.0);
    var hits = 0u;
    let steps = (p.rows + WG - 1u) / WG;
    for (var t = 0u; t < steps; t++) {
        let buf = t % 3u;
        let base = t * WG;
        let r = base + tid;
        if (r < p.rows && ids[r] == v) {
            atomicOr(&sh_mask[buf][tid / 32u], 1u << (tid % 32u));
        }
        workgroupBarrier();
        if (tid < BWD_WORDS) {
            atomicStore(&sh_mask[(t + 2u) % 3u][tid], 0u);
        }
        for (var k = 0u; k < BWD_WORDS; k++) {
            var bits = atomicLoad(&sh_mask[buf][k]);
            hits += countOneBits(bits);
            while (bits != 0u) {
                let row = base + k * 32u + countTrailingZeros(bits);
                bits &= bits - 1u;
                let src = row * p.dim;
                for (var j = 0u; j < BWD_PER; j++) {
                    let c = col0 + j * WG;
                    if (c < p.dim) {
                        acc[j] += d_out[src + c];
                    }
                }
            }
        }
    }

    // `hits` is the same in every invocation (all read the same masks).
    if (hits > 0u) {
        let dst = v * p.dim;
        for (var j = 0u; j < BWD_PER; j++) {
            let c = col0 + j * WG;
            if (c < p.dim) {
                d_table[dst + c] += acc[j];
            }
        }
    }
}
