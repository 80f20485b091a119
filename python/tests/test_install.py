"""make install's tree: the Python package finds the library installed
beside it (no SUBQ_LIB_PATH), a C program builds with `pkg-config subq`
and runs against the installed libsubq.so, and README's Python example
runs as written."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def prefix(tmp_path_factory, subq_bin):
    root = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", os.path.dirname(subq_bin), "--prefix", str(root)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return root


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("SUBQ_LIB_PATH", "PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


def test_installed_package(prefix, stories):
    site = prefix / "lib" / "python3" / "dist-packages"
    assert (site / "subq" / "libsubq_lab.so").is_file()
    code = ("import subq; m = subq.Model(%r, n_ctx=128, n_threads=1); "
            "print(subq._lib.find_library()); print(m.tokenize('Once upon a time'))" % stories)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(prefix),
                       env=clean_env(PYTHONPATH=str(site)))
    assert r.returncode == 0, r.stderr
    lib_path, ids = r.stdout.splitlines()
    assert lib_path == str(site / "subq" / "libsubq_lab.so")
    assert ids == "[1, 403, 407, 261, 378]"


def test_pkg_config_program(prefix, stories, tmp_path):
    src = tmp_path / "app.c"
    src.write_text('#include <stdio.h>\n#include <subq.h>\n'
                   'int main(int argc, char **argv) {\n'
                   '    subq_error err; subq_model *m = NULL;\n'
                   '    if (subq_model_load(argv[1], &m, &err)) { fprintf(stderr, "%s\\n", err.msg); return 1; }\n'
                   '    subq_model_info info; subq_model_get_info(m, &info);\n'
                   '    printf("%s %d\\n", subq_version(), info.n_vocab);\n'
                   '    subq_model_free(m); return 0;\n}\n')
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "subq"], capture_output=True, text=True,
                        env=clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig")))
    assert pc.returncode == 0, pc.stderr
    assert str(prefix) in os.path.realpath(pc.stdout.split()[0][2:]) or "pkgconfig/../.." in pc.stdout
    exe = tmp_path / "app"
    cc = subprocess.run(["cc", "-std=c11", str(src), "-o", str(exe)] + pc.stdout.split(), capture_output=True,
                        text=True)
    assert cc.returncode == 0, cc.stderr
    r = subprocess.run([str(exe), stories], capture_output=True, text=True,
                       env=clean_env(LD_LIBRARY_PATH=str(prefix / "lib")))
    assert r.returncode == 0, r.stderr
    version = re.search(r'#define SUBQ_VERSION "([0-9.]+)"', open(os.path.join(REPO, "include", "subq.h")).read())
    assert r.stdout.split() == [version.group(1), "512"]
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True,
                         env=clean_env(LD_LIBRARY_PATH=str(prefix / "lib"))).stdout
    assert str(prefix / "lib" / "libsubq.so.") in ldd and "libsubq_lab" not in ldd


def test_readme_python_example(shared, subq_bin):
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    block = re.search(r"^### Python\n.*?```python\n(.*?)```", text, re.S | re.M).group(1)
    assert len(block.strip().splitlines()) == 5, block
    code = block.replace("../shared", shared)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env=clean_env(PYTHONPATH=os.path.join(REPO, "python"),
                                     SUBQ_LIB_PATH=os.path.dirname(subq_bin)))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and len(lines[0]) > 20 and lines[-1] == "(5, 512)", r.stdout  # the completion, the shape


def test_installed_convert(prefix, stories, tmp_path):
    """bin/subq convert runs the package installed beside it (with its own libsubq_lab.so)."""
    import numpy as np
    sys.path.insert(0, os.path.join(REPO, "python"))
    from subq import convert
    st = tmp_path / "p.safetensors"
    rng = np.random.default_rng(0)
    convert.write_safetensors(st, {"projections.2.W_Qs.weight": rng.standard_normal((8, 64)),
                                   "projections.2.W_Ks.weight": rng.standard_normal((8, 64))}, {"d_search": 8})
    out = tmp_path / "p.gguf"
    r = subprocess.run([str(prefix / "bin" / "subq"), "convert", str(st), str(out), "-m", stories],
                       capture_output=True, text=True, env=clean_env(), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "1 layers (2), d_search 8" in r.stdout and out.is_file()
    again = subprocess.run([str(prefix / "bin" / "subq"), "convert", str(st), str(out), "-m", stories],
                           capture_output=True, text=True, env=clean_env())
    assert again.returncode == 1 and again.stderr.strip() == "subq convert: error: %s exists (give --force to " \
        "replace it)" % out, again.stderr
