#!/usr/bin/env python3
"""Lab copies of the tensor-core flash forward and dK/dV kernels with the walk's trip count a
compile-time constant (an override set to the whole sequence's steps), beside copies as the
library writes them: does the causal walk's trip count, which depends on the workgroup id, cost
their loops what it cost the f16 core's (`../NOTES.md`, W2)? The constant walk does more steps
(every key block for the forward, every query block from 0 for dK/dV, the causal mask zeroing
the extra ones; all in range), so what decides is the time
per step, not the time.

usage: make_const.py ROOT OUT   (writes OUT/00_shared.wgsl, OUT/lib/ with the variants' body
files, OUT/fwd.wgsl and OUT/bwd.wgsl)"""
import os, shutil, sys

root, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
shutil.copy(os.path.join(root, 'shaders/00_shared.wgsl'), out)
shutil.copytree(os.path.join(root, 'shaders/lib'), os.path.join(out, 'lib'), dirs_exist_ok=True)


def rewrite(src_name, dst_name, old, new):
    s = open(os.path.join(out, 'lib', src_name)).read()
    assert s.count(old) == 1, old
    open(os.path.join(out, 'lib', dst_name), 'w').write(s.replace(old, new))


rewrite('flash_fwd_tc.wgsl', 'flash_fwd_tcs.wgsl',
        '    let steps = (kend + FW_STEP - 1u) / FW_STEP;\n',
        '    let steps = FW_CONST_STEPS;\n')
rewrite('flash_sg.wgsl', 'flash_sg_cs.wgsl',
        '    let nsteps = (seq - k0 + FS_STEP - 1u) / FS_STEP;\n',
        '    let nsteps = FS_CONST_STEPS;\n')
# The constant walk starts at query 0 (every query of the sequence, in range; the causal mask
# zeroes those before the key block) instead of at the key block.
s = open(os.path.join(out, 'lib', 'flash_sg_cs.wgsl')).read()
i = s.index('fn fs_dkdv(')
body = s[i:]
assert body.count('k0, nsteps)') == 4, body.count('k0, nsteps)')
s = s[:i] + body.replace('k0, nsteps)', '0u, nsteps)')
open(os.path.join(out, 'lib', 'flash_sg_cs.wgsl'), 'w').write(s)


def section(path, kernel):
    src = open(os.path.join(root, path)).read()
    i = src.index(f'// --- KERNEL: {kernel} ---')
    j = src.index('\n}\n', i) + 3
    # The file preamble's helpers expect hooks only some kernels define; these kernels take
    # lib/flash.wgsl from it.
    return src[i:j].replace('//#include "lib/flash_', '//#include "lib/flash.wgsl"\n//#include "lib/flash_', 1)


fwd = section('shaders/05_attention.wgsl', 'flash_forward16_tc')
const = fwd.replace('flash_forward16_tc', 'flash_forward16_tcs').replace(
    'lib/flash_fwd_tc.wgsl', 'lib/flash_fwd_tcs.wgsl').replace(
    '\n@compute', '\n// Every workgroup walks this many steps of 32 keys (the whole sequence).\noverride FW_CONST_STEPS: u32 = 1u;\n\n@compute', 1)
open(os.path.join(out, 'fwd.wgsl'), 'w').write(fwd + '\n' + const)
bwd = section('shaders/10_backward_attention.wgsl', 'flash_backward_dkdv16_tc')
const = bwd.replace('flash_backward_dkdv16_tc', 'flash_backward_dkdv16_tcs').replace(
    'lib/flash_sg.wgsl', 'lib/flash_sg_cs.wgsl').replace(
    '\n@compute', '\n// Every workgroup walks this many steps of 32 queries per head (the whole sequence).\noverride FS_CONST_STEPS: u32 = 1u;\n\n@compute', 1)
open(os.path.join(out, 'bwd.wgsl'), 'w').write(bwd + '\n' + const)
