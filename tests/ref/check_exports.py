#!/usr/bin/python3
"""ctest check: the public archive exports exactly the API of include/subq.h
(the engine) and include/subq_lab.h (what measures and trains it).

Reference: the function names declared in the two headers (parsed from the
header text), each declared in one of them only; subq.h compiles on its own
and subq_lab.h with it. Every strong global symbol defined in build/libsubq.a must be
one of them, every one of them must be defined there, and the only other
global symbols allowed are the weak C++ standard-library instantiations and
exception-table references (identical in every object that has them).
"""

import os
import re
import subprocess

import refcommon as rc


def declared_functions(header):
    text = open(header).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)   # comments
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)    # preprocessor lines
    text = re.sub(r"typedef[^;{]*\([^;]*\);", " ", text)  # function-pointer typedefs
    return set(re.findall(r"\b(subq_\w+)\s*\(", text))


def main():
    ck = rc.Checks("check_exports")
    build = os.path.dirname(rc.subq_bin())
    archive = os.path.join(build, "libsubq.a")
    engine_h = os.path.join(rc.REPO, "include", "subq.h")
    lab_h = os.path.join(rc.REPO, "include", "subq_lab.h")
    ck.check("public archive exists", os.path.isfile(archive), archive)
    engine, lab = declared_functions(engine_h), declared_functions(lab_h)
    ck.check("headers declare functions", len(engine) > 30 and len(lab) > 30,
             "%d engine and %d lab subq_* functions" % (len(engine), len(lab)))
    ck.check("no function is declared in both headers", not engine & lab, ", ".join(sorted(engine & lab)))
    for h in (engine_h, lab_h):
        cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-x", "c", h],
                            capture_output=True, text=True)
        ck.check("%s compiles on its own" % os.path.basename(h), cc.returncode == 0, cc.stderr[-300:])
    api = engine | lab
    out = subprocess.run(["nm", "-g", "--defined-only", archive], capture_output=True, text=True)
    ck.check("nm runs", out.returncode == 0, out.stderr[-300:])
    strong, weak = set(), set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        kind, name = parts[1], parts[2]
        (weak if kind in "WVwv" else strong).add(name)
    extra = sorted(strong - api)
    ck.check("no internal symbol is exported", not extra, "exported: %s" % ", ".join(extra[:20]))
    missing = sorted(api - strong)
    ck.check("every declared function is defined", not missing, "missing: %s" % ", ".join(missing))
    odd = sorted(w for w in weak if not re.match(r"(_ZN?K?St|_ZNSt|_ZNKSt|DW\.ref\.)", w))
    ck.check("weak symbols are C++ std instantiations only", not odd, ", ".join(odd[:10]))
    ck.finish()


if __name__ == "__main__":
    main()
