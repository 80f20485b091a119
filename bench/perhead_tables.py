#!/usr/bin/python3
"""Tables for BENCHMARKS.md from bench/perhead_evidence.sh's results.

  bench/perhead_tables.py DIR eval      PPL gap / KL / mass / KV rows by K, per
                                        granularity and oracle (eval_*, oracle_*)
  bench/perhead_tables.py DIR layers    mass@K per layer at the largest K
  bench/perhead_tables.py DIR train     training throughput (train_*.err)
  bench/perhead_tables.py DIR speed     decode and sparse prefill by granularity (decode_*,
                                        prefill_*, qwen_*)
  bench/perhead_tables.py DIR group     the same before and after a KV head's query search
                                        heads scan together (group_*): median (range) of the rounds
"""
import json
import os
import re
import sys

ROWS = [  # file, label
    ("eval_layer", "learned, one set a layer (1 x 128)"),
    ("eval_kv-head", "learned, one set per KV head (2 x 64)"),
    ("eval_head", "learned, one set per query head (8 x 64)"),
    ("eval_head_144", "learned, one set per query head (8 x 64), 144 steps"),
    ("eval_head_144_phi", "the same + completion (fixture-4k-phi-4096.gguf)"),
    ("eval_head_264", "learned, one set per query head (8 x 64), 264 steps"),
    ("eval_head_264_phi", "the same + completion (fixture-4k-phi-4096.gguf)"),
    ("eval_native_head_dot", "model's W_q / W_k (`--init native`), per query head (8 x 64), by dot"),
    ("eval_native_head", "the same, by cosine"),
    ("eval_native_head_16_dot", "the same, 16 steps of training from there, by dot"),
    ("eval_native_head_16", "the same, by cosine"),
    ("eval_native_kv-head_dot", "model's W_q / W_k (`--init native`), per KV head (2 x 64), by dot"),
    ("oracle_headmean-dot", "oracle, head-mean raw QK (one set a layer)"),
    ("oracle_per-kv-head", "oracle, group-mean raw QK (per KV head)"),
    ("oracle_per-head", "oracle, each head's raw QK (per query head)"),
]


def load(d, name):
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def fmt(v, f):
    return "-" if v is None else f % v


def eval_table(d):
    ks = None
    lines = []
    for name, label in ROWS:
        r = load(d, name)
        if r is None:
            continue
        ms = {m["k"]: m for m in r["methods"]}
        ks = ks or sorted(ms)
        cells = []
        for k in ks:
            m = ms.get(k)
            cells.append("-" if m is None else "%+.1f%% / %.3f / %.3f / %s" % (
                100 * m["gap"], m["kl"]["mean"], m["mass"], fmt(m.get("kv_rows"), "%.0f")))
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    if not lines:
        sys.exit("perhead_tables.py: no eval results in " + d)
    print("| selector | " + " | ".join("K = %d: PPL gap / KL / mass / KV rows" % k for k in ks) + " |")
    print("|---|" + "---|" * len(ks))
    print("\n".join(lines))


def layers_table(d):
    head = None
    for name, label in ROWS:
        r = load(d, name)
        if r is None:
            continue
        m = max(r["methods"], key=lambda m: m["k"])
        lay = [(x["layer"], x["mass"]) for x in m["layers"]]
        if head is None:
            head = [l for l, _ in lay]
            print("| selector (mass at K = %d) | %s |" % (m["k"], " | ".join("layer %d" % l for l in head)))
            print("|---|" + "---|" * len(head))
        print("| %s | %s |" % (label, " | ".join(fmt(v, "%.3f") for _, v in lay)))


def train_table(d):
    print("| granularity | tok/s (one thread, at 4096) |")
    print("|---|---|")
    for g in ("layer", "kv-head", "head"):
        p = os.path.join(d, "train_%s.err" % g)
        if not os.path.exists(p):
            continue
        rate = re.findall(r"subq train-search: \d+ steps, (\d+) tok/s", open(p).read())
        print("| %s | %s |" % (g, rate[-1] if rate else "-"))


