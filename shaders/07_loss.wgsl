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
//
// Memory traffic: the row is read twice and written once. Pass 1 computes the max and s_o
// together (online: each invocation keeps its running max and its sum relative to it, rescaled
// by exp(old max − new max) when the max grows); pass 2 writes the gradient. Each invocation
// takes the row's columns tid + k·256 in chunks of 8 (k = 0..7 per chunk of 2048 columns:
// consecutive invocations on consecutive columns), loading a chunk's 8 logits before using any
// and the next chunk's while it folds in or writes the current one (16 loads in flight), so
// enough loads are in flight to cover the memory latency; the first chunk (all of a row of
// v ≤ 2048) stays in registers from pass 1 to pass 2, so such rows are read only once.

// Columns per chunk: 8 per invocation.
const CHUNK: u32 = 2048u;
const_assert CHUNK == 8u * WG;
// Offsets of an invocation's 8 columns in a chunk from its first: steps 0..3 and 4..7.
const STEP_LO: vec4<u32> = vec4<u32>(0u, WG, 2u * WG, 3u * WG);
const STEP_HI: vec4<u32> = vec4<u32>(4u * WG, 5u * WG, 6u * WG, 7u * WG);

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
// Two reads and one write of the row (file header): pass 1 reads, pass 2 overwrites.
// Race-free: every value an invocation reads that another invocation writes (the target logit,
// and everything behind the row's max and sum) is read in pass 1, before the barrier that ends
// the sum's reduction; in pass 2 each invocation reads and overwrites only its own elements
// (columns ≡ tid mod 256), and the reduction after pass 2 sums registers.
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

// Logits at columns j of the row starting at `base`, 0 past v.
fn load_row(base: u32, j: vec4<u32>) -> vec4<f32> {
    var l = vec4<f32>(0.0);
    if (j.x < p.v) {
        l.x = logits[base + j.x];
    }
    if (j.y < p.v) {
        l.y = logits[base + j.y];
    }
    if (j.z < p.v) {
        l.z = logits[base + j.z];
    }
    if (j.w < p.v) {
        l.w = logits[base + j.w];
    }
    return l;
}

// `l` into columns j (those below v) of the row starting at `base`.
fn store_row(base: u32, j: vec4<u32>, l: vec4<f32>) {
    if (j.x < p.v) {
        logits[base + j.x] = l.x;
    }
    if (j.y < p.v) {
        logits[base + j.y] = l.y;
    }
    if (j.z < p.v) {
        logits[base + j.z] = l.z;
    }
    if (j.w < p.v) {
        logits[base + j.w] = l.w;
    }
}

// One online step of pass 1: `st` = (running max m, Σ_{j≠t} exp(l_j − m) so far) after the
// logits `a` at columns `ja` and `b` at `jb` (columns ≥ v ignored).
fn online(st: vec2<f32>, a: vec4<f32>, b: vec4<f32>, ja: vec4<u32>, jb: vec4<u32>, t: u32) -> vec2<f32> {
    let va = ja < vec4<u32>(p.v);
    let vb = jb < vec4<u32>(p.v);
    let mab = max(select(vec4<f32>(NEG_INF), a, va), select(vec4<f32>(NEG_INF), b, vb));
    let m = max(st.x, max(max(mab.x, mab.y), max(mab.z, mab.w)));
    // Lanes past v may hold exp of anything (even +Inf): select drops them.
    let ea = select(vec4<f32>(0.0), exp(a - m), va & (ja != vec4<u32>(t)));
    let eb = select(vec4<f32>(0.0), exp(b - m), vb & (jb != vec4<u32>(t)));
    let e = ea + eb;
    // exp(old max − m) ≤ 1; 0 while nothing was seen (old max NEG_INF, sum 0).
    return vec2<f32>(m, fma(st.y, exp(st.x - m), (e.x + e.y) + (e.z + e.w)));
}

// What pass 2 needs of the row, besides the logits.
struct Row {
    // The row max, the target column.
    m: f32,
    t: u32,
    // (1 + 2z·lse) / s, 2z·lse, 1 / s, s_other, ε, ε/v, grad_scale.
    pscale: f32,
    zl: f32,
    inv_s: f32,
    s_other: f32,
    eps: f32,
    off: f32,
    scale: f32,
}

// The gradients of the logits `l` at columns `j`:
// j ≠ t: (1 + 2z·lse)·p_j − ε/v. j = t: p_t − 1 = −s_other / s exactly, so
// (1 + 2z·lse)·p_t − (1 − ε) − ε/v = (2z·lse·e − s_other) / s + ε − ε/v.
fn grad4(l: vec4<f32>, j: vec4<u32>, r: Row) -> vec4<f32> {
    let e = exp(l - r.m);
    let g = select(e * r.pscale - r.off, (r.zl * e - r.s_other) * r.inv_s + r.eps - r.off, j == vec4<u32>(r.t));
    return r.scale * g;
}

