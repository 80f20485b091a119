"""The Python package against the CLI on the same files: token ids, logits
(bit for bit, full and sparse attention), greedy and sampled text,
perplexity, sessions and KV files, errors, and Ctrl-C. The CLI is the
reference because tests/ref checks it against numpy and llama.cpp; what is
asserted here is that Python reaches the same library the same way."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import subq
from conftest import REPO, run_cli

PROMPT = "Once upon a time"
SEARCH = os.path.join(REPO, "tests", "models", "fixture-4k-search-rope.gguf")


def cli_logits(subq_bin, model, ids, tmp_path, *flags):
    out = tmp_path / ("lg%d.bin" % len(os.listdir(tmp_path)))
    run_cli(subq_bin, "logits", "-m", model, "-t", 1, "--tokens", " ".join(map(str, ids)), "-o", out, *flags)
    return np.fromfile(out, dtype="<f4")


def text_ids(model, n, seed=0):
    """n token ids of held-out text (the second half of WikiText-2's test set)."""
    text = open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "wikitext-2-raw.test.txt"),
                encoding="utf-8").read()
    return model.tokenize(text[len(text) // 2:len(text) // 2 + 20 * n])[:n]


def test_version_and_errors(stories):
    assert subq.version() == open(os.path.join(REPO, "include", "subq.h")).read().split(
        '#define SUBQ_VERSION "')[1].split('"')[0]
    with pytest.raises(subq.SubqError) as e:
        subq.Model("/nonexistent/model.gguf")
    assert "/nonexistent/model.gguf" in str(e.value) and e.value.name == "i/o error"
    with subq.Model(stories, n_ctx=64, n_threads=1) as m:
        with pytest.raises(subq.SubqError, match="unknown selector"):
            m.set_plan(selector="nope")
        with pytest.raises(subq.SubqError, match="unknown scan"):
            m.set_plan(scan="int2")
        with pytest.raises(subq.SubqError) as e:
            m.eval(list(range(1, 70)))  # more than the context
        assert e.value.status == subq._lib.SUBQ_ERR_RANGE
        with pytest.raises(subq.SubqError):
            m.tokenize(b"\xff\xfe bad utf-8")
        with pytest.raises(subq.SubqError, match="kv type|KV type"):
            subq.Model(stories, kv_type="f8")


def test_tokenize_detokenize(subq_bin, stories):
    with subq.Model(stories, n_ctx=128, n_threads=1) as m:
        ids = m.tokenize(PROMPT)
        cli = [int(x) for x in run_cli(subq_bin, "tokenize", "-m", stories, "-p", PROMPT).split()]
        assert ids == cli
        assert ids[0] == m.token_bos()
        assert m.detokenize(ids) == PROMPT.encode()
        assert m.tokenize(PROMPT, add_bos=False) == ids[1:]


@pytest.mark.parametrize("which", ["stories", "fixture"])
def test_logits_match_cli(which, subq_bin, stories, fixture_model, tmp_path):
    path = stories if which == "stories" else fixture_model
    with subq.Model(path, n_ctx=256, n_threads=1) as m:
        ids = text_ids(m, 96)
        lg = m.logits(ids)
        assert lg.dtype == np.float32 and lg.shape == (len(ids), m.n_vocab())
        assert np.array_equal(lg.reshape(-1), cli_logits(subq_bin, path, ids, tmp_path, "-c", 256))
        assert m.n_past() == len(ids) and m.tokens() == list(ids)


def test_sparse_logits_match_cli(subq_bin, fixture_model, tmp_path):
    """Learned exact retrieval on the fixture, its decode path: the first P tokens dense, the rest one at a
    time through the plan, as `logits --decode-from P` runs them."""
    P = 160
    with subq.Model(fixture_model, n_ctx=256, n_threads=1) as m:
        ids = text_ids(m, 200)
        m.set_plan(selector="exact", top_k=16, n_sink=4, n_tail=8, search=SEARCH)
        m.reset()
        m.eval(ids[:P])
        rows = [m.eval([t]) for t in ids[P:]]
        cli = cli_logits(subq_bin, fixture_model, ids, tmp_path, "-c", 256, "--search", SEARCH, "--select",
                         "exact", "--topk", 16, "--sink", 4, "--tail", 8, "--decode-from", P, "--decoded-only")
        assert np.array_equal(np.stack(rows).reshape(-1), cli)
        # and the plan changed something: full attention differs
        m.clear_plan()
        m.reset()
        m.eval(ids[:P])
        full = [m.eval([t]) for t in ids[P:]]
        assert not np.array_equal(np.stack(full), np.stack(rows))


@pytest.mark.parametrize("which", ["stories", "fixture"])
def test_generate_matches_cli(which, subq_bin, stories, fixture_model):
    path = stories if which == "stories" else fixture_model
    with subq.Model(path, n_ctx=256, n_threads=1) as m:
        greedy = m.generate(PROMPT, max_tokens=40, temperature=0, echo=True)
        cli = run_cli(subq_bin, "generate", "-m", path, "-c", 256, "-t", 1, "-p", PROMPT, "-n", 40, "--temp", 0)
        assert (greedy + "\n").encode() == cli
        m.reset()
        sampled = m.generate(PROMPT, max_tokens=40, temperature=0.8, seed=7, echo=True)
        cli = run_cli(subq_bin, "generate", "-m", path, "-c", 256, "-t", 1, "-p", PROMPT, "-n", 40, "--temp", 0.8,
                      "-s", 7)
        assert (sampled + "\n").encode() == cli
        m.reset()
        streamed = "".join(m.generate(PROMPT, max_tokens=40, temperature=0, stream=True, echo=True))
        assert streamed == greedy


def test_generate_sparse_matches_cli(subq_bin, stories):
    with subq.Model(stories, n_ctx=256, n_threads=1) as m:
        m.set_plan(selector="oracle", top_k=8, n_sink=2, n_tail=4, layers="all")
        text = m.generate(PROMPT, max_tokens=60, temperature=0, echo=True, ignore_eos=True)
        cli = run_cli(subq_bin, "generate", "-m", stories, "-c", 256, "-t", 1, "-p", PROMPT, "-n", 60, "--temp", 0,
                      "--ignore-eos", "--select", "oracle", "--topk", 8, "--sink", 2, "--tail", 4,
                      "--sparse-layers", "all")
        assert (text + "\n").encode() == cli


def test_perplexity_matches_cli(subq_bin, stories, tmp_path):
    text = open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "tinyshakespeare.txt"),
                encoding="utf-8").read()[:30000]
    f = tmp_path / "t.txt"
    f.write_text(text, encoding="utf-8")
    import json
    cli = json.loads(run_cli(subq_bin, "perplexity", "-m", stories, "-t", 1, "-f", f, "-c", 256, "--chunks", 3,
                             "--json"))
    with subq.Model(stories, n_ctx=256, n_threads=1) as m:
        r = m.perplexity(text, n_ctx=256, max_chunks=3, nll=True)
    assert r["n_chunks"] == 3 and r["n_scored"] == cli["n_tokens_scored"] == len(r["nll"])
    assert abs(r["ppl"] - cli["ppl"]) <= 1e-6 * cli["ppl"]
    assert abs(np.exp(np.mean(r["nll"].astype(np.float64))) - r["ppl"]) <= 1e-4 * r["ppl"]


