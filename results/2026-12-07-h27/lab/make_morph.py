#!/usr/bin/env python3
"""The R series: -h25's cut-down core with its body in the entry (u8oi, flattened), turned one
step at a time into the lean kernel's form, each step keeping the ones before. Each file is a
lab kernel file (one `gemm16` section, coop-only, no shared preamble: run with --shared none).

usage: make_morph.py U8OI_FLAT OUTDIR   (U8OI_FLAT: g/u8oi/g16e.wgsl of make_inline.py + flatten.py)
R0: u8oi as it is (the flat form's own baseline);    R1: without the shared preamble's items;
R2: entry without num_workgroups and the private writes;   R3: a three-field uniform, no @grid;
R4: fragment loads without the orientation branch;   R5: fetch/stage without A's >4 part;
R6: operand loads without the edge (clamped) code;   R7: the 16-deep parts as a loop (lean's form);
R8: without g_acc and g_ncol."""
import os, re, sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
t = open(src).read()


def rep(t, old, new, count=1):
    assert t.count(old) >= 1, old[:80]
    return t.replace(old, new) if count == 0 else t.replace(old, new, count)


def cut(t, start, end_marker):
    """Removes from the line holding `start` through the first `end_marker` after it."""
    i = t.index(start)
    i = t.rindex('\n', 0, i) + 1
    j = t.index(end_marker, i) + len(end_marker)
    return t[:i] + t[j:]


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


HEAD = '''// --- KERNEL: gemm16 ---
// @grid workgroups(p.tiles)
// @requires len(a) >= p.m * p.k / 4u
// @requires len(b) >= p.n * p.k / 4u
// @requires len(y) >= p.m * p.n
'''
t = t.replace('enable f16;\nenable wgpu_cooperative_matrix;\n', '')
# The flat form keeps the shared preamble's items; they go in R1.
steps = []
steps.append(('R0', HEAD + t))

# R1: the shared preamble's items (everything before `struct GemmParams`).
t = t[t.index('struct GemmParams'):]
steps.append(('R1', HEAD + t))

# R2: the entry as lean's.
t = rep(t, '    @builtin(num_workgroups) nwg: vec3<u32>,\n', '')
for v in ('g_m = M_C;', 'g_n = N_C;', 'g_k = K_C;', 'g_off = 0u;'):
    t = rep(t, '    ' + v + '\n', '')
steps.append(('R2', HEAD + t))

# R3: the uniform as lean's.
a, b = t.index('struct GemmParams'), t.index('}', t.index('struct GemmParams')) + 1
t = t[:a] + 'struct GemmParams {\n    m: u32,\n    n: u32,\n    k: u32,\n}' + t[b:]
HEAD3 = HEAD.replace('// @grid workgroups(p.tiles)\n', '')
steps.append(('R3', HEAD3 + t))

# R4: fragment loads.
t = replace_fn(t, 'g_frag_a', '''
fn g_frag_a(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    let l = G16_LDA;
    let at = tr * 16u * l + s * 4u;
    return coopLoadT<coop_mat16x16<f16, A>>(&g_sa[at], l);
}''')
t = replace_fn(t, 'g_frag_b', '''
fn g_frag_b(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    let l = G16_LDB;
    let at = tc * 16u * l + s * 4u;
    return coopLoad<coop_mat16x16<f16, B>>(&g_sb[at], l);
}''')
steps.append(('R4', HEAD3 + t))

# R5: fetch and stage with lean's parts: A's four (128 × 32 over 256 invocations), B's eight.
for fn in ('g_fetch', 'g_stage'):
    a, b = fn_span(t, fn)
    body = t[a:b]
    i = body.index('    if (na > 4u) {')
    j = body.index('    }\n', i) + 6
    body = body[:i] + body[j:]
    t = t[:a] + body + t[b:]
for i in range(4, 8):
    t = rep(t, f'var<private> g_pa{i}: vec4<f16>;\n', '')
steps.append(('R5', HEAD3 + t))

# R6: operand loads, exact only.
t = replace_fn(t, 'g_ga', '''
fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / G16_ROWA;
    let q = e % G16_ROWA;
    return a[(m0 + sr) * (K_C / 4u) + kc / 4u + q];
}''')
t = replace_fn(t, 'g_gb', '''
fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / G16_ROWB;
    let q = e % G16_ROWB;
    return b[(n0 + sr) * (K_C / 4u) + kc / 4u + q];
}''')
steps.append(('R6', HEAD3 + t))

# R7: the 16-deep parts as lean's loop.
i = t.index('        if (G_BK > 0u) {')
i = t.rindex('\n', 0, i) + 1
j = t.index('        workgroupBarrier();\n    }\n    let r0')
loop = '''        for (var s = 0u; s < G_BK / 16u; s++) {
            let b0 = g_frag_b(tc0, s);
            var b1 = b0;
            var b2 = b0;
            var b3 = b0;
            if (G_TN > 1u) { b1 = g_frag_b(tc0 + 1u, s); }
            if (G_TN > 2u) { b2 = g_frag_b(tc0 + 2u, s); b3 = g_frag_b(tc0 + 3u, s); }
            {
                let x = g_frag_a(tr0, s);
                c00 = coopMultiplyAdd(x, b0, c00);
                if (G_TN > 1u) { c01 = coopMultiplyAdd(x, b1, c01); }
                if (G_TN > 2u) { c02 = coopMultiplyAdd(x, b2, c02); c03 = coopMultiplyAdd(x, b3, c03); }
            }
            if (G_TM > 1u) {
                let x = g_frag_a(tr0 + 1u, s);
                c10 = coopMultiplyAdd(x, b0, c10);
                if (G_TN > 1u) { c11 = coopMultiplyAdd(x, b1, c11); }
                if (G_TN > 2u) { c12 = coopMultiplyAdd(x, b2, c12); c13 = coopMultiplyAdd(x, b3, c13); }
            }
            if (G_TM > 2u) {
                let x = g_frag_a(tr0 + 2u, s);
                c20 = coopMultiplyAdd(x, b0, c20);
                if (G_TN > 1u) { c21 = coopMultiplyAdd(x, b1, c21); }
                if (G_TN > 2u) { c22 = coopMultiplyAdd(x, b2, c22); c23 = coopMultiplyAdd(x, b3, c23); }
                let x3 = g_frag_a(tr0 + 3u, s);
                c30 = coopMultiplyAdd(x3, b0, c30);
                if (G_TN > 1u) { c31 = coopMultiplyAdd(x3, b1, c31); }
                if (G_TN > 2u) { c32 = coopMultiplyAdd(x3, b2, c32); c33 = coopMultiplyAdd(x3, b3, c33); }
            }
        }
'''
t = t[:i] + loop + t[j:]
steps.append(('R7', HEAD3 + t))

# R8: the portable path's private array and the column map.
t = rep(t, 'var<private> g_acc: array<vec4<f32>, 8>;\n', '')
a, b = fn_span(t, 'g_ncol')
t = t[:a] + t[b:]
steps.append(('R8', HEAD3 + t))

for name, text in steps:
    open(os.path.join(out, name + '.wgsl'), 'w').write(text)
