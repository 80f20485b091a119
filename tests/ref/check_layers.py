#!/usr/bin/python3
"""ctest check: no file in src/ includes or calls a module above it.

Reads the layer table of docs/ARCHITECTURE.md (section "Layers"), every
`#include "dir/file.h"` in src/ and every call of a function another file of
src/ defines: an include or a call must reach the file's own module or a
module of a lower layer (a public subq_* function implemented in api/ is
not callable from eval/, say, even though subq.h declares it below every
layer). Every directory of src/ must be in the table.

The engine library's folders (all but the lab's, SUBQ_LAB_DIRS of
CMakeLists.txt) never include subq_lab.h: the lab's header sits above them.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402


def layer_table(doc):
    """{module: layer}: modules are the directories of src/."""
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"^## Layers\s*\n```\n(.*?)\n```", text, re.S | re.M)
    if not m:
        rc.die("%s has no ## Layers block" % doc)
    table = {}
    for line in m.group(1).splitlines():
        row = re.match(r"^(\d+)\s+(\S.*)$", line)
        if row:
            for entry in row.group(2).split():
                table[entry] = int(row.group(1))
    return table


def place(table, path):
    """(module, layer) of a path relative to src/."""
    d = path.split("/")[0]
    return d, table.get(d)


def main():
    ck = rc.Checks("check_layers")
    src = os.path.join(rc.REPO, "src")
    table = layer_table(os.path.join(rc.REPO, "docs", "ARCHITECTURE.md"))
    dirs = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    missing = [d for d in dirs if d not in table]
    ck.check("every module of src/ has a layer", not missing, "missing: " + ", ".join(missing) if missing else "")
    extra = sorted(e for e in table if e not in dirs)
    ck.check("every entry of the table is a folder of src/ (one folder, one layer)", not extra, ", ".join(extra))
    bad, n = [], 0
    for d in dirs:
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".cpp")):
                    continue
                rel = os.path.relpath(os.path.join(root, f), src)
                mod, layer = place(table, rel)
                for inc in re.findall(r'^\s*#\s*include\s+"([a-z_0-9]+/[^"]+)"',
                                      open(os.path.join(src, rel), encoding="utf-8").read(), re.M):
                    n += 1
                    imod, ilayer = place(table, inc)
                    same_dir = inc.split("/")[0] == rel.split("/")[0]
                    if layer is None or ilayer is None:
                        continue  # reported above
                    if ilayer > layer or (ilayer == layer and not same_dir):
                        bad.append("%s (%s, layer %d) includes %s (%s, layer %d)"
                                   % (rel, mod, layer, inc, imod, ilayer))
    ck.check("%d includes, none upward or across a layer" % n, not bad, "; ".join(bad))

    # calls: the functions each file defines (non-static, at column 0), then every call of them elsewhere
    defn = re.compile(r"^(?!typedef\b)([A-Za-z_][\w \t*]*?)\b([a-z_][a-z0-9_]*)\s*\([^;{}]*\)\s*\{", re.M)
    sources = {}
    for d in dirs:
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in sorted(files):
                if f.endswith(".c"):
                    rel = os.path.relpath(os.path.join(root, f), src)
                    sources[rel] = open(os.path.join(src, rel), encoding="utf-8").read()
    home, local = {}, {}
    for rel, text in sources.items():
        local[rel] = set()
        for prefix, name in defn.findall(text):
            local[rel].add(name)
            if not re.search(r"\bstatic\b", prefix):
                home.setdefault(name, rel)
    calls, n_calls = [], 0
    strip = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\])*\"", re.S)
    for rel, text in sources.items():
        mod, layer = place(table, rel)
        code = strip.sub(" ", text)
        for name in set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", code)):
            where = home.get(name)
            if not where or where == rel or name in local[rel] or layer is None:
                continue
            imod, ilayer = place(table, where)
            if ilayer is None:
                continue
            n_calls += 1
            same_dir = where.split("/")[0] == rel.split("/")[0]
            if ilayer > layer or (ilayer == layer and not same_dir):
                calls.append("%s (%s, layer %d) calls %s of %s (%s, layer %d)" % (rel, mod, layer, name, where, imod,
                                                                                   ilayer))
    ck.check("%d calls across files, none upward or across a layer" % n_calls, not calls, "; ".join(sorted(calls)))

    m = re.search(r"^set\(SUBQ_LAB_DIRS ([a-z_ ]+)\)", open(os.path.join(rc.REPO, "CMakeLists.txt")).read(), re.M)
    ck.check("CMakeLists.txt names the lab's folders", m is not None)
    lab_dirs = set(m.group(1).split()) if m else set()
    ck.check("the lab's folders are folders of src/", lab_dirs and lab_dirs <= set(dirs), " ".join(sorted(lab_dirs)))
    engine_lab = []
    for d in dirs:
        if d in lab_dirs:
            continue
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in sorted(files):
                path = os.path.join(root, f)
                if f.endswith((".c", ".h", ".cpp")) and re.search(r'^\s*#\s*include\s+"subq_lab\.h"',
                                                                  open(path, encoding="utf-8").read(), re.M):
                    engine_lab.append(os.path.relpath(path, src))
    ck.check("no engine file (%s) includes subq_lab.h" % " ".join(d for d in dirs if d not in lab_dirs),
             not engine_lab, ", ".join(engine_lab))
    ck.finish()


if __name__ == "__main__":
    main()
