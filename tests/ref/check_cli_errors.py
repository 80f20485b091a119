#!/usr/bin/python3
"""Bad input through the CLI: every case must exit with status 1 (not a
signal, not a hang) and print exactly one line on stderr that starts with
"subq". Covers truncated and corrupted GGUF files, wrong shapes, empty and
non-UTF-8 text, contexts larger than memory, bad options, FIFOs (every file
argument of every command, inputs and outputs: none may wait for a writer or
a reader), alignments below the GGUF spec's, non-finite perplexity and
completion-map error paths.

With SUBQ_SANITIZED=1 (the ASan+UBSan build runs this too) the binary runs
with leak detection and sanitizer exit codes other than 1, so an over-read,
a leak on an error path or undefined behaviour fails the case."""
import json
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_edit import GGUFEdit  # noqa: E402
from refcommon import subq_env  # noqa: E402

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

ENV = subq_env()


def run_case(args, timeout=60, env=None):
    """The finished process, or None when it ran past timeout (killed)."""
    try:
        return subprocess.run([BIN] + args, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=env or ENV)
    except subprocess.TimeoutExpired:
        return None


def expect_error(name, args, want_code=1, contains=None, timeout=60, no_stdout=False):
    judge(name, run_case(args, timeout), want_code, contains, no_stdout)


def judge(name, p, want_code=1, contains=None, no_stdout=False):
    global n_cases
    n_cases += 1
    if p is None:
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
    elif no_stdout and p.stdout:
        failures.append(f"{name}: printed {len(p.stdout)} bytes on stdout before the error")


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

# bytes of a damaged name or string are escaped in the message (\xNN), never
# echoed raw: stderr stays printable UTF-8 (a crafted file cannot drive the
# terminal). Tensor 5's name with control and non-UTF-8 bytes and its data
# past the end; the architecture string with the same bytes.
DAMAGE = b"\x01\x1b\x80\xff\xc3(\x07\x7f"
ESCAPED = "\\x01\\x1b\\x80\\xff\\xc3(\\x07\\x7f"
bad_name = bytearray(patched(t5["offset_off"], "<Q", 1 << 40))
bad_name[t5["name_off"] + 8:t5["name_off"] + 8 + len(DAMAGE)] = DAMAGE
bad_arch = GGUFEdit(blob)
bad_arch.set("general.architecture", "str", b"llama" + DAMAGE)
for name, data, want in (("a damaged tensor name", bytes(bad_name), "('" + ESCAPED + "tn_v.weight')"),
                         ("a damaged architecture", None, "llama" + ESCAPED)):
    path = bad_arch.write(os.path.join(TMP, "escape.gguf")) if data is None else write("escape.gguf", data)
    p = run_case(["generate", "-m", path, "-n", "4"])
    judge(name, p)
    if p is None:
        continue
    n_cases += 1
    try:
        text = p.stderr.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or any(c < 0x20 and c != 0x0a or c == 0x7f for c in p.stderr) or want not in text:
        failures.append(f"{name}: stderr {p.stderr[:300]!r} is not printable UTF-8 showing {want!r}")

# text inputs
empty = write("empty.txt", b"")
bad_utf8 = write("bad.txt", b"hello \xff\xfe world" * 100)
short = write("short.txt", b"Once upon a time.")
expect_error("perplexity on empty text", ["perplexity", "-m", MODEL, "-f", empty], contains="empty")
expect_error("perplexity on non-UTF-8 text", ["perplexity", "-m", MODEL, "-f", bad_utf8], contains="UTF-8")
expect_error("perplexity on too-short text", ["perplexity", "-m", MODEL, "-f", short, "-c", "512"])
expect_error("perplexity on missing file", ["perplexity", "-m", MODEL, "-f", os.path.join(TMP, "nope.txt")])
expect_error("tokenize non-UTF-8", ["tokenize", "-m", MODEL, "-f", bad_utf8])
# pre-tokenised corpora (subq tokenize --data ... -o FILE)
expect_error("tokenize --data without -o", ["tokenize", "-m", MODEL, "--data", short], contains="-o")
expect_error("tokenize --data with -p", ["tokenize", "-m", MODEL, "--data", short, "-p", "x", "-o",
                                         os.path.join(TMP, "c.gguf")])
