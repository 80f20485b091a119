#!/usr/bin/python3
"""ctest check: HNSW graphs saved with a session are read back instead of
rebuilt, and continue it exactly as a rebuild does.

On the 4K fixture with its rope search projections, `--select hnsw --topk 64
--far-pos group --search-f16` (the content graph over f16 keys), a prompt of
about 1,500 tokens and greedy decoding:
  - --prompt-cache P: P holds index.L beside each search.L; a second run
    says it read the graphs of the prompt's tokens and writes the bytes the
    first run wrote; with its indexes damaged (a byte flipped: their checksums) it
    says nothing of graphs, rebuilds them and writes the same bytes;
  - --kv-file F: F.hnsw is written when a run ends (`info --kv-file` counts
    its graphs and their tokens); a resume says it read
    the graphs of the tokens F holds and continues with the bytes a resume
    without F.hnsw (graphs rebuilt) gives, and both leave byte-identical
    F.hnsw files (a graph read and grown equals one built by inserts); an
    older F.hnsw (fewer tokens) is read as far as it goes, the rest
    inserted, with the same bytes out and the same F.hnsw after; a damaged
    F.hnsw, or a text file, a directory or a FIFO in its place, is rebuilt
    from the keys: the same bytes (nothing blocks on the FIFO).
"""

import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402
import refcommon as rc  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def generate(args):
    """(stdout bytes, stderr text) of `subq generate ARGS`; a failure raises SubqError."""
    cmd = [rc.subq_bin(), "generate"] + [str(a) for a in args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rc.subq_env(), timeout=600)
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        raise rc.SubqError("exit %d: %s\n%s" % (r.returncode, " ".join(cmd), err[-2000:]))
    return r.stdout, err


def graphs_read(err):
    """The tokens whose graphs a run says it read (0: none said)."""
    m = re.search(r"HNSW graphs of (\d+) read", err)
    return int(m.group(1)) if m else 0


def flip_index_bytes(path):
    """Flip a byte inside the links of every index.L tensor of a GGUF file."""
    g = gguf_np.GGUFFile(path)
    with open(path, "r+b") as f:
        for name in (n for n in g.tensor_names() if n.startswith("index.")):
            at = g.data_offset + g.tensor_infos[name].offset + g.tensor_infos[name].n_bytes() // 2
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x10]))


def check_prompt_cache(ck, common, prompt, n_prompt, tmp):
    cache = os.path.join(tmp, "cache.gguf")
    out1, _ = generate(common + ["-f", prompt, "--prompt-cache", cache])
    g = gguf_np.GGUFFile(cache)
    search = sorted(n.split(".")[1] for n in g.tensor_names() if n.startswith("search."))
    index = sorted(n.split(".")[1] for n in g.tensor_names() if n.startswith("index."))
    ck.check("prompt cache: an index beside each layer's search keys", search and index == search,
             "search.L %s, index.L %s" % (search, index))
    out2, err2 = generate(common + ["-f", prompt, "--prompt-cache", cache])
    ck.check("prompt cache: read, not rebuilt", graphs_read(err2) == n_prompt,
             "said %d (prompt %d tokens)" % (graphs_read(err2), n_prompt))
    ck.check("prompt cache: the bytes of the first run", out2 == out1, "%d and %d bytes" % (len(out1), len(out2)))
    flip_index_bytes(cache)
    out3, err3 = generate(common + ["-f", prompt, "--prompt-cache", cache])
    ck.check("prompt cache: a damaged graph is rebuilt, the same bytes", graphs_read(err3) == 0 and out3 == out1,
             "said %d; %d and %d bytes" % (graphs_read(err3), len(out1), len(out3)))


