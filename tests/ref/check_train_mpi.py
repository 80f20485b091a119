#!/usr/bin/python3
"""ctest check: data-parallel training under mpirun (Open MPI), stories260K.

1. 2 ranks train as 1 does: `mpirun -np 2 subq train-search --batch 2`
   (each rank one sequence a step) ends with the weights of one process at
   --batch 2, within 1e-5; the same for train-phi; only rank 0 writes (one
   log, one "wrote" line).
2. A 2-rank checkpoint resumes with 1 rank: stop 2 ranks after step 2,
   resume alone to the end: the weights of the uninterrupted run.
3. Ranks that disagree on an option fail at the start, naming it.
4. A rank that is killed, or stops answering (SIGSTOP, --mpi-timeout 3),
   ends the run with an error within seconds, never a hang.
mpirun runs as root where CI does (OMPI_ALLOW_RUN_AS_ROOT)."""

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
from gguf_np import GGUFFile  # noqa: E402


def env():
    e = rc.subq_env()
    e.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1",
              "OMP_WAIT_POLICY": "passive"})
    return e


def mpirun(n, args, timeout=300):
    cmd = ["mpirun", "--oversubscribe", "-np", str(n), rc.subq_bin()] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env(), stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def alone(args, timeout=300):
    p = subprocess.run([rc.subq_bin()] + [str(a) for a in args], capture_output=True, timeout=timeout, env=env(),
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def weights(path):
    g = GGUFFile(path)
    return {n: np.frombuffer(g.raw_bytes(n), dtype=np.float32) for n in g.tensor_names()}


def worst(a, b):
    if sorted(a) != sorted(b):
        return float("inf")
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def main():
    ck = rc.Checks("check_train_mpi")
    if not shutil.which("mpirun"):
        ck.check("mpirun is installed (openmpi-bin, scripts/install-deps.sh)", False)
        ck.finish()
    model = rc.shared_file("models", "stories260K.gguf")
    tmp = os.path.join(rc.tmp_dir(), "train_mpi")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    data = os.path.join(tmp, "data.txt")
    with open(rc.shared_file("data", "text", "tinyshakespeare.txt"), "rb") as f:
        text = f.read(60000)
    with open(data, "wb") as f:
        f.write(text[:text.rfind(b"\n") + 1])
    out = lambda n: os.path.join(tmp, n + ".gguf")  # noqa: E731
    search = ["train-search", "-m", model, data, "--seq", "128", "--batch", "2", "--steps", "6", "--warmup", "1",
              "--lr", "0.01", "--d-search", "16", "--eval-every", "3", "--eval-tokens", "1024", "--save-every", "2",
              "-t", "1"]

    # ---- 1. two ranks follow one process
    code, _, err1 = alone(search + ["-o", out("one")])
    ck.check("one process trains", code == 0, err1[-300:])
    code, _, err2 = mpirun(2, search + ["-o", out("two")])
    ck.check("two ranks train", code == 0, err2[-600:])
    if code == 0:
        d = worst(weights(out("one")), weights(out("two")))
        ck.check("2 ranks x 1 sequence == 1 process x 2 sequences (weights within 1e-5)", d <= 1e-5, "max diff %g" % d)
        ck.check("rank 0 alone reports", err2.count("wrote ") == 1 and err2.count("starting at step 0") == 1,
                 err2[-400:])
        logs = open(out("two") + ".log.jsonl").read().count('"type": "train"')
        ck.check("one log, written by rank 0", logs == 6, "%d train records" % logs)
    # ---- 1b. a pre-tokenised corpus: the same run, each rank reading only its share
    corpus = os.path.join(tmp, "corpus.gguf")
    code, out_tok, err = alone(["tokenize", "-m", model, "--data", data, "-o", corpus])
    ck.check("subq tokenize --data -o writes a corpus file", code == 0 and os.path.exists(corpus), err[-300:])
    code, _, err3 = mpirun(2, [corpus if a == data else a for a in search] + ["-o", out("tok")])
    ck.check("two ranks train from the corpus file", code == 0, err3[-600:])
    if code == 0:
        d = worst(weights(out("one")), weights(out("tok")))
        ck.check("... to the weights of one process on the text (within 1e-5)", d <= 1e-5, "max diff %g" % d)
        reads = {}
        for line in err3.splitlines():
            w = line.split()
            if "read" in w and "corpus" in line:  # "subq train-search: rank R read N of the corpus file's T tokens"
                reads[int(w[w.index("rank") + 1])] = (int(w[w.index("read") + 1]), int(w[-2]))
        ck.check("each rank reports what it read", sorted(reads) == [0, 1], err3[-400:])
        if sorted(reads) == [0, 1]:
            total = reads[0][1]
            # 6 steps x 1 sequence of <= 128 tokens and half of 2 evaluations of 1024 tokens, of ~37K
            ck.check("each rank read only its share (under 10% of the file, more than nothing)",
                     all(0 < n <= 0.1 * total for n, _ in reads.values()), str(reads))

    phi = ["train-phi", "-m", model, data, "--seq", "128", "--batch", "2", "--steps", "4", "--warmup", "1",
           "--lr", "0.01", "--layers", "2", "--d-phi", "8", "--d-emb", "8", "--d-hidden", "8", "--eval-every", "2",
           "--eval-tokens", "512", "-t", "1"]
    c1, _, e1 = alone(phi + ["-o", out("phi_one")])
    c2, _, e2 = mpirun(2, phi + ["-o", out("phi_two")])
    ck.check("train-phi: 2 ranks == 1 process", c1 == 0 and c2 == 0 and
             worst(weights(out("phi_one")), weights(out("phi_two"))) <= 1e-5, (e1 + e2)[-600:])

    # ---- 2. a 2-rank checkpoint resumed by one process
    code, _, err = mpirun(2, search + ["-o", out("split"), "--stop-after", "2"])
    ck.check("two ranks stop after step 2", code == 0 and os.path.exists(out("split") + ".ckpt"), err[-400:])
    code, _, err = alone(search + ["-o", out("split"), "--resume"])
    ck.check("one process resumes the 2-rank checkpoint", code == 0, err[-300:])
    if code == 0:
        d = worst(weights(out("one")), weights(out("split")))
        ck.check("... and ends with the uninterrupted run's weights", d <= 1e-5, "max diff %g" % d)

    # ---- 3. ranks that disagree
    cmd = ["mpirun", "--oversubscribe", "-np", "1", rc.subq_bin()] + search + ["-o", out("dis")] + \
          [":", "-np", "1", rc.subq_bin()] + search[:-2] + ["--lr", "0.02", "-t", "1", "-o", out("dis")]
    p = subprocess.run(cmd, capture_output=True, timeout=120, env=env(), stdin=subprocess.DEVNULL)
    err = p.stderr.decode("utf-8", "replace")
    ck.check("ranks with another --lr fail at the start, naming it", p.returncode != 0 and "ranks disagree" in err and
             "lr=0.02" in err and "lr=0.01" in err, err[-600:])

    # ---- 4. a rank that dies or stops answering
    long_run = search[:search.index("--steps")] + ["--steps", "100000"] + search[search.index("--steps") + 2:]
    for how in ("killed", "stopped"):
        args = ["mpirun", "--oversubscribe", "-np", "2", rc.subq_bin()] + long_run + \
               ["-o", out("fail_" + how), "--mpi-timeout", "3", "--force"]
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env(),
                             stdin=subprocess.DEVNULL, start_new_session=True)
        log = out("fail_" + how) + ".log.jsonl"
        deadline = time.time() + 60
        while time.time() < deadline and not (os.path.exists(log) and '"type": "train"' in open(log).read()):
            time.sleep(0.2)
        ranks = subprocess.run(["pgrep", "-f", out("fail_" + how)], capture_output=True, text=True).stdout.split()
        ranks = sorted(int(r) for r in ranks if int(r) != p.pid)
        victim = [r for r in ranks if "mpirun" not in open("/proc/%d/cmdline" % r).read()][-1:] if ranks else []
        t0 = time.time()
        for r in victim:
            os.kill(r, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        try:
            _, err = p.communicate(timeout=60)
            code = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
            code = None
        for r in victim:  # a stopped rank left behind
            try:
                os.kill(r, signal.SIGKILL)
            except ProcessLookupError:
                pass
        ck.check("a %s rank ends the run with an error within seconds" % how,
                 bool(victim) and code not in (None, 0) and time.time() - t0 < 30,
                 "victim %s, exit %s after %.1f s: %s" % (victim, code, time.time() - t0, err.decode()[-400:]))
    ck.finish()


if __name__ == "__main__":
    main()
