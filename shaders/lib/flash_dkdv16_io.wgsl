// The bindings and operand hooks of `flash_backward_dkdv16` and `flash_backward_dkdv16_tc`: one
// interface, two bodies (the sliced products of `lib/flash_bwd.wgsl` and the subgroup rows of
// `lib/flash_sg.wgsl`).
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
@group(0) @binding(3) var<storage, read> d_o: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> delta: array<f32>;
@group(0) @binding(6) var<storage, read_write> dk: array<f32>;
@group(0) @binding(7) var<storage, read_write> dv: array<f32>;
@group(0) @binding(8) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(9) var<uniform> p: Params;

fn fl_vec(op: u32, i: u32) -> vec4<f16> {
    switch op {
        case FL_Q: {
            return q[i];
        }
        case FL_K: {
            return k[i];
        }
        case FL_V: {
            return v[i];
        }
        default: {
            return d_o[i];
        }
    }
}

// dK (first) or dV (second) at key row `row`.
fn fl_store(second: bool, row: u32, col: u32, x: f32) {
    let at = ((fl_b * p.seq + row) * p.kv_heads + fl_kvh) * fl_head_dim() + col;
    if (second) {
        dv[at] = x;
    } else {
        dk[at] = x;
    }
}
