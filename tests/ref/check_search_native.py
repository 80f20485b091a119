#!/usr/bin/python3
"""ctest check: `train-search --init native` against numpy.

Search projections started from the model's own W_q / W_k must reproduce its
attention scores: for every layer, query t and key j,
    R(t) W_Qs[a] h_t . R(j) W_Ks[b] h_j = q_t[h] . k_j[b]        (per query head, a = h)
                                        = mean_{h in b} q_t[h] . k_j[b]   (per KV head)
with q, k the numpy forward's post-RoPE vectors (llama_ref) and R the search
rotation the file declares (its last rope_dims dims, pair i turned by
pos * scale * base^(-2i/rope_dims)), on stories260K (adjacent pairs, every
dim rotated) and a random tiny-phi3 (NeoX pairs, 48 of 64 dims rotated).
Ranked by inner product, such a file is the per-head raw-QK oracle, so
`subq eval` gives its exact@K the oracle's perplexity and KL. Models whose
scores a linear map cannot hold (q/k norms, biases) and a width other than
the head's are refused in one line.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402
from check_eval import DOCS, write_docs  # noqa: E402
from check_eval import forward as eval_forward  # noqa: E402
from check_search_heads import rotate  # noqa: E402  (the search rotation in numpy)

CTX, LAYERS = 64, [0, 1]


def train_native(model, text, path, gran, d_search, extra=()):
    return rc.run_subq(["train-search", "-m", model, "-f", text, "-o", path, "--force", "--init", "native",
                        "--granularity", gran, "--d-search", d_search, "--layers", ",".join(map(str, LAYERS)),
                        "--reserve", "none", "--seq", CTX, "--steps", 1, "--lr", 0, "--eval-every", 0, "-t", 1] +
                       list(extra))


def check_scores(ck, name, model, text, tmp):
    ref = LlamaRef(model)
    hd, nh, nkv = ref.head_dim, ref.n_head, ref.n_head_kv
    tokens = [ref.tok.bos_id] + ref.tok.encode(DOCS[0])[:CTX - 1]
    seen = {}
    eval_forward(ref, tokens, lambda li, q, k, h: seen.setdefault(li, (q, k, h)) and None)
    pos = np.arange(len(tokens), dtype=np.float64)
    for gran, nq in (("head", nh), ("kv-head", nkv)):
        path = os.path.join(tmp, "check_search_native_%s_%s.gguf" % (name, gran))
        if ck.guarded("%s %s: train-search --init native" % (name, gran), train_native, model, text, path, gran,
                      hd) is None:
            continue
        g = GGUFFile(path)
        md = g.metadata
        n_rot, base, scale = md["subq.search.rope_dims"], md["subq.search.rope_base"], md["subq.search.rope_scale"]
        ck.check("%s %s: the file rotates as many dims as the model" % (name, gran), n_rot == ref.n_rot,
                 "%d vs %d" % (n_rot, ref.n_rot))
        worst = 0.0
        for li in LAYERS:
            q, k, h = seen[li]
            wq = g.tensor("blk.%d.indexer.proj.weight" % li).astype(np.float64)
            wk = g.tensor("blk.%d.indexer.attn_k.weight" % li).astype(np.float64)
            qs = rotate((h @ wq.T).reshape(len(tokens), nq, hd), pos, n_rot, base, scale)
            ks = rotate((h @ wk.T).reshape(len(tokens), nkv, hd), pos, n_rot, base, scale)
            for a in range(nq):
                b = a * nkv // nq
                heads = range(b * nh // nkv, (b + 1) * nh // nkv) if nq == nkv else [a]
                want = np.mean([q[:, hq, :] @ k[:, b, :].T for hq in heads], axis=0)
                got = qs[:, a, :] @ ks[:, b, :].T
                worst = max(worst, np.abs(got - want).max() / np.abs(want).max())
        ck.check("%s %s: search scores = the model's q . k (%s)" % (name, gran, "per query head" if nq == nh else
                                                                       "group mean"), worst < 1e-5,
                 "max error / max |score| %.2e" % worst)


def main():
    ck = rc.Checks("check_search_native")
    stories = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()
    tmp = rc.tmp_dir()
    text = write_docs(os.path.join(tmp, "check_search_native.jsonl"))
    phi3 = os.path.join(tmp, "check_search_native_phi3.gguf")
    qwen3 = os.path.join(tmp, "check_search_native_qwen3.gguf")
    for shape, path in (("tiny-phi3", phi3), ("tiny-qwen3", qwen3)):
        ck.guarded("synth " + shape, rc.run_subq, ["synth", "--shape", shape, "--type", "f32", "-o", path, "--force"])
    check_scores(ck, "stories260K", stories, text, tmp)
    check_scores(ck, "tiny-phi3", phi3, text, tmp)

    # ranked by dot, the native file is the per-head oracle: the same figures from two code paths
    path = os.path.join(tmp, "check_search_native_stories260K_head.gguf")
    common = ["eval", "-m", stories, "--eval-file", text, "--no-pack", "-c", 128, "--sparse-layers",
              ",".join(map(str, LAYERS)), "--sink", 2, "--tail", 8, "--k-sweep", 8, "-t", 1, "--json"]
    got = ck.guarded("eval exact --score dot", rc.run_subq, common + ["--search", path, "--selectors", "exact",
                                                                      "--score", "dot"])
    want = ck.guarded("eval oracle per-head", rc.run_subq, common + ["--selectors", "oracle", "--oracle", "per-head"])
    if got is not None and want is not None:
        g, w = json.loads(got.decode())["methods"][0], json.loads(want.decode())["methods"][0]
        ck.check("native exact@8 ranked by dot = the per-head oracle",
                 abs(g["ppl"] / w["ppl"] - 1) < 1e-5 and abs(g["kl"]["mean"] - w["kl"]["mean"]) < 1e-5,
                 "PPL %.6f vs %.6f, KL %.6g vs %.6g" % (g["ppl"], w["ppl"], g["kl"]["mean"], w["kl"]["mean"]))

    refusals = [("q/k norms", qwen3, "head", 32, [], "normalises q and k"),
                ("another width", stories, "head", 4, [], "needs --d-search 8"),
                ("one set a layer over 4 KV heads", stories, "layer", 8, [], "--granularity kv-head or head"),
                ("another rotation", stories, "head", 8, ["--rope-dims", 4], "rotates as the model does")]
    for what, model, gran, ds, extra, needle in refusals:
        try:
            train_native(model, text, os.path.join(tmp, "check_search_native_no.gguf"), gran, ds, extra)
            ck.check("refused: " + what, False, "train-search succeeded")
        except rc.SubqError as e:
            lines = [s for s in str(e).split("--- stderr:\n")[-1].splitlines() if s.strip()]
            ck.check("refused in one line: " + what, len(lines) == 1 and needle in lines[0], repr(lines[-3:]))
    ck.finish()


if __name__ == "__main__":
    main()
