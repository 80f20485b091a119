#!/usr/bin/python3
"""ctest (label unit: also the ASan+UBSan build, where LeakSanitizer checks
the exit): `subq serve` answers hostile and odd requests with proper HTTP
errors in OpenAI's shape (the field at fault in `param`; a request line and
headers over 64 KiB: 431 or 414, up to a 1 MiB head) and keeps serving; what
libmicrohttpd answers itself (heads beyond its pool, malformed request lines)
is as the README documents; fields and roles it does not implement and
models it does not run are refused, never ignored (tools in any form, more
than 4 stop strings, max_tokens 0: OpenAI's limits); /v1/models/{id}
answers; a body declared larger than --max-body gets its 413 at once; a
client that disconnects mid-stream cancels its generation, one that
disconnects during its prompt stops the prefill within a batch; the
connections an address opens past --max-per-client (the newest, never an
older one) are answered 429 before they are closed; large bodies leave the resident size flat; concurrent
requests are all served; SIGTERM ends a running stream with an error event
that says the server is shutting down, and exits 0 with no sanitizer
report. stories260K (the prefill check: the 29M fixture), Python's
http.client and raw sockets.
"""

import json
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as su  # noqa: E402
from serve_util import rc  # noqa: E402

KEY = "s3cret-key"


def is_error(resp, status):
    st, body = resp
    return st == status and isinstance(body, dict) and isinstance(body.get("error", {}).get("message"), str)


def closed_within(s, seconds):
    """Seconds until the server closed s (reads return nothing or fail), or None."""
    t0 = time.time()
    s.settimeout(0.2)
    while time.time() - t0 < seconds:
        try:
            if s.recv(4096) == b"":
                return time.time() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.time() - t0
    return None


def read_to_close(s, got=b"", ends=ConnectionResetError):
    """got + every byte the peer sends until it closes the connection (or
    raises `ends`; any other error, a timeout included, propagates)."""
    try:
        while True:
            piece = s.recv(65536)
            if not piece:
                break
            got += piece
    except ends:
        pass
    return got


