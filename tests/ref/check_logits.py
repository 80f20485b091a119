#!/usr/bin/python3
"""ctest check: `subq logits` == numpy reference forward.

For each architecture (tiny llama, qwen2, qwen3 shapes) and weight type f32,
f16, bf16, q8_0: `subq synth` a random model, pick 40 random token ids (fixed seed, first one BOS) and compare
    prefill                      (one batch)                  rel err < 1e-4
    --decode-from 7              (7-token prefill + 1-by-1)   rel err < 1e-4
    --decode-from 7 --kv f16     (half-precision KV cache)    rel err < 1e-2
against the float64 reference forward on the dequantised weights, where
    rel err = max|subq - ref| / max|ref|.
Then the same three on the real stories260K model with a 64-token sequence
of the model's own greedy tokens.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402

SHAPES = ["tiny", "tiny-qwen2", "tiny-qwen3"]   # llama, qwen2 (biases), qwen3 (QK-norm)
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K"]
SYNTH_SEED = 1234
TOKEN_SEED = 20240607
N_TOKENS = 40
DECODE_FROM = 7
TOL_F32_KV = 1e-4
TOL_F16_KV = 1e-2


def read_logits(path, n_tokens, n_vocab):
    if not os.path.isfile(path):
        raise rc.SubqError("subq logits did not write %s" % path)
    a = np.fromfile(path, dtype="<f4")
    if a.size != n_tokens * n_vocab:
        raise rc.SubqError("%s holds %d floats, expected %d x %d = %d"
               % (path, a.size, n_tokens, n_vocab, n_tokens * n_vocab))
    return a.reshape(n_tokens, n_vocab).astype(np.float64)


def compare_runs(ck, label, model_path, ref_logits, tokens, tag):
    n_tokens, n_vocab = ref_logits.shape
    tok_arg = " ".join(str(t) for t in tokens)
    denom = np.max(np.abs(ref_logits))
    runs = [
        ("prefill", [], TOL_F32_KV),
        ("decode-from %d" % DECODE_FROM, ["--decode-from", DECODE_FROM], TOL_F32_KV),
        ("decode-from %d kv f16" % DECODE_FROM, ["--decode-from", DECODE_FROM, "--kv", "f16"],
         TOL_F16_KV),
    ]
    for i, (name, extra, tol) in enumerate(runs):
        out_path = os.path.join(rc.tmp_dir(), "logits_%s_%d.f32" % (tag, i))
        if os.path.exists(out_path):
            os.remove(out_path)

        def run():
            rc.run_subq(["logits", "-m", model_path, "--tokens", tok_arg] + extra + ["-o", out_path])
            return read_logits(out_path, n_tokens, n_vocab)

        got = ck.guarded("%s %s" % (label, name), run)
        if got is None:
            continue
        if not np.all(np.isfinite(got)):
            ck.check("%s %s" % (label, name), False, "non-finite logits from subq")
            continue
        err = np.abs(got - ref_logits)
        rel = err.max() / denom
        worst = np.unravel_index(np.argmax(err), err.shape)
        ck.check("%s %s" % (label, name), rel < tol,
                 "rel err %.2e (tol %.0e), worst at token %d vocab %d: subq %.6f ref %.6f"
                 % (rel, tol, worst[0], worst[1], got[worst], ref_logits[worst]))


def main():
    ck = rc.Checks("check_logits")
    stories = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()

    # ---- synthetic models, one per architecture and storage type
    for shape in SHAPES:
        for wtype in TYPES:
            tag = "%s_%s" % (shape, wtype)
            path = os.path.join(rc.tmp_dir(), "synth_%s.gguf" % tag)
            if os.path.exists(path):
                os.remove(path)
            name = "synth %s %s" % (shape, wtype)
            if ck.guarded(name, rc.run_subq, ["synth", "--shape", shape, "--type", wtype,
                                              "-s", SYNTH_SEED, "-o", path]) is None:
                continue
            try:
                ref = LlamaRef(path)
                bos = ref.g.get("tokenizer.ggml.bos_token_id")
                if bos is None:
                    raise ValueError("no tokenizer.ggml.bos_token_id")
            except Exception as e:  # noqa: BLE001 - any unreadable synth output is a failure
                ck.check(name, False, "the reference cannot load %s: %s: %s" % (path, type(e).__name__, e))
                continue
            rng = np.random.default_rng(TOKEN_SEED)
            tokens = [int(bos)] + [int(t) for t in rng.integers(0, ref.n_vocab, N_TOKENS - 1)]
            ref_logits = ref.forward(tokens)
            compare_runs(ck, "synth %s %s (%s, n_vocab %d, d %d, %d layers)"
                         % (shape, wtype, ref.arch, ref.n_vocab, ref.n_embd, ref.n_layer),
                         path, ref_logits, tokens, "synth_" + tag)

    # ---- the real model on its own greedy continuation from BOS (64 tokens)
    ref = LlamaRef(stories)
    tokens = ref.generate("", 63)
    if len(tokens) != 64:
        rc.die("reference generation stopped early (%d tokens)" % len(tokens))
    ref_logits = ref.forward(tokens)
    compare_runs(ck, "stories260K 64 tokens", stories, ref_logits, tokens, "stories")

    ck.finish()


if __name__ == "__main__":
    main()
