#!/usr/bin/env python3
"""A lab copy of the tensor-core forward as the library writes it (with FL_EXACT) whose next
step's loads and stores run without the `next` guard (the last step loads its own rows again
and stores them into the other buffer, unused): does the guard cost the forward what the
backward's guards cost it? Same results.

usage: make_fwd_u.py ROOT OUT   (OUT/fwd.wgsl with flash_forward16_tc_U and _L, OUT/lib/)"""
import os, shutil, sys

root, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
shutil.copy(os.path.join(root, 'shaders/00_shared.wgsl'), out)
shutil.copytree(os.path.join(root, 'shaders/lib'), os.path.join(out, 'lib'), dirs_exist_ok=True)


def sub(s, old, new):
    assert s.count(old) == 1, old
    return s.replace(old, new)


s = open(os.path.join(root, 'shaders/lib/flash_fwd_tc.wgsl')).read()
s = sub(s, '''        var nx: array<vec4<f16>, 4>;
        if (next) {
            nx = fw_load_step(tid, k0 + FW_STEP);
        }
''', '''        let nx = fw_load_step(tid, select(k0, k0 + FW_STEP, next));
''')
s = sub(s, '''        if (next) {
            fw_store_step(tid, 1u - buf, nx);
        }
''', '''        fw_store_step(tid, 1u - buf, nx);
''')
open(os.path.join(out, 'lib', 'flash_fwd_tc_U.wgsl'), 'w').write(s)
src = open(os.path.join(root, 'shaders/05_attention.wgsl')).read()
i = src.index('// --- KERNEL: flash_forward16_tc ---')
j = src.index('\n}\n', i) + 3
sec = src[i:j].replace('//#include "lib/flash_', '//#include "lib/flash.wgsl"\n//#include "lib/flash_', 1)
u = sec.replace('flash_forward16_tc', 'flash_forward16_tc_U').replace('lib/flash_fwd_tc.wgsl', 'lib/flash_fwd_tc_U.wgsl')
l = sec.replace('flash_forward16_tc', 'flash_forward16_tc_L')
open(os.path.join(out, 'fwd.wgsl'), 'w').write(l + '\n' + u)
