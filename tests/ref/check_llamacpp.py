#!/usr/bin/python3
"""ctest check: `subq logits` == llama.cpp's own logits on the same GGUF.

llama.cpp runs through node-llama-cpp's prebuilt CPU build
(tests/node/llamacpp_logits.mjs; scripts/install-deps.sh --test installs
it), on small random-weight models that `subq synth` writes of each
architecture: qwen3 (the bar's baseline), gemma3 (sliding layers of 8 keys
with their own RoPE base, QK-norm, post-norms, GELU, embeddings times
sqrt(d)), gemma2 (soft-capped scores and logits), phi3 (fused qkv and
gate-up, 48 of 64 dims rotated) and smollm3 (a NoPE layer). BOS and 47 random token ids go through both; at each of the 48
positions the argmax must agree on >= 95% of them, and max |subq - llama.cpp|
must stay within 5% of the range of llama.cpp's logits (issue 43's bar).
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

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = ["tiny-qwen3", "tiny-gemma3", "tiny-gemma2", "tiny-phi3", "tiny-smollm3"]
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
    node_dir = os.path.join(HERE, "..", "node")
    if not os.path.isdir(os.path.join(node_dir, "node_modules", "node-llama-cpp")):
        ck.check("node-llama-cpp installed (scripts/install-deps.sh --test installs it)", False, node_dir)
        ck.finish()
    for shape in SHAPES:
        model = os.path.join(rc.tmp_dir(), "llamacpp_%s.gguf" % shape)
        if ck.guarded("synth %s" % shape, rc.run_subq,
                      ["synth", "--shape", shape, "--type", "f32", "--force", "-o", model]) is None:
            continue
        g = GGUFFile(model)
        n_vocab = len(g.get("tokenizer.ggml.tokens"))
        rng = np.random.default_rng(20261127)
        tokens = [int(g.get("tokenizer.ggml.bos_token_id"))] + [int(t) for t in rng.integers(3, n_vocab, N_TOKENS - 1)]
        peer_out = os.path.join(rc.tmp_dir(), "llamacpp_%s.f32" % shape)
        ours_out = os.path.join(rc.tmp_dir(), "llamacpp_%s_subq.f32" % shape)
        r = subprocess.run(["node", os.path.join(node_dir, "llamacpp_logits.mjs"), model, peer_out] +
                           [str(t) for t in tokens], capture_output=True, timeout=300)
        if not ck.check("%s: llama.cpp ran" % shape, r.returncode == 0, r.stderr.decode()[-2000:]):
            continue
        if ck.guarded("%s: subq logits" % shape, rc.run_subq,
                      ["logits", "-m", model, "--tokens", " ".join(map(str, tokens)), "--force", "-o", ours_out]) is None:
            continue
        peer = logits_file(peer_out, N_TOKENS, n_vocab)
        ours = logits_file(ours_out, N_TOKENS, n_vocab)
        agree = float(np.mean(peer.argmax(axis=1) == ours.argmax(axis=1)))
        diff = float(np.abs(peer - ours).max())
        span = float(peer.max() - peer.min())
        ck.check("%s (%s): argmax agrees at %.0f%% of %d positions (need %.0f%%)"
                 % (shape, g.get("general.architecture"), 100 * agree, N_TOKENS, 100 * MIN_AGREE),
                 agree >= MIN_AGREE, "")
        ck.check("%s: max |subq - llama.cpp| %.4f = %.2f%% of llama.cpp's logit range %.2f (need <= %.0f%%)"
                 % (shape, diff, 100 * diff / span, span, 100 * MAX_DIFF_OF_RANGE),
                 diff <= MAX_DIFF_OF_RANGE * span, "")
    ck.finish()


if __name__ == "__main__":
    main()
