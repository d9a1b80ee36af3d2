// The optimizer step, entirely on the GPU (no readback): global gradient-norm clipping, then
// AdamW (f32 state or 8-bit state) on every parameter tensor. Each tensor is its own buffer.
//
// One step over T tensors, recorded in one batch:
//   1. for each tensor k: `reduce_norm_sq(g_k, partials, bad, {n_k, offset_k})`, with
//      offset_0 = 0 and offset_{k+1} = offset_k + ⌈n_k / NORM_BLOCK⌉ (NORM_BLOCK = 4096): the
//      host assigns each tensor its own range of partials in one shared buffer;
//   2. `finalize_grad_stats(partials, bad, stats, {count = Σ_k ⌈n_k / 4096⌉, max_norm})`;
//   3. for each tensor: `adamw_update(…, stats, …)` or `adamw_8bit_update(…, stats, …)`.
//
// `stats` (f32, 4 values, written by `finalize_grad_stats`, read by the updates):
//   stats[0] = norm² = Σ g² over every finite gradient value of every tensor,
//   stats[1] = clip scale = min(1, max_norm / (√norm² + 1e-6)); 1 when max_norm ≤ 0,
//   stats[2] = √norm² (the global gradient norm, for logging),
//   stats[3] = the number of non-finite (NaN or ±Inf) gradient values, as f32 (exact below 2²⁴).
// Non-finite gradient values are left out of the norm (the updates skip them too), and counted,
// so the trainer can flag or skip a step with stats[3] > 0 (e.g. for loss scaling) without a
// NaN norm poisoning every tensor's update. A finite |g| > 1.8e19 overflows g² to +Inf: the norm
// is then +Inf and the clip scale 0 (when clipping is on).
//
// Every result is deterministic: the order of every sum is fixed (per-block partials in a
// fixed order, then one fixed-order pass), no atomics.
//
// The updates (both forms) for each element i < n with raw gradient x = g[i]:
//   g[i] = 0                                    (always — even when skipped; see below)
//   if x is NaN or ±Inf: p, m, v of i unchanged (skipped)
//   else: gc = x · stats[1]
//         m = β1·m + (1−β1)·gc,  v = β2·v + (1−β2)·gc²
//         m̂ = m / bias1,  v̂ = v / bias2     (bias1 = 1−β1^t, bias2 = 1−β2^t from the host, t ≥ 1)
//         p = p − lr·(m̂ / (√v̂ + eps) + weight_decay·p)   (decoupled weight decay, old p)
// The gradient is zeroed after use in every case, so the backward pass of the next step can
// accumulate into it with `+=` without a separate clear.

// Gradient values each `reduce_norm_sq` workgroup folds into one partial (16 per invocation).
const NORM_BLOCK: u32 = 4096u;
// Values per 8-bit quantization block: one workgroup, one invocation per value.
const QBLOCK: u32 = 256u;

// --- KERNEL: reduce_norm_sq ---
// Partial sums of squares of one gradient tensor `g` (n values): workgroup b writes
// `partials[p.offset + b] = Σ g[i]²` over the finite values of its block
// `i ∈ [b·4096, min(n, (b+1)·4096))`, and `bad[p.offset + b]` = the number of NaN/±Inf values
// in the block (left out of the sum). Overwrites `partials[offset .. offset + ⌈n/4096⌉]` and
// `bad[offset .. offset + ⌈n/4096⌉]`; nothing else. The order inside a block is fixed (each
// invocation sums its 16 values in index order, then the workgroup reduction), so the result is
// the same bits on every run. Grid: one workgroup per block (2-D past the device's limit).
// @grid workgroups(ceil_div(p.n, NORM_BLOCK))
// @requires len(g) >= p.n
// @requires len(partials) >= p.offset + ceil_div(p.n, NORM_BLOCK)
// @requires len(bad) >= p.offset + ceil_div(p.n, NORM_BLOCK)
struct Params {
    n: u32,
    offset: u32,
}
@group(0) @binding(0) var<storage, read> g: array<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> bad: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn reduce_norm_sq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = flat_wg(wid, nwg);
    let blocks = (p.n + NORM_BLOCK - 1u) / NORM_BLOCK;
    // Whole workgroups past the end (2-D grid tail) leave together: control flow stays uniform.
    if (b >= blocks) {
        return;
    }
    let base = b * NORM_BLOCK;
    var acc = 0.0;
    var nonfinite = 0u;
    for (var k = 0u; k < NORM_BLOCK; k += WG) {
        let i = base + k + tid;
        if (i < p.n) {
            let x = g[i];
            if (is_finite(x)) {
                acc += x * x;
            } else {
                nonfinite += 1u;
            }
        }
    }
    let total = wg_reduce_sum(tid, acc);
    // At most 4096 per block: exact in f32.
    let total_bad = wg_reduce_sum(tid, f32(nonfinite));
    if (tid == 0u) {
        partials[p.offset + b] = total;
        bad[p.offset + b] = u32(total_bad);
    }
}

