#!/usr/bin/python3
"""Write the seed corpora of the fuzz targets into tests/fuzz/corpus/NAME/
(small, deterministic; committed). Run again after changing a file format.
No numpy needed. The session-file seeds are written by `subq generate
--prompt-cache` with the binary $SUBQ_BIN (default build/subq) on
$SUBQ_SHARED/models/stories260K.gguf (default ../shared)."""
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
from gguf_edit import encode  # noqa: E402


def gguf(kvs, tensors=(), alignment=32):
    """kvs: [(key, kind, value)]; tensors: [(name, ne, raw bytes[, ggml type, default f32])]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, kind, value in kvs:
        k = key.encode()
        out += struct.pack("<Q", len(k)) + k + encode(kind, value)
    off = 0
    for name, ne, raw, *ty in tensors:
        n = name.encode()
        out += struct.pack("<Q", len(n)) + n + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", ty[0] if ty else 0, off)
        off += (len(raw) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for _, _, raw, *_ in tensors:
        out += raw + b"\0" * ((-len(raw)) % alignment)
    return bytes(out)


def f32(n, scale=0.25):
    return struct.pack("<%df" % n, *[scale * ((i * 7919) % 17 - 8) / 8 for i in range(n)])


def hnsw_levels(seed, m, count):
    """The levels hnswlib 0.6.2 draws for count inserts through subq's shim
    (hnsw_shim_add: one draw, and addPoint's own for an upper-level element
    or the first): std::minstd_rand0 seeded with seed, generate_canonical of
    two draws, level = int(-ln(r) / ln(M))."""
    mod = 2147483647
    state = [seed % mod or 1]

    def draw():
        r = 0.0
        scale = 1.0
        for _ in range(2):
            state[0] = state[0] * 16807 % mod
            r += (state[0] - 1) * scale
            scale *= mod - 1
        r /= scale
        return int(-math.log(r if r < 1.0 else math.nextafter(1.0, 0.0)) * (1 / math.log(m)))

    levels = []
    for i in range(count):
        d = draw()
        if d > 0 or i == 0:
            e = draw()
            d = d if d > 0 else e
        levels.append(d)
    return levels


def hnsw_graph(m, efc, dim, elem, seed, count):
    """A saved HNSW graph (src/select/hnsw_graph.h) for fuzz_hnsw_graph:
    every element linked to the next two at level 0 and, at each upper
    level, to the next element that reaches it (checksums left 0: the
    target makes them)."""
    levels = hnsw_levels(seed, m, count)
    level0, upper = [], []
    for i in range(count):
        ids = [(i + k) % count for k in (1, 2) if (i + k) % count != i][:2 * m]
        level0 += [len(ids)] + ids + [0] * (2 * m - len(ids))
        for lv in range(1, levels[i] + 1):
            ids = [j for j in list(range(i + 1, count)) + list(range(i)) if levels[j] >= lv][:1]
            upper += [len(ids)] + ids + [0] * (m - len(ids))
    head = b"subqHNSW" + struct.pack("<6I", 1, m, efc, dim, dim, elem)
    head += struct.pack("<3Q2I", seed, count, len(upper), 0, 0)
    return head + struct.pack("<%dI" % (count + len(level0) + len(upper)), *(levels + level0 + upper))


def write(name, seeds):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):  # only its own seedNN: findings and hand-made seeds stay
        if re.fullmatch(r"seed\d\d", old):
            os.unlink(os.path.join(d, old))
    for i, data in enumerate(seeds):
        with open(os.path.join(d, "seed%02d" % i), "wb") as f:
            f.write(data)


FP = "0123456789abcdef"


def merged_file(d_search, n_embd, n_layer, layers, f16):
    """A model file's keys with projections merged in (ann-sparseattention's
    runtime layout, src/search/search_merge.c), f16 or f32 matrices."""
    t = []
    for l in layers:
        for w in ("proj", "attn_k"):
            raw = struct.pack("<%de" % (n_embd * d_search), *[((i * 31) % 13 - 6) / 8 for i in range(n_embd * d_search)])
            t.append(("blk.%d.indexer.%s.weight" % (l, w), [n_embd, d_search]) +
                     ((raw, 1) if f16 else (f32(n_embd * d_search),)))
    return gguf([("general.architecture", "str", "qwen3"), ("qwen3.block_count", "u32", n_layer),
                 ("qwen3.embedding_length", "u32", n_embd), ("qwen3.attention.indexer.head_count", "u32", 1),
                 ("qwen3.attention.indexer.key_length", "u32", d_search),
                 ("qwen3.attention.indexer.top_k", "u32", 4), ("ann_sparse.layers", "arr_i32", layers)], t)


def search_file(d_search, n_embd, n_layer, layers, rope=None, heads=None):
    """A projection file (src/search/search_proj.h); rope: (dims, base, scale) of its rotary part;
    heads: (granularity, query heads, key heads) of a file with search heads."""
    nq, nk = (heads[1], heads[2]) if heads else (1, 1)
    t = []
    for l in layers:
        t.append(("blk.%d.indexer.proj.weight" % l, [n_embd, nq * d_search], f32(n_embd * nq * d_search)))
        t.append(("blk.%d.indexer.attn_k.weight" % l, [n_embd, nk * d_search], f32(n_embd * nk * d_search, 0.5)))
    return gguf([("general.architecture", "str", "subq-search"), ("subq.search.d_search", "u32", d_search),
                 ("subq.search.model_n_embd", "u32", n_embd), ("subq.search.model_n_layer", "u32", n_layer),
                 ("subq.search.layers", "arr_i32", layers), ("subq.search.model_fingerprint", "str", FP)] +
                ([("subq.search.rope_dims", "u32", rope[0]), ("subq.search.rope_base", "f32", rope[1]),
                  ("subq.search.rope_scale", "f32", rope[2])] if rope else []) +
                ([("subq.search.granularity", "str", heads[0]), ("subq.search.query_heads", "u32", nq),
                  ("subq.search.key_heads", "u32", nk)] if heads else []), t)


def corpus_file(lens, evals, vocab=200):
    """A pre-tokenised corpus (src/data/corpus_file.h)."""
    n = sum(lens)
    return gguf([("subq.corpus.version", "u32", 1), ("subq.corpus.vocab_fingerprint", "str", FP),
                 ("subq.corpus.tokens_fingerprint", "str", FP)],
                [("corpus.doc_len", [len(lens)], struct.pack("<%di" % len(lens), *lens), 26),
                 ("corpus.doc_eval", [len(evals)], struct.pack("<%db" % len(evals), *evals), 24),
                 ("corpus.tokens", [n], struct.pack("<%di" % n, *[1 + i % vocab for i in range(n)]), 26)])


def phi_file(D, E, H, F, n_head, n_kv, n_layer, layers, h_mid=False):
    # (suffix, rows, cols, matrix) in phi_maps.h's order ws bs w1 b1 w2 b2 alpha wo bo
    shapes = [("ws.weight", E, D, 1), ("ws.bias", 1, E, 0), ("w1.weight", H, E, 1), ("w1.bias", 1, H, 0),
              ("w2.weight", E, H, 1), ("w2.bias", 1, E, 0), ("alpha", 1, 1, 0), ("wo.weight", F, E, 1),
              ("wo.bias", 1, F, 0)]
    t = []
    for l in layers:
        for g, n in (("q", n_head), ("k", n_kv)):
            for suffix, r, c, mat in shapes:
                ne = [c, r, n] if mat else [c, n]
                t.append(("blk.%d.phi_%s.%s" % (l, g, suffix), ne, f32(r * c * n)))
    kvs = [("general.architecture", "str", "subq-phi")]
    for k, v in (("head_dim", D), ("d_emb", E), ("d_hidden", H), ("d_phi", F), ("n_head", n_head),
                 ("n_head_kv", n_kv), ("model_n_layer", n_layer), ("n_sink", 4), ("n_tail", 16)):
        kvs.append(("subq.phi." + k, "u32", v))
    kvs += [("subq.phi.layers", "arr_i32", layers), ("subq.phi.model_fingerprint", "str", FP),
            ("subq.phi.gelu", "str", "tanh")]
    if h_mid:
        kvs.append(("subq.phi.h_mid", "arr_f32", [0.1 * i for i in range(len(layers) * n_head)]))
    return gguf(kvs, t)


def vocab_seed(flags, pre, tokens, merges, ids, text):
    """fuzz_vocab's input layout (see fuzz_vocab.c)."""
    out = bytearray([flags, pre, len(tokens)])
    for s, score, ty in tokens:
        s = s.encode() if isinstance(s, str) else s
        out += bytes([len(s)]) + s + bytes([score, ty])
    out += bytes([len(merges)])
    for a, b in merges:
        out += bytes([a, b])
    out += bytes(ids) + text.encode()
    return bytes(out)


