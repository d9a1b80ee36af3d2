#!/usr/bin/env python3
"""Lab copies whose hot function is written into the kernel's entry point instead of called
from it: the question is whether the driver's code for a body reached through a call is what
holds the f16 core (and the attention kernels) below the lean kernel.

usage: make_inline.py ROOT OUT
  ROOT: the checkout (shaders/ is read from it; .dev/g3/u8 and u8o are -h25's cut-down cores)
  OUT:  the folder to write: g/{u8,u8o,u8i,u8oi}/ and f/ (00_shared.wgsl, lib/, fwd.wgsl, bwd.wgsl)."""
import os, re, shutil, sys

root, out = sys.argv[1], sys.argv[2]


def body(text, name):
    """The statements of `fn name(...) { ... }` (braces matched) and the parameter names."""
    m = re.search(r'\nfn ' + name + r'\((.*?)\)[^{]*\{', text, re.S)
    params = [p.split(':')[0].strip() for p in m.group(1).split(',') if p.strip()]
    i = m.end()
    depth = 1
    j = i
    while depth:
        c = text[j]
        depth += (c == '{') - (c == '}')
        j += 1
    return text[i:j - 1], params


def bind(params, args):
    return ''.join(f'    let {p} = {a};\n' for p, a in zip(params, args) if p != a)


# ---- GEMM: -h25's cut-down core with g_group's body in the entry.
g = os.path.join(out, 'g')
for v in ('u8', 'u8o'):
    shutil.copytree(os.path.join(root, '.dev/g3', v), os.path.join(g, v), dirs_exist_ok=True)
    lib = open(os.path.join(g, v, 'lib/gemm16.wgsl')).read()
    b, params = body(lib, 'g_group')
    call = 'g_group(tid, sg, 8u, 0u, blk.x * G_BM, blk.y * G_BN, 0u, K_C, 1u);'
    args = ['tid', 'sg', '8u', '0u', 'blk.x * G_BM', 'blk.y * G_BN', '0u', 'K_C', '1u']
    k = open(os.path.join(g, v, 'g16.wgsl')).read()
    assert call in k
    k = k.replace(call, '{\n' + bind(params, args) + b + '\n    }')
    d = os.path.join(g, v + 'i')
    shutil.copytree(os.path.join(g, v), d, dirs_exist_ok=True)
    open(os.path.join(d, 'g16.wgsl'), 'w').write(k)

# ---- Attention: each tensor-core kernel as the library writes it, and with its body function
# in the entry (the guard on eight/four subgroups and the poison path dropped: the lab runs
# where they hold).
f = os.path.join(out, 'f')
os.makedirs(f, exist_ok=True)
shutil.copy(os.path.join(root, 'shaders/00_shared.wgsl'), f)
shutil.copytree(os.path.join(root, 'shaders/lib'), os.path.join(f, 'lib'), dirs_exist_ok=True)


def section(path, kernel):
    src = open(os.path.join(root, path)).read()
    i = src.index(f'// --- KERNEL: {kernel} ---')
    j = src.index('\n}\n', i) + 3
    return src[i:j].replace('//#include "lib/flash_', '//#include "lib/flash.wgsl"\n//#include "lib/flash_', 1)


def entry_split(sec, kernel):
    """(text before the entry's body, the body) of `fn kernel(...) { ... }` at the end."""
    m = re.search(r'\nfn ' + kernel + r'\(.*?\)\s*\{', sec, re.S)
    return sec[:m.end()], sec[m.end():sec.rindex('}')]


def preamble(path):
    """Not the file's preamble (its helpers expect hooks only some kernels define): each section
    includes lib/flash.wgsl, which is what the tensor-core kernels take from it."""
    return ''


# Forward: fw_forward(w, tid, sg, lane) in lib/flash_fwd_tc.wgsl.
out_text = preamble('shaders/05_attention.wgsl')
fwd = section('shaders/05_attention.wgsl', 'flash_forward16_tc')
out_text += fwd + '\n'
lib = open(os.path.join(f, 'lib/flash_fwd_tc.wgsl')).read()
b, params = body(lib, 'fw_forward')
head, _ = entry_split(fwd, 'flash_forward16_tc')
inl = head.replace('flash_forward16_tc', 'flash_forward16_tci') + '''
    let w = flat_wg(wid, nwg);
//#if coop
''' + bind(params, ['w', 'tid', 'sg', 'lane']) + b + '''
//#else
    flash_forward_body(w, tid, false);
//#endif
}
'''
out_text += '\n' + inl
open(os.path.join(f, 'fwd.wgsl'), 'w').write(out_text)
out_text = preamble('shaders/10_backward_attention.wgsl')

# Backward: fs_dkdv(w, tid, sg, lane) -> bool and fs_dq(w, tid, sg, lane) in lib/flash_sg.wgsl.
sg_lib = open(os.path.join(f, 'lib/flash_sg.wgsl')).read()
for kernel, fn in (('flash_backward_dkdv16_tc', 'fs_dkdv'), ('flash_backward_dq16_tc', 'fs_dq')):
    sec = section('shaders/10_backward_attention.wgsl', kernel)
    out_text += '\n' + sec
    b, params = body(sg_lib, fn)
    if fn == 'fs_dkdv':
        b = b.replace('return false;', 'return;').replace('return bad;', 'if (bad) {\n        atomicOr(&flag[0], 1u);\n    }')
    head, _ = entry_split(sec, kernel)
    # The section's own consts (FS_LDR, FS_HLEN) sit before the entry: renamed copies would
    # clash, so the inlined copy goes in a section of its own with the same preamble.
    out_text += '\n' + head.replace(kernel, kernel + 'i') + '\n    let w = flat_wg(wid, nwg);\n' + bind(params, ['w', 'tid', 'sg', 'lane']) + b + '\n}\n'
open(os.path.join(f, 'bwd.wgsl'), 'w').write(out_text)
