#!/usr/bin/python3
"""ctest check: `subq train-search` runs, checkpoints and resumes exactly.

On stories260K with a small corpus:
  * an uninterrupted run and runs interrupted (--stop-after, twice in a row,
    and by SIGINT) then resumed end with bit-identical weights, and the
    checkpoints' Adam moments agree too;
  * the output file has the agreed layout (tensor names, llama.cpp weight
    orientation ne = {d_model, d_search}, f32) and metadata
    (subq.search.*: d_search, layers, model fingerprint, step, losses, config);
  * the JSON-lines log holds train and eval records;
  * the defaults train over the runtime's retrieval set (sink 4, tail 16) and
    --sink 0 --tail 0 stays reachable;
  * --grad-accum N over --batch B is the same step as --batch N*B (weights
    equal up to float rounding), and it resumes exactly;
  * the search space's rotation (--rope-dims, default half of d_search) is
    in the file, a resume or --init with another is refused in one line, and
    --init FILE starts from FILE's weights (with lr 0 they stay FILE's);
  * the --help of both trainers documents every option their parsers accept;
  * resuming with other options, other data or another model, or without a
    checkpoint, and bad options, fail with one 'subq ...' line on stderr, and
    a refused resume leaves no log behind (nor touches an existing one).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402
# ctest runs checks side by side on few cores: OpenMP workers that spin while
# waiting make oversubscribed runs ~10x slower (results are the same either way)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
from gguf_np import GGUFFile  # noqa: E402

THREADS = "2"


def tensors(path):
    g = GGUFFile(path)
    return g, {n: g.raw_bytes(n) for n in g.tensor_names()}


def run_cli(args, timeout=300):
    p = subprocess.run([rc.subq_bin()] + [str(a) for a in args], capture_output=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def one_line_error(checks, name, args, contains=None):
    rcode, _, err = run_cli(args)
    lines = [l for l in err.split("\n") if l.strip()]
    ok = rcode == 1 and len(lines) == 1 and lines[0].startswith("subq") and (contains is None or contains in lines[0])
    checks.check(name, ok, "exit %d, stderr %r" % (rcode, err[-300:]))


def main():
    checks = rc.Checks("check_train_resume")
    model = rc.shared_file("models", "stories260K.gguf")
    shakespeare = rc.shared_file("data", "text", "tinyshakespeare.txt")
    tmp = os.path.join(rc.tmp_dir(), "train_resume")
    shutil.rmtree(tmp, ignore_errors=True)   # stale logs and checkpoints would fool the checks
    os.makedirs(tmp)
    data = os.path.join(tmp, "data.txt")
    with open(shakespeare, "rb") as f:
        text = f.read(60000)
    with open(data, "wb") as f:
        f.write(text[:text.rfind(b"\n") + 1])
    other_data = os.path.join(tmp, "other.txt")
    with open(other_data, "wb") as f:
        f.write(text[:30000])

    base = ["train-search", "-m", model, data, "--seq", "128", "--batch", "2", "--steps", "9", "--warmup", "2",
            "--lr", "0.01", "--d-search", "16", "--save-every", "4", "--eval-every", "4", "--eval-tokens", "512",
            "--eval-k", "4,8,16", "--k-pos", "8", "-t", THREADS]

    def out(name):
        return os.path.join(tmp, name + ".gguf")

    # ---- uninterrupted reference run --------------------------------------
    a = out("a")
    if checks.guarded("uninterrupted run", rc.run_subq, base + ["-o", a, "--json"]) is None:
        checks.finish()
    ga, ta = tensors(a)
    _, ta_ck = tensors(a + ".ckpt")

    # ---- layout and metadata ----------------------------------------------
    L = [1, 2, 3, 4]   # --layers all --reserve 0 on 5 layers
    names = sorted(n for l in L for n in ("blk.%d.indexer.proj.weight" % l, "blk.%d.indexer.attn_k.weight" % l))
    checks.check("output tensors", sorted(ta) == names, str(sorted(ta)))
    shapes_ok = all(ga.tensor_infos[n].ne == [64, 16] and ga.tensor_infos[n].type == 0 for n in names)
    checks.check("orientation ne = {d_model, d_search}, f32", shapes_ok,
                 str({n: ga.tensor_infos[n].ne for n in names[:2]}))
    md = ga.metadata
    fp = md.get("subq.search.model_fingerprint", "")
    meta_ok = (md.get("general.architecture") == "subq-search" and md.get("subq.search.d_search") == 16
               and list(md.get("subq.search.layers", [])) == L and len(fp) == 16
               and all(c in "0123456789abcdef" for c in fp) and md.get("subq.search.model_n_embd") == 64
               and md.get("subq.search.step") == 9 and "subq.search.loss.train" in md
               and "subq.search.loss.eval" in md and abs(md.get("subq.search.config.lr", 0) - 0.01) < 1e-9
               and md.get("subq.search.config.head_agg") == "max" and md.get("subq.search.config.seq") == 128
               and abs(md.get("subq.search.config.tau", 0) - 0.07) < 1e-7 and md.get("subq.search.config.k_pos") == 8
               and md.get("subq.search.config.n_sink") == 4 and md.get("subq.search.config.n_tail") == 16
               and md.get("subq.search.config.grad_accum") == 1)
    checks.check("metadata", meta_ok, json.dumps({k: v for k, v in md.items() if k.startswith("subq.") or
                                                  k.startswith("general.")}, default=str)[:600])
    ck_names = set(ta_ck)
    checks.check("checkpoint holds Adam moments",
                 all("blk.%d.indexer.%s.adam_%s" % (l, w, mv) in ck_names for l in L for w in ("proj", "attn_k")
                     for mv in "mv"), str(sorted(ck_names)[:6]))

    # ---- JSON-lines log ---------------------------------------------------
    try:
        recs = [json.loads(l) for l in open(a + ".log.jsonl")]
        kinds = [r["type"] for r in recs]
        evals = [r for r in recs if r["type"] == "eval"]
        ok = (kinds.count("train") == 9 and [e["step"] for e in evals] == [0, 4, 8, 9]
              and all(len(x[m]) == 3 for x in evals[-1]["layers"] for m in ("mass_learned", "mass_oracle", "mass_window",
                                                                             "recall_learned", "recall_oracle",
                                                                             "recall_window"))
              and kinds[-1] == "end")
        checks.check("log records", ok, "kinds %s, eval steps %s" % (kinds[:4], [e["step"] for e in evals]))
    except (OSError, ValueError, KeyError) as e:
        checks.check("log records", False, str(e))

    # ---- stop + resume ----------------------------------------------------
    b = out("b")
    if checks.guarded("stop after step 5", rc.run_subq, base + ["-o", b, "--stop-after", "5"]) is not None:
        gb = GGUFFile(b + ".ckpt")
        checks.check("checkpoint at step 5", gb.get("subq.search.step") == 5, str(gb.get("subq.search.step")))
        if checks.guarded("resume from step 5", rc.run_subq, base + ["-o", b, "--resume"]) is not None:
            _, tb = tensors(b)
            _, tb_ck = tensors(b + ".ckpt")
            checks.check("resumed weights == uninterrupted (bitwise)", tb == ta)
            checks.check("resumed Adam moments == uninterrupted (bitwise)", tb_ck == ta_ck)
    c = out("c")
    if (checks.guarded("stop after 2", rc.run_subq, base + ["-o", c, "--stop-after", "2"]) is not None and
            checks.guarded("resume, stop after 7", rc.run_subq, base + ["-o", c, "--resume", "--stop-after", "7"])
            is not None and checks.guarded("resume to the end", rc.run_subq, base + ["-o", c, "--resume"]) is not None):
        _, tc = tensors(c)
        checks.check("twice-interrupted weights == uninterrupted (bitwise)", tc == ta)

    # ---- --sink / --tail: recorded, and part of the resume check -----------
    f = out("f")
    st = ["--sink", "2", "--tail", "4"]
    if checks.guarded("--sink 2 --tail 4, stop after 5", rc.run_subq, base + st + ["-o", f, "--stop-after", "5"]) \
            is not None:
        mf = GGUFFile(f + ".ckpt").metadata
        checks.check("sink/tail in the checkpoint's config", (mf.get("subq.search.config.n_sink"),
                                                               mf.get("subq.search.config.n_tail")) == (2, 4),
                     str((mf.get("subq.search.config.n_sink"), mf.get("subq.search.config.n_tail"))))
        one_line_error(checks, "resume with another --tail", base + ["--sink", "2", "-o", f, "--resume"],
                       "option n_tail")
        one_line_error(checks, "resume with another --sink", base + ["--sink", "3", "--tail", "4", "-o", f, "--resume"],
                       "option n_sink")
        if checks.guarded("resume with the same --sink / --tail", rc.run_subq, base + st + ["-o", f, "--resume"]) \
                is not None:
            mf = GGUFFile(f).metadata
            _, tf = tensors(f)
            checks.check("sink/tail in the output's config, weights differ from the default (4 / 16) run",
                         (mf.get("subq.search.config.n_sink"), mf.get("subq.search.config.n_tail")) == (2, 4)
                         and mf.get("subq.search.step") == 9 and tf != ta, str(mf.get("subq.search.step")))

    # ---- --grad-accum: N micro-batches of B sequences == one batch of N*B ----
    def weights(path):
        g = GGUFFile(path)
        return {n: g.tensor(n).astype(np.float64) for n in g.tensor_names()}

    def with_opts(args, **kv):  # args with the values of some options replaced
        args = list(args)
        for k, v in kv.items():
            args[args.index("--" + k) + 1] = v
        return args

    # ---- the rotary part of the search space: recorded, resumed, --init -------
    checks.check("rotation in the file: half of d_search 16, base 10000, scale 1 by default",
                 (md.get("subq.search.rope_dims"), md.get("subq.search.rope_base"), md.get("subq.search.rope_scale"))
                 == (8, 10000.0, 1.0), str(md.get("subq.search.rope_dims")))
    r = out("rot")
    if checks.guarded("--rope-dims 4, stop after 2", rc.run_subq, base + ["--rope-dims", "4", "-o", r,
                                                                          "--stop-after", "2"]) is not None:
        one_line_error(checks, "resume with another --rope-dims", base + ["-o", r, "--resume"], "--rope-dims")
    one_line_error(checks, "--init from another rotation", base + ["--rope-dims", "4", "--init", a, "-o", out("i2")],
                   "--rope-dims")
    one_line_error(checks, "odd --rope-dims", base + ["--rope-dims", "3", "-o", out("i3")], "even")
    i0 = out("init0")
    if checks.guarded("--init a --lr 0", rc.run_subq, with_opts(base, lr="0", steps="2") + ["--init", a, "-o", i0]) \
            is not None:
        checks.check("--init with lr 0 keeps the file's weights (bitwise)", tensors(i0)[1] == ta)

    acc = with_opts(base, steps="3", batch="1") + ["--sink", "0", "--tail", "0"]
    g1, g3 = out("accum3"), out("batch3")
    if (checks.guarded("--batch 1 --grad-accum 3", rc.run_subq, acc + ["--grad-accum", "3", "-o", g1])
            is not None and checks.guarded("--batch 3", rc.run_subq, with_opts(acc, batch="3") + ["-o", g3]) is not None):
        w1, w3 = weights(g1), weights(g3)
        worst = max(float(np.max(np.abs(w1[n] - w3[n]) / (np.max(np.abs(w3[n])) + 1e-30))) for n in w3)
        checks.check("grad-accum 3 x batch 1 == batch 3 (up to float rounding)", sorted(w1) == sorted(w3)
                     and worst < 1e-5, "worst relative difference %.3g" % worst)
        m1 = GGUFFile(g1 + ".ckpt").metadata
        checks.check("grad-accum recorded; 3 sequences per step consumed; --sink 0 --tail 0 recorded",
                     (m1.get("subq.search.config.grad_accum"), m1.get("subq.train.cursor"),
                      m1.get("subq.search.config.n_sink"), m1.get("subq.search.config.n_tail")) == (3, 9, 0, 0),
                     str((m1.get("subq.search.config.grad_accum"), m1.get("subq.train.cursor"),
                          m1.get("subq.search.config.n_sink"), m1.get("subq.search.config.n_tail"))))
        g1r = out("accum3r")
        if checks.guarded("grad-accum, stop after 1", rc.run_subq,
                          acc + ["--grad-accum", "3", "-o", g1r, "--stop-after", "1"]) is not None:
            one_line_error(checks, "resume with another --grad-accum",
                           acc + ["--grad-accum", "2", "-o", g1r, "--resume"], "option grad_accum")
            if checks.guarded("grad-accum, resume", rc.run_subq,
                              acc + ["--grad-accum", "3", "-o", g1r, "--resume"]) is not None:
                checks.check("grad-accum resumed weights == uninterrupted (bitwise)", tensors(g1r)[1] == tensors(g1)[1])

    # ---- Ctrl-C ------------------------------------------------------------
    sig = ["train-search", "-m", model, data, "--seq", "64", "--steps", "300", "--lr", "0.01", "--d-search", "8",
           "--eval-every", "0", "--save-every", "0", "-t", THREADS]
    d = out("d")
    e = out("e")
    if checks.guarded("uninterrupted 300-step run", rc.run_subq, sig + ["-o", d]) is not None:
        p = subprocess.Popen([rc.subq_bin()] + sig + ["-o", e], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        t0 = time.time()
        step = 0
        while time.time() - t0 < 60 and p.poll() is None and step < 5:
            time.sleep(0.02)
            try:
                for line in open(e + ".log.jsonl"):
                    r = json.loads(line)
                    if r.get("type") == "train":
                        step = r["step"]
            except (OSError, ValueError):
                pass
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        err = err.decode("utf-8", "replace")
        stopped = GGUFFile(e + ".ckpt").get("subq.search.step") if os.path.exists(e + ".ckpt") else -1
        checks.check("SIGINT saves a checkpoint and exits 0", p.returncode == 0 and 0 < stopped < 300
                     and "interrupted" in err, "exit %d, checkpoint step %s, stderr %r" % (p.returncode, stopped,
                                                                                           err[-200:]))
        if checks.guarded("resume after SIGINT", rc.run_subq, sig + ["-o", e, "--resume"]) is not None:
            checks.check("SIGINT + resume weights == uninterrupted (bitwise)", tensors(e)[1] == tensors(d)[1])

    # ---- --help documents every option the parser accepts (both trainers) ---
    import re
    for cmd, src in (("train-search", "cmd_train_search.c"), ("train-phi", "cmd_train_phi.c")):
        srcs = [os.path.join(os.environ.get("SUBQ_SRC") or rc.REPO, "tools", "subq", f) for f in (src, "cli_train.c")]
        try:
            flags = set(f for s in srcs for f in re.findall(r'"(--?[a-z][a-z0-9-]*)"', open(s).read())) - {"-"}
            code, help_text, _ = run_cli([cmd, "--help"])
            missing = sorted(f for f in flags if not re.search(r"(^|[\s,])%s([\s,]|$)" % re.escape(f), help_text, re.M))
            checks.check("%s --help documents every option" % cmd, code == 0 and flags and not missing,
                         "%d options, undocumented: %s" % (len(flags), missing))
        except OSError as e:
            checks.check("%s --help documents every option" % cmd, False, str(e))

    # ---- refusals ----------------------------------------------------------
    a_log = open(a + ".log.jsonl", "rb").read()
    one_line_error(checks, "resume with another --lr", base[:-2] + ["-o", a, "--resume", "-t", THREADS] +
                   ["--lr", "0.02"], "option lr")
    other_args = [x if x != data else other_data for x in base]
    one_line_error(checks, "resume with other data", other_args + ["-o", a, "--resume"], "other data")
    one_line_error(checks, "resume with another --sink", base + ["-o", a, "--resume", "--sink", "0"], "option n_sink")
    synth = os.path.join(tmp, "synth.gguf")
    if checks.guarded("synth model", rc.run_subq, ["synth", "--shape", "stories260k", "--type", "f32", "-s", "3",
                                                    "-o", synth]) is not None:
        one_line_error(checks, "resume with another model", [x if x != model else synth for x in base] +
                       ["-o", a, "--resume"], "trained for another model")
    one_line_error(checks, "resume without a checkpoint", base + ["-o", out("none"), "--resume"], "does not exist")
    checks.check("a refused resume leaves no log behind", not os.path.exists(out("none") + ".log.jsonl"))
    checks.check("refused resumes leave the existing log as it was", open(a + ".log.jsonl", "rb").read() == a_log)
    one_line_error(checks, "bad --head-agg", base + ["-o", out("x"), "--head-agg", "sum"], "--head-agg")
    one_line_error(checks, "bad --layers", base + ["-o", out("x"), "--layers", "7"], "--layers")
    one_line_error(checks, "no layer left", base + ["-o", out("x"), "--layers", "0"], "no layer")
    one_line_error(checks, "no output", base, "-o")
    a_bytes = open(a, "rb").read()
    one_line_error(checks, "an existing output without --resume or --force", base + ["-o", a], "--force")
    checks.check("the refused run left the output as it was", open(a, "rb").read() == a_bytes)
    rcode, _, err = run_cli(base + ["-o", a, "--resume"])
    checks.check("resuming a finished run says there is nothing to train", rcode == 0 and "nothing to train" in err
                 and "0 tok/s" not in err, err[-300:])
    one_line_error(checks, "missing data file", ["train-search", "-m", model, "/nonexistent.txt", "-o", out("x")],
                   "/nonexistent.txt")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    one_line_error(checks, "empty data", ["train-search", "-m", model, empty, "-o", out("x")], "no text")
    one_line_error(checks, "unknown option", base + ["-o", out("x"), "--frobnicate"], "unknown option")
    checks.finish()


if __name__ == "__main__":
    main()
