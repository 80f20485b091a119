#!/usr/bin/python3
"""ctest check: `subq recall` runs end to end on stories260K for full
attention and every selector, with dense and sparse prefill; its JSON grid
has the lengths x depths asked for with accuracies in [0, 1]; the SVG heat
maps are well-formed XML with one cell per grid point; bad input (a length
above the model's context, an empty haystack, a needle longer than the
length) is a one-line error. stories260K was never trained to recall, so
accuracy itself is not asserted."""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import refcommon as rc


def main():
    ck = rc.Checks("check_recall")
    model = rc.shared_file("models", "stories260K.gguf")
    hay = rc.shared_file("data", "text", "pride-and-prejudice.txt")
    bin_ = rc.subq_bin()
    tmp = rc.tmp_dir()
    feats = json.loads(rc.run_subq(["info", "--features", "--json"]))
    selectors = ["exact", "hnsw", "quest", "oracle", "window"] + (["faiss"] if feats.get("faiss") else [])
    methods = "full," + ",".join("%s@32" % s for s in selectors)
    svg_dir = os.path.join(tmp, "recall_svg")
    os.makedirs(svg_dir, exist_ok=True)
    lengths, depths = [256, 500], [0, 0.5, 1]
    for prefill in ("dense", "sparse"):
        args = ["recall", "-m", model, "--haystack", hay, "--lengths", "256,500", "--depths", "0,0.5,1",
                "--trials", 1, "--methods", methods, "--random-search", 16, "--sparse-layers", "1-4",
                "--json", "--svg-dir", svg_dir, "--force", "-t", 1]
        if prefill == "sparse":
            args.append("--sparse-prefill")
        out = ck.guarded("recall runs (%s prefill)" % prefill, rc.run_subq, args)
        if out is None:
            continue
        r = json.loads(out)
        ck.check("prefill reported (%s)" % prefill, r.get("prefill") == prefill, str(r.get("prefill")))
        names = [m["method"] for m in r["methods"]]
        ck.check("every method ran (%s)" % prefill, names == methods.split(","), str(names))
        ok = all(len(m["accuracy"]) == len(lengths) and all(len(row) == len(depths) and
                                                             all(0.0 <= a <= 1.0 for a in row)
                                                             for row in m["accuracy"]) for m in r["methods"])
        ck.check("grid shape and range (%s)" % prefill, ok)
    for name in methods.split(","):
        path = os.path.join(svg_dir, "recall_%s.svg" % name.replace("@", "_"))
        try:
            root = ET.parse(path).getroot()
            cells = [e for e in root.iter() if e.tag.endswith("rect") and "stroke" in e.attrib]
            ck.check("heat map %s" % name, len(cells) == len(lengths) * len(depths), "%d cells" % len(cells))
        except (OSError, ET.ParseError) as e:
            ck.check("heat map %s" % name, False, str(e))

    # --kv-file: the methods' cache and the shared dense prefill's (FILE.prefill) on disk give the
    # answers of the in-memory run; FILE.prefill is the run's own (removed; an existing one refused)
    kv = os.path.join(tmp, "recall.kv")
    for f in (kv, kv + ".prefill"):
        if os.path.exists(f):
            os.unlink(f)
    small = ["recall", "-m", model, "--haystack", hay, "--lengths", "256,500", "--depths", "0,0.5,1", "--trials", 1,
             "--methods", "full,exact@32,window@32", "--random-search", 16, "--sparse-layers", "1-4", "-t", 1]
    answers = []  # -v: every method's answer to every prompt, on stderr
    for extra in ([], ["--kv-file", kv]):
        p = subprocess.run([bin_] + [str(a) for a in small + extra] + ["-v"], capture_output=True, timeout=300,
                           env=rc.subq_env())
        answers.append([l for l in p.stderr.decode("utf-8", "replace").splitlines() if " got " in l]
                       if p.returncode == 0 else None)
    ck.check("recall --kv-file: every answer as in memory (18 answers)",
             answers[0] is not None and len(answers[0]) == 18 and answers[0] == answers[1], str(answers[1])[:300])
    ck.check("recall --kv-file: the prefill's file is removed, the methods' kept",
             os.path.exists(kv) and not os.path.exists(kv + ".prefill"))
    open(kv + ".prefill", "w").close()  # (the file holds the last run's tokens: --kv-reset lets it start over)
    p = subprocess.run([bin_] + [str(a) for a in small] + ["--kv-file", kv, "--kv-reset"], capture_output=True,
                       timeout=120)
    ck.check("recall --kv-file refuses an existing FILE.prefill (never removes what it did not make)",
             p.returncode == 1 and b"exists" in p.stderr and os.path.exists(kv + ".prefill"), p.stderr.decode()[-300:])

    # no --haystack: the pass-key filler (its prompts are checked in test_recall)
    p = subprocess.run([bin_, "recall", "-m", model, "--lengths", "256", "--depths", "0.5", "--trials", "1",
                        "--methods", "full", "--json"], capture_output=True, timeout=120)
    ok = p.returncode == 0
    try:
        j = json.loads(p.stdout)
        ok = ok and j["haystack"] == ["passkey filler"] and len(j["methods"][0]["accuracy"]) == 1
    except (ValueError, KeyError):
        ok = False
    ck.check("recall without --haystack runs on the pass-key filler", ok, p.stderr.decode()[-300:])

    empty = os.path.join(tmp, "recall_empty.txt")
    open(empty, "w").close()
    bad = [
        ("length above the context", ["--haystack", hay, "--lengths", "4096"]),
        ("empty haystack", ["--haystack", empty, "--lengths", "256"]),
        ("needle longer than the length", ["--haystack", hay, "--lengths", "16"]),
        ("unknown task", ["--haystack", hay, "--task", "nope"]),
        ("unknown method", ["--haystack", hay, "--methods", "full,fast@3"]),
        ("search method without projections", ["--haystack", hay, "--methods", "exact@8"]),
        ("depth outside [0, 1]", ["--depths", "1.5"]),
    ]
    for name, extra in bad:
        p = subprocess.run([bin_, "recall", "-m", model] + extra, capture_output=True, timeout=120)
        lines = [l for l in p.stderr.decode("utf-8", "replace").split("\n") if l]
        ck.check("bad input: " + name, p.returncode == 1 and len(lines) == 1 and lines[0].startswith("subq recall"),
                 "exit %d, stderr %r" % (p.returncode, lines[:3]))
    ck.finish()


if __name__ == "__main__":
    main()
