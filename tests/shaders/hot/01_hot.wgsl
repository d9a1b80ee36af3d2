// Kernels that tests/hot_reload.rs runs, edits (in a copy) under the running program, and runs
// again.

struct Params {
    n: u32,
    a: f32,
}

// --- KERNEL: affine ---
// y[i] = bias(x[i] · a), bias(v) = v + 1 in lib/bias.wgsl.
// @grid threads(p.n)
// @requires len(x) >= p.n
// @requires len(y) >= p.n
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn affine(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < p.n) {
        y[i] = bias(x[i] * p.a);
    }
}

// --- KERNEL: gain ---
// y[i] = x[i] · GAIN, GAIN an override: one pipeline per value.
// @grid threads(n)
// @requires len(x) >= n
// @requires len(y) >= n
override GAIN: f32 = 1.0;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> n: u32;

@compute @workgroup_size(WG)
fn gain(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < n) {
        y[i] = x[i] * GAIN;
    }
}
