#!/usr/bin/python3
"""ctest check: a KV file (--kv-file) holds one session across commands.

  - a file that holds tokens is never replaced without a word: logits
    continues it when its tokens start with the held ones (and writes the
    logits of the tokens after them, equal to an in-memory run's) and
    refuses other tokens naming --kv-reset; perplexity, eval, recall and
    bench refuse it naming --kv-reset (and start over with it); serve
    continues it for a request that starts with its tokens, runs any other
    request in memory and leaves the file as it is, unless started with
    --kv-replace;
  - a damaged newest header slot (byte 40 or byte 0 flipped) is reported:
    `info --verify` exits 1 saying how many committed tokens the older
    slot loses, generate refuses the file naming --kv-recover, and with it
    warns in one line and continues from the older slot; a damaged older
    slot is no loss;
  - `info --kv-file` reads a file that a process writes (its lock held, or
    a generate running): what it last committed, naming the writer;
  - a text file given as --kv-file is "not a subq KV file" to every command;
  - SIGINT or SIGTERM during generate --kv-file commits the tokens computed
    and exits 130 or 143; the file holds all that was shown.
"""

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))
import serve_util as su  # noqa: E402
from serve_util import rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402

MODEL = None
TMP = None


def run(args, timeout=300):
    """(exit code, stdout bytes, stderr lines) of `subq ARGS`."""
    r = subprocess.run([rc.subq_bin()] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=rc.subq_env(), timeout=timeout)
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace").strip().splitlines()


def info(path):
    code, out, err = run(["info", "--kv-file", path, "--json"])
    if code != 0:
        raise rc.SubqError("info --kv-file %s: exit %d: %s" % (path, code, err[-1:]))
    return json.loads(out)


def held(path):
    return info(path)["n_committed"]


def fresh(name):
    p = os.path.join(TMP, "%s_%d.kv" % (name, os.getpid()))
    for f in (p, p + ".prefill"):
        if os.path.exists(f):
            os.unlink(f)
    return p


def tokens(text):
    return [int(t) for t in rc.run_subq(["tokenize", "-m", MODEL, "-p", text]).split()]


def refused(ck, name, args, path, n_held, naming):
    """The command exits 1 with one line naming `naming`, and the file still holds n_held tokens."""
    code, _, err = run(args)
    n = held(path)
    ck.check(name, code == 1 and len(err) >= 1 and naming in err[-1] and "error" in err[-1] and n == n_held,
             "exit %d, stderr %r, the file holds %d tokens (had %d)" % (code, err[-2:], n, n_held))


