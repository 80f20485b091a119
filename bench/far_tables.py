#!/usr/bin/python3
"""Tables and a chart for BENCHMARKS.md from bench/far_evidence.sh's results.

  bench/far_tables.py DIR ppl [CHART.svg]   perplexity by length and method; with
                                            CHART.svg, perplexity against length drawn
  bench/far_tables.py DIR recall [CHART.svg [DIR2 [LABEL2]]]
                                            passkey accuracy by length, depth and method (the
                                            1M runs of one prompt each summed); with CHART.svg,
                                            the share right against length per method, and
                                            DIR2's (another haystack) dashed
  bench/far_tables.py DIR probe             block scan recall and time at 128K
  bench/far_tables.py DIR decode            decode at 128K, this binary and the one before
"""
import glob
import json
import math
import os
import sys

PPL_METHODS = [  # file suffix, label
    ("full", "full attention"),
    ("windows", "dense windows of 4096 (same tokens)"),
    ("streaming", "sinks + window (StreamingLLM), 1024 keys"),
    ("quest_window", "quest@64, far keys at 1024"),
    ("exact_none", "learned exact@64, far keys where they are"),
    ("exact_window", "learned exact@64 `--far-pos window`"),
    ("exact_order", "learned exact@64 `--far-pos order`"),
    ("exact_group", "learned exact@64 `--far-pos group`"),
]
LENGTHS = [4096, 16384, 65536]


def load(path):
    with open(path) as f:
        return json.load(f)


def ppl_results(d):
    out = {}
    for L in LENGTHS:
        for key, _ in PPL_METHODS:
            p = os.path.join(d, "ppl_%d_%s.json" % (L, key))
            if os.path.exists(p):
                out[(L, key)] = load(p)
    return out


