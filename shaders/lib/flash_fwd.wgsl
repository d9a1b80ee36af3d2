// The body of the flash-attention forwards (`flash_forward`, `flash_forward16` in
// 05_attention.wgsl), on the machinery of `lib/flash.wgsl`.
//
// A workgroup takes one block of 64 queries of one (b, h) and walks the key blocks 0 … its own
// (causal: nothing past the diagonal block), each in four steps:
//   1. scores: R = scale · Q_blk·K_blkᵀ, 64 × 64 f32 in workgroup memory (`fl_r`);
//   2. online softmax by the row owners (row i, keys 16qq …): the row's block maximum
//      from the four owners' partials (`fl_part`), m_new = max(m, block max), α = exp(m − m_new),
//      P = exp(R − m_new) (0 where masked) written by `fl_put_p`, each owner's part of the row
//      sum ℓ rescaled by α and added to;
//   3. values: O = α·O + P·V_blk for every 64-wide chunk of the head dim, O in the row owners'
//      registers (`fl_acc`);
//   4. at the end: ℓ = the four parts, O / ℓ and lse = m + log ℓ written.
// Everything in f32 but what the kernel's operands are (its staged Q, K, V and, in the f16
// kernel, P). Deterministic: fixed orders, no atomics.
//
// Hooks of the including kernel, beyond `lib/flash.wgsl`'s:
//   `var<workgroup> fl_r: array<f32, 64·FL_LDR>` and FL_LDR (floats per row);
//   fn fl_fwd_scores(tid: u32, q0: u32, k0: u32, dh: u32, coop: bool)   step 1, ending with a
//       barrier (R visible);
//   fn fl_fwd_values(tid: u32, k0: u32, dh: u32, alpha: f32, coop: bool)   step 3;
//   fn fl_put_p(i: u32, j: u32, v: vec4<f32>)   P[i][j … j + 3];
//   the binding `lse` (f32).

// Row partials of the row owners, each at its tid.
var<workgroup> fl_part: array<f32, WG>;

fn fl_r_put4(at: u32, v: vec4<f32>) {
    fl_r[at] = v.x;
    fl_r[at + 1u] = v.y;
    fl_r[at + 2u] = v.z;
    fl_r[at + 3u] = v.w;
}

// The portable score product's tile times `scale` into R, then a barrier.
fn fl_tile_to_r(tid: u32, scale: f32) {
    let at = 4u * (tid / 16u) * FL_LDR + 4u * (tid % 16u);
    fl_r_put4(at, scale * fl_s[0]);
    fl_r_put4(at + FL_LDR, scale * fl_s[1]);
    fl_r_put4(at + 2u * FL_LDR, scale * fl_s[2]);
    fl_r_put4(at + 3u * FL_LDR, scale * fl_s[3]);
    workgroupBarrier();
}

// R[i][j … j + 3] with the keys past `row` (key k0 + j + e > row) as NEG_INF.
fn fl_masked4(i: u32, j: u32, k0: u32, row: u32) -> vec4<f32> {
    let at = i * FL_LDR + j;
    let v = vec4<f32>(fl_r[at], fl_r[at + 1u], fl_r[at + 2u], fl_r[at + 3u]);
    let keys = vec4<u32>(k0 + j) + vec4<u32>(0u, 1u, 2u, 3u);
    return select(vec4<f32>(NEG_INF), v, keys <= vec4<u32>(row));
}

// exp(s − m) where s is not masked (NEG_INF), else 0.
fn fl_p4(s: vec4<f32>, m: f32) -> vec4<f32> {
    return select(vec4<f32>(0.0), exp(s - vec4<f32>(m)), s > vec4<f32>(NEG_INF));
}

fn fl_max4(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

fn fl_sum4(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

// Workgroup w: query block (longest first) and (b, h); `coop` (uniform) picks the kernel's
// tensor-core products.
fn flash_forward_body(w: u32, tid: u32, coop: bool) {
    let dh = fl_head_dim();
    let seq = p.seq;
    let nqb = (seq + FL_T - 1u) / FL_T;
    let nbh = p.batch * p.heads;
    // Whole workgroups past the end leave together (uniform).
    if (w >= nbh * nqb) {
        return;
    }
    let qb = nqb - 1u - w / nbh;
    let bh = w % nbh;
    fl_set_head(bh);
    let q0 = qb * FL_T;
    let i = fl_row(tid);
    let qq = fl_quarter(tid);
    let row = q0 + i;
    let j0 = 16u * qq;
    fl_acc = array<vec4<f32>, 16>();
    var m_run = NEG_INF;
    var l_part = 0.0;
    for (var kb = 0u; kb <= qb; kb++) {
        let k0 = kb * FL_T;
        fl_fwd_scores(tid, q0, k0, dh, coop);
        let s0 = fl_masked4(i, j0, k0, row);
        let s1 = fl_masked4(i, j0 + 4u, k0, row);
        let s2 = fl_masked4(i, j0 + 8u, k0, row);
        let s3 = fl_masked4(i, j0 + 12u, k0, row);
        fl_part[tid] = max(max(fl_max4(s0), fl_max4(s1)), max(fl_max4(s2), fl_max4(s3)));
        workgroupBarrier();
        // Every owner of the row reads the same four partials: the same m on all four.
        let m_blk = max(
            max(fl_part[fl_owner(i, 0u)], fl_part[fl_owner(i, 1u)]),
            max(fl_part[fl_owner(i, 2u)], fl_part[fl_owner(i, 3u)]),
        );
        // Key k0 ≤ row for every block up to the diagonal: m_new is finite, α = 0 at the first.
        let m_new = max(m_run, m_blk);
        let alpha = exp(m_run - m_new);
        let p0 = fl_p4(s0, m_new);
        let p1 = fl_p4(s1, m_new);
        let p2 = fl_p4(s2, m_new);
        let p3 = fl_p4(s3, m_new);
        l_part = l_part * alpha + ((fl_sum4(p0) + fl_sum4(p1)) + (fl_sum4(p2) + fl_sum4(p3)));
        m_run = m_new;
        fl_put_p(i, j0, p0);
        fl_put_p(i, j0 + 4u, p1);
        fl_put_p(i, j0 + 8u, p2);
        fl_put_p(i, j0 + 12u, p3);
        // P is read after the values' first staging barrier.
        fl_fwd_values(tid, k0, dh, alpha, coop);
    }
    // ℓ: the row's four parts, in owner order.
    workgroupBarrier();
    fl_part[tid] = l_part;
    workgroupBarrier();
    let l = (fl_part[fl_owner(i, 0u)] + fl_part[fl_owner(i, 1u)]) + (fl_part[fl_owner(i, 2u)] + fl_part[fl_owner(i, 3u)]);
    if (row < seq) {
        fl_write_row(false, row, qq, dh, 1.0 / l);
        if (qq == 0u) {
            lse[bh * seq + row] = m_run + log(l);
        }
    }
}
