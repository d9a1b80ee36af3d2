// Names that could break the macro: a file named `gen`, Rust keywords, names the macro
// generates, a user field named like generated padding.
const KERNELS: u32 = 2u;

// --- KERNEL: a ---
// Uses a struct named like kernel `b`, a struct named `Overrides` and an override.
struct b { v: vec3<f32>, _pad0: u32, n: u32 }
struct Overrides { k: u32 }
override gain: u32 = 1u;
@group(0) @binding(0) var<storage, read_write> rec: array<u32>;
@group(0) @binding(1) var<storage, read_write> rec_: array<u32>;
@group(0) @binding(2) var<uniform> None: b;
@group(0) @binding(3) var<uniform> o: Overrides;
@compute @workgroup_size(1)
fn a() {
    rec[0] = None.n + o.k + gain + KERNELS;
    rec_[0] = None._pad0;
}

// --- KERNEL: b ---
@group(0) @binding(0) var<storage, read_write> gen: array<u32>;
@compute @workgroup_size(1)
fn b() {
    gen[0] = KERNELS;
}

// --- KERNEL: gen ---
@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1)
fn gen() {
    y[0] = 1u;
}