def ppl_table(d):
    r = ppl_results(d)
    print("| method | " + " | ".join("%dK" % (L // 1024) for L in LENGTHS) + " |")
    print("|---|" + "---|" * len(LENGTHS))
    for key, label in PPL_METHODS:
        cells = []
        for L in LENGTHS:
            x, base = r.get((L, key)), r.get((L, "windows"))
            if not x:
                cells.append("-")
            elif key == "windows" or not base:
                cells.append("%.2f" % x["ppl"])
            else:
                cells.append("%.2f (%+.1f%%)" % (x["ppl"], 100 * (x["ppl"] / base["ppl"] - 1)))
        print("| %s | %s |" % (label, " | ".join(cells)))
    print()
    print("| seconds | " + " | ".join("%dK" % (L // 1024) for L in LENGTHS) + " |")
    print("|---|" + "---|" * len(LENGTHS))
    for key, label in PPL_METHODS:
        print("| %s | %s |" % (label, " | ".join("%.0f" % r[(L, key)]["seconds"] if (L, key) in r else "-"
                                               for L in LENGTHS)))
    print()
    print("tokens scored: " + ", ".join("%dK %d" % (L // 1024, r[(L, "windows")]["n_tokens_scored"])
                                        for L in LENGTHS if (L, "windows") in r))


def svg_frame(W, H, ml, mr, mt, mb, x_title, y_title):
    """An SVG's opening, white background and axis titles, as a list of lines."""
    return ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (W, H),
            '<rect width="100%" height="100%" fill="white"/>'], [
        '<text x="%d" y="%d" text-anchor="middle">%s</text>' % ((ml + W - mr) // 2, H - 8, x_title),
        '<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>' % (
            (mt + H - mb) // 2, (mt + H - mb) // 2, y_title)]


def svg_legend(o, W, mr, mt, row, color, style, text):
    """Legend entry `row` at the right of the plot."""
    y = mt + 10 + 16 * row
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (W - mr + 10, y, W - mr + 30, y, color, style))
    o.append('<text x="%d" y="%d">%s</text>' % (W - mr + 35, y + 4, text))


def svg_save(path, o):
    """Close the SVG and write it atomically."""
    o.append("</svg>")
    with open(path + ".part", "w") as f:
        f.write("\n".join(o) + "\n")
    os.replace(path + ".part", path)


def ppl_chart(d, path):
    """Perplexity against length, log-log, one line per method."""
    r = ppl_results(d)
    W, H, ml, mr, mt, mb = 640, 380, 60, 250, 20, 40
    xs = [math.log2(L) for L in LENGTHS]
    ys = [math.log10(x["ppl"]) for x in r.values()]
    y0, y1 = math.floor(min(ys) * 10) / 10, math.ceil(max(ys) * 10) / 10
    X = lambda L: ml + (math.log2(L) - xs[0]) / (xs[-1] - xs[0]) * (W - ml - mr)
    Y = lambda p: mt + (y1 - math.log10(p)) / (y1 - y0) * (H - mt - mb)
    colors = ["#d62728", "#000000", "#7f7f7f", "#9467bd", "#8c564b", "#1f77b4", "#2ca02c", "#ff7f0e"]
    o, titles = svg_frame(W, H, ml, mr, mt, mb, "context length (tokens, log scale); the fixture was trained at 4K",
                          "perplexity (log scale)")
    for L in LENGTHS:
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (X(L), mt, X(L), H - mb))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%dK</text>' % (X(L), H - mb + 15, L // 1024))
    for p in [20, 30, 50, 100, 200, 500, 1000]:
        if y0 <= math.log10(p) <= y1:
            o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (ml, Y(p), W - mr, Y(p)))
            o.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (ml - 5, Y(p) + 4, p))
    o += titles
    row = 0
    for (key, label), c in zip(PPL_METHODS, colors):
        pts = [(L, r[(L, key)]["ppl"]) for L in LENGTHS if (L, key) in r]
        if not pts:
            continue
        o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            c, " ".join("%.1f,%.1f" % (X(L), Y(p)) for L, p in pts)))
        for L, p in pts:
            o.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (X(L), Y(p), c))
        svg_legend(o, W, mr, mt, row, c, "", label.replace("`", ""))
        row += 1
    svg_save(path, o)


def recall_share(d):
    """{(method, length): [right, prompts]} over a directory's recall grids and 1M runs."""
    out = {}
    for p in glob.glob(os.path.join(d, "recall_*.json")):
        x = load(p)
        for m in x["methods"]:
            for li, L in enumerate(x["lengths"]):
                c = out.setdefault((m["method"], L), [0, 0])
                c[0] += sum(m["exact"][li])
                c[1] += x["trials"] * len(m["exact"][li])
    return out


def recall_chart(d, path, d2=None, label2=None):
    """Share of pass keys found against length, log2 x axis, one line per
    method (DIR2's dashed, named label2)."""
    label2 = label2 or (os.path.basename(d2.rstrip("/")) if d2 else "")
    sets = [(recall_share(d), "")] + ([(recall_share(d2), "dash")] if d2 else [])
    lengths = sorted({L for r, _ in sets for (_, L) in r})
    W, H, ml, mr, mt, mb = 640, 320, 50, 270, 20, 40
    x0, x1 = math.log2(lengths[0]), math.log2(lengths[-1])
    X = lambda L: ml + (math.log2(L) - x0) / (x1 - x0 or 1) * (W - ml - mr)
    Y = lambda v: mt + (1 - v) * (H - mt - mb)
    colors = ["#1f77b4", "#2ca02c", "#ff7f0e", "#7f7f7f", "#d62728", "#9467bd", "#8c564b"]
    o, titles = svg_frame(W, H, ml, mr, mt, mb, "prompt length (tokens, log scale); the fixture was trained at 4K",
                          "share of pass keys found")
    for L in lengths:
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (X(L), mt, X(L), H - mb))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (
            X(L), H - mb + 15, "%dM" % (L >> 20) if L >= 1 << 20 else "%dK" % (L >> 10)))
    for v in [0, 0.25, 0.5, 0.75, 1]:
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (ml, Y(v), W - mr, Y(v)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (ml - 5, Y(v) + 4, v))
    o += titles
    methods = []  # in order of first appearance, shortest length first
    for r, _ in sets:
        for m, _ in sorted(r, key=lambda k: k[1]):
            if m not in methods:
                methods.append(m)
    row = 0
    for r, dash in sets:
        for mi, m in enumerate(methods):
            pts = [(L, r[(m, L)]) for L in lengths if (m, L) in r]
            if not pts or (dash and len(pts) < 2):  # the other haystack: lines only
                continue
            c = colors[mi % len(colors)]
            style = ' stroke-dasharray="5,3"' if dash else ""
            o.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>' % (
                c, style, " ".join("%.1f,%.1f" % (X(L), Y(a / n)) for L, (a, n) in pts)))
            for L, (a, n) in pts:
                o.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%d of %d</title></circle>' % (X(L), Y(a / n), c, a, n))
            svg_legend(o, W, mr, mt, row, c, style, m + (", " + label2 if dash else ""))
            row += 1
    svg_save(path, o)


