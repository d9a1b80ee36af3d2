// Token embedding: lookup (f32 and f16 tables) and its backward into the table gradient.
//
// Shapes: token ids `ids [rows]` with rows = B·S (batch-major [B, S] flattened), table
// `[V, D]` row-major, activations `[rows, D]`. An id ≥ V is "no token": its lookup row is zero
// and its gradient is dropped.
//
// The lookups are element-wise over the rows·D output elements, 8 per invocation through
// `lib/elementwise.wgsl` (grid `workgroups(⌈rows·D/2048⌉)`, 2-D past the device's limit, so any
// number of rows works): each invocation issues its 8 id loads, then its 8 table loads, before
// any store. The two lookups share their body (below) and differ in the table's type.
//
// The backward is key-major, deterministic without float atomics: a workgroup owns (vocabulary
// row v, chunk of BWD_COLS columns) and sums the dOut rows whose id is v in position order. Its
// cost is the longest such chain of dependent adds, so the rows are cut into slices when the
// vocabulary alone gives too few workgroups to fill a GPU (the bytes tokenizer's 256, one byte
// in ~1/8 of all rows): `embed_backward_slices` writes one partial sum per (slice, v, column)
// and a hit count per (slice, v), `embed_backward_reduce` adds the slices in increasing order
// into d_table. With a large vocabulary `embed_backward` sums all rows at once into d_table.
// `kernels::embed::backward` picks the form (one entry point; the scratch is its `Scratch`).
// Within a step of BWD_STEP ids each workgroup marks the matching rows in a bit mask, then
// every invocation reads them four at a time: four independent row loads in flight, added in
// position order.
//#include "lib/elementwise.wgsl"

// Columns of the table gradient one backward workgroup owns: BWD_PER columns per invocation
// (col0 + j·WG, col0 = chunk·BWD_COLS + tid), WG · BWD_PER in all.
const BWD_PER: u32 = 4u;
const BWD_COLS: u32 = 1024u;
const_assert BWD_COLS == WG * BWD_PER;
// Ids one backward workgroup tests per step: BWD_IDS per invocation, a mask of BWD_WORDS 32-bit
// words (bit q % 32 of word q / 32 for the step's q-th id), and a summary word (index BWD_WORDS) whose bit k says that word k has a bit set, so a step without
// a match costs one workgroup-memory read.
const BWD_IDS: u32 = 4u;
const BWD_STEP: u32 = 1024u;
const BWD_WORDS: u32 = 32u;
const BWD_MASK: u32 = 33u;
const_assert BWD_STEP == WG * BWD_IDS;
const_assert BWD_WORDS * 32u == BWD_STEP;
const_assert BWD_MASK == BWD_WORDS + 1u;

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

// The backward's walk, shared by `embed_backward` and `embed_backward_slices`, which bind
// `d_out`, `ids` and `p` (rows, dim, vocab) alike.

// Three rotating masks: step t sets mask t % 3, reads it after the barrier, and clears mask
// (t + 2) % 3 (last read in step t − 1, which every invocation finished before this step's
// barrier; next set in step t + 2, after the barrier of step t + 1).
var<workgroup> sh_mask: array<array<atomic<u32>, BWD_MASK>, 3>;

// dOut[row, col0 + j·WG] for j < BWD_PER, 0 past the row's end.
fn bwd_row(row: u32, col0: u32) -> vec4<f32> {
    let src = row * p.dim + col0;
    var x = vec4<f32>(0.0);
    if (col0 < p.dim) {
        x.x = d_out[src];
    }
    if (col0 + WG < p.dim) {
        x.y = d_out[src + WG];
    }
    if (col0 + 2u * WG < p.dim) {
        x.z = d_out[src + 2u * WG];
    }
    if (col0 + 3u * WG < p.dim) {
        x.w = d_out[src + 3u * WG];
    }
    return x;
}

struct BwdSum {
    // Σ dOut[r, col0 + j·WG] over the matching rows, in increasing r (plus zeros, which change
    // nothing but the sign of a zero sum).
    acc: vec4<f32>,
    // How many rows matched (the same in every invocation of the workgroup).
    hits: u32,
}

