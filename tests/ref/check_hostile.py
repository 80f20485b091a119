#!/usr/bin/python3
"""ctest check: hostile vocabularies, weights and files through the CLI.

1. A vocabulary without U+2581 (stories260K with every U+2581 of its token
   texts turned into U+2582): each space then costs three byte tokens, more
   ids than the text has bytes; tokenize, generate, perplexity and
   train-search once read past buffers sized one id per byte. The ids must
   equal those of llama_ref's SpmTokenizer (an independent implementation)
   and perplexity must equal llama_ref's.
2. Every --json output is strict JSON (UTF-8, no NaN or Infinity) on files
   with NaN/infinite floats and invalid UTF-8 in keys, strings, tokens and
   the path, and on a model whose weights are NaN.
3. A killed writer's temporary file (unlocked) is removed by the next write
   of the same destination; a live writer's (locked) is left alone.
4. Outputs that are not regular files are refused and left as they were (a
   FIFO, a character device, a directory); a symlink is refused without
   --force and with it replaced itself, never written through (its target,
   a text file, once became a 5 MB GGUF). Inputs are bounded: /dev/zero as
   text or as a GGUF file ends in one clean error, a FIFO with no writer
   times out, a FIFO whose writer comes late is read.
5. Valid models of every integer-kernel weight type (Q4_0, Q4_K, Q6_K,
   Q8_0, random weights: negative block scales included) prefill a prompt
   and decode: under the sanitizers this runs the GEMM and GEMV kernels of
   the machine's level (a shift of a negative f16 scale once stopped every
   Q4_0 model there).
6. Every output of every command (-o of synth, dequant, logits, tokenize,
   merge, split, train-search and train-phi, their --dump files and logs,
   the charts of eval and recall --svg-dir) that exists, as a file or as a
   symbolic link, is refused before any work, in one line that names it and
   --force, and is left as it was (it once was replaced silently, exit 0);
   with --force a link is replaced itself and its target kept.

With SUBQ_SANITIZED=1 (the ASan+UBSan build runs it too) any sanitizer
report fails the run."""
import fcntl
import json
import os
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
from gguf_edit import GGUFEdit, encode  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_util import Server  # noqa: E402

SPACE, NOT_SPACE = "\u2581".encode(), "\u2582".encode()


