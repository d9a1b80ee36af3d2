// The f16 form of the flash-attention kernels (`flash_forward16`, `flash_backward_dkdv16`,
// `flash_backward_dq16`), mixed precision's: Q, K, V, dO in the f16x4 row layout (rows of
// H·Dh or Hkv·Dh halves, Dh % 4 == 0, so a head's dims are whole vec4s), staged as f16, P and
// dS rounded to f16 for the value products, everything else f32 (scores, softmax, lse, Δ, dS,
// every accumulator and output). Two variants of every kernel:
//   tensor cores (`//#if coop`, lib/flash_coop.wgsl): slices of 32 dims or rows padded by 8
//       halves, the 64 × 64 f32 block `fl_r` (68 floats a row) for the results; workgroup
//       memory 10 + 17 + 9 KiB (`fl_ps`) + the row values: 37 KiB, within the H200's 48 KiB;
//   portable (f32 FMAs on the same f16 operands, rounding where the tensor-core variant does):
//       slices of 16, no padding; 4 + 16 (`fl_r`, the forward only) + 8 KiB + the row values:
//       29 KiB, within lavapipe's 32 KiB.
//
// Hook of the including kernel: fn fl_vec(op: u32, i: u32) -> vec4<f16>, vec4 i of operand
// `op`'s binding (q, k, v, d_o).

//#if coop
const FL_DC: u32 = 32u;
const FL_KS: u32 = 32u;
const FL_LDS: u32 = 10u;
const FL_LDV: u32 = 18u;
const FL_LDT: u32 = 18u;
const FL_STAGE: u32 = 1280u;
const FL_LDR: u32 = 68u;
const FL_LDP: u32 = 72u;
// The largest workgroup memory of the tensor-core variants (the H200's limit: a kernel over it
// is not rejected by wgpu 30 and hung the driver).
const_assert FL_STAGE * 8u + 64u * FL_LDR * 4u + 64u * FL_LDP * 2u + 1024u <= 49152u;
// What `flash_attention::WORKGROUP_BYTES_COOP` says (the forward's; the backward needs 512 bytes
// less).
const_assert FL_STAGE * 8u + 64u * FL_LDR * 4u + 64u * FL_LDP * 2u + 1024u == 37888u;
//#else
const FL_DC: u32 = 16u;
const FL_KS: u32 = 16u;
const FL_LDS: u32 = 4u;
const FL_LDV: u32 = 16u;
const FL_LDT: u32 = 16u;
const FL_STAGE: u32 = 512u;
const FL_LDR: u32 = 64u;
const FL_LDP: u32 = 64u;
// What `flash_attention::WORKGROUP_BYTES_PORTABLE` says (the forward's), within lavapipe's 32 KiB.
const_assert FL_STAGE * 8u + 64u * FL_LDR * 4u + 64u * FL_LDP * 2u + 1024u == 29696u;
//#endif
const_assert FL_STAGE >= 2u * 64u * FL_LDS && FL_STAGE >= 64u * FL_LDS + FL_DC * FL_LDT && FL_STAGE >= FL_KS * FL_LDV;

var<workgroup> fl_st: array<vec4<f16>, FL_STAGE>;
var<workgroup> fl_r: array<f32, 64u * FL_LDR>;
var<workgroup> fl_ps: array<vec4<f16>, 16u * FL_LDP>;

fn fl_f32(v: vec4<f16>) -> vec4<f32> {
    return vec4<f32>(v);
}

// Vec4 d4 (dims 4·d4 … +3) of row `row` of `op` for the current (b, h); zeros past the sequence
// or the head dim.
fn fl_load(op: u32, row: u32, d4: u32) -> vec4<f16> {
    let dq = fl_head_dim() / 4u;
    let kv = op == FL_K || op == FL_V;
    let head = select(fl_b * p.seq * p.heads + row * p.heads + fl_h, fl_b * p.seq * p.kv_heads + row * p.kv_heads + fl_kvh, kv);
    let ok = row < p.seq && d4 < dq;
    return select(vec4<f16>(0.0h), fl_vec(op, select(0u, head * dq + d4, ok)), ok);
}

// The P/dS block, f16.
fn fl_ps_get(i: u32, j: u32) -> f32 {
    return f32(fl_ps[(i * FL_LDP + j) / 4u][j % 4u]);
}

// Rounded to f16 (P ≤ 1; a dS beyond ±65504 is clamped and raises the overflow flag).
fn fl_ps_put4(i: u32, j: u32, v: vec4<f32>) {
    fl_ps[(i * FL_LDP + j) / 4u] = vec4<f16>(clamp(v, vec4<f32>(-FL_F16_LIMIT), vec4<f32>(FL_F16_LIMIT)));
}

const FL_F16_LIMIT: f32 = 65504.0;

fn fl_put_p(i: u32, j: u32, v: vec4<f32>) {
    fl_ps_put4(i, j, v);
}

// The forward's products (lib/flash_fwd.wgsl): tensor cores when `coop`, else FMAs.
fn fl_fwd_scores(tid: u32, q0: u32, k0: u32, dh: u32, coop: bool) {
//#if coop
    if (coop) {
        fl_scores_coop(tid, FL_Q, q0, FL_K, k0, dh, p.scale);
        return;
    }
//#endif
    fl_scores_fma(tid, FL_Q, q0, FL_K, k0, dh);
    fl_tile_to_r(tid, p.scale);
}

fn fl_fwd_values(tid: u32, k0: u32, dh: u32, alpha: f32, coop: bool) {
//#if coop
    if (coop) {
        fl_values_coop(tid, 0u, k0, alpha);
        if (dh > 64u) {
            fl_values_coop(tid, 1u, k0, alpha);
        }
        if (dh > 128u) {
            fl_values_coop(tid, 2u, k0, alpha);
        }
        if (dh > 192u) {
            fl_values_coop(tid, 3u, k0, alpha);
        }
        return;
    }
//#endif
    fl_rescale(alpha);
    fl_values_all_fma(tid, false, false, FL_V, k0, dh);
}

// The backward's score product (lib/flash_bwd.wgsl) into `fl_s`.
fn fl_bwd_scores(tid: u32, xop: u32, x0: u32, yop: u32, y0: u32, dh: u32, coop: bool) {
//#if coop
    if (coop) {
        fl_scores_coop(tid, xop, x0, yop, y0, dh, 1.0);
        fl_tile_from_r(tid);
        return;
    }
//#endif
    fl_scores_fma(tid, xop, x0, yop, y0, dh);
}
