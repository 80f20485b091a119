#!/usr/bin/python3
"""ctest check: far keys at trained distances (--far-pos, issue 56) against
a numpy forward pass that attends each query over the same keys with each
far key rotated to the position its scheme gives it.

Models: random-weight `tiny` (llama, adjacent RoPE pairs) and
`tiny-qwen3-yarn` (split pairs, q/k norms, YaRN's attention factor), f32,
trained context 256, given a 300-token sequence. Plan: the window selector
(K most recent eligible keys: which keys a query attends is a function of
positions alone, so numpy attends the same ones), sink 2, tail 8, K 16,
layer 1 sparse, layer 0 kept dense (under a far scheme: the sinks and the
keys within --far-from 40 once there are farther ones). For a query at
position i a key at distance d > 40 is far, and is attended at
    window  40
    group   40 + ceil((d - 40) / G),  G = ceil((d_max - 40) / (255 - 40))
(order: once a key is far, every sink and retrieved key of the query, in
order, just beyond its local window: base, base + 1, ..., the farthest
last) with its stored key R(p) k turned to R(i - d') k. Checked, each scheme, in
decode (every token a step: --decode-from 1) and in a sparse prefill
(--sparse-prefill, batches of 64: a token attends the sinks, its batch's
part of the sequence or the tail, never further than 40 back, and K from
earlier batches):
    logits vs numpy                                  max abs err / max |logit| < 1e-5
    the schemes move the logits                      vs --far-pos none: > 100x that error
    --far-pos none, and a sequence within 40 keys    bit-identical to no far scheme
and one-line refusals of a scheme name that does not exist, a distance
beyond the trained context, a group scheme with no room to divide into,
a tail that reaches past --far-from, and a scheme on a plan with no
sparse layer. recall and eval run a 300-token prompt / window with
--far-pos (recall refuses it without one).
"""

import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402

T, SINK, TAIL, K, FAR, BATCH = 300, 2, 8, 16, 40, 64
TOL = 1e-5


def far_positions(ref, i, keys, n_placed, scheme):
    """Positions the keys (ascending slots) of query i are attended at: the
    first n_placed (sinks and retrieved) as the scheme places them, the rest
    (its local window) where they are."""
    d = i - keys
    eff = d.copy()
    far = d > FAR
    far[n_placed:] = False
    if scheme == "window":
        eff[far] = FAR
    elif scheme == "order" and far.any():                    # all placed keys, in order, beyond the window
        base = len(keys) - n_placed
        eff[:n_placed] = base + np.arange(n_placed)[::-1]    # ascending slots: the farthest first
    elif scheme == "group" and far.any():
        limit = ref.n_ctx_train - 1
        G = math.ceil((d[far].max() - FAR) / (limit - FAR))
        eff[far] = FAR + np.ceil((d[far] - FAR) / G).astype(np.int64)
    return i - eff


def attended(i, layer, mode):
    """Slots query i attends in `layer` (1 sparse, 0 dense under the scheme),
    ascending, and how many of the first are placed (sinks, retrieved)."""
    sink_hi = min(SINK, i + 1)
    if layer == 0:
        if i <= FAR:
            return np.arange(i + 1), 0
        return np.concatenate([np.arange(sink_hi), np.arange(max(i - FAR, sink_hi), i + 1)]), sink_hi
    if mode == "decode":
        lo = max(i + 1 - TAIL, sink_hi)
        top = lo                                             # retrieve from [sink_hi, lo)
    else:
        b0 = i // BATCH * BATCH
        w = b0 if i + 1 - TAIL >= b0 else i + 1 - TAIL       # the batch's part, or the tail
        w = max(w, i - FAR)                                  # never further than FAR back
        lo = max(w, sink_hi)
        top = min(b0, lo)                                    # retrieve among earlier batches
    got = np.arange(max(sink_hi, top - K), top) if top > sink_hi else np.arange(0)
    return np.concatenate([np.arange(sink_hi), got, np.arange(lo, i + 1)]), sink_hi + len(got)