def speed_rows(d, model, runs):
    """runs: [(label, decode names by context, prefill name)]"""
    for label, dec, pre in runs:
        cells = []
        for name in dec:
            r = load(d, name)
            x = r["decode"][0] if r else None
            cells.append("-" if x is None else "%.1f (select %.1f ms)" % (x["decode_tok_s"], x["select_ms"]))
        r = load(d, pre)
        x = r["prefill"][0] if r else None
        cells.append("-" if x is None else "%.0f (select %.1f s)" % (x["tok_s"], x["select_s"]))
        print("| %s | %s | %s |" % (model, label, " | ".join(cells)))


def speed_table(d):
    print("| model | search | decode tok/s at 4K | at 32K | sparse prefill tok/s at 8K |")
    print("|---|---|---|---|---|")
    speed_rows(d, "fixture", [("%s (%s)" % (g, w), ["decode_4096_" + g, "decode_32768_" + g], "prefill_8192_" + g)
                              for g, w in (("layer", "1 x 128"), ("kv-head", "2 x 64"), ("head", "8 x 64"))])
    speed_rows(d, "Qwen3-0.6B shape", [("%s, %s each" % (g, w), ["-", "qwen_decode_32768_%s_%s" % (g, w)],
                                        "qwen_prefill_8192_%s_%s" % (g, w))
                                       for g, w in (("layer", 128), ("kv-head", 16), ("head", 16), ("kv-head", 64))])


def median_range(vals, f):
    if not vals:
        return "-"
    v = sorted(vals)
    return (f + " (" + f + "-" + f + ")") % (v[len(v) // 2], v[0], v[-1])


def group_runs(d, stem, part, key):
    """one value of every round of group_STEM_{old,new}_R: (old values, new values)"""
    got = {}
    for b in ("old", "new"):
        got[b] = []
        for r in range(1, 10):
            x = load(d, "group_%s_%s_%d" % (stem, b, r))
            if x is not None:
                got[b].append(x[part][0][key])
    return got["old"], got["new"]


def group_table(d):
    print("| model | context | search | decode tok/s before | after | select ms before | after |")
    print("|---|---|---|---|---|---|---|")
    for model, label, ctxs, cfgs in (
            ("fixture", "fixture", (4096, 32768), (("layer", "1 x 128"), ("kv-head", "2 x 64"), ("head", "8 x 64"))),
            ("qwen", "Qwen3-0.6B shape", (32768,), (("layer", "1 x 128"), ("kv-head", "8 x 16"), ("head", "16 x 16")))):
        for c in ctxs:
            for g, w in cfgs:
                stem = "%s_%d_%s" % (model, c, g)
                t_old, t_new = group_runs(d, stem, "decode", "decode_tok_s")
                if not t_old and not t_new:
                    continue
                s_old, s_new = group_runs(d, stem, "decode", "select_ms")
                print("| %s | %dK | %s (%s) | %s | %s | %s | %s |" % (
                    label, c // 1024, g, w, median_range(t_old, "%.1f"), median_range(t_new, "%.1f"),
                    median_range(s_old, "%.2f"), median_range(s_new, "%.2f")))
    print()
    print("| fixture, sparse prefill at 8K | tok/s before | after | select s before | after |")
    print("|---|---|---|---|---|")
    for g in ("layer", "kv-head", "head"):
        t_old, t_new = group_runs(d, "prefill_8192_" + g, "prefill", "tok_s")
        s_old, s_new = group_runs(d, "prefill_8192_" + g, "prefill", "select_s")
        print("| %s | %s | %s | %s | %s |" % (g, median_range(t_old, "%.0f"), median_range(t_new, "%.0f"),
                                             median_range(s_old, "%.2f"), median_range(s_new, "%.2f")))


def main():
    tables = {"eval": eval_table, "layers": layers_table, "train": train_table, "speed": speed_table,
              "group": group_table}
    if len(sys.argv) != 3 or sys.argv[2] not in tables:
        sys.exit(__doc__)
    tables[sys.argv[2]](sys.argv[1])


if __name__ == "__main__":
    main()