// The sum over rows r in [r0, r1) with ids[r] == v (so never an id ≥ p.vocab) of this
// invocation's columns. Every invocation of the workgroup calls it together (barriers).
fn bwd_walk(tid: u32, v: u32, col0: u32, r0: u32, r1: u32) -> BwdSum {
    if (tid < 3u * BWD_MASK) {
        atomicStore(&sh_mask[tid / BWD_MASK][tid % BWD_MASK], 0u);
    }
    workgroupBarrier();
    var acc = vec4<f32>(0.0);
    var hits = 0u;
    let steps = (r1 - r0 + BWD_STEP - 1u) / BWD_STEP;
    for (var t = 0u; t < steps; t++) {
        let buf = t % 3u;
        let base = r0 + t * BWD_STEP;
        // This invocation's ids: positions q = k·WG + tid of the step (consecutive ids in
        // consecutive invocations), bit q % 32 of word q / 32.
        var words_hit = 0u;
        for (var k = 0u; k < BWD_IDS; k++) {
            let q = k * WG + tid;
            let r = base + q;
            if (r < r1 && ids[r] == v) {
                atomicOr(&sh_mask[buf][q / 32u], 1u << (q % 32u));
                words_hit |= 1u << (q / 32u);
            }
        }
        if (words_hit != 0u) {
            atomicOr(&sh_mask[buf][BWD_WORDS], words_hit);
        }
        workgroupBarrier();
        if (tid < BWD_MASK) {
            atomicStore(&sh_mask[(t + 2u) % 3u][tid], 0u);
        }
        var words = atomicLoad(&sh_mask[buf][BWD_WORDS]);
        while (words != 0u) {
            let k = countTrailingZeros(words);
            words &= words - 1u;
            var bits = atomicLoad(&sh_mask[buf][k]);
            hits += countOneBits(bits);
            let row0 = base + k * 32u;
            while (bits != 0u) {
                // The next four set bits in increasing position, their rows loaded before any
                // is added (where fewer are left, the missing ones are zero).
                let a = countTrailingZeros(bits);
                bits &= bits - 1u;
                let hb = bits != 0u;
                let b = countTrailingZeros(bits);
                bits &= bits - 1u;
                let hc = bits != 0u;
                let c = countTrailingZeros(bits);
                bits &= bits - 1u;
                let hd = bits != 0u;
                let d = countTrailingZeros(bits);
                bits &= bits - 1u;
                let xa = bwd_row(row0 + a, col0);
                var xb = vec4<f32>(0.0);
                var xc = vec4<f32>(0.0);
                var xd = vec4<f32>(0.0);
                if (hb) {
                    xb = bwd_row(row0 + b, col0);
                }
                if (hc) {
                    xc = bwd_row(row0 + c, col0);
                }
                if (hd) {
                    xd = bwd_row(row0 + d, col0);
                }
                acc += xa;
                acc += xb;
                acc += xc;
                acc += xd;
            }
        }
    }
    return BwdSum(acc, hits);
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
// is fixed), bit for bit from run to run. The form for a large vocabulary (see
// `kernels::embed::backward`, which picks it or the sliced pair).
// Grid: one workgroup per (vocabulary row v, chunk of BWD_COLS = 1024 columns), w = v·chunks +
// chunk, 1-D (2-D past the device's limit). Each workgroup walks all ids in steps of 1024 (file
// header): each invocation tests four ids (WG apart) and sets their bits in a 1024-bit workgroup
// mask (atomicOr on u32 words: the result does not depend on the order), then every invocation
// walks the set bits in increasing position, four rows at a time, adding dOut[r, c] for its
// BWD_PER = 4 columns into registers; the registers are added to `d_table` once at the end.
// Cost: V·⌈D/1024⌉·rows id reads (⌈rows/1024⌉ steps per workgroup, each four ids per
// invocation, one summary read, one barrier) plus rows·D reads of dOut and at most V·D
// read-modify-writes of d_table. For V = 50k, rows = 16k that is 8·10⁸ cached u32 reads (3.2 GB
// from L2/L1); far larger V·rows would want a sort-based form (counting sort of the ids, then
// segment sums).
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
    let s = bwd_walk(tid, v, col0, 0u, p.rows);
    // `hits` is the same in every invocation (all read the same masks).
    if (s.hits > 0u) {
        let dst = v * p.dim;
        for (var j = 0u; j < BWD_PER; j++) {
            let c = col0 + j * WG;
            if (c < p.dim) {
                d_table[dst + c] += s.acc[j];
            }
        }
    }
}