expect_error("tokenize --data of non-UTF-8", ["tokenize", "-m", MODEL, "--data", bad_utf8, "-o",
                                              os.path.join(TMP, "c.gguf")], contains="UTF-8")
expect_error("train-search on a model file as data", ["train-search", "-m", MODEL, "-f", MODEL, "-o",
                                                      os.path.join(TMP, "s.gguf")], contains="no pre-tokenised corpus")
expect_error("train-search on a truncated corpus file", ["train-search", "-m", MODEL, "-f",
                                                         write("cut.gguf", open(MODEL, "rb").read()[:64]), "-o",
                                                         os.path.join(TMP, "s.gguf")])
expect_error("context larger than memory", ["generate", "-m", MODEL, "-c", "1000000000", "-n", "4"],
             contains="available")


def kv_row_bytes(head_dim, kv):
    """One row of head_dim values: f32, f16, or ggml's q8_0 / q4_0 blocks of
    32 values (a 2-byte scale + 32 bytes / 16 bytes of nibbles)."""
    return {"f32": 4 * head_dim, "f16": 2 * head_dim, "q8_0": head_dim // 32 * 34, "q4_0": head_dim // 32 * 18}[kv]


def kv_bytes(n_layer, n_head_kv, head_dim, n_ctx, kv):
    """K and V rows for every layer, KV head and slot, plus two int32 per
    slot (position, segment id)."""
    return 2 * n_layer * n_head_kv * n_ctx * kv_row_bytes(head_dim, kv) + 2 * n_ctx * 4


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
                             ("smollm2-135m shape, f16 KV", big, (30, 3, 64), ["--kv", "f16"]),
                             ("smollm2-135m shape, q8_0 KV", big, (30, 3, 64), ["--kv", "q8_0"]),
                             ("smollm2-135m shape, q4_0 KV", big, (30, 3, 64), ["--kv", "q4_0"])):
    need = kv_bytes(*dims, 100000000, kv[-1])
    for sub, extra in (("generate", ["-n", "4"]), ("logits", ["--tokens", "1 2", "-o", os.path.join(TMP, "l.bin")])):
        args = [sub, "-m", path, "-c", "100000000"] + kv + extra
        expect_error(f"{sub} -c 100000000 on {name}", args, contains=f"needs {need} bytes")
        expect_error(f"{sub} -c 100000000 on {name} says what is available", args, contains="are available")
if os.path.exists(big):
    os.remove(big)
expect_error("unknown KV type", ["generate", "-m", MODEL, "--kv", "q5_1"], contains="q8_0")
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
expect_error("bench prompt longer than -c", ["bench", "-m", MODEL, "--prefill-ctx", "600", "-c", "512"],
             contains="-c is 512")
expect_error("bench prefill text without lengths", ["bench", "-m", MODEL, "--prefill-text", MODEL],
             contains="--prefill-ctx")
expect_error("bench prefill text missing", ["bench", "-m", MODEL, "--prefill-ctx", "16", "--prefill-text",
                                            os.path.join(TMP, "no_such_text.txt")])
expect_error("bench bad prefill lengths", ["bench", "-m", MODEL, "--prefill-ctx", "16,0"])
expect_error("bench chart without lengths", ["bench", "-m", MODEL, "--prefill-svg", os.path.join(TMP, "c.svg")],
             contains="--prefill-ctx")
expect_error("bench block of no keys", ["bench", "-m", MODEL, "--prefill-ctx", "16", "--block-keys", "0"],
             contains="--block-keys")
expect_error("bench negative nprobe", ["bench", "-m", MODEL, "--prefill-ctx", "16", "--nprobe", "-1"],
             contains="--nprobe")
expect_error("eval bad budget", ["eval", "-m", MODEL, "-f", MODEL, "--budget", "5%,x"])
expect_error("eval bad compare", ["eval", "-m", MODEL, "-f", MODEL, "--compare", "exact@8"], contains="--compare")

# --- hostile input found by attacking the CLI (issue 14) -----------------

# A FIFO as a file: opening it must not wait for a writer.
fifo = os.path.join(TMP, "model.fifo")
if os.path.exists(fifo):
    os.unlink(fifo)
