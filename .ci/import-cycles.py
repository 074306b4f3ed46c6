#!/usr/bin/env python3
"""Import circles between the modules of Rust crates (issue 41: no module
imports, directly or through others, a module that imports it back).

Usage: import-cycles.py CRATE_SRC_DIR...   Prints every circle found and
exits 1 when there is one.

A module is a file (`a/b.rs` or `a/b/mod.rs` is `a::b`). An edge is a path
in the code (`crate::x`, `super::y`, `use` groups), resolved to the longest
module prefix, and followed through `pub use` re-exports; edges between a
module and its own ancestors or descendants are left out (a parent declares
its children), as is a trailing `#[cfg(test)] mod tests` block.
"""
import os, re, sys
from collections import defaultdict


def circles(root):

    mods = {}
    for dp, dn, fn in os.walk(root):
        for f in fn:
            if not f.endswith('.rs'): continue
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, root)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
            mods[tuple(rel)] = p
    def resolve(cur, path):
        parts = path.split('::')
        if parts[0] == 'crate': base = []; parts = parts[1:]
        elif parts[0] in ('super', 'self'):
            base = list(cur)
            while parts and parts[0] in ('super','self'):
                if parts[0]=='super': base = base[:-1]
                parts = parts[1:]
        else: return None
        full = base + parts
        # longest prefix that is a module
        for i in range(len(full), 0, -1):
            if tuple(full[:i]) in mods: return tuple(full[:i])
        return None
    # re-export map: (module, name) -> path string as written, resolved relative to module
    reexp = {}
    for m, p in mods.items():
        src = re.sub(r'//[^\n]*', '', open(p).read())
        for g in re.finditer(r'pub(?:\([a-z]+\))?\s+use\s+([^;]+);', src, re.S):
            body = g.group(1).strip()
            mm = re.match(r'((?:[A-Za-z_]\w*::)*)\{(.*)\}$', body, re.S)
            items = []
            if mm:
                base = mm.group(1)
                for it in re.split(r',', mm.group(2)):
                    it = it.strip()
                    if not it: continue
                    if ' as ' in it: src_, name = [x.strip() for x in it.split(' as ')]
                    else: src_, name = it, it.split('::')[-1]
                    items.append((base + src_, name))
            else:
                if ' as ' in body: src_, name = [x.strip() for x in body.split(' as ')]
                else: src_, name = body, body.split('::')[-1]
                items.append((src_, name))
            for path, name in items:
                if not path.startswith(('crate', 'super', 'self')): path = 'self::' + path
                reexp[(m, name)] = path
    base_resolve = resolve
    def resolve(cur, path, depth=0):
        t = base_resolve(cur, path)
        parts = path.split('::')
        # compute the full path to find the segment after the module
        if parts[0] == 'crate': full = parts[1:]
        else:
            b = list(cur); ps = parts
            while ps and ps[0] in ('super','self'):
                if ps[0]=='super': b = b[:-1]
                ps = ps[1:]
            full = b + ps
        mod = t if t is not None else ()
        rest = full[len(mod):]
        if rest and (mod, rest[0]) in reexp and depth < 10:
            r = resolve(mod, reexp[(mod, rest[0])], depth+1)
            if r is not None: return r
        return t
    edges = defaultdict(set)
    pat = re.compile(r'\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)')
    usegroup = re.compile(r'use\s+((?:crate|super|self)(?:::\w+)*)::\{([^;]*)\};', re.S)
    for m, p in mods.items():
        src = open(p).read()
        # strip comments
        src = re.sub(r'//[^\n]*', '', src)
        # cut #[cfg(test)] mod tests { ... } crudely: drop from '#[cfg(test)]\nmod tests' to end
        i = src.find('#[cfg(test)]\nmod tests')
        if i >= 0: src = src[:i]
        targets = set()
        for g in usegroup.finditer(src):
            base = g.group(1)
            for item in re.split(r'[,\s]+', g.group(2)):
                item = item.strip('{} ')
                if not item or item == 'self': t = resolve(m, base)
                else: t = resolve(m, base + '::' + item.split('::')[0])
                if t: targets.add(t)
        for x in pat.findall(src):
            t = resolve(m, x)
            if t: targets.add(t)
        for t in targets:
            # ignore edges to ancestors or descendants (parent/child)
            if t == m or t == m[:len(t)] or m == t[:len(m)]: continue
            edges[m].add(t)
    # Tarjan SCC
    idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
    for v in list(mods): 
        if v not in idx: sc(v)
    for comp in sccs:
        names = sorted('::'.join(x) or 'crate' for x in comp)
        print(len(comp), names)
        for a in comp:
            for b in edges[a]:
                if b in comp: print('   ', '::'.join(a), '->', '::'.join(b))

    return sccs, edges


found = False
for root in sys.argv[1:]:
    sccs, edges = circles(root)
    for comp in sccs:
        found = True
        print(root + ":", len(comp), "modules:", ", ".join(sorted("::".join(x) or "crate" for x in comp)))
sys.exit(1 if found else 0)