def test_session_and_kv_file(stories, tmp_path):
    ids = list(range(1, 120))
    with subq.Model(stories, n_ctx=256, n_threads=1) as m:
        want = m.logits(ids)
        sess = tmp_path / "s.session"
        m.save_session(sess)
        m.reset()
        m.load_session(sess)
        assert m.n_past() == len(ids) and m.tokens() == ids
        nxt = m.eval([5])
        m.reset()
        m.eval(ids)
        assert np.array_equal(m.eval([5]), nxt)
    kv = tmp_path / "c.kv"
    with subq.Model(stories, n_ctx=256, n_threads=1, kv_file=kv) as m:
        assert np.array_equal(m.logits(ids), want)
        m.sync()
    with subq.Model(stories, n_ctx=0, n_threads=1, kv_file=kv) as m:
        assert m.resume() == len(ids)
        assert np.array_equal(m.eval([5]), nxt)
    with pytest.raises(subq.SubqError) as e:
        subq.Model(stories, n_ctx=256, kv_type="f16", kv_file=kv)
    assert e.value.status in (subq._lib.SUBQ_ERR_MISMATCH, subq._lib.SUBQ_ERR_FORMAT)


def _interrupt_after(seconds):
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_stops_generate(stories, fixture_model):
    # a stream read slowly (5 ms a token: 2 s in all) is stopped by Ctrl-C after 0.2 s
    with subq.Model(stories, n_ctx=512, n_threads=1) as m:
        timer = _interrupt_after(0.2)
        it = m.generate(PROMPT, max_tokens=400, temperature=0.8, ignore_eos=True, stream=True)
        with pytest.raises(KeyboardInterrupt):
            try:
                for _ in it:
                    time.sleep(0.005)
            finally:
                it.close()
        timer.join()
        assert 0 < m.n_past() < 400
    # a plain call: Ctrl-C sets the flag the token callback returns, which stops the C loop (4000 tokens of
    # the fixture take ~10 s on one core here)
    with subq.Model(fixture_model, n_ctx=4096, n_threads=1) as m:
        timer = _interrupt_after(0.3)
        with pytest.raises(KeyboardInterrupt):
            m.generate(PROMPT, max_tokens=4000, temperature=0.8, ignore_eos=True)
        timer.join()
        assert 0 < m.n_past() < 4000