// sd + Σ (l_j − m) over the components of `l` whose column is below v, in order.
fn add_shifted(sd: f32, l: vec4<f32>, j: vec4<u32>, m: f32) -> f32 {
    let dl = select(vec4<f32>(0.0), l - m, j < vec4<u32>(p.v));
    return sd + dl.x + dl.y + dl.z + dl.w;
}

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
    let j_lo = tid + STEP_LO;
    let j_hi = tid + STEP_HI;
    // Read-only storage at a uniform index: the same for the whole workgroup.
    let t = targets[row];
    // Pass 1 (reads only). The first chunk, which stays in registers for pass 2, and the
    // second are loaded before t arrives (an ignored row reads them for nothing; each invocation
    // reads only its own columns, so the zeroing below races with nothing).
    let a0 = load_row(base, j_lo);
    let b0 = load_row(base, j_hi);
    var na = load_row(base, CHUNK + j_lo);
    var nb = load_row(base, CHUNK + j_hi);
    if (t >= p.v) {
        for (var c = 0u; c < p.v; c += CHUNK) {
            store_row(base, c + j_lo, vec4<f32>(0.0));
            store_row(base, c + j_hi, vec4<f32>(0.0));
        }
        if (tid == 0u) {
            losses[row] = 0.0;
        }
        return;
    }
    // Every invocation reads the target logit itself, here, before any invocation can pass the
    // barriers below and start overwriting the row.
    let lt = logits[base + t];
    var st = online(vec2<f32>(NEG_INF, 0.0), a0, b0, j_lo, j_hi, t);
    // Chunk c is folded in while chunk c + 1 is already being loaded (software pipelining:
    // 16 loads in flight per invocation).
    for (var c = CHUNK; c < p.v; c += CHUNK) {
        let a = na;
        let b = nb;
        na = load_row(base, c + CHUNK + j_lo);
        nb = load_row(base, c + CHUNK + j_hi);
        st = online(st, a, b, c + j_lo, c + j_hi, t);
    }
    let m = wg_reduce_max(tid, st.x);
    // Σ_{j≠t} exp(l_j − m): each invocation's sum moved from its own max to the row's
    // (exp(st.x − m) ≤ 1; an invocation that saw no column contributes 0).
    let s_other = wg_reduce_sum(tid, st.y * exp(st.x - m));
    // The reduction above ended with a barrier: every invocation has finished pass 1.

    let dt = lt - m; // ≤ 0
    let s = s_other + exp(dt); // Σ_j exp(l_j − m) ≥ 1
    // log s, via log1p when the target is the max (s = 1 + s_other).
    let log_s = select(log(s), log1p_pos(s_other), dt == 0.0);
    let lse = m + log_s;
    let eps = p.smoothing;
    let off = eps / f32(p.v);
    let inv_s = 1.0 / s;
    let zl = 2.0 * p.z_loss * lse;
    let r = Row(m, t, (1.0 + zl) * inv_s, zl, inv_s, s_other, eps, off, p.grad_scale);

    // Pass 2: each invocation overwrites only its own elements (columns ≡ tid mod 256), and
    // sums its Σ (l_j − m) (for the smoothing term) in increasing column order.
    // The second chunk is loaded again (own columns only, not yet written) before the first
    // is stored, and each later one while the one before it is written.
    na = load_row(base, CHUNK + j_lo);
    nb = load_row(base, CHUNK + j_hi);
    store_row(base, j_lo, grad4(a0, j_lo, r));
    store_row(base, j_hi, grad4(b0, j_hi, r));
    var sd = add_shifted(add_shifted(0.0, a0, j_lo, m), b0, j_hi, m);
    for (var c = CHUNK; c < p.v; c += CHUNK) {
        let a = na;
        let b = nb;
        na = load_row(base, c + CHUNK + j_lo);
        nb = load_row(base, c + CHUNK + j_hi);
        store_row(base, c + j_lo, grad4(a, c + j_lo, r));
        store_row(base, c + j_hi, grad4(b, c + j_hi, r));
        sd = add_shifted(add_shifted(sd, a, c + j_lo, m), b, c + j_hi, m);
    }
    let sum_shifted = wg_reduce_sum(tid, sd);
    // Max-subtracted: lse − (1−ε)·l_t − (ε/v)·Σ l_j
    //   = (log s − (l_t − m)) + ε·(l_t − m) − (ε/v)·Σ (l_j − m).
    let loss = (log_s - dt) + eps * dt - off * sum_shifted + p.z_loss * lse * lse;
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
