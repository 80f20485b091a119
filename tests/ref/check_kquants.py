#!/usr/bin/python3
"""subq dequant against the numpy block decoders in kquant_np.py, bit for bit.

For each type: random blocks (every bit pattern of quants and packed scales;
the f16 scale fields overwritten with random finite halves, subnormals
included), a fixed seed, dequantised by `subq dequant` with the best kernels
for this CPU and with --scalar; the float32 outputs must equal numpy's exactly
(bitwise; NaN-aware only for f16/bf16, whose random values include NaNs).
Also: a file that is not a whole number of blocks must give one error line
and exit status 1. A missing numpy or binary is a failure, not a skip."""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("FAIL: numpy is not installed (install python3-numpy)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kquant_np as kq  # noqa: E402

BIN = os.environ.get("SUBQ_BIN")
TMP = os.environ.get("SUBQ_TMP", "/tmp")
if not BIN or not os.path.exists(BIN):
    sys.exit(f"FAIL: subq binary not found (SUBQ_BIN={BIN!r})")
os.makedirs(TMP, exist_ok=True)

rng = np.random.default_rng(20240611)
failures = []


def random_finite_f16(n):
    h = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    bad = (h & 0x7C00) == 0x7C00  # inf / NaN: clear one exponent bit
    h[bad] &= np.uint16(0xFBFF)
    return h


def make_blocks(type_id, nb):
    name, bs, ts = kq.TYPES[type_id]
    b = rng.integers(0, 256, (nb, ts), dtype=np.uint16).astype(np.uint8)
    for off in kq.F16_FIELDS.get(type_id, []):
        h = random_finite_f16(nb)
        b[:, off] = (h & 0xFF).astype(np.uint8)
        b[:, off + 1] = (h >> 8).astype(np.uint8)
    # a few blocks with all-zero / extreme quants and the largest scales
    if type_id in kq.F16_FIELDS and nb > 8:
        b[1, :] = 0
        b[2, :] = 0xFF
        for off in kq.F16_FIELDS[type_id]:
            b[2, off], b[2, off + 1] = 0xFF, 0x7B  # 65504
            b[3, off], b[3, off + 1] = 0x01, 0x00  # smallest subnormal
    return b.tobytes()


def run(args):
    return subprocess.run([BIN, "dequant"] + args, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


cases = [(kq.Q4_0, 4000), (kq.Q8_0, 4000), (kq.Q4_K, 1500), (kq.Q5_K, 1500), (kq.Q6_K, 1500),
         (kq.F16, 20000), (kq.BF16, 20000)]
for type_id, nb in cases:
    name, bs, ts = kq.TYPES[type_id]
    raw = make_blocks(type_id, nb)
    src = os.path.join(TMP, f"kq_{name}.bin")
    with open(src, "wb") as f:
        f.write(raw)
    want = kq.dequantize(type_id, raw)
    assert want.size == nb * bs
    for extra in ([], ["--scalar"]):
        dst = os.path.join(TMP, f"kq_{name}{'_scalar' if extra else ''}.f32")
        p = run(["--type", name, "-i", src, "-o", dst, "--force"] + extra)
        label = f"{name}{' --scalar' if extra else ''}"
        if p.returncode != 0:
            failures.append(f"{label}: exit {p.returncode}: {p.stderr.decode(errors='replace')[:300]}")
            continue
        got = np.fromfile(dst, "<f4")
        if got.size != want.size:
            failures.append(f"{label}: {got.size} values, want {want.size}")
            continue
        gb, wb = got.view(np.uint32), want.view(np.uint32)
        diff = gb != wb
        if type_id in (kq.F16, kq.BF16):
            diff &= ~(np.isnan(got) & np.isnan(want))
        elif np.isnan(want).any() or np.isinf(want).any():
            failures.append(f"{label}: reference has non-finite values; finite scales were meant to prevent that")
        if diff.any():
            i = int(np.flatnonzero(diff)[0])
            failures.append(f"{label}: {int(diff.sum())} of {want.size} values differ; first at {i} "
                            f"(block {i // bs}): got {got[i]!r} want {want[i]!r}")
        else:
            print(f"ok {label}: {want.size} values bit-exact")

# a truncated blocks file: one line on stderr, exit status 1, nothing on stdout
for type_id in (kq.Q4_K, kq.Q8_0):
    name, bs, ts = kq.TYPES[type_id]
    src = os.path.join(TMP, f"kq_bad_{name}.bin")
    with open(src, "wb") as f:
        f.write(make_blocks(type_id, 3)[:-1])
    p = run(["--type", name, "-i", src, "-o", os.path.join(TMP, "kq_bad.f32")])
    lines = [l for l in p.stderr.decode(errors="replace").split("\n") if l]
    if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith("subq dequant: error:") or p.stdout:
        failures.append(f"truncated {name}: want exit 1 and one error line, got {p.returncode}, {lines!r}")
    else:
        print(f"ok truncated {name}: {lines[0]}")

none = os.path.join(TMP, "kq_none.f32")  # never written: each case fails first
for args, what in ((["--type", "q2_K", "-i", src, "-o", none], "unsupported type"),
                   (["--type", "nope", "-i", src, "-o", none], "unknown type"),
                   (["--type", "q8_0"], "missing files")):
    p = run(args)
    lines = [l for l in p.stderr.decode(errors="replace").split("\n") if l]
    if p.returncode != 1 or len(lines) != 1:
        failures.append(f"{what}: want exit 1 and one error line, got {p.returncode}, {lines!r}")

p = run(["--help"])
if p.returncode != 0 or b"dequantise raw blocks of a ggml type to float32, for testing" not in p.stdout.lower():
    failures.append("dequant --help does not describe the command")

for f in failures:
    print("FAIL", f)
print(f"{len(cases) * 2 + 7 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
