#!/usr/bin/python3
"""ctest check: no file in src/ includes a module above it.

Reads the layer table of docs/ARCHITECTURE.md (section "Layers") and every
`#include "dir/file.h"` in src/: an include must name the file's own module
or a module of a lower layer. Every directory of src/ must be in the table.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402


def layer_table(doc):
    """{entry: layer}, entries being directories ("attn") or files ("attn/attn.h")."""
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
    """(module, layer) of a path relative to src/: a file entry beats its directory."""
    if path in table:
        return path, table[path]
    d = path.split("/")[0]
    return d, table.get(d)


def main():
    ck = rc.Checks("check_layers")
    src = os.path.join(rc.REPO, "src")
    table = layer_table(os.path.join(rc.REPO, "docs", "ARCHITECTURE.md"))
    dirs = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    missing = [d for d in dirs if d not in table]
    ck.check("every module of src/ has a layer", not missing, "missing: " + ", ".join(missing) if missing else "")
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
    ck.finish()


if __name__ == "__main__":
    main()
