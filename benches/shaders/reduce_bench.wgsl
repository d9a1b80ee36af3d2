// Benchmark kernels for the shared preamble's workgroup reductions.

// --- KERNEL: row_sum ---
// `out[r] = Σ_c x[r·len + c]`: one workgroup of 256 per row, strided loads, then one
// `wg_reduce_sum`. Overwrites out.
// @grid workgroups(p.rows)
// @requires len(x) >= p.rows * p.len
// @requires len(out) >= p.rows
struct Params { rows: u32, len: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn row_sum(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let r = flat_wg(wid, nwg);
    if (r >= p.rows) {
        return;
    }
    let base = r * p.len;
    var acc = 0.0;
    for (var c = tid; c < p.len; c += WG) {
        acc += x[base + c];
    }
    let total = wg_reduce_sum(tid, acc);
    if (tid == 0u) {
        out[r] = total;
    }
}
