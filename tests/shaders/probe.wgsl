// Test kernels: probes of the shared preamble's reductions and of the runtime's checks.

// --- KERNEL: reduce_probe ---
// Every invocation of every workgroup writes what the reductions return to it:
// `sums[w·256 + t] = Σ_t' v(t')`, `maxes[…] = max_t' −v(t')`, `sums2[…] = Σ_t' 2·v(t')` with
// `v(t) = vals[w·256 + t]`. Max and then two sums back to back test the trailing barrier.
// @grid workgroups(groups)
// @requires len(vals) >= groups * WG
// @requires len(sums) >= groups * WG
// @requires len(maxes) >= groups * WG
// @requires len(sums2) >= groups * WG
@group(0) @binding(0) var<storage, read> vals: array<f32>;
@group(0) @binding(1) var<storage, read_write> sums: array<f32>;
@group(0) @binding(2) var<storage, read_write> maxes: array<f32>;
@group(0) @binding(3) var<storage, read_write> sums2: array<f32>;
@group(0) @binding(4) var<uniform> groups: u32;

@compute @workgroup_size(WG)
fn reduce_probe(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = flat_wg(wid, nwg);
    if (w >= groups) {
        return;
    }
    let i = w * WG + tid;
    let v = vals[i];
    let m = wg_reduce_max(tid, -v);
    let s = wg_reduce_sum(tid, v);
    let s2 = wg_reduce_sum(tid, 2.0 * v);
    sums[i] = s;
    maxes[i] = m;
    sums2[i] = s2;
}

// --- KERNEL: subgroup_only ---
// Uses a subgroup operation directly, with no fallback: needs SUBGROUP.
// `out[i] = subgroupAdd(1)` (the subgroup size) for every invocation.
@group(0) @binding(0) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(WG)
fn subgroup_only(@builtin(global_invocation_id) gid: vec3<u32>) {
    let s = subgroupAdd(1u);
    if (gid.x < arrayLength(&out)) {
        out[gid.x] = s;
    }
}

// --- KERNEL: half_roundtrip ---
// `y[i] = f32(x[i])` over f16 input: needs SHADER_F16.
// @grid threads(n)
// @requires len(x) >= n
// @requires len(y) >= n
@group(0) @binding(0) var<storage, read> x: array<f16>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn half_roundtrip(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < n) {
        y[i] = f32(x[i]);
    }
}

// --- KERNEL: grid_probe ---
// The caller chooses the grid. Workgroup `w` (recovered from a 1-D or 2-D grid) writes
// `out[w] = w + 1` from its first invocation, for `w < n`; also counts visits in `hits`.
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> hits: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> n: u32;

@compute @workgroup_size(64)
fn grid_probe(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let w = wid.x + wid.y * nwg.x + wid.z * nwg.x * nwg.y;
    if (w < n && tid == 0u) {
        out[w] = w + 1u;
        atomicAdd(&hits[w], 1u);
    }
}

// --- KERNEL: tuned ---
// An override constant: `out[i] = SCALE * f32(i)` for `i < n`.
// @grid threads(n)
// @requires len(out) >= n
override SCALE: f32 = 1.0;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn tuned(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i < n) {
        out[i] = SCALE * f32(i);
    }
}

// --- KERNEL: fixed_probe ---
// A fixed-size binding: `slots` needs 4 elements whatever the call says. `slots[i] += 1`.
@group(0) @binding(0) var<storage, read_write> slots: array<u32, 4>;

@compute @workgroup_size(4)
fn fixed_probe(@builtin(local_invocation_index) i: u32) {
    slots[i] = slots[i] + 1u;
}
