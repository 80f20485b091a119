"""Start `subq serve` on a free loopback port and talk to it (stdlib only).

Used by tests/serve/check_serve_robust.py (label unit: also under ASan) and
tests/ref/check_serve.py. Environment as in tests/ref/refcommon.py.
"""

import atexit
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcommon as rc  # noqa: E402


class Server:
    def __init__(self, args, name="serve", engine_only=False):
        """engine_only: the subq-serve program (linked against the engine library alone), not `subq serve`."""
        self.log_path = os.path.join(rc.tmp_dir(), "%s_%d.log" % (name, os.getpid()))
        self.log = open(self.log_path, "wb")
        prog = [rc.engine_bin("serve")] if engine_only else [rc.subq_bin(), "serve"]
        cmd = prog + ["--port", "0"] + [str(a) for a in args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        atexit.register(self._kill)  # a script that dies leaves no server behind
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError("subq serve exited with %d: %s" % (self.proc.returncode, self.stderr()))
            m = re.search(r"listening on http://[^ ]*:(\d+) ", self.stderr())
            if m:
                self.port = int(m.group(1))
            time.sleep(0.05)
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("subq serve did not start: " + self.stderr())

    def _kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, conn=None, timeout=120):
        """(status, parsed JSON or raw text) of one request."""
        c = conn or self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data.decode("utf-8", "replace")

    def stream(self, path, body, headers=None):
        """(status, list of parsed events, saw [DONE]) of a streaming request."""
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read().decode("utf-8")
        c.close()
        if r.status != 200:
            return r.status, json.loads(data), False
        events, done = [], False
        for block in data.split("\n\n"):
            if not block.strip():
                continue
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
        return r.status, events, done

    def stop(self, timeout=120):
        """SIGTERM; (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode, self.stderr()


def stream_text(events, chat):
    """Concatenated text of a stream's events."""
    out = []
    for e in events:
        for ch in e.get("choices", []):
            out.append(ch["delta"].get("content", "") if chat else ch["text"])
    return "".join(out)