os.mkfifo(fifo)
expect_error("info on a FIFO", ["info", "-m", fifo], contains="not a regular file", timeout=20)
expect_error("generate on a FIFO", ["generate", "-m", fifo, "-n", "1"], contains="not a regular file", timeout=20)
expect_error("search projections from a FIFO", ["generate", "-m", MODEL, "--search", fifo, "-n", "1"],
             contains="not a regular file", timeout=20)
expect_error("completion maps from a FIFO", ["generate", "-m", MODEL, "--select", "oracle", "--complete", fifo,
                                             "-n", "1"], contains="not a regular file", timeout=20)
os.unlink(fifo)


def with_alignment(a):
    """stories260K with general.alignment = a and the data section starting
    at an address that is a multiple of a but not of 2a (the loader would
    read f32 weights from misaligned addresses)."""
    g = GGUFEdit(blob)
    g.set("general.alignment", "u32", a)
    g.alignment = a
    for pad in range(64):
        g.set("test.pad", "str", "x" * pad)
        end = 24 + sum(8 + len(k) + len(r) for k, r in g.kvs) + sum(len(t[1]) for t in g.tensors)
        if end % a == 0 and end % (2 * a) != 0:
            break
    return g.write(os.path.join(TMP, f"align{a}.gguf"))


for a in (1, 2, 4):
    p = with_alignment(a)
    expect_error(f"general.alignment {a}", ["generate", "-m", p, "-n", "2", "--temp", "0"],
                 contains="general.alignment")
    expect_error(f"info with general.alignment {a}", ["info", "-m", p], contains="general.alignment")

# Sampling parameters outside their range, and numbers with white space.
for flag, value in [("--temp", "-1"), ("--temp", "nan"), ("--temp", "inf"), ("--top-p", "-1"), ("--top-p", "2"),
                    ("--top-p", "inf"), ("-n", " 5"), ("-n", "5 "), ("--top-k", " 3"), ("-s", " 1"),
                    ("--top-k", "-1")]:
    expect_error(f"generate {flag} {value!r}", ["generate", "-m", MODEL, flag, value, "-p", "Hi"], no_stdout=True)

# A prompt longer than the context: refused before anything is echoed.
long_prompt = write("long_prompt.txt", b"Once upon a time there was a girl. " * 2000)
expect_error("prompt longer than the context", ["generate", "-m", MODEL, "-c", "64", "-f", long_prompt, "-n", "1"],
             contains="more than the context", no_stdout=True)

# Non-finite weights: perplexity must be an error, not "nan" (or -nan in JSON).
text_file = write("ppl_text.txt", open(os.path.join(SHARED, "data/text/tinyshakespeare.txt"), "rb").read()[:20000])
for label, value in [("NaN", float("nan")), ("huge", 3e38), ("infinite", float("inf"))]:
    g = GGUFEdit(blob)
    g.patch_tensor("output_norm.weight", struct.pack("<64f", *([value] * 64)))
    bad = g.write(os.path.join(TMP, "nonfinite.gguf"))
    expect_error(f"perplexity --json with {label} weights", ["perplexity", "-m", bad, "-f", text_file, "-c", "64",
                                                             "--chunks", "2", "--json"],
                 contains="not finite", no_stdout=True)
    # the text report announces the chunks on stderr first; the error is the last line
    n_cases += 1
    p = subprocess.run([BIN, "perplexity", "-m", bad, "-f", text_file, "-c", "64", "--chunks", "2"],
                       capture_output=True, timeout=60, env=ENV)
    last = (p.stderr.decode("utf-8", "replace").strip().split("\n") or [""])[-1]
    if p.returncode != 1 or not last.startswith("subq perplexity: error:") or "not finite" not in last:
        failures.append(f"perplexity with {label} weights: exit {p.returncode}, stderr {p.stderr[-300:]!r}")
    if b"PPL" in p.stdout or b"nan" in p.stdout:
        failures.append(f"perplexity with {label} weights printed a result: {p.stdout[-200:]!r}")


