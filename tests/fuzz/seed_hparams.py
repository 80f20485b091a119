#!/usr/bin/python3
"""Seed corpus for fuzz_hparams: small GGUF files holding only what
model_hparams_load reads (hyper-parameters, every rope key, rope_freqs.weight),
so the fuzzer starts inside the rope parser rather than at the GGUF header.
Usage: seed_hparams.py OUTDIR"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from bpe_ref import write_gguf  # noqa: E402


def model(arch, scaling):
    kv = [("general.architecture", "str", arch)]
    kv += [(arch + "." + k, "u32", v) for k, v in (("block_count", 2), ("embedding_length", 256),
           ("feed_forward_length", 512), ("attention.head_count", 4), ("attention.head_count_kv", 2),
           ("attention.key_length", 64), ("context_length", 256), ("rope.dimension_count", 64))]
    kv += [(arch + ".rope.freq_base", "f32", 500000.0), (arch + ".attention.layer_norm_rms_epsilon", "f32", 1e-5)]
    kv += [(arch + ".rope.scaling." + k, ty, v) for k, ty, v in scaling]
    return kv


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    freqs = ("rope_freqs.weight", [32], 0, struct.pack("<32f", *([1.0] * 15 + [1.65, 3.29, 9.67] + [32.0] * 14)))
    yarn = [("type", "str", "yarn"), ("factor", "f32", 4.0), ("original_context_length", "u32", 64),
            ("attn_factor", "f32", 1.0), ("yarn_beta_fast", "f32", 32.0), ("yarn_beta_slow", "f32", 1.0),
            ("yarn_ext_factor", "f32", 1.0)]
    write_gguf(os.path.join(out, "llama3.gguf"), model("llama", []), [freqs])
    write_gguf(os.path.join(out, "qwen3_yarn.gguf"), model("qwen3", yarn), [])
    write_gguf(os.path.join(out, "qwen2_linear.gguf"), model("qwen2", [("type", "str", "linear"),
                                                                       ("factor", "f32", 2.0)]), [])
    # Phi-3's LongRoPE: both factor tensors, the original context and attn_factor
    longrope = [("original_context_length", "u32", 64), ("attn_factor", "f32", 1.1180)]
    write_gguf(os.path.join(out, "phi3_longrope.gguf"), model("phi3", longrope),
               [("rope_factors_long.weight", [32], 0, struct.pack("<32f", *[1.0 + 0.25 * i for i in range(32)])),
                ("rope_factors_short.weight", [32], 0, struct.pack("<32f", *[1.0 + 0.015 * i for i in range(32)]))])


if __name__ == "__main__":
    main()
