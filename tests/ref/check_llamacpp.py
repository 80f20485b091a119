#!/usr/bin/python3
"""ctest check: `subq logits` == llama.cpp's own logits on the same GGUF.

llama.cpp runs through node-llama-cpp's prebuilt CPU build
(tests/node/llamacpp_logits.mjs; scripts/install-deps.sh --test installs
it), on small random-weight models that `subq synth` writes of each
architecture: qwen3 (the bar's baseline), gemma3 (sliding layers of 8 keys
with their own RoPE base, QK-norm, post-norms, GELU, embeddings times
sqrt(d)), gemma2 (soft-capped scores and logits), phi3 (fused qkv and
gate-up, 48 of 64 dims rotated), Phi-3's LongRoPE (tiny-phi3-longrope in a
context of 256 tokens, its original one: short factors; and of 512: long
factors, both with attn_factor on cos and sin) and smollm3 (a NoPE layer).
BOS and 47 random token ids go through both; at each of the 48 positions the
argmax must agree on >= 95% of them, and max |subq - llama.cpp| must stay
within 5% of the range of llama.cpp's logits (issue 43's bar). llama.cpp's
logits with the short and the long factors must differ by more than twice
that, so that the wrong factors could not pass.
phi3 runs with a Phi-3 vocabulary (synth: <unk>, <s>, </s> and Phi-3's
added tokens): llama.cpp looks up <unk>, <s>, </s> and <|endoftext|> by text
in any model whose general.name contains "phi3" and fails to load without
them ("error loading model vocabulary: _Map_base::at").
Not here, with the reason:
  - llama with a sliding window (Mistral 7B v0.1): llama.cpp reads no window
    for llama and attends to every key, so it differs past the window by design.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402

SHAPES = ["tiny-qwen3", "tiny-gemma3", "tiny-gemma2", "tiny-phi3", "tiny-smollm3"]
# (shape, context size, label): Phi-3's LongRoPE in both of its branches;
# llama.cpp rounds a context up to a multiple of 256 and takes the long
# factors past the original context (256 here), subq past it unrounded
CONTEXT_RUNS = [("tiny-phi3-longrope", 256, "short factors"), ("tiny-phi3-longrope", 512, "long factors")]
N_TOKENS = 48
MIN_AGREE = 0.95
MAX_DIFF_OF_RANGE = 0.05


def logits_file(path, n_tokens, n_vocab):
    a = np.fromfile(path, dtype="<f4")
    if a.size != n_tokens * n_vocab:
        raise rc.SubqError("%s holds %d floats, expected %d x %d" % (path, a.size, n_tokens, n_vocab))
    return a.reshape(n_tokens, n_vocab).astype(np.float64)


def main():
    ck = rc.Checks("check_llamacpp")
    node_dir = rc.node_llamacpp_dir(ck)
    runs = [(shape, None, None) for shape in SHAPES] + CONTEXT_RUNS
    peers, made = {}, set()
    for shape, n_ctx, what in runs:
        label = shape if n_ctx is None else "%s -c %d (%s)" % (shape, n_ctx, what)
        tag = shape if n_ctx is None else "%s_c%d" % (shape, n_ctx)
        model = os.path.join(rc.tmp_dir(), "llamacpp_%s.gguf" % shape)
        if shape not in made:
            if ck.guarded("synth %s" % shape, rc.run_subq,
                          ["synth", "--shape", shape, "--type", "f32", "--force", "-o", model]) is None:
                continue
            made.add(shape)
        g = GGUFFile(model)
        n_vocab = len(g.get("tokenizer.ggml.tokens"))
        rng = np.random.default_rng(20261127)
        tokens = [int(g.get("tokenizer.ggml.bos_token_id"))] + [int(t) for t in rng.integers(3, n_vocab, N_TOKENS - 1)]
        peer_out = os.path.join(rc.tmp_dir(), "llamacpp_%s.f32" % tag)
        ours_out = os.path.join(rc.tmp_dir(), "llamacpp_%s_subq.f32" % tag)
        ctx_peer = [] if n_ctx is None else ["--ctx", str(n_ctx)]
        ctx_ours = [] if n_ctx is None else ["-c", str(n_ctx)]
        r = subprocess.run(["node", os.path.join(node_dir, "llamacpp_logits.mjs"), model, peer_out] + ctx_peer +
                           [str(t) for t in tokens], capture_output=True, timeout=300)
        if not ck.check("%s: llama.cpp ran" % label, r.returncode == 0, r.stderr.decode()[-2000:]):
            continue
        if ck.guarded("%s: subq logits" % label, rc.run_subq,
                      ["logits", "-m", model, "--tokens", " ".join(map(str, tokens))] + ctx_ours +
                      ["--force", "-o", ours_out]) is None:
            continue
        peer = logits_file(peer_out, N_TOKENS, n_vocab)
        ours = logits_file(ours_out, N_TOKENS, n_vocab)
        peers.setdefault(shape, []).append(peer)
        agree = float(np.mean(peer.argmax(axis=1) == ours.argmax(axis=1)))
        diff = float(np.abs(peer - ours).max())
        span = float(peer.max() - peer.min())
        ck.check("%s (%s): argmax agrees at %.0f%% of %d positions (need %.0f%%)"
                 % (label, g.get("general.architecture"), 100 * agree, N_TOKENS, 100 * MIN_AGREE),
                 agree >= MIN_AGREE, "")
        ck.check("%s: max |subq - llama.cpp| %.4f = %.2f%% of llama.cpp's logit range %.2f (need <= %.0f%%)"
                 % (label, diff, 100 * diff / span, span, 100 * MAX_DIFF_OF_RANGE),
                 diff <= MAX_DIFF_OF_RANGE * span, "")
    # the two context sizes must give llama.cpp different logits by more than
    # the bar, or a run with the wrong factors would pass it
    for shape, (short, long_) in ((s, p) for s, p in peers.items() if len(p) == 2):
        diff = float(np.abs(short - long_).max())
        span = float(short.max() - short.min())
        ck.check("%s: llama.cpp's short and long factors differ by %.1f%% of the logit range (need > %.0f%%, "
                 "twice the bar)" % (shape, 100 * diff / span, 200 * MAX_DIFF_OF_RANGE),
                 diff > 2 * MAX_DIFF_OF_RANGE * span, "")
    ck.finish()


if __name__ == "__main__":
    main()