# d_phi out of range is reported as given, not as the clamped 0.
hdr = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
phi = GGUFEdit(bytes(hdr))
phi.set("general.architecture", "str", "subq-phi")
for k, v in [("head_dim", 8), ("d_emb", 8), ("d_hidden", 8), ("d_phi", 5000), ("n_head", 8), ("n_head_kv", 4),
             ("model_n_layer", 5)]:
    phi.set("subq.phi." + k, "u32", v)
phi.set("subq.phi.layers", "arr_i32", [2])
phi.set("subq.phi.model_fingerprint", "str", "0123456789abcdef")
bad_phi = phi.write(os.path.join(TMP, "phi_dphi.gguf"))
expect_error("d_phi out of range", ["generate", "-m", MODEL, "--select", "oracle", "--complete", bad_phi, "-n", "1"],
             contains="5000")

# Completion maps loaded, then another error: nothing may leak (the
# sanitizer build's leak check sees it).
small = write("phi_text.txt", open(os.path.join(SHARED, "data/text/tinyshakespeare.txt"), "rb").read()[:30000])
phi_path = os.path.join(TMP, "phi_small.gguf")
n_cases += 1
p = subprocess.run([BIN, "train-phi", "-m", MODEL, small, "--seq", "64", "--steps", "1", "--layers", "2",
                    "--d-phi", "8", "--d-emb", "8", "--d-hidden", "8", "--eval-every", "0", "--save-every", "0",
                    "-t", "1", "--force", "-o", phi_path], capture_output=True, timeout=300, env=ENV)
if p.returncode != 0:
    failures.append(f"train-phi for the completion checks: exit {p.returncode}: {p.stderr[-300:]!r}")
else:
    for cmd in (["generate", "-n", "1"], ["perplexity", "-f", small, "-c", "64", "--chunks", "1"]):
        expect_error(f"{cmd[0]} --complete without projections", [cmd[0], "-m", MODEL, "--complete", phi_path] + cmd[1:],
                     contains="search projections")
        expect_error(f"{cmd[0]} bad --complete-heads", [cmd[0], "-m", MODEL, "--select", "oracle", "--complete",
                                                        phi_path, "--complete-heads", "entropy>=x"] + cmd[1:],
                     contains="--complete-heads")
        expect_error(f"{cmd[0]} --complete-heads on maps without entropies",
                     [cmd[0], "-m", MODEL, "--select", "oracle", "--complete", phi_path, "--complete-heads",
                      "entropy>=0.5"] + cmd[1:], contains="no per-head entropies")

# --search-rope-scale: a number > 0, for projections that rotate by position
flat_path = os.path.join(TMP, "search_flat.gguf")
n_cases += 1
p = subprocess.run([BIN, "train-search", "-m", MODEL, small, "--seq", "64", "--steps", "1", "--d-search", "8",
                    "--rope-dims", "0", "--eval-every", "0", "-t", "1", "--force", "-o", flat_path],
                   capture_output=True, timeout=300, env=ENV)
if p.returncode != 0:
    failures.append(f"train-search for the rotation checks: exit {p.returncode}: {p.stderr[-300:]!r}")
else:
    expect_error("--search-rope-scale on position-free projections",
                 ["generate", "-m", MODEL, "--search", flat_path, "--search-rope-scale", "0.5", "-n", "1"],
                 contains="do not rotate")
    for bad in ("0", "-1", "x", "nan"):
        expect_error(f"--search-rope-scale {bad}",
                     ["generate", "-m", MODEL, "--search", flat_path, "--search-rope-scale", bad, "-n", "1"],
                     contains="--search-rope-scale")
    expect_error("--search-rope-scale without --search", ["generate", "-m", MODEL, "--search-rope-scale", "0.5",
                                                          "-n", "1"], contains="--search")

# --- every file argument of every command as a FIFO nobody writes to -----
# (-f FIFO once blocked generate, perplexity and train-search; --prompt-cache,
# --log and logits/dequant -o FIFO blocked for good). Text inputs are read
# with a bounded wait (SUBQ_READ_IDLE_S: 1 s here); GGUF inputs and every
# output refuse a FIFO at once. Each case has its own FIFO (a writer that
# waited would otherwise meet another case's reader); they run 4 at a time.
fdir = os.path.join(TMP, "fifo_args")
os.makedirs(fdir, exist_ok=True)
for name in os.listdir(fdir):
    path = os.path.join(fdir, name)
    if os.path.isdir(path) and not os.path.islink(path):
        for sub in os.listdir(path):
            os.unlink(os.path.join(path, sub))
        os.rmdir(path)
    else:
        os.unlink(path)