// --- KERNEL: finalize_grad_stats ---
// Sums `partials[0 .. p.count]` (and `bad[0 .. p.count]`) into the global gradient norm² and
// writes `stats` = [norm², clip scale, norm, non-finite count] (layout in the file header):
// clip scale = min(1, p.max_norm / (√norm² + 1e-6)), or 1 when p.max_norm ≤ 0 (clipping off).
// One workgroup; invocation t sums partials t, t+256, t+512, … in that order, then the fixed
// workgroup reduction: the same bits on every run. Overwrites `stats[0..4]`.
// @grid workgroups(1)
// @requires len(partials) >= p.count
// @requires len(bad) >= p.count
// @requires len(stats) >= 4
struct Params {
    count: u32,
    max_norm: f32,
}
@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read> bad: array<u32>;
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn finalize_grad_stats(@builtin(local_invocation_index) tid: u32) {
    var acc = 0.0;
    var nonfinite = 0u;
    for (var i = tid; i < p.count; i += WG) {
        acc += partials[i];
        nonfinite += bad[i];
    }
    let norm_sq = wg_reduce_sum(tid, acc);
    let total_bad = wg_reduce_sum(tid, f32(nonfinite));
    if (tid == 0u) {
        let norm = sqrt(norm_sq);
        var clip = 1.0;
        if (p.max_norm > 0.0) {
            clip = min(1.0, p.max_norm / (norm + 1e-6));
        }
        stats[0] = norm_sq;
        stats[1] = clip;
        stats[2] = norm;
        stats[3] = total_bad;
    }
}

// --- KERNEL: adamw_update ---
// One AdamW step of one tensor with f32 state (the update is in the file header): parameters
// `p`, gradient `g`, first and second moments `m`, `v`, n values each, the clip scale from
// `stats[1]`. Updates `p`, `m`, `v` in place (elements with a NaN/±Inf gradient keep theirs);
// overwrites `g[0..n]` with zeros in every case. Elements past n are untouched. Grid: one
// invocation per element (2-D past the device's limit). Element-wise: deterministic.
// @grid threads(h.n)
// @requires len(p) >= h.n
// @requires len(g) >= h.n
// @requires len(m) >= h.n
// @requires len(v) >= h.n
// @requires len(stats) >= 2
struct Params {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    // 1 − β1^t and 1 − β2^t for the step t ≥ 1 about to be taken, computed on the host.
    bias1: f32,
    bias2: f32,
}
@group(0) @binding(0) var<storage, read_write> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read> stats: array<f32>;
@group(0) @binding(5) var<uniform> h: Params;

@compute @workgroup_size(WG)
fn adamw_update(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_id(gid, nwg);
    if (i >= h.n) {
        return;
    }
    let x = g[i];
    g[i] = 0.0;
    if (!is_finite(x)) {
        return;
    }
    let gc = x * stats[1];
    let mi = h.beta1 * m[i] + (1.0 - h.beta1) * gc;
    let vi = h.beta2 * v[i] + (1.0 - h.beta2) * (gc * gc);
    m[i] = mi;
    v[i] = vi;
    let m_hat = mi / h.bias1;
    let v_hat = vi / h.bias2;
    let w = p[i];
    p[i] = w - h.lr * (m_hat / (sqrt(v_hat) + h.eps) + h.weight_decay * w);
}

