#!/usr/bin/python3
"""ctest check: `subq serve` gives the text `subq generate` gives.

stories260K on a free loopback port; the main server (curl, openai client,
stop strings, load, sparse flags) is subq-serve, the same command linked
against the engine library alone. The reference for every response is
`subq generate` with the same prompt, seed, temperature, top-k and top-p
(its stdout minus the echoed prompt and the final newline):
  - curl, completions, whole and streamed (server-sent events);
  - the official openai npm client (tests/node), completions and chat
    completions, whole and streamed; chat prompts are the ChatML text the
    template defines, given to generate as a plain prompt;
  - stop strings cut the text where the reference has them;
  - prompt cache: a request sharing a prefix reports the tokens reused
    (the common prefix of the two prompts' `subq tokenize` ids), and LRU
    slots keep two documents apart; the text stays the reference's;
  - sparse attention from server flags and from the per-request "subq"
    field equals generate with the same flags;
  - prompts of several batches (-b 8), which the server decodes a batch at
    a time (to stop when the client leaves), equal generate with the same
    batches, dense and with --sparse-prefill, and (dense) after a reused
    prefix;
  - generate --prompt-cache: a second run reuses the session file and gives
    the same text; another plan's file is refused;
  - load: 200 requests over 8 concurrent keep-alive connections, every text
    checked, no errors.
"""

import json
import re
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))
import serve_util as su  # noqa: E402
from serve_util import rc  # noqa: E402

MODEL = None


def gen(prompt, n, temp, seed, top_k=40, top_p=0.95, flags=()):
    out = rc.run_subq(["generate", "-m", MODEL, "-p", prompt, "-n", n, "--temp", temp, "-s", seed, "--top-k", top_k,
                       "--top-p", top_p, "-t", 1] + list(flags))
    text = out.decode("utf-8")
    assert text.startswith(prompt) and text.endswith("\n"), text[:100]
    return text[len(prompt):-1]


def tokens(text):
    return [int(t) for t in rc.run_subq(["tokenize", "-m", MODEL, "-p", text]).split()]


def common(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def chatml(messages):
    return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in messages) + \
        "<|im_start|>assistant\n"


def completion(srv, body, path="/v1/completions"):
    st, b = srv.request("POST", path, body)
    if st != 200:
        raise rc.SubqError("HTTP %d: %s" % (st, b))
    return b


def same(ck, name, got, want):
    ck.check(name, got == want, "" if got == want else "\n  serve:    %r\n  generate: %r" % (got, want))


def check_curl(ck, srv):
    url = "http://127.0.0.1:%d/v1/completions" % srv.port
    body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
            "seed": 5}
    want = gen("Once upon a time", 40, 0.8, 5)
    out = subprocess.run(["curl", "-sS", "--fail", url, "-H", "Content-Type: application/json", "-d",
                          json.dumps(body)], capture_output=True, timeout=120)
    ck.check("curl: exit 0", out.returncode == 0, out.stderr.decode())
    if out.returncode == 0:
        same(ck, "curl completions == generate", json.loads(out.stdout)["choices"][0]["text"], want)
    out = subprocess.run(["curl", "-sS", "-N", "--fail", url, "-H", "Content-Type: application/json", "-d",
                          json.dumps(dict(body, stream=True))], capture_output=True, timeout=120)
    blocks = [b for b in out.stdout.decode().split("\n\n") if b.strip()]
    ck.check("curl stream ends with [DONE]", blocks and blocks[-1] == "data: [DONE]", str(blocks[-2:]))
    events = [json.loads(b[6:]) for b in blocks[:-1]]
    same(ck, "curl streamed completions == generate", su.stream_text(events, False), want)