fifo_n = [0]


def a_fifo(name=None):
    fifo_n[0] += 1
    path = os.path.join(fdir, name or "in%d.fifo" % fifo_n[0])
    os.mkfifo(path)
    return path


def fifo_dir(chart):
    """A fresh directory whose chart `chart` is a FIFO."""
    fifo_n[0] += 1
    d = os.path.join(fdir, "svg%d" % fifo_n[0])
    os.mkdir(d)
    os.mkfifo(os.path.join(d, chart))
    return d


blocks = write("fifo_blocks.bin", struct.pack("<4f", 1, 2, 3, 4))
new_out = os.path.join(fdir, "new.out")  # never written: every case fails first
WAIT, REFUSED = "no data for 1 s", "not a regular file"
train = ["-m", MODEL, small, "--seq", "64", "--steps", "1", "--eval-every", "0", "--layers", "2", "-t", "1"]
tsearch, tphi = ["train-search"] + train + ["--d-search", "8"], ["train-phi"] + train + ["--d-phi", "8"]
fifo_cases = [
    # text inputs: a bounded wait
    ("generate -f", lambda: ["generate", "-m", MODEL, "-f", a_fifo(), "-n", "1"], WAIT),
    ("perplexity -f", lambda: ["perplexity", "-m", MODEL, "-f", a_fifo()], WAIT),
    ("tokenize -f", lambda: ["tokenize", "-m", MODEL, "-f", a_fifo()], WAIT),
    ("tokenize --data", lambda: ["tokenize", "-m", MODEL, "--data", a_fifo(), "-o", new_out], WAIT),
    ("tokenize --eval-data", lambda: ["tokenize", "-m", MODEL, "--data", small, "--eval-data", a_fifo(), "-o",
                                      new_out], WAIT),
    ("train-search DATA", lambda: ["train-search", "-m", MODEL, a_fifo(), "--seq", "64", "-o", new_out], WAIT),
    ("train-search -f", lambda: ["train-search", "-m", MODEL, "-f", a_fifo(), "--seq", "64", "-o", new_out], WAIT),
    ("train-search --eval-data", lambda: tsearch + ["--eval-data", a_fifo(), "-o", new_out], WAIT),
    ("train-phi DATA", lambda: ["train-phi", "-m", MODEL, a_fifo(), "--seq", "64", "-o", new_out], WAIT),
    ("eval -f", lambda: ["eval", "-m", MODEL, "-f", a_fifo(), "-c", "64"], WAIT),
    ("eval --eval-file", lambda: ["eval", "-m", MODEL, "--eval-file", a_fifo(), "-c", "64"], WAIT),
    ("recall --haystack", lambda: ["recall", "-m", MODEL, "--haystack", a_fifo()], WAIT),
    ("bench --prefill-text", lambda: ["bench", "-m", MODEL, "--prefill-ctx", "16", "--prefill-text", a_fifo()], WAIT),
    ("dequant -i", lambda: ["dequant", "--type", "f32", "-i", a_fifo(), "-o", new_out], WAIT),
    # GGUF and session inputs: refused
    ("perplexity -m", lambda: ["perplexity", "-m", a_fifo(), "-f", small], REFUSED),
    ("tokenize -m", lambda: ["tokenize", "-m", a_fifo(), "-p", "hi"], REFUSED),
    ("logits -m", lambda: ["logits", "-m", a_fifo(), "--tokens", "1 2", "-o", new_out], REFUSED),
    ("eval -m", lambda: ["eval", "-m", a_fifo(), "-f", small], REFUSED),
    ("eval --search", lambda: ["eval", "-m", MODEL, "-f", small, "--search", a_fifo()], REFUSED),
    ("recall -m", lambda: ["recall", "-m", a_fifo(), "--haystack", small], REFUSED),
    ("bench -m", lambda: ["bench", "-m", a_fifo()], REFUSED),
    ("serve -m", lambda: ["serve", "-m", a_fifo(), "--port", "0"], REFUSED),
    ("train-search -m", lambda: ["train-search", "-m", a_fifo(), small, "-o", new_out], REFUSED),
    ("train-search --init", lambda: tsearch + ["--init", a_fifo(), "-o", new_out], REFUSED),
    ("train-search --resume", lambda: tsearch + ["--resume", "-o", a_fifo("run.gguf.ckpt")[:-5]], REFUSED),
    ("train-phi -m", lambda: ["train-phi", "-m", a_fifo(), small, "-o", new_out], REFUSED),
    ("train-phi --diagnose", lambda: tphi + ["--diagnose", a_fifo()], REFUSED),
    ("merge -m", lambda: ["merge", "-m", a_fifo(), "--search", MODEL, "-o", new_out], REFUSED),
    ("merge --search", lambda: ["merge", "-m", MODEL, "--search", a_fifo(), "-o", new_out], REFUSED),
    ("split -m", lambda: ["split", "-m", a_fifo(), "-o", new_out], REFUSED),
    ("generate --prompt-cache", lambda: ["generate", "-m", MODEL, "-p", "hi", "-n", "1", "--prompt-cache",
                                         a_fifo()], REFUSED),
    # outputs, even with --force: a writer would wait for a reader
    ("synth -o", lambda: ["synth", "--shape", "tiny", "--force", "-o", a_fifo()], REFUSED),
    ("dequant -o", lambda: ["dequant", "--type", "f32", "-i", blocks, "--force", "-o", a_fifo()], REFUSED),
    ("logits -o", lambda: ["logits", "-m", MODEL, "--tokens", "1 2", "--force", "-o", a_fifo()], REFUSED),
    ("tokenize -o", lambda: ["tokenize", "-m", MODEL, "--data", small, "--force", "-o", a_fifo()], REFUSED),
    ("merge -o", lambda: ["merge", "-m", MODEL, "--search", MODEL, "--force", "-o", a_fifo()], REFUSED),
    ("split -o", lambda: ["split", "-m", MODEL, "--force", "-o", a_fifo()], REFUSED),
    ("train-search -o", lambda: tsearch + ["--force", "-o", a_fifo()], REFUSED),
    ("train-search --log", lambda: tsearch + ["--force", "-o", new_out, "--log", a_fifo()], REFUSED),
    ("train-search --dump-teacher", lambda: tsearch + ["--force", "--dump-teacher", a_fifo()], REFUSED),
    ("train-phi -o", lambda: tphi + ["--force", "-o", a_fifo()], REFUSED),
    ("train-phi --dump", lambda: tphi + ["--force", "--dump", a_fifo()], REFUSED),
    ("eval --svg-dir", lambda: ["eval", "-m", MODEL, "-f", small, "-c", "64", "--windows", "1", "--selectors",
                                "window", "--k-sweep", "8", "--force", "--svg-dir", fifo_dir("kl.svg")], REFUSED),
    ("recall --svg-dir", lambda: ["recall", "-m", MODEL, "--haystack", small, "--lengths", "64", "--methods",
                                  "full,window@8", "--force", "--svg-dir", fifo_dir("recall_full.svg")], REFUSED),
]
fifo_env = dict(ENV, SUBQ_READ_IDLE_S="1")
fifo_args = [(name, make()) for name, make, _ in fifo_cases]
with ThreadPoolExecutor(max_workers=4) as pool:
    done = list(pool.map(lambda c: run_case(c[1], timeout=20, env=fifo_env), fifo_args))
