#!/usr/bin/python3
"""ctest check: long-context quality on the 4K fixture model, a small slice
of the evidence in BENCHMARKS.md ("Quality on a model that uses its
context"), with the committed projections (layers 1-7): position-free
(tests/models/fixture-4k-search.gguf) and rotated by position
(fixture-4k-search-rope.gguf, d_search 128, the last 64 dims rotated).

  - `subq eval` at 2048 tokens, two WikiText-2 test windows (text the fixture
    and the projections never saw): full attention's perplexity is the
    model's (models/README.md: 36.1 at 4096, 47.8 at 256; a window of 2048
    lies between, within the spread of two windows); learned exact@64 is
    closer to full attention than window@64 with the same keys (KL, top-1;
    not in head-mean mass, which the window holds more of: see
    BENCHMARKS.md); its PPL gap stays under +40% (+23% measured when the
    projections were committed, window@64 +53%: a regression in retrieval,
    RoPE or the projections' loading shows as a jump). The rotated projections
    are closer still: a smaller gap and KL than the position-free ones, under
    +15% (+9.7% measured when they were committed; position-free +22.5%).
  - `subq recall` passkey at 1024 and 2048 tokens, needles far from the
    question (depths 0.1 and 0.3): full attention finds them on most prompts
    (models/README.md: 100% at 1K, 80% at 2K on a book), exact@64 gives full
    attention's answer on most of them, and window@64, which cannot see that
    far back, on almost none (so the slice measures retrieval, not luck);
    the rotated projections' exact@64 too: the rotation must not cost the
    far-back retrieval.
"""

import json
import os

import refcommon as rc


def method(result, name):
    for m in result["methods"]:
        if m["method"] == name:
            return m
    raise KeyError(name)


def mean_grid(grid):
    cells = [a for row in grid for a in row]
    return sum(cells) / len(cells)


def run_eval(ck, name, model, search, text, selectors):
    out = ck.guarded(name, rc.run_subq,
                     ["eval", "-m", model, "--eval-file", text, "-c", 2048, "--windows", 2, "--search", search,
                      "--sparse-layers", "1-7", "--selectors", selectors, "--k-sweep", 64, "--static-split", 0,
                      "--json", "-t", 2])
    return json.loads(out) if out is not None else None


def check_eval(ck, model, search, search_rope, text):
    r = run_eval(ck, "eval runs", model, search, text, "exact,window")
    if r is None:
        return
    full = r["full_ppl"]
    ck.check("full attention's perplexity at 2048 is the model's", 30.0 < full < 48.0, "%.2f" % full)
    ex, win = method(r, "exact@64"), method(r, "window@64")
    detail = "exact@64 KL %.3f top1 %.3f mass %.3f gap %+.1f%%; window@64 KL %.3f top1 %.3f mass %.3f gap %+.1f%%" % (
        ex["kl"]["mean"], ex["top1"], ex["mass"], 100 * ex["gap"], win["kl"]["mean"], win["top1"], win["mass"],
        100 * win["gap"])
    ck.check("learned retrieval is closer to full attention than the window (KL)",
             ex["kl"]["mean"] < win["kl"]["mean"], detail)
    ck.check("learned retrieval agrees with full attention more often than the window (top-1)",
             ex["top1"] > win["top1"], detail)
    ck.check("exact@64's perplexity gap stays under +40%", ex["gap"] < 0.40, detail)
    rr = run_eval(ck, "eval runs with the rotated projections", model, search_rope, text, "exact")
    if rr is None:
        return
    rot = method(rr, "exact@64")
    detail = "rotated exact@64 KL %.3f gap %+.1f%%; position-free KL %.3f gap %+.1f%%" % (
        rot["kl"]["mean"], 100 * rot["gap"], ex["kl"]["mean"], 100 * ex["gap"])
    ck.check("the rotated search space is closer to full attention than the position-free one",
             rot["kl"]["mean"] < ex["kl"]["mean"] and rot["gap"] < ex["gap"], detail)
    ck.check("rotated exact@64's perplexity gap stays under +15%", rot["gap"] < 0.15, detail)


def check_recall(ck, model, search, text, label=""):
    out = ck.guarded("recall runs" + label, rc.run_subq,
                     ["recall", "-m", model, "--haystack", text, "--task", "passkey", "--lengths", "1024,2048",
                      "--depths", "0.1,0.3", "--trials", 2, "--methods", "full,exact@64,window@64", "--search",
                      search, "--sparse-layers", "1-7", "--json", "-t", 2])
    if out is None:
        return
    r = json.loads(out)
    full, ex, win = method(r, "full"), method(r, "exact@64"), method(r, "window@64")
    acc = mean_grid(full["accuracy"])
    ck.check("full attention recalls the passkey at 1-2K", acc >= 0.75, "accuracy %.2f" % acc)
    agree_ex, agree_win = mean_grid(ex["agreement"]), mean_grid(win["agreement"])
    detail = "agreement with full: exact@64 %.2f, window@64 %.2f" % (agree_ex, agree_win)
    ck.check("exact@64%s gives full attention's answer" % label, agree_ex >= 0.75, detail)
    ck.check("window@64 cannot (the needle is beyond its reach)", mean_grid(win["accuracy"]) <= 0.25, detail)


def main():
    ck = rc.Checks("check_fixture")
    model = rc.shared_file("models", "fixture-4k-29m-q8_0.gguf")
    text = rc.shared_file("data", "text", "wikitext-2-raw.test.txt")
    search = os.path.join(rc.REPO, "tests", "models", "fixture-4k-search.gguf")
    search_rope = os.path.join(rc.REPO, "tests", "models", "fixture-4k-search-rope.gguf")
    check_eval(ck, model, search, search_rope, text)
    check_recall(ck, model, search, text)
    check_recall(ck, model, search_rope, text, " (rotated)")
    ck.finish()


if __name__ == "__main__":
    main()