def check_commands(ck):
    """logits continues or refuses; the commands that start over refuse."""
    st = fresh("session")
    rc.run_subq(["generate", "-m", MODEL, "-p", "Once upon a time", "-n", 50, "--temp", 0, "--kv-file", st])
    n = held(st)
    ck.check("generate leaves its tokens in the file", n == len(tokens("Once upon a time")) + 50, "%d" % n)
    refused(ck, "logits: tokens that do not start with the held ones are refused, the file kept",
            ["logits", "-m", MODEL, "--tokens", "1 2 3", "-o", os.path.join(TMP, "lg.bin"), "--force",
             "--kv-file", st], st, n, "--kv-reset")
    text = os.path.join(rc.shared_dir(), "data", "text", "wikitext-2-raw.test.txt")
    refused(ck, "perplexity: a file that holds tokens is refused, the file kept",
            ["perplexity", "-m", MODEL, "-f", text, "-c", 2048, "--chunks", 1, "--kv-file", st], st, n, "--kv-reset")
    code, out, err = run(["perplexity", "-m", MODEL, "-f", text, "-c", 2048, "--chunks", 1, "--kv-file", st,
                          "--kv-reset"])
    ck.check("perplexity --kv-reset: runs over the held tokens, saying it dropped them",
             code == 0 and b"Final estimate" in out and any("dropped the %d tokens" % n in ln for ln in err),
             "exit %d, %r" % (code, err[-2:]))

    # the commands that start over, each on a file its own first run left (eval's leaves none: a
    # generate of its window's context fills it)
    hay = os.path.join(TMP, "kvs_hay_%d.txt" % os.getpid())
    with open(hay, "w") as f:
        f.write("The grass is green and the sky is blue. " * 400)
    starts_over = {
        "eval": ["eval", "-m", MODEL, "--eval-file", text, "-c", 128, "--windows", 1, "--selectors", "window",
                 "--k-sweep", 8, "-t", 1],
        "recall": ["recall", "-m", MODEL, "--haystack", hay, "--lengths", 256, "--depths", 0, "--trials", 1,
                   "--methods", "full", "-t", 1],
        "bench": ["bench", "-m", MODEL, "--ctx", 128, "-n", 2, "--prefill", 0, "--attn", "full", "-t", 1],
    }
    for name, args in starts_over.items():
        f = fresh("over_" + name)
        fill = ["generate", "-m", MODEL, "-p", "Once", "-n", 20, "-c", 128] if name == "eval" else args
        code, _, err = run(fill + ["--kv-file", f])
        n_left = held(f) if code == 0 else -1
        if not ck.check("%s --kv-file: a first run fills the file" % name, code == 0 and n_left > 0,
                        "exit %d, %d tokens, %r" % (code, n_left, err[-2:])):
            continue
        refused(ck, "%s: a file that holds tokens is refused, the file kept" % name, args + ["--kv-file", f], f,
                n_left, "--kv-reset")
        code, _, err = run(args + ["--kv-file", f, "--kv-reset"])
        ck.check("%s --kv-reset: runs" % name, code == 0, "exit %d, %r" % (code, err[-2:]))
        os.unlink(f)
    os.unlink(hay)

    # logits continues a file whose tokens start its own: the logits of the tokens after them
    lf = fresh("logits")
    a, b, mem = (os.path.join(TMP, "lg_%s_%d.bin" % (x, os.getpid())) for x in "abm")
    ids = tokens("Once upon a time there was a dog")
    rc.run_subq(["logits", "-m", MODEL, "--tokens", " ".join(map(str, ids[:4])), "-o", a, "--force", "--kv-file", lf])
    code, _, err = run(["logits", "-m", MODEL, "--tokens", " ".join(map(str, ids)), "-o", b, "--force",
                        "--kv-file", lf])
    rc.run_subq(["logits", "-m", MODEL, "--tokens", " ".join(map(str, ids)), "-o", mem, "--force"])
    full = np.fromfile(mem, np.float32).reshape(len(ids), -1)
    got = np.fromfile(b, np.float32).reshape(-1, full.shape[1]) if code == 0 else None
    ck.check("logits --kv-file: tokens after the held 4 reuse them; OUT holds the logits of the rest, as in memory",
             got is not None and got.shape[0] == len(ids) - 4 and np.abs(got - full[4:]).max() < 1e-4 and
             held(lf) == len(ids),
             "exit %d, %r, rows %s" % (code, err[-1:], None if got is None else got.shape[0]))
    code, _, err = run(["logits", "-m", MODEL, "--tokens", " ".join(map(str, ids)), "-o", b, "--force",
                        "--kv-file", lf, "--kv-reset"])
    got = np.fromfile(b, np.float32).reshape(-1, full.shape[1]) if code == 0 else None
    ck.check("logits --kv-reset: every token computed again",
             got is not None and got.shape[0] == len(ids) and np.abs(got - full).max() < 1e-4, "exit %d" % code)
    for f in (a, b, mem, lf, st):
        os.unlink(f)


def completion(srv, prompt, n):
    st, b = srv.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    if st != 200:
        raise rc.SubqError("HTTP %d: %s" % (st, b))
    return b["choices"][0]["text"], b["usage"]["prompt_tokens_details"]["cached_tokens"]


def gen(prompt, n):
    text = rc.run_subq(["generate", "-m", MODEL, "-p", prompt, "-n", n, "--temp", 0, "-t", 1, "-c", 256]).decode()
    return text[len(prompt):-1]


def check_serve(ck):
    """serve --kv-file continues the file's tokens, runs other requests in memory; --kv-replace replaces them."""
    path = fresh("serve")
    p, q = "Once upon a time there was a little dog", "The princess looked at the"
    tp, tps = tokens(p), tokens(p + " named Max.")
    ck.check("test premise: the longer prompt's tokens start with the shorter's", tps[:len(tp)] == tp, "")
    srv = su.Server(["-m", MODEL, "-t", 1, "-c", 256, "--kv-file", path])
    try:
        completion(srv, p, 1)  # the last token needs no decode: the file holds the prompt
        ck.check("serve: a request's tokens are committed as it ends (info reads them beside the server)",
                 held(path) == len(tp), "%d tokens, want %d" % (held(path), len(tp)))
        text, cached = completion(srv, p + " named Max.", 8)
        n_file = held(path)
        ck.check("serve: a prompt that starts with the file's tokens continues them",
                 text == gen(p + " named Max.", 8) and cached == len(tp) and n_file == len(tps) + 7,
                 "cached %d (want %d), file %d (want %d)" % (cached, len(tp), n_file, len(tps) + 7))
        text, cached = completion(srv, q, 8)
        ck.check("serve: another prompt runs in memory, the file keeps its tokens",
                 text == gen(q, 8) and held(path) == n_file, "file %d (had %d)" % (held(path), n_file))
        text, cached = completion(srv, p, 8)
        ck.check("serve: a prompt that is a prefix of the file's tokens runs in memory too, the file kept",
                 text == gen(p, 8) and held(path) == n_file, "file %d (had %d)" % (held(path), n_file))
    finally:
        code, err = srv.stop()
    ck.check("serve: stopped, the file holds the tokens it continued", code == 0 and held(path) == n_file,
             "exit %d, %d tokens" % (code, held(path)))
    ck.check("serve: the log says which requests ran in memory",
             len(re.findall(r"in memory: it would drop tokens the KV file holds", err)) == 2, err[-600:] if
             len(re.findall(r"in memory: it would drop tokens the KV file holds", err)) != 2 else "")
    srv = su.Server(["-m", MODEL, "-t", 1, "-c", 256, "--kv-file", path, "--kv-replace"])
    try:
        text, cached = completion(srv, q, 8)
        ck.check("serve --kv-replace: another prompt replaces the file's tokens (reusing the shared prefix)",
                 text == gen(q, 8) and cached == 1 and held(path) == len(tokens(q)) + 7,
                 "cached %d, file %d" % (cached, held(path)))
    finally:
        srv.stop()
    os.unlink(path)


