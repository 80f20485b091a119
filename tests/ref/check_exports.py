#!/usr/bin/python3
"""ctest check: the public archive exports exactly the API of include/subq.h.

Reference: the function names declared in include/subq.h (parsed from the
header text). Every strong global symbol defined in build/libsubq.a must be
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
    header = os.path.join(rc.REPO, "include", "subq.h")
    ck.check("public archive exists", os.path.isfile(archive), archive)
    api = declared_functions(header)
    ck.check("header declares functions", len(api) > 30, "%d subq_* functions" % len(api))
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
