#!/usr/bin/env python3
"""Flattens one lab kernel for pipeline-stats: enable lines, the shared preamble, the file's
preamble (the text before its first marker), the kernel section, each include once, keeping the
true side of every //#if (all features on), without the functions the entry does not reach."""
import os, re, sys
path, kernel = sys.argv[1], sys.argv[2]
d = os.path.dirname(os.path.abspath(path))
seen = set()
def expand(p):
    out = []
    for line in open(p):
        m = re.match(r'\s*//#include "(.*)"', line)
        if m:
            # Relative to the including file, as the assembler resolves it.
            q = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(p)), m.group(1)))
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
sec, on = [], True
for line in src:
    m = re.match(r'// --- KERNEL: (\w+) ---', line)
    if m:
        on = m.group(1) == kernel
    if on:
        sec.append(line + '\n')
tmp = os.path.join(d, '.sec.wgsl'); open(tmp, 'w').write(''.join(sec))
body = branches(expand(os.path.join(d, '00_shared.wgsl')) + expand(tmp))
os.remove(tmp)
text = ''.join(body)


def prune(text, entry):
    """Drops the functions the entry does not reach (the assembler prunes them too; some call
    hooks that only other kernels define)."""
    fns = {}
    for m in re.finditer(r'^fn (\w+)\(', text, re.M):
        depth, j, opened = 0, m.start(), False
        while True:
            c = text[j]
            if c == '{':
                depth += 1
                opened = True
            elif c == '}':
                depth -= 1
            j += 1
            if opened and depth == 0:
                break
        fns[m.group(1)] = (m.start(), j)
    seen, todo = set(), [entry]
    while todo:
        f = todo.pop()
        if f in seen or f not in fns:
            continue
        seen.add(f)
        a, b = fns[f]
        todo += [t for t in re.findall(r'\b(\w+)\s*\(', text[a:b]) if t in fns]
    for name, (a, b) in sorted(fns.items(), key=lambda x: -x[1][0]):
        if name not in seen:
            text = text[:a] + text[b:]
    return text


sys.stdout.write('enable f16;\nenable wgpu_cooperative_matrix;\n' + prune(text, kernel))
