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
//
// `cross_entropy_f16` is the loss head of mixed precision: pass 1 is cross_entropy's (the same
// columns per invocation, the same online steps and reductions, so the same row statistics to
// the bit), and pass 2 writes dlogits × the loss scale straight to f16 in the f16x4 row layout,
// each invocation owning whole vec4 groups of 4 consecutive columns, in place of cross_entropy,
// `optimizer::scale_by_state` and `cast::cast_grad_f16x4` (four passes over the row). Its logits
// are read only. The helpers below serve both kernels; they name the bindings `logits` and `p`
// (with `p.v`), which both declare.

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
    // For the loss: l_t − m, log s, lse.
    dt: f32,
    log_s: f32,
    lse: f32,
}

// Pass 1 over the row starting at `base`, whose target t is below v (reads only): the row
// statistics. `a0`, `b0` are the invocation's first chunk (columns tid + STEP_LO, tid + STEP_HI)
// and `na0`, `nb0` its second, already loaded. Every invocation reads the target logit itself,
// first, so that all its reads of the row come before the barrier that ends the sum's
// reduction (cross_entropy overwrites the row after it). Ends with that barrier.
fn row_stats(base: u32, tid: u32, t: u32, a0: vec4<f32>, b0: vec4<f32>, na0: vec4<f32>, nb0: vec4<f32>) -> Row {
    let j_lo = tid + STEP_LO;
    let j_hi = tid + STEP_HI;
    let lt = logits[base + t];
    var na = na0;
    var nb = nb0;
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

    let dt = lt - m; // ≤ 0
    let s = s_other + exp(dt); // Σ_j exp(l_j − m) ≥ 1
    // log s, via log1p when the target is the max (s = 1 + s_other).
    let log_s = select(log(s), log1p_pos(s_other), dt == 0.0);
    let lse = m + log_s;
    let eps = p.smoothing;
    let off = eps / f32(p.v);
    let inv_s = 1.0 / s;
    let zl = 2.0 * p.z_loss * lse;
    return Row(m, t, (1.0 + zl) * inv_s, zl, inv_s, s_other, eps, off, p.grad_scale, dt, log_s, lse);
}

// The row's loss from its statistics and Σ_j (l_j − m) (`sum_shifted`). Max-subtracted:
// lse − (1−ε)·l_t − (ε/v)·Σ l_j = (log s − (l_t − m)) + ε·(l_t − m) − (ε/v)·Σ (l_j − m).
fn row_loss(r: Row, sum_shifted: f32) -> f32 {
    return (r.log_s - r.dt) + r.eps * r.dt - r.off * sum_shifted + p.z_loss * r.lse * r.lse;
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
    let r = row_stats(base, tid, t, a0, b0, na, nb);
    let m = r.m;
    // row_stats ended with a barrier: every invocation has finished pass 1.

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
    let loss = row_loss(r, wg_reduce_sum(tid, sd));
    if (tid == 0u) {
        losses[row] = loss;
    }
}