def flip(src, dst, at):
    with open(src, "rb") as f:
        data = bytearray(f.read())
    data[at] ^= 0x10
    with open(dst, "wb") as f:
        f.write(data)


def header_seq(path, slot):
    with open(path, "rb") as f:
        f.seek(slot * 4096 + 16)
        return int.from_bytes(f.read(8), "little")


def check_header_damage(ck):
    path = fresh("damage")
    rc.run_subq(["generate", "-m", MODEL, "-p", "Once upon a time", "-n", 50, "--temp", 0, "--kv-file", path])
    older = held(path)
    rc.run_subq(["generate", "-m", MODEL, "-n", 30, "--temp", 0, "--kv-file", path])
    newest = held(path)
    slot = 0 if header_seq(path, 0) > header_seq(path, 1) else 1
    for at in (40, 0):
        bad = path + ".bad"
        flip(path, bad, slot * 4096 + at)
        with open(bad, "rb") as f:
            before = f.read()
        code, _, err = run(["info", "--kv-file", bad, "--verify"])
        lost = newest - held(bad)
        ck.check("byte %d of the newest header slot flipped: info --verify exits 1 saying what the older slot loses"
                 % at, code == 1 and len(err) == 1 and ("%d fewer than the newest (%d)" % (lost, newest)) in err[0]
                 and lost > 0, "exit %d, %r" % (code, err))
        code, _, err = run(["info", "--kv-file", bad])
        ck.check("byte %d: info without --verify warns in one line and reads the older slot" % at,
                 code == 0 and len(err) == 1 and "warning" in err[0] and "--kv-recover" in err[0], "%r" % err)
        code, _, err = run(["generate", "-m", MODEL, "-n", 5, "--temp", 0, "--kv-file", bad])
        with open(bad, "rb") as f:
            after = f.read()
        ck.check("byte %d: generate refuses the file in one line naming --kv-recover, the file untouched" % at,
                 code == 1 and len(err) == 1 and "--kv-recover" in err[0] and after == before, "%r" % err)
        code, _, err = run(["generate", "-m", MODEL, "-n", 5, "--temp", 0, "--kv-file", bad, "--kv-recover"])
        warn = [ln for ln in err if "warning" in ln]
        ck.check("byte %d: --kv-recover warns in one line and continues from the older slot" % at,
                 code == 0 and len(warn) == 1 and ("%d committed tokens lost" % lost) in warn[0] and
                 held(bad) == newest - lost + 5 and run(["info", "--kv-file", bad, "--verify"])[0] == 0,
                 "exit %d, %r" % (code, err[-3:]))
        os.unlink(bad)
    bad = path + ".old"
    flip(path, bad, (1 - slot) * 4096 + 40)
    code, _, err = run(["info", "--kv-file", bad, "--verify"])
    ck.check("a damaged older header slot loses nothing: verify passes with the newest count",
             code == 0 and not err and held(bad) == newest, "exit %d, %r" % (code, err))
    os.unlink(bad)
    os.unlink(path)


