// The f32 form of the flash-attention kernels (`flash_forward`, `flash_backward_dkdv`,
// `flash_backward_dq`): operands read as f32 and staged as f32, f32 FMA products (portable
// only: f32 accuracy is the point of this form, and tensor cores multiply f16), P and dS kept in
// f32. Workgroup memory: the staged slices 10 KiB (16 dims or rows a slice, rows padded by one
// vec4) + the 64 × 64 block `fl_r` 16 KiB (the forward's scores, then P in place; the
// backward's P, then dS) + the row values: 26.5–27 KiB, within lavapipe's 32 KiB (not a
// browser's guaranteed 16 KiB: there the streaming kernels run).
//
// Hook of the including kernel: fn fl_elem(op: u32, i: u32) -> f32, element i of operand `op`'s
// binding (q, k, v, d_o).

const FL_DC: u32 = 16u;
const FL_KS: u32 = 16u;
const FL_LDS: u32 = 5u;
const FL_LDV: u32 = 17u;
const FL_LDT: u32 = 17u;
const FL_STAGE: u32 = 640u;
const FL_LDR: u32 = 64u;
const_assert FL_STAGE >= 2u * 64u * FL_LDS && FL_STAGE >= 64u * FL_LDS + FL_DC * FL_LDT && FL_STAGE >= FL_KS * FL_LDV;
// Within `flash_attention::WORKGROUP_BYTES_PORTABLE` (staging, the block, the forward's row
// partials).
const_assert FL_STAGE * 16u + 4096u * 4u + 1024u <= 29696u;

var<workgroup> fl_st: array<vec4<f32>, FL_STAGE>;
var<workgroup> fl_r: array<f32, 4096>;

fn fl_f32(v: vec4<f32>) -> vec4<f32> {
    return v;
}

// Dims 4·d4 … +3 of row `row` of `op` for the current (b, h): Q, dO `[B, S, H, Dh]`, K, V
// `[B, S, Hkv, Dh]`; zeros past the sequence or the head dim.
fn fl_load(op: u32, row: u32, d4: u32) -> vec4<f32> {
    let dh = fl_head_dim();
    let d = 4u * d4;
    var v = vec4<f32>(0.0);
    if (row < p.seq && d < dh) {
        let kv = op == FL_K || op == FL_V;
        let head = select(fl_b * p.seq * p.heads + row * p.heads + fl_h, fl_b * p.seq * p.kv_heads + row * p.kv_heads + fl_kvh, kv);
        let at = head * dh + d;
        v.x = fl_elem(op, at);
        if (d + 1u < dh) {
            v.y = fl_elem(op, at + 1u);
        }
        if (d + 2u < dh) {
            v.z = fl_elem(op, at + 2u);
        }
        if (d + 3u < dh) {
            v.w = fl_elem(op, at + 3u);
        }
    }
    return v;
}

// P and dS (and the forward's scores) live in `fl_r`.
fn fl_ps_get(i: u32, j: u32) -> f32 {
    return fl_r[i * FL_LDR + j];
}

fn fl_ps_put4(i: u32, j: u32, v: vec4<f32>) {
    let at = i * FL_LDR + j;
    fl_r[at] = v.x;
    fl_r[at + 1u] = v.y;
    fl_r[at + 2u] = v.z;
    fl_r[at + 3u] = v.w;
}

fn fl_put_p(i: u32, j: u32, v: vec4<f32>) {
    fl_ps_put4(i, j, v);
}

// The forward's products (lib/flash_fwd.wgsl): P is written over the scores, in place.
fn fl_fwd_scores(tid: u32, q0: u32, k0: u32, dh: u32, coop: bool) {
    fl_scores_fma(tid, FL_Q, q0, FL_K, k0, dh);
    fl_tile_to_r(tid, p.scale);
}

fn fl_fwd_values(tid: u32, k0: u32, dh: u32, alpha: f32, coop: bool) {
    fl_rescale(alpha);
    fl_values_all_fma(tid, false, false, FL_V, k0, dh);
}

// The backward's score product (lib/flash_bwd.wgsl).
fn fl_bwd_scores(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, dh: u32, coop: bool) {
    fl_scores_fma(tid, xop, x0, yop, y0, dh);
}
