// 64-bit types: integers and floats, and 64-bit atomics.

// --- KERNEL: wide ---
// p[i] = a[i] · b[i] as u64 (the full product of two u32s), q[i] = i64(a[i]) − i64(b[i]),
// r[i] = f64(a[i]) / f64(b[i] + 1).
// @grid threads(len(a))
// @requires len(b) >= len(a)
// @requires len(p) >= len(a)
// @requires len(q) >= len(a)
// @requires len(r) >= len(a)
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> p: array<u64>;
@group(0) @binding(3) var<storage, read_write> q: array<i64>;
@group(0) @binding(4) var<storage, read_write> r: array<f64>;
@compute @workgroup_size(WG)
fn wide(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < arrayLength(&a)) {
        p[i] = u64(a[i]) * u64(b[i]);
        // Through u64: naga 30's SPIR-V sign-extends `i64(x)` of a u32 (measured on lavapipe).
        q[i] = i64(u64(a[i])) - i64(u64(b[i]));
        r[i] = f64(a[i]) / f64(b[i] + 1u);
    }
}

// --- KERNEL: wide_max ---
// top[0] = the largest a[i] · b[i] as u64, by a 64-bit atomic max (accumulates: start it at 0).
// @grid threads(len(a))
// @requires len(b) >= len(a)
// @accumulates top
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> top: atomic<u64>;
@compute @workgroup_size(WG)
fn wide_max(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&a)) {
        atomicMax(&top, u64(a[gid.x]) * u64(b[gid.x]));
    }
}
