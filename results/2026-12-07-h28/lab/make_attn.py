#!/usr/bin/env python3
"""Lab copies of the tensor-core flash kernels (forward, dK/dV, dQ) with one or more changes to
their walk, each a kernel of its own in OUT/fwd.wgsl, OUT/dkdv.wgsl, OUT/dq.wgsl, for
`time_kernel` at the trainer's shape. Timing only: C and N change what the kernels compute.

  C  the walk's trip count an override (FW_CONST_STEPS / FS_CONST_STEPS; the whole sequence,
     the causal mask zeroing the extra steps)
  E  the walked operands' loads without the bounds test (head dim 64, rows in the buffer)
  N  forward: the rescale branch left out (the flags still stored and read)
  D  forward: the next operands loaded two steps ahead into registers and stored into the other
     buffer right after the step's first barrier (the backward's scheme)
  U  the prefetch's guards left out (loads past the walk: the buffers are padded)

usage: make_attn.py ROOT OUT"""
import os, shutil, sys, itertools

root, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
shutil.copy(os.path.join(root, 'shaders/00_shared.wgsl'), out)
shutil.copytree(os.path.join(root, 'shaders/lib'), os.path.join(out, 'lib'), dirs_exist_ok=True)


def sub(s, old, new, count=1):
    assert s.count(old) == count, (old, s.count(old))
    return s.replace(old, new)


def fwd_variant(tags):
    s = open(os.path.join(root, 'shaders/lib/flash_fwd_tc.wgsl')).read()
    if 'C' in tags:
        s = sub(s, '    let steps = (kend + FW_STEP - 1u) / FW_STEP;\n', '    let steps = FW_CONST_STEPS;\n')
    if 'E' in tags:
        s = sub(s, 'fl_load(FL_K, ', 'fw_xk(', 2)
        s = sub(s, 'fl_load(FL_V, ', 'fw_xv(', 2)
        s = sub(s, 'fn fw_store_step(', '''fn fw_xk(row: u32, d4: u32) -> vec4<f16> {
    return k[((fl_b * p.seq + row) * p.kv_heads + fl_kvh) * 16u + d4];
}

fn fw_xv(row: u32, d4: u32) -> vec4<f16> {
    return v[((fl_b * p.seq + row) * p.kv_heads + fl_kvh) * 16u + d4];
}

fn fw_store_step(''')
    if 'N' in tags:
        i = s.index('        if ((g[0] | g[1]')
        j = s.index('        l_part = l_part + (fl_sum4')
        s = s[:i] + '        fw_grow[sg] = g[sg];\n' + s[j:]
    if 'D' in tags:
        s = sub(s, '        var pr = fw_put_p(er, ec, s, m_ref);\n        if (next) {\n            fw_store_step(tid, 1u - buf, nx);\n        }\n',
                '        var pr = fw_put_p(er, ec, s, m_ref);\n')
        guard = '' if 'U' in tags else '        if (t + 2u < steps) {\n'
        end = '' if 'U' in tags else '        }\n'
        s = sub(s, '        var nx: array<vec4<f16>, 4>;\n        if (next) {\n            nx = fw_load_step(tid, k0 + FW_STEP);\n        }\n',
                '        if (next) {\n            fw_store_step(tid, 1u - buf, nx);\n        }\n' + guard +
                '            nx = fw_load_step(tid, k0 + 2u * FW_STEP);\n' + end)
        s = sub(s, '    fw_store_step(tid, 0u, fw_load_step(tid, 0u));\n    workgroupBarrier();\n',
                '    fw_store_step(tid, 0u, fw_load_step(tid, 0u));\n    var nx: array<vec4<f16>, 4>;\n    if (steps > 1u) {\n        nx = fw_load_step(tid, FW_STEP);\n    }\n    workgroupBarrier();\n')
    return s


