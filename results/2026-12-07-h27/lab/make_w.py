#!/usr/bin/env python3
"""The W series: R8 (the cut-down core in the lean kernel's form, make_morph.py) with one of the
library's features added back each, to learn what a lean tensor-core core can carry.

usage: make_w.py R8.wgsl OUTDIR
W1: the tile store through the library's hook (G_ACC, the private offset and row length);
W2: the split contraction (part, kb/ke from G_PARTS/G_CHUNK, the part's output offset);
W3: a SwiGLU-shaped epilogue (storage barrier, the block read back, f16 written to `h`);
W4: both orientations in the operand and fragment loads (A_T/B_T branches);
W5: the body behind the library's `for (var fits = ...)` guard on the subgroup count."""
import os, re, sys

r8, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
base = open(r8).read()


def fn_span(t, name):
    m = re.search(r'^fn ' + name + r'\(', t, re.M)
    depth, j, opened = 0, m.start(), False
    while True:
        c = t[j]
        if c == '{':
            depth += 1
            opened = True
        elif c == '}':
            depth -= 1
        j += 1
        if opened and depth == 0:
            return m.start(), j


def replace_fn(t, name, new):
    a, b = fn_span(t, name)
    return t[:a] + new.strip('\n') + t[b:]


def rep(t, old, new):
    assert old in t, old[:70]
    return t.replace(old, new, 1)


# W1
w1 = replace_fn(base, 'g_out', '''
fn g_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = g_off + row * g_n + col;
    let ld = g_n;
    if (G_ACC) {
        let sum = c + coopLoadT<coop_mat16x16<f32, C>>(&y[at], ld);
        coopStoreT(sum, &y[at], ld);
    } else {
        coopStoreT(c, &y[at], ld);
    }
}''')
w1 = rep(w1, '    let blk = g_order(', '    g_n = N_C;\n    g_off = 0u;\n    let blk = g_order(')
open(os.path.join(out, 'W1.wgsl'), 'w').write(w1)

# W2
w2 = rep(base, '''    let blk = g_order(wid.x, M_C / G_BM, N_C / G_BN);''', '''    let blocks = (M_C / G_BM) * (N_C / G_BN);
    let part = wid.x / blocks;
    let blk = g_order(wid.x % blocks, M_C / G_BM, N_C / G_BN);
    let kb0 = part * G_CHUNK;
    let ke0 = min(kb0 + G_CHUNK, K_C);
    g_off = part * M_C * N_C;''')
w2 = rep(w2, '    let kb = 0u;\n    let ke = K_C;\n', '    let kb = kb0;\n    let ke = ke0;\n')
w2 = rep(w2, '        g_fetch(tid, m0, n0, 0u, ke);', '        g_fetch(tid, m0, n0, kb, ke);')
w2 = rep(w2, '    for (var kc = 0u; kc < K_C; kc += G_BK) {', '    for (var kc = kb; kc < ke; kc += G_BK) {')
w2 = rep(w2, '            if (kc + G_BK < K_C) {', '            if (kc + G_BK < ke) {')
w2 = replace_fn(w2, 'g_out', '''
fn g_out(c: coop_mat16x16<f32, C>, row: u32, col: u32) {
    let at = g_off + row * N_C + col;
    coopStoreT(c, &y[at], N_C);
}''')
open(os.path.join(out, 'W2.wgsl'), 'w').write(w2)

# W3
w3 = rep(base, '@group(0) @binding(3) var<uniform> p: GemmParams;',
         '@group(0) @binding(3) var<uniform> p: GemmParams;\n@group(0) @binding(4) var<storage, read_write> h: array<vec4<f16>>;')
w3 = w3.replace('// @requires len(y) >= p.m * p.n\n', '// @requires len(y) >= p.m * p.n\n// @requires len(h) >= p.m * (p.n / 8)\n', 1)
i = w3.rindex('}')          # the entry's closing brace
i = w3.rindex('}', 0, i)    # the inner block's
w3 = w3[:i] + '''    storageBarrier();
    let f = N_C / 2u;
    let per_row = G_BN / 8u;
    for (var e = tid; e < G_BM * per_row; e += G_WG) {
        let row = m0 + e / per_row;
        let c = n0 / 2u + 4u * (e % per_row);
        let i = row * N_C + c;
        let gt = vec4<f32>(y[i], y[i + 1u], y[i + 2u], y[i + 3u]);
        let u = vec4<f32>(y[i + f], y[i + f + 1u], y[i + f + 2u], y[i + f + 3u]);
        h[row * (f / 4u) + c / 4u] = vec4<f16>(gt / (1.0 + exp(-gt)) * u);
    }
''' + w3[i:]
open(os.path.join(out, 'W3.wgsl'), 'w').write(w3)

# W4
w4 = replace_fn(base, 'g_ga', '''
fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / G16_ROWA;
    let q = e % G16_ROWA;
    if (A_T) {
        return a[(kc + sr) * (M_C / 4u) + m0 / 4u + q];
    }
    return a[(m0 + sr) * (K_C / 4u) + kc / 4u + q];
}''')
w4 = replace_fn(w4, 'g_gb', '''
fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / G16_ROWB;
    let q = e % G16_ROWB;
    if (B_T) {
        return b[(n0 + sr) * (K_C / 4u) + kc / 4u + q];
    }
    return b[(kc + sr) * (N_C / 4u) + n0 / 4u + q];
}''')
w4 = replace_fn(w4, 'g_frag_a', '''
fn g_frag_a(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    let ld = G16_LDA;
    if (A_T) {
        let at = s * 16u * ld + tr * 4u;
        return coopLoad<coop_mat16x16<f16, A>>(&g_sa[at], ld);
    }
    let at = tr * 16u * ld + s * 4u;
    return coopLoadT<coop_mat16x16<f16, A>>(&g_sa[at], ld);
}''')
w4 = replace_fn(w4, 'g_frag_b', '''
fn g_frag_b(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    let ld = G16_LDB;
    if (B_T) {
        let at = tc * 16u * ld + s * 4u;
        return coopLoad<coop_mat16x16<f16, B>>(&g_sb[at], ld);
    }
    let at = s * 16u * ld + tc * 4u;
    return coopLoadT<coop_mat16x16<f16, B>>(&g_sb[at], ld);
}''')
open(os.path.join(out, 'W4.wgsl'), 'w').write(w4)

# W5
w5 = rep(base, '    @builtin(subgroup_id) sg: u32,\n', '    @builtin(subgroup_id) sg: u32,\n    @builtin(num_subgroups) nsgs: u32,\n')
w5 = rep(w5, '    {\n    let nsg = 8u;', '    for (var fits = u32(nsgs == 8u); fits == 1u; fits = 0u) {\n    let nsg = 8u;')
open(os.path.join(out, 'W5.wgsl'), 'w').write(w5)