def recall_table(d):
    files = sorted(glob.glob(os.path.join(d, "recall_*.json")),
                   key=lambda p: (len(p), p))
    files = [p for p in files if not os.path.basename(p).startswith("recall_1m_")]
    runs_1m = sorted(glob.glob(os.path.join(d, "recall_1m_*.json")))
    if runs_1m:
        right = [load(p)["methods"][0]["exact"][0][0] for p in runs_1m]
        print("1M, one prompt a run: %d of %d right (%s)" % (sum(right), len(right), ", ".join(
            "%s %s" % (os.path.basename(p)[10:-5], "right" if r else "wrong") for p, r in zip(runs_1m, right))))
        print()
    for p in files:
        x = load(p)
        print("%s: %d trials a cell, %s prefill, tail %d" % (os.path.basename(p), x["trials"], x["prefill"], x["tail"]))
        print()
        print("| method | length | " + " | ".join("depth %g" % g for g in x["depths"]) + " | all | exact answers |")
        print("|---|---|" + "---|" * (len(x["depths"]) + 2))
        for m in x["methods"]:
            for li, L in enumerate(x["lengths"]):
                acc = m["accuracy"][li]
                ex = m["exact"][li]
                print("| %s | %d | %s | %.2f | %d of %d |" % (
                    m["method"], L, " | ".join("%.2f" % a for a in acc), sum(acc) / len(acc), sum(ex),
                    x["trials"] * len(acc)))
        print()


def probe_table(d):
    print("| run | recall@64 vs full scan | prefill s | select s | tok/s |")
    print("|---|---|---|---|---|")
    for p in sorted(glob.glob(os.path.join(d, "probe_*.json"))):
        x = load(p)
        for r in x["prefill"]:
            if r.get("check_recall") is not None and r["attn"] != "full":
                print("| %s | %.3f | %.1f | %.1f | %.0f |" % (os.path.basename(p)[:-5], r["check_recall"], r["seconds"],
                                                       r["select_s"], r["tok_s"]))


def decode_table(d):
    print("| run | full tok/s | exact tok/s | exact: attention ms | select ms | insert ms | exact / full |")
    print("|---|---|---|---|---|---|---|")
    for p in sorted(glob.glob(os.path.join(d, "decode_*.json"))):
        rows = {r["attn"]: r for r in load(p)["decode"]}
        f, e = rows["full"], rows["exact"]
        print("| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2fx |" % (
            os.path.basename(p)[:-5], f["decode_tok_s"], e["decode_tok_s"], e["attn_ms"], e["select_ms"],
            e["insert_ms"], e["decode_tok_s"] / f["decode_tok_s"]))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    d, what = sys.argv[1], sys.argv[2]
    if what == "ppl":
        ppl_table(d)
        if len(sys.argv) > 3:
            ppl_chart(d, sys.argv[3])
    elif what == "recall":
        recall_table(d)
        if len(sys.argv) > 3:
            recall_chart(d, sys.argv[3], *sys.argv[4:6])
    elif what == "probe":
        probe_table(d)
    elif what == "decode":
        decode_table(d)
    else:
        sys.exit(__doc__)