for (name, _, want), p in zip(fifo_cases, done):
    judge(f"{name} FIFO", p, contains=want)
if os.path.exists(new_out):
    failures.append(f"FIFO cases: {new_out} was written")

# output that cannot be written (stdout on a full device) is an error: status 1 and one error line
# naming stdout, not a silent success
if os.path.exists("/dev/full"):
    for args in (["tokenize", "-m", MODEL, "-p", "hello"], ["generate", "-m", MODEL, "-p", "Once", "-n", "5"],
                 ["info", "-m", MODEL, "--json"], ["perplexity", "-m", MODEL, "-f", small, "-c", "64",
                                                   "--chunks", "1"], ["--help"]):
        n_cases += 1
        with open("/dev/full", "w") as full:
            p = subprocess.run([BIN] + args, stdout=full, stderr=subprocess.PIPE, timeout=120, env=ENV)
        errs = [l for l in p.stderr.decode("utf-8", "replace").split("\n") if "error" in l]
        if p.returncode != 1 or len(errs) != 1 or "cannot write the output to stdout: No space left on device" \
                not in errs[0]:
            failures.append(f"{args[0]} > /dev/full: exit {p.returncode}, stderr {p.stderr[-300:]!r}")
    # generate stops at the first text it cannot write (it used to compute
    # all 2,000 tokens first): the KV file holds what was computed
    n_cases += 1
    kvf = os.path.join(TMP, "full_stdout.kv")
    if os.path.exists(kvf):
        os.remove(kvf)
    with open("/dev/full", "w") as full:
        p = subprocess.run([BIN, "generate", "-m", MODEL, "-p", "Once", "-n", "2000", "--ignore-eos", "--kv-file",
                            kvf], stdout=full, stderr=subprocess.PIPE, timeout=120, env=ENV)
    errs = [l for l in p.stderr.decode("utf-8", "replace").split("\n") if "error" in l]
    q = subprocess.run([BIN, "info", "--kv-file", kvf, "--json"], capture_output=True, timeout=60, env=ENV)
    try:
        held = json.loads(q.stdout)["n_committed"]
    except ValueError:
        held = None
    if p.returncode != 1 or len(errs) != 1 or "No space left on device" not in errs[0] or held is None or held > 8:
        failures.append(f"generate -n 2000 --kv-file > /dev/full: exit {p.returncode}, {held} tokens computed, "
                        f"stderr {p.stderr[-300:]!r}")
