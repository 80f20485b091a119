"""Every struct subq._lib mirrors has the size and field offsets the C
compiler gives the real header (a C program built from include/subq.h and
subq_lab.h prints them), and every function it declares is one the
library exports."""

import ctypes
import os
import subprocess

from conftest import REPO
from subq import _lib as lib

STRUCTS = [lib.subq_error, lib.subq_model_info, lib.subq_context_params, lib.subq_sampler_params,
           lib.subq_generate_params, lib.subq_generate_result, lib.subq_attn_plan, lib.subq_ppl_result, lib.subq_search_info,
           lib.subq_eval_params, lib.subq_eval_method, lib.subq_eval_skip, lib.subq_eval_static, lib.subq_eval_result,
           lib.subq_corpus_params, lib.subq_train_params, lib.subq_search_loss_params, lib.subq_train_search_params,
           lib.subq_train_hooks, lib.subq_train_result]


def c_layout(tmp_path):
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "subq.h"', '#include "subq_lab.h"',
             'int main(void) {']
    for s in STRUCTS:
        name = s.__name__
        lines.append('    printf("%s %%zu\\n", sizeof(%s));' % (name, name))
        for f, _ in s._fields_:
            lines.append('    printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, f, name, f))
    lines += ['    return 0;', '}']
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    cc = subprocess.run(["cc", "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o", str(exe)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_struct_layouts(tmp_path):
    want = c_layout(tmp_path)
    bad = []
    for s in STRUCTS:
        name = s.__name__
        if int(want[name]) != ctypes.sizeof(s):
            bad.append("sizeof(%s): C %s, ctypes %d" % (name, want[name], ctypes.sizeof(s)))
        for f, _ in s._fields_:
            off = getattr(s, f).offset
            if int(want["%s.%s" % (name, f)]) != off:
                bad.append("%s.%s: C offset %s, ctypes %d" % (name, f, want["%s.%s" % (name, f)], off))
    assert not bad, "; ".join(bad)


def test_struct_fields_cover_the_header(tmp_path):
    """A field the header adds at the end would leave sizeof unequal; one added inside moves an offset: both
    fail above. Here: the mirrored structs are all the header's, by name."""
    text = open(os.path.join(REPO, "include", "subq.h")).read() + open(os.path.join(REPO, "include",
                                                                                  "subq_lab.h")).read()
    for s in STRUCTS:
        assert "} %s;" % s.__name__ in text, s.__name__


def test_functions_exported():
    path = lib.find_library()
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    missing = [name for name, _, _ in lib._FUNCTIONS if name not in exported]
    assert not missing, missing
    lib.load(path)  # every declaration binds


def test_status_codes_match_the_header():
    text = open(os.path.join(REPO, "include", "subq.h")).read()
    body = text[text.index("typedef enum subq_status {"):text.index("} subq_status;")]
    names = [w.split(",")[0].split("=")[0].strip() for w in body.splitlines()[1:] if w.strip().startswith("SUBQ_")]
    for i, name in enumerate(names):
        assert getattr(lib, name) == i, name