def run(args, timeout=300):
    p = subprocess.run([rc.subq_bin()] + [str(a) for a in args], capture_output=True, timeout=timeout,
                       env=rc.subq_env(), stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def strict_json(data):
    """Parse like a strict consumer: UTF-8 only, no NaN/Infinity literals."""
    def refuse(name):
        raise ValueError("non-standard JSON constant " + name)
    return json.loads(data.decode("utf-8"), parse_constant=refuse)


def check_json(ck, name, args, may_fail=False):
    """args must print strict JSON (or, with may_fail, end in one clean
    error). Returns the parsed object, or None."""
    code, out, err = run(args)
    if may_fail and code == 1:
        last = err.strip().split("\n")[-1]
        ck.check(name, last.startswith("subq ") and " error: " in last and not out.strip(),
                 "clean error: " + last[:200])
        return None
    if code != 0:
        ck.check(name, False, "exit %d: %s" % (code, err[-300:]))
        return None
    try:
        obj = strict_json(out)
    except ValueError as e:
        ck.check(name, False, "%s: %r" % (e, out[:300]))
        return None
    ck.check(name, True)
    return obj


def no_space_model(model, path):
    g = GGUFEdit(open(model, "rb").read())
    toks = g.strings("tokenizer.ggml.tokens")
    assert not any(NOT_SPACE in t for t in toks)
    g.set("tokenizer.ggml.tokens", "arr_str", [t.replace(SPACE, NOT_SPACE) for t in toks])
    return g.write(path)


def main():
    ck = rc.Checks("check_hostile")
    model = rc.shared_file("models", "stories260K.gguf")
    shakespeare = rc.shared_file("data", "text", "tinyshakespeare.txt")
    tmp = rc.tmp_dir()
    text = open(shakespeare, "rb").read()[:6000].decode("utf-8")
    text_path = os.path.join(tmp, "hostile_text.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)

    # ---- 1. a vocabulary without U+2581 ---------------------------------
    nos = no_space_model(model, os.path.join(tmp, "no_u2581.gguf"))
    ref = LlamaRef(nos)
    want = ref.tok.encode(text, add_bos=True)
    ck.check("the reference needs more ids than bytes", len(want) > len(text.encode()) + 2,
             "%d ids for %d bytes" % (len(want), len(text.encode())))
    code, out, err = run(["tokenize", "-m", nos, "-f", text_path])
    got = [int(x) for x in out.split()] if code == 0 else None
    ck.check("tokenize equals the reference", got == want,
             "exit %d, %s ids vs %d: %s" % (code, len(got) if got else "-", len(want), err[-200:]))
    code, out, err = run(["tokenize", "-m", nos, "-p", "a b c", "--pieces"])
    ck.check("tokenize --pieces", code == 0 and out.count(b"\n") == len(ref.tok.encode("a b c", add_bos=True)),
             err[-200:])

    prompt = "a b c d e f g h i j k l m n o p"
    code, out, err = run(["generate", "-m", nos, "-p", prompt, "-n", "3", "--temp", "0"])
    echo = ref.tok.decode_bytes(ref.tok.encode(prompt, add_bos=True))
    ck.check("generate echoes the prompt as the reference decodes it", code == 0 and out.startswith(echo),
             "exit %d, stdout %r, want prefix %r: %s" % (code, out[:80], echo[:80], err[-200:]))

    n_ctx, chunks = 64, 3
    r = check_json(ck, "perplexity --json runs", ["perplexity", "-m", nos, "-f", text_path, "-c", n_ctx,
                                                  "--chunks", chunks, "--json"])
    if r is not None:
        got = r
        ref_ppl = ref.perplexity(text, n_ctx, chunks)
        ck.check("perplexity counts the reference's tokens", got["n_tokens_text"] == len(want),
                 "%s vs %d" % (got["n_tokens_text"], len(want)))
        rel = abs(got["ppl"] - ref_ppl["ppl"]) / ref_ppl["ppl"]
        ck.check("perplexity equals the reference", rel < 1e-4,
                 "subq %.6f ref %.6f rel %.1e" % (got["ppl"], ref_ppl["ppl"], rel))

    # subq serve: the prompt is tokenized whole (it once refused, or overran,
    # more ids than bytes) and the reply is JSON whatever bytes the pieces are
    # (byte tokens may split a character between two steps).
    srv = Server(["-m", nos, "-c", "256", "-t", "1"], name="hostile_serve")
    for stream in (False, True):
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0}
        if stream:
            st, events, done = srv.stream("/v1/completions", dict(body, stream=True))
            ck.check("serve streams the reply", st == 200 and done, "status %s" % st)
        else:
            st, reply = srv.request("POST", "/v1/completions", body)
            ok = st == 200 and isinstance(reply, dict)
            ck.check("serve counts the reference's prompt tokens",
                     ok and reply["usage"]["prompt_tokens"] == len(ref.tok.encode(prompt, add_bos=True)),
                     "status %s: %r" % (st, reply if not ok else reply["usage"]))
    code, log = srv.stop()
    ck.check("serve exits cleanly", code == 0, log[-300:])

    code, out, err = run(["train-search", "-m", nos, text_path, "--seq", "64", "--steps", "1", "--eval-every", "0",
                          "--d-search", "8", "--layers", "2", "--reserve", "none", "-t", "1", "--force",
                          "-o", os.path.join(tmp, "no_u2581_search.gguf")])
    ck.check("train-search tokenizes the corpus", code == 0, err[-300:])

    # ---- 2. --json is strict JSON ---------------------------------------
    g = GGUFEdit(open(model, "rb").read())
    g.set("test.nan", "f32", float("nan"))
    g.set("test.inf", "f32", float("inf"))
    g.set("test.floats", "arr_f32", [float("nan"), float("-inf"), 1.5])
    g.set("test.bad_utf8", "str", b"ok \xff\xfe \xc3( \xed\xa0\x80 \x80 ctrl \x01\x1f \"q\" \\ end")
    g.kvs.append([b"test.key.\xff\xc0", encode("u32", 1)])
    toks = g.strings("tokenizer.ggml.tokens")
    g.set("tokenizer.ggml.tokens", "arr_str", [b"\xff<unk>", b"\xc3"] + toks[2:])
    bad_name = os.path.join(tmp.encode(), b"bad\xff name.gguf")
    g.write(bad_name)
    r = check_json(ck, "info --json with NaN, infinity and invalid UTF-8", ["info", "-m", os.fsdecode(bad_name),
                                                                              "--json"])
    if r is not None:
        meta = r["metadata"]
        ck.check("info --json: non-finite floats are null",
                 meta.get("test.nan") is None and "test.nan" in meta and meta["test.inf"] is None and
                 meta["test.floats"]["head"] == [None, None, 1.5], repr({k: meta.get(k) for k in
                                                                         ("test.nan", "test.inf", "test.floats")}))
        ck.check("info --json: invalid UTF-8 becomes U+FFFD, the rest is kept",
                 meta.get("test.bad_utf8") == "ok \ufffd\ufffd \ufffd( \ufffd\ufffd\ufffd \ufffd ctrl \x01\x1f "
                                              "\"q\" \\ end" and "test.key.\ufffd\ufffd" in meta and
                 meta["tokenizer.ggml.tokens"]["head"][:2] == ["\ufffd<unk>", "\ufffd"] and
                 r["file"].endswith("bad\ufffd name.gguf"),
                 repr((meta.get("test.bad_utf8"), r["file"])))
    check_json(ck, "info --features --json", ["info", "--features", "--json"])
    # the text table escapes control characters: a crafted file cannot drive the terminal
    t = GGUFEdit(open(model, "rb").read())
    t.set("test.esc", "str", b"\x1b]0;owned\x07\x1b[2J \xc2\x9b31m tail")
    t.kvs.append([b"test.key.\x1b[31m", encode("u32", 1)])
    esc_path = os.path.join(tmp, "hostile_escape.gguf")
    t.write(esc_path.encode())
    code, out, err = run(["info", "-m", esc_path])
    ck.check("info escapes control characters of keys and values",
             code == 0 and b"\x1b" not in out and b"\x07" not in out and b"\xc2\x9b" not in out and
             b"\\x1b]0;owned\\x07\\x1b[2J \\u009b31m tail" in out and b"test.key.\\x1b[31m" in out, err[-200:])

    nan_model = GGUFEdit(open(model, "rb").read())
    nan_model.patch_tensor("output_norm.weight", struct.pack("<64f", *([float("nan")] * 64)))
    nan_path = nan_model.write(os.path.join(tmp, "nan_weights.gguf"))
    check_json(ck, "perplexity --json with NaN weights: a clean error", ["perplexity", "-m", nan_path, "-f",
                                                                          text_path, "-c", "64", "--json"],
               may_fail=True)
    bj = check_json(ck, "bench --json --contend", ["bench", "-m", model, "--ctx", "64", "--prefill", "16", "-n", "2",
                                                   "--bw-mib", "16", "-t", "1", "--contend", "1", "--json"])
    if bj is not None:  # a cache of a few KB times the CPU's caches, not memory: no figure
        row = bj["decode"][0]
        ck.check("bench: no cache bandwidth for a tiny cache", row["cache_bw_gbs"] is None and
                 row["frac_bound_cache"] is None, repr(row)[:300])
        con = bj.get("contended", {})
        ck.check("bench --contend: the same rows beside a busy thread", con.get("busy_threads") == 1 and
                 len(con.get("decode", [])) == len(bj["decode"]) and con["prefill"]["tok_s"] > 0 and
                 con["decode"][0]["decode_tok_s"] > 0, repr(con)[:300])
    check_json(ck, "bench --json with NaN weights", ["bench", "-m", nan_path, "--ctx", "64", "--prefill", "16", "-n",
                                                     "2", "--bw-mib", "16", "-t", "1", "--json"], may_fail=True)
    pf = check_json(ck, "bench --prefill-ctx --json", ["bench", "-m", model, "--prefill-ctx", "24,48", "--attn",
                                                        "full,window", "--prefill-text", text_path, "-b", "16", "-n",
                                                        "2", "-t", "1", "--json", "--prefill-svg",
                                                        os.path.join(tmp, "prefill.svg")])
    if pf is not None:
        rows = pf.get("prefill", [])
        with open(os.path.join(tmp, "prefill.svg")) as f:
            svg = f.read()
        ck.check("bench --prefill-svg: the chart with both kinds and the N, N^2 slopes",
                 svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and
                 all(">%s<" % s in svg for s in ("full", "window", "slope N", "slope N^2")), svg[:200])
        ck.check("bench --prefill-ctx: a row per length and kind, exponents",
                 [(r["n_tokens"], r["attn"]) for r in rows] == [(24, "full"), (48, "full"), (24, "window"),
                                                                (48, "window")] and
                 all(r["seconds"] > 0 and r["decode_tok_s"] > 0 for r in rows) and
                 rows[0]["exponent_vs_prev"] is None and isinstance(rows[1]["exponent_vs_prev"], float) and
                 set(pf.get("exponent", {})) == {"full", "window"} and pf.get("batch") == 16 and
                 pf.get("busy_threads") == 0, repr(pf)[:300])
    pc = check_json(ck, "bench --prefill-ctx --contend --json", ["bench", "-m", model, "--prefill-ctx", "24", "--attn",
                                                                 "window", "--prefill-text", text_path, "-n", "2",
                                                                 "-t", "1", "--contend", "1", "--json"])
    if pc is not None:
        ck.check("bench --prefill-ctx --contend: the rows, beside a busy thread",
                 pc.get("busy_threads") == 1 and len(pc.get("prefill", [])) == 1 and
                 pc["prefill"][0]["decode_tok_s"] > 0, repr(pc)[:300])
    check_json(ck, "bench --prefill-ctx --json with NaN weights", ["bench", "-m", nan_path, "--prefill-ctx", "16",
                                                                   "-n", "2", "-t", "1", "--json"], may_fail=True)
    for label, m in (("", model), (" with NaN weights", nan_path)):
        check_json(ck, "eval --json" + label, ["eval", "-m", m, "--eval-file", text_path, "-c", "64", "--windows", "2",
                                               "--selectors", "window", "--k-sweep", "8", "-t", "1", "--json"],
                   may_fail=True)
        check_json(ck, "train-search --json" + label, ["train-search", "-m", m, text_path, "--seq", "64", "--steps",
                                                       "2", "--eval-every", "1", "--d-search", "8", "--layers", "2",
                                                       "--reserve", "none", "-t", "1", "--json", "--force", "-o",
                                                       os.path.join(tmp, "hostile_search.gguf")], may_fail=True)
        check_json(ck, "train-phi --json" + label, ["train-phi", "-m", m, text_path, "--seq", "64", "--steps", "2",
                                                    "--layers", "2", "--d-phi", "8", "--d-emb", "8", "--d-hidden", "8",
                                                    "--eval-every", "1", "-t", "1", "--json", "--force", "-o",
                                                    os.path.join(tmp, "hostile_phi.gguf")], may_fail=True)

    # ---- 3. stale temporary files ---------------------------------------
    out_path = os.path.join(tmp, "hostile_synth.gguf")
    stale = out_path + ".subq-tmp.STALE1"
    live = out_path + ".subq-tmp.LIVE01"
    other = out_path + ".subq-tmp.too-long-to-be-ours"
    for p in (stale, live, other):
        with open(p, "wb") as f:
            f.write(b"partial")
    holder = open(live, "rb")
    fcntl.flock(holder, fcntl.LOCK_EX)  # a writer that is still running
    code, _, err = run(["synth", "--shape", "tiny", "--type", "f32", "--force", "-o", out_path])
    ck.check("synth writes beside temporary files", code == 0, err[-200:])
    ck.check("a killed writer's temporary file is removed", not os.path.exists(stale))
    ck.check("a live writer's temporary file is kept", os.path.exists(live))
    ck.check("files that are not ours are kept", os.path.exists(other))
    holder.close()
    code, _, err = run(["synth", "--shape", "tiny", "--type", "f32", "--force", "-o", out_path])
    ck.check("its writer gone, the next write removes it too", code == 0 and not os.path.exists(live), err[-200:])
    code, _, err = run(["info", "-m", out_path])
    ck.check("the written model opens", code == 0, err[-200:])
    for p in (other, out_path):
        os.unlink(p)

    # ---- 4. special files as outputs and inputs -------------------------
    fifo, dev, sub = (os.path.join(tmp, n) for n in ("hostile_fifo", "hostile_full", "hostile_dir"))
    link, target = os.path.join(tmp, "hostile_link"), os.path.join(tmp, "hostile_target.gguf")
    for p in (fifo, dev, link, target):
        if os.path.lexists(p):
            os.unlink(p)
    if os.path.isdir(sub):
        os.rmdir(sub)
    os.mkfifo(fifo)
    os.mknod(dev, 0o644 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
    os.mkdir(sub)
    for label, path, kind in (("a FIFO", fifo, stat.S_ISFIFO), ("a character device", dev, stat.S_ISCHR),
                              ("a directory", sub, stat.S_ISDIR)):
        code, _, err = run(["synth", "--shape", "tiny", "--type", "f32", "-o", path], timeout=60)
        clean = code == 1 and err.count("\n") == 1 and "not a regular file" in err
        ck.check("synth -o %s is refused" % label, clean and kind(os.lstat(path).st_mode), err[-200:])
    with open(target, "wb") as f:
        f.write(b"old")
    os.symlink(target, link)
    code, _, err = run(["synth", "--shape", "tiny", "--type", "f32", "-o", link])
    ck.check("synth -o a symlink is refused without --force, its target kept",
             code == 1 and err.count("\n") == 1 and "--force" in err and os.path.islink(link) and
             open(target, "rb").read() == b"old", err[-200:])
    code, _, err = run(["synth", "--shape", "tiny", "--type", "f32", "--force", "-o", link])
    ck.check("synth --force -o a symlink replaces the link, never its target",
             code == 0 and not os.path.islink(link) and os.path.getsize(link) > 3 and
             open(target, "rb").read() == b"old", err[-200:])
    for args in (["perplexity", "-m", model, "-f", "/dev/zero"], ["tokenize", "-m", model, "-f", "/dev/zero"],
                 ["dequant", "--type", "q8_0", "-i", "/dev/zero", "-o", os.path.join(tmp, "hostile_deq.bin")]):
        code, out, err = run(args, timeout=120)
        ck.check(" ".join(args[:1] + args[-2:]) + ": one clean error", code == 1 and err.count("\n") == 1 and
                 "the most this reader takes" in err, err[-200:])
    env = rc.subq_env()
    env["SUBQ_READ_IDLE_S"] = "1"
    p = subprocess.run([rc.subq_bin(), "tokenize", "-m", model, "-f", fifo], capture_output=True, timeout=60, env=env)
    ck.check("a FIFO nobody writes to times out", p.returncode == 1 and b"no data for 1 s" in p.stderr, p.stderr[-200:].decode("utf-8", "replace"))
    proc = subprocess.Popen([rc.subq_bin(), "tokenize", "-m", model, "-f", fifo], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=rc.subq_env())
    time.sleep(0.5)
    with open(fifo, "w") as f:
        f.write("Once upon a time")
    out, err = proc.communicate(timeout=60)
    ck.check("a FIFO whose writer comes late is read", proc.returncode == 0 and len(out.split()) >= 4, err[-200:].decode("utf-8", "replace"))
    for p in (fifo, dev, link, target):
        os.unlink(p)
    os.rmdir(sub)

    # 5. every integer-kernel weight type, prefill and decode
    prompt = "Once upon a time there was a little dog who liked to run in the park with his friends every day"
    for wtype in ("q4_0", "q4_K", "q6_K", "q8_0"):
        path = os.path.join(tmp, "hostile_%s.gguf" % wtype)
        if os.path.exists(path):
            os.remove(path)
        code, _, err = run(["synth", "--shape", "tiny-qwen3", "--type", wtype, "-o", path])
        if code == 0:
            code, out, err = run(["generate", "-m", path, "-p", prompt, "-n", "8", "--temp", "0", "-t", "2"])
        ck.check("a %s model prefills and decodes cleanly" % wtype, code == 0 and "runtime error" not in err,
                 err[-300:])
        if os.path.exists(path):
            os.remove(path)

    existing_outputs(ck, model, text_path, tmp)
    ck.finish()


def existing_outputs(ck, model, text_path, tmp):
    """6. outputs that exist are refused without --force, replaced with it."""
    keep, target = os.path.join(tmp, "hostile_keep.out"), os.path.join(tmp, "hostile_keep_target.txt")
    svg = os.path.join(tmp, "hostile_svg")
    os.makedirs(svg, exist_ok=True)
    for name in os.listdir(svg):  # an earlier run's charts
        os.unlink(os.path.join(svg, name))
    scratch = [keep + ".ckpt", keep + ".log.jsonl", keep + ".log"]
    blocks = os.path.join(tmp, "hostile_blocks.bin")
    with open(blocks, "wb") as f:
        f.write(struct.pack("<4f", 1, 2, 3, 4))
    train = ["-m", model, text_path, "--seq", "64", "--steps", "1", "--eval-every", "0", "--layers", "2", "-t", "1"]
    search = ["train-search"] + train + ["--d-search", "8", "--reserve", "none"]
    phi = ["train-phi"] + train + ["--d-phi", "8", "--d-emb", "8", "--d-hidden", "8"]
    window = ["eval", "-m", model, "--eval-file", text_path, "-c", "64", "--windows", "1", "--selectors", "window",
              "--k-sweep", "8", "-t", "1"]
    fresh = os.path.join(tmp, "hostile_fresh.gguf")
    # (label, args writing `out`, the path checked: out or a chart in svg); the refusal comes before any work
    cases = [("synth -o", lambda o: ["synth", "--shape", "tiny", "-o", o], None),
             ("dequant -o", lambda o: ["dequant", "--type", "f32", "-i", blocks, "-o", o], None),
             ("logits -o", lambda o: ["logits", "-m", model, "--tokens", "1 2", "-o", o], None),
             ("tokenize --data -o", lambda o: ["tokenize", "-m", model, "--data", text_path, "-o", o], None),
             ("merge -o", lambda o: ["merge", "-m", model, "--search", model, "-o", o], None),
             ("split -o", lambda o: ["split", "-m", model, "-o", o], None),
             ("train-search -o", lambda o: search + ["-o", o], None),
             ("train-search --log", lambda o: search + ["-o", fresh, "--log", o], None),
             ("train-search --dump-teacher", lambda o: search + ["--dump-teacher", o], None),
             ("train-phi -o", lambda o: phi + ["-o", o], None),
             ("train-phi --dump", lambda o: phi + ["--dump", o], None),
             ("eval --svg-dir", lambda o: window + ["--per-layer", "--svg-dir", svg], "layer_kl.svg"),
             ("recall --svg-dir", lambda o: ["recall", "-m", model, "--haystack", text_path, "--lengths", "128",
                                             "--depths", "0", "--trials", "1", "--methods", "full,window@8",
                                             "--svg-dir", svg], "agree_window_8.svg")]
    for label, args, chart in cases:
        out = os.path.join(svg, chart) if chart else keep
        for kind in ("file", "symlink"):
            for p in [out, target, fresh] + scratch:
                if os.path.lexists(p):
                    os.unlink(p)
            with open(target if kind == "symlink" else out, "wb") as f:
                f.write(b"keep")
            if kind == "symlink":
                os.symlink(target, out)
            code, stdout, err = run(args(out), timeout=120)
            left = os.path.islink(out) == (kind == "symlink") and open(out, "rb").read() == b"keep"
            ck.check("%s over an existing %s is refused, which is kept" % (label, kind),
                     code == 1 and err.count("\n") == 1 and out in err and "--force" in err and left and
                     not os.path.exists(fresh), "exit %d: %s" % (code, err[-300:]))
    # --force replaces a link itself: nothing is written through it
    cases = [("synth", lambda o: ["synth", "--shape", "tiny", "--force", "-o", o], None),
             ("dequant", lambda o: ["dequant", "--type", "f32", "-i", blocks, "--force", "-o", o], None),
             ("logits", lambda o: ["logits", "-m", model, "--tokens", "1 2", "--force", "-o", o], None),
             ("tokenize", lambda o: ["tokenize", "-m", model, "--data", text_path, "--force", "-o", o], None),
             ("train-search", lambda o: search + ["--force", "-o", o, "--log", o + ".log"], None),
             ("eval --svg-dir", lambda o: window + ["--svg-dir", svg, "--force"], "kl.svg")]
    for label, args, chart in cases:
        out = os.path.join(svg, chart) if chart else keep
        links = [out] + ([out + ".log"] if label == "train-search" else [])
        for p in links + [target] + scratch:
            if os.path.lexists(p):
                os.unlink(p)
        with open(target, "wb") as f:
            f.write(b"keep")
        for p in links:
            os.symlink(target, p)
        code, _, err = run(args(out), timeout=300)
        ck.check("%s --force replaces a symlink, never its target" % label,
                 code == 0 and not any(os.path.islink(p) for p in links) and
                 all(os.path.getsize(p) > 4 for p in links) and open(target, "rb").read() == b"keep",
                 "exit %d: %s" % (code, err[-300:]))
    for p in [keep, target, blocks] + scratch:
        if os.path.lexists(p):
            os.unlink(p)


if __name__ == "__main__":
    main()
