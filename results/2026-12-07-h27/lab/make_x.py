#!/usr/bin/env python3
"""The X series: the library's own f16 core (lib/gemm16.wgsl and the gemm16 section of
shaders/03_linear.wgsl, from the checkout) with T4's change and around it.

usage: make_x.py ROOT OUTDIR   (writes OUTDIR/x0 ... x4, each 00_shared.wgsl, lib/, g16.wgsl)
x0: as it is;   x1: g_ga/g_gb exact-only (both orientations, the private strides, g_ncol kept);
x2: x1 with g_ncol a select;   x3: x1 without the portable path after the tensor-core loop;
x4: x1 with results/2026-12-07-h26/gemm16-stride-overrides.patch."""
import os, re, shutil, subprocess, sys

root, out = sys.argv[1], sys.argv[2]


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


GA = '''
fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / g_rowa();
    let q = e % g_rowa();
    if (A_T) {
        return a[(kc + sr) * g_aq + m0 / 4u + q];
    }
    return a[(m0 + sr) * g_aq + kc / 4u + q];
}'''
GB = '''
fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / g_rowb();
    let q = e % g_rowb();
    if (B_T) {
        return b[g_ncol(n0 + sr) * g_bq + kc / 4u + q];
    }
    return b[(kc + sr) * g_bq + g_ncol(n0 + 4u * q) / 4u];
}'''
NCOL = '''
fn g_ncol(v: u32) -> u32 {
    let t = max(G_NMAP, 1u);
    let tile = v / t;
    return select((tile % 2u) * (g_n / 2u) + (tile / 2u) * t + v % t, v, G_NMAP == 0u);
}'''

src = open(os.path.join(root, 'shaders/03_linear.wgsl')).read()
i = src.index('// --- KERNEL: gemm16 ---')
j = src.index('// --- KERNEL: ', i + 1)
section = src[i:j]
lib0 = open(os.path.join(root, 'shaders/lib/gemm16.wgsl')).read()
x1 = replace_fn(replace_fn(lib0, 'g_ga', GA), 'g_gb', GB)
x2 = replace_fn(x1, 'g_ncol', NCOL)
port = '    g_portable(tid, m0, n0, kb, ke);\n}'
assert lib0.rstrip().endswith(port.rstrip())
x3 = x1.rstrip()[:-len(port.rstrip())] + '//#if !coop\n    g_portable(tid, m0, n0, kb, ke);\n//#endif\n}\n'
libs = dict(x0=lib0, x1=x1, x2=x2, x3=x3, x4=x1)
for name, lib in libs.items():
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(root, 'shaders/00_shared.wgsl'), d)
    shutil.copytree(os.path.join(root, 'shaders/lib'), os.path.join(d, 'lib'), dirs_exist_ok=True)
    open(os.path.join(d, 'lib/gemm16.wgsl'), 'w').write(lib)
    open(os.path.join(d, 'g16.wgsl'), 'w').write(section)
# x4: the overrides patch on the library, then x1's loads written with the overrides.
x4 = os.path.join(out, 'x4/lib/gemm16.wgsl')
open(x4, 'w').write(lib0)
subprocess.run(['patch', '-s', x4, os.path.join(root, 'results/2026-12-07-h26/gemm16-stride-overrides.patch')], check=True)
t = open(x4).read()
t = replace_fn(t, 'g_ga', GA.replace('g_rowa()', 'G16_ROWA'))
t = replace_fn(t, 'g_gb', GB.replace('g_rowb()', 'G16_ROWB'))
assert 'g_rowa' not in t and 'g_lda' not in t
open(x4, 'w').write(t)
