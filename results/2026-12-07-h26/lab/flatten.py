#!/usr/bin/env python3
"""Flattens one lab kernel for pipeline-stats: enable lines, the shared preamble, the file's
includes (once each), the kernel section, keeping the true side of every //#if (all features on)."""
import os, re, sys
path, kernel = sys.argv[1], sys.argv[2]
d = os.path.dirname(os.path.abspath(path))
seen = set()
def expand(p):
    out = []
    for line in open(p):
        m = re.match(r'\s*//#include "(.*)"', line)
        if m:
            q = os.path.join(d, m.group(1))
            if q not in seen:
                seen.add(q)
                out += expand(q)
            continue
        out.append(line)
    return out
def branches(lines):
    out, stack = [], []
    for line in lines:
        s = line.strip()
        if s.startswith('//#if '):
            stack.append(True); continue
        if s == '//#else':
            stack[-1] = not stack[-1]; continue
        if s == '//#endif':
            stack.pop(); continue
        if all(stack):
            out.append(line)
    return out
src = open(path).read().split('\n')
sec, on = [], False
for line in src:
    m = re.match(r'// --- KERNEL: (\w+) ---', line)
    if m:
        on = m.group(1) == kernel
    if on:
        sec.append(line + '\n')
tmp = os.path.join(d, '.sec.wgsl'); open(tmp, 'w').write(''.join(sec))
body = branches(expand(os.path.join(d, '00_shared.wgsl')) + expand(tmp))
os.remove(tmp)
sys.stdout.write('enable f16;\nenable wgpu_cooperative_matrix;\n' + ''.join(body))
