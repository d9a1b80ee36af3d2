#!/usr/bin/env python3
"""The T series: R1 (make_morph.py) with the edge path of the operand loads kept but changed, to
tell what in it costs the rate when it never runs.

usage: make_t.py R1.wgsl OUTDIR
T1: the private copies of the shape (g_m, g_k, g_n, g_aq, g_bq) read in g_ga/g_gb/g_ncol
    replaced by the compiled-in constants (M_C, K_C, N_C, K_C / 4);
T2: replaced by the uniform's fields (p.m, p.k, p.n and (p.k + 3) / 4);
T3: g_fetch choosing once between two sets of loads (exact-only and edge-only functions);
T4: R6's exact-only loads alone on R1."""
import os, re, sys

r1, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
base = open(r1).read()


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


def in_fns(t, names, subs):
    for n in names:
        a, b = fn_span(t, n)
        body = t[a:b]
        for k, v in subs:
            body = re.sub(r'\b' + re.escape(k) + r'\b', v, body)
        t = t[:a] + body + t[b:]
    return t


fns = ('g_ga', 'g_gb', 'g_ncol')
t1 = in_fns(base, fns, [('g_m', 'M_C'), ('g_k', 'K_C'), ('g_n', 'N_C'), ('g_aq', '(K_C / 4u)'), ('g_bq', '(K_C / 4u)')])
open(os.path.join(out, 'T1.wgsl'), 'w').write(t1)
t2 = in_fns(base, fns, [('g_m', 'p.m'), ('g_k', 'p.k'), ('g_n', 'p.n'), ('g_aq', '((p.k + 3u) / 4u)'), ('g_bq', '((p.k + 3u) / 4u)')])
open(os.path.join(out, 'T2.wgsl'), 'w').write(t2)

# T3: exact and edge loads as separate functions; g_fetch picks once.
a, b = fn_span(base, 'g_ga')
ga = base[a:b]
a2, b2 = fn_span(base, 'g_gb')
gb = base[a2:b2]
exact = '''fn g_ga_x(e: u32, m0: u32, kc: u32) -> vec4<f16> {
    let sr = e / G16_ROWA;
    let q = e % G16_ROWA;
    return a[(m0 + sr) * (K_C / 4u) + kc / 4u + q];
}

fn g_gb_x(e: u32, n0: u32, kc: u32) -> vec4<f16> {
    let sr = e / G16_ROWB;
    let q = e % G16_ROWB;
    return b[(n0 + sr) * (K_C / 4u) + kc / 4u + q];
}

'''
t3 = base[:a] + exact + base[a:]
a, b = fn_span(t3, 'g_fetch')
body = t3[a:b]
head, rest = body.split('{', 1)
inner = rest[:rest.rindex('}')]
xinner = inner.replace('g_ga(', 'g_ga_x(').replace('g_gb(', 'g_gb_x(').replace(', kc, ke)', ', kc)').replace(', kc + G_BK, ke)', ', kc + G_BK)')
assert 'ke)' not in xinner, xinner
newbody = head + '{\n    if (G_EXACT) {' + xinner + '    } else {' + inner + '    }\n}'
t3 = t3[:a] + newbody + t3[b:]
open(os.path.join(out, 'T3.wgsl'), 'w').write(t3)

# T4: R6's change alone on R1 (exact-only loads, nothing else of R2-R5).
t4 = base
for name, new in (('g_ga', exact.split('\n\n')[0].replace('g_ga_x(e: u32, m0: u32, kc: u32)', 'g_ga(e: u32, m0: u32, kc: u32, ke: u32)')),
                  ('g_gb', exact.split('\n\n')[1].replace('g_gb_x(e: u32, n0: u32, kc: u32)', 'g_gb(e: u32, n0: u32, kc: u32, ke: u32)'))):
    a, b = fn_span(t4, name)
    t4 = t4[:a] + new + t4[b:]
open(os.path.join(out, 'T4.wgsl'), 'w').write(t4)