else:
    failures.append("/dev/full is missing: the write-error checks cannot run")

# a full context stops generation cleanly (exit 0, text printed)
p = subprocess.run([BIN, "generate", "-m", MODEL, "-c", "16", "-n", "100", "--temp", "0"], capture_output=True,
                   timeout=60, env=ENV)
n_cases += 1
if p.returncode != 0 or not p.stdout.strip():
    failures.append(f"generate with a full context: exit {p.returncode}, stderr {p.stderr[:200]!r}")

# impossible metadata is refused; a context past the trained one is warned about
g = GGUFEdit(blob)
g.set("llama.rope.dimension_count", "u32", 0)
expect_error("rope.dimension_count 0", ["generate", "-m", g.write(os.path.join(TMP, "nrot0.gguf")), "-n", "1"],
             contains="rope.dimension_count")
p = subprocess.run([BIN, "perplexity", "-m", MODEL, "-f", text_file, "-c", "4096", "--chunks", "1"],
                   capture_output=True, timeout=120, env=ENV)
n_cases += 1
if p.returncode != 0 or b"warning: a context of 4096 tokens exceeds the 2048" not in p.stderr:
    failures.append(f"perplexity past the trained context: exit {p.returncode}, stderr {p.stderr[:300]!r}")
# ... but not when far keys sit at trained distances (--far-pos)
p = subprocess.run([BIN, "perplexity", "-m", MODEL, "-f", text_file, "-c", "4096", "--chunks", "1", "--select",
                    "window", "--topk", "0", "--tail", "256", "--far-from", "256", "--far-pos", "window"],
                   capture_output=True, timeout=120, env=ENV)
n_cases += 1
if p.returncode != 0 or b"warning" in p.stderr:
    failures.append(f"perplexity past the trained context with --far-pos: exit {p.returncode}, "
                    f"stderr {p.stderr[:300]!r}")

# every subcommand has --help
for sub in ["info", "generate", "perplexity", "tokenize", "logits", "synth"]:
    n_cases += 1
    p = subprocess.run([BIN, sub, "--help"], capture_output=True, timeout=30, env=ENV)
    if p.returncode != 0 or b"usage:" not in p.stdout:
        failures.append(f"{sub} --help: exit {p.returncode}")

for f in failures:
    print("FAIL", f)
print(f"cli errors: {n_cases - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