def check_kv_file(ck, common, prompt, tmp):
    def path(name):
        return os.path.join(tmp, name)

    def copy(src, dst, side=None):
        """dst (and dst.hnsw from side, else none) as a copy of src"""
        shutil.copyfile(src, dst)
        if os.path.exists(dst + ".hnsw"):
            os.unlink(dst + ".hnsw")
        if side:
            shutil.copyfile(side, dst + ".hnsw")

    def resume(name):
        return generate(common + ["--kv-file", path(name)])

    def held(err):
        m = re.search(r"KV file \S+: (\d+) tokens held", err)
        return int(m.group(1)) if m else -1

    f = path("f.kv")
    generate(common + ["-f", prompt, "--kv-file", f])
    ck.check("kv file: FILE.hnsw written at the end", os.path.exists(f + ".hnsw"))
    meta = json.loads(rc.run_subq(["info", "--kv-file", f, "--json"]))
    ck.check("kv file: info counts its graphs", meta["n_graph_layers"] == meta["n_search_layers"] > 0 and
             meta["n_graph_tokens"] == meta["n_committed"], "%d layers over %d tokens; %d sparse layers, %d tokens"
             % (meta["n_graph_layers"], meta["n_graph_tokens"], meta["n_search_layers"], meta["n_committed"]))
    copy(f, path("f1.kv"), f + ".hnsw")  # the session and its graphs after the prompt
    shutil.copyfile(f + ".hnsw", path("older.hnsw"))

    out, err = resume("f.kv")
    n1 = held(err)
    ck.check("kv file: a resume reads the graphs of every token held", n1 > 0 and graphs_read(err) == n1,
             "%d held, said %d" % (n1, graphs_read(err)))
    copy(path("f1.kv"), path("g.kv"))
    out_g, err_g = resume("g.kv")
    ck.check("kv file: without FILE.hnsw, rebuilt: the same bytes", graphs_read(err_g) == 0 and out_g == out,
             "said %d; %d and %d bytes" % (graphs_read(err_g), len(out), len(out_g)))
    with open(f + ".hnsw", "rb") as a, open(path("g.kv.hnsw"), "rb") as b:
        ck.check("kv file: graphs read and grown equal graphs rebuilt (FILE.hnsw bytes)", a.read() == b.read())

    # from here f holds more tokens than older.hnsw covers
    copy(f, path("j.kv"), f + ".hnsw")
    out_j, err_j = resume("j.kv")
    copy(f, path("h.kv"), path("older.hnsw"))
    out_h, err_h = resume("h.kv")
    ck.check("kv file: an older FILE.hnsw is read as far as it goes", graphs_read(err_h) == n1 < held(err_h),
             "said %d of %d held (older: %d)" % (graphs_read(err_h), held(err_h), n1))
    ck.check("kv file: ... with the bytes of a whole one", out_h == out_j and graphs_read(err_j) == held(err_j),
             "%d and %d bytes" % (len(out_j), len(out_h)))
    with open(path("h.kv.hnsw"), "rb") as a, open(path("j.kv.hnsw"), "rb") as b:
        ck.check("kv file: ... and the same FILE.hnsw after", a.read() == b.read())
    copy(f, path("k.kv"), f + ".hnsw")
    flip_index_bytes(path("k.kv.hnsw"))
    out_k, err_k = resume("k.kv")
    ck.check("kv file: a damaged FILE.hnsw is rebuilt, the same bytes", graphs_read(err_k) == 0 and out_k == out_j,
             "said %d; %d and %d bytes" % (graphs_read(err_k), len(out_j), len(out_k)))
    copy(f, path("t.kv"))
    with open(path("t.kv.hnsw"), "w") as t:
        t.write("not a graph\n")
    out_t, err_t = resume("t.kv")
    ck.check("kv file: a text file as FILE.hnsw is rebuilt, the same bytes", graphs_read(err_t) == 0 and out_t == out_j,
             "said %d" % graphs_read(err_t))
    for kind in ("directory", "fifo"):  # neither is read (a FIFO must not block the resume)
        copy(f, path("%s.kv" % kind))
        side = path("%s.kv.hnsw" % kind)
        os.mkdir(side) if kind == "directory" else os.mkfifo(side)
        try:
            out_x, err_x = resume("%s.kv" % kind)
            ck.check("kv file: a %s as FILE.hnsw is rebuilt, the same bytes" % kind,
                     graphs_read(err_x) == 0 and out_x == out_j, "said %d" % graphs_read(err_x))
        except rc.SubqError as e:
            ck.check("kv file: a %s as FILE.hnsw is rebuilt, the same bytes" % kind, False, str(e))


def main():
    ck = rc.Checks("check_saved_graphs")
    model = rc.shared_file("models", "fixture-4k-29m-q8_0.gguf")
    search = os.path.join(REPO, "tests", "models", "fixture-4k-search-rope.gguf")
    tmp = os.path.join(rc.tmp_dir(), "saved_graphs_%d" % os.getpid())
    os.makedirs(tmp, exist_ok=True)
    with open(rc.shared_file("data", "text", "wikitext-2-raw.test.txt"), "rb") as f:
        text = f.read(7000).decode("utf-8", "ignore")
    prompt = os.path.join(tmp, "prompt.txt")
    with open(prompt, "w") as f:
        f.write(text)
    n_prompt = len(rc.run_subq(["tokenize", "-m", model, "-f", prompt]).split())
    common = ["-m", model, "--search", search, "--select", "hnsw", "--topk", 64, "--far-pos", "group",
              "--search-f16", "-c", 4096, "-n", 12, "--temp", 0, "-t", 2]
    ck.guarded("prompt cache", check_prompt_cache, ck, common, prompt, n_prompt, tmp)
    ck.guarded("kv file", check_kv_file, ck, common, prompt, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    ck.finish()


if __name__ == "__main__":
    main()