def check_node(ck, srv):
    node_dir = os.path.join(HERE, "..", "node")
    if not os.path.isdir(os.path.join(node_dir, "node_modules", "openai")):
        ck.check("openai npm client installed (scripts/install-deps.sh --test installs it)", False, node_dir)
        return
    msgs = [{"role": "system", "content": "You tell short stories."}, {"role": "user", "content": "A story about a cat."}]
    spec = {"completions": [{"prompt": "Tom and his dog", "max_tokens": 30, "temperature": 1.0, "top_k": 20,
                             "top_p": 0.9, "seed": 7}],
            "chat": [{"messages": msgs, "max_tokens": 30, "temperature": 0.7, "top_k": 40, "top_p": 0.95,
                      "seed": 11}]}
    path = os.path.join(rc.tmp_dir(), "openai_spec_%d.json" % os.getpid())
    with open(path, "w") as f:
        json.dump(spec, f)
    out = subprocess.run(["node", os.path.join(node_dir, "openai_check.mjs"), "http://127.0.0.1:%d/v1" % srv.port,
                          "unused", path], capture_output=True, timeout=300)
    if not ck.check("openai client ran", out.returncode == 0, out.stderr.decode()[-2000:]):
        return
    res = json.loads(out.stdout)
    ck.check("openai models.list and models.retrieve agree", res["model"] == res["retrieved"] == "stories260K",
             "%r %r" % (res["model"], res["retrieved"]))
    want_errors = [{"status": 404, "param": "model", "code": "model_not_found", "type": "not_found_error"},
                   {"status": 400, "param": "model", "code": "model_not_found", "type": "invalid_request_error"},
                   {"status": 400, "param": "logit_bias", "code": None, "type": "invalid_request_error"},
                   {"status": 400, "param": "tools", "code": None, "type": "invalid_request_error"}]
    ck.check("openai client: an unknown model and unimplemented fields are refused, naming the field",
             res["errors"] == want_errors, json.dumps(res["errors"]))
    want = gen("Tom and his dog", 30, 1.0, 7, 20, 0.9)
    c = res["completions"][0]
    same(ck, "openai completions == generate", c["text"], want)
    same(ck, "openai streamed completions == generate", c["stream_text"], want)
    ck.check("openai completions usage", c["usage"]["completion_tokens"] > 0 and
             c["usage"]["prompt_tokens"] == len(tokens("Tom and his dog")), str(c["usage"]))
    want = gen(chatml(msgs), 30, 0.7, 11)
    c = res["chat"][0]
    same(ck, "openai chat == generate of the ChatML prompt", c["text"], want)
    same(ck, "openai streamed chat == generate", c["stream_text"], want)
    ck.check("finish reasons", c["finish"] == c["stream_finish"] and c["finish"] in ("stop", "length"), str(c))


def check_stop(ck, srv):
    want = gen("Once upon a time", 60, 0, 1)
    b = completion(srv, {"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0, "seed": 1,
                         "stop": ["Lily", "zebra"]})
    ck.check("reference has the stop string", "Lily" in want, want)
    same(ck, "stop string cuts the text", b["choices"][0]["text"], want.split("Lily")[0])
    ck.check("finish_reason stop", b["choices"][0]["finish_reason"] == "stop", str(b["choices"][0]))
    st, events, done = srv.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 60,
                                                      "temperature": 0, "stop": "Lily", "stream": True})
    same(ck, "stop string cuts the stream", su.stream_text(events, False), want.split("Lily")[0])


def check_cache(ck, model):
    doc1 = "Once upon a time there was a little girl named Lily. She had a red ball and a big dog. " * 3
    doc2 = "Tom went to the park with his mom. They saw a duck in the pond. " * 3
    q1, q2 = "One day Lily", "The dog"
    for slots in (1, 2):
        srv = su.Server(["-m", model, "-t", 1, "--slots", slots], "cache%d" % slots)
        try:
            seq = [doc1 + q1, doc2 + q1, doc1 + q2]
            got = [completion(srv, {"prompt": p, "max_tokens": 8, "temperature": 0}) for p in seq]
            toks = [tokens(p) for p in seq]
            for p, b in zip(seq, got):
                same(ck, "slots %d: cached text == generate" % slots, b["choices"][0]["text"], gen(p, 8, 0, 1))
            ck.check("slots %d: first request reuses nothing" % slots,
                     got[0]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0)
            # slot contents after a request: its prompt and all generated tokens but the last
            want = common(toks[0], toks[2]) if slots == 2 else common(toks[1], toks[2])
            cached = got[2]["usage"]["prompt_tokens_details"]["cached_tokens"]
            ck.check("slots %d: third request reuses %d tokens" % (slots, want), cached == want,
                     "cached %d; prompt %d tokens" % (cached, len(toks[2])))
            ck.check("slots %d: only the rest is prefilled" % slots,
                     got[2]["timings"]["prompt_n"] == len(toks[2]) - cached, str(got[2]["timings"]))
        finally:
            srv.stop()


