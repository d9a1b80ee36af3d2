// Activations of the feed-forward block: GELU (tanh approximation) and the SwiGLU combine.
//
// Element-wise, 1-D, several elements per invocation so that enough loads are in flight to
// cover the memory latency: workgroup `w` owns the EW_CHUNK = 2048 elements
// `[w·2048, (w+1)·2048)`, invocation `tid` handles `w·2048 + tid + k·256` for k = 0..7 (in each
// step consecutive invocations touch consecutive elements: coalesced), issuing all its loads
// before any store. Grid `workgroups(⌈n/2048⌉)`, 2-D past the device's workgroup limit
// (`flat_wg` recovers `w`); the last workgroup's invocations take a guarded loop, so nothing
// past `n` is read or written.
//
// Numerics: everything goes through a sigmoid computed from e = exp(−|z|) ∈ (0, 1], which
// never overflows: σ(z) = 1/(1+e) for z ≥ 0, e/(1+e) for z < 0. GELU's tanh form is rewritten
// with 0.5·(1 + tanh(u)) = σ(2u), so gelu(x) = x·σ(2u): no tanh, no Inf/NaN for any finite x
// (x = −10⁴ gives −0, x = 10⁴ gives 10⁴), and full relative accuracy in the negative tail where
// 1 + tanh(u) would cancel. A NaN input gives NaN.

// √(2/π) and the cubic coefficient of the tanh approximation.
const GELU_C: f32 = 0.7978845608028654;
const GELU_A: f32 = 0.044715;

// Elements per invocation (EW_PER) and per workgroup (EW_CHUNK).
const EW_PER: u32 = 8u;
const EW_CHUNK: u32 = 2048u;
const_assert EW_CHUNK == WG * EW_PER;
// Offsets of an invocation's elements from its first: steps 0..3 and 4..7.
const EW_LO: vec4<u32> = vec4<u32>(0u, WG, 2u * WG, 3u * WG);
const EW_HI: vec4<u32> = vec4<u32>(4u * WG, 5u * WG, 6u * WG, 7u * WG);

// σ(z), stable for every z.
fn sigmoid(z: f32) -> f32 {
    let e = exp(-abs(z));
    let r = 1.0 / (1.0 + e);
    return select(e * r, r, z >= 0.0);
}

// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) = x·σ(2·√(2/π)·(…)).
fn gelu(x: f32) -> f32 {
    let z = 2.0 * GELU_C * (x + GELU_A * x * x * x);
    return x * sigmoid(z);
}

// --- KERNEL: gelu_inplace ---
// `x[i] = gelu(x[i])` for i < p.n, tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). In place (overwrites `x[0..n]`).
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(x) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

fn gelu4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
}

@compute @workgroup_size(WG)
fn gelu_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let i = flat_wg(wid, nwg) * EW_CHUNK + tid;
    let lo = i + EW_LO;
    let hi = i + EW_HI;
    if (hi.w < p.n) {
        // All 8 loads first, then the stores.
        let a = gelu4(vec4<f32>(x[lo.x], x[lo.y], x[lo.z], x[lo.w]));
        let b = gelu4(vec4<f32>(x[hi.x], x[hi.y], x[hi.z], x[hi.w]));
        x[lo.x] = a.x;
        x[lo.y] = a.y;
        x[lo.z] = a.z;
        x[lo.w] = a.w;
        x[hi.x] = b.x;
        x[hi.y] = b.y;
        x[hi.z] = b.z;
        x[hi.w] = b.w;
    } else {
        for (var k = 0u; k < EW_PER; k++) {
            let j = i + k * WG;
            if (j < p.n) {
                x[j] = gelu(x[j]);
            }
        }
    }
}

// --- KERNEL: swiglu_combine ---
// `out[i] = silu(gate[i]) · up[i]` for i < p.n, silu(z) = z·σ(z). `gate`, `up`, `out`: n
// values each (typically [rows, F] flattened). Overwrites `out`.
// Grid: one workgroup per 2048 elements, 8 per invocation (file header).
// @grid workgroups(ceil_div(p.n, EW_CHUNK))
// @requires len(gate) >= p.n
// @requires len(up) >= p.n
// @requires len(out) >= p.n
struct Params {
    n: u32,
}
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// silu(g)·u, component-wise.
fn swiglu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    let s = vec4<f32>(sigmoid(g.x), sigmoid(g.y), sigmoid(g.z), sigmoid(g.w));
    return g * s * u;
}

@compute @workgroup_size(WG)
fn swiglu_combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let i = flat_wg(wid, nwg) * EW_CHUNK + tid;
    let lo = i + EW_LO;
    let hi = i + EW_HI;
    if (hi.w < p.n) {
        let ga = vec4<f32>(gate[lo.x], gate[lo.y], gate[lo.z], gate[lo.w]);
        let gb = vec4<f32>(gate[hi.x], gate[hi.y], gate[hi.z], gate[hi.w]);
        let ua = vec4<f32>(up[lo.x], up[lo.y], up[lo.z], up[lo.w]);
        let ub = vec4<f32>(up[hi.x], up[hi.y], up[hi.z], up[hi.w]);
        let a = swiglu4(ga, ua);
        let b = swiglu4(gb, ub);
        out[lo.x] = a.x;
        out[lo.y] = a.y;
        out[lo.z] = a.z;
        out[lo.w] = a.w;
        out[hi.x] = b.x;
        out[hi.y] = b.y;
        out[hi.z] = b.z;
        out[hi.w] = b.w;
    } else {
        for (var k = 0u; k < EW_PER; k++) {
            let j = i + k * WG;
            if (j < p.n) {
                out[j] = swiglu4(vec4<f32>(gate[j]), vec4<f32>(up[j])).x;
            }
        }
    }
}