// --- KERNEL: embed_backward_slices ---
// The first half of the sliced embedding backward: for slice s of rows [s·p.slice_rows,
// min((s + 1)·p.slice_rows, p.rows)), `hits[s·V + v]` = the number of rows r of the slice with
// ids[r] = v and, where that is not 0, `partial[(s·V + v)·dim + c] = Σ_{r in slice, ids[r] = v}
// d_out[r, c]` in increasing r, for v < p.vocab = V, c < p.dim. Ids ≥ p.vocab are ignored.
// `d_out [rows, dim]` (f32), `ids [rows]` (u32), `partial [slices, vocab, dim]` (f32), `hits
// [slices, vocab]` (u32), slices = ⌈rows / slice_rows⌉. Overwrites `hits` and the rows of
// `partial` whose count is not 0 (the rest untouched: `embed_backward_reduce` reads only
// those). Deterministic, bit for bit from run to run.
// Grid: one workgroup per (slice s, vocabulary row v, chunk of BWD_COLS = 1024 columns), w =
// (s·V + v)·chunks + chunk, 1-D (2-D past the device's limit), each the walk of
// `embed_backward` over its slice; the chunk-0 workgroup writes the count.
// @grid workgroups(ceil_div(p.rows, p.slice_rows) * p.vocab * ceil_div(p.dim, BWD_COLS))
// @requires p.slice_rows >= 1
// @requires len(d_out) >= p.rows * p.dim
// @requires len(ids) >= p.rows
// @requires len(partial) >= ceil_div(p.rows, p.slice_rows) * p.vocab * p.dim
// @requires len(hits) >= ceil_div(p.rows, p.slice_rows) * p.vocab
struct Params {
    rows: u32,
    dim: u32,
    vocab: u32,
    slice_rows: u32,
}
@group(0) @binding(0) var<storage, read> d_out: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> partial: array<f32>;
@group(0) @binding(3) var<storage, read_write> hits: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn embed_backward_slices(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    let chunks = (p.dim + BWD_COLS - 1u) / BWD_COLS;
    let slices = (p.rows + p.slice_rows - 1u) / p.slice_rows;
    // Whole workgroups past the end leave together: control flow stays uniform.
    if (w >= slices * p.vocab * chunks) {
        return;
    }
    let sv = w / chunks;
    let chunk = w - sv * chunks;
    let sl = sv / p.vocab;
    let v = sv - sl * p.vocab;
    let col0 = chunk * BWD_COLS + tid;
    let r0 = sl * p.slice_rows;
    let s = bwd_walk(tid, v, col0, r0, min(r0 + p.slice_rows, p.rows));
    if (chunk == 0u && tid == 0u) {
        hits[sv] = s.hits;
    }
    // `hits` is the same in every invocation (all read the same masks).
    if (s.hits > 0u) {
        let dst = sv * p.dim;
        for (var j = 0u; j < BWD_PER; j++) {
            let c = col0 + j * WG;
            if (c < p.dim) {
                partial[dst + c] = s.acc[j];
            }
        }
    }
}

// --- KERNEL: embed_backward_reduce ---
// The second half of the sliced embedding backward: `d_table[v, c] += Σ_s partial[(s·V + v)·dim
// + c]` over the slices s < p.slices in increasing s whose `hits[s·V + v]` is not 0, for v <
// p.vocab = V, c < p.dim, and nothing where no slice has a hit. `partial [slices, vocab, dim]`
// (f32) and `hits [slices, vocab]` (u32) as `embed_backward_slices` leaves them, `d_table
// [vocab, dim]` (f32). Accumulates into `d_table` (+=); rows whose id does not occur are not
// written. With `embed_backward_slices` the embedding gradient is summed in increasing row
// within each slice, then over the slices in order: deterministic, bit for bit.
// Grid: one invocation per element of d_table, one workgroup per WG = 256 elements.
// @grid workgroups(ceil_div(p.vocab * p.dim, WG))
// @requires len(partial) >= p.slices * p.vocab * p.dim
// @requires len(hits) >= p.slices * p.vocab
// @requires len(d_table) >= p.vocab * p.dim
// @accumulates d_table
struct Params {
    dim: u32,
    vocab: u32,
    slices: u32,
}
@group(0) @binding(0) var<storage, read> partial: array<f32>;
@group(0) @binding(1) var<storage, read> hits: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_table: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn embed_backward_reduce(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let i = flat_id(gid, nwg);
    let n = p.vocab * p.dim;
    if (i >= n) {
        return;
    }
    let v = i / p.dim;
    var sum = 0.0;
    var any = false;
    for (var s = 0u; s < p.slices; s++) {
        if (hits[s * p.vocab + v] != 0u) {
            sum += partial[s * n + i];
            any = true;
        }
    }
    if (any) {
        d_table[i] += sum;
    }
}