// --- KERNEL: cross_entropy_f16 ---
// The loss head of mixed precision: cross_entropy's losses and gradient (same Params, same
// definitions, ignored rows too) with the gradient times the loss scale S = state[0] written
// as f16 in the f16x4 row layout, and the loss scaler's overflow check — in one pass, what
// `cross_entropy`, `optimizer::scale_by_state` and `cast::cast_grad_f16x4` do in three. For a
// row r with t = targets[r] < v (one workgroup of 256 per row, grid `workgroups(rows)`, 2-D past
// 65535 rows):
//   losses[r] = cross_entropy's losses[r]
//   dlogits[r][c] = f16(clamp(d_c, ±65504)) for the 4 columns c of each vec4 (d = 0 past v:
//   every row zero-padded to a multiple of 4), d_j = (cross_entropy's dlogit_j) · S
// and `flag[0]` set to 1 (never cleared) when any d_j is NaN, ±Inf or beyond ±65504: the bits
// and the rule of the three kernels in a row, since pass 1 is cross_entropy's (the same row
// statistics) and each dlogit is the same expression, multiplied by S after grad_scale as
// scale_by_state multiplies the stored value. The loss is cross_entropy's bit for bit when
// ε = 0; with smoothing, Σ_j (l_j − m) is summed in pass 2's column order instead (a rounding
// apart). Rows with targets[r] ≥ v: `losses[r] = 0` and a zero f16 row.
// Reads `logits` only (left as they are), twice: pass 1 as cross_entropy's; pass 2 each
// invocation owns vec4 groups g = tid + 256·k of the row (columns 4g .. 4g + 3), two per step
// with the next two already loading, and writes each group once (8 bytes).
// Overwrites `losses[0 .. rows]` and `dlogits[0 .. rows·⌈v/4⌉]`; ORs `flag[0]`. Needs SHADER_F16.
// @grid workgroups(p.rows)
// @requires len(logits) >= p.rows * p.v
// @requires len(targets) >= p.rows
// @requires len(losses) >= p.rows
// @requires len(dlogits) >= p.rows * ceil_div(p.v, 4)
// @requires len(flag) >= 1
// @requires len(state) >= 1
struct Params {
    rows: u32,
    v: u32,
    smoothing: f32,
    z_loss: f32,
    grad_scale: f32,
}
@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<u32>;
@group(0) @binding(2) var<storage, read_write> losses: array<f32>;
@group(0) @binding(3) var<storage, read_write> dlogits: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read> state: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
//#include "lib/f16x4.wgsl"

// Logits at columns c .. c + 3 of the row starting at `base`, 0 past v.
fn quad(base: u32, c: u32) -> vec4<f32> {
    return load_row(base, vec4<u32>(c) + LANES4);
}

// Vec4 group g (columns 4g .. 4g + 3, logits `l`) of the f16 gradient row starting at vec4
// `out`, stored when g < cq; whether it overflows f16.
fn put16(out: u32, g: u32, cq: u32, l: vec4<f32>, r: Row, scale: f32) -> bool {
    if (g >= cq) {
        return false;
    }
    let c = 4u * g;
    let d = select(vec4<f32>(0.0), grad4(l, vec4<u32>(c) + LANES4, r) * scale, below4(c, p.v));
    dlogits[out + g] = to_f16x4(d);
    return overflows16(d);
}

@compute @workgroup_size(WG)
fn cross_entropy_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let row = flat_wg(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.v;
    let cq = (p.v + 3u) / 4u;
    let out = row * cq;
    // Read-only storage at a uniform index: the same for the whole workgroup.
    let t = targets[row];
    // Pass 1's first two chunks, loaded before t arrives (as cross_entropy does).
    let a0 = load_row(base, tid + STEP_LO);
    let b0 = load_row(base, tid + STEP_HI);
    let na = load_row(base, CHUNK + tid + STEP_LO);
    let nb = load_row(base, CHUNK + tid + STEP_HI);
    if (t >= p.v) {
        for (var g = tid; g < cq; g += WG) {
            dlogits[out + g] = vec4<f16>(0.0);
        }
        if (tid == 0u) {
            losses[row] = 0.0;
        }
        return;
    }
    let r = row_stats(base, tid, t, a0, b0, na, nb);
    // The loss scale, read as scale_by_state reads it.
    let scale = state[0];

    // Pass 2: groups g and g + 256 per step (consecutive invocations on consecutive groups),
    // the next step's 8 logits loading while this step's are written; Σ (l_j − m) in this
    // invocation's increasing column order.
    var qa = quad(base, 4u * tid);
    var qb = quad(base, 4u * (tid + WG));
    var sd = 0.0;
    var over = false;
    for (var g = tid; g < cq; g += 2u * WG) {
        let a = qa;
        let b = qb;
        qa = quad(base, 4u * (g + 2u * WG));
        qb = quad(base, 4u * (g + 3u * WG));
        over = put16(out, g, cq, a, r, scale) | over;
        over = put16(out, g + WG, cq, b, r, scale) | over;
        let ja = vec4<u32>(4u * g) + LANES4;
        sd = add_shifted(add_shifted(sd, a, ja, r.m), b, ja + 4u * WG, r.m);
    }
    // One atomic per invocation that saw an overflow (OR: the order does not matter).
    if (over) {
        atomicOr(&flag[0], 1u);
    }
    let loss = row_loss(r, wg_reduce_sum(tid, sd));
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
