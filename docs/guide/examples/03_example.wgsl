// 03_example.wgsl — text before the first marker is the file preamble.
const TILE: u32 = 64u;

// --- KERNEL: scale_rows ---
// Multiplies each row of the rows × cols matrix `m` by `s[row]`. In place.
// @grid workgroups(p.rows)
// @requires len(m) >= p.rows * p.cols
// @requires len(s) >= p.rows
struct Params { rows: u32, cols: u32 }
@group(0) @binding(0) var<storage, read_write> m: array<f32>;
@group(0) @binding(1) var<storage, read> s: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn scale_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) tid: u32) {
    let row = flat_wg(wid, nwg);
    if (row >= p.rows) { return; }
    for (var c = tid; c < p.cols; c += WG) { m[row * p.cols + c] *= s[row]; }
}
