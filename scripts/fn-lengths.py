#!/usr/bin/env python3
"""scripts/fn-lengths.py ROOT [MIN]: non-test Rust functions of MIN+ lines (signature to closing brace),
longest first; ARCHITECTURE.md's bar is 0 over 150 on the main paths."""
import os, re, sys
root = sys.argv[1]; MIN = int(sys.argv[2]) if len(sys.argv) > 2 else 120
def strip(src):
    # blank out comments, strings and char literals, keeping newlines
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', src[i:i+10]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            m = re.match(r'r(#*)"', src[i:]); hashes = m.group(1)
            end = src.find('"' + hashes, i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r'[^\n]', ' ', src[i:end])); i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j+1])); i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i+4]) or (c == "'" and src.startswith("'\\", i) and re.match(r"'\\[^']*'", src[i:i+12])):
            m = re.match(r"'(\\[^']*|[^\\'])'", src[i:]); out.append(' ' * len(m.group(0))); i += len(m.group(0))
        else:
            out.append(c); i += 1
    return ''.join(out)
res = []
for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if x not in ('target', '.git', 'node_modules') and not x.startswith('.')]
    for f in files:
        if not f.endswith('.rs') or f == 'tests.rs': continue
        p = os.path.join(d, f)
        if '/tests/' in p or '/benches/' in p or '/examples/' in p: continue
        s = strip(open(p).read())
        # cut off #[cfg(test)] mod tests
        m = re.search(r'#\[cfg\(test\)\]\s*mod \w+\s*\{', s)
        if m: s = s[:m.start()]
        for fm in re.finditer(r'\bfn\s+(\w+)', s):
            j = fm.end(); nest = 0
            while j < len(s):
                ch = s[j]
                if ch in '([': nest += 1
                elif ch in ')]': nest -= 1
                elif nest == 0 and ch in '{;': break
                j += 1
            if j >= len(s) or s[j] == ';': continue
            depth = 0; k = j
            while k < len(s):
                if s[k] == '{': depth += 1
                elif s[k] == '}':
                    depth -= 1
                    if depth == 0: break
                k += 1
            start = s.count('\n', 0, fm.start()) + 1; end = s.count('\n', 0, k) + 1
            if end - start + 1 >= MIN: res.append((end - start + 1, os.path.relpath(p, root), start, fm.group(1)))
for r in sorted(res, reverse=True): print(f'{r[0]:4d} {r[1]}:{r[2]} {r[3]}')
print(len(res), 'functions')
