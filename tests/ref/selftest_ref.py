#!/usr/bin/python3
"""Self-test of the numpy oracle (needs no subq binary).

  1. gguf_np on a hand-built GGUF (v2 and v3): every metadata value type,
     nested arrays, a non-default alignment, and F32 / F16 / BF16 / Q8_0
     tensors with known values; an unsupported type is refused.
  2. The heap-based SPM tokenizer equals a naive O(n^2) implementation of
     the same rule on random strings, and decode(encode(s)) == s.
  3. Greedy generation on stories260K starts with the known story.
"""

import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
import gguf_np  # noqa: E402
from llama_ref import LlamaRef, utf8_prefix  # noqa: E402


# ---- a minimal GGUF writer, for this test only ---------------------------
def g_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def g_val(vtype, v):
    """Encode one value (no type tag)."""
    fmts = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
    if vtype in fmts:
        return struct.pack(fmts[vtype], v)
    if vtype == 8:
        return g_str(v)
    if vtype == 9:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(g_val(etype, x) for x in items)
    raise ValueError(vtype)


def build_gguf(version, kvs, tensors, alignment=None):
    """kvs: list of (key, vtype, value); tensors: list of (name, ne, ggml_type, raw bytes)."""
    if alignment is not None:
        kvs = kvs + [("general.alignment", 4, alignment)]
    align = alignment or 32
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += g_str(k) + struct.pack("<I", t) + g_val(t, v)
    data = b""
    infos = b""
    for name, ne, ttype, raw in tensors:
        off = len(data)
        infos += g_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", e) for e in ne)
        infos += struct.pack("<IQ", ttype, off)
        data += raw
        data += b"\0" * ((-len(data)) % align)
    head += infos
    head += b"\0" * ((-len(head)) % align)
    return head + data