// --- KERNEL: adamw_8bit_update ---
// The AdamW step of `adamw_update` with the moments stored in 8 bits, one block of 256 values
// per workgroup (block b = elements [256·b, min(n, 256·(b+1)))):
// - `mq[j]` packs the m codes of elements 4j..4j+3 (element 4j+k in byte k, little end first),
//   signed two's-complement codes q ∈ [−127, 127] with m = q · qscale[2b] / 127, where
//   qscale[2b] = max |m| over the block (absmax, symmetric: m has either sign).
// - `vq[j]` packs the v codes the same way, unsigned codes q ∈ [0, 255] of √v:
//   v = (q · qscale[2b+1] / 255)², where qscale[2b+1] = max √v over the block. Why √v: the
//   update divides by √v̂, and √v is in the units of the gradient like m, so the same linear
//   absmax grid gives m and √v the same relative resolution (an element whose m has a nonzero
//   code has a nonzero √v code too); a linear code of v itself would square the dynamic range
//   and flush every v below max v / 510 — i.e. |g| below max|g| / 23 — to 0, turning
//   m̂/(√v̂+eps) into m̂/eps. As a further guard a nonzero v never gets code 0 (code ≥ 1).
// - Rounding is to nearest, ties to even; codes are clamped to their range.
// Each step: dequantize, update in f32 exactly as `adamw_update` (the parameter update uses the
// fresh f32 m and v), then requantize the block against its new absmax. A skipped element
// (NaN/±Inf gradient) keeps its p and carries its dequantized m and v over unchanged, but they
// are requantized against the block's new scales like the rest. State starts as all zeros
// (codes and scales). Updates `p`, `mq`, `vq`, `qscale` in place; overwrites `g[0..n]` with
// zeros; the code bytes of a last partial word past n are written 0; words and scales past the
// last block are untouched. Grid: one workgroup per block, with the 2-D fallback past the
// device's limit (the block index comes from `flat_wg`, so tensors over 65535 × 256 =
// 16,776,960 values update every block). Deterministic (fixed-order block reductions).
// @grid workgroups(ceil_div(h.n, QBLOCK))
// @requires len(p) >= h.n
// @requires len(g) >= h.n
// @requires len(mq) >= ceil_div(h.n, 4)
// @requires len(vq) >= ceil_div(h.n, 4)
// @requires len(qscale) >= 2 * ceil_div(h.n, QBLOCK)
// @requires len(stats) >= 2
struct Params {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    // 1 − β1^t and 1 − β2^t for the step t ≥ 1 about to be taken, computed on the host.
    bias1: f32,
    bias2: f32,
}
@group(0) @binding(0) var<storage, read_write> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> mq: array<u32>;
@group(0) @binding(3) var<storage, read_write> vq: array<u32>;
@group(0) @binding(4) var<storage, read_write> qscale: array<f32>;
@group(0) @binding(5) var<storage, read> stats: array<f32>;
@group(0) @binding(6) var<uniform> h: Params;

// The new codes of the block: m code in bits 0..8, v code in bits 8..16.
var<workgroup> sh_codes: array<u32, QBLOCK>;

@compute @workgroup_size(WG)
fn adamw_8bit_update(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = flat_wg(wid, nwg);
    let blocks = (h.n + QBLOCK - 1u) / QBLOCK;
    // Whole workgroups past the end (2-D grid tail) leave together: control flow stays uniform.
    if (b >= blocks) {
        return;
    }
    let i = b * QBLOCK + tid;
    let m_scale = qscale[2u * b];
    let v_scale = qscale[2u * b + 1u];
    // Elements past n take part in the reductions as zeros.
    var mi = 0.0;
    var vi = 0.0;
    if (i < h.n) {
        let shift = (i % 4u) * 8u;
        let mcode = bitcast<i32>(((mq[i / 4u] >> shift) & 0xffu) << 24u) >> 24u;
        let vcode = (vq[i / 4u] >> shift) & 0xffu;
        mi = f32(mcode) * (m_scale / 127.0);
        let root = f32(vcode) * (v_scale / 255.0);
        vi = root * root;
        let x = g[i];
        g[i] = 0.0;
        if (is_finite(x)) {
            let gc = x * stats[1];
            mi = h.beta1 * mi + (1.0 - h.beta1) * gc;
            vi = h.beta2 * vi + (1.0 - h.beta2) * (gc * gc);
            let m_hat = mi / h.bias1;
            let v_hat = vi / h.bias2;
            let w = p[i];
            p[i] = w - h.lr * (m_hat / (sqrt(v_hat) + h.eps) + h.weight_decay * w);
        }
    }
    let root_v = sqrt(vi);
    let m_max = wg_reduce_max(tid, abs(mi));
    let r_max = wg_reduce_max(tid, root_v);
    let m_inv = select(0.0, 127.0 / m_max, m_max > 0.0);
    let r_inv = select(0.0, 255.0 / r_max, r_max > 0.0);
    let qm = i32(clamp(round(mi * m_inv), -127.0, 127.0));
    var qv = u32(clamp(round(root_v * r_inv), 0.0, 255.0));
    if (vi > 0.0) {
        qv = max(qv, 1u);
    }
    sh_codes[tid] = (bitcast<u32>(qm) & 0xffu) | (qv << 8u);
    // Every invocation has read its old code word (it fed the reductions above) before any is
    // rewritten below.
    workgroupBarrier();
    if (tid < QBLOCK / 4u) {
        let word = b * (QBLOCK / 4u) + tid;
        if (word * 4u < h.n) {
            var mw = 0u;
            var vw = 0u;
            for (var k = 0u; k < 4u; k++) {
                let c = sh_codes[4u * tid + k];
                mw |= (c & 0xffu) << (8u * k);
                vw |= ((c >> 8u) & 0xffu) << (8u * k);
            }
            mq[word] = mw;
            vq[word] = vw;
        }
    }
    if (tid == 0u) {
        qscale[2u * b] = m_max;
        qscale[2u * b + 1u] = r_max;
    }
}
