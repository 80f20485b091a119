"""Independent numpy reader for GGUF v2/v3 files (test oracle for subq).

File layout (all little-endian):

    magic  "GGUF"            4 bytes
    version                  u32   (2 or 3 accepted)
    n_tensors                u64
    n_kv                     u64
    n_kv x  { key: string, value_type: u32, value }
    n_tensors x { name: string, n_dims: u32, ne: u64[n_dims], ggml_type: u32, offset: u64 }
    zero padding up to a multiple of `general.alignment` (default 32)
    tensor data; each tensor's `offset` is relative to the start of this section

    string = u64 byte length + UTF-8 bytes (no terminator)
    array  = u32 element type + u64 count + count elements (elements may be
             strings or, recursively, arrays)

Tensors: ne[0] is the contiguous dimension, so a tensor with ne = [a, b, c]
is a row-major numpy array of shape (c, b, a).

Supported tensor types (everything else raises UnsupportedTensorType):
    F32  (0)  : 4-byte IEEE float
    F16  (1)  : 2-byte IEEE half
    Q8_0 (8)  : blocks of 32 values = f16 scale d + 32 x int8 q;  x = d * q
    BF16 (30) : upper 16 bits of an IEEE float32

Usage:
    g = GGUFFile(path)
    g.metadata["general.architecture"]   -> "llama"
    g.tensor("token_embd.weight")        -> float32 ndarray
"""

import struct

import numpy as np

# ---- metadata value types -----------------------------------------------
GGUF_UINT8 = 0
GGUF_INT8 = 1
GGUF_UINT16 = 2
GGUF_INT16 = 3
GGUF_UINT32 = 4
GGUF_INT32 = 5
GGUF_FLOAT32 = 6
GGUF_BOOL = 7
GGUF_STRING = 8
GGUF_ARRAY = 9
GGUF_UINT64 = 10
GGUF_INT64 = 11
GGUF_FLOAT64 = 12

# scalar value type -> (struct format, byte size)
_SCALAR_FORMATS = {
    GGUF_UINT8: ("<B", 1),
    GGUF_INT8: ("<b", 1),
    GGUF_UINT16: ("<H", 2),
    GGUF_INT16: ("<h", 2),
    GGUF_UINT32: ("<I", 4),
    GGUF_INT32: ("<i", 4),
    GGUF_FLOAT32: ("<f", 4),
    GGUF_BOOL: ("<?", 1),
    GGUF_UINT64: ("<Q", 8),
    GGUF_INT64: ("<q", 8),
    GGUF_FLOAT64: ("<d", 8),
}

# scalar value type -> numpy dtype, for fast bulk reading of arrays
_SCALAR_DTYPES = {
    GGUF_UINT8: np.dtype("<u1"),
    GGUF_INT8: np.dtype("<i1"),
    GGUF_UINT16: np.dtype("<u2"),
    GGUF_INT16: np.dtype("<i2"),
    GGUF_UINT32: np.dtype("<u4"),
    GGUF_INT32: np.dtype("<i4"),
    GGUF_FLOAT32: np.dtype("<f4"),
    GGUF_BOOL: np.dtype("?"),
    GGUF_UINT64: np.dtype("<u8"),
    GGUF_INT64: np.dtype("<i8"),
    GGUF_FLOAT64: np.dtype("<f8"),
}

# ---- tensor (ggml) types ------------------------------------------------
GGML_F32 = 0
GGML_F16 = 1
GGML_Q8_0 = 8
GGML_I8 = 24
GGML_BF16 = 30

GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
    9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
    15: "Q8_K", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 30: "BF16",
}

QK8_0 = 32                 # values per Q8_0 block
Q8_0_BLOCK_BYTES = 2 + 32  # f16 scale + 32 int8

DEFAULT_ALIGNMENT = 32


class GGUFError(Exception):
    """Malformed or truncated GGUF file."""


# Q4_0 and K-quant blocks (elements, bytes); dequantised by kquant_np.py,
# an independent numpy implementation of ggml's block layouts.
BLOCK_FORMATS = {2: (32, 18), 12: (256, 144), 13: (256, 176), 14: (256, 210)}