def fnv(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def kv_header(n_ctx, search, committed, version=5, head_major=0):
    """A KV file header slot (src/kv/kv_file.c's disk_header) for fuzz_kv_file's
    geometry: 2 layers, 1 KV head of 8 f32 values, 16-token vocabulary;
    head_major: bit l for a head-major layer l (version 5; version 4 slots end
    at the search table)."""
    page = 4096
    rnd = lambda x: (x + page - 1) // page * page  # noqa: E731
    per_layer, stride = rnd(n_ctx * 2 * 32), rnd(n_ctx * 4)  # a slot's key and value rows adjacent
    fixed = 2 * page + 2 * per_layer + 4 * stride + 2 * rnd(16 * 4)  # pos, seg, tok, sum; two logits regions
    table, end = b"", fixed
    for layer, d in search:
        table += struct.pack("<IIQQ", layer, d, end, 0x1234 + layer)
        end += rnd(n_ctx * d * 4)
    table += b"\0" * (128 * 24 - len(table))
    h = b"SUBQKVF\0" + struct.pack("<IIQQ", version, len(search), 1, 0x5EEDF00DCAFEF00D)
    h += struct.pack("<6I", 0, 2, 1, 8, n_ctx, 16) + struct.pack("<QQQQQ", 32, fixed, end, committed, 0)
    h += struct.pack("<II", committed > 0, 0x1234ABCD) + table
    if version >= 5:
        h += struct.pack("<4Q", head_major, 0, 0, 0)
    h += struct.pack("<Q", fnv(h))
    return h + b"\0" * (page - len(h))


def main():
    write("fuzz_gguf", [
        gguf([("general.architecture", "str", "llama"), ("a.u32", "u32", 7), ("a.f32", "f32", 0.5),
              ("a.bool", "bool", 1), ("a.strs", "arr_str", ["x", "yz", ""]), ("a.ints", "arr_i32", [1, -2, 3]),
              ("a.floats", "arr_f32", [1.0, float("nan")])],
             [("t.weight", [4, 2], f32(8)), ("u.weight", [3], f32(3))]),
        gguf([("general.alignment", "u32", 64), ("k", "str", "v")], [("t", [16], f32(16))], alignment=64),
        gguf([]),
    ])
    write("fuzz_tokenizer", [s.encode() for s in [
        "Once upon a time, there was a little girl named Lily.",
        "  leading and  double  spaces \n\n\ttabs",
        "caf\u00e9 \u4e2d\u6587 \U0001F600 \u2581 <s> </s> <|endoftext|> <|im_start|>",
        "12345 678,9 don't I'll WE'RE",
        "HelloWorld iPhone McDONALD's \u00c9COLE \u00e9cole \u03a9MEGA e\u0301x !!\n\n/x 1234567",
    ]])
    byte_tokens = 2  # flag: the 256 byte tokens
    write("fuzz_vocab", [
        # spm with U+2581 pieces, scores and types
        vocab_seed(64 | byte_tokens | 4 | 8, 0, [("\u2581", 140, 1), ("\u2581a", 150, 1), ("ab", 145, 1),
                                                 ("\u2581ab", 160, 1), ("b", 130, 1)], [], [1, 2, 0],
                   "a b ab  ba \u00e9"),
        # spm without U+2581: each space is three byte tokens
        vocab_seed(64 | byte_tokens | 4 | 8, 0, [("a", 140, 1), ("b", 140, 1), ("ab", 150, 1)], [], [1, 2, 0],
                   "a b a b ab ab " * 8),
        # gpt2 byte alphabet with merges, qwen2 pre-split
        vocab_seed(1 | byte_tokens | 8 | 64, 1, [("ab", 0, 1), ("\u0120a", 0, 1), ("<tool>", 0, 4)],
                   [(97 + 3, 98 + 3), (32 + 3 + 256 - 256, 97 + 3)], [1, 2, 255], "ab ab <tool> 123 abab"),
        # no byte tokens at all, odd types, NaN score
        vocab_seed(4 | 8 | 128, 0, [("x", 0, 9), ("y", 1, 255), ("xy", 2, 6)], [], [255, 255, 0], "xyxy yx"),
        # gpt2 byte alphabet, gpt-4o pre-split (pres[6]): merges across its case cuts
        vocab_seed(1 | byte_tokens | 8 | 64, 6, [("aT", 0, 1), ("He", 0, 1), ("<|end|>", 0, 3)],
                   [(97 + 3, 84 + 3), (72 + 3, 101 + 3)], [1, 2, 255],
                   "HelloWorld aThe McDONALD's \u00c9COLE \u00e9cole e\u0301x 1234567 !!\n\n/x<|end|>"),
    ])
    write("fuzz_search_proj", [search_file(2, 4, 3, [1]), search_file(3, 8, 4, [0, 2, 3]),
                               merged_file(2, 4, 3, [1, 2], True), merged_file(3, 8, 4, [0, 3], False),
                               search_file(4, 8, 3, [0, 2], (2, 10000.0, 0.25)),
                               search_file(2, 8, 3, [1], (2, 100.0, 1.0), ("head", 4, 2))])
    write("fuzz_phi_maps", [phi_file(2, 2, 3, 2, 2, 1, 3, [1]), phi_file(2, 3, 2, 2, 4, 2, 4, [0, 3], h_mid=True)])
    write("fuzz_jsonl", [s.encode() for s in [
        '{"text": "hello world"}',
        '{"id": 3, "meta": {"a": [1, 2, {"b": null}]}, "text": "esc \\" \\\\ \\n \\u00e9 \\ud83d\\ude00"}',
        '{"other": true}',
        '  {"text":""}  ',
    ]])
    write("fuzz_layers", [bytes([n]) + s.encode() for n, s in
                          [(11, "all"), (11, "none"), (15, "1,3,5-7"), (15, "2--1"), (3, "-1,0"), (7, "1-2,2-3")]])
    write("fuzz_serve_request", [s.encode() for s in [
        '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":["x"],"seed":1,'
        '"subq":{"select":"window","topk":8}}',
        '{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"stream":true,'
        '"stream_options":{"include_usage":true}}',
        '{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00"},'
        '{"role":"assistant","content":"ok"}],"top_p":0.5,"stop":"\\n"}',
    ]])
    repo = os.path.normpath(os.path.join(HERE, "..", ".."))
    subq = os.environ.get("SUBQ_BIN") or os.path.join(repo, "build", "subq")
    model = os.path.join(os.environ.get("SUBQ_SHARED") or os.path.join(repo, "..", "shared"), "models",
                         "stories260K.gguf")
    seeds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, plan in enumerate(([], ["--select", "window", "--topk", "8"])):
            path = os.path.join(tmp, "s%d.gguf" % i)
            subprocess.run([subq, "generate", "-m", model, "-p", "Once", "-n", "1", "-c", "16", "-t", "1",
                            "--prompt-cache", path] + plan, check=True, capture_output=True)
            seeds.append(open(path, "rb").read())
        # tiny-gemma3 (the target's third model): 5 of 6 layers slide over 8
        # keys, in rings of 12 rows at -b 4, so the file holds their last 12
        sliding = os.path.join(tmp, "tiny-gemma3.gguf")
        subprocess.run([subq, "synth", "--shape", "tiny-gemma3", "--type", "f32", "-s", "1", "-o", sliding],
                       check=True, capture_output=True)
        path = os.path.join(tmp, "s2.gguf")
        subprocess.run([subq, "generate", "-m", sliding, "-p", "Once upon a time there was a little dog",
                        "-n", "1", "-c", "64", "-b", "4", "-t", "1", "--prompt-cache", path],
                       check=True, capture_output=True)
        seeds.append(open(path, "rb").read())
    write("fuzz_session", seeds)
    write("fuzz_hnsw_graph", [hnsw_graph(2, 8, 4, 4, 1, 40), hnsw_graph(4, 16, 8, 2, 1, 100),
                              hnsw_graph(3, 4, 3, 4, 7, 1), hnsw_graph(2, 8, 4, 2, 1, 0)])
    write("fuzz_corpus_file", [corpus_file([5, 40, 3], [0, 0, 1]), corpus_file([1], [0]),
                                corpus_file([17, 16, 15, 2, 33], [0, 1, 0, 0, 0])])
    # (and, kept: file-stories-c16, a whole KV file of stories260K made by
    # `subq generate --kv-file F -c 16 -p Once -n 6 --temp 0` as version 4, and
    # file-stories-c16-v5, the same as version 5: every layer head-major)
    write("fuzz_kv_file", [kv_header(64, [], 0, 4), kv_header(100, [(1, 4)], 7, 4),
                           kv_header(9, [(0, 2), (1, 16)], 9, 4), kv_header(64, [], 0, 5, 3),
                           kv_header(100, [(1, 4)], 7, 5, 1)])


if __name__ == "__main__":
    main()
