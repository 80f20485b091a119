#!/usr/bin/python3
"""ctest check: `subq eval --json` fidelity figures == a numpy re-implementation.

stories260K, two unpacked windows (BOS + one short document each), sparse
layers 1-4, sink 2, tail 8, methods window@K and oracle@K for K = 4, 16:
the numpy forward (float64) restricts attention on the sparse layers to
    window@K: the sinks + the n_tail + K most recent keys of the document;
    oracle@K: the sinks + the tail + the top-K eligible keys by the head-mean
              native score mean_h q_h . k_j;
and recomputes full attention's and each method's perplexity, the mean
KL(p_full || p_method), top-1 agreement, each layer substituted alone
(--per-layer), and the interval bounds (two windows: the two windows'
means). Keys tied within rounding at the oracle's K-th place count as
either choice (the figures of the other top-Ks they allow are tried when
the first disagree), and top-1 counts a token whose argmax ties within
rounding (full's or the method's) both ways; values computed with the
oracle's (K+1)-th key in place of its K-th must fail. The JSON must parse, and the SVG charts must be written. The
table's retrieval section must show the JSON's figures, "-" where the JSON
has null (ann for selectors that are not approximate, completion share
without completion), never "nan"; hnsw's ann (recall of the exact scan) is
measured.
"""

import itertools
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402

SINK, TAIL, CTX = 2, 8, 128
LAYERS = [1, 2, 3, 4]
DOCS = [
    "Once upon a time, there was a little dog named Max. Max liked to run in the park with his friend Sue. "
    "One day they found a big red ball under a tree.",
    "Lily wanted to bake a cake for her mom. She got flour, eggs and milk, and her brother Tom helped her mix "
    "them in a big bowl. The cake was yummy.",
]