def forward(ref, tokens, scheme, mode):
    """Logits of a llama/qwen3-shaped model whose attention follows attended()
    and far_positions() (float64)."""
    T_ = len(tokens)
    hd, nh, nkv = ref.head_dim, ref.n_head, ref.n_head_kv
    group = nh // nkv
    scale = 1.0 / math.sqrt(hd)
    pos = np.arange(T_)
    x = ref.tok_embd[np.asarray(tokens)]
    for il, L in enumerate(ref.layers):
        ty = L["type"]
        h = ref.rmsnorm(x, L["attn_norm"])
        q = ref.mm(h, L["wq"], ty["wq"], (None, None)).reshape(T_, nh, hd)
        k = ref.mm(h, L["wk"], ty["wk"], (None, None)).reshape(T_, nkv, hd)
        v = ref.mm(h, L["wv"], ty["wv"], (None, None)).reshape(T_, nkv, hd)
        if "attn_q_norm.weight" in L:
            q = ref.rmsnorm(q, L["attn_q_norm.weight"])
            k = ref.rmsnorm(k, L["attn_k_norm.weight"])
        inv_freq, mscale = ref.layer_rope(il, T_)
        q = ref.rope(q, pos, inv_freq, mscale)
        heads = np.empty((T_, nh, hd))
        for i in range(T_):
            keys, n_placed = attended(i, il, mode)
            kr = ref.rope(k[keys], far_positions(ref, i, keys, n_placed, scheme), inv_freq, mscale)  # (n, nkv, hd)
            for hq in range(nh):
                s = kr[:, hq // group, :] @ q[i, hq, :] * scale
                p = np.exp(s - s.max())
                heads[i, hq, :] = (p / p.sum()) @ v[keys, hq // group, :]
        x = x + ref.mm(heads.reshape(T_, nh * hd), L["wo"], ty["wo"], (None, None))
        h = ref.rmsnorm(x, L["ffn_norm"])
        gate = ref.mm(h, L["w_gate"], ty["w_gate"], (None, None))
        up = ref.mm(h, L["w_up"], ty["w_up"], (None, None))
        x = x + ref.mm(gate / (1.0 + np.exp(-gate)) * up, L["w_down"], ty["w_down"], (None, None))
    return ref.mm(ref.rmsnorm(x, ref.output_norm), ref.output, ref.output_type, (None, None))


def run_logits(model, tokens, extra, n_vocab, tmp, tag):
    out = os.path.join(tmp, "far_%s.bin" % tag)
    rc.run_subq(["logits", "-m", model, "--tokens", " ".join(map(str, tokens)), "-o", out, "--force",
                 "-c", "512", "-t", "2"] + extra)
    with open(out, "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, dtype="<f4").reshape(len(tokens), n_vocab), raw


def main():
    ck = rc.Checks("check_far_pos")
    tmp = rc.tmp_dir()
    plan = ["--select", "window", "--topk", str(K), "--sink", str(SINK), "--tail", str(TAIL), "--sparse-layers", "1",
            "--far-from", str(FAR)]
    modes = {"decode": ["--decode-from", "1"], "prefill": ["--sparse-prefill", "-b", str(BATCH)]}
    for shape in ("tiny", "tiny-qwen3-yarn"):
        model = os.path.join(tmp, "far_%s.gguf" % shape)
        if ck.guarded("synth %s" % shape, rc.run_subq,
                      ["synth", "--shape", shape, "--type", "f32", "-o", model, "-s", "5", "--force"]) is None:
            continue
        ref = LlamaRef(model)
        ck.check("%s: trained context 256" % shape, ref.n_ctx_train == 256, str(ref.n_ctx_train))
        tokens = np.random.default_rng(3).integers(1, ref.n_vocab, T).tolist()
        for mode, how in modes.items():
            base = ck.guarded("%s %s: no far scheme" % (shape, mode), run_logits, model, tokens, plan + how,
                              ref.n_vocab, tmp, "base")
            none = ck.guarded("%s %s: --far-pos none" % (shape, mode), run_logits, model, tokens,
                              plan + how + ["--far-pos", "none"], ref.n_vocab, tmp, "none")
            if base and none:
                ck.check("%s %s: --far-pos none is bit-identical to no scheme" % (shape, mode), base[1] == none[1])
            for scheme in ("window", "order", "group"):
                got = ck.guarded("%s %s %s" % (shape, mode, scheme), run_logits, model, tokens,
                                 plan + how + ["--far-pos", scheme], ref.n_vocab, tmp, scheme)
                if not got:
                    continue
                want = forward(ref, tokens, scheme, mode)
                err = np.abs(got[0] - want).max() / np.abs(want).max()
                moved = np.abs(got[0] - base[0]).max() / np.abs(want).max() if base else 0.0
                ck.check("%s %s %s: logits vs numpy" % (shape, mode, scheme), err < TOL,
                         "max err %.2e (moved %.2e from no scheme)" % (err, moved))
                ck.check("%s %s %s: the scheme moves the logits" % (shape, mode, scheme), moved > 100 * TOL,
                         "moved %.2e" % moved)
        # nothing far: bit-identical with the scheme on
        short = tokens[:FAR + 1]
        for mode, how in modes.items():
            a = ck.guarded("%s %s short" % (shape, mode), run_logits, model, short, plan + how, ref.n_vocab, tmp, "sa")
            b = ck.guarded("%s %s short window" % (shape, mode), run_logits, model, short,
                           plan + how + ["--far-pos", "window"], ref.n_vocab, tmp, "sb")
            if a and b:
                ck.check("%s %s: %d tokens (none far) bit-identical with --far-pos window" % (shape, mode, len(short)),
                         a[1] == b[1])
    # recall and eval take a length past the trained context with a scheme (recall refuses it without)
    model = os.path.join(tmp, "far_tiny.gguf")
    text = os.path.join(tmp, "far_text.txt")
    with open(text, "w") as f:
        f.write(" ".join("word%d" % (i % 97) for i in range(4000)) + "\n")
    past = ["--sparse-layers", "1", "--sink", str(SINK), "--tail", str(TAIL), "--far-from", str(FAR)]
    recall = [rc.subq_bin(), "recall", "-m", model, "--haystack", text, "--lengths", "300", "--depths", "0.5",
              "--trials", "1", "--sparse-prefill", "--json"] + past
    for methods, ok in (("window@16:window", True), ("window@16", False)):
        r = subprocess.run(recall + ["--methods", methods], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=rc.subq_env(), timeout=120)
        err = r.stderr.decode("utf-8", "replace")
        if ok:
            got = json.loads(r.stdout) if r.returncode == 0 else {}
            ck.check("recall at 300 tokens (trained 256) with %s" % methods,
                     got.get("lengths") == [300] and len(got.get("methods", [])) == 1, "exit %d: %s" % (r.returncode, err[-300:]))
        else:
            ck.check("recall at 300 tokens without a scheme: refused in one line",
                     r.returncode == 1 and "above the model's context" in err and len(err.strip().splitlines()) == 1,
                     "exit %d: %s" % (r.returncode, err[-300:]))
    r = subprocess.run([rc.subq_bin(), "eval", "-m", model, "--eval-file", text, "-c", "300", "--windows", "1",
                        "--selectors", "window", "--k-sweep", "16", "--far-pos", "window", "--json"] + past,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rc.subq_env(), timeout=120)
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    ck.check("eval of a 300-token window (trained 256) with --far-pos window",
             got.get("ctx") == 300 and len(got.get("methods", [])) == 1 and
             math.isfinite(got["methods"][0].get("ppl", float("nan"))),
             "exit %d: %s" % (r.returncode, r.stderr.decode("utf-8", "replace")[-300:]))
    # refusals, one line each
    for args, want in ((["--far-pos", "far"], "expects none, window, order or group"),
                       (["--select", "window", "--far-pos", "window", "--far-from", "300"],
                        "beyond the model's trained context"),
                       (["--select", "window", "--sparse-layers", "1", "--far-pos", "group", "--far-from", "255"],
                        "smaller --far-from"),
                       (["--select", "window", "--sparse-layers", "1", "--far-pos", "window", "--far-from", "4",
                         "--tail", "16"], "the tail (16 keys) must lie within it"),
                       (["--select", "window", "--sparse-layers", "none", "--far-pos", "order", "--far-from", "40"],
                        "need a sparse layer")):
        cmd = [rc.subq_bin(), "logits", "-m", model, "--tokens", "1 2 3 4", "-o", os.path.join(tmp, "far_x.bin"),
               "--force"] + args
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rc.subq_env(), timeout=60)
        lines = r.stderr.decode("utf-8", "replace").strip().splitlines()
        ck.check("refused: %s" % " ".join(args), r.returncode == 1 and len(lines) == 1 and want in lines[0],
                 "exit %d: %s" % (r.returncode, " | ".join(lines)))
    ck.finish()


if __name__ == "__main__":
    main()
