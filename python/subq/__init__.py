"""subq from Python: sub-quadratic attention for frozen LLMs.

A small high-level layer over the C library (subq._lib mirrors the
headers), modelled on llama-cpp-python:

    import subq
    m = subq.Model("stories260K.gguf", n_ctx=512)
    m.set_plan(selector="oracle", top_k=32)          # retrieve-then-attend
    print(m.generate("Once upon a time", max_tokens=32, temperature=0))
    lg = m.logits(m.tokenize("Once upon a time"))    # float32 [n, n_vocab]

Errors raise SubqError carrying the library's message and status. Ctrl-C
stops a long call (a prompt, a generation, perplexity, eval, training) at
its next batch, token, chunk, window or step and raises KeyboardInterrupt;
the context keeps what was decoded.
"""

import codecs
import contextlib
import queue
import signal
import threading

import numpy as np

from . import _lib as lib

__all__ = ["Model", "SubqError", "version", "load_library"]


def load_library(path=None):
    """The C library (loaded once; path: a libsubq_lab.so to use instead of the one found)."""
    return lib.load_default(path)


def version():
    """The C library's version (subq_version())."""
    return load_library().subq_version().decode()


class SubqError(RuntimeError):
    """A call the library refused: .status is the subq_status, .name its name, the message the library's."""

    def __init__(self, status, message):
        self.status = status
        self.name = load_library().subq_status_name(status).decode()
        super().__init__(message)


def _check(status, err):
    if status != lib.SUBQ_OK:
        raise SubqError(status, err.msg.decode("utf-8", "replace"))


def _ids(tokens):
    arr = np.ascontiguousarray(np.asarray(tokens, dtype=np.int32).reshape(-1))
    return arr, arr.ctypes.data_as(lib.POINTER(lib.c_int32))


class _Stop:
    """How a long C call is stopped. Its callbacks return 1 once cancel is set (by Ctrl-C, or by a stream's
    consumer going away). While the call runs on the main thread, Ctrl-C only sets the flag (a Python
    exception cannot cross the C frames); the call then returns and KeyboardInterrupt is raised. An
    exception a callback raises is kept and raised once the call has returned."""

    def __init__(self, flag=None):
        self.exc = None
        self.cancel = False
        self.interrupted = False
        self.flag = flag  # a C int the call polls (training's hooks.stop), set on Ctrl-C

    def guard(self, fn):
        def wrapped(*args):
            try:
                if self.cancel or self.exc:
                    return 1
                return int(bool(fn(*args)))
            except BaseException as e:
                self.exc = e
                return 1
        return wrapped

    @contextlib.contextmanager
    def sigint(self):
        main = threading.current_thread() is threading.main_thread()
        old = signal.getsignal(signal.SIGINT) if main else None

        def on_sigint(signum, frame):
            self.interrupted = self.cancel = True
            if self.flag is not None:
                self.flag.value = 1

        if main:
            signal.signal(signal.SIGINT, on_sigint)
        try:
            yield self
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        if self.exc is not None:
            e, self.exc = self.exc, None
            raise e
        if self.interrupted:
            raise KeyboardInterrupt


