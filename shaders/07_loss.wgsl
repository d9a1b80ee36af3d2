// Cross-entropy loss over the rows of a row-major `[rows, v]` logits matrix (rows = B·S
// positions, v the vocabulary), with label smoothing and z-loss, fused with its gradient; and
// the deterministic sum of the per-row losses.
//
// For a row with target t < v, with lse = log Σ_j exp(l_j), p_j = exp(l_j − lse), smoothing ε,
// target distribution q_j = (1 − ε)·[j = t] + ε/v and z-loss coefficient z:
//   loss = −Σ_j q_j·log p_j + z·lse²  = lse − (1 − ε)·l_t − (ε/v)·Σ_j l_j + z·lse²
//   dloss/dl_j = p_j − q_j + 2·z·lse·p_j
// Rows whose target is ≥ v are ignored: loss 0, gradient 0.
//
// Precision: with s_o = Σ_{j≠t} exp(l_j − m) (m the row max), −log p_t = log(1 + s_o·e^(m−l_t))
// and p_t − 1 = −s_o / s are computed from s_o directly, so a confident correct prediction
// (loss ≈ 1e-7) keeps its relative accuracy instead of drowning in the rounding of 1 + s_o.

// log(1 + w) for w ≥ 0, accurate for tiny w too. WGSL has no log1p, and the (1 + w) − 1 trick
// may be folded away by compilers that reassociate, so small w use the series
// log(1 + w) = 2·atanh(y) = 2·(y + y³/3 + y⁵/5 + y⁷/7 + …), y = w / (2 + w) ≤ 1/9 (truncation
// below 1e-8 relative); larger w take log directly (relative error below 4e-7 there).
fn log1p_pos(w: f32) -> f32 {
    if (w < 0.25) {
        let y = w / (2.0 + w);
        let y2 = y * y;
        return 2.0 * y * (1.0 + y2 * (1.0 / 3.0 + y2 * (0.2 + y2 * (1.0 / 7.0))));
    }
    return log(1.0 + w);
}

// --- KERNEL: cross_entropy ---
// Cross-entropy with label smoothing and z-loss, one workgroup of 256 per row (grid
// `workgroups(rows)`, 2-D past 65535 rows). For a row r with t = targets[r] < v:
//   losses[r] = lse − (1 − ε)·l_t − (ε/v)·Σ_j l_j + z·lse²   (ε = p.smoothing, z = p.z_loss)
//   logits[r, j] ← grad_scale · ((1 + 2·z·lse)·softmax_j − (1 − ε)·[j = t] − ε/v)
// computed max-subtracted (finite for logits of any finite size). Rows with targets[r] ≥ v get
// `losses[r] = 0` and a zero gradient row. `grad_scale` scales the gradient only (not
// `losses`): pass 1 / (number of valid targets) for the gradient of the mean loss.
// Overwrites `logits[0 .. rows·v]` IN PLACE with dlogits, and `losses[0 .. rows]`.
// Race-free: every value an invocation reads that another invocation writes (the target logit,
// the row's max and sums) is read before the barrier that ends the last reduction, and after
// it each invocation overwrites only its own elements.
// @grid workgroups(p.rows)
// @requires len(logits) >= p.rows * p.v
// @requires len(targets) >= p.rows
// @requires len(losses) >= p.rows
struct Params {
    rows: u32,
    v: u32,
    smoothing: f32,
    z_loss: f32,
    grad_scale: f32,
}
@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<u32>;
@group(0) @binding(2) var<storage, read_write> losses: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn cross_entropy(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let row = flat_wg(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.v;
    // Read-only storage at a uniform index: the same for the whole workgroup.
    let t = targets[row];
    if (t >= p.v) {
        for (var j = tid; j < p.v; j += WG) {
            logits[base + j] = 0.0;
        }
        if (tid == 0u) {
            losses[row] = 0.0;
        }
        return;
    }
    // Phase 1: reads only. Every invocation reads the target logit itself, here, before any
    // invocation can pass the barriers below and start overwriting the row.
    let lt = logits[base + t];
    var mx = NEG_INF;
    for (var j = tid; j < p.v; j += WG) {
        mx = max(mx, logits[base + j]);
    }
    let m = wg_reduce_max(tid, mx);
    // Σ_{j≠t} exp(l_j − m) and Σ_j (l_j − m) (for the smoothing term).
    var so = 0.0;
    var sd = 0.0;
    for (var j = tid; j < p.v; j += WG) {
        let dl = logits[base + j] - m;
        so += select(exp(dl), 0.0, j == t);
        sd += dl;
    }
    let s_other = wg_reduce_sum(tid, so);
    let sum_shifted = wg_reduce_sum(tid, sd);
    // The reduction above ended with a barrier: every invocation has finished phase 1.

    let dt = lt - m; // ≤ 0
    let s = s_other + exp(dt); // Σ_j exp(l_j − m) ≥ 1
    // log s, via log1p when the target is the max (s = 1 + s_other).
    let log_s = select(log(s), log1p_pos(s_other), dt == 0.0);
    let lse = m + log_s;
    let eps = p.smoothing;
    let off = eps / f32(p.v);
    // Max-subtracted: lse − (1−ε)·l_t − (ε/v)·Σ l_j
    //   = (log s − (l_t − m)) + ε·(l_t − m) − (ε/v)·Σ (l_j − m).
    let loss = (log_s - dt) + eps * dt - off * sum_shifted + p.z_loss * lse * lse;

    // Phase 2: each invocation overwrites only its own elements (j ≡ tid mod 256).
    let inv_s = 1.0 / s;
    let zl = 2.0 * p.z_loss * lse;
    let pscale = (1.0 + zl) * inv_s;
    for (var j = tid; j < p.v; j += WG) {
        let e = exp(logits[base + j] - m);
        // j ≠ t: (1 + 2z·lse)·p_j − ε/v. j = t: p_t − 1 = −s_other / s exactly, so
        // (1 + 2z·lse)·p_t − (1 − ε) − ε/v = (2z·lse·e − s_other) / s + ε − ε/v.
        let g = select(e * pscale - off, (zl * e - s_other) * inv_s + eps - off, j == t);
        logits[base + j] = p.grad_scale * g;
    }
    if (tid == 0u) {
        losses[row] = loss;
    }
}

// --- KERNEL: sum_losses ---
// The sum of the per-row losses and the count of valid rows, for a mean loss:
//   out[0] = Σ_{i<n} losses[i],   out[1] = #{ i < n : targets[i] < p.v }  (as f32, exact
// below 2²⁴ rows). One workgroup (grid `workgroups(1)`), any n: invocation t sums
// i = t, t+256, … in order, then the workgroup reduction; the order is fixed, so the result is
// the same bits on every run. Overwrites `out[0..2]`. Each invocation loops ⌈n/256⌉ times:
// lavapipe, which stops an invocation's loops after 65535 iterations in all, is right up to
// about 16·10⁶ rows (real GPUs have no such limit).
// @grid workgroups(1)
// @requires len(losses) >= p.n
// @requires len(targets) >= p.n
// @requires len(out) >= 2
struct Params {
    n: u32,
    v: u32,
}
@group(0) @binding(0) var<storage, read> losses: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn sum_losses(@builtin(local_invocation_index) tid: u32) {
    var acc = 0.0;
    var count = 0u;
    for (var i = tid; i < p.n; i += WG) {
        acc += losses[i];
        count += select(0u, 1u, targets[i] < p.v);
    }
    let total = wg_reduce_sum(tid, acc);
    let valid = wg_reduce_sum(tid, f32(count));
    if (tid == 0u) {
        out[0] = total;
        out[1] = valid;
    }
}
