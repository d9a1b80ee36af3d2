// Lab: a lean f16 GEMM (X·Wᵀ only, shapes multiples of the block, no edges) with ablation switches,
// to find what bounds the library's gemm16 on NVIDIA.
// AB bits: 1 no global loads (stage a constant), 2 no fragment loads/products, 4 no barriers,
// 8 no shared stores.

struct LP {
    m: u32,
    n: u32,
    k: u32,
}

// --- KERNEL: lean ---
// @requires len(a) >= p.m * p.k / 4u
// @requires len(b) >= p.n * p.k / 4u
// @requires len(y) >= p.m * p.n
@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: LP;

override L_BM: u32 = 128u;
override L_BN: u32 = 256u;
override L_BK: u32 = 32u;
override L_TM: u32 = 4u;
override L_TN: u32 = 4u;
override L_WG: u32 = 256u;
override L_PF: bool = false;
override L_GROUP: u32 = 4u;
override L_PAD: u32 = 8u;
override M_C: u32 = 4096u;
override N_C: u32 = 4096u;
override K_C: u32 = 4096u;
override AB: u32 = 0u;

const LSTAGE: u32 = 2560u;
var<workgroup> sa: array<vec4<f16>, LSTAGE>;
var<workgroup> sb: array<vec4<f16>, LSTAGE>;

var<private> pa0: vec4<f16>;
var<private> pa1: vec4<f16>;
var<private> pa2: vec4<f16>;
var<private> pa3: vec4<f16>;
var<private> pb0: vec4<f16>;
var<private> pb1: vec4<f16>;
var<private> pb2: vec4<f16>;
var<private> pb3: vec4<f16>;
var<private> pb4: vec4<f16>;
var<private> pb5: vec4<f16>;
var<private> pb6: vec4<f16>;
var<private> pb7: vec4<f16>;

fn row4() -> u32 {
    return L_BK / 4u;
}

fn ld() -> u32 {
    return L_BK / 4u + L_PAD / 4u;
}

fn ga(e: u32, m0: u32, kc: u32) -> vec4<f16> {
    if ((AB & 1u) != 0u) {
        return vec4<f16>(f16(e & 7u));
    }
    let r = e / row4();
    let q = e % row4();
    return a[(m0 + r) * (K_C / 4u) + kc / 4u + q];
}

fn gb(e: u32, n0: u32, kc: u32) -> vec4<f16> {
    if ((AB & 1u) != 0u) {
        return vec4<f16>(f16(e & 3u));
    }
    let r = e / row4();
    let q = e % row4();
    return b[(n0 + r) * (K_C / 4u) + kc / 4u + q];
}

fn slot(e: u32) -> u32 {
    return (e / row4()) * ld() + e % row4();
}

fn fetch(tid: u32, m0: u32, n0: u32, kc: u32) {
    let na = L_BM * L_BK / (4u * L_WG);
    let nb = L_BN * L_BK / (4u * L_WG);
    pa0 = ga(tid, m0, kc);
    if (na > 1u) { pa1 = ga(tid + L_WG, m0, kc); }
    if (na > 2u) { pa2 = ga(tid + 2u * L_WG, m0, kc); pa3 = ga(tid + 3u * L_WG, m0, kc); }
    pb0 = gb(tid, n0, kc);
    if (nb > 1u) { pb1 = gb(tid + L_WG, n0, kc); }
    if (nb > 2u) { pb2 = gb(tid + 2u * L_WG, n0, kc); pb3 = gb(tid + 3u * L_WG, n0, kc); }
    if (nb > 4u) {
        pb4 = gb(tid + 4u * L_WG, n0, kc);
        pb5 = gb(tid + 5u * L_WG, n0, kc);
        pb6 = gb(tid + 6u * L_WG, n0, kc);
        pb7 = gb(tid + 7u * L_WG, n0, kc);
    }
}

fn stage(tid: u32) {
    if ((AB & 8u) != 0u) {
        return;
    }
    let na = L_BM * L_BK / (4u * L_WG);
    let nb = L_BN * L_BK / (4u * L_WG);
    sa[slot(tid)] = pa0;
    if (na > 1u) { sa[slot(tid + L_WG)] = pa1; }
    if (na > 2u) { sa[slot(tid + 2u * L_WG)] = pa2; sa[slot(tid + 3u * L_WG)] = pa3; }
    sb[slot(tid)] = pb0;
    if (nb > 1u) { sb[slot(tid + L_WG)] = pb1; }
    if (nb > 2u) { sb[slot(tid + 2u * L_WG)] = pb2; sb[slot(tid + 3u * L_WG)] = pb3; }
    if (nb > 4u) {
        sb[slot(tid + 4u * L_WG)] = pb4;
        sb[slot(tid + 5u * L_WG)] = pb5;
        sb[slot(tid + 6u * L_WG)] = pb6;
        sb[slot(tid + 7u * L_WG)] = pb7;
    }
}

fn bar() {
    if ((AB & 4u) == 0u) {
        workgroupBarrier();
    }
}

fn order(t: u32, bm: u32, bn: u32) -> vec2<u32> {
    let size = max(L_GROUP, 1u);
    let per_group = size * bn;
    let first = (t / per_group) * size;
    let rows = min(bm - first, size);
    let local = t % per_group;
    return vec2<u32>(first + local % rows, local / rows);
}