class Model:
    """A model and one context over it (llama-cpp-python's Llama).

    model_path: a GGUF file; n_ctx: KV capacity in tokens (0: the model's
    training context); n_threads: 0 for every core; n_batch: tokens per
    forward step (0: 512); kv_type: "f32" (as the CLI), "f16", "q8_0" or "q4_0"; kv_file:
    keep the KV cache in this file (resume() continues what it holds).
    """

    def __init__(self, model_path, n_ctx=0, n_threads=0, n_batch=0, kv_type="f32", kv_file=None, kv_recover=False):
        self._lib = load_library()
        self._model = lib.c_void_p()
        self._ctx = lib.c_void_p()
        self._search = lib.c_void_p()
        self._complete = lib.c_void_p()
        err = lib.subq_error()
        _check(self._lib.subq_model_load(str(model_path).encode(), lib.byref(self._model), lib.byref(err)), err)
        info = lib.subq_model_info()
        self._lib.subq_model_get_info(self._model, lib.byref(info))
        self.info = {f: getattr(info, f) for f, _ in lib.subq_model_info._fields_}
        self.info["arch"] = info.arch.decode()
        p = self._lib.subq_context_default_params()
        p.n_ctx, p.n_threads, p.n_batch = int(n_ctx), int(n_threads), int(n_batch)
        kv = self._lib.subq_kv_type_parse(kv_type.encode())
        if kv < 0:
            self.close()
            raise SubqError(lib.SUBQ_ERR_ARG, "unknown KV type %r (f32, f16, q8_0, q4_0)" % kv_type)
        p.kv_type = kv
        self._kv_file = str(kv_file) if kv_file else None
        p.kv_file = self._kv_file.encode() if kv_file else None
        p.kv_recover = int(bool(kv_recover))
        st = self._lib.subq_context_new(self._model, lib.byref(p), lib.byref(self._ctx), lib.byref(err))
        if st:
            self.close()
            _check(st, err)

    # ---- lifetime ----
    def close(self):
        """Free the context, projections, maps and model (a KV file commits what it holds)."""
        if getattr(self, "_ctx", None):
            self._lib.subq_context_free(self._ctx)
            self._ctx = lib.c_void_p()
        for name, free in (("_search", "subq_search_free"), ("_complete", "subq_complete_free"),
                           ("_model", "subq_model_free")):
            h = getattr(self, name, None)
            if h:
                getattr(self._lib, free)(h)
                setattr(self, name, lib.c_void_p())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- facts ----
    def n_vocab(self):
        return self.info["n_vocab"]

    def n_ctx(self):
        return self._lib.subq_context_n_ctx(self._ctx)

    def n_past(self):
        """Tokens the KV cache holds."""
        return self._lib.subq_context_n_past(self._ctx)

    def token_bos(self):
        return self.info["bos_id"]

    def token_eos(self):
        return self.info["eos_id"]

    def tokens(self):
        """The token ids the KV cache holds."""
        n = self.n_past()
        p = self._lib.subq_context_tokens(self._ctx)
        return [p[i] for i in range(n)] if n else []

    # ---- text ----
    def tokenize(self, text, add_bos=None, special=False):
        """Token ids of text (str or UTF-8 bytes); add_bos None: as the vocabulary asks; special: special
        tokens' text becomes those tokens (llama-cpp-python's `special`)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        bos = int(self.info["add_bos"] if add_bos is None else bool(add_bos))
        fn = self._lib.subq_tokenize_special if special else self._lib.subq_tokenize
        err = lib.subq_error()
        n = lib.c_size_t()
        cap = len(data) + 2
        for _ in range(2):
            out = (lib.c_int32 * cap)()
            st = fn(self._model, data, len(data), bos, out, cap, lib.byref(n), lib.byref(err))
            if st == lib.SUBQ_OK:
                return list(out[:n.value])
            if st != lib.SUBQ_ERR_RANGE or n.value <= cap:
                _check(st, err)
            cap = n.value
        raise SubqError(lib.SUBQ_ERR_TOKENIZE, "the tokenizer's count changed between passes")

    def token_to_piece(self, token, prev=-1):
        """The bytes of one token as it appears in text (prev: the token before it, -1 for none)."""
        err = lib.subq_error()
        n = lib.c_size_t()
        buf = lib.ctypes.create_string_buffer(64)
        st = self._lib.subq_token_to_piece(self._model, prev, int(token), buf, 64, lib.byref(n), lib.byref(err))
        if st == lib.SUBQ_ERR_RANGE and n.value > 64:
            buf = lib.ctypes.create_string_buffer(n.value)
            st = self._lib.subq_token_to_piece(self._model, prev, int(token), buf, n.value, lib.byref(n),
                                               lib.byref(err))
        _check(st, err)
        return buf.raw[:n.value]

    def detokenize(self, tokens, prev=-1):
        """The bytes of token ids, each piece as the one before it leaves it (prev: the id before the first)."""
        out = []
        for t in tokens:
            out.append(self.token_to_piece(t, prev))
            prev = t
        return b"".join(out)

    # ---- the attention plan ----
    def _plan(self, fields, layers=None):
        """A subq_attn_plan from the C defaults and fields (enums by their CLI names); and the bytes it points at,
        to keep alive while it is used."""
        L = self._lib
        plan = L.subq_attn_plan_default()
        names = {"selector": L.subq_selector_parse, "score": L.subq_score_parse, "scan": L.subq_scan_parse,
                 "oracle": L.subq_oracle_parse, "far_pos": L.subq_far_parse}
        fields = dict(fields)
        if isinstance(fields.get("sparse_prefill"), str):
            modes = {"dense": 0, "sparse": 1, "tokenwise": 2}
            if fields["sparse_prefill"] not in modes:
                raise SubqError(lib.SUBQ_ERR_ARG, "sparse_prefill: dense, sparse or tokenwise")
            fields["sparse_prefill"] = modes[fields["sparse_prefill"]]
        keep = []
        for k, v in fields.items():
            if k not in dict(lib.subq_attn_plan._fields_) or k in ("layers", "topk_layers"):
                raise SubqError(lib.SUBQ_ERR_ARG, "no plan field %r" % k)
            if k in names and isinstance(v, str):
                code = names[k](v.encode())
                if code < 0:
                    raise SubqError(lib.SUBQ_ERR_ARG, "unknown %s %r" % (k, v))
                v = code
            setattr(plan, k, v)
        if layers is not None:
            keep.append(str(layers).encode())
            plan.layers = keep[-1]
        return plan, keep

    def set_plan(self, selector="exact", top_k=64, n_sink=4, n_tail=16, layers=None, search=None, complete=None,
                 random_search_dim=0, seed=1, **fields):
        """Retrieve-then-attend on the plan's layers (subq_attn_plan; fields keep their C names and defaults:
        score, scan, oracle, sparse_prefill, hnsw_ef_search, far_pos, far_from, ...). search: a projection
        GGUF for the selectors that need one (exact, hnsw, faiss); random_search_dim: random projections of
        that width instead (speed checks only); complete: completion maps. Enum fields take their CLI names.
        A plan applies from a sequence's first token: an in-memory cache is emptied first; a KV file that
        holds tokens is refused (reset() it explicitly)."""
        L = self._lib
        plan, keep = self._plan(dict(fields, selector=selector, top_k=top_k, n_sink=n_sink, n_tail=n_tail, seed=seed),
                                layers)
        err = lib.subq_error()
        new_search, new_complete = lib.c_void_p(), lib.c_void_p()
        try:
            if search:
                _check(L.subq_search_load(str(search).encode(), self._model, lib.byref(new_search), lib.byref(err)),
                       err)
            elif random_search_dim:
                _check(L.subq_search_random(self._model, plan.layers, int(random_search_dim), int(seed),
                                            lib.byref(new_search), lib.byref(err)), err)
            if complete:
                _check(L.subq_complete_load(str(complete).encode(), self._model, lib.byref(new_complete),
                                            lib.byref(err)), err)
            if not self._kv_file and self.n_past():
                self.reset()
            _check(L.subq_context_set_plan(self._ctx, lib.byref(plan), new_search, new_complete, lib.byref(err)), err)
        except BaseException:
            if new_search:
                L.subq_search_free(new_search)
            if new_complete:
                L.subq_complete_free(new_complete)
            raise
        # the context now refers to the new projections and maps: the old ones can go
        for name, free, new in (("_search", L.subq_search_free, new_search),
                                ("_complete", L.subq_complete_free, new_complete)):
            if getattr(self, name):
                free(getattr(self, name))
            setattr(self, name, new)

    def clear_plan(self):
        """Full attention on every layer again."""
        self._lib.subq_context_clear_plan(self._ctx)

    # ---- decoding ----
    def reset(self):
        """Empty the KV cache."""
        self._lib.subq_context_reset(self._ctx)

    def eval(self, tokens, logits_all=False):
        """Append tokens to the KV cache (llama-cpp-python's Llama.eval), a batch at a time; returns the
        logits of every token ([n, n_vocab]) with logits_all, else of the last ([n_vocab]). Ctrl-C stops
        between batches (the cache keeps the batches decoded)."""
        arr, _ = _ids(tokens)
        n = len(arr)
        if n == 0:
            raise SubqError(lib.SUBQ_ERR_ARG, "no tokens to decode")
        nv = self.n_vocab()
        out = np.empty((n if logits_all else 1, nv), dtype=np.float32)
        step = max(1, self._lib.subq_context_n_batch(self._ctx))
        err = lib.subq_error()
        for i in range(0, n, step):
            piece = arr[i:i + step]
            dst = out[i:i + len(piece)] if logits_all else out
            _check(self._lib.subq_decode(self._ctx, piece.ctypes.data_as(lib.POINTER(lib.c_int32)), len(piece),
                                         dst.ctypes.data_as(lib.POINTER(lib.c_float)), int(logits_all),
                                         lib.byref(err)), err)
        return out if logits_all else out[0]

    def logits(self, tokens):
        """Logits of every token of a fresh sequence: float32 [len(tokens), n_vocab] (the cache is reset
        first and then holds the tokens)."""
        self.reset()
        return self.eval(tokens, logits_all=True)

    def generate(self, prompt, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95, seed=42, stream=False,
                 echo=False, ignore_eos=False):
        """Continue prompt (text, or a list of token ids) as subq generate does: the longest prefix the cache
        shares with it is kept, the rest decoded, then up to max_tokens sampled (temperature 0: greedy).
        Returns the text (str; with echo the prompt's text first), or with stream an iterator of str pieces.
        Ctrl-C stops it and raises KeyboardInterrupt."""
        ids, gp = self._generate_params(prompt, max_tokens, temperature, top_k, top_p, seed, ignore_eos)
        head = self.detokenize(ids) if echo else b""
        if stream:
            return self._generate_stream(ids, gp, head)
        pieces = [head]
        self._generate(ids, gp, lambda piece: pieces.append(piece))
        return b"".join(pieces).decode("utf-8", "replace")

    def create_completion(self, prompt, max_tokens=16, temperature=0.8, top_p=0.95, top_k=40, seed=42, echo=False,
                          stop=None):
        """llama-cpp-python's create_completion (and Model(prompt, ...)): generate() as an OpenAI-style
        text_completion dict: choices[0].text, finish_reason "stop" (end token) or "length", usage counts.
        stop (strings that end the text) is not supported: given, it is refused."""
        if stop:
            raise SubqError(lib.SUBQ_ERR_ARG, "stop strings are not supported (the text ends at max_tokens or the "
                            "model's end token)")
        ids, gp = self._generate_params(prompt, max_tokens, temperature, top_k, top_p, seed, False)
        pieces = [self.detokenize(ids)] if echo else []
        res = self._generate(ids, gp, lambda piece: pieces.append(piece))
        finish = {lib.SUBQ_FINISH_END_TOKEN: "stop"}.get(res.finish, "length")
        return {"object": "text_completion", "model": self.info["arch"],
                "choices": [{"text": b"".join(pieces).decode("utf-8", "replace"), "index": 0, "logprobs": None,
                             "finish_reason": finish}],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": res.n_generated,
                          "total_tokens": len(ids) + res.n_generated}}

    __call__ = create_completion

    def _generate_params(self, prompt, max_tokens, temperature, top_k, top_p, seed, ignore_eos):
        """The prompt's ids and subq_generate_params for them."""
        ids = self.tokenize(prompt) if isinstance(prompt, (str, bytes)) else list(prompt)
        if not ids:
            raise SubqError(lib.SUBQ_ERR_ARG, "empty prompt")
        gp = self._lib.subq_generate_default_params()
        gp.n_predict = int(max_tokens)
        gp.sampler.temp, gp.sampler.top_k, gp.sampler.top_p, gp.sampler.seed = temperature, top_k, top_p, seed
        gp.end_tokens[0] = -1 if ignore_eos else self.info["eos_id"]
        return ids, gp

    def _generate(self, ids, gp, on_piece, stop=None):
        stop = stop or _Stop()
        cb_token = lib.on_token_fn(stop.guard(lambda user, tok, piece, n: on_piece(lib.ctypes.string_at(piece, n))))
        cb_batch = lib.on_batch_fn(stop.guard(lambda user, reused, done, n: 0))
        gp.on_token, gp.on_batch = cb_token, cb_batch
        arr, ptr = _ids(ids)
        res = lib.subq_generate_result()
        err = lib.subq_error()
        with stop.sigint():
            st = self._lib.subq_generate(self._ctx, ptr, len(arr), lib.byref(gp), lib.byref(res), lib.byref(err))
        _check(st, err)
        return res

    def _generate_stream(self, ids, gp, head):
        """Pieces as they are sampled: subq_generate runs in a thread, its tokens come through a short queue
        (it waits for the reader); closing the iterator, or Ctrl-C in the reader, stops the generation at the
        next token."""
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        q = queue.Queue(maxsize=4)  # the generation runs at most a few tokens ahead of the reader
        stop = _Stop()
        done = object()

        def work():
            try:
                self._generate(ids, gp, q.put, stop)
                q.put(done)
            except BaseException as e:
                q.put(e)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        try:
            if head:
                yield dec.decode(head)
            while True:
                item = q.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                text = dec.decode(item)
                if text:
                    yield text
            tail = dec.decode(b"", final=True)
            if tail:
                yield tail
        finally:
            stop.cancel = True
            while t.is_alive():  # unblock a put() the thread waits in; its next callback stops the C loop
                try:
                    q.get_nowait()
                except queue.Empty:
                    t.join(0.01)

    # ---- sessions and KV files ----
    def save_session(self, path):
        """Write the cache's tokens, keys and values to a session file (atomically)."""
        err = lib.subq_error()
        _check(self._lib.subq_context_save(self._ctx, str(path).encode(), lib.byref(err)), err)

    def load_session(self, path):
        """Replace the cache with a session file's (same model, plan and KV type)."""
        err = lib.subq_error()
        _check(self._lib.subq_context_load(self._ctx, str(path).encode(), lib.byref(err)), err)

    def resume(self):
        """With kv_file: continue from the tokens the file committed; returns how many."""
        err = lib.subq_error()
        _check(self._lib.subq_context_resume(self._ctx, lib.byref(err)), err)
        return self.n_past()

    def sync(self):
        """With kv_file: commit what the cache holds."""
        err = lib.subq_error()
        _check(self._lib.subq_context_sync(self._ctx, lib.byref(err)), err)

    # ---- the lab ----
    def perplexity(self, text, n_ctx=None, window=0, max_chunks=0, nll=False):
        """Perplexity of text (str or token ids) as subq perplexity computes it (llama.cpp's method: chunks of
        n_ctx tokens, the second half of each scored). Returns a dict (ppl, ppl_stderr, nll_mean, n_chunks,
        n_scored; with nll the per-token NLLs as a numpy array). Ctrl-C stops it after the running chunk."""
        ids = self.tokenize(text, add_bos=True) if isinstance(text, (str, bytes)) else list(text)
        n_ctx = int(n_ctx or self.n_ctx())
        arr, ptr = _ids(ids)
        n_chunks = len(arr) // n_ctx if max_chunks <= 0 else min(max_chunks, len(arr) // n_ctx)
        per_chunk = n_ctx - 1 - n_ctx // 2  # positions [n_ctx / 2, n_ctx - 1) of each chunk, windows or not
        nll_out = np.zeros(max(1, n_chunks * per_chunk), dtype=np.float32) if nll else None
        stop = _Stop()
        cb = lib.ppl_callback_fn(stop.guard(lambda user, chunk, n, running: 0))
        res = lib.subq_ppl_result()
        err = lib.subq_error()
        with stop.sigint():
            st = self._lib.subq_perplexity(self._ctx, ptr, len(arr), n_ctx, int(window), int(max_chunks), cb, None,
                                           lib.byref(res), None if nll_out is None else
                                           nll_out.ctypes.data_as(lib.POINTER(lib.c_float)), lib.byref(err))
        _check(st, err)
        out = {f: getattr(res, f) for f, _ in lib.subq_ppl_result._fields_}
        if nll:
            out["nll"] = nll_out[:res.n_scored].copy()
        return out

    def evaluate(self, files, selectors=("exact",), ks=(64,), search=None, ctx=512, max_windows=32, pack=True,
                 eval_frac=0.05, eval_files=(), n_sink=4, n_tail=16, layers=None, n_resamples=None, seed=None,
                 static_split=None, **plan_fields):
        """subq eval (lab): sparse against full attention on the held-out split of files (and every piece of
        eval_files), windows of ctx tokens (the context's n_ctx must hold them), each selector at each K.
        search: a projection GGUF for the selectors that need one. Returns a dict: full_ppl, n_scored,
        n_windows, seconds, and methods, one dict each (name, selector, k, ppl, gap, nll_diff with its 95%
        interval, kl with its, top1, mass, recall, mass_seed, recall_seed, ann_recall, kv_rows; None where
        not measured). Ctrl-C stops it after the running forward pass."""
        L = self._lib
        sel_codes = []
        for name in selectors:
            code = L.subq_selector_parse(name.encode())
            if code < 0:
                raise SubqError(lib.SUBQ_ERR_ARG, "unknown selector %r" % name)
            sel_codes.append(code)
        p = L.subq_eval_default_params()
        plan, keep = self._plan(dict(plan_fields, n_sink=n_sink, n_tail=n_tail), layers)
        p.plan = plan
        fs = [str(f).encode() for f in files]
        es = [str(f).encode() for f in eval_files]
        c_files = (lib.c_char_p * max(1, len(fs)))(*fs)
        c_eval = (lib.c_char_p * max(1, len(es)))(*es)
        c_sel = (lib.c_int * len(sel_codes))(*sel_codes)
        c_ks = (lib.c_int * len(ks))(*[int(k) for k in ks])
        p.files, p.n_files, p.eval_files, p.n_eval_files = c_files, len(fs), c_eval, len(es)
        p.ctx, p.pack, p.max_windows, p.eval_frac = int(ctx), int(bool(pack)), int(max_windows), float(eval_frac)
        p.selectors, p.n_selectors, p.ks, p.n_k = c_sel, len(sel_codes), c_ks, len(ks)
        for k, v in (("n_resamples", n_resamples), ("seed", seed), ("static_split", static_split)):
            if v is not None:  # else the C default
                setattr(p, k, v)
        err = lib.subq_error()
        s = lib.c_void_p()
        if search:
            _check(L.subq_search_load(str(search).encode(), self._model, lib.byref(s), lib.byref(err)), err)
        p.search = s
        res = lib.POINTER(lib.subq_eval_result)()
        stop = _Stop()
        cb = lib.eval_progress_fn(stop.guard(lambda user, done, total: 0))
        try:
            with stop.sigint():
                st = L.subq_eval_run(self._ctx, lib.byref(p), cb, None, lib.byref(res), lib.byref(err))
            _check(st, err)
            r = res.contents

            def num(x):
                return None if x != x else x  # NaN: not measured

            methods = []
            buf = lib.ctypes.create_string_buffer(64)
            for i in range(r.n_methods):
                m = r.methods[i]
                d = {f: num(getattr(m, f)) for f in ("k", "ppl", "gap", "nll_diff", "nll_diff_lo", "nll_diff_hi",
                                                      "kl", "kl_lo", "kl_hi", "top1", "mass", "recall", "mass_seed",
                                                      "recall_seed", "ann_recall", "kv_rows")}
                d["name"] = L.subq_eval_method_name(lib.byref(m), buf, 64).decode()
                d["selector"] = selectors[sel_codes.index(m.select)] if m.select in sel_codes else m.select
                methods.append(d)
            return {"full_ppl": r.full_ppl, "n_scored": r.n_scored, "n_windows": r.n_windows, "ctx": r.ctx,
                    "seconds": r.seconds, "methods": methods}
        finally:
            if res:
                L.subq_eval_result_free(res)
            if s:
                L.subq_search_free(s)
            del keep

    def train_search(self, files, out_path, layers, steps=1000, d_search=None, rope_dims=None, seq=512, pack=True,
                     eval_frac=0.05, eval_files=(), granularity="layer", resume=False, init=None, **fields):
        """subq train-search (lab): learn search projections for `layers` (a layer list: "1-3", "all", ...) by
        distillation from this model's attention, on files (text, directories, JSON lines; eval_files held
        out), and write them to out_path (a checkpoint beside it, out_path + ".ckpt"; resume continues it).
        fields: subq_train_params' (batch, lr, warmup, seed, eval_every, save_every, ...), the loss's (tau,
        k_pos, n_sink, n_tail, ...) or init_std; the C defaults otherwise. Returns the run's result as a
        dict. init: start from a projection file's weights, or "native" for the model's own W_q / W_k
        (train-search --init). Ctrl-C stops between steps, writing the weights and a checkpoint (then
        KeyboardInterrupt)."""
        L = self._lib
        err = lib.subq_error()
        n_layer = self.info["n_layer"]
        mask = (lib.ctypes.c_ubyte * n_layer)()
        _check(L.subq_parse_layers(str(layers).encode(), n_layer, mask, lib.byref(err)), err)
        chosen = [i for i in range(n_layer) if mask[i]]
        p = L.subq_train_search_default_params()
        c_layers = (lib.c_int * max(1, len(chosen)))(*chosen)
        p.train.layers, p.train.n_layers = c_layers, len(chosen)
        out = str(out_path).encode()
        p.train.out_path, p.train.resume = out, int(bool(resume))
        p.train.n_threads = L.subq_context_n_threads(self._ctx)
        p.train.steps = int(steps)
        if d_search is not None:
            p.d_search = int(d_search)
        if rope_dims is not None:
            p.rope_dims = int(rope_dims)
        init_b = None if init is None else str(init).encode()
        p.init_from = init_b
        g = L.subq_search_granularity_parse(str(granularity).encode())
        if g < 0:
            raise SubqError(lib.SUBQ_ERR_ARG, "unknown granularity %r (layer, kv-head, head)" % granularity)
        p.granularity = g
        train_f = dict(lib.subq_train_params._fields_)
        loss_f = dict(lib.subq_search_loss_params._fields_)
        for k, v in fields.items():
            if k in train_f and k not in ("layers", "n_layers", "out_path", "comm"):
                setattr(p.train, k, v)
            elif k in loss_f:
                setattr(p.loss, k, v)
            elif k in ("init_std", "rope_base", "rope_scale"):
                setattr(p, k, v)
            else:
                raise SubqError(lib.SUBQ_ERR_ARG, "no train-search parameter %r" % k)
        cp = lib.subq_corpus_params(seq=int(seq), pack=int(bool(pack)), eval_frac=float(eval_frac),
                                    seed=p.train.seed, eval_only=0)
        fs = [str(f).encode() for f in files]
        es = [str(f).encode() for f in eval_files]
        corpus = lib.c_void_p()
        _check(L.subq_corpus_load(self._model, lib.byref(cp), (lib.c_char_p * max(1, len(fs)))(*fs), len(fs),
                                  (lib.c_char_p * max(1, len(es)))(*es), len(es), lib.byref(corpus), lib.byref(err)),
               err)
        stop_flag = lib.c_int(0)
        stop = _Stop(flag=stop_flag)
        # a Python callback each step, so that a pending Ctrl-C runs its handler (which sets the flag) while
        # the C loop runs: Python handles signals only when it runs Python code
        on_step = lib.train_step_fn(stop.guard(lambda user, stats: 0))
        hooks = lib.subq_train_hooks(stop=lib.ctypes.pointer(stop_flag),
                                     on_step=lib.ctypes.cast(on_step, lib.c_void_p))
        res = lib.subq_train_result()
        try:
            with stop.sigint():
                st = L.subq_train_search(self._model, corpus, lib.byref(p), lib.byref(hooks), lib.byref(res),
                                         lib.byref(err))
            _check(st, err)
        finally:
            L.subq_corpus_free(corpus)
        return {f: getattr(res, f) for f, _ in lib.subq_train_result._fields_}