def test_ctrl_c_stops_perplexity(fixture_model):
    text = open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "wikitext-2-raw.test.txt"),
                encoding="utf-8").read()[:200000]
    with subq.Model(fixture_model, n_ctx=512, n_threads=1) as m:
        ids = m.tokenize(text)
        timer = _interrupt_after(0.5)
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            m.perplexity(ids, n_ctx=512, max_chunks=200)
        timer.join()
        assert time.perf_counter() - t0 < 60  # 200 chunks take minutes: it stopped after one
        r = m.perplexity(ids, n_ctx=512, max_chunks=1)  # the context is usable after
        assert r["n_chunks"] == 1 and np.isfinite(r["ppl"])


def test_stream_closed_early_stops(stories):
    with subq.Model(stories, n_ctx=512, n_threads=1) as m:
        it = m.generate(PROMPT, max_tokens=400, temperature=0.8, ignore_eos=True, stream=True)
        first = [next(it) for _ in range(3)]
        it.close()
        assert all(first) and m.n_past() < 400


def test_evaluate_matches_cli(subq_bin, stories, tmp_path):
    import json
    text = open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "tinyshakespeare.txt"),
                encoding="utf-8").read()[:40000]
    f = tmp_path / "ev.txt"
    f.write_text(text, encoding="utf-8")
    cli = json.loads(run_cli(subq_bin, "eval", "-m", stories, "-f", f, "-c", 128, "--windows", 6, "--selectors",
                             "oracle,quest", "--k-sweep", "8,16", "--sink", 2, "--tail", 8, "--sparse-layers", "all",
                             "--json", "-t", 1))
    with subq.Model(stories, n_ctx=128, n_threads=1) as m:
        r = m.evaluate([f], selectors=["oracle", "quest"], ks=[8, 16], ctx=128, max_windows=6, n_sink=2, n_tail=8,
                       layers="all")
    assert r["n_windows"] == cli["windows"] and r["n_scored"] == cli["tokens_scored"]
    assert abs(r["full_ppl"] - cli["full_ppl"]) <= 1e-6 * cli["full_ppl"]
    assert [x["name"] for x in r["methods"]] == [x["method"] for x in cli["methods"]] == \
        ["oracle@8", "oracle@16", "quest@8", "quest@16"]
    for a, b in zip(r["methods"], cli["methods"]):
        for key in ("ppl", "top1", "mass", "recall", "kv_rows"):
            assert abs(a[key] - b[key]) <= 1e-6 * abs(b[key]), (a["name"], key)
        assert abs(a["kl"] - b["kl"]["mean"]) <= 1e-6 * b["kl"]["mean"]
        assert a["ann_recall"] is None and b["ann_recall"] is None