class UnsupportedTensorType(Exception):
    """The tensor is stored in a ggml type this oracle does not dequantise."""


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = list(ne)          # ne[0] = contiguous dimension
        self.type = ggml_type
        self.offset = offset        # relative to the data section
        n = 1
        for e in ne:
            n *= e
        self.n_elements = n

    @property
    def shape(self):
        """numpy shape: (ne[n-1], ..., ne[0])."""
        return tuple(reversed(self.ne))

    def n_bytes(self):
        if self.type == GGML_F32:
            return 4 * self.n_elements
        if self.type in (GGML_F16, GGML_BF16):
            return 2 * self.n_elements
        if self.type == GGML_I8:  # raw bytes (a session's saved index)
            return self.n_elements
        if self.type == GGML_Q8_0:
            return (self.n_elements // QK8_0) * Q8_0_BLOCK_BYTES
        if self.type in BLOCK_FORMATS:   # Q4_0 and the K-quants (tests/ref/kquant_np.py)
            bs, ts = BLOCK_FORMATS[self.type]
            return (self.n_elements // bs) * ts
        return None

    def __repr__(self):
        tname = GGML_TYPE_NAMES.get(self.type, str(self.type))
        return "TensorInfo(%r, ne=%r, type=%s, offset=%d)" % (self.name, self.ne, tname, self.offset)


class _Cursor:
    """Sequential little-endian reader over a bytes object, bounds-checked."""

    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("%s: truncated at byte %d while reading %s (need %d bytes, file has %d)"
                            % (self.path, self.pos, what, n, len(self.buf)))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, vtype, what):
        fmt, size = _SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self.take(size, what))[0]

    def u32(self, what):
        return self.scalar(GGUF_UINT32, what)

    def u64(self, what):
        return self.scalar(GGUF_UINT64, what)

    def string(self, what):
        n = self.u64(what + " length")
        raw = self.take(n, what)
        return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype, what, depth=0):
        if vtype in _SCALAR_FORMATS:
            return self.scalar(vtype, what)
        if vtype == GGUF_STRING:
            return self.string(what)
        if vtype == GGUF_ARRAY:
            if depth > 8:
                raise GGUFError("%s: arrays nested too deeply in %s" % (self.path, what))
            etype = self.u32(what + " element type")
            count = self.u64(what + " element count")
            if etype in _SCALAR_DTYPES:
                # fixed-size elements: one bulk read
                dt = _SCALAR_DTYPES[etype]
                raw = self.take(count * dt.itemsize, what + " elements")
                arr = np.frombuffer(raw, dtype=dt, count=count)
                return [x.item() for x in arr]
            if etype == GGUF_STRING or etype == GGUF_ARRAY:
                # variable-size elements: read one after the other
                if count > len(self.buf):  # every element takes at least 1 byte
                    raise GGUFError("%s: absurd element count %d in %s" % (self.path, count, what))
                return [self.value(etype, "%s[%d]" % (what, i), depth + 1) for i in range(count)]
            raise GGUFError("%s: unknown array element type %d in %s" % (self.path, etype, what))
        raise GGUFError("%s: unknown value type %d in %s" % (self.path, vtype, what))


