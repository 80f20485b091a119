"""Shared fixtures: the built CLI (SUBQ_BIN), the models (SUBQ_SHARED), a
scratch directory. The package is imported from the checkout (python/);
ctest sets SUBQ_LIB_PATH to the build's libsubq_lab.so."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
REPO = os.path.dirname(os.path.dirname(HERE))


def _need(name):
    v = os.environ.get(name)
    if not v:
        pytest.fail("%s is not set (run through ctest / make test)" % name)
    return v


@pytest.fixture(scope="session")
def subq_bin():
    path = _need("SUBQ_BIN")
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture(scope="session")
def shared():
    return _need("SUBQ_SHARED")


@pytest.fixture(scope="session")
def stories(shared):
    return os.path.join(shared, "models", "stories260K.gguf")


@pytest.fixture(scope="session")
def fixture_model(shared):
    return os.path.join(shared, "models", "fixture-4k-29m-q8_0.gguf")


def run_cli(subq_bin, *args, stdin=None):
    """The CLI's stdout (bytes); a failed run fails the test with its stderr."""
    r = subprocess.run([subq_bin] + [str(a) for a in args], capture_output=True, input=stdin, timeout=600)
    assert r.returncode == 0, "subq %s: %s" % (" ".join(map(str, args)), r.stderr.decode(errors="replace"))
    return r.stdout