def test_train_search_matches_cli(subq_bin, stories, tmp_path):
    """The same run through Python and the CLI (one thread, few steps): the same projection file, byte for
    byte; and the file works as a plan's projections."""
    text = open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "tinyshakespeare.txt"),
                encoding="utf-8").read()[:30000]
    f = tmp_path / "tr.txt"
    f.write_text(text, encoding="utf-8")
    a, b = tmp_path / "py.gguf", tmp_path / "cli.gguf"
    with subq.Model(stories, n_ctx=128, n_threads=1) as m:
        r = m.train_search([f], a, layers="1-3", steps=3, d_search=8, seq=64, eval_every=0, warmup=1)
        assert r["step"] == 3 and r["interrupted"] == 0
        run_cli(subq_bin, "train-search", "-m", stories, "-f", f, "-o", b, "--layers", "1-3", "--reserve", "none",
                "--steps", 3, "--d-search", 8, "--seq", 64, "--eval-every", 0, "--warmup", 1, "-t", 1)
        assert a.read_bytes() == b.read_bytes()
        m.set_plan(selector="exact", top_k=8, search=a)
        assert np.isfinite(m.logits(list(range(1, 40)))).all()


def test_train_search_native_matches_cli(subq_bin, stories, tmp_path):
    """init="native" is the CLI's --init native: the same file, byte for byte; a width other than the head's is
    refused with the CLI's message."""
    f = tmp_path / "tr.txt"
    f.write_text(open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "tinyshakespeare.txt"),
                      encoding="utf-8").read()[:20000], encoding="utf-8")
    a, b = tmp_path / "py.gguf", tmp_path / "cli.gguf"
    with subq.Model(stories, n_ctx=128, n_threads=1) as m:
        m.train_search([f], a, layers="1-3", steps=1, d_search=8, seq=64, eval_every=0, warmup=1, lr=0.0,
                       granularity="head", init="native")
        run_cli(subq_bin, "train-search", "-m", stories, "-f", f, "-o", b, "--layers", "1-3", "--reserve", "none",
                "--steps", 1, "--d-search", 8, "--seq", 64, "--eval-every", 0, "--warmup", 1, "--lr", 0, "-t", 1,
                "--granularity", "head", "--init", "native")
        assert a.read_bytes() == b.read_bytes()
        with pytest.raises(subq.SubqError, match="needs --d-search 8"):
            m.train_search([f], tmp_path / "no.gguf", layers="1-3", steps=1, d_search=4, seq=64, eval_every=0,
                           warmup=1, granularity="head", init="native")


def test_ctrl_c_stops_train_search(stories, tmp_path):
    """Ctrl-C sets the flag training polls between steps: it stops within a step, with a checkpoint that a
    resumed run continues from."""
    text = open(os.path.join(os.environ["SUBQ_SHARED"], "data", "text", "tinyshakespeare.txt"),
                encoding="utf-8").read()[:30000]
    f = tmp_path / "tr.txt"
    f.write_text(text, encoding="utf-8")
    out = tmp_path / "s.gguf"
    args = dict(layers="1-3", steps=100000, d_search=8, seq=64, eval_every=0)
    with subq.Model(stories, n_ctx=128, n_threads=1) as m:
        timer = _interrupt_after(0.5)
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            m.train_search([f], out, **args)
        timer.join()
        assert time.perf_counter() - t0 < 30  # 100000 steps take minutes
        assert os.path.isfile(str(out) + ".ckpt")
        timer = _interrupt_after(0.5)
        with pytest.raises(KeyboardInterrupt):
            m.train_search([f], out, resume=True, **args)
        timer.join()


def test_create_completion(stories):
    """llama-cpp-python's call: the text generate() gives, the reason it ended, the token counts."""
    with subq.Model(stories, n_ctx=512, n_threads=1) as m:
        want = m.generate(PROMPT, max_tokens=20, temperature=0)
        m.reset()
        r = m(PROMPT, max_tokens=20, temperature=0)
        assert r["object"] == "text_completion" and r["choices"][0]["text"] == want
        assert r["choices"][0]["finish_reason"] == "length"
        assert r["usage"] == {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25}
        # stories260K's stories seldom end with its end token within 400: make "." the end token, which
        # greedy text reaches within the first sentence (it is not passed on)
        m.info["eos_id"] = m.tokenize(".", add_bos=False)[-1]
        m.reset()
        r = m.create_completion(PROMPT, max_tokens=400, temperature=0)
        assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] < 400
        assert r["choices"][0]["text"] + "." == want[:len(r["choices"][0]["text"]) + 1]
        with pytest.raises(subq.SubqError, match="stop strings"):
            m(PROMPT, stop=["."])
