#!/usr/bin/python3
"""Self-test of the numpy oracle (needs no subq binary).

  1. gguf_np on a hand-built GGUF (v2 and v3): every metadata value type,
     nested arrays, a non-default alignment, and F32 / F16 / BF16 / Q8_0
     tensors with known values; an unsupported type is refused.
  2. The heap-based SPM tokenizer equals a naive O(n^2) implementation of
     the same rule on random strings, and decode(encode(s)) == s.
  3. Greedy generation on stories260K starts with the known story.
  4. The gemma2 / gemma3 / phi3 / smollm3 / sliding-window (Mistral) paths of
     LlamaRef on random tiny models: equal to a loop-based forward written
     from the same llama.cpp rules (naive_forward), and equal / different
     under settings that must / must not change the logits (window >= T,
     huge soft-caps, fused vs separate qkv, ...). Alone: --families
     (or llama_ref.py --selftest-families).
"""

import math

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


# ---- architectures beyond llama/qwen (gemma2, gemma3, phi3, smollm3, mistral)
# Random tiny models written here; LlamaRef is compared with a slow loop-based
# forward written from the same llama.cpp rules (naive_forward) and with
# itself under settings that must (or must not) change the logits.

FAM_T = 10            # tokens per test sequence
FAM_VOCAB = 40


def fam_weights(seed, n_layer, n_embd=32, n_head=4, n_head_kv=2, hd=8, n_ff=24, qk_norm=False, post_norms=False):
    """Random float32 weights in numpy orientation (rows = outputs), keyed by
    GGUF tensor name; q/k/v and gate/up always separate (fam_write fuses)."""
    rng = np.random.default_rng(seed)

    def mat(r, c):
        return (rng.standard_normal((r, c)) * 0.4).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    W = {"token_embd.weight": mat(FAM_VOCAB, n_embd), "output_norm.weight": norm(n_embd)}
    for il in range(n_layer):
        p = "blk.%d." % il
        W[p + "attn_norm.weight"] = norm(n_embd)
        W[p + "attn_q.weight"] = mat(n_head * hd, n_embd)
        W[p + "attn_k.weight"] = mat(n_head_kv * hd, n_embd)
        W[p + "attn_v.weight"] = mat(n_head_kv * hd, n_embd)
        W[p + "attn_output.weight"] = mat(n_embd, n_head * hd)
        W[p + "ffn_norm.weight"] = norm(n_embd)
        W[p + "ffn_gate.weight"] = mat(n_ff, n_embd)
        W[p + "ffn_up.weight"] = mat(n_ff, n_embd)
        W[p + "ffn_down.weight"] = mat(n_embd, n_ff)
        if qk_norm:
            W[p + "attn_q_norm.weight"] = norm(hd)
            W[p + "attn_k_norm.weight"] = norm(hd)
        if post_norms:
            W[p + "post_attention_norm.weight"] = norm(n_embd)
            W[p + "post_ffw_norm.weight"] = norm(n_embd)
    return W


def fam_write(path, arch, W, n_layer, extra=(), n_embd=32, n_head=4, n_head_kv=2, hd=8, n_ff=24,
              fuse_qkv=False, fuse_up=False, rope_dim=None):
    """Write W as an F32 GGUF of architecture arch; extra: (key suffix, vtype,
    value) metadata after '{arch}.'. fuse_qkv: one attn_qkv (rows q, k, v);
    fuse_up: ffn_up = [gate; up] and no ffn_gate (phi3)."""
    kvs = [("general.architecture", 8, arch)]
    for k, t, v in [("embedding_length", 4, n_embd), ("block_count", 4, n_layer),
                    ("feed_forward_length", 4, n_ff), ("attention.head_count", 4, n_head),
                    ("attention.head_count_kv", 4, n_head_kv), ("attention.key_length", 4, hd),
                    ("attention.value_length", 4, hd), ("context_length", 4, 4096),
                    ("attention.layer_norm_rms_epsilon", 6, 1e-5),
                    ("rope.dimension_count", 4, hd if rope_dim is None else rope_dim)] + list(extra):
        kvs.append((arch + "." + k, t, v))
    W = dict(W)
    for il in range(n_layer):
        p = "blk.%d." % il
        if fuse_qkv:
            W[p + "attn_qkv.weight"] = np.concatenate([W.pop(p + "attn_q.weight"), W.pop(p + "attn_k.weight"),
                                                       W.pop(p + "attn_v.weight")])
        if fuse_up:
            W[p + "ffn_up.weight"] = np.concatenate([W.pop(p + "ffn_gate.weight"), W[p + "ffn_up.weight"]])
    tensors = [(n, list(a.shape[::-1]), 0, np.ascontiguousarray(a, dtype="<f4").tobytes()) for n, a in W.items()]
    with open(path, "wb") as f:
        f.write(build_gguf(3, kvs, tensors))
    return path


