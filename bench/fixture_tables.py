#!/usr/bin/python3
"""Markdown tables for BENCHMARKS.md from `subq eval --json` and
`subq recall --json` outputs (bench/fixture_evidence.sh).

  bench/fixture_tables.py eval FILE.json     K sweep per selector, then per-layer mass
  bench/fixture_tables.py recall FILE.json   accuracy and agreement per length and depth band
"""
import json
import sys


def eval_tables(d):
    print("%d windows of %d tokens, %d scored, layers %s, full attention PPL %.3f, %.0f s" % (
        d["windows"], d["ctx"], d["tokens_scored"], d["sparse_layers"], d["full_ppl"], d["seconds"]))
    print()
    print("| method | PPL gap | KL(full‖method) [95% CI] | top-1 agreement | mass | recall |")
    print("|---|---|---|---|---|---|")
    for m in d["methods"]:
        kl = m["kl"]
        cell = lambda k: ("%.3f" % m[k]) if m.get(k) is not None else "-"
        print("| %s | %+.1f%% | %.3f [%.3f, %.3f] | %s | %s | %s |" % (
            m["method"], 100 * m["gap"], kl["mean"], kl["lo"], kl["hi"], cell("top1"), cell("mass"), cell("recall")))
    if "compare" in d:
        c = d["compare"]
        print()
        print("%s against %s: mean NLL difference %.4f [%.4f, %.4f]" % (c["a"], c["b"], c["mean"], c["lo"], c["hi"]))
    print()
    layers = [L["layer"] for L in d["methods"][0]["layers"]]
    print("| mass per layer | " + " | ".join("L%d" % L for L in layers) + " |")
    print("|---|" + "---|" * len(layers))
    for m in d["methods"]:
        print("| %s | " % m["method"] + " | ".join("%.3f" % L["mass"] for L in m["layers"]) + " |")
    if d.get("per_layer"):
        print()
        print("| KL, one layer substituted | " + " | ".join("L%d" % L for L in layers) + " |")
        print("|---|" + "---|" * len(layers))
        for m in d["methods"]:
            print("| %s | " % m["method"] + " | ".join("%.3f" % L["alone_kl"]["mean"] for L in m["layers"]) + " |")


# Depth 0 puts the needle at the start of the haystack, 1 at its end.
BANDS = (("far 0-0.3", 0.0, 0.35), ("middle 0.4-0.6", 0.35, 0.65), ("near 0.7-1", 0.65, 1.01))


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def recall_tables(d):
    depths, lengths = d["depths"], d["lengths"]
    full = next(m for m in d["methods"] if m["method"] == "full")
    print("%s, %s prefill, %d trials per cell, depths %s" % (d["task"], d["prefill"], d["trials"],
                                                              ",".join("%g" % x for x in depths)))
    print()
    head = " | ".join("%d: acc / agree" % n for n in lengths)
    print("| method | " + head + " | agree, worst band | acc where full is right |")
    print("|---|" + "---|" * (len(lengths) + 2))
    for m in d["methods"]:
        cells = []
        worst = 1.0
        for li in range(len(lengths)):
            acc, agr = m["accuracy"][li], m["agreement"][li]
            cells.append("%.2f / %.2f" % (mean(acc), mean(agr)))
            for _, lo, hi in BANDS:
                band = [agr[i] for i, x in enumerate(depths) if lo <= x < hi]
                if band:
                    worst = min(worst, mean(band))
        # cells where full attention answered every trial right: the method's
        # accuracy there is its recall of what full attention finds
        right = [m["accuracy"][li][i] for li in range(len(lengths)) for i in range(len(depths))
                 if full["accuracy"][li][i] >= 1.0]
        cond = "%.2f (%d cells)" % (mean(right), len(right)) if right else "- (no such cell)"
        print("| %s | %s | %.2f | %s |" % (m["method"], " | ".join(cells), worst, cond))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("eval", "recall"):
        sys.exit(__doc__.strip())
    d = json.load(open(sys.argv[2]))
    (eval_tables if sys.argv[1] == "eval" else recall_tables)(d)


main()
