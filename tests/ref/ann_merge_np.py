"""Independent numpy re-implementation of the layout ann-sparseattention's
merge script writes (runtime/scripts/merge_ann_checkpoint_to_gguf.py on the
branch feat/llama-ann-runtime of github.com/unixsysdev/ann-sparseattention),
for the checks of subq's reader and writer of merged models.

The script (through llama.cpp's gguf-py GGUFWriter):
  - writes general.architecture first, then copies every metadata pair of the
    base model except general.architecture and the three indexer keys;
  - adds {arch}.attention.indexer.head_count = 1, .key_length = d_search,
    .top_k = K (all uint32), ann_sparse.layers (int32 array: gguf-py types a
    list of Python ints as INT32), ann_sparse.checkpoint and ann_sparse.config
    (strings);
  - copies every base tensor's bytes, type and shape, then appends per layer
    blk.{l}.indexer.proj.weight (W_Qs) and blk.{l}.indexer.attn_k.weight
    (W_Ks): the PyTorch Linear weight [d_search, d_model] cast to float16,
    which GGUF stores with ne = {d_model, d_search};
  - keeps the base file's general.alignment; every tensor starts on it.

    merge_like_seed(base_path, {layer: W_Qs}, {layer: W_Ks}, out_path, top_k=128)

dtype (np.float16 by default, as the script) may be np.float32, "bf16" or
"q8_0" (what llama-quantize would make of the matrices) to produce the other
element types subq reads; `transpose` writes the matrices
the wrong way round (the runtime's "bad-shape" file) for the error checks;
`omit` leaves keys out.
"""
import struct

import numpy as np

from gguf_np import GGUFFile, GGUF_UINT32, GGUF_INT32, GGUF_STRING, GGUF_ARRAY

GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key, raw_value):
    """One metadata pair: key + (u32 type + payload)."""
    return _str(key) + raw_value


def _u32(v):
    return struct.pack("<II", GGUF_UINT32, v)


def _string(s):
    return struct.pack("<I", GGUF_STRING) + _str(s)


def _i32_array(vals):
    return struct.pack("<IIQ", GGUF_ARRAY, GGUF_INT32, len(vals)) + b"".join(struct.pack("<i", v) for v in vals)


def _matrix(w, dtype):
    """(ggml type, bytes) of a [d_search, d_model] float matrix."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if dtype == "bf16":  # round to nearest even on the upper 16 bits
        u = w.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return GGML_BF16, u.astype("<u2").tobytes()
    if dtype == np.float32:
        return GGML_F32, w.astype("<f4").tobytes()
    if dtype == "q8_0":  # blocks of 32: f16 scale d = amax / 127, int8 q = round(x / d)
        b = w.reshape(-1, 32)
        d = np.abs(b).max(axis=1) / 127.0
        q = np.round(b / np.where(d > 0, d, 1)[:, None]).astype(np.int8)
        out = bytearray()
        for i in range(b.shape[0]):
            out += d[i:i + 1].astype("<f2").tobytes() + q[i].tobytes()
        return GGML_Q8_0, bytes(out)
    return GGML_F16, w.astype("<f2").tobytes()


def merge_like_seed(base_path, wq, wk, out_path, top_k=128, dtype=np.float16, checkpoint="search_step_1000.pt",
                    config="{'d_search': 8}", transpose=False, omit=()):
    g = GGUFFile(base_path)
    arch = g.metadata["general.architecture"]
    k_heads = "%s.attention.indexer.head_count" % arch
    k_len = "%s.attention.indexer.key_length" % arch
    k_top = "%s.attention.indexer.top_k" % arch
    layers = sorted(wq)
    d_search, d_model = np.asarray(wq[layers[0]]).shape

    kvs = [_kv("general.architecture", g.raw_value("general.architecture"))]
    for key in g.metadata:
        if key in ("general.architecture", k_heads, k_len, k_top) or key.startswith("GGUF."):
            continue
        kvs.append(_kv(key, g.raw_value(key)))
    extra = [(k_heads, _u32(1)), (k_len, _u32(d_search)), (k_top, _u32(top_k)),
             ("ann_sparse.layers", _i32_array(layers)), ("ann_sparse.checkpoint", _string(checkpoint)),
             ("ann_sparse.config", _string(config))]
    kvs += [_kv(k, v) for k, v in extra if k not in omit]

    # (name, ne, type, bytes): the base tensors as they are, then the projections
    tensors = []
    for name in g.tensor_names():
        t = g.tensor_infos[name]
        tensors.append((name, t.ne, t.type, g.raw_bytes(name)))
    for l in layers:
        for name, w in (("blk.%d.indexer.proj.weight" % l, wq[l]), ("blk.%d.indexer.attn_k.weight" % l, wk[l])):
            w = np.asarray(w)
            if transpose:
                w = w.T
            ttype, data = _matrix(w, dtype)
            tensors.append((name, [w.shape[1], w.shape[0]], ttype, data))

    align = g.alignment
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, offset = [], 0
    for name, ne, ttype, data in tensors:
        infos.append(_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", e) for e in ne)
                     + struct.pack("<IQ", ttype, offset))
        offset = (offset + len(data) + align - 1) // align * align
    head += b"".join(infos)
    head += b"\0" * ((-len(head)) % align)
    with open(out_path, "wb") as f:
        f.write(head)
        for _, _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * ((-len(data)) % align))
