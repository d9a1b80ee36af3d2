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
@group(0) @binding(5) var<uniform> p: Params;

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

fn fl_store(second: bool, row: u32, col: u32, x: f32) {
    o[((fl_b * p.seq + row) * p.heads + fl_h) * fl_head_dim() + col] = x;
}