def forward(ref, tokens, sparse_mask):
    """float64 logits; sparse_mask(layer, q, k, h) -> allowed keys, [T, T] or per query head [n_head, T, T],
    or None (full attention); h is the layer's attn-norm output (what search projections read)."""
    T = len(tokens)
    hd, nh, nkv = ref.head_dim, ref.n_head, ref.n_head_kv
    group = nh // nkv
    causal = np.tril(np.ones((T, T), dtype=bool))
    pos = np.arange(T)
    x = ref.tok_embd[np.asarray(tokens)]
    for li, L in enumerate(ref.layers):
        h = ref.rmsnorm(x, L["attn_norm"])
        q = ref.rope((h @ L["wq"].T).reshape(T, nh, hd), pos)
        k = ref.rope((h @ L["wk"].T).reshape(T, nkv, hd), pos)
        v = (h @ L["wv"].T).reshape(T, nkv, hd)
        allowed = sparse_mask(li, q, k, h)
        if allowed is None:
            allowed = causal
        heads = np.empty((T, nh, hd))
        for hq in range(nh):
            s = (q[:, hq, :] @ k[:, hq // group, :].T) / math.sqrt(hd)
            s = np.where(allowed[hq] if allowed.ndim == 3 else allowed, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            heads[:, hq, :] = (p / p.sum(axis=1, keepdims=True)) @ v[:, hq // group, :]
        x = x + heads.reshape(T, nh * hd) @ L["wo"].T
        hf = ref.rmsnorm(x, L["ffn_norm"])
        gate, up = hf @ L["w_gate"].T, hf @ L["w_up"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ L["w_down"].T
    return ref.rmsnorm(x, ref.output_norm) @ ref.output.T


# Keys tied within rounding count as either choice: oracle scores within
# TIE_SCORE of the row's largest |score| of the K-th best (the C code ranks
# float32 head means of its own q, k), logits within TIE_LOGIT of the row's
# largest |logit| of the top one (check_logits allows 1e-4 of it).
TIE_SCORE = 1e-4
TIE_LOGIT = 2e-4
MAX_FORWARDS = 64  # runs of a method's alternatives tried before giving up


def method_mask(kind, K, layers, n_head, n_kv, win=0, choice=None, ties=None, wrong=False):
    """mask(li, q, k) of a method on window `win`. oracle@K: the top-K
    eligible keys by the head-mean native score; where keys tie within
    TIE_SCORE at the K-th place, `choice` {(win, li, t): keys} may take
    another of the top-Ks they allow, and `ties` gets (key, [top-Ks], default
    first). wrong: the (K+1)-th key in place of the K-th wherever they are
    not tied (a wrong answer, to show the check catches it)."""
    group = n_head // n_kv
    choice = choice or {}

    def mask(li, q, k, h=None):
        if li not in layers:
            return None
        T = q.shape[0]
        allowed = np.zeros((T, T), dtype=bool)
        if kind == "oracle":
            # head-mean native score: mean_h q_h . k_{kv(h)}
            score = sum(q[:, h, :] @ k[:, h // group, :].T for h in range(n_head)) / n_head
        for t in range(T):
            fixed = [j for j in range(t + 1) if j < SINK or j > t - TAIL]
            elig = [j for j in range(t + 1) if j >= SINK and j <= t - TAIL]
            if kind == "window":
                chosen = elig[-K:] if K else []
            else:
                order = sorted(elig, key=lambda j: -score[t, j])
                chosen = order[:K]
                if 0 < K < len(elig):
                    eps = TIE_SCORE * np.abs(score[t, :t + 1]).max()
                    kth = score[t, order[K - 1]]
                    sure = [j for j in order if score[t, j] > kth + eps]
                    maybe = [j for j in order if abs(score[t, j] - kth) <= eps]
                    if len(maybe) > K - len(sure):
                        opts = [sure + list(c) for c in itertools.combinations(maybe, K - len(sure))][:16]
                        if ties is not None:
                            ties.append(((win, li, t), opts))
                        chosen = list(choice.get((win, li, t), chosen))
                    elif wrong:
                        chosen = order[:K - 1] + [order[K]]
            allowed[t, fixed + chosen] = True
        return allowed
    return mask


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def retrieval_rows(out):
    """{method: [mass, recall, seed mass, seed recall, ann, share, filler, rows]} as
    the cells of the table's retrieval section read."""
    lines = out.decode("utf-8").splitlines()
    i = lines.index("retrieval:")
    rows = {}
    for line in lines[i + 2:]:
        if not line.strip():
            break
        f = line.split()
        rows[f[0]] = f[1:]
    return rows


def table_matches_json(ck, what, table_out, got):
    """The table's retrieval cells are the JSON's figures: a number where
    the JSON has one, "-" where it has null, never "nan"."""
    rows = retrieval_rows(table_out)
    keys = ("mass", "recall", "mass_seed", "recall_seed", "ann_recall", "completion_share", None, "kv_rows")
    bad = []
    for m in got["methods"]:
        cells = rows.get(m["method"])
        if cells is None or len(cells) != 8:
            bad.append("%s: row %s" % (m["method"], cells))
            continue
        for key, c in zip(keys, cells):
            if key is None:  # the filler rate, a percentage
                continue
            v = m[key]
            tol = 0.06 if key == "kv_rows" else 6e-5  # rows: one decimal
            ok = c == "-" if v is None else (c != "-" and abs(float(c) - v) < tol)
            if not ok:
                bad.append("%s %s: table %s, json %s" % (m["method"], key, c, v))
    ck.check(what + ": the table's retrieval cells are the JSON's ('-' for null), no nan",
             not bad and b"nan" not in table_out, "; ".join(bad[:6]))
    return rows


def write_docs(path):
    """DOCS as a .jsonl file, one document a line (the windows of --no-pack)."""
    with open(path, "w") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in DOCS)
    return path


def main():
    ck = rc.Checks("check_eval")
    model = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()
    tmp = rc.tmp_dir()
    text = write_docs(os.path.join(tmp, "check_eval.jsonl"))
    svg = os.path.join(tmp, "check_eval_svg")
    os.makedirs(svg, exist_ok=True)
    out = ck.guarded("subq eval runs", rc.run_subq,
                     ["eval", "-m", model, "--eval-file", text, "--no-pack", "-c", CTX, "--sparse-layers", "1-4",
                      "--sink", SINK, "--tail", TAIL, "--selectors", "window,oracle", "--k-sweep", "4,16",
                      "--per-layer", "--svg-dir", svg, "--force", "-t", 1, "--json"])
    if out is None:
        ck.finish()
    try:
        got = json.loads(out.decode("utf-8"))
    except ValueError as e:
        ck.check("eval --json is valid JSON", False, str(e))
        ck.finish()
    ck.check("eval --json is valid JSON", True)
    # the same run as a table; window and oracle are not approximate and run
    # without completion: ann and share do not apply ("-" / null)
    table = ck.guarded("subq eval (table) runs", rc.run_subq,
                       ["eval", "-m", model, "--eval-file", text, "--no-pack", "-c", CTX, "--sparse-layers", "1-4",
                        "--sink", SINK, "--tail", TAIL, "--selectors", "window,oracle", "--k-sweep", "4,16", "-t", 1])
    if table is not None:
        table_matches_json(ck, "window, oracle", table, got)
        ck.check("ann and share are null where they do not apply",
                 all(m["ann_recall"] is None and m["completion_share"] is None for m in got["methods"]),
                 str([(m["method"], m["ann_recall"], m["completion_share"]) for m in got["methods"]]))
    # hnsw's ann is measured (its recall of the exact scan), exact's does not apply
    ann_args = ["eval", "-m", model, "--eval-file", text, "--no-pack", "-c", CTX, "--random-search", 8,
                "--sparse-layers", "1-4", "--sink", SINK, "--tail", TAIL, "--selectors", "exact,hnsw", "--k-sweep", 4,
                "-t", 1]
    ann_json = ck.guarded("subq eval exact,hnsw --json runs", rc.run_subq, ann_args + ["--json"])
    ann_table = ck.guarded("subq eval exact,hnsw runs", rc.run_subq, ann_args)
    if ann_json is not None and ann_table is not None:
        aj = json.loads(ann_json.decode("utf-8"))
        table_matches_json(ck, "exact, hnsw", ann_table, aj)
        ann = {m["method"]: m["ann_recall"] for m in aj["methods"]}
        ck.check("ann: measured for hnsw@4 (in [0, 1]), null for exact@4",
                 ann.get("exact@4", 0) is None and isinstance(ann.get("hnsw@4"), (int, float)) and 0 <= ann["hnsw@4"] <= 1,
                 str(ann))
    for name in ("ppl_gap.svg", "kl.svg", "top1.svg", "mass.svg", "layer_mass.svg", "layer_kl.svg"):
        p = os.path.join(svg, name)
        ck.check("chart " + name, os.path.isfile(p) and open(p).read().startswith("<svg"))

    ref = LlamaRef(model)
    windows = [[ref.tok.bos_id] + ref.tok.encode(d)[:CTX - 1] for d in DOCS]
    full_raw = [forward(ref, w, lambda li, q, k, h: None) for w in windows]
    full = [log_softmax(r) for r in full_raw]
    n_tok = sum(len(w) - 1 for w in windows)
    nll_full = [-sum(lp[t, w[t + 1]] for t in range(len(w) - 1)) for w, lp in zip(windows, full)]
    ppl_full = math.exp(sum(nll_full) / n_tok)
    ck.check("tokens scored", got["tokens_scored"] == n_tok, "%d vs numpy %d" % (got["tokens_scored"], n_tok))
    ck.check("full attention PPL", abs(got["full_ppl"] / ppl_full - 1) < 1e-4,
             "%.6f vs numpy %.6f" % (got["full_ppl"], ppl_full))
    ck.check("sparse layers", got["sparse_layers"] == LAYERS, str(got["sparse_layers"]))

    def figures(kind, K, layers, choice=None, ties=None, wrong=False):
        """per window: nll sum, kl sum, top-1 count (least, most: argmaxes
        tied within TIE_LOGIT count both ways), tokens"""
        res = []
        for wi, (w, lf) in enumerate(zip(windows, full)):
            raw = forward(ref, w, method_mask(kind, K, layers, ref.n_head, ref.n_head_kv, wi, choice, ties, wrong))
            lm = log_softmax(raw)
            T = len(w) - 1
            nll = -sum(lm[t, w[t + 1]] for t in range(T))
            kl = float((np.exp(lf[:T]) * (lf[:T] - lm[:T])).sum())
            agree = lf[:T].argmax(axis=1) == lm[:T].argmax(axis=1)
            tied = np.zeros(T, dtype=bool)
            for logits, lp in ((full_raw[wi], lf), (raw, lm)):
                top2 = np.sort(lp[:T], axis=1)[:, -2:]
                tied |= top2[:, 1] - top2[:, 0] <= TIE_LOGIT * np.abs(logits[:T]).max(axis=1)
            res.append((nll, kl, int((agree & ~tied).sum()), int((agree | tied).sum()), T))
        return res

    def judge(m, res):
        """[(check name, ok, detail)] of one method's figures against numpy's"""
        name = m["method"]
        ppl = math.exp(sum(r[0] for r in res) / n_tok)
        kl = sum(r[1] for r in res) / n_tok
        t_lo, t_hi = sum(r[2] for r in res), sum(r[3] for r in res)
        win_kl = [r[1] / r[4] for r in res]
        win_dnll = [(r[0] - nf) / r[4] for r, nf in zip(res, nll_full)]
        return [
            (name + " PPL", abs(m["ppl"] / ppl - 1) < 1e-4, "%.6f vs numpy %.6f" % (m["ppl"], ppl)),
            (name + " KL", abs(m["kl"]["mean"] - kl) < 1e-4 * (1 + kl), "%.6g vs numpy %.6g" % (m["kl"]["mean"], kl)),
            (name + " top-1", t_lo - 0.5 <= m["top1"] * n_tok <= t_hi + 0.5,
             "%.4f vs numpy [%.4f, %.4f]" % (m["top1"], t_lo / n_tok, t_hi / n_tok)),
            (name + " KL interval = window means",
             abs(m["kl"]["lo"] - min(win_kl)) < 1e-4 and abs(m["kl"]["hi"] - max(win_kl)) < 1e-4,
             "[%.6g, %.6g] vs %s" % (m["kl"]["lo"], m["kl"]["hi"], win_kl)),
            (name + " dNLL interval = window means",
             abs(m["nll_diff"]["lo"] - min(win_dnll)) < 1e-4 and abs(m["nll_diff"]["hi"] - max(win_dnll)) < 1e-4,
             "[%.6g, %.6g] vs %s" % (m["nll_diff"]["lo"], m["nll_diff"]["hi"], win_dnll))]

    def judge_alone(m, lay, res):
        kl1 = sum(r[1] for r in res) / n_tok
        t_lo, t_hi = sum(r[2] for r in res), sum(r[3] for r in res)
        return [("%s layer %d alone" % (m["method"], lay["layer"]),
                 abs(lay["alone_kl"]["mean"] - kl1) < 1e-4 * (1 + kl1) and
                 t_lo - 0.5 <= lay["alone_top1"] * n_tok <= t_hi + 0.5,
                 "KL %.6g top-1 %.4f vs numpy %.6g [%.4f, %.4f]" % (lay["alone_kl"]["mean"], lay["alone_top1"], kl1,
                                                                   t_lo / n_tok, t_hi / n_tok))]

    def tie_aware(kind, K, layers, verdict):
        """The checks of the numpy figures under the choices at tied keys
        that pass them, if any (breadth first from the default, at most
        MAX_FORWARDS runs), else the default's; and the ties seen."""
        ties = []
        first = verdict(figures(kind, K, layers, {}, ties))
        if all(ok for _, ok, _ in first) or not ties:
            return first, len(ties)
        queue, runs = [({}, ties)], 1
        while queue and runs < MAX_FORWARDS:
            choice, seen = queue.pop(0)
            for key, opts in seen:
                if key in choice:
                    continue
                for opt in opts[1:]:
                    c2 = {**choice, key: opt}
                    t2 = []
                    got_checks = verdict(figures(kind, K, layers, c2, t2))
                    runs += 1
                    if all(ok for _, ok, _ in got_checks):
                        return got_checks, len(ties)
                    queue.append((c2, t2))
                    if runs >= MAX_FORWARDS:
                        break
                if runs >= MAX_FORWARDS:
                    break
        return first, len(ties)

    for m in got["methods"]:
        kind, K = m["select"], m["k"]
        results, n_ties = tie_aware(kind, K, LAYERS, lambda res: judge(m, res))
        for name, ok, detail in results:
            ck.check(name, ok, detail + (" (%d queries with keys tied at the K-th place)" % n_ties if n_ties else ""))
        for lay in m["layers"]:
            results, n_ties = tie_aware(kind, K, [lay["layer"]], lambda res: judge_alone(m, lay, res))
            for name, ok, detail in results:
                ck.check(name, ok, detail)
    # the checks fail on a wrong answer: the oracle's (K+1)-th key in place of
    # its K-th wherever the two are not tied
    for m in got["methods"]:
        if m["select"] == "oracle":
            bad = judge(m, figures("oracle", m["k"], LAYERS, wrong=True))
            ck.check("%s: a wrong key is caught" % m["method"], not all(ok for _, ok, _ in bad),
                     "; ".join(d for _, ok, d in bad if not ok)[:300])
    ck.finish()


if __name__ == "__main__":
    main()