def naive_forward(c, W, tokens):
    """The forward pass one token, one head and one rotation pair at a time,
    from the rules in c (per layer: window c["window"][il] (0 = causal only),
    RoPE c["rope"][il] = None or dict(base, lin, div, m)):
      x = embd[t] * embd_scale
      per layer: h = rms(x) a_n; q, k, v = h W^T (per-head rms of q, k if
        given); rotate pair i of q, k by pos * base^(-2i/n_rot) / (lin div_i),
        times m; q *= q_scale; s_j = kq_scale q.k_j (c tanh(s/c) if attn_cap)
        over the visible keys j, softmax, sum s_j v_j; o = Wo (..) (rms with
        post_attention_norm); x += o; f = Wdown (act(Wgate h2) * Wup h2) with
        h2 = rms(x) ffn_n (rms with post_ffw_norm); x += f
      logits = Wout rms(x) (c tanh(l / c) if final_cap)"""
    eps = 1e-5
    nh, nkv, hd, n_rot = c["n_head"], c["n_head_kv"], c["hd"], c["n_rot"]
    T = len(tokens)

    def rms(v, wgt):
        return v / math.sqrt(float(np.mean(v * v)) + eps) * wgt

    def rot(vec, pos, r):
        out = vec.copy()
        for i in range(n_rot // 2):
            theta = pos * r["base"] ** (-2.0 * i / n_rot) / r["lin"]
            if r["div"] is not None:
                theta /= r["div"][i]
            a, b = (i, i + n_rot // 2) if c["neox"] else (2 * i, 2 * i + 1)
            out[a] = r["m"] * (vec[a] * math.cos(theta) - vec[b] * math.sin(theta))
            out[b] = r["m"] * (vec[a] * math.sin(theta) + vec[b] * math.cos(theta))
        return out

    def act(z):
        if c["gelu"]:
            return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))
        return z / (1.0 + np.exp(-z))

    Wd = {n: a.astype(np.float64) for n, a in W.items()}
    x = [Wd["token_embd.weight"][t] * c["embd_scale"] for t in tokens]
    for il in range(c["n_layer"]):
        p = "blk.%d." % il
        q, k, v = [], [], []
        for t in range(T):
            h = rms(x[t], Wd[p + "attn_norm.weight"])
            qt = (Wd[p + "attn_q.weight"] @ h).reshape(nh, hd)
            kt = (Wd[p + "attn_k.weight"] @ h).reshape(nkv, hd)
            vt = (Wd[p + "attn_v.weight"] @ h).reshape(nkv, hd)
            if c["qk_norm"]:
                qt = np.array([rms(r, Wd[p + "attn_q_norm.weight"]) for r in qt])
                kt = np.array([rms(r, Wd[p + "attn_k_norm.weight"]) for r in kt])
            if c["rope"][il] is not None:
                qt = np.array([rot(r, t, c["rope"][il]) for r in qt])
                kt = np.array([rot(r, t, c["rope"][il]) for r in kt])
            q.append(qt * c["q_scale"])
            k.append(kt)
            v.append(vt)
        win = c["window"][il]
        new_x = []
        for t in range(T):
            keys = [j for j in range(t + 1) if win == 0 or t - j < win]
            o = np.zeros(nh * hd)
            for hq in range(nh):
                kvh = hq // (nh // nkv)
                s = np.array([float(q[t][hq] @ k[j][kvh]) * c["kq_scale"] for j in keys])
                if c["attn_cap"]:
                    s = c["attn_cap"] * np.tanh(s / c["attn_cap"])
                e = np.exp(s - s.max())
                o[hq * hd:(hq + 1) * hd] = sum(e[n] / e.sum() * v[j][kvh] for n, j in enumerate(keys))
            o = Wd[p + "attn_output.weight"] @ o
            if c["post_norms"]:
                o = rms(o, Wd[p + "post_attention_norm.weight"])
            xa = x[t] + o
            h2 = rms(xa, Wd[p + "ffn_norm.weight"])
            f = Wd[p + "ffn_down.weight"] @ (act(Wd[p + "ffn_gate.weight"] @ h2) * (Wd[p + "ffn_up.weight"] @ h2))
            if c["post_norms"]:
                f = rms(f, Wd[p + "post_ffw_norm.weight"])
            new_x.append(xa + f)
        x = new_x
    out_w = Wd.get("output.weight", Wd["token_embd.weight"])
    logits = np.array([out_w @ rms(xt, Wd["output_norm.weight"]) for xt in x])
    if c["final_cap"]:
        logits = c["final_cap"] * np.tanh(logits / c["final_cap"])
    return logits