//#if coop
fn fa(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    let l = ld();
    let at = tr * 16u * l + s * 4u;
    return coopLoadT<coop_mat16x16<f16, A>>(&sa[at], l);
}

fn fb(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    let l = ld();
    let at = tc * 16u * l + s * 4u;
    return coopLoad<coop_mat16x16<f16, B>>(&sb[at], l);
}

fn out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = row * N_C + col;
    let l = N_C;
    coopStoreT(c, &y[at], l);
}
//#endif

@compute @workgroup_size(L_WG)
fn lean(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if coop
    @builtin(subgroup_id) sg: u32,
//#endif
) {
    if (p.m == 0u) {
        return;
    }
    let bm = M_C / L_BM;
    let bn = N_C / L_BN;
    let blk = order(wid.x, bm, bn);
    let m0 = blk.x * L_BM;
    let n0 = blk.y * L_BN;
//#if coop
    let gn = L_BN / (16u * L_TN);
    let tr0 = (sg / gn) * L_TM;
    let tc0 = (sg % gn) * L_TN;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();
    if (L_PF) {
        fetch(tid, m0, n0, 0u);
    }
    for (var kc = 0u; kc < K_C; kc += L_BK) {
        if (L_PF) {
            stage(tid);
            bar();
            if (kc + L_BK < K_C) {
                fetch(tid, m0, n0, kc + L_BK);
            }
        } else {
            fetch(tid, m0, n0, kc);
            stage(tid);
            bar();
        }
        if ((AB & 2u) == 0u) {
            for (var s = 0u; s < L_BK / 16u; s++) {
                let b0 = fb(tc0, s);
                var b1 = b0;
                var b2 = b0;
                var b3 = b0;
                if (L_TN > 1u) { b1 = fb(tc0 + 1u, s); }
                if (L_TN > 2u) { b2 = fb(tc0 + 2u, s); b3 = fb(tc0 + 3u, s); }
                {
                    let x = fa(tr0, s);
                    c00 = coopMultiplyAdd(x, b0, c00);
                    if (L_TN > 1u) { c01 = coopMultiplyAdd(x, b1, c01); }
                    if (L_TN > 2u) { c02 = coopMultiplyAdd(x, b2, c02); c03 = coopMultiplyAdd(x, b3, c03); }
                }
                if (L_TM > 1u) {
                    let x = fa(tr0 + 1u, s);
                    c10 = coopMultiplyAdd(x, b0, c10);
                    if (L_TN > 1u) { c11 = coopMultiplyAdd(x, b1, c11); }
                    if (L_TN > 2u) { c12 = coopMultiplyAdd(x, b2, c12); c13 = coopMultiplyAdd(x, b3, c13); }
                }
                if (L_TM > 2u) {
                    let x = fa(tr0 + 2u, s);
                    c20 = coopMultiplyAdd(x, b0, c20);
                    if (L_TN > 1u) { c21 = coopMultiplyAdd(x, b1, c21); }
                    if (L_TN > 2u) { c22 = coopMultiplyAdd(x, b2, c22); c23 = coopMultiplyAdd(x, b3, c23); }
                    let x3 = fa(tr0 + 3u, s);
                    c30 = coopMultiplyAdd(x3, b0, c30);
                    if (L_TN > 1u) { c31 = coopMultiplyAdd(x3, b1, c31); }
                    if (L_TN > 2u) { c32 = coopMultiplyAdd(x3, b2, c32); c33 = coopMultiplyAdd(x3, b3, c33); }
                }
            }
        }
        bar();
    }
    if ((AB & 2u) != 0u) {
        // Keep the staged data observable.
        let v = vec4<f32>(sa[tid % 1024u]) + vec4<f32>(sb[tid % 2048u]);
        y[wid.x * L_WG + tid] = v.x + v.y + v.z + v.w;
        return;
    }
    let r0 = m0 + tr0 * 16u;
    let q0 = n0 + tc0 * 16u;
    out(c00, r0, q0);
    if (L_TN > 1u) { out(c01, r0, q0 + 16u); }
    if (L_TN > 2u) { out(c02, r0, q0 + 32u); out(c03, r0, q0 + 48u); }
    if (L_TM > 1u) {
        out(c10, r0 + 16u, q0);
        if (L_TN > 1u) { out(c11, r0 + 16u, q0 + 16u); }
        if (L_TN > 2u) { out(c12, r0 + 16u, q0 + 32u); out(c13, r0 + 16u, q0 + 48u); }
    }
    if (L_TM > 2u) {
        out(c20, r0 + 32u, q0);
        if (L_TN > 1u) { out(c21, r0 + 32u, q0 + 16u); }
        if (L_TN > 2u) { out(c22, r0 + 32u, q0 + 32u); out(c23, r0 + 32u, q0 + 48u); }
        out(c30, r0 + 48u, q0);
        if (L_TN > 1u) { out(c31, r0 + 48u, q0 + 16u); }
        if (L_TN > 2u) { out(c32, r0 + 48u, q0 + 32u); out(c33, r0 + 48u, q0 + 48u); }
    }
//#else
    y[wid.x * L_WG + tid] = f32(m0 + n0);
//#endif
}
