"""Rewrite a GGUF file with some metadata replaced or tensor bytes patched,
for the hostile-input checks (independent of subq's reader and writer).

    g = GGUFEdit(open(path, "rb").read())
    g.set("tokenizer.ggml.tokens", "arr_str", [b"a", b"b"])
    g.patch_tensor("output_norm.weight", raw_bytes)   # same size
    g.write(out_path, alignment=None)                 # None: keep the file's

Unchanged pairs are copied byte for byte; tensor data keeps its offsets and
only the padding before the data section is recomputed.
"""
import struct

_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_SCALAR = {"u32": (4, "<I"), "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<B"), "u64": (10, "<Q")}
_ARRAY = {"arr_i32": (5, "<i"), "arr_f32": (6, "<f")}


def _str(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def encode(kind, value):
    """Type id + encoded value of a kv ('str', 'u32', ..., 'arr_str', 'arr_i32', 'arr_f32')."""
    if kind == "str":
        return struct.pack("<I", 8) + _str(value)
    if kind in _SCALAR:
        t, fmt = _SCALAR[kind]
        return struct.pack("<I", t) + struct.pack(fmt, value)
    if kind == "arr_str":
        return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_str(s) for s in value)
    if kind in _ARRAY:
        t, fmt = _ARRAY[kind]
        return struct.pack("<IIQ", 9, t, len(value)) + b"".join(struct.pack(fmt, v) for v in value)
    raise ValueError(kind)


class GGUFEdit:
    def __init__(self, blob):
        self.blob = blob
        assert blob[:4] == b"GGUF"
        self.version, n_t, n_kv = struct.unpack_from("<IQQ", blob, 4)
        o = 24
        self.kvs = []  # [key bytes, raw type+value bytes]
        for _ in range(n_kv):
            n = struct.unpack_from("<Q", blob, o)[0]
            key = blob[o + 8:o + 8 + n]
            o += 8 + n
            start = o
            o = self._skip(o + 4, struct.unpack_from("<I", blob, o)[0])
            self.kvs.append([key, blob[start:o]])
        self.tensors = []  # [name, raw info bytes, offset, n_bytes (filled below)]
        for _ in range(n_t):
            start = o
            n = struct.unpack_from("<Q", blob, o)[0]
            name = blob[o + 8:o + 8 + n].decode()
            o += 8 + n
            nd = struct.unpack_from("<I", blob, o)[0]
            o += 4 + 8 * nd + 4
            off = struct.unpack_from("<Q", blob, o)[0]
            o += 8
            self.tensors.append([name, blob[start:o], off])
        self.alignment = 32
        for key, raw in self.kvs:
            if key == b"general.alignment":
                self.alignment = struct.unpack_from("<I", raw, 4)[0]
        self.data_offset = (o + self.alignment - 1) // self.alignment * self.alignment
        self.data = bytearray(blob[self.data_offset:])
        offs = sorted(t[2] for t in self.tensors) + [len(self.data)]
        for t in self.tensors:
            t.append(offs[offs.index(t[2]) + 1] - t[2])  # up to the next tensor (padding included)

    def _skip(self, o, t):
        if t == 8:
            return o + 8 + struct.unpack_from("<Q", self.blob, o)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", self.blob, o)
            o += 12
            if et in _SIZES:
                return o + n * _SIZES[et]
            for _ in range(n):
                o = self._skip(o, et)
            return o
        return o + _SIZES[t]

    def get_raw(self, key):
        for k, raw in self.kvs:
            if k == key.encode():
                return raw
        return None

    def strings(self, key):
        """The byte strings of a string-array kv."""
        raw = self.get_raw(key)
        et, n = struct.unpack_from("<IQ", raw, 4)
        assert et == 8
        o, out = 16, []
        for _ in range(n):
            m = struct.unpack_from("<Q", raw, o)[0]
            out.append(raw[o + 8:o + 8 + m])
            o += 8 + m
        return out

    def set(self, key, kind, value):
        raw = encode(kind, value)
        for kv in self.kvs:
            if kv[0] == key.encode():
                kv[1] = raw
                return
        self.kvs.append([key.encode(), raw])

    def set_raw(self, key, raw):
        for kv in self.kvs:
            if kv[0] == key.encode():
                kv[1] = raw
                return
        self.kvs.append([key.encode(), raw])

    def patch_tensor(self, name, raw, at=0):
        for t in self.tensors:
            if t[0] == name:
                assert at + len(raw) <= t[3]
                self.data[t[2] + at:t[2] + at + len(raw)] = raw
                return
        raise KeyError(name)

    def tensor_type(self, name):
        for t in self.tensors:
            if t[0] == name:
                return struct.unpack_from("<I", t[1], len(t[1]) - 12)[0]
        raise KeyError(name)

    def write(self, path):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kvs)))
        for key, raw in self.kvs:
            out += _str(key) + raw
        for t in self.tensors:
            out += t[1]
        out += b"\0" * ((-len(out)) % self.alignment)
        out += self.data
        with open(path, "wb") as f:
            f.write(out)
        return path
