// Test kernels of `// @unchecked` (tests/unchecked.rs): modules created without wgpu's runtime
// checks, and the switch that puts the checks back.

// The longest row `circular_window` stages in workgroup memory.
const TILE: u32 = 256u;

// --- KERNEL: circular_window ---
// For every row r < p.rows and column c < p.cols of the row-major u32 matrix `x`:
// `y[r·cols + c] = (Σ_{k < p.window} x[r·cols + (c + k) mod cols]) / p.div`, the sum wrapping
// around the row (p.window may exceed p.cols) and the quotient rounded down. Overwrites `y`.
// Every index is in range by construction: the row is staged in `row` (p.cols ≤ TILE), the
// window's column is reduced mod p.cols, the private partial sums are indexed mod 4, and the
// divisor is checked before dispatch.
// @grid workgroups(p.rows)
// @requires len(x) >= p.rows * p.cols
// @requires len(y) >= p.rows * p.cols
// @requires p.cols <= TILE
// @requires p.div > 0
// @unchecked
struct Params {
    rows: u32,
    cols: u32,
    window: u32,
    div: u32,
}
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;
var<workgroup> row: array<u32, TILE>;

@compute @workgroup_size(WG)
fn circular_window(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let r = flat_wg(wid, nwg);
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
    for (var c = tid; c < p.cols; c += WG) {
        row[c] = x[base + c];
    }
    workgroupBarrier();
    for (var c = tid; c < p.cols; c += WG) {
        // Four partial sums, so that the private array is indexed by a computed value.
        var parts: array<u32, 4>;
        for (var k = 0u; k < p.window; k++) {
            parts[k % 4u] += row[(c + k) % p.cols];
        }
        y[base + c] = (parts[0] + parts[1] + parts[2] + parts[3]) / p.div;
    }
}

// --- KERNEL: out_of_range ---
// Tests the switch that puts the runtime checks back: its `@unchecked` does not hold for every
// argument, so the tests give it arguments out of range only on a context that checks every
// kernel. `out[0] = staged[q.at]` with `staged[i] = 100 + i` (8 entries), and
// `out[1] = q.num / q.den`. Overwrites `out[0..2]`. With wgpu's checks, an index past `staged`
// reads its last entry, and a zero divisor gives `q.num` itself.
// @grid workgroups(1)
// @requires len(out) >= 2
// @unchecked
struct Probe {
    at: u32,
    num: u32,
    den: u32,
}
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> q: Probe;
var<workgroup> staged: array<u32, 8>;

@compute @workgroup_size(8)
fn out_of_range(@builtin(local_invocation_index) tid: u32) {
    staged[tid] = 100u + tid;
    workgroupBarrier();
    if (tid == 0u) {
        out[0] = staged[q.at];
        out[1] = q.num / q.den;
    }
}
