#!/usr/bin/python3
"""ctest check: `subq logits` == numpy reference forward.

For each architecture (tiny llama, qwen2, qwen3 shapes) and weight type f32,
f16, bf16, q8_0, q4_0 and the K-quants, and for the families gemma3, gemma2,
phi3, smollm3 and llama with a sliding window (Mistral) in f32 and q8_0
(tiny shapes whose windows of 8 keys, soft caps and NoPE layers act within
the sequence): `subq synth` a random model, pick 40
random token ids (fixed seed, first one BOS) and compare
    prefill                      (one batch)                  rel err < 1e-4
    prefill -b 3, -b 16          (batches of 3 / 16 tokens)   rel err < 1e-4
    --decode-from 7              (7-token prefill + 1-by-1)   rel err < 1e-4
    --decode-from 7 --kv f16     (half-precision KV cache)    rel err < 1e-2
against the float64 reference forward on the dequantised weights, where
    rel err = max|subq - ref| / max|ref|.
Products on q8_0 / q4_0 weights multiply 8-bit activations (integer GEMM
and GEMV, every token), and so do those on q4_K / q6_K in batches of 4 or
more tokens where `subq info` names avx512-vnni kernels and in calls of 1
to 3 tokens where it names avx2 or avx512-vnni (the level SUBQ_ISA leaves):
there the reference quantises the same activations the same way, and the
tolerances grow by 2e-2 (see TOL_Q8_ACT).
Then the same three on the real stories260K model with a 64-token sequence
of the model's own greedy tokens.

RoPE as real models ship it, over 200 positions (where each scaling moves
the logits by more than 100x the tolerance, checked against the reference
with the scaling removed): the synth shapes tiny-llama3 (Llama 3.2's
rope_freqs.weight, itself checked against Meta's llama3 formula) and
tiny-qwen3-yarn (YaRN x4), and variants written from them with other
rope keys (linear on qwen2, a factor without a type, YaRN on llama on top
of frequency factors, explicit YaRN knobs); Phi-3's LongRoPE
(tiny-phi3-longrope) with -c 200 and 256 (short factors, up
to the original context of 256) and -c 257 and 1024 (long factors), the
reference given the same context size. `subq info` must show the scaling;
unknown scaling types and bad frequency factors (LongRoPE's too, one set
without the other) must be refused with one line naming the key or tensor.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
from bpe_ref import write_gguf  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402
from llama_ref import GEMM_MIN_ROWS, KQ_ACT_TYPES, Q8_ACT_TYPES, LlamaRef, llama3_rope_factors  # noqa: E402

SHAPES = ["tiny", "tiny-qwen2", "tiny-qwen3"]   # llama, qwen2 (biases), qwen3 (QK-norm)
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K"]
# the families of issue 43, each with a sliding window of 8 keys, soft caps or NoPE layers acting
# within the 40 tokens: gemma3 (local/global RoPE, QK-norm, post-norms, GELU), gemma2 (soft caps),
# phi3 (fused qkv and gate-up, 48 of 64 dims rotated), smollm3 (NoPE layer 3), llama with a window
FAMILY_SHAPES = ["tiny-gemma3", "tiny-gemma2", "tiny-phi3", "tiny-smollm3", "tiny-mistral"]
FAMILY_TYPES = ["f32", "q8_0"]
SYNTH_SEED = 1234
TOKEN_SEED = 20240607
N_TOKENS = 40
DECODE_FROM = 7
TOL_F32_KV = 1e-4
TOL_F16_KV = 1e-2
# Products on Q8_0/Q4_0 weights run on 8-bit activations (the reference does
# the same), but float rounding moves a value across a rounding boundary of
# the quantiser now and then, and these random-weight models (sharp
# attention) amplify one step of d like an f16 KV rounding (1.2-1.4e-2 seen
# for one step, with either GEMM tiling).
TOL_Q8_ACT = 2e-2

ROPE_SHAPES = ["tiny-llama3", "tiny-qwen3-yarn"]
ROPE_TOKENS = 200
ROPE_MIN_EFFECT = 100 * TOL_F32_KV
# (label, base shape, {rope key suffix: (gguf type, value)}) written over the base's metadata
ROPE_VARIANTS = [
    ("qwen2 linear x4", "tiny-qwen2", {"rope.scaling.type": ("str", "linear"), "rope.scaling.factor": ("f32", 4.0)}),
    ("qwen2 factor without a type (llama.cpp: linear)", "tiny-qwen2", {"rope.scaling.factor": ("f32", 2.0)}),
    ("llama yarn x8 over rope_freqs", "tiny-llama3",
     {"rope.scaling.type": ("str", "yarn"), "rope.scaling.factor": ("f32", 8.0),
      "rope.scaling.original_context_length": ("u32", 32)}),
    # llama.cpp keeps its defaults for these three knobs on llama/qwen2/qwen3 (it reads them only for
    # some other architectures); subq applies them as transformers does
    ("qwen3 yarn with explicit knobs", "tiny-qwen3-yarn",
     {"rope.scaling.yarn_beta_fast": ("f32", 16.0), "rope.scaling.yarn_beta_slow": ("f32", 2.0),
      "rope.scaling.yarn_ext_factor": ("f32", 0.5), "rope.scaling.attn_factor": ("f32", 0.9)}),
]
# (label, base shape, metadata to set, rope_freqs.weight values or None, text the error must contain)
ROPE_BAD = [
    ("scaling type longrope", "tiny-qwen3", {"rope.scaling.type": ("str", "longrope")}, None, "rope.scaling.type"),
    ("scaling type llama3", "tiny", {"rope.scaling.type": ("str", "llama3")}, None, "rope.scaling.type"),
    ("scaling type empty", "tiny-qwen2", {"rope.scaling.type": ("str", "")}, None, "rope.scaling.type"),
    ("scaling factor 0.5", "tiny-qwen2", {"rope.scaling.factor": ("f32", 0.5)}, None, "rope.scaling.factor"),
    ("yarn_log_multiplier", "tiny-qwen3-yarn", {"rope.scaling.yarn_log_multiplier": ("f32", 0.1)}, None,
     "yarn_log_multiplier"),
    ("yarn beta_fast < beta_slow", "tiny-qwen3-yarn", {"rope.scaling.yarn_beta_fast": ("f32", 0.5)}, None,
     "yarn_beta_fast"),
    ("rope_freqs NaN", "tiny-llama3", {}, [1.0] * 31 + [float("nan")], "rope_freqs.weight"),
    ("rope_freqs negative", "tiny-llama3", {}, [1.0] * 5 + [-2.0] + [1.0] * 26, "rope_freqs.weight"),
    ("rope_freqs zero", "tiny-llama3", {}, [0.0] * 32, "rope_freqs.weight"),
    ("rope_freqs inf", "tiny-llama3", {}, [float("inf")] * 32, "rope_freqs.weight"),
    ("rope_freqs 33 elements", "tiny-llama3", {}, [1.0] * 33, "rope_freqs.weight"),
]
# Phi-3's LongRoPE factors: (label, base shape, tensor written, its values, text the error must contain)
LONGROPE_BAD = [
    ("short factors without long ones", "tiny-phi3", "rope_factors_short.weight", [1.0] * 24,
     "without 'rope_factors_long.weight'"),
    ("long factors without short ones", "tiny-phi3", "rope_factors_long.weight", [1.0] * 24,
     "without 'rope_factors_short.weight'"),
    ("long factor NaN", "tiny-phi3-longrope", "rope_factors_long.weight", [1.0] * 23 + [float("nan")],
     "rope_factors_long.weight[23]"),
    ("short factor zero", "tiny-phi3-longrope", "rope_factors_short.weight", [0.0] * 24,
     "rope_factors_short.weight[0]"),
    ("short factor negative", "tiny-phi3-longrope", "rope_factors_short.weight", [1.0] * 5 + [-2.0] + [1.0] * 18,
     "rope_factors_short.weight[5]"),
    ("long factors 25 elements", "tiny-phi3-longrope", "rope_factors_long.weight", [1.0] * 25,
     "rope_factors_long.weight"),
    ("rope_freqs beside LongRoPE", "tiny-phi3-longrope", "rope_freqs.weight", [1.0] * 24, "rope_freqs.weight"),
]


def read_logits(path, n_tokens, n_vocab):
    if not os.path.isfile(path):
        raise rc.SubqError("subq logits did not write %s" % path)
    a = np.fromfile(path, dtype="<f4")
    if a.size != n_tokens * n_vocab:
        raise rc.SubqError("%s holds %d floats, expected %d x %d = %d"
               % (path, a.size, n_tokens, n_vocab, n_tokens * n_vocab))
    return a.reshape(n_tokens, n_vocab).astype(np.float64)


def compare_runs(ck, label, model_path, ref_logits, tokens, tag, ref=None, n_ctx=None):
    """subq logits (one batch; a 7-token batch then one by one, f32 and f16
    KV; in a context of n_ctx tokens when given, else the model's) against
    ref_logits. With `ref` given and weights of Q8_ACT_TYPES, the
    reference quantises the activations of every token as subq does, and the
    run's tolerance grows by TOL_Q8_ACT."""
    n_tokens, n_vocab = ref_logits.shape
    tok_arg = " ".join(str(t) for t in tokens)
    denom = np.max(np.abs(ref_logits))
    types = ref.wtype.values() if ref is not None else ()
    q8 = any(t in Q8_ACT_TYPES for t in types)
    level = kernels_in_use(model_path) if any(t in KQ_ACT_TYPES for t in types) else ""
    kq_gemm = level == "avx512-vnni"
    kq_gemv = level in ("avx2", "avx512-vnni")

    def batched(sizes):
        """tokens in calls of >= GEMM_MIN_ROWS, for calls of these sizes"""
        return np.concatenate([np.full(n, n >= GEMM_MIN_ROWS) for n in sizes])

    def calls(b):
        return [b] * (n_tokens // b) + ([n_tokens % b] if n_tokens % b else [])

    decode = [DECODE_FROM] + [1] * (n_tokens - DECODE_FROM)
    runs = [
        ("prefill", [], TOL_F32_KV, [n_tokens]),
        ("prefill -b 3", ["-b", 3], TOL_F32_KV, calls(3)),
        ("prefill -b 16", ["-b", 16], TOL_F32_KV, calls(16)),
        ("decode-from %d" % DECODE_FROM, ["--decode-from", DECODE_FROM], TOL_F32_KV, decode),
        ("decode-from %d kv f16" % DECODE_FROM, ["--decode-from", DECODE_FROM, "--kv", "f16"], TOL_F16_KV, decode),
    ]
    wants = {}
    for i, (name, extra, tol, sizes) in enumerate(runs):
        want = ref_logits
        rows_k = (batched(sizes) & kq_gemm) | (~batched(sizes) & kq_gemv)
        if q8 or rows_k.any():
            key = rows_k.tobytes()
            if key not in wants:
                wants[key] = ref.forward(tokens, q8_rows=np.full(n_tokens, q8), q8_rows_k=rows_k)
            want = wants[key]
            tol += TOL_Q8_ACT
        out_path = os.path.join(rc.tmp_dir(), "logits_%s_%d.f32" % (tag, i))
        if os.path.exists(out_path):
            os.remove(out_path)

        def run():
            ctx = [] if n_ctx is None else ["-c", n_ctx]
            rc.run_subq(["logits", "-m", model_path, "--tokens", tok_arg] + ctx + extra + ["-o", out_path])
            return read_logits(out_path, n_tokens, n_vocab)

        got = ck.guarded("%s %s" % (label, name), run)
        if got is None:
            continue
        if not np.all(np.isfinite(got)):
            ck.check("%s %s" % (label, name), False, "non-finite logits from subq")
            continue
        err = np.abs(got - want)
        rel = err.max() / denom
        worst = np.unravel_index(np.argmax(err), err.shape)
        ck.check("%s %s" % (label, name), rel < tol,
                 "rel err %.2e (tol %.0e), worst at token %d vocab %d: subq %.6f ref %.6f"
                 % (rel, tol, worst[0], worst[1], got[worst], want[worst]))


KERNELS = {}


def kernels_in_use(model_path):
    """the kernel level `subq info` names (avx512-vnni, avx2, scalar) under
    this SUBQ_ISA, asked once for each"""
    isa = os.environ.get("SUBQ_ISA", "")
    if isa not in KERNELS:
        out = rc.run_subq(["info", "-m", model_path]).decode()
        line = [ln for ln in out.split("\n") if "kernels in use:" in ln]
        KERNELS[isa] = line[0].split("kernels in use:")[1].split()[0] if line else ""
    return KERNELS[isa]


def synth(ck, shape, wtype, tag):
    path = os.path.join(rc.tmp_dir(), "synth_%s.gguf" % tag)
    if os.path.exists(path):
        os.remove(path)
    if ck.guarded("synth %s %s" % (shape, wtype), rc.run_subq,
                  ["synth", "--shape", shape, "--type", wtype, "-s", SYNTH_SEED, "-o", path]) is None:
        return None
    return path


def write_variant(src, dst, set_kv, freqs=None, freqs_name="rope_freqs.weight"):
    """Copy GGUF src to dst with {arch}.<suffix> keys set and, when freqs is
    given, the tensor freqs_name replaced (or added) as f32."""
    g = GGUFFile(src)
    arch = g.get("general.architecture")
    full = {arch + "." + k: v for k, v in set_kv.items()}
    kvs = [(k, "raw", g.raw_value(k)) for k in g.metadata if k not in full]
    kvs += [(k, ty, v) for k, (ty, v) in full.items()]
    tensors = [(n, list(g.tensor_infos[n].ne), g.tensor_infos[n].type, g.raw_bytes(n))
               for n in g.tensor_names() if not (freqs is not None and n == freqs_name)]
    if freqs is not None:
        tensors.append((freqs_name, [len(freqs)], 0, np.array(freqs, dtype="<f4").tobytes()))
    write_gguf(dst, kvs, tensors, alignment=g.alignment)


def check_rope_logits(ck, label, path, n_ctx=None):
    """subq vs the reference over ROPE_TOKENS positions, after checking that
    the reference without the rope scaling differs by > ROPE_MIN_EFFECT.
    n_ctx: the context size of both (phi3's LongRoPE chooses its factors by
    it); None: subq's default, the reference's the sequence's length."""
    try:
        ref = LlamaRef(path, n_ctx=n_ctx)
    except Exception as e:  # noqa: BLE001 - an unreadable file is a failure
        ck.check(label, False, "the reference cannot load %s: %s: %s" % (path, type(e).__name__, e))
        return None
    rng = np.random.default_rng(TOKEN_SEED)
    tokens = [int(ref.g.get("tokenizer.ggml.bos_token_id"))] + \
        [int(t) for t in rng.integers(0, ref.n_vocab, ROPE_TOKENS - 1)]
    ref_logits = ref.forward(tokens)
    plain = LlamaRef(path, n_ctx=n_ctx)
    plain.rope_inv_freq = plain.rope_base ** (-2.0 * np.arange(plain.rope_inv_freq.size) / plain.n_rot)
    plain.rope_mscale = 1.0
    plain.rope_inv_freq_long = None
    effect = np.abs(plain.forward(tokens) - ref_logits).max() / np.abs(ref_logits).max()
    ck.check("%s: the scaling matters at these positions" % label, effect > ROPE_MIN_EFFECT,
             "plain rope changes the logits by %.2e (need > %.0e)" % (effect, ROPE_MIN_EFFECT))
    compare_runs(ck, label, path, ref_logits, tokens, "rope_" + label.replace(" ", "_").replace("/", "_"),
                 n_ctx=n_ctx)
    return ref_logits


def check_longrope(ck):
    """Phi-3's LongRoPE (tiny-phi3-longrope: original context 256, the
    model's 1024) on both sides of the original context: the short factors
    in contexts of 200 and 256 tokens, the long ones in 257 and the model's
    1024 (subq's default -c); the two differ by far more than the tolerance.
    f32 weights: the factors act on the rope table alone, and q8_0's
    activation rounding over 200 positions would take most of its tolerance."""
    path = synth(ck, "tiny-phi3-longrope", "f32", "longrope")
    if path is None:
        return
    got = {}
    for n_ctx, which in ((200, "short"), (256, "short"), (257, "long"), (1024, "long")):
        got[n_ctx] = check_rope_logits(ck, "longrope -c %d (%s factors)" % (n_ctx, which), path, n_ctx)
    if got[256] is not None and got[257] is not None:
        diff = np.abs(got[256] - got[257]).max() / np.abs(got[256]).max()
        ck.check("longrope: short and long factors differ (reference, -c 256 vs 257)", diff > ROPE_MIN_EFFECT,
                 "by %.2e (need > %.0e)" % (diff, ROPE_MIN_EFFECT))


def check_rope(ck):
    paths = {}
    for shape in ROPE_SHAPES + ["tiny", "tiny-qwen2", "tiny-qwen3"]:
        paths[shape] = synth(ck, shape, "f32", "rope_" + shape)
    if any(p is None for p in paths.values()):
        return
    # Llama 3.2 1B's frequency factors (tiny-llama3 has its rope parameters and head size)
    got = GGUFFile(paths["tiny-llama3"]).tensor("rope_freqs.weight").astype(np.float64)
    want = llama3_rope_factors(500000.0, 64, 32.0, 1.0, 4.0, 8192)
    ck.check("tiny-llama3 rope_freqs.weight = Meta's llama3 formula (factor 32, low 1, high 4, 8192)",
             got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=0),
             "got %s want %s" % (np.round(got, 4).tolist(), np.round(want, 4).tolist()))

    for shape in ROPE_SHAPES:
        check_rope_logits(ck, "rope %s" % shape, paths[shape])
    for label, base, kv in ROPE_VARIANTS:
        path = os.path.join(rc.tmp_dir(), "rope_variant_%d.gguf" % ROPE_VARIANTS.index((label, base, kv)))
        write_variant(paths[base], path, kv)
        check_rope_logits(ck, "rope %s" % label, path)

    # subq info names the scaling in use
    paths["tiny-phi3-longrope"] = synth(ck, "tiny-phi3-longrope", "f32", "rope_tiny-phi3-longrope")
    for shape, want_text in (("tiny-qwen3-yarn", "yarn scaling x4 (original context 64"),
                             ("tiny-llama3", "frequency factors from rope_freqs.weight (1 .. 32)"),
                             ("tiny", "no scaling"),
                             ("tiny-phi3-longrope", "LongRoPE: short factors (1 .. 1.5) in contexts of up to 256 "
                              "tokens, long factors (1 .. 8) in longer ones, cos/sin scaled by 1.11803; the default "
                              "context (1024 tokens) takes the long ones")):
        out = ck.guarded("info %s" % shape, rc.run_subq, ["info", "-m", paths[shape]])
        if out is not None:
            line = [ln for ln in out.decode().split("\n") if "rope in use:" in ln]
            ck.check("info %s shows the rope" % shape, len(line) == 1 and want_text in line[0], repr(line))

    # subq info names each family's layer spec
    for shape, want_text in (("tiny-gemma3", "6 layers at scale 0.125, 5 sliding over 8 keys (RoPE base 10000, "
                                             "no scaling), 1 global (5)"),
                             ("tiny-gemma2", "2 sliding over 8 keys, 2 global (1, 3), scores capped at 4, "
                                             "logits capped at 30"),
                             ("tiny-smollm3", "4 layers at scale 0.125, 1 without RoPE (3)")):
        path = synth(ck, shape, "f32", "info_" + shape)
        out = ck.guarded("info %s" % shape, rc.run_subq, ["info", "-m", path]) if path else None
        if out is not None:
            line = [ln for ln in out.decode().split("\n") if "attention:" in ln]
            ck.check("info %s shows the layers' attention" % shape, len(line) == 1 and want_text in line[0], repr(line))

    # refused with one line naming the key or tensor, never run with wrong positions
    paths["tiny-phi3"] = synth(ck, "tiny-phi3", "f32", "rope_tiny-phi3")
    bad = [(label, base, kv, freqs, "rope_freqs.weight", want) for label, base, kv, freqs, want in ROPE_BAD]
    bad += [("phi3 " + label, base, {}, freqs, tensor, want) for label, base, tensor, freqs, want in LONGROPE_BAD]
    for label, base, kv, freqs, tensor, want in bad:
        path = os.path.join(rc.tmp_dir(), "rope_bad.gguf")
        write_variant(paths[base], path, kv, freqs, tensor)
        r = subprocess.run([rc.subq_bin(), "logits", "-m", path, "--tokens", "1 2 3", "-o",
                            os.path.join(rc.tmp_dir(), "rope_bad.f32")], capture_output=True, timeout=120)
        lines = [ln for ln in r.stderr.decode("utf-8", "replace").split("\n") if ln]
        ck.check("rope bad input: %s refused" % label,
                 r.returncode == 1 and len(lines) == 1 and lines[0].startswith("subq") and want in lines[0],
                 "exit %d, stderr %r" % (r.returncode, lines))
        if label == "scaling type longrope":
            info = subprocess.run([rc.subq_bin(), "info", "-m", path], capture_output=True, timeout=120)
            ck.check("info on an unsupported rope scaling says why", info.returncode == 0 and
                     b"rope in use: cannot run:" in info.stdout and b"longrope" in info.stdout,
                     "exit %d" % info.returncode)


def bench_isa(isa):
    """The kernel level `subq bench` reports under SUBQ_ISA=isa."""
    stories = rc.shared_file("models", "stories260K.gguf")
    os.environ["SUBQ_ISA"] = isa
    try:
        out = rc.run_subq(["bench", "-m", stories, "--ctx", "64", "-n", "1", "--prefill", "16", "-t", "1", "--json"])
    finally:
        del os.environ["SUBQ_ISA"]
    return json.loads(out)["machine"]["isa"]


def check_isa_levels(ck):
    """The scalar and AVX2 kernel sets give the reference's logits too (the
    default run above uses the widest set the CPU has)."""
    native = ck.guarded("subq bench reports the kernel level", bench_isa, "")
    for isa in ("scalar", "avx2"):
        got = ck.guarded("subq bench under SUBQ_ISA=%s" % isa, bench_isa, isa)
        ck.check("SUBQ_ISA=%s caps the kernels (native %s)" % (isa, native), got == isa or got == native == "scalar",
                 "bench reports %s" % got)
        for wtype in ("q8_0", "q4_0", "q4_K", "q6_K"):
            path = synth(ck, "tiny", wtype, "isa_" + wtype)
            if path is None:
                continue
            ref = LlamaRef(path)
            rng = np.random.default_rng(TOKEN_SEED)
            tokens = [int(ref.g.get("tokenizer.ggml.bos_token_id"))] + [int(t) for t in
                                                                     rng.integers(0, ref.n_vocab, N_TOKENS - 1)]
            os.environ["SUBQ_ISA"] = isa
            try:
                compare_runs(ck, "SUBQ_ISA=%s synth tiny %s" % (isa, wtype), path, ref.forward(tokens), tokens,
                             "isa_%s_%s" % (isa, wtype), ref=ref)
            finally:
                del os.environ["SUBQ_ISA"]


def main():
    ck = rc.Checks("check_logits")
    stories = rc.shared_file("models", "stories260K.gguf")
    rc.subq_bin()

    # ---- synthetic models, one per architecture and storage type
    runs = [(s, t) for s in SHAPES for t in TYPES] + [(s, t) for s in FAMILY_SHAPES for t in FAMILY_TYPES]
    for shape, wtype in runs:
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
                     path, ref_logits, tokens, "synth_" + tag, ref=ref)

    # ---- every lower kernel level this CPU runs (SUBQ_ISA caps it), on one shape
    check_isa_levels(ck)

    # ---- rope scaling and frequency factors
    check_rope(ck)
    check_longrope(ck)

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