class GGUFFile:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.buf = f.read()
        cur = _Cursor(self.buf, path)

        magic = cur.take(4, "magic")
        if magic != b"GGUF":
            raise GGUFError("%s: bad magic %r (not a GGUF file)" % (path, magic))
        self.version = cur.u32("version")
        if self.version not in (2, 3):
            raise GGUFError("%s: unsupported GGUF version %d (need 2 or 3)" % (path, self.version))
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")

        # ---- metadata
        self.metadata = {}
        self.metadata_types = {}
        self._raw_values = {}
        for i in range(n_kv):
            key = cur.string("key %d" % i)
            start = cur.pos
            vtype = cur.u32("type of key %r" % key)
            self.metadata[key] = cur.value(vtype, "value of key %r" % key)
            self.metadata_types[key] = vtype
            self._raw_values[key] = self.buf[start:cur.pos]

        # ---- tensor infos
        self.tensor_infos = {}
        self.tensor_order = []
        for i in range(n_tensors):
            name = cur.string("tensor %d name" % i)
            n_dims = cur.u32("tensor %r n_dims" % name)
            if n_dims < 1 or n_dims > 4:
                raise GGUFError("%s: tensor %r has %d dims" % (path, name, n_dims))
            ne = [cur.u64("tensor %r ne[%d]" % (name, d)) for d in range(n_dims)]
            ttype = cur.u32("tensor %r type" % name)
            off = cur.u64("tensor %r offset" % name)
            if name in self.tensor_infos:
                raise GGUFError("%s: duplicate tensor name %r" % (path, name))
            self.tensor_infos[name] = TensorInfo(name, ne, ttype, off)
            self.tensor_order.append(name)

        # ---- data section: header end rounded up to the alignment
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or (align & (align - 1)) != 0:
            raise GGUFError("%s: bad general.alignment %r" % (path, align))
        self.alignment = align
        self.data_offset = (cur.pos + align - 1) // align * align
        if self.data_offset > len(self.buf):
            raise GGUFError("%s: truncated before the data section" % path)

        # bounds-check every tensor with a known size
        for t in self.tensor_infos.values():
            nb = t.n_bytes()
            if nb is None:
                continue
            start = self.data_offset + t.offset
            if start + nb > len(self.buf):
                raise GGUFError("%s: tensor %r data [%d, %d) past end of file (%d bytes)"
                                % (path, t.name, start, start + nb, len(self.buf)))

    # ---- convenience -------------------------------------------------------
    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def raw_value(self, key):
        """The encoded value of a metadata key (u32 type + payload), for
        copying it into another file unchanged."""
        return self._raw_values[key]

    def has_tensor(self, name):
        return name in self.tensor_infos

    def tensor_names(self):
        return list(self.tensor_order)

    def raw_bytes(self, name):
        t = self.tensor_infos[name]
        nb = t.n_bytes()
        if nb is None:
            raise UnsupportedTensorType("tensor %r: ggml type %s (%d) is not supported by gguf_np "
                                        "(only F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"
                                        % (name, GGML_TYPE_NAMES.get(t.type, "?"), t.type))
        start = self.data_offset + t.offset
        return self.buf[start:start + nb]

    def tensor(self, name):
        """Dequantised float32 array of shape (ne[n-1], ..., ne[0])."""
        if name not in self.tensor_infos:
            raise KeyError("%s: no tensor named %r" % (self.path, name))
        t = self.tensor_infos[name]
        n = t.n_elements
        if t.type == GGML_F32:
            flat = np.frombuffer(self.raw_bytes(name), dtype="<f4", count=n).astype(np.float32)
        elif t.type == GGML_F16:
            flat = np.frombuffer(self.raw_bytes(name), dtype="<f2", count=n).astype(np.float32)
        elif t.type == GGML_BF16:
            # bf16 = the top 16 bits of a float32: shift into place and reinterpret
            b = np.frombuffer(self.raw_bytes(name), dtype="<u2", count=n).astype(np.uint32)
            flat = (b << 16).view(np.float32)
        elif t.type == GGML_Q8_0:
            if t.ne[0] % QK8_0 != 0:
                raise GGUFError("%s: Q8_0 tensor %r has row length %d, not a multiple of %d"
                                % (self.path, name, t.ne[0], QK8_0))
            nblocks = n // QK8_0
            blocks = np.frombuffer(self.raw_bytes(name), dtype=np.uint8,
                                   count=nblocks * Q8_0_BLOCK_BYTES).reshape(nblocks, Q8_0_BLOCK_BYTES)
            # bytes 0..1: fp16 scale d; bytes 2..33: int8 quants q;  x = d * q
            d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)      # (nblocks, 1)
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)    # (nblocks, 32)
            flat = (d * q).reshape(n)
        elif t.type in BLOCK_FORMATS:
            import kquant_np
            if t.ne[0] % BLOCK_FORMATS[t.type][0] != 0:
                raise GGUFError("%s: tensor %r has row length %d, not a multiple of its block"
                                % (self.path, name, t.ne[0]))
            flat = kquant_np.dequantize(t.type, self.raw_bytes(name), n)
        else:
            raise UnsupportedTensorType("tensor %r: ggml type %s (%d) is not supported by gguf_np "
                                        "(only F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"
                                        % (name, GGML_TYPE_NAMES.get(t.type, "?"), t.type))
        return flat.reshape(t.shape)


def _main():
    import sys
    if len(sys.argv) != 2:
        print("usage: gguf_np.py FILE.gguf", file=sys.stderr)
        sys.exit(2)
    g = GGUFFile(sys.argv[1])
    print("GGUF v%d, %d kv, %d tensors, alignment %d, data at %d"
          % (g.version, len(g.metadata), len(g.tensor_infos), g.alignment, g.data_offset))
    for k, v in g.metadata.items():
        if isinstance(v, list):
            print("  %s = [%d items] %r..." % (k, len(v), v[:5]))
        else:
            print("  %s = %r" % (k, v))
    for name in g.tensor_order:
        print("  ", g.tensor_infos[name])


if __name__ == "__main__":
    _main()
