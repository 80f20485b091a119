#!/usr/bin/python3
"""ctest check: search projections with search heads, end to end, against numpy.

stories260K (8 query / 4 KV heads), projections of d_search 8 (the last 4
dims rotated by position) on layers 1-4 from `subq train-search
--granularity head|kv-head --lr 0` (the initial weights, the same bits on
every machine), two unpacked windows, sink 2, tail 8, exact@4. The numpy
forward (float64) attends query head h on the sparse layers over the sinks,
the tail and the top-4 eligible keys by
    cos(R(t) W_Qs[a] h_t, R(j) W_Ks[b] h_j),
a = h's search head (h itself, or its KV head), b = a's KV head, R the
rotation of the last 4 dims; subq eval's perplexity, KL and measured KV
rows (sinks + tail + the union of a KV head's query heads' sets) must equal
numpy's. Values computed with the key heads swapped must not (the check
catches a wrong head). The same in a sparse prefill (batches of 32: each
query head retrieves among the earlier batches, attends its batch's part
or the tail): `subq logits --sparse-prefill` against numpy. `subq info`
names the granularity, and `merge` refuses the file in one line.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402
from check_eval import DOCS, log_softmax, write_docs  # noqa: E402  (the same two windows as check_eval)
from check_eval import forward as eval_forward  # noqa: E402

SINK, TAIL, CTX, K, DS, NROT = 2, 8, 128, 4, 8, 4
LAYERS = [1, 2, 3, 4]
TIE = 2e-6  # cosines this close at the K-th place would let float32 (error ~1e-7) pick either key


def rotate(x, pos, n_rot, base, scale=1.0):
    """x [T, heads, d]: the last n_rot dims turned in adjacent pairs by pos * scale * base^(-2i/n_rot)"""
    x = x.copy()
    o = x.shape[-1] - n_rot
    for i in range(n_rot // 2):
        th = (pos * scale * base ** (-2.0 * i / n_rot))[:, None]
        c, s = np.cos(th), np.sin(th)
        x0, x1 = x[..., o + 2 * i].copy(), x[..., o + 2 * i + 1].copy()
        x[..., o + 2 * i] = x0 * c - x1 * s
        x[..., o + 2 * i + 1] = x0 * s + x1 * c
    return x


def forward(ref, tokens, proj, swap=False, batch=0):
    """float64 logits, and (rows, queries) summed over sparse layers, queries and KV heads; proj:
    {layer: (wq [nq*DS, d], wk [nk*DS, d])}, rope base in proj['base']. swap: key heads reversed.
    batch > 0: a sparse prefill in batches of that many tokens (one document): token t attends the sinks,
    its batch's part of the sequence or the tail (whichever reaches further back), and K retrieved among
    the earlier batches' other keys; else teacher forcing (sinks, tail, K among every earlier key)."""
    T = len(tokens)
    nh, nkv = ref.n_head, ref.n_head_kv
    group = nh // nkv
    pos = np.arange(T)
    count = {"rows": 0, "n_rows": 0, "ties": 0}

    def mask(li, q, k, h):
        if li not in LAYERS:
            return None
        wq, wk = proj[li]
        nq, nk = wq.shape[0] // DS, wk.shape[0] // DS
        qs = rotate((h @ wq.T).reshape(T, nq, DS), pos, NROT, proj["base"])
        ks = rotate((h @ wk.T).reshape(T, nk, DS), pos, NROT, proj["base"])
        qs /= np.linalg.norm(qs, axis=2, keepdims=True)
        ks /= np.linalg.norm(ks, axis=2, keepdims=True)
        allowed = np.zeros((nh, T, T), dtype=bool)
        for t in range(T):
            if batch:
                b0, sink_hi = t // batch * batch, min(SINK, t + 1)
                lo = max(b0 if t + 1 - TAIL >= b0 else t + 1 - TAIL, sink_hi)
                fixed = list(range(sink_hi)) + list(range(lo, t + 1))
                elig = list(range(sink_hi, min(b0, lo)))
            else:
                fixed = [j for j in range(t + 1) if j < SINK or j > t - TAIL]
                elig = [j for j in range(t + 1) if SINK <= j <= t - TAIL]
            sets = []
            for hq in range(nh):
                a = hq * nq // nh
                b = a // (nq // nk)
                if swap:
                    b = nk - 1 - b
                sc = ks[elig, b, :] @ qs[t, a, :]
                order = np.argsort(-sc, kind="stable")
                chosen = [elig[i] for i in order[:K]]
                if len(elig) > K and sc[order[K - 1]] - sc[order[K]] < TIE:
                    count["ties"] += 1
                allowed[hq, t, fixed + chosen] = True
                sets.append(set(chosen))
            for g in range(nkv):
                count["rows"] += len(fixed) + len(set().union(*sets[g * group:(g + 1) * group]))
                count["n_rows"] += 1
        return allowed

    return eval_forward(ref, tokens, mask), count["rows"], count["n_rows"], count["ties"]


