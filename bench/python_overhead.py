#!/usr/bin/python3
"""Decode through the Python package against the CLI: the same model, prompt
and settings (greedy, --ignore-eos, N tokens, one thread), alternating runs;
the CLI's generated tok/s as it prints it, Python's as generate() takes
(the same C loop, a Python callback per token). Prints medians and the ratio.

    bench/python_overhead.py MODEL [N] [RUNS]   (from the checkout, after make)
"""

import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("SUBQ_LIB_PATH", os.path.join(REPO, "build"))
import subq  # noqa: E402


def main():
    model = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    prompt = "Once upon a time"
    m = subq.Model(model, n_ctx=n + 64, n_threads=1)
    cli, py = [], []
    for _ in range(runs):
        r = subprocess.run([os.path.join(REPO, "build", "subq"), "generate", "-m", model, "-p", prompt, "-n", str(n),
                            "--temp", "0", "--ignore-eos", "-t", "1", "-c", str(n + 64)], capture_output=True,
                           text=True, check=True)
        cli.append(float(re.search(r"generated \d+ tokens in [0-9.]+ s \(([0-9.]+) tok/s\)", r.stderr).group(1)))
        m.reset()
        n_prompt = len(m.tokenize(prompt))
        m.generate(prompt, max_tokens=1, temperature=0)  # the prompt, as the CLI's line counts it apart
        t0 = time.perf_counter()
        m.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True)  # reuses the cached prompt
        py.append((n - 1) / (time.perf_counter() - t0))  # n tokens sampled, n - 1 decode steps after the prompt
        assert m.n_past() == n_prompt + n - 1
    c, p = statistics.median(cli), statistics.median(py)
    print("%s, %d tokens, %d runs, 1 thread, ISA %s: CLI %.1f tok/s (min %.1f max %.1f), Python %.1f tok/s "
          "(min %.1f max %.1f), Python/CLI %.3f" % (os.path.basename(model), n, runs, subq.load_library()
                                                    .subq_isa_name().decode(), c, min(cli), max(cli), p, min(py),
                                                    max(py), p / c))


if __name__ == "__main__":
    main()