def test_gguf(ck, tmp):
    rng = np.random.default_rng(5)
    kvs = [
        ("general.architecture", 8, "llama"),
        ("u8", 0, 200), ("i8", 1, -100), ("u16", 2, 60000), ("i16", 3, -30000),
        ("u32", 4, 4000000000), ("i32", 5, -2000000000), ("f32", 6, 1.5), ("bool", 7, True),
        ("str", 8, "héllo ▁"), ("u64", 10, 2 ** 63 + 5), ("i64", 11, -(2 ** 62)), ("f64", 12, 0.1),
        ("arr_i32", 9, (5, [1, -2, 3])),
        ("arr_str", 9, (8, ["a", "", "▁b"])),
        ("arr_nested", 9, (9, [(4, [1, 2]), (4, []), (4, [7])])),
        ("arr_empty", 9, (6, [])),
        ("arr_bool", 9, (7, [True, False])),
    ]
    a32 = rng.standard_normal((3, 5)).astype(np.float32)            # ne = [5, 3]
    a16 = rng.standard_normal((2, 4, 3)).astype(np.float16)         # ne = [3, 4, 2]
    abf_bits = (rng.standard_normal(6).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    abf_want = (abf_bits.astype(np.uint32) << 16).view(np.float32)
    # Q8_0: 2 rows x 64 = 4 blocks
    d = rng.uniform(0.01, 0.1, 4).astype(np.float16)
    q = rng.integers(-128, 128, (4, 32)).astype(np.int8)
    q8_raw = b"".join(d[i:i + 1].tobytes() + q[i].tobytes() for i in range(4))
    q8_want = (d.astype(np.float32)[:, None] * q.astype(np.float32)).reshape(2, 64)
    tensors = [
        ("t.f32", [5, 3], 0, a32.tobytes()),
        ("t.f16", [3, 4, 2], 1, a16.tobytes()),
        ("t.bf16", [6], 30, abf_bits.tobytes()),
        ("t.q8_0", [64, 2], 8, q8_raw),
        ("t.q4_1", [32], 3, b"\0" * 20),
    ]
    for version in (2, 3):
        for alignment in (None, 64):
            path = os.path.join(tmp, "selftest_v%d_%s.gguf" % (version, alignment))
            with open(path, "wb") as f:
                f.write(build_gguf(version, kvs, tensors, alignment))
            g = gguf_np.GGUFFile(path)
            label = "gguf v%d align %s" % (version, alignment or "default")
            m = g.metadata
            ok_meta = (m["u8"] == 200 and m["i8"] == -100 and m["u16"] == 60000 and m["i16"] == -30000
                       and m["u32"] == 4000000000 and m["i32"] == -2000000000 and m["f32"] == 1.5
                       and m["bool"] is True and m["str"] == "héllo ▁" and m["u64"] == 2 ** 63 + 5
                       and m["i64"] == -(2 ** 62) and m["f64"] == 0.1 and m["arr_i32"] == [1, -2, 3]
                       and m["arr_str"] == ["a", "", "▁b"] and m["arr_nested"] == [[1, 2], [], [7]]
                       and m["arr_empty"] == [] and m["arr_bool"] == [True, False]
                       and g.alignment == (alignment or 32))
            ck.check(label + " metadata", ok_meta)
            ok_t = (np.array_equal(g.tensor("t.f32"), a32)
                    and np.array_equal(g.tensor("t.f16"), a16.astype(np.float32))
                    and np.array_equal(g.tensor("t.bf16"), abf_want)
                    and np.array_equal(g.tensor("t.q8_0"), q8_want)
                    and g.tensor("t.f16").shape == (2, 4, 3) and g.tensor("t.f32").dtype == np.float32)
            ck.check(label + " tensors f32/f16/bf16/q8_0", ok_t)
            try:
                g.tensor("t.q4_1")
                refused = False
            except gguf_np.UnsupportedTensorType:
                refused = True
            ck.check(label + " refuses Q4_1", refused)
    # truncated file -> GGUFError
    raw = build_gguf(3, kvs, tensors)
    path = os.path.join(tmp, "selftest_trunc.gguf")
    bad = 0
    # the file ends: q8_0 data (136 B) | pad 24 | q4_1 (20 B) | pad 12; len-60 cuts into q8_0
    for cut in (3, 20, 100, 300, len(raw) - 60):
        with open(path, "wb") as f:
            f.write(raw[:cut])
        try:
            gguf_np.GGUFFile(path)
        except gguf_np.GGUFError:
            bad += 1
    ck.check("gguf truncated files refused", bad == 5, "%d/5" % bad)


def naive_encode(tok, text):
    """Same rule as SpmTokenizer.encode, as a plain O(n^2) loop."""
    if not text:
        return []
    syms = list((" " + text if tok.add_space_prefix else text).replace(" ", "\u2581"))
    while True:
        best = None
        for i in range(len(syms) - 1):
            tid = tok.token_to_id.get(syms[i] + syms[i + 1])
            if tid is not None and (best is None or tok.scores[tid] > best[0]):
                best = (tok.scores[tid], i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    out = []
    for s in syms:
        if s in tok.token_to_id:
            out.append(tok.token_to_id[s])
        else:
            out += [tok.byte_to_id.get(b, tok.unk_id) for b in s.encode("utf-8")]
    return out


def test_tokenizer(ck, ref):
    tok = ref.tok
    rnd = random.Random(1)
    alpha = list("abcdefghijklmnopqrstuvwxyz  ..,'ETHSe\n\téü中😀")
    with open(rc.shared_file("data", "text", "ulysses.txt"), "rb") as f:
        corpus = utf8_prefix(f.read(), 200000).decode("utf-8")
    bad = []
    for it in range(1000):
        if it % 2:
            s = "".join(rnd.choice(alpha) for _ in range(rnd.randint(0, 40)))
        else:
            a = rnd.randint(0, len(corpus) - 300)
            s = corpus[a:a + rnd.randint(0, 300)]
        e = tok.encode(s)
        if e != naive_encode(tok, s) or tok.decode(e) != s:
            bad.append(s)
    ck.check("tokenizer heap == naive, round trip (1000 strings)", not bad,
             "first bad: %r" % bad[0] if bad else "")


def main():
    ck = rc.Checks("selftest_ref")
    test_gguf(ck, rc.tmp_dir())
    ref = LlamaRef(rc.shared_file("models", "stories260K.gguf"))
    test_tokenizer(ck, ref)
    text = ref.tok.decode_bytes(ref.generate("", 40))
    ck.check("stories260K greedy story",
             text.startswith(b"Once upon a time, there was a little girl named Lily. "
                             b"She loved to play outside in the park."), repr(text[:90]))
    ck.finish()


if __name__ == "__main__":
    main()
