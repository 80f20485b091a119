#!/usr/bin/python3
"""ctest check: `subq perplexity` == numpy reference (llama.cpp method).

stories260K on wikitext-2-raw test, -c 512, first 8 chunks:
    |ppl_subq - ppl_ref| / ppl_ref < 1e-4
and the standard error agrees to 1e-3 relative; the same with
--sparse-prefill when every earlier key is retrieved, and with --window 128
(the same tokens scored through windows of 128: 2 chunks of 512).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
from llama_ref import LlamaRef, read_text_file  # noqa: E402

N_CTX = 512
CHUNKS = 8


def main():
    ck = rc.Checks("check_perplexity")
    model_path = rc.shared_file("models", "stories260K.gguf")
    text_path = rc.shared_file("data", "text", "wikitext-2-raw.test.txt")
    rc.subq_bin()

    ref = LlamaRef(model_path)
    want = ref.perplexity(read_text_file(text_path), N_CTX, CHUNKS)
    print("reference: ppl %.6f +/- %.6f over %d tokens (%d chunks)"
          % (want["ppl"], want["ppl_stderr"], want["n_tokens_scored"], want["n_chunks"]))

    out = ck.guarded("subq perplexity runs", rc.run_subq,
                     ["perplexity", "-m", model_path, "-f", text_path, "-c", N_CTX,
                      "--chunks", CHUNKS, "--json"])
    if out is None:
        ck.finish()
    try:
        got = json.loads(out.decode("utf-8"))
        ppl = float(got["ppl"])
        ppl_se = float(got["ppl_stderr"])
    except (ValueError, KeyError, TypeError) as e:
        ck.check("subq perplexity --json output", False,
                 "stdout is not one JSON object with ppl and ppl_stderr (%s): %r" % (e, out[:400]))
        ck.finish()

    rel = abs(ppl - want["ppl"]) / want["ppl"]
    ck.check("ppl", rel < 1e-4, "subq %.6f ref %.6f rel err %.2e (tol 1e-4)" % (ppl, want["ppl"], rel))
    rel_se = abs(ppl_se - want["ppl_stderr"]) / want["ppl_stderr"]
    ck.check("ppl_stderr", rel_se < 1e-3,
             "subq %.6f ref %.6f rel err %.2e (tol 1e-3)" % (ppl_se, want["ppl_stderr"], rel_se))
    if "n_tokens_scored" in got:
        ck.check("n_tokens_scored", int(got["n_tokens_scored"]) == want["n_tokens_scored"],
                 "subq %s ref %d" % (got["n_tokens_scored"], want["n_tokens_scored"]))

    # --window: the same tokens, each from the window of 128 whose second half holds it
    want_w = ref.perplexity(read_text_file(text_path), N_CTX, 2, window=128)
    out = ck.guarded("subq perplexity --window runs", rc.run_subq,
                     ["perplexity", "-m", model_path, "-f", text_path, "-c", N_CTX, "--window", 128, "--chunks", 2,
                      "--json"])
    if out is not None:
        got_w = json.loads(out.decode("utf-8"))
        rel = abs(float(got_w["ppl"]) - want_w["ppl"]) / want_w["ppl"]
        ck.check("--window 128: ppl", rel < 1e-4 and int(got_w["n_tokens_scored"]) == want_w["n_tokens_scored"]
                 and got_w["window"] == 128,
                 "subq %.6f ref %.6f rel err %.2e, %s tokens scored (ref %d)"
                 % (float(got_w["ppl"]), want_w["ppl"], rel, got_w["n_tokens_scored"], want_w["n_tokens_scored"]))
        ck.check("--window scores other contexts than the chunk", abs(want_w["ppl"] - want["ppl"]) > 1e-3 * want["ppl"],
                 "windowed %.4f vs chunked %.4f" % (want_w["ppl"], want["ppl"]))

    # --sparse-prefill scores each chunk as a sparse prompt runs: batches of
    # 64, each token retrieving from the batches before its own. With K above
    # the chunk every earlier key is retrieved, so the answer is dense
    # attention's again (the sum over keys in another order).
    out = ck.guarded("subq perplexity --sparse-prefill runs", rc.run_subq,
                     ["perplexity", "-m", model_path, "-f", text_path, "-c", N_CTX, "--chunks", CHUNKS, "--json",
                      "--sparse-prefill", "-b", 64, "--select", "oracle", "--topk", N_CTX, "--sink", 0, "--tail", 0,
                      "--sparse-layers", "all"])
    if out is not None:
        sp = json.loads(out.decode("utf-8"))
        rel = abs(float(sp["ppl"]) - want["ppl"]) / want["ppl"]
        ck.check("ppl with --sparse-prefill retrieving every key", rel < 1e-4,
                 "subq %.6f ref %.6f rel err %.2e (tol 1e-4)" % (float(sp["ppl"]), want["ppl"], rel))
    ck.finish()


if __name__ == "__main__":
    main()
