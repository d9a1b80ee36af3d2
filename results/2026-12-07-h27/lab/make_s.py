#!/usr/bin/env python3
"""The S series: R1 (make_morph.py) with the operand loads rewritten three ways, to find the
form of `g_ga`/`g_gb` that keeps R6's rate while keeping the edge path (R6 drops it).

usage: make_s.py R1.wgsl U8I_FLAT OUTDIR
S1: single exit (the value in a var through an if/else chain), every path kept;
S2: one path for all: the clamped, masked load (exact shapes read through it too);
S3: S1 on u8i (the stride helpers instead of the overrides);
S4: S1 with g_ncol single-exit as well (select) -- the library's g_gb calls it on the exact path."""
import os, re, sys

r1, u8i, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)


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


GA1 = '''
fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / ROWA;
    let q = e % ROWA;
    var v: vec4<f16>;
    if (G_EXACT) {
        if (A_T) {
            v = a[(kc + sr) * g_aq + m0 / 4u + q];
        } else {
            v = a[(m0 + sr) * (K_C / 4u) + kc / 4u + q];
        }
    } else if (A_T) {
        let kr = kc + sr;
        let at = min(kr, g_k - 1u) * g_aq + min(m0 / 4u + q, g_aq - 1u);
        v = select(vec4<f16>(), a[at], kr < ke);
    } else {
        let kk = kc + 4u * q;
        let at = min(m0 + sr, g_m - 1u) * g_aq + min(kk / 4u, g_aq - 1u);
        v = select(vec4<f16>(), a[at], kk < ke);
    }
    return v;
}'''
GB1 = '''
fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / ROWB;
    let q = e % ROWB;
    var v: vec4<f16>;
    if (G_EXACT) {
        if (B_T) {
            v = b[(n0 + sr) * (K_C / 4u) + kc / 4u + q];
        } else {
            v = b[(kc + sr) * g_bq + g_ncol(n0 + 4u * q) / 4u];
        }
    } else if (B_T) {
        let kk = kc + 4u * q;
        let at = g_ncol(min(n0 + sr, g_n - 1u)) * g_bq + min(kk / 4u, g_bq - 1u);
        v = select(vec4<f16>(), b[at], kk < ke);
    } else {
        let kr = kc + sr;
        let at = min(kr, g_k - 1u) * g_bq + g_ncol(4u * min(n0 / 4u + q, g_bq - 1u)) / 4u;
        v = select(vec4<f16>(), b[at], kr < ke);
    }
    return v;
}'''
GA2 = '''
fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / ROWA;
    let q = e % ROWA;
    let kk = kc + 4u * q;
    let at = min(m0 + sr, g_m - 1u) * g_aq + min(kk / 4u, g_aq - 1u);
    return select(vec4<f16>(), a[at], kk < ke);
}'''
GB2 = '''
fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / ROWB;
    let q = e % ROWB;
    let kk = kc + 4u * q;
    let at = g_ncol(min(n0 + sr, g_n - 1u)) * g_bq + min(kk / 4u, g_bq - 1u);
    return select(vec4<f16>(), b[at], kk < ke);
}'''
NCOL = '''
fn g_ncol(v: u32) -> u32 {
    let t = max(G_NMAP, 1u);
    let tile = v / t;
    return select((tile % 2u) * (g_n / 2u) + (tile / 2u) * t + v % t, v, G_NMAP == 0u);
}'''

base = open(r1).read()
ov = dict(ROWA='G16_ROWA', ROWB='G16_ROWB')
hl = dict(ROWA='g_rowa()', ROWB='g_rowb()')


def sub(s, d):
    for k, v in d.items():
        s = s.replace(k, v)
    return s


s1 = replace_fn(replace_fn(base, 'g_ga', sub(GA1, ov)), 'g_gb', sub(GB1, ov))
open(os.path.join(out, 'S1.wgsl'), 'w').write(s1)
s2 = replace_fn(replace_fn(base, 'g_ga', sub(GA2, ov)), 'g_gb', sub(GB2, ov))
# The clamped path reads the row lengths and the shape from the private copies.
s2 = s2.replace('    g_off = 0u;\n', '    g_off = 0u;\n    g_aq = K_C / 4u;\n    g_bq = K_C / 4u;\n', 1)
assert 'g_aq = K_C' in s2
open(os.path.join(out, 'S2.wgsl'), 'w').write(s2)
# S3: the same rewrite on u8i (stride helpers), its shared preamble dropped as R1 drops it.
t = open(u8i).read().replace('enable f16;\nenable wgpu_cooperative_matrix;\n', '')
t = t[t.index('struct GemmParams'):]
head = base[:base.index('struct GemmParams')]
s3 = head + replace_fn(replace_fn(t, 'g_ga', sub(GA1, hl)), 'g_gb', sub(GB1, hl))
open(os.path.join(out, 'S3.wgsl'), 'w').write(s3)
s4 = replace_fn(s1, 'g_ncol', NCOL)
open(os.path.join(out, 'S4.wgsl'), 'w').write(s4)
