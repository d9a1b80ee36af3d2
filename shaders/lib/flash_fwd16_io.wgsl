// The bindings and operand hooks of `flash_forward16` and `flash_forward16_tc`: one
// interface, two bodies (the sliced products of `lib/flash_fwd.wgsl` and the resident ones of
// `lib/flash_fwd_tc.wgsl`).
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> q: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;
@group(0) @binding(5) var<storage, read_write> o16: array<vec4<f16>>;
@group(0) @binding(6) var<uniform> p: Params;

fn fl_vec(op: u32, i: u32) -> vec4<f16> {
    switch op {
        case FL_Q: {
            return q[i];
        }
        case FL_K: {
            return k[i];
        }
        default: {
            return v[i];
        }
    }
}

// O and its f16 copy (the output projection's operand), element by element; an invocation
// writes all four elements of each vec4 it touches. O is a weighted mean of V's f16 values, so
// inside f16's range, where `cast::cast_f16x4`'s clamp changes nothing: the same bits as that
// cast of O.
fn fl_store(second: bool, row: u32, col: u32, x: f32) {
    let at = ((fl_b * p.seq + row) * p.heads + fl_h) * fl_head_dim() + col;
    o[at] = x;
    o16[at / 4u][at % 4u] = f16(x);
}
