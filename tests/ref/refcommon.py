"""Shared plumbing for the check_*.py scripts (run by ctest with /usr/bin/python3).

Environment:
    SUBQ_BIN     path of the `subq` binary      (default: <repo>/build/subq)
    SUBQ_SHARED  shared models/data directory   (default: <repo>/../shared)
    SUBQ_TMP     scratch directory              (default: a fresh temp dir)

A missing dependency (numpy, model file, binary) is a FAILURE, never a skip.
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def die(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def require_numpy():
    try:
        import numpy  # noqa: F401
    except ImportError as e:
        die("numpy is not importable by %s (%s); run the checks with /usr/bin/python3"
            % (sys.executable, e))


def node_llamacpp_dir(ck):
    """tests/node, where node-llama-cpp (llama.cpp's prebuilt CPU build) is
    installed by scripts/install-deps.sh --test; without it the check fails
    (ck.finish), never skips."""
    d = os.path.join(REPO, "tests", "node")
    if not os.path.isdir(os.path.join(d, "node_modules", "node-llama-cpp")):
        ck.check("node-llama-cpp installed (scripts/install-deps.sh --test installs it)", False, d)
        ck.finish()
    return d


def shared_dir():
    d = os.environ.get("SUBQ_SHARED") or os.path.join(REPO, "..", "shared")
    d = os.path.normpath(d)
    if not os.path.isdir(d):
        die("shared directory %s does not exist (set SUBQ_SHARED)" % d)
    return d


def shared_file(*parts):
    p = os.path.join(shared_dir(), *parts)
    if not os.path.isfile(p):
        die("required file %s is missing" % p)
    return p


def subq_bin():
    b = os.environ.get("SUBQ_BIN") or os.path.join(REPO, "build", "subq")
    if not os.path.isfile(b) or not os.access(b, os.X_OK):
        die("subq binary %s is missing or not executable (set SUBQ_BIN)" % b)
    return b


def engine_bin(command):
    """subq-generate or subq-serve: the command built against the engine library alone, beside subq."""
    b = os.path.join(os.path.dirname(subq_bin()), "subq-" + command)
    if not os.path.isfile(b) or not os.access(b, os.X_OK):
        die("%s is missing or not executable (build the subq-%s target)" % (b, command))
    return b


_tmp = None


def tmp_dir():
    global _tmp
    if _tmp is None:
        d = os.environ.get("SUBQ_TMP")
        if d:
            os.makedirs(d, exist_ok=True)
            _tmp = d
        else:
            _tmp = tempfile.mkdtemp(prefix="subq_check_")
    return _tmp


def subq_env():
    """Environment for running subq. Under SUBQ_SANITIZED=1 (checks run with
    the ASan+UBSan build) leaks are detected and the sanitizers exit with
    codes other than subq's 1, so a sanitizer report never passes as a clean
    error."""
    env = dict(os.environ)
    if env.get("SUBQ_SANITIZED") == "1":
        env["ASAN_OPTIONS"] = "detect_leaks=1:exitcode=86:allocator_may_return_null=1"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:exitcode=87:print_stacktrace=1"
    return env


class SubqError(Exception):
    """A subq command failed (non-zero exit, timeout, missing output)."""


def run_subq(args, timeout=600):
    """Run `subq ARGS...`; returns stdout as bytes. Non-zero exit or a timeout
    raises SubqError (scripts record it as a failed check and go on)."""
    cmd = [subq_bin()] + [str(a) for a in args]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=subq_env())
    except subprocess.TimeoutExpired:
        raise SubqError("timed out after %d s: %s" % (timeout, " ".join(cmd)))
    dt = time.time() - t0
    if r.returncode != 0:
        raise SubqError("command failed (exit %d, %.1f s): %s\n--- stderr:\n%s"
            % (r.returncode, dt, " ".join(repr(c) if " " in c or c == "" else c for c in cmd),
               r.stderr.decode("utf-8", errors="replace")[-4000:]))
    return r.stdout


class Checks:
    """Collects named checks, prints one line each, exits non-zero if any failed."""

    def __init__(self, script):
        self.script = script
        self.n_pass = 0
        self.failures = []
        self.t0 = time.time()

    def check(self, name, ok, detail=""):
        line = ("PASS " if ok else "FAIL ") + name + (": " + detail if detail else "")
        print(line, flush=True)
        if ok:
            self.n_pass += 1
        else:
            self.failures.append(name)
        return ok

    def guarded(self, name, fn, *args):
        """Run fn(*args); a SubqError inside becomes a failed check `name`."""
        try:
            return fn(*args)
        except SubqError as e:
            self.check(name, False, str(e))
            return None

    def finish(self):
        dt = time.time() - self.t0
        if not self.failures and self.n_pass == 0:  # a check that checked nothing cannot pass
            self.failures.append("no checks ran")
        if self.failures:
            print("%s: %d passed, %d FAILED (%s) in %.1f s"
                  % (self.script, self.n_pass, len(self.failures), ", ".join(self.failures), dt),
                  flush=True)
            sys.exit(1)
        print("%s: all %d checks passed in %.1f s" % (self.script, self.n_pass, dt), flush=True)
        sys.exit(0)
