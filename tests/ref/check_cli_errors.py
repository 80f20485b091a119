#!/usr/bin/python3
"""Bad input through the CLI: every case must exit with status 1 (not a
signal, not a hang) and print exactly one line on stderr that starts with
"subq". Covers truncated and corrupted GGUF files, wrong shapes, empty and
non-UTF-8 text, contexts larger than memory, and bad options."""
import os
import struct
import subprocess
import sys

BIN = os.environ.get("SUBQ_BIN")
SHARED = os.environ.get("SUBQ_SHARED")
TMP = os.environ.get("SUBQ_TMP", "/tmp")
if not BIN or not os.path.exists(BIN):
    sys.exit(f"FAIL: subq binary not found (SUBQ_BIN={BIN!r})")
MODEL = os.path.join(SHARED or "", "models/stories260K.gguf")
if not os.path.exists(MODEL):
    sys.exit(f"FAIL: {MODEL} not found (set SUBQ_SHARED)")
os.makedirs(TMP, exist_ok=True)

failures = []
n_cases = 0


def expect_error(name, args, want_code=1, contains=None):
    global n_cases
    n_cases += 1
    try:
        p = subprocess.run([BIN] + args, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        failures.append(f"{name}: hung (timeout)")
        return
    err = p.stderr.decode("utf-8", "replace")
    lines = [l for l in err.split("\n") if l]
    if p.returncode != want_code:
        failures.append(f"{name}: exit status {p.returncode}, want {want_code}; stderr: {err[:300]!r}")
    elif len(lines) != 1 or not lines[0].startswith("subq"):
        failures.append(f"{name}: want one 'subq ...' line on stderr, got {err[:300]!r}")
    elif contains and contains not in lines[0]:
        failures.append(f"{name}: message {lines[0]!r} lacks {contains!r}")


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


blob = open(MODEL, "rb").read()

# --- parse the header just enough to find fields to corrupt -------------
def header_layout(b):
    o = 24
    def rstr(o):
        n = struct.unpack_from("<Q", b, o)[0]
        return o + 8 + n
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def rval(o, t):
        if t == 8:
            return rstr(o)
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            for _ in range(n):
                o = rval(o, et)
            return o
        return o + sizes[t]
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    for _ in range(n_kv):
        o = rstr(o)
        t = struct.unpack_from("<I", b, o)[0]
        o = rval(o + 4, t)
    tensors = []
    for _ in range(n_t):
        name_off = o
        o = rstr(o)
        nd = struct.unpack_from("<I", b, o)[0]
        tensors.append({"name_off": name_off, "ndims_off": o, "ne_off": o + 4, "type_off": o + 4 + 8 * nd,
                        "offset_off": o + 8 + 8 * nd})
        o += 4 + 8 * nd + 4 + 8
    return tensors, o


tensors, header_end = header_layout(blob)


def patched(off, fmt, value):
    b = bytearray(blob)
    struct.pack_into(fmt, b, off, value)
    return bytes(b)


# truncations: the whole header region in steps, and around the data section
lengths = sorted(set(list(range(0, 64)) + list(range(64, header_end + 64, 211)) +
                     [len(blob) - 1, len(blob) - 4096, len(blob) // 2]))
for n in lengths:
    p = write("trunc.gguf", blob[:n])
    expect_error(f"info on truncation {n}", ["info", "-m", p])
for n in lengths[::7]:
    p = write("trunc.gguf", blob[:n])
    expect_error(f"generate on truncation {n}", ["generate", "-m", p, "-n", "4"])

t5 = tensors[5]  # blk.0.attn_v.weight
corruptions = {
    "bad magic": patched(0, "<4s", b"GGUX"),
    "version 1": patched(4, "<I", 1),
    "version 99": patched(4, "<I", 99),
    "n_tensors huge": patched(8, "<Q", 1 << 62),
    "n_kv huge": patched(16, "<Q", 1 << 40),
    "n_tensors +1": patched(8, "<Q", len(tensors) + 1),
    "tensor n_dims 7": patched(t5["ndims_off"], "<I", 7),
    "tensor dim 0": patched(t5["ne_off"], "<Q", 0),
    "tensor dim huge": patched(t5["ne_off"], "<Q", 1 << 62),
    "tensor type 99": patched(t5["type_off"], "<I", 99),
    "tensor offset past EOF": patched(t5["offset_off"], "<Q", 1 << 40),
    "tensor offset misaligned": patched(t5["offset_off"], "<Q", 3),
    "wrong shape (dim 64->32)": patched(t5["ne_off"], "<Q", 32),
    "unsupported type q4_K": patched(t5["type_off"], "<I", 12),
}
for name, data in corruptions.items():
    p = write("corrupt.gguf", data)
    expect_error(f"generate on {name}", ["generate", "-m", p, "-n", "4"])

# text inputs
empty = write("empty.txt", b"")
bad_utf8 = write("bad.txt", b"hello \xff\xfe world" * 100)
short = write("short.txt", b"Once upon a time.")
expect_error("perplexity on empty text", ["perplexity", "-m", MODEL, "-f", empty], contains="empty")
expect_error("perplexity on non-UTF-8 text", ["perplexity", "-m", MODEL, "-f", bad_utf8], contains="UTF-8")
expect_error("perplexity on too-short text", ["perplexity", "-m", MODEL, "-f", short, "-c", "512"])
expect_error("perplexity on missing file", ["perplexity", "-m", MODEL, "-f", os.path.join(TMP, "nope.txt")])
expect_error("tokenize non-UTF-8", ["tokenize", "-m", MODEL, "-f", bad_utf8])
expect_error("context larger than memory", ["generate", "-m", MODEL, "-c", "1000000000", "-n", "4"],
             contains="available")


def kv_bytes(n_layer, n_head_kv, head_dim, n_ctx, elem):
    """K and V rows for every layer, KV head and slot, plus two int32 per
    slot (position, segment id)."""
    return 2 * n_layer * n_head_kv * n_ctx * head_dim * elem + 2 * n_ctx * 4


# -c too large fails before allocating, with the bytes needed and available:
# stories260K (5 layers, 4 KV heads of 8) and smollm2-135m's shape (30 layers, 3 KV heads of 64)
big = os.path.join(TMP, "cli_errors_smollm2.gguf")
p = subprocess.run([BIN, "synth", "--shape", "smollm2-135m", "--type", "q4_0", "-o", big], capture_output=True,
                   timeout=300)
n_cases += 1
if p.returncode != 0:
    failures.append(f"synth smollm2-135m: exit {p.returncode}, stderr {p.stderr[-300:]!r}")
for name, path, dims, kv in (("stories260K", MODEL, (5, 4, 8), ["--kv", "f32"]),
                             ("smollm2-135m shape", big, (30, 3, 64), ["--kv", "f32"]),
                             ("smollm2-135m shape, f16 KV", big, (30, 3, 64), ["--kv", "f16"])):
    elem = 2 if kv[-1] == "f16" else 4
    need = kv_bytes(*dims, 100000000, elem)
    for sub, extra in (("generate", ["-n", "4"]), ("logits", ["--tokens", "1 2", "-o", os.path.join(TMP, "l.bin")])):
        args = [sub, "-m", path, "-c", "100000000"] + kv + extra
        expect_error(f"{sub} -c 100000000 on {name}", args, contains=f"needs {need} bytes")
        expect_error(f"{sub} -c 100000000 on {name} says what is available", args, contains="are available")
if os.path.exists(big):
    os.remove(big)
expect_error("missing model", ["generate", "-m", os.path.join(TMP, "nope.gguf")])
expect_error("no model", ["generate", "-p", "hi"])
expect_error("unknown option", ["generate", "-m", MODEL, "--bogus"])
expect_error("missing value", ["generate", "-m", MODEL, "-n"])
expect_error("bad number", ["generate", "-m", MODEL, "-n", "12x"])
expect_error("unknown command", ["frobnicate"])
expect_error("synth unknown shape", ["synth", "--shape", "nope", "-o", os.path.join(TMP, "x.gguf")])
expect_error("synth unknown type", ["synth", "--shape", "tiny", "--type", "q9", "-o", os.path.join(TMP, "x.gguf")])
expect_error("logits token out of range", ["logits", "-m", MODEL, "--tokens", "1 999", "-o", os.path.join(TMP, "l.bin")])
# completion maps (--complete): wrong kind of file, missing file, flags without a file
expect_error("complete with a model file", ["generate", "-m", MODEL, "--select", "oracle", "--complete", MODEL],
             contains="not a completion map file")
expect_error("complete missing file", ["generate", "-m", MODEL, "--select", "oracle", "--complete",
                                       os.path.join(TMP, "no_such_phi.gguf")])
expect_error("complete-heads without complete", ["generate", "-m", MODEL, "--select", "oracle",
                                                 "--complete-heads", "entropy>=0.5"], contains="--complete FILE")
expect_error("eval budget without complete", ["eval", "-m", MODEL, "--eval-file", os.path.join(SHARED, "data/text"),
                                              "--budget", "5%"], contains="--complete")
expect_error("bench with completion", ["bench", "-m", MODEL, "--complete", MODEL], contains="not supported")
expect_error("eval bad budget", ["eval", "-m", MODEL, "-f", MODEL, "--budget", "5%,x"])
expect_error("eval bad compare", ["eval", "-m", MODEL, "-f", MODEL, "--compare", "exact@8"], contains="--compare")

# a full context stops generation cleanly (exit 0, text printed)
p = subprocess.run([BIN, "generate", "-m", MODEL, "-c", "16", "-n", "100", "--temp", "0"], capture_output=True,
                   timeout=60)
n_cases += 1
if p.returncode != 0 or not p.stdout.strip():
    failures.append(f"generate with a full context: exit {p.returncode}, stderr {p.stderr[:200]!r}")

# every subcommand has --help
for sub in ["info", "generate", "perplexity", "tokenize", "logits", "synth"]:
    n_cases += 1
    p = subprocess.run([BIN, sub, "--help"], capture_output=True, timeout=30)
    if p.returncode != 0 or b"usage:" not in p.stdout:
        failures.append(f"{sub} --help: exit {p.returncode}")

for f in failures:
    print("FAIL", f)
print(f"cli errors: {n_cases - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