def check_sparse(ck, model, main):
    flags = ["--select", "window", "--topk", 8, "--sink", 2, "--tail", 4]
    prompt = "Once upon a time there was a big dog. The dog liked to run. One day the dog"
    want = gen(prompt, 40, 0.8, 9, flags=flags)
    b = completion(main, {"prompt": prompt, "max_tokens": 40, "temperature": 0.8, "seed": 9,
                          "subq": {"select": "window", "topk": 8, "sink": 2, "tail": 4}})
    same(ck, "per-request window plan == generate with its flags", b["choices"][0]["text"], want)
    dense = gen(prompt, 40, 0.8, 9)
    ck.check("the window plan changes the text (the check has teeth)", dense != want)
    b = completion(main, {"prompt": prompt, "max_tokens": 40, "temperature": 0.8, "seed": 9})
    same(ck, "back to the server's dense plan", b["choices"][0]["text"], dense)
    # far keys: a request's scheme is generate's with the same flags (the prompt reaches past far_from 12)
    far = flags + ["--far-pos", "order", "--far-from", 12]
    want_far = gen(prompt, 40, 0.8, 9, flags=far)
    b = completion(main, {"prompt": prompt, "max_tokens": 40, "temperature": 0.8, "seed": 9,
                          "subq": {"select": "window", "topk": 8, "sink": 2, "tail": 4, "far_pos": "order",
                                   "far_from": 12}})
    same(ck, "per-request far_pos order == generate with its flags", b["choices"][0]["text"], want_far)
    ck.check("the far scheme changes the text (the check has teeth)", want_far != want)
    flags = ["--random-search", 8, "--select", "exact", "--topk", 8, "--sink", 2, "--tail", 4]
    srv = su.Server(["-m", model, "-t", 1] + flags, "sparse")
    try:
        b = completion(srv, {"prompt": prompt, "max_tokens": 40, "temperature": 0.8, "seed": 9})
        same(ck, "server --select exact == generate with the same flags", b["choices"][0]["text"],
             gen(prompt, 40, 0.8, 9, flags=flags))
        b = completion(srv, {"prompt": prompt + " ran", "max_tokens": 40, "temperature": 0.8, "seed": 9})
        ck.check("sparse prompt cache reused", b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, str(b["usage"]))
    finally:
        srv.stop()


def check_batches(ck, model):
    """The server decodes a prompt's batches but the last one by one (it
    checks between them for a client that left), subq_generate the last:
    the text is generate's with the same -b, also under --sparse-prefill,
    whose attention depends on the batches. After a reused prefix (dense:
    under --sparse-prefill the batches then start at the prefix's end, as
    in generate --prompt-cache, and the text is not a fresh generate's)."""
    first = "Once upon a time there was a little girl named Lily. She had a red ball and a big dog. " * 2
    second = first + "One day Lily went to the park with her dog and they played all day"
    for flags in ([], ["--select", "window", "--topk", 8, "--sink", 2, "--tail", 4, "--sparse-prefill"]):
        what = " --sparse-prefill" if flags else ""
        srv = su.Server(["-m", model, "-t", 1, "-b", 8] + flags, "batches")
        try:
            got = [completion(srv, {"prompt": p, "max_tokens": 20, "temperature": 0.8, "seed": 3,
                                    "cache_prompt": not flags}) for p in (first, second)]
            for p, b in zip((first, second), got):
                same(ck, "-b 8%s, a %d-token prompt: serve == generate" % (what, b["usage"]["prompt_tokens"]),
                     b["choices"][0]["text"], gen(p, 20, 0.8, 3, flags=["-b", 8] + flags))
            u, cached = got[1]["usage"], got[1]["usage"]["prompt_tokens_details"]["cached_tokens"]
            ck.check("-b 8%s: the second prompt %s" % (what, "prefilled whole" if flags else
                                                        "reuses the first and prefills more than a batch"),
                     cached == 0 if flags else cached > 0 and u["prompt_tokens"] - cached > 8 and
                     got[1]["timings"]["prompt_n"] == u["prompt_tokens"] - cached, "%s %s" % (u, got[1]["timings"]))
        finally:
            srv.stop()


def check_prompt_cache_file(ck):
    path = os.path.join(rc.tmp_dir(), "prompt_cache_%d.bin" % os.getpid())
    if os.path.exists(path):
        os.unlink(path)
    prompt = "Once upon a time there was a little dog named Max. Max liked to"
    want = gen(prompt, 30, 0.8, 4)
    cached = ["--prompt-cache", path]
    same(ck, "generate --prompt-cache: first run", gen(prompt, 30, 0.8, 4, flags=cached), want)
    ck.check("session file written", os.path.exists(path))
    same(ck, "generate --prompt-cache: second run from the file", gen(prompt, 30, 0.8, 4, flags=cached), want)
    longer = prompt + " play with his ball"
    same(ck, "generate --prompt-cache: longer prompt", gen(longer, 30, 0, 4, flags=cached), gen(longer, 30, 0, 4))
    r = subprocess.run([rc.subq_bin(), "generate", "-m", MODEL, "-p", prompt, "-n", "5", "--prompt-cache", path,
                        "--select", "window"], capture_output=True, timeout=120)
    ck.check("another plan's session file is refused", r.returncode == 1 and
             b"another attention plan" in r.stderr, r.stderr.decode()[-300:])
    os.unlink(path)


