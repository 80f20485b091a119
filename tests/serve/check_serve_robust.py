#!/usr/bin/python3
"""ctest (label unit: also the ASan+UBSan build, where LeakSanitizer checks
the exit): `subq serve` answers hostile and odd requests with proper HTTP
errors and keeps serving; a client that disconnects mid-stream cancels its
generation; concurrent requests are all served; SIGTERM exits 0 with no
sanitizer report. stories260K, Python's http.client and raw sockets.
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
        ("prompt over the context", {"prompt": "Once upon a time " * 60}),
    ]
    for name, body in bad:
        ck.check("400: " + name, is_error(R(body), 400), str(R(body))[:200])
    ck.check("chat without messages: 400", is_error(R({"messages": []}, "/v1/chat/completions"), 400))
    ck.check("chat message without role: 400",
             is_error(R({"messages": [{"content": "x"}]}, "/v1/chat/completions"), 400))
    ck.check("body over --max-body: 413", is_error(R({"prompt": "x" * 5000}), 413))
    st, body, _ = srv.stream("/v1/completions", {"prompt": "Once upon a time " * 60, "stream": True}, auth)
    ck.check("streaming request over the context: plain 400", st == 400 and "error" in body, str(body)[:200])

    # ---- absurd but valid: max_tokens far past the context stops at its end
    st, body = R({"prompt": "Once upon a time", "max_tokens": 1 << 30, "temperature": 0, "seed": 1})
    ok = st == 200 and body["choices"][0]["finish_reason"] in ("length", "stop") and \
        body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] <= 129
    ck.check("max_tokens 2^30 stops at the context's end", ok, str(body)[:300])

    # ---- a client that disconnects mid-stream: its generation stops, the slot serves the next one
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 100000, "stream": True, "temperature": 1,
                       "seed": 3, "subq": {"dense": True}})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
    first = s.recv(4096)
    s.close()
    ck.check("stream started", b"200 OK" in first, first[:100].decode("latin-1"))
    st, body = R({"prompt": "Tom", "max_tokens": 4})
    ck.check("served after the disconnect", st == 200, str(body)[:200])
    deadline = time.time() + 30
    while time.time() < deadline and not re.search(r"cancelled \(499\) after \d+ tokens", srv.stderr()):
        time.sleep(0.1)
    m = re.search(r"cancelled \(499\) after (\d+) tokens", srv.stderr())
    ck.check("the disconnected stream was cancelled", m is not None and int(m.group(1)) < 128, srv.stderr()[-600:])

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

    code, err = srv.stop()
    ck.check("SIGTERM: exit 0", code == 0, "exit %s" % code)
    ck.check("no sanitizer report", "Sanitizer" not in err and "runtime error" not in err, err[-2000:])
    ck.finish()


if __name__ == "__main__":
    main()
