"""Independent numpy dequantisation of ggml block formats (test oracle for subq).

Written from the block layouts, vectorised over blocks, in float32 with the
same order of float operations as ggml's reference dequantize_row_* (numpy
never fuses a multiply and an add), so results must match subq bit for bit.
All multi-byte fields are little-endian.

    Q8_0 (8), 34 bytes / 32 values:  d f16 | qs int8[32]
        y[j] = q[j] * d
    Q4_0 (2), 18 bytes / 32 values:  d f16 | qs u8[16]
        y[j] = ((qs[j] & 15) - 8) * d,  y[j+16] = ((qs[j] >> 4) - 8) * d
    Q4_K (12), 144 bytes / 256 values:  d f16 | dmin f16 | scales u8[12] | qs u8[128]
        8 sub-blocks of 32 with 6-bit scale sc[s] and min m[s]:
          s < 4:  sc = scales[s] & 63,  m = scales[s+4] & 63
          s >= 4: sc = (scales[s+4] & 15) | (scales[s-4] >> 6) << 4
                  m  = (scales[s+4] >> 4) | (scales[s]   >> 6) << 4
        chunk c = 0..3 covers values 64c .. 64c+63: the low nibbles of
        qs[32c .. 32c+32) are sub-block 2c, the high nibbles sub-block 2c+1
        y = (d * sc) * q - (dmin * m)
    Q5_K (13), 176 bytes / 256 values:  d | dmin | scales[12] | qh u8[32] | qs u8[128]
        as Q4_K, plus 16 if bit 2c (low nibble) / 2c+1 (high nibble) of qh[l] is set
    Q6_K (14), 210 bytes / 256 values:  ql u8[128] | qh u8[64] | scales i8[16] | d f16
        halves h = 0, 1 of 128 values; within a half, l = 0..31 and k = 0..3:
          value 32k + l = (nibble (k >> 1) of ql[64h + 32(k & 1) + l])
                          | ((qh[32h + l] >> 2k) & 3) << 4,   minus 32
        y = (d * scales[i // 16]) * q   for value i of the block
    F32 (0), F16 (1), BF16 (30): one value per element.
"""

import numpy as np

F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 8, 12, 13, 14, 30

# type id -> (name, values per block, bytes per block)
TYPES = {
    F32: ("f32", 1, 4),
    F16: ("f16", 1, 2),
    BF16: ("bf16", 1, 2),
    Q8_0: ("q8_0", 32, 34),
    Q4_0: ("q4_0", 32, 18),
    Q4_K: ("q4_K", 256, 144),
    Q5_K: ("q5_K", 256, 176),
    Q6_K: ("q6_K", 256, 210),
}
BY_NAME = {v[0]: k for k, v in TYPES.items()}

# offsets of the f16 scale fields inside each block type
F16_FIELDS = {Q8_0: [0], Q4_0: [0], Q4_K: [0, 2], Q5_K: [0, 2], Q6_K: [208]}


def _f16(blocks, off):
    """f16 field at byte `off` of every block -> float32 column (nb, 1); exact."""
    lo = blocks[:, off].astype(np.uint16)
    hi = blocks[:, off + 1].astype(np.uint16)
    return (lo | (hi << 8)).view(np.float16).astype(np.float32)[:, None]


def _k4_scales(sc12):
    """(nb, 12) packed bytes -> (sc, m), each (nb, 8) float32 of 0..63."""
    s = sc12.astype(np.uint8)
    sc = np.empty((s.shape[0], 8), np.uint8)
    m = np.empty((s.shape[0], 8), np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def _q8_0(b):
    d = _f16(b, 0)
    q = b[:, 2:34].view(np.int8).astype(np.float32)
    return q * d


def _q4_0(b):
    d = _f16(b, 0)
    qs = b[:, 2:18]
    q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int16) - 8  # (nb, 32)
    return q.astype(np.float32) * d


def _k_nibbles(qs):
    """(nb, 128) -> (nb, 8, 32) values of sub-blocks 0..7 (chunk c: low, high)."""
    qs = qs.reshape(-1, 4, 32)
    q = np.stack([qs & 15, qs >> 4], axis=2)  # (nb, 4 chunks, 2, 32)
    return q.reshape(-1, 8, 32)


def _k_apply(b, q):
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k4_scales(b[:, 4:16])
    d1 = (d * sc)[:, :, None]  # float32 products, as ggml: d * sc, dmin * m
    m1 = (dmin * m)[:, :, None]
    return (d1 * q.astype(np.float32) - m1).reshape(-1, 256)


def _q4_K(b):
    return _k_apply(b, _k_nibbles(b[:, 16:144]))


def _q5_K(b):
    qh = b[:, 16:48]  # (nb, 32)
    q = _k_nibbles(b[:, 48:176]).astype(np.uint8)
    for s in range(8):  # sub-block s = chunk s // 2, bit s of qh
        q[:, s, :] += ((qh >> s) & 1) << 4
    return _k_apply(b, q)


def _q6_K(b):
    ql, qh = b[:, 0:128], b[:, 128:192]
    sc = b[:, 192:208].view(np.int8).astype(np.float32)  # (nb, 16)
    d = _f16(b, 208)
    out = []
    for h in range(2):
        for k in range(4):
            lo = ql[:, 64 * h + 32 * (k & 1): 64 * h + 32 * (k & 1) + 32]
            lo = (lo >> 4) if k >> 1 else (lo & 15)
            hi = (qh[:, 32 * h: 32 * h + 32] >> (2 * k)) & 3
            out.append((lo | (hi << 4)).astype(np.int16) - 32)
    q = np.concatenate(out, axis=1).astype(np.float32)  # (nb, 256) in value order
    ds = np.repeat(d * sc, 16, axis=1)  # (d * sc) per value, float32
    return ds * q


def dequantize(type_id, raw, n=None):
    """raw bytes of whole blocks of `type_id` (an id or a name) -> float32 array
    of n values (default: everything in raw)."""
    if isinstance(type_id, str):
        type_id = BY_NAME[type_id]
    name, bs, ts = TYPES[type_id]
    buf = np.frombuffer(raw, np.uint8)
    if len(buf) % ts:
        raise ValueError(f"{len(buf)} bytes is not a whole number of {name} blocks")
    if type_id == F32:
        y = buf.view("<f4").astype(np.float32)
    elif type_id == F16:
        y = buf.view("<f2").astype(np.float32)
    elif type_id == BF16:
        y = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        b = buf.reshape(-1, ts)
        y = {Q8_0: _q8_0, Q4_0: _q4_0, Q4_K: _q4_K, Q5_K: _q5_K, Q6_K: _q6_K}[type_id](b).reshape(-1)
    y = np.ascontiguousarray(y, dtype=np.float32)
    return y if n is None else y[:n]