def check_load(ck, srv):
    prompts = ["Once upon a time", "Tom and Lily", "The big red ball", "One day, a little bird"]
    want = {p: gen(p, 12, 0, 1) for p in prompts}
    n_threads, per_thread = 8, 25
    errors, bad, ok = [], [], []

    def client(i):
        c = srv.conn()
        for k in range(per_thread):
            p = prompts[(i + k) % len(prompts)]
            try:
                st, b = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 12, "temperature": 0},
                                    conn=c)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                c.close()
                c = srv.conn()
                continue
            if st != 200:
                errors.append("HTTP %d %s" % (st, b))
            elif b["choices"][0]["text"] != want[p]:
                bad.append((p, b["choices"][0]["text"]))
            else:
                ok.append(1)
        c.close()

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    n = n_threads * per_thread
    ck.check("load: %d requests over %d connections, no errors" % (n, n_threads), not errors, str(errors[:3]))
    ck.check("load: every text equals generate", len(ok) == n, "%d ok, %d differ: %s" % (len(ok), len(bad), bad[:2]))
    print("load: %d requests in %.2f s (%.0f requests/s)" % (n, dt, n / dt), flush=True)


def check_kv_file(ck):
    """--kv-file is the session: generate without a prompt continues after
    what the file holds (the text of one longer run); serve resumes it at
    start and, under --kv-replace, a request sharing a prefix of it reuses
    that prefix (without the flag such a request runs in memory:
    check_kv_session.py); a server with two slots and one file is refused."""
    path = os.path.join(rc.tmp_dir(), "kv_file_%d.kv" % os.getpid())
    if os.path.exists(path):
        os.unlink(path)
    prompt = "Once upon a time there was a little dog named Max. Max liked to"
    flags = ["--kv-file", path, "-c", 256, "--random-search", 16, "--sparse-layers", "1-4", "--topk", 8]
    want = gen(prompt, 24, 0, 1, flags=flags[2:])
    same(ck, "generate --kv-file: first run", gen(prompt, 24, 0, 1, flags=flags), want)
    # without -p the second run continues after what the file holds: the text of one run of 32
    want32 = gen(prompt, 32, 0, 1, flags=flags[2:])
    r = subprocess.run([rc.subq_bin(), "generate", "-m", MODEL, "-n", "8", "--temp", "0", "-t", "1"] +
                       [str(f) for f in flags], capture_output=True, timeout=120)
    held = re.search(rb"KV file \S+: (\d+) tokens held", r.stderr)
    ck.check("generate --kv-file: the second run continues the first's tokens", held and int(held.group(1)) >= 24 and
             want32.startswith(want) and r.stdout.decode()[:-1] == want32[len(want):], r.stderr.decode()[-300:])
    srv = su.Server(["-m", MODEL, "-t", 1, "--kv-replace"] + flags)
    try:
        b = completion(srv, {"prompt": prompt, "max_tokens": 24, "temperature": 0})
        same(ck, "serve --kv-file: text", b["choices"][0]["text"], want)
        ck.check("serve --kv-file: the file's tokens are reused",
                 b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, str(b["usage"]))
    finally:
        srv.stop()
    r = subprocess.run([rc.subq_bin(), "serve", "-m", MODEL, "--slots", "2", "--port", "0"] + [str(f) for f in flags],
                       capture_output=True, timeout=60)
    ck.check("serve --kv-file with two slots is refused", r.returncode == 1 and b"--slots 1" in r.stderr,
             r.stderr.decode()[-200:])
    os.unlink(path)


def main():
    global MODEL
    ck = rc.Checks("check_serve")
    MODEL = rc.shared_file("models", "stories260K.gguf")
    # the main server is subq-serve, linked against the engine library alone
    main_srv = su.Server(["-m", MODEL, "-t", 1, "--chat-template", "chatml"], "main", engine_only=True)
    try:
        for fn in (check_curl, check_node, check_stop, check_load):
            ck.guarded(fn.__name__, fn, ck, main_srv)
        ck.guarded("check_sparse", check_sparse, ck, MODEL, main_srv)
    finally:
        code, err = main_srv.stop()
    ck.check("server exits 0 on SIGTERM", code == 0, err[-500:])
    r = subprocess.run([rc.subq_bin(), "serve", "-m", MODEL, "--chat-template", "nope"], capture_output=True,
                       timeout=60)
    ck.check("unknown --chat-template: one-line error at start-up", r.returncode == 1 and
             r.stderr.decode().startswith("subq serve: error: unknown chat template 'nope'"), r.stderr.decode())
    ck.guarded("check_cache", check_cache, ck, MODEL)
    ck.guarded("check_batches", check_batches, ck, MODEL)
    ck.guarded("check_prompt_cache_file", check_prompt_cache_file, ck)
    ck.guarded("check_kv_file", check_kv_file, ck)
    ck.finish()


if __name__ == "__main__":
    main()
