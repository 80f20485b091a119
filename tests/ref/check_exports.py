#!/usr/bin/python3
"""ctest check: each library exports exactly its API, and the engine's
objects call nothing of the lab's.

Reference: the function names declared in include/subq.h (the engine) and
include/subq_lab.h (what measures and trains it), parsed from the header
text, each declared in one of them only; subq.h compiles on its own and
subq_lab.h with it.
  - libsubq.a and libsubq.so (the engine) define every function of subq.h
    and no other strong global symbol;
  - libsubq_lab.a and libsubq_lab.so (engine and lab) define those of both
    headers and no other;
  - the only other global symbols allowed in the archives are the weak C++
    standard-library instantiations and exception-table references
    (identical in every object that has them); the shared objects export
    subq_* only;
  - the engine archive leaves no symbol undefined that the full library
    (libsubq_internal.a) defines: no engine object calls into the lab;
  - each .so has the soname lib<name>.so.MAJOR.MINOR of subq.h's version;
  - subq-generate and subq-serve (linked against libsubq.a) hold none of
    the lab's functions.
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


def symbols(ck, path, dynamic=False, undefined=False):
    """(strong, weak) defined global symbols of an archive or shared object, or its undefined ones."""
    args = ["nm", "-g"] + (["-D"] if dynamic else []) + (["--undefined-only"] if undefined else ["--defined-only"])
    out = subprocess.run(args + [path], capture_output=True, text=True)
    ck.check("nm reads %s" % os.path.basename(path), out.returncode == 0, out.stderr[-300:])
    strong, weak = set(), set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2 or line.endswith(":"):
            continue
        kind, name = parts[-2], parts[-1]
        (weak if kind in "WVwv" else strong).add(name)
    return strong, weak


def check_library(ck, build, name, api, version):
    archive = os.path.join(build, "lib%s.a" % name)
    ck.check("%s exists" % os.path.basename(archive), os.path.isfile(archive), archive)
    strong, weak = symbols(ck, archive)
    extra = sorted(strong - api)
    ck.check("lib%s.a: no internal symbol is exported" % name, not extra, "exported: %s" % ", ".join(extra[:20]))
    missing = sorted(api - strong)
    ck.check("lib%s.a: every declared function is defined" % name, not missing, "missing: %s" % ", ".join(missing))
    odd = sorted(w for w in weak if not re.match(r"(_ZN?K?St|_ZNSt|_ZNKSt|DW\.ref\.)", w))
    ck.check("lib%s.a: weak symbols are C++ std instantiations only" % name, not odd, ", ".join(odd[:10]))

    major, minor = version.split(".")[:2]
    soname = "lib%s.so.%s.%s" % (name, major, minor)
    so = os.path.join(build, "lib%s.so" % name)
    ck.check("lib%s.so exists" % name, os.path.isfile(so), so)
    dyn = subprocess.run(["readelf", "-dW", so], capture_output=True, text=True).stdout
    ck.check("lib%s.so's soname is %s" % (name, soname), "Library soname: [%s]" % soname in dyn,
             ", ".join(re.findall(r"soname: \[(.*?)\]", dyn)))
    strong, weak = symbols(ck, so, dynamic=True)
    exported = strong | weak
    ck.check("lib%s.so exports its API and nothing else" % name, exported == api,
             "extra: %s; missing: %s" % (", ".join(sorted(exported - api)[:10]), ", ".join(sorted(api - exported)[:10])))


def main():
    ck = rc.Checks("check_exports")
    build = os.path.dirname(rc.subq_bin())
    engine_h = os.path.join(rc.REPO, "include", "subq.h")
    lab_h = os.path.join(rc.REPO, "include", "subq_lab.h")
    engine, lab = declared_functions(engine_h), declared_functions(lab_h)
    ck.check("headers declare functions", len(engine) > 30 and len(lab) > 30,
             "%d engine and %d lab subq_* functions" % (len(engine), len(lab)))
    ck.check("no function is declared in both headers", not engine & lab, ", ".join(sorted(engine & lab)))
    for h in (engine_h, lab_h):
        cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-x", "c", h],
                            capture_output=True, text=True)
        ck.check("%s compiles on its own" % os.path.basename(h), cc.returncode == 0, cc.stderr[-300:])
    version = re.search(r'#define SUBQ_VERSION "([0-9.]+)"', open(engine_h).read()).group(1)

    check_library(ck, build, "subq", engine, version)
    check_library(ck, build, "subq_lab", engine | lab, version)

    # the engine calls nothing of the lab: what libsubq.a leaves undefined, the full library does not define
    undefined, _ = symbols(ck, os.path.join(build, "libsubq.a"), undefined=True)
    full, full_weak = symbols(ck, os.path.join(build, "libsubq_internal.a"))
    ours = sorted(undefined & (full - full_weak))
    ck.check("the engine (libsubq.a) calls nothing the lab defines (%d undefined symbols, all outside subq)"
             % len(undefined), not ours, "undefined in the engine, defined by subq: %s" % ", ".join(ours[:20]))

    # subq-generate and subq-serve link the engine alone: none of the lab's functions is in them
    for cmd in ("generate", "serve"):
        prog = rc.engine_bin(cmd)
        out = subprocess.run(["nm", prog], capture_output=True, text=True)
        ck.check("nm reads %s" % os.path.basename(prog), out.returncode == 0, out.stderr[-300:])
        names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
        ck.check("subq-%s holds the engine's subq_generate" % cmd, "subq_generate" in names)
        in_lab = sorted(names & lab)
        ck.check("subq-%s holds none of the lab's functions" % cmd, not in_lab, ", ".join(in_lab[:10]))
    ck.finish()


if __name__ == "__main__":
    main()