def sg_variant(tags, which):
    s = open(os.path.join(root, 'shaders/lib/flash_sg.wgsl')).read()
    i = s.index('fn fs_dq(') if which == 'dq' else s.index('fn fs_dkdv(')
    j = s.index('\n}\n', i) + 3
    head, body, tail = s[:i], s[i:j], s[j:]
    if 'C' in tags:
        if which == 'dq':
            body = sub(body, '    let steps = (min(q0 + FL_T, seq) + FS_STEP - 1u) / FS_STEP;\n', '    let steps = FS_CONST_STEPS;\n')
        else:
            body = sub(body, '    let nsteps = (seq - k0 + FS_STEP - 1u) / FS_STEP;\n', '    let nsteps = FS_CONST_STEPS;\n')
            body = sub(body, 'k0, nsteps)', '0u, nsteps)', 4)
    if 'E' in tags:
        head = sub(head, '    return select(vec4<f16>(), fl_vec(op, select(0u, ((b * p.seq + row) * heads + head) * dq + d4, ok)), ok);\n',
                   '    return fl_vec(op, ((b * p.seq + row) * heads + head) * 16u + d4);\n')
    if 'U' in tags:
        if which == 'dq':
            body = sub(body, '        if (t + 1u < steps) {\n            fs_stage(tid, 1u - buf);\n        }\n', '        fs_stage(tid, 1u - buf);\n')
            body = sub(body, '        if (t + 2u < steps) {\n            fs_fetch(tid, FL_K, FL_V, fl_b, fl_kvh, (t + 2u) * FS_STEP);\n        }\n',
                       '        fs_fetch(tid, FL_K, FL_V, fl_b, fl_kvh, (t + 2u) * FS_STEP);\n')
        else:
            body = sub(body, '''        if (t + 1u < steps) {
            fs_stage(tid, 1u - buf);
            if (tid < 64u) {
                fs_ld[64u * (1u - buf) + tid] = fs_pl;
            }
        }
        if (t + 2u < steps) {
            let next = fs_qstep(t + 2u, k0, nsteps);
            fs_fetch(tid, FL_Q, FL_DO, b, kvh * group + next.x, next.y);
            fs_fetch_rows(tid, b, kvh * group + next.x, next.y);
        }
''', '''        fs_stage(tid, 1u - buf);
        if (tid < 64u) {
            fs_ld[64u * (1u - buf) + tid] = fs_pl;
        }
        {
            let next = fs_qstep(min(t + 2u, steps - 1u), k0, nsteps);
            fs_fetch(tid, FL_Q, FL_DO, b, kvh * group + next.x, next.y);
            fs_fetch_rows(tid, b, kvh * group + next.x, next.y);
        }
''')
    return head + body + tail


def section(path, kernel):
    src = open(os.path.join(root, path)).read()
    i = src.index(f'// --- KERNEL: {kernel} ---')
    j = src.index('\n}\n', i) + 3
    return src[i:j]


FWD = ['', 'C', 'E', 'N', 'D', 'EN', 'DE', 'DEN', 'CDEN', 'DENU', 'DU']
DKDV = ['', 'C', 'E', 'U', 'CE', 'EU']
DQ = ['', 'C', 'E', 'U', 'EU']
names = {}
for kind, tags_list, path, kernel, lib, const in [
        ('fwd', FWD, 'shaders/05_attention.wgsl', 'flash_forward16_tc', 'flash_fwd_tc', 'FW_CONST_STEPS'),
        ('dkdv', DKDV, 'shaders/10_backward_attention.wgsl', 'flash_backward_dkdv16_tc', 'flash_sg', 'FS_CONST_STEPS'),
        ('dq', DQ, 'shaders/10_backward_attention.wgsl', 'flash_backward_dq16_tc', 'flash_sg', 'FS_CONST_STEPS')]:
    sec = section(path, kernel)
    # The file preamble's helpers expect hooks only some kernels define; these kernels take
    # lib/flash.wgsl from it.
    if True:
        sec = sec.replace('//#include "lib/flash_', '//#include "lib/flash.wgsl"\n//#include "lib/flash_', 1)
    text = ''
    for tags in tags_list:
        tag = tags or 'L'
        libname = f'{lib}_{kind}_{tag}.wgsl'
        body = fwd_variant(tags) if kind == 'fwd' else sg_variant(tags, kind)
        open(os.path.join(out, 'lib', libname), 'w').write(body)
        k = f'{kernel}_{tag}'
        one = sec.replace(kernel, k).replace(f'lib/{lib}.wgsl', f'lib/{libname}')
        if 'C' in tags:
            one = one.replace('\n@compute', f'\noverride {const}: u32 = 1u;\n\n@compute', 1)
        text += one + '\n'
    open(os.path.join(out, f'{kind}.wgsl'), 'w').write(text)
    names[kind] = [f'{kernel}_{t or "L"}' for t in tags_list]
for kind, ks in names.items():
    print(kind, ' '.join(ks))