def main():
    ck = rc.Checks("check_search_heads")
    model = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()
    tmp = rc.tmp_dir()
    text = write_docs(os.path.join(tmp, "check_search_heads.jsonl"))
    ref = LlamaRef(model)
    windows = [[ref.tok.bos_id] + ref.tok.encode(d)[:CTX - 1] for d in DOCS]
    full = [log_softmax(ref.forward(w)) for w in windows]
    for gran, nq in (("head", ref.n_head), ("kv-head", ref.n_head_kv)):
        path = os.path.join(tmp, "check_search_heads_%s.gguf" % gran)
        if ck.guarded("train-search --granularity %s" % gran, rc.run_subq,
                      ["train-search", "-m", model, "-f", text, "-o", path, "--force", "--granularity", gran,
                       "--layers", "1-4", "--d-search", DS, "--rope-dims", NROT, "--rope-base", 100, "--seq", 64,
                       "--steps", 1, "--lr", 0, "--init-std", 1, "--eval-every", 0, "-t", 1]) is None:
            continue
        g = GGUFFile(path)
        md = g.metadata
        ck.check(gran + ": file says its heads",
                 md.get("subq.search.granularity") == gran and md.get("subq.search.query_heads") == nq and
                 md.get("subq.search.key_heads") == ref.n_head_kv,
                 str({k: md.get(k) for k in ("subq.search.granularity", "subq.search.query_heads", "subq.search.key_heads")}))
        proj = {"base": 100.0}
        for l in LAYERS:
            proj[l] = (g.tensor("blk.%d.indexer.proj.weight" % l).astype(np.float64),
                       g.tensor("blk.%d.indexer.attn_k.weight" % l).astype(np.float64))
        info = ck.guarded(gran + ": info", rc.run_subq, ["info", "-m", path, "--json"])
        if info is not None:
            s = json.loads(info.decode("utf-8")).get("search", {})
            ck.check(gran + ": info names the granularity", s.get("granularity") == gran and s.get("query_heads") == nq,
                     str(s))
        try:
            rc.run_subq(["merge", "-m", model, "--search", path, "-o", os.path.join(tmp, "check_search_heads_m.gguf"),
                         "--force"])
            ck.check(gran + ": merge refuses search heads", False, "merge succeeded")
        except rc.SubqError as e:
            msg = str(e)
            ck.check(gran + ": merge refuses search heads", "per " + gran in msg, msg[-200:])
        out = ck.guarded(gran + ": subq eval runs", rc.run_subq,
                         ["eval", "-m", model, "--eval-file", text, "--no-pack", "-c", CTX, "--search", path,
                          "--sparse-layers", "1-4", "--sink", SINK, "--tail", TAIL, "--selectors", "exact",
                          "--k-sweep", K, "-t", 1, "--json"])
        if out is None:
            continue
        got = json.loads(out.decode("utf-8"))
        m = got["methods"][0]

        def figures(swap):
            nll = kl = rows = n_rows = ties = n = 0
            for w, lf in zip(windows, full):
                raw, r, nr, tie = forward(ref, w, proj, swap)
                lm = log_softmax(raw)
                T = len(w) - 1
                nll += -sum(lm[t, w[t + 1]] for t in range(T))
                kl += float((np.exp(lf[:T]) * (lf[:T] - lm[:T])).sum())
                rows, n_rows, ties, n = rows + r, n_rows + nr, ties + tie, n + T
            return math.exp(nll / n), kl / n, rows / n_rows, ties

        ppl, kl, rows, ties = figures(False)
        ck.check(gran + ": no cosine ties at the K-th place (the reference is unambiguous)", ties == 0, str(ties))
        ck.check(gran + ": PPL", abs(m["ppl"] / ppl - 1) < 1e-4, "%.6f vs numpy %.6f" % (m["ppl"], ppl))
        ck.check(gran + ": KL", abs(m["kl"]["mean"] - kl) < 1e-4 * (1 + kl), "%.6g vs numpy %.6g" % (m["kl"]["mean"], kl))
        ck.check(gran + ": KV rows read (union of a KV head's sets)", abs(m["kv_rows"] - rows) < 1e-6 * rows,
                 "%.4f vs numpy %.4f" % (m["kv_rows"], rows))
        wppl, wkl, _, _ = figures(True)
        ck.check(gran + ": the key heads swapped give other figures (the check catches a wrong head)",
                 abs(m["ppl"] / wppl - 1) > 1e-3 or abs(m["kl"]["mean"] - wkl) > 1e-3 * (1 + wkl),
                 "PPL %.6f vs swapped %.6f" % (m["ppl"], wppl))
        # a sparse prefill in batches of 32: each query head's set from the earlier batches (attn_batch with
        # one extra list a query head), logits against numpy
        w = windows[0]
        lg = os.path.join(tmp, "check_search_heads_%s.bin" % gran)
        if ck.guarded(gran + ": logits --sparse-prefill", rc.run_subq,
                      ["logits", "-m", model, "--tokens", " ".join(map(str, w)), "-o", lg, "--force", "-c", CTX,
                       "-b", 32, "-t", 2, "--search", path, "--sparse-layers", "1-4", "--sink", SINK, "--tail", TAIL,
                       "--select", "exact", "--topk", K, "--sparse-prefill"]) is None:
            continue
        got_lg = np.fromfile(lg, dtype="<f4").reshape(len(w), -1).astype(np.float64)
        want, _, _, bties = forward(ref, w, proj, batch=32)
        wrong, _, _, _ = forward(ref, w, proj, swap=True, batch=32)
        err = np.abs(got_lg - want).max() / np.abs(want).max()
        ck.check(gran + ": sparse prefill: no cosine ties at the K-th place", bties == 0, str(bties))
        ck.check(gran + ": sparse prefill logits vs numpy", err < 1e-5, "max err / max |logit| %.2e" % err)
        werr = np.abs(got_lg - wrong).max() / np.abs(want).max()
        ck.check(gran + ": sparse prefill: the key heads swapped differ (the check catches a wrong head)",
                 werr > 100 * max(err, 1e-7), "%.2e vs %.2e" % (werr, err))
    ck.finish()


if __name__ == "__main__":
    main()