def check_in_use(ck):
    path = fresh("inuse")
    rc.run_subq(["generate", "-m", MODEL, "-p", "Once upon a time", "-n", 20, "--temp", 0, "--kv-file", path])
    n = held(path)
    with open(path, "rb") as f:  # a writer elsewhere: this process's exclusive lock
        fcntl.flock(f, fcntl.LOCK_EX)
        code, out, err = run(["info", "--kv-file", path])
        ck.check("info reads a file a writer holds, naming it", code == 0 and
                 ("in use by process %d" % os.getpid()).encode() in out and ("%d of" % n).encode() in out,
                 "exit %d, %r %r" % (code, out[-200:], err))
        code, out, err = run(["info", "--kv-file", path, "--verify", "--json"])
        ck.check("info --verify of a file a writer holds checks what it committed",
                 code == 0 and json.loads(out).get("writer_pid") == os.getpid(), "exit %d, %r" % (code, err))
    # a generate that commits as it runs, read again and again as it does
    fx = rc.shared_file("models", "fixture-4k-29m-q8_0.gguf")
    live = fresh("live")
    proc = subprocess.Popen([rc.subq_bin()] + [str(a) for a in ["generate", "-m", fx, "-p", "Once upon a time", "-n",
                                                                  2500, "--temp", 0, "--ignore-eos", "-t", 1, "-c",
                                                                  4096, "--kv-file", live]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=rc.subq_env())
    seen, bad = [], []
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if os.path.exists(live):
            code, out, err = run(["info", "--kv-file", live, "--json"] + (["--verify"] if len(seen) % 2 else []))
            if code == 0:
                j = json.loads(out)
                seen.append(j["n_committed"])
                if j["header_damaged"]:
                    bad.append("damaged header")
            else:
                bad.append(err[-1:])
        time.sleep(0.2)
    _, gerr = proc.communicate(timeout=300)
    ck.check("info beside a running generate: every read succeeds, counts only grow, the writer is not held up",
             proc.returncode == 0 and not bad and len(seen) >= 3 and seen == sorted(seen) and
             any(0 < s < 2505 for s in seen),
             "generate exit %d %r, %d reads, %r, counts %s" % (proc.returncode, gerr.decode()[-200:], len(seen),
                                                               bad[:3], seen[:12]))
    os.unlink(live)
    os.unlink(path)


def check_text_file(ck):
    txt = os.path.join(TMP, "kvs_text_%d.txt" % os.getpid())
    for size, name in ((12, "short"), (6000, "longer")):
        with open(txt, "w") as f:
            f.write(("hello world\n" * 600)[:size])
        msgs = []
        for args in (["generate", "-m", MODEL, "-p", "hi", "-n", 2, "--kv-file", txt], ["info", "--kv-file", txt],
                     ["info", "--kv-file", txt, "--verify"]):
            code, _, err = run(args)
            msgs.append((code, err[-1] if err else ""))
        ck.check("a %s text file as --kv-file: every command says it is not a subq KV file" % name,
                 all(c == 1 and m.endswith("%s: not a subq KV file" % txt) for c, m in msgs), "%r" % msgs)
        with open(txt, "rb") as f:
            ck.check("a %s text file as --kv-file: left as it was" % name, len(f.read()) == size, "")
    os.unlink(txt)


def check_signals(ck):
    fx = rc.shared_file("models", "fixture-4k-29m-q8_0.gguf")
    path = fresh("signal")
    prompt = "Once upon a time"
    n_prompt = len([int(t) for t in rc.run_subq(["tokenize", "-m", fx, "-p", prompt]).split()])
    for sig, want in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        args = ["generate", "-m", fx, "-n", 4000, "--temp", 0, "--ignore-eos", "-t", 1, "-c", 4096,
                "--kv-file", path]
        before = 0
        if sig == signal.SIGINT:
            args += ["-p", prompt]
        else:
            before = held(path)
        proc = subprocess.Popen([rc.subq_bin()] + [str(a) for a in args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=rc.subq_env())
        got = b""
        while len(got) < 400 and proc.poll() is None:  # some text shown, then the signal
            got += os.read(proc.stdout.fileno(), 64)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        err = err.decode("utf-8", "replace")
        m = re.search(r"stopped after (\d+) generated tokens; \S+ holds (\d+) tokens", err)
        n_gen, n_file = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
        start = n_prompt if sig == signal.SIGINT else before
        ck.check("%s during generate --kv-file: exit %d, every token shown committed" % (sig.name, want),
                 proc.returncode == want and m is not None and n_gen > 0 and n_file == start + n_gen and
                 held(path) == n_file,
                 "exit %d, %r, file %d" % (proc.returncode, err[-300:], held(path)))
    code, _, err = run(["generate", "-m", fx, "-n", 3, "--temp", 0, "-t", 1, "--kv-file", path])
    ck.check("after the signals the file continues", code == 0 and any("continuing after the %d tokens" % n_file in ln
                                                                      for ln in err), "%r" % err[-2:])
    os.unlink(path)


def main():
    global MODEL, TMP
    ck = rc.Checks("check_kv_session")
    MODEL = rc.shared_file("models", "stories260K.gguf")
    TMP = rc.tmp_dir()
    for fn in (check_commands, check_serve, check_header_damage, check_in_use, check_text_file, check_signals):
        try:
            ck.guarded(fn.__name__, fn, ck)
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as e:
            ck.check(fn.__name__, False, "%s: %s" % (type(e).__name__, e))
    ck.finish()


if __name__ == "__main__":
    main()