def fam_cfg(n_layer, **kw):
    """naive_forward rules: defaults are llama's (NORM rope base 10000 on
    every layer, no window, kq scale 1/sqrt(hd), SwiGLU)."""
    c = dict(n_layer=n_layer, n_head=4, n_head_kv=2, hd=8, n_rot=8, neox=False, embd_scale=1.0,
             q_scale=1.0, kq_scale=1.0 / math.sqrt(8), attn_cap=None, final_cap=None, gelu=False,
             qk_norm=False, post_norms=False, window=[0] * n_layer,
             rope=[dict(base=10000.0, lin=1.0, div=None, m=1.0)] * n_layer)
    c.update(kw)
    return c


def gemma_cfg(n_layer, **kw):
    return fam_cfg(n_layer, neox=True, embd_scale=math.sqrt(32), q_scale=1.0 / math.sqrt(8), kq_scale=1.0,
                   gelu=True, post_norms=True, **kw)


def test_families(ck, tmp):
    T = FAM_T
    toks = [int(t) for t in np.random.default_rng(7).integers(0, FAM_VOCAB, T)]
    n = [0]

    def path(tag):
        n[0] += 1
        return os.path.join(tmp, "fam_%02d_%s.gguf" % (n[0], tag))

    def fwd(p, tokens=toks, n_ctx=None):
        return LlamaRef(p, n_ctx=n_ctx).forward(tokens)

    def close(label, a, b, tol=1e-9):
        err = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
        ck.check(label, a.shape == b.shape and err < tol, "max rel diff %.2e" % err)

    def window_split(label, full, win, w):
        """rows < w unchanged by a window of w, every later row changed"""
        same = np.array_equal(full[:w], win[:w])
        moved = all(np.abs(full[t] - win[t]).max() > 1e-6 for t in range(w, T))
        ck.check(label + ": window %d: first %d rows = full attention, later rows differ" % (w, w),
                 same and moved, "first rows equal: %s, later rows all differ: %s" % (same, moved))

    # ---- gemma3: 7 layers, 0-4 and 6 slide, 5 is global (pattern 6)
    W = fam_weights(31, 7, qk_norm=True, post_norms=True)
    g3 = lambda extra: fam_write(path("gemma3"), "gemma3", W, 7, extra)  # noqa: E731
    glob = dict(base=1e6, lin=2.0, div=None, m=1.0)
    loc = dict(base=10000.0, lin=1.0, div=None, m=1.0)
    scaled = [("rope.freq_base", 6, 1e6), ("rope.scaling.type", 8, "linear"), ("rope.scaling.factor", 6, 2.0)]
    sw = [0 if il == 5 else 3 for il in range(7)]
    rp = [glob if il == 5 else loc for il in range(7)]
    close("gemma3 window 3, pattern 6, local rope 10000 / global rope 1e6 linear x2 = naive",
          fwd(g3(scaled + [("attention.sliding_window", 4, 3)])),
          naive_forward(gemma_cfg(7, qk_norm=True, window=sw, rope=rp), W, toks))
    close("gemma3 no sliding_window key: every layer global = naive",
          fwd(g3(scaled)), naive_forward(gemma_cfg(7, qk_norm=True, rope=[glob] * 7), W, toks))
    capped = fwd(g3(scaled + [("final_logit_softcapping", 6, 2.0)]))
    close("gemma3 final_logit_softcapping 2 = naive",
          capped, naive_forward(gemma_cfg(7, qk_norm=True, rope=[glob] * 7, final_cap=2.0), W, toks))
    ck.check("gemma3 softcapped logits within (-2, 2)", np.abs(capped).max() < 2.0)
    full = fwd(g3([]))
    ck.check("gemma3 window >= T = no window (same rope base)",
             np.array_equal(full, fwd(g3([("attention.sliding_window", 4, T)]))))
    window_split("gemma3", full, fwd(g3([("attention.sliding_window", 4, 4)])), 4)
    ck.check("gemma3 sliding_window_pattern 1 (no sliding layer) = no window, whatever the rope",
             np.array_equal(fwd(g3(scaled)), fwd(g3(scaled + [("attention.sliding_window", 4, 2),
                                                              ("attention.sliding_window_pattern", 4, 1)]))))
    ck.check("gemma3 rope.freq_base_swa 1e6, window >= T = no window with base 1e6",
             np.array_equal(fwd(g3([("rope.freq_base", 6, 1e6)])),
                            fwd(g3([("rope.freq_base", 6, 1e6), ("rope.freq_base_swa", 6, 1e6),
                                    ("attention.sliding_window", 4, T)]))))
    bools = [il in (1, 4) for il in range(7)]
    close("gemma3 sliding_window_pattern as per-layer bools = naive",
          fwd(g3([("attention.sliding_window", 4, 3), ("attention.sliding_window_pattern", 9, (7, bools))])),
          naive_forward(gemma_cfg(7, qk_norm=True, window=[3 if b else 0 for b in bools]), W, toks))

    # ---- gemma2: 5 layers, even layers slide, attention and final soft-capping
    W = fam_weights(32, 5, post_norms=True)
    g2 = lambda extra: fam_write(path("gemma2"), "gemma2", W, 5, extra)  # noqa: E731
    sw = [3 if il % 2 == 0 else 0 for il in range(5)]
    close("gemma2 window 3 on even layers, attn cap 3, final cap 8 = naive",
          fwd(g2([("attention.sliding_window", 4, 3), ("attn_logit_softcapping", 6, 3.0),
                  ("final_logit_softcapping", 6, 8.0)])),
          naive_forward(gemma_cfg(5, window=sw, attn_cap=3.0, final_cap=8.0), W, toks))
    dflt = fwd(g2([]))
    close("gemma2 without keys = window 4096, caps 50 / 30 (naive)",
          dflt, naive_forward(gemma_cfg(5, attn_cap=50.0, final_cap=30.0), W, toks))
    ck.check("gemma2 defaults = explicit 4096 / 50 / 30",
             np.array_equal(dflt, fwd(g2([("attention.sliding_window", 4, 4096), ("attn_logit_softcapping", 6, 50.0),
                                          ("final_logit_softcapping", 6, 30.0)]))))
    huge = [("attn_logit_softcapping", 6, 1e9), ("final_logit_softcapping", 6, 1e9)]
    nocap = fwd(g2(huge))
    close("gemma2 caps 1e9 = no capping (naive)", nocap, naive_forward(gemma_cfg(5), W, toks), 1e-7)
    ck.check("gemma2 window >= T = window 4096", np.array_equal(nocap, fwd(g2(huge + [("attention.sliding_window", 4, T)]))))
    window_split("gemma2", nocap, fwd(g2(huge + [("attention.sliding_window", 4, 4)])), 4)

    # ---- gemma 27B attention scale 1/sqrt(n_embd / n_head) (head_dim 16 != 32 / 4)
    for arch, nl in (("gemma2", 46), ("gemma3", 62)):
        Wb = fam_weights(33, nl, hd=16, qk_norm=arch == "gemma3", post_norms=True)
        r = LlamaRef(fam_write(path(arch + "_27b"), arch, Wb, nl, hd=16))
        r_small = LlamaRef(fam_write(path(arch), arch, fam_weights(33, 3, hd=16, qk_norm=arch == "gemma3",
                                                                    post_norms=True), 3, hd=16))
        ck.check("%s with %d layers: q scale 1/sqrt(n_embd/n_head), otherwise 1/sqrt(head_dim)" % (arch, nl),
                 r.attn_q_scale == 1.0 / math.sqrt(8) and r_small.attn_q_scale == 1.0 / math.sqrt(16))

    # ---- phi3: fused qkv and gate/up, partial rotary (4 of 8), long/short factors
    W = fam_weights(34, 3)
    short = (1.0 + np.arange(2)).astype(np.float32)
    long_ = np.array([3.0, 7.0], dtype=np.float32)
    fac = {"rope_factors_short.weight": short, "rope_factors_long.weight": long_}
    keys = [("rope.scaling.original_context_length", 4, 8), ("rope.scaling.attn_factor", 6, 1.25)]

    def ph(extra=keys, fuse_qkv=True, factors=True):
        return fam_write(path("phi3"), "phi3", dict(W, **fac) if factors else W, 3, extra,
                         fuse_qkv=fuse_qkv, fuse_up=True, rope_dim=4)

    def phi_cfg(div, m=1.25):
        return fam_cfg(3, neox=True, n_rot=4, rope=[dict(base=10000.0, lin=1.0, div=div, m=m)] * 3)

    p_fused = ph()
    close("phi3 T=6 <= 8: short factors, attn_factor 1.25 = naive",
          fwd(p_fused, toks[:6]), naive_forward(phi_cfg(short), W, toks[:6]))
    close("phi3 T=10 > 8: long factors = naive", fwd(p_fused), naive_forward(phi_cfg(long_), W, toks))
    close("phi3 T=6 with n_ctx 20: long factors = naive",
          fwd(p_fused, toks[:6], n_ctx=20), naive_forward(phi_cfg(long_), W, toks[:6]))
    close("phi3 fused attn_qkv = separate attn_q/k/v", fwd(p_fused), fwd(ph(fuse_qkv=False)), 1e-12)
    ck.check("phi3 attention.sliding_window is ignored",
             np.array_equal(fwd(p_fused), fwd(ph(keys + [("attention.sliding_window", 4, 2)]))))
    close("phi3 without factors = naive plain rope",
          fwd(ph([], factors=False)), naive_forward(phi_cfg(None, 1.0), W, toks))

    # ---- smollm3: NORM rope, no RoPE on layers with (il + 1) % 4 == 0
    W = fam_weights(35, 5)
    nr = [None if (il + 1) % 4 == 0 else dict(base=10000.0, lin=1.0, div=None, m=1.0) for il in range(5)]
    close("smollm3 5 layers (layer 3 without RoPE) = naive",
          fwd(fam_write(path("smollm3"), "smollm3", W, 5)), naive_forward(fam_cfg(5, rope=nr), W, toks))
    W3 = {k: a for k, a in W.items() if not k.startswith(("blk.3.", "blk.4."))}
    ck.check("smollm3 with 3 layers = the same weights as llama",
             np.array_equal(fwd(fam_write(path("smollm3"), "smollm3", W3, 3)),
                            fwd(fam_write(path("llama"), "llama", W3, 3))))

    # ---- mistral: llama with llama.attention.sliding_window on every layer
    W = fam_weights(36, 2)
    full = fwd(fam_write(path("llama"), "llama", W, 2))
    ck.check("llama sliding_window >= T = no window",
             np.array_equal(full, fwd(fam_write(path("mistral"), "llama", W, 2, [("attention.sliding_window", 4, T)]))))
    win = fwd(fam_write(path("mistral"), "llama", W, 2, [("attention.sliding_window", 4, 3)]))
    window_split("llama (mistral)", full, win, 3)
    close("llama window 3 on every layer = naive", win, naive_forward(fam_cfg(2, window=[3, 3]), W, toks))


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


def main(families_only=False):
    ck = rc.Checks("selftest_ref")
    test_families(ck, rc.tmp_dir())
    if not families_only:
        test_gguf(ck, rc.tmp_dir())
        ref = LlamaRef(rc.shared_file("models", "stories260K.gguf"))
        test_tokenizer(ck, ref)
        text = ref.tok.decode_bytes(ref.generate("", 40))
        ck.check("stories260K greedy story",
                 text.startswith(b"Once upon a time, there was a little girl named Lily. "
                                 b"She loved to play outside in the park."), repr(text[:90]))
    ck.finish()


if __name__ == "__main__":
    # --families: only the architecture checks (no shared files needed)
    main(families_only="--families" in sys.argv[1:])
