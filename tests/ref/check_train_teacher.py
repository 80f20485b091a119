#!/usr/bin/python3
"""ctest check: the teacher and the numbers subq train-search builds on it
equal a brute-force numpy reference (teacher_np.py).

`subq train-search --dump-teacher` writes, for the first packed training
sequence of a small JSONL corpus on stories260K (several documents per
sequence: block-causal segments, positions restarting, GQA 8 heads / 4 KV),
and of a 700-token piece (once captured across two 512-token forward batches,
`-ub 512`, once in one batch):
tokens, positions, segment ids, and per layer the captured h, q, k, the dense
teacher matrix, the initial W_Qs/W_Ks, the loss sums and mass/recall@K.
Checked, for --head-agg max and mean (and max on the long piece), over all
block-causal keys and, with --sink / --tail, over the retrieval-eligible keys
only (each document's first n_sink keys and each query's n_tail most recent
keys left out; the teacher renormalised over the rest; losses and metrics on
that set):
  capture    h, q, k  vs a float64 block-causal forward        rel err < 1e-4
  teacher    C teacher vs numpy teacher from the dumped q, k     abs err < 1e-5
             (and vs numpy teacher from numpy's own q, k          abs err < 1e-4)
  losses     InfoNCE and KL sums                                  rel err < 1e-4
             (InfoNCE: from the range that teacher values tied within
             rounding at the k_pos-th place allow; the same check rejects
             the sum with the (k_pos+1)-th key as a positive)
  metrics    mass@K, recall@K (learned, raw-QK oracle, window)    within 1e-4 of
             the range that keys tied within rounding at the K-th place allow
             (either choice is right); the same check rejects values computed
             with the (K+1)-th key in place of one of the top K
and, with --rope-dims (the last dims of the search vectors rotated by each
token's position in its document), the losses and metrics of the rotated
space, on the packed documents and on the 700-token piece.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
# ctest runs checks side by side on few cores: OpenMP workers that spin while
# waiting make oversubscribed runs ~10x slower (results are the same either way)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import numpy as np  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402
import teacher_np  # noqa: E402

METRICS = ("mass_learned", "mass_oracle", "mass_window", "recall_learned", "recall_oracle", "recall_window")
# averages of float32 sums against float64: distance allowed outside the tie-aware range
METRIC_TOL = 1e-4

DOCS = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "Tom had a big red ball. He threw it to his dog, and the dog ran fast.",
    "The sun was hot. Mia and Ben sat under a tree and ate cold apples.",
    "One day, a small bird could not fly. A kind boy helped the bird get well.",
    "Sam wanted a cake. His mom said, \"We can bake one together!\" They were happy.",
    "The cat saw a fish in the pond. It tried to catch it but fell in the water.",
    "Anna found a shiny stone. She kept it in a box under her bed.",
    "It was a rainy day, so the kids played with blocks and built a tall tower.",
]


def main():
    checks = rc.Checks("check_train_teacher")
    model = rc.shared_file("models", "stories260K.gguf")
    tmp = rc.tmp_dir()
    data = os.path.join(tmp, "train_teacher_docs.jsonl")
    with open(data, "w") as f:
        for d in DOCS:
            f.write(json.dumps({"text": d}) + "\n")
    # a 700-token piece of one document: with -ub 512 the capture is assembled
    # from two forward chunks; in one batch (the default), each target layer
    # but the last takes its attention from the teacher's logits, so the
    # later layers' captures check that too
    long_doc = os.path.join(tmp, "train_teacher_long.txt")
    with open(rc.shared_file("data", "text", "tinyshakespeare.txt"), "rb") as f:
        text = f.read(4000)
    with open(long_doc, "wb") as f:
        f.write(text[:text.rfind(b"\n") + 1])
    ref = LlamaRef(model)
    # (head-agg, data, --seq, --sink, --tail); the packed documents are ~20 tokens long,
    # so they get a small sink/tail; the long piece the runtime's defaults 4 / 16
    cases = [("max", data, "128", 0, 0, 0), ("mean", data, "128", 0, 0, 0), ("max", long_doc, "700", 0, 0, 0),
             ("max", data, "128", 2, 5, 0), ("mean", data, "128", 1, 3, 0), ("mean", long_doc, "700", 4, 16, 0),
             ("max", data, "128", 1, 3, 4), ("max", long_doc, "700", 4, 16, 8)]
    captures = {}
    for agg, src, seq, n_sink, n_tail, rope_dims in cases:
        name = "%s seq %s" % (agg, seq) + (" sink %d tail %d" % (n_sink, n_tail) if n_sink or n_tail else "") + \
            (" rope %d" % rope_dims if rope_dims else "")
        dump = os.path.join(tmp, "train_teacher_%s_%s_%d_%d_%d.gguf" % (agg, seq, n_sink, n_tail, rope_dims))
        if os.path.exists(dump):
            os.remove(dump)
        args = ["train-search", "-m", model, "-f", src, "--dump-teacher", dump, "--seq", seq,
                "--reserve", "none", "--head-agg", agg, "--k-pos", "4", "--eval-k", "2,4,8,16",
                "--d-search", "8", "--init-std", "0.3", "--eval-frac", "0", "-t", "2",
                "--sink", str(n_sink), "--tail", str(n_tail), "--rope-dims", str(rope_dims), "--rope-base", "100"] + \
            (["-ub", "512"] if agg == "max" and seq == "700" else [])
        if checks.guarded("dump %s" % name, rc.run_subq, args) is None:
            continue
        g = GGUFFile(dump)
        tok = np.array(g.get("dump.tokens"))
        pos = np.array(g.get("dump.pos"))
        seg = np.array(g.get("dump.seg"))
        layers = list(g.get("dump.layers"))
        T = len(tok)
        pos_ok = all(pos[t] == (0 if t == 0 or seg[t] != seg[t - 1] else pos[t - 1] + 1) for t in range(T))
        if src == data:
            checks.check("%s: packed sequence with several documents" % name, seg.max() >= 2 and pos_ok,
                         "T=%d, %d segments" % (T, seg.max() + 1))
        else:
            checks.check("%s: one piece longer than a forward batch" % name, T == 700 and seg.max() == 0 and pos_ok,
                         "T=%d" % T)
        checks.check("%s: every layer dumped" % name, layers == list(range(ref.n_layer)), str(layers))
        checks.check("%s: sink/tail recorded" % name, (g.get("dump.n_sink"), g.get("dump.n_tail")) == (n_sink, n_tail),
                     str((g.get("dump.n_sink"), g.get("dump.n_tail"))))
        # the float64 forward depends only on the sequence: reuse it across cases
        key = (tuple(tok.tolist()), tuple(pos.tolist()), tuple(seg.tolist()))
        if key not in captures:
            captures[key] = teacher_np.capture(ref, tok, pos, seg)
        cap = captures[key]
        tau = g.get("dump.tau")
        tau_kl = g.get("dump.tau_kl")
        k_pos = g.get("dump.k_pos")
        eval_k = list(g.get("dump.eval_k"))
        rope = (g.get("dump.rope_dims"), g.get("dump.rope_base"), g.get("dump.rope_scale"))
        checks.check("%s: rotation recorded" % name, rope == (rope_dims, 100.0, 1.0), str(rope))
        for l in layers:
            h_c, q_c, k_c = (g.tensor("l%d.%s" % (l, n)).astype(np.float64) for n in ("h", "q", "k"))
            h_r, q_r, k_r = cap[l]
            errs = [np.abs(a - b).max() / np.abs(b).max() for a, b in ((h_c, h_r), (q_c, q_r), (k_c, k_r))]
            checks.check("%s layer %d: capture h/q/k" % (name, l), max(errs) < 1e-4,
                         "rel err h %.2e q %.2e k %.2e" % tuple(errs))
            P_c = g.tensor("l%d.teacher" % l).astype(np.float64)
            P_np = teacher_np.teacher(q_c, k_c, seg, ref.n_head, ref.n_head_kv, agg, n_sink, n_tail)
            P_e2e = teacher_np.teacher(q_r, k_r, seg, ref.n_head, ref.n_head_kv, agg, n_sink, n_tail)
            e1 = np.abs(P_c - P_np).max()
            e2 = np.abs(P_c - P_e2e).max()
            checks.check("%s layer %d: teacher" % (name, l), e1 < 1e-5 and e2 < 1e-4,
                         "abs err vs numpy on dumped q,k %.2e, end to end %.2e" % (e1, e2))
            wq = g.tensor("l%d.wq" % l)
            wk = g.tensor("l%d.wk" % l)
            # keys tied within rounding at the K-th place count as either
            # choice: the teacher within twice its measured error, cosines and
            # raw scores within float32 rounding
            eps = {"eps_p": 2 * e1 + 1e-12, "eps_l": 1e-5, "eps_o": 1e-5}
            # InfoNCE's positives are the teacher's top k_pos: its sum must
            # lie within the range the tied positives allow
            (nce_lo, nce_hi), kl, n = teacher_np.losses(h_c, wq, wk, P_np, seg, tau, tau_kl, k_pos, n_sink, n_tail,
                                                        pos, rope, eps["eps_p"])
            nce_c = g.get("dump.l%d.nce_sum" % l)[0]
            kl_c = g.get("dump.l%d.kl_sum" % l)[0]
            n_c = g.get("dump.l%d.n_queries" % l)

            def nce_off(v):  # relative distance of v outside [nce_lo, nce_hi]
                return max(nce_lo - v, v - nce_hi, 0.0) / max(abs(nce_lo), 1e-9)
            rel = max(nce_off(nce_c), abs(kl - kl_c) / max(abs(kl), 1e-9))
            checks.check("%s layer %d: losses" % (name, l), rel < 1e-4 and n == n_c,
                         "nce %.6f vs [%.6f, %.6f], kl %.6f vs %.6f, queries %d vs %d" % (nce_c, nce_lo, nce_hi,
                                                                                           kl_c, kl, n_c, n))
            if l == 0:
                (bad, _), _, _ = teacher_np.losses(h_c, wq, wk, P_np, seg, tau, tau_kl, k_pos, n_sink, n_tail, pos,
                                                   rope, eps["eps_p"], wrong=True)
                checks.check("%s layer %d: a wrong positive is caught" % (name, l), nce_off(bad) >= 1e-4,
                             "nce with the (k_pos+1)-th key %.6f vs [%.6f, %.6f]" % (bad, nce_lo, nce_hi))
            m = teacher_np.metrics(h_c, wq, wk, q_c, k_c, P_np, seg, ref.n_head, ref.n_head_kv, eval_k, n_sink, n_tail,
                                   pos, rope, **eps)
            worst = 0.0
            detail = []
            for i, K in enumerate(eval_k):
                for key in METRICS:
                    c = g.get("dump.l%d.%s" % (l, key))[i]
                    lo, hi = m[K][key]
                    worst = max(worst, lo - c, c - hi)
                nq = g.get("dump.l%d.n_queries_k" % l)[i]
                worst = max(worst, abs(nq - m[K]["n"]))
                detail.append("@%d mass %.3f/%.3f" % (K, m[K]["mass_learned"][0], m[K]["mass_oracle"][0]))
            checks.check("%s layer %d: mass/recall@K" % (name, l), worst < METRIC_TOL,
                         "outside the tie-aware range by %.2e (%s)" % (max(worst, 0.0), ", ".join(detail)))
            if l == 0:
                # the check above must fail when the C code keeps a wrong key:
                # values computed with the (K+1)-th best by the scores in place
                # of the chosen key with the most teacher mass, for every
                # query, must fall outside the range
                E = teacher_np.eligible(seg, n_sink, n_tail)

                def swap(t, K, name, order):
                    idx = np.nonzero(E[t])[0]
                    top = order[:K].copy()
                    top[np.argmax(P_np[t, idx][top])] = order[K]
                    return top
                bad = teacher_np.metrics(h_c, wq, wk, q_c, k_c, P_np, seg, ref.n_head, ref.n_head_kv, eval_k, n_sink,
                                         n_tail, pos, rope, pick=swap, **eps)
                caught = []
                for K in eval_k:
                    for key in ("mass_learned", "mass_oracle"):
                        lo, hi = m[K][key]
                        v = bad[K][key][0]
                        caught.append(v < lo - METRIC_TOL or v > hi + METRIC_TOL)
                checks.check("%s layer %d: a wrong key is caught" % (name, l), all(caught),
                             "%d of %d mutated values outside the range" % (sum(caught), len(caught)))
    checks.finish()


if __name__ == "__main__":
    main()
