#!/usr/bin/env python3
"""scripts/import-circles.py ROOT: import cycles between a crate's files (strongly connected components of the
graph file -> file it names through `crate::`, `super::` or `self::` paths), non-test code."""
import os, re, sys
root = sys.argv[1]
crates = {'formats': 'formats/src', 'kernels': 'kernels/src', 'pipeline': 'pipeline/src', 'jobs': 'jobs/src', 'datasets': 'datasets/src', 'kiln': 'src'}
def modpath(src_root, path):
    rel = os.path.relpath(path, src_root)[:-3].split(os.sep)
    if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
    return rel
total = []
for crate, sr in crates.items():
    src_root = os.path.join(root, sr)
    files = {}
    for d, _, fs in os.walk(src_root):
        for f in fs:
            if f.endswith('.rs') and f != 'tests.rs':
                p = os.path.join(d, f)
                files[tuple(modpath(src_root, p))] = p
    def resolve(parts):
        # longest prefix that is a file module
        for k in range(len(parts), -1, -1):
            if tuple(parts[:k]) in files: return tuple(parts[:k])
        return None
    graph = {m: set() for m in files}
    for m, p in files.items():
        s = open(p).read()
        t = re.search(r'#\[cfg\(test\)\]\s*mod \w+\s*\{', s)
        if t: s = s[:t.start()]
        s = re.sub(r'//[^\n]*', '', s)
        is_dir_mod = os.path.basename(p) in ('mod.rs', 'lib.rs', 'main.rs')
        for pm in re.finditer(r'\b((?:crate|super|self)(?:::\w+)+|(?:crate|super|self)::\{[^;]*?\})', s):
            txt = pm.group(1)
            # expand braces one level: crate::a::{b, c::d}
            bm = re.match(r'((?:crate|super|self)(?:::\w+)*)::\{(.*)\}$', txt, re.S)
            paths = []
            if bm:
                for item in re.split(r',\s*', bm.group(2)):
                    item = item.strip().split(' as ')[0]
                    if item and not item.startswith('{'): paths.append(bm.group(1) + '::' + re.sub(r'::\{.*', '', item))
                    elif item: paths.append(bm.group(1))
            else: paths.append(txt)
            for path in paths:
                parts = path.split('::')
                base = list(m) if is_dir_mod else list(m[:-1])
                if parts[0] == 'crate': parts = parts[1:]
                else:
                    cur = list(m)
                    if parts[0] == 'self': parts = parts[1:]
                    while parts and parts[0] == 'super':
                        cur = cur[:-1]; parts = parts[1:]
                    if path.startswith('self'): parts = parts
                    parts = cur + parts
                tgt = resolve(parts)
                if tgt is not None and tgt != m and tgt != ():
                    # importing the parent mod.rs only counts if it's not just for child module declaration
                    graph[m].add(tgt)
    # Tarjan SCC
    index = {}; low = {}; stack = []; on = set(); sccs = []; i = [0]
    sys.setrecursionlimit(10000)
    def strong(v):
        index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index: strong(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
    for v in graph:
        if v not in index: strong(v)
    for c in sccs:
        total.append(c)
        print(f'{crate}: ' + ', '.join(sorted('/'.join(x) or 'lib' for x in c)))
print(len(total), 'circles')