def raw_exchange(port, data, timeout=30):
    """(status, lower-cased headers, body) of what the server sends back to the
    raw bytes `data` before it closes the connection ((None, {}, b"") when it
    closes without a byte). The server may stop reading and close early: a
    failed send is fine, what it answered is still read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    got = read_to_close(s)
    s.close()
    return parse_response(got)


def parse_response(got):
    """(status, lower-cased headers, body) of the bytes of one response
    ((None, {}, b"") for none)."""
    if not got.startswith(b"HTTP/"):
        return None, {}, got
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (h.partition(":") for h in lines[1:]))
    return int(lines[0].split()[1]), headers, body


def drain(s, seconds):
    """(bytes the peer sent, whether it closed the connection) within `seconds`."""
    got, t0 = b"", time.time()
    s.settimeout(0.05)
    while time.time() - t0 < seconds:
        try:
            piece = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return got, True
        if not piece:
            return got, True
        got += piece
    return got, False


def rss_mb(srv):
    with open("/proc/%d/status" % srv.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s(srv):
    """CPU seconds the server has used (user + system)."""
    with open("/proc/%d/stat" % srv.proc.pid) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sanitized(srv):
    """The server runs under ASan (its allocator keeps freed memory in quarantine)."""
    with open("/proc/%d/maps" % srv.proc.pid) as f:
        return "libasan" in f.read()


def is_openai_error(resp, status, code, type_="invalid_request_error"):
    """An OpenAI-shaped JSON error with this status, code and type."""
    st, headers, body = resp
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return st == status and headers.get("content-type") == "application/json" and \
        isinstance(e.get("message"), str) and e.get("type") == type_ and \
        "param" in e and e.get("code") == code


def big_heads_and_bad_lines(ck, srv):
    """Request lines and headers over 64 KiB get an OpenAI-shaped 431 (414
    for a long request line) up to a 1 MiB head; beyond libmicrohttpd's
    pool, and for malformed request lines, what libmicrohttpd 0.9.75 sends
    itself (README, subq serve). The server keeps serving throughout."""
    auth = "Authorization: Bearer %s\r\n" % KEY
    junk = bytes(b for b in range(1, 256) if b not in b"\r\n ")  # one word (a NUL first reads as an empty line)

    def head(path, extra):
        return ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s" % (path, auth)).encode() + extra + b"\r\n"

    st, _, body = raw_exchange(srv.port, head("/v1/models", b"X-Pad: " + b"a" * (60 << 10) + b"\r\n"))
    ck.check("a 60 KiB header is served", st == 200 and b"stories260K" in body, "%s %r" % (st, body[:200]))
    for kib in (200, 1024):
        r = raw_exchange(srv.port, head("/v1/models", b"X-Pad: " + b"a" * (kib << 10) + b"\r\n"))
        ck.check("a %d KiB header: JSON 431 request_header_fields_too_large" % kib,
                 is_openai_error(r, 431, "request_header_fields_too_large"), "%s %r %r" % (r[0], r[1], r[2][:300]))
    r = raw_exchange(srv.port, head("/v1/models", b"".join(b"X-%d: b\r\n" % i for i in range(10000))))
    ck.check("10000 short header lines: JSON 431", is_openai_error(r, 431, "request_header_fields_too_large"),
             "%s %r" % (r[0], r[2][:300]))
    r = raw_exchange(srv.port, head("/v1/models?q=" + "a" * (100 << 10), b""))
    ck.check("a 100 KiB request line: JSON 414 uri_too_long", is_openai_error(r, 414, "uri_too_long"),
             "%s %r" % (r[0], r[2][:300]))
    ck.check("served after the oversized heads", srv.request("GET", "/health")[0] == 200)
    # documented: what libmicrohttpd answers itself, with its own HTML (no hook replaces it)
    st, headers, body = raw_exchange(srv.port, head("/v1/models", b"X-Pad: " + b"a" * (2 << 20) + b"\r\n"))
    ck.check("a 2 MiB header (beyond the pool): libmicrohttpd's HTML 431",
             st == 431 and body.startswith(b"<html>") and "content-type" not in headers, "%s %r" % (st, body[:200]))
    for name, line in (("GARBAGE", b"GARBAGE"), ("binary junk", junk)):
        st, headers, body = raw_exchange(srv.port, line + b"\r\n\r\n", timeout=10)
        ck.check("a request line without a space (%s): closed unanswered" % name, st is None,
                 "%s %r" % (st, body[:200]))
    st, headers, body = raw_exchange(srv.port, b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", timeout=10)
    ck.check("HTTP/9.9: libmicrohttpd's HTML 505", st == 505 and body.startswith(b"<html>"),
             "%s %r" % (st, body[:200]))
    st, headers, body = raw_exchange(srv.port, junk + b" " + junk + b"\r\n\r\n", timeout=10)
    ck.check("binary junk with a space: libmicrohttpd's HTML 400", st == 400 and body.startswith(b"<html>"),
             "%s %r" % (st, body[:200]))
    ck.check("served after malformed request lines", srv.request("GET", "/health") == (200, {"status": "ok"}))


def slow_clients(ck, model):
    """A client that disconnects mid-stream cancels its generation (a
    2048-token context, so that it outlasts the close). Bodies of 4 and 8
    MiB leave the resident size where it was. --timeout 2 --max-per-client 3
    --max-connections 4: a trickling or stalled request is cut 2 s after its
    start; one address keeps at most 3 partial connections, the others are
    answered 429 before they are closed; over 4 live connections requests
    get 503 while /health is answered; none of it hangs."""
    srv = su.Server(["-m", model, "-c", 2048, "-t", 1, "--timeout", 2, "--max-per-client", 3, "--max-connections", 4],
                    "slow")
    # ---- a client that disconnects mid-stream: its generation stops, the slot serves the next one
    # (a 2048-token context: the generation outlasts the client's close, however loaded the machine)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 100000, "stream": True, "temperature": 1,
                       "seed": 3, "subq": {"dense": True}})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    first = s.recv(4096)
    s.close()
    ck.check("stream started", b"200 OK" in first, first[:100].decode("latin-1"))
    st, body = srv.request("POST", "/v1/completions", {"prompt": "Tom", "max_tokens": 4})
    ck.check("served after the disconnect", st == 200, str(body)[:200])
    deadline = time.time() + 30
    while time.time() < deadline and not re.search(r"cancelled \(499\) after \d+ tokens", srv.stderr()):
        time.sleep(0.1)
    m = re.search(r"cancelled \(499\) after (\d+) tokens", srv.stderr())
    ck.check("the disconnected stream was cancelled", m is not None and int(m.group(1)) < 2000, srv.stderr()[-600:])

    # ---- large bodies: the allocator gives back what they took. glibc raised
    # its thresholds to the largest block freed (an 8 MiB body's buffer), after
    # which the 4 MiB bodies stayed in each thread's heap: 20 MB more resident
    srv.request("POST", "/v1/completions", {"prompt": "Tom", "max_tokens": 1})
    time.sleep(0.2)
    base, asan = rss_mb(srv), sanitized(srv)

    def settled():  # MB over the base once the responses are sent and the allocator trimmed
        deadline = time.time() + (0 if asan else 2)  # ASan's allocator keeps freed blocks in quarantine
        while time.time() < deadline and rss_mb(srv) - base > 4:
            time.sleep(0.05)
        return rss_mb(srv) - base

    def big(i, mib):  # accepted (200) and refused (400) alike
        return srv.request("POST", "/v1/completions", {"prompt": "Tom", "max_tokens": 1,
                                                       ("user" if i % 2 else "frobnicate"): "u" * (mib << 20)})[0]

    got, grown = [], []
    for i, mib in enumerate([8, 4, 4, 4]):  # one client after another, then three at once
        got.append(big(i, mib))
        grown.append(settled())
    clients = [threading.Thread(target=lambda k=k: got.extend([big(k, 4), big(k + 1, 4)])) for k in range(3)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    grown.append(settled())
    ck.check("4 and 8 MiB bodies answered", got[:4] == [400, 200] * 2 and sorted(got[4:]) == [200] * 3 + [400] * 3,
             str(got))
    ck.check("4 and 8 MiB bodies leave the resident size flat (under 10 MB more after each)",
             asan or max(grown) < 10,
             " ".join("%.1f" % g for g in grown) + " MB more" + (" (not checked under ASan)" if asan else ""))

    # a client sending one byte every 0.4 s: cut after ~2 s although bytes keep coming
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n" + b"{" * 50
    t0, cut = time.time(), None
    for b in req:
        try:
            s.send(bytes([b]))
        except OSError:
            cut = time.time() - t0
            break
        if closed_within(s, 0.4) is not None:
            cut = time.time() - t0
            break
    s.close()
    ck.check("a trickling request is cut at its deadline", cut is not None and 1.5 < cut < 4, "cut after %s s" % cut)
    # an address opening ten partial connections keeps three: the other seven
    # are answered 429 (they were closed without a word); the three complete
    # their requests and are served, but one that stays stalled is cut at its deadline
    held = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(10)]
    for h in held:
        h.sendall(b"GET /v1/models HTTP/1.1\r\n")
    t0 = time.time()
    st = srv.request("GET", "/health", timeout=5)[0]
    ck.check("/health answers beside ten partial connections", st == 200 and time.time() - t0 < 2,
             "status %s after %.2f s" % (st, time.time() - t0))
    time.sleep(1.2)
    seen = [drain(h, 0.05) for h in held]
    kept = [h for h, (_, closed) in zip(held, seen) if not closed]
    ck.check("one address keeps at most --max-per-client partial connections", 1 <= len(kept) <= 3,
             "%d open" % len(kept))
    refused = [parse_response(got) for got, closed in seen if closed]
    ck.check("each connection past --max-per-client is answered 429 too_many_connections before it is closed",
             len(refused) == 10 - len(kept) and
             all(is_openai_error(r, 429, "too_many_connections", "rate_limit_error") for r in refused),
             str([(r[0], r[2][:200]) for r in refused]))
    for h in kept[:-1]:
        h.sendall(b"Host: x\r\nConnection: close\r\n\r\n")
    served = [parse_response(read_to_close(h, ends=OSError)) for h in kept[:-1]]
    ck.check("the connections kept are served", all(r[0] == 200 and b"stories260K" in r[2] for r in served),
             str([(r[0], r[2][:200]) for r in served]))
    gone = closed_within(kept[-1], 3) if kept else None
    ck.check("a partial connection is closed by its deadline", gone is not None, str(gone))
    for h in held:
        h.close()
    # five addresses, one partial connection each: over the cap of 4, requests get 503, /health 200
    others = []
    for i in range(5):
        o = socket.socket()
        o.bind(("127.0.0.%d" % (i + 2), 0))
        o.connect(("127.0.0.1", srv.port))
        o.sendall(b"GET /v1/models HTTP/1.1\r\n")
        others.append(o)
    time.sleep(0.3)
    st, body = srv.request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1}, timeout=5)
    ck.check("over --max-connections: 503 in OpenAI's shape", st == 503 and
             body.get("error", {}).get("type") == "server_error", str(body)[:200])
    ck.check("over --max-connections: /health still answered", srv.request("GET", "/health", timeout=5)[0] == 200)
    for o in others:
        o.close()
    time.sleep(0.3)
    st, _ = srv.request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1}, timeout=10)
    ck.check("served again once they are gone", st == 200, "status %s" % st)
    # ---- SIGTERM during a stream: the client is told the server is stopping
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 100000, "stream": True, "temperature": 1,
                       "seed": 5, "subq": {"dense": True}})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = s.recv(4096)
    srv.proc.send_signal(15)
    got = read_to_close(s, got, OSError)
    s.close()
    text = got.decode("latin-1")
    ck.check("a stream cut by shutdown says so", "shutting down" in text and '"server_error"' in text and
             "closed the connection" not in text, text[-400:])
    code, err = srv.stop()
    ck.check("slow-client server: SIGTERM exit 0, no sanitizer report", code == 0 and "Sanitizer" not in err and
             "runtime error" not in err, err[-1000:])


def per_client_newest(ck, model):
    """--max-per-client 4: an address opening ten partial connections, 50 ms
    apart, keeps its four oldest; the six opened past the limit are the ones
    answered 429 and closed (the oldest six used to be), and the four kept
    are served once their requests arrive whole. --timeout 10: no deadline
    falls within the check."""
    srv = su.Server(["-m", model, "-c", 128, "-t", 1, "--timeout", 10, "--max-per-client", 4], "perclient")
    held = []
    for _ in range(10):
        h = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        h.sendall(b"GET /v1/models HTTP/1.1\r\n")
        held.append(h)
        time.sleep(0.05)
    # the watchdog answers a connection over the limit once it is half a
    # second old: wait for six closes (at most 5 s), then half a second more
    got, closed = [b""] * 10, [False] * 10
    deadline, settle = time.time() + 5, None
    while time.time() < (settle or deadline):
        for i, h in enumerate(held):
            if not closed[i]:
                piece, closed[i] = drain(h, 0.02)
                got[i] += piece
        if settle is None and sum(closed) >= 6:
            settle = time.time() + 0.5
    refused = [i for i in range(10) if closed[i]]
    ck.check("--max-per-client 4: the six connections opened past the limit are refused, the four oldest kept",
             refused == list(range(4, 10)), "closed: %s" % refused)
    answers = [parse_response(got[i]) for i in refused]
    ck.check("each refused connection got 429 too_many_connections",
             len(answers) > 0 and
             all(is_openai_error(r, 429, "too_many_connections", "rate_limit_error") for r in answers),
             str([(r[0], r[2][:200]) for r in answers]))
    kept = [held[i] for i in range(10) if not closed[i]]
    for h in kept:
        h.sendall(b"Host: x\r\nConnection: close\r\n\r\n")
    served = [parse_response(read_to_close(h, ends=OSError)) for h in kept]
    ck.check("the four kept connections are served", len(served) == 4 and
             all(r[0] == 200 and b"stories260K" in r[2] for r in served), str([(r[0], r[2][:200]) for r in served]))
    for h in held:
        h.close()
    code, err = srv.stop()
    ck.check("per-client server: SIGTERM exit 0, no sanitizer report", code == 0 and "Sanitizer" not in err and
             "runtime error" not in err, err[-1000:])


def prefill_cancel(ck):
    """A client that disconnects while its prompt is prefilled stops the
    prefill within a batch: the next request waits for the batch under way
    (-b 32), not for the rest of a 2,800-token prompt, which the 29M fixture
    takes over a second to prefill (the worker used to decode the whole
    prompt in one call, which nothing interrupted)."""
    model = rc.shared_file("models", "fixture-4k-29m-q8_0.gguf")
    srv = su.Server(["-m", model, "-c", 4096, "-t", 1, "-b", 32], "prefill")
    body = json.dumps({"prompt": " ".join("word%d" % (i % 50) for i in range(1000)), "max_tokens": 1})
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    cpu0 = cpu_s(srv)
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    deadline = time.time() + 60  # under way: a third of a second of computing, however loaded the machine
    while time.time() < deadline and cpu_s(srv) - cpu0 < 0.3:
        time.sleep(0.02)
    s.close()
    t0 = time.time()
    st, b = srv.request("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 1})
    waited = time.time() - t0
    ck.check("served after a disconnect during the prompt", st == 200, str(b)[:200])
    m = re.search(r"cancelled \(499\) after 0 tokens: .*\(prompt: (\d+) of (\d+) tokens in the cache after "
                  r"([\d.]+) ms\)", srv.stderr())
    done, total, ms = (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else (0, 0, 0.0)
    ck.check("the prefill stopped part way", m is not None and total > 2000 and 0 < done < total,
             srv.stderr()[-600:])
    # what the rest of the prompt would have taken at the rate it ran (an
    # underestimate: attention grows with the context)
    rest = (total - done) * ms / 1e3 / done if done else 0.0
    ck.check("the next request waits for a batch, not the rest of the prompt", waited < 0.5 * rest,
             "waited %.2f s; the rest of the prompt: %.2f s" % (waited, rest))
    code, err = srv.stop()
    ck.check("prefill server: SIGTERM exit 0, no sanitizer report", code == 0 and "Sanitizer" not in err and
             "runtime error" not in err, err[-1000:])


def main():
    ck = rc.Checks("check_serve_robust")
    model = rc.shared_file("models", "stories260K.gguf")
    srv = su.Server(["-m", model, "-c", 128, "-t", 1, "--api-key", KEY, "--max-body", 4096,
                     "--chat-template", "chatml"], "robust")
    auth = {"Authorization": "Bearer " + KEY}
    R = lambda body, path="/v1/completions": srv.request("POST", path, body, auth)  # noqa: E731

    # ---- auth and routing
    ck.check("health needs no key", srv.request("GET", "/health") == (200, {"status": "ok"}))
    ck.check("no key: 401", is_error(srv.request("POST", "/v1/completions", {"prompt": "a"}), 401))
    ck.check("wrong key: 401", is_error(srv.request("POST", "/v1/completions", {"prompt": "a"},
                                                    {"Authorization": "Bearer nope"}), 401))
    st, body = srv.request("GET", "/v1/models", None, auth)
    ck.check("models", st == 200 and body["data"][0]["id"] == "stories260K", str(body))
    ck.check("unknown path: 404", is_error(srv.request("GET", "/v2/nothing", None, auth), 404))
    st, body = srv.request("GET", "/v1/models/stories260K", None, auth)
    ck.check("GET /v1/models/{id}", st == 200 and body.get("id") == "stories260K", str(body))
    st, body = srv.request("GET", "/v1/models/gpt-4o", None, auth)
    ck.check("GET /v1/models/{unknown id}: 404 model_not_found", st == 404 and
             body["error"].get("code") == "model_not_found" and body["error"].get("param") == "model", str(body))

    # ---- what the server does not implement is refused, naming the field
    refused = [
        ("unknown field", {"prompt": "a", "frobnicate": 1}, "/v1/completions", "frobnicate"),
        ("logit_bias", {"prompt": "a", "logit_bias": {"5": 10}}, "/v1/completions", "logit_bias"),
        ("presence_penalty", {"prompt": "a", "presence_penalty": 0.5}, "/v1/completions", "presence_penalty"),
        ("echo", {"prompt": "a", "echo": True}, "/v1/completions", "echo"),
        ("messages on completions", {"prompt": "a", "messages": []}, "/v1/completions", "messages"),
        ("response_format json", {"messages": [{"role": "user", "content": "a"}],
                                  "response_format": {"type": "json_object"}}, "/v1/chat/completions",
         "response_format"),
        ("tools", {"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]},
         "/v1/chat/completions", "tools"),
        ("an unknown role", {"messages": [{"role": "wizard", "content": "a"}]}, "/v1/chat/completions",
         "messages[0].role"),
        ("a tool message", {"messages": [{"role": "tool", "content": "a"}]}, "/v1/chat/completions",
         "messages[0].role"),
        ("a message field", {"messages": [{"role": "user", "content": "a", "name": "x"}]}, "/v1/chat/completions",
         "messages[0].name"),
        ("a model not served", {"prompt": "a", "model": "gpt-4o"}, "/v1/completions", "model"),
        ("n = 2", {"prompt": "a", "n": 2}, "/v1/completions", "n"),
        # OpenAI's own limits: tools refused in any form (an empty list too), at most 4 stop strings, max_tokens >= 1
        ("an empty tools list", {"messages": [{"role": "user", "content": "a"}], "tools": []},
         "/v1/chat/completions", "tools"),
        ("an empty functions list", {"messages": [{"role": "user", "content": "a"}], "functions": []},
         "/v1/chat/completions", "functions"),
        ("five stop strings", {"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, "/v1/completions", "stop"),
        ("max_tokens 0", {"prompt": "a", "max_tokens": 0}, "/v1/completions", "max_tokens"),
        ("max_completion_tokens 0", {"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 0},
         "/v1/chat/completions", "max_completion_tokens"),
        ("max_tokens 0 beside max_completion_tokens", {"prompt": "a", "max_tokens": 0, "max_completion_tokens": 2},
         "/v1/completions", "max_tokens"),
        ("max_tokens and max_completion_tokens that differ", {"prompt": "a", "max_tokens": 3,
                                                               "max_completion_tokens": 2},
         "/v1/completions", "max_completion_tokens"),
    ]
    for name, body, path, param in refused:
        st, b = R(body, path)
        ck.check("refused, naming the field: " + name, is_error((st, b), 400) and b["error"].get("param") == param and
                 b["error"].get("type") == "invalid_request_error", str(b)[:300])
    neutral = {"prompt": "Tom", "max_tokens": 2, "model": "stories260K", "logit_bias": {}, "presence_penalty": 0,
               "echo": False, "best_of": 1, "user": "u1"}
    ck.check("neutral values of unimplemented fields are accepted", R(neutral)[0] == 200)
    st, b = R({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
               "max_tokens": 2, "response_format": {"type": "text"}}, "/v1/chat/completions")
    ck.check("a developer message and the text response format are accepted", st == 200, str(b)[:200])
    st, b = R({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "max_completion_tokens": 2,
               "tools": None, "stop": ["a", "b", "c", "d"]}, "/v1/chat/completions")
    ck.check("four stop strings, null tools and max_tokens equal to max_completion_tokens are accepted",
             st == 200 and b["usage"]["completion_tokens"] <= 2, str(b)[:200])
    ck.check("GET on completions: 405", is_error(srv.request("GET", "/v1/completions", None, auth), 405))

    # ---- malformed bodies and wrong types
    bad = [
        ("not JSON", "{\"prompt\": "),
        ("not an object", "[1, 2]"),
        ("empty body", ""),
        ("prompt is a number", {"prompt": 5}),
        ("temperature is a string", {"prompt": "a", "temperature": "hot"}),
        ("negative max_tokens", {"prompt": "a", "max_tokens": -5}),
        ("fractional max_tokens", {"prompt": "a", "max_tokens": 1.5}),
        ("max_tokens beyond 2^30", {"prompt": "a", "max_tokens": 10 ** 20}),
        ("top_p above 1", {"prompt": "a", "top_p": 2}),
        ("stop of numbers", {"prompt": "a", "stop": [1, 2]}),
        ("NUL in prompt", {"prompt": "a\u0000b"}),
        ("n = 2", {"prompt": "a", "n": 2}),
        ("unknown selector", {"prompt": "a", "subq": {"select": "magic"}}),
        ("selector needing projections", {"prompt": "a", "subq": {"select": "exact"}}),
        ("bad layer list", {"prompt": "a", "subq": {"select": "window", "sparse_layers": "zz"}}),
        ("unknown far-key scheme", {"prompt": "a", "subq": {"select": "window", "far_pos": "far"}}),
        ("far_from of 0", {"prompt": "a", "subq": {"select": "window", "far_pos": "window", "far_from": 0}}),
        ("far_from beyond the trained context",
         {"prompt": "a", "subq": {"select": "window", "far_pos": "window", "far_from": 1 << 20}}),
        ("prompt over the context", {"prompt": "Once upon a time " * 60}),
    ]
    for name, body in bad:
        ck.check("400: " + name, is_error(R(body), 400), str(R(body))[:200])
    ck.check("chat without messages: 400", is_error(R({"messages": []}, "/v1/chat/completions"), 400))
    ck.check("chat message without role: 400",
             is_error(R({"messages": [{"content": "x"}]}, "/v1/chat/completions"), 400))
    ck.check("body over --max-body: 413", is_error(R({"prompt": "x" * 5000}), 413))
    # a Content-Length over --max-body is answered from the head, the body neither sent nor waited for
    # (it used to wait for the body until the read deadline); with Expect: 100-continue, no 100 first
    for expect in (b"", b"Expect: 100-continue\r\n"):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        t0 = time.time()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n" + expect + b"\r\n")
        got = b""
        try:  # the answer, whole (its Content-Length), without waiting for the close
            while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < \
                    int(parse_response(got)[1].get("content-length", 1 << 30)):
                piece = s.recv(65536)
                if not piece:
                    break
                got += piece
        except OSError:
            pass
        dt = time.time() - t0
        s.close()
        r = parse_response(got)
        what = " (Expect: 100-continue)" if expect else ""
        ck.check("Content-Length over --max-body, no body sent%s: 413 at once" % what,
                 is_openai_error(r, 413, None) and dt < 2, "%s %r after %.1f s" % (r[0], r[2][:200], dt))
    # ... and one that sends its body at once, beyond what the sockets buffer, reads the 413 too
    # (the body is read and dropped after the answer: closing with it unread reset the connection)
    try:
        r = R({"prompt": "x" * (32 << 20)})
    except OSError as e:
        r = (None, repr(e))
    ck.check("a 32 MiB body sent at once: 413, not a reset", is_error(r, 413), str(r)[:300])
    st, body, _ = srv.stream("/v1/completions", {"prompt": "Once upon a time " * 60, "stream": True}, auth)
    ck.check("streaming request over the context: plain 400", st == 400 and "error" in body, str(body)[:200])

    # ---- absurd but valid: max_tokens far past the context stops at its end
    st, body = R({"prompt": "Once upon a time", "max_tokens": 1 << 30, "temperature": 0, "seed": 1})
    ok = st == 200 and body["choices"][0]["finish_reason"] in ("length", "stop") and \
        body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] <= 129
    ck.check("max_tokens 2^30 stops at the context's end", ok, str(body)[:300])

    # ---- many concurrent requests, streaming and not: every one served
    results = []

    def client(i):
        for k in range(3):
            body = {"prompt": "Lily and Tom", "max_tokens": 8, "seed": i * 10 + k}
            if (i + k) % 2:
                st, events, done = srv.stream("/v1/completions", dict(body, stream=True), auth)
                results.append(st == 200 and done and events[-1]["choices"][0]["finish_reason"] == "length")
            else:
                st, b = R(body)
                results.append(st == 200 and b["usage"]["completion_tokens"] == 8)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ck.check("36 concurrent requests all served", len(results) == 36 and all(results),
             "%d of %d ok" % (sum(results), len(results)))

    # ---- half-sent requests and garbage on the socket do not hurt
    for raw in [b"GARBAGE\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro"]:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(raw)
        s.close()
    ck.check("still healthy after garbage", srv.request("GET", "/health")[0] == 200)
    big_heads_and_bad_lines(ck, srv)

    code, err = srv.stop()
    ck.check("SIGTERM: exit 0", code == 0, "exit %s" % code)
    slow_clients(ck, model)
    per_client_newest(ck, model)
    prefill_cancel(ck)
    ck.check("no sanitizer report", "Sanitizer" not in err and "runtime error" not in err, err[-2000:])
    ck.finish()


if __name__ == "__main__":
    main()
