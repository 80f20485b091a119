"""Checkpoint conversion against the real writer and reader: Debian's
python3-torch saves checkpoints in ann-sparseattention's layout (its
SearchProjectionModule: a ModuleDict of linear W_Qs / W_Ks keyed by the
absolute layer, bf16) and loads what we export; tensors are compared bit
for bit. Hostile archives are refused in one line."""

import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import torch
import torch.nn as nn

import subq
from conftest import REPO
from subq import convert

LAYERS, D_SEARCH = [1, 2, 3], 16


class SearchProjection(nn.Module):  # the seed's model.py, linear case
    def __init__(self, d_model, d_search):
        super().__init__()
        self.W_Qs = nn.Linear(d_model, d_search, bias=False)
        self.W_Ks = nn.Linear(d_model, d_search, bias=False)


class SearchProjectionModule(nn.Module):
    def __init__(self, d_model, d_search, layer_indices):
        super().__init__()
        self.layer_indices = list(layer_indices)
        self.projections = nn.ModuleDict({str(i): SearchProjection(d_model, d_search) for i in layer_indices})


def seed_checkpoint(path, d_model=64, layers=LAYERS, d_search=D_SEARCH, seed=0):
    torch.manual_seed(seed)
    mod = SearchProjectionModule(d_model, d_search, layers).to(torch.bfloat16)
    for p in mod.parameters():
        nn.init.normal_(p, std=0.5)
    config = {"d_search": d_search, "full_attention_layer_indices": [0, 4],
              "reserved_full_attention_indices": [0], "base_model_name": "stories260K"}
    torch.save({"search_module": mod.state_dict(), "config": config, "step": 1000}, path)
    return mod


def as_f32(t):
    return t.detach().to(torch.float32).numpy()


def run_convert(*args):
    """subq convert (the CLI, which runs the package beside it), replacing its output."""
    return subprocess.run([os.environ["SUBQ_BIN"], "convert", "--force"] + [str(a) for a in args],
                          capture_output=True, text=True)


def test_pt_to_gguf_and_back(stories, tmp_path):
    pt = tmp_path / "search_step_1000.pt"
    mod = seed_checkpoint(pt)
    gguf = tmp_path / "search.gguf"
    r = run_convert(pt, gguf, "-m", stories)
    assert r.returncode == 0, r.stderr
    assert "3 layers (1,2,3), d_search 16" in r.stdout
    # the projection file carries the layers, the width and where it comes from
    info = subprocess.run([os.environ["SUBQ_BIN"], "info", "-m", str(gguf), "--json"], capture_output=True, text=True)
    assert '"layers": "1-3"' in info.stdout and '"d_search": 16' in info.stdout, info.stdout + info.stderr
    assert "--sink 0 --tail 0 --score cosine" in info.stdout
    # the engine runs it (the seed's settings), and its matrices are the checkpoint's, bit for bit
    with subq.Model(stories, n_ctx=128, n_threads=1) as m:
        m.set_plan(selector="exact", top_k=8, n_sink=0, n_tail=0, score="cosine", search=gguf)
        assert np.isfinite(m.logits(list(range(1, 60)))).all()
    tensors, config = convert.gguf_to_seed(gguf, stories)
    sd = mod.state_dict()
    assert sorted(tensors) == sorted(sd)
    for k in sd:
        assert np.array_equal(tensors[k].view(np.uint32), as_f32(sd[k]).view(np.uint32)), k
    # exported back: torch loads it into the seed's module, bit for bit, in bf16 and in f32
    for dtype, tdtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        out = tmp_path / ("back_%s.pt" % dtype)
        r = run_convert(gguf, out, "-m", stories, "--dtype", dtype)
        assert r.returncode == 0, r.stderr
        ck = torch.load(out, weights_only=False) if "weights_only" in torch.load.__code__.co_varnames \
            else torch.load(out)
        back = SearchProjectionModule(64, D_SEARCH, LAYERS).to(tdtype)
        back.load_state_dict(ck["search_module"])  # strict: every key, every shape
        assert ck["config"]["d_search"] == D_SEARCH and ck["config"]["full_attention_layer_indices"] == [0, 4]
        for k, v in back.state_dict().items():
            assert v.dtype == tdtype
            if dtype == "bfloat16":
                assert torch.equal(v, sd[k]), k
            else:
                assert np.array_equal(as_f32(v), as_f32(sd[k])), k


def test_safetensors_round_trip(stories, tmp_path):
    pt = tmp_path / "s.pt"
    mod = seed_checkpoint(pt, seed=1)
    st = tmp_path / "s.safetensors"
    for dtype in ("bfloat16", "float32"):
        r = run_convert(pt, st, "-m", stories, "--dtype", dtype)
        assert r.returncode == 0, r.stderr
        tensors, config = convert.read_safetensors(st)
        assert config["d_search"] == D_SEARCH
        for k, v in mod.state_dict().items():
            assert np.array_equal(tensors[k], as_f32(v)), k
        raw = open(st, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        assert n % 8 == 0 and (b'"BF16"' if dtype == "bfloat16" else b'"F32"') in raw[8:8 + n]
    gguf = tmp_path / "s.gguf"
    assert run_convert(st, gguf, "-m", stories).returncode == 0
    tensors, _ = convert.gguf_to_seed(gguf, stories)
    for k, v in mod.state_dict().items():
        assert np.array_equal(tensors[k], as_f32(v)), k


class Evil:
    def __reduce__(self):
        return (os.system, ("touch %s" % Evil.target,))


def one_line_refusal(r, *words):
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("subq convert: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_hostile_archives(stories, fixture_model, tmp_path):
    gguf = tmp_path / "out.gguf"
    # a pickle that calls os.system: refused, and nothing runs
    Evil.target = str(tmp_path / "pwned")
    evil = tmp_path / "evil.pt"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"search_module": Evil()}, protocol=2))
    one_line_refusal(run_convert(evil, gguf, "-m", stories), "system", "refused")
    assert not os.path.exists(Evil.target) and not gguf.exists()
    # a truncated storage
    pt = tmp_path / "t.pt"
    seed_checkpoint(pt)
    cut = tmp_path / "cut.pt"
    with zipfile.ZipFile(pt) as zin, zipfile.ZipFile(cut, "w") as zout:
        for n in zin.namelist():
            b = zin.read(n)
            zout.writestr(n, b[:len(b) // 2] if "/data/" in n else b)
    one_line_refusal(run_convert(cut, gguf, "-m", stories), "truncated")
    # not a zip, an unknown extension, a missing model
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a zip at all")
    one_line_refusal(run_convert(junk, gguf, "-m", stories), "not a PyTorch zip checkpoint")
    one_line_refusal(run_convert(pt, tmp_path / "x.bin", "-m", stories), "unknown extension")
    one_line_refusal(run_convert(pt, gguf), "needs -m MODEL")
    # shapes of another model: d_model 32, and a layer the model does not have
    other = tmp_path / "other.pt"
    seed_checkpoint(other, d_model=32)
    one_line_refusal(run_convert(other, gguf, "-m", stories), "shape [16, 32]", "d_model 64")
    deep = tmp_path / "deep.pt"
    seed_checkpoint(deep, layers=[1, 7])
    one_line_refusal(run_convert(deep, gguf, "-m", stories), "layer 7", "5 layers")
    assert not gguf.exists()
    # subq's rotated projections cannot go back to the seed
    rope = os.path.join(REPO, "tests", "models", "fixture-4k-search-rope.gguf")
    one_line_refusal(run_convert(rope, tmp_path / "r.pt", "-m", fixture_model), "rotates", "--rope-dims 0")
    # a damaged safetensors header
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((10 ** 6).to_bytes(8, "little") + b"{}")
    one_line_refusal(run_convert(bad, gguf, "-m", stories), "header claims")


def seed_forward(ref, tokens, proj, k, score="cosine"):
    """float64 logits of stories260K with the seed's inference.py on the projection layers: each query
    attends exactly its top-k keys among those at or before it, ranked by cosine (score "dot": q_s . k_s,
    the check's wrong answer) of W_Qs h_t and W_Ks h_j (h: the layer's attn-norm output); every key when
    there are fewer. Also the smallest gap between the k-th and (k+1)-th scores (ties would let float32
    pick either key). The forward is tests/ref/check_eval.py's."""
    from check_eval import forward
    gap = [np.inf]

    def mask(li, q, kk, h):
        if li not in proj:
            return None
        qs, ks = h @ proj[li][0].T, h @ proj[li][1].T
        if score == "cosine":
            qs = qs / np.linalg.norm(qs, axis=1, keepdims=True)
            ks = ks / np.linalg.norm(ks, axis=1, keepdims=True)
        T = len(tokens)
        allowed = np.zeros((T, T), dtype=bool)
        for t in range(T):
            sc = ks[:t + 1] @ qs[t]
            order = np.argsort(-sc, kind="stable")
            allowed[t, order[:k]] = True
            if t + 1 > k:
                gap[0] = min(gap[0], sc[order[k - 1]] - sc[order[k]])
        return allowed

    return forward(ref, tokens, mask), gap[0]


def test_seed_checkpoint_selects_the_seeds_top_k(stories, subq_bin, tmp_path):
    """A torch-written checkpoint converted and run with the seed's settings (--sink 0 --tail 0, cosine, each
    prompt token retrieving as decode does) gives the logits of a numpy forward that selects as the seed's
    inference.py does; the same forward ranking by dot products (another selection) does not."""
    sys.path.insert(0, os.path.join(REPO, "tests", "ref"))
    from llama_ref import LlamaRef
    pt, gguf = tmp_path / "search_step_7.pt", tmp_path / "seed.gguf"
    mod = seed_checkpoint(pt, seed=3)
    assert run_convert(pt, gguf, "-m", stories).returncode == 0
    K, T = 6, 48
    ref = LlamaRef(stories)
    tokens = [ref.tok.bos_id] + ref.tok.encode("Once upon a time, there was a little girl named Lily. She loved "
                                               "to play outside in the sun with her friends and her dog.")[:T - 1]
    proj = {l: (as_f32(mod.projections[str(l)].W_Qs.weight).astype(np.float64),
                as_f32(mod.projections[str(l)].W_Ks.weight).astype(np.float64)) for l in LAYERS}
    want, gap = seed_forward(ref, tokens, proj, K)
    assert gap > 1e-5, "scores tied at the K-th place: choose another seed"
    out = tmp_path / "lg.bin"
    r = subprocess.run([subq_bin, "logits", "-m", stories, "-t", "1", "--tokens", " ".join(map(str, tokens)),
                        "-o", str(out), "--search", str(gguf), "--select", "exact", "--topk", str(K), "--sink", "0",
                        "--tail", "0", "--score", "cosine", "--tokenwise"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)
    err = np.abs(got - want).max()
    assert err < 1e-3, err
    wrong, _ = seed_forward(ref, tokens, proj, K, score="dot")
    print("seed check: max err %.3g, against dot ranking %.3g, gap %.3g" % (err, np.abs(got - wrong).max(), gap))
    assert np.abs(got - wrong).max() > 20 * err, (np.abs(got - wrong).max(), err)


def test_mutated_files_refused_cleanly(stories, tmp_path):
    """The parsers (zip + restricted unpickler, safetensors) under random byte mutations: each file reads or is
    refused with ConvertError; no other exception, and nothing the pickle names runs."""
    pt, st = tmp_path / "m.pt", tmp_path / "m.safetensors"
    seed_checkpoint(pt, seed=5)
    tensors, config = convert.read_pt(pt)
    convert.write_safetensors(st, tensors, config)
    rng = np.random.default_rng(1)
    outcomes = {"read": 0, "refused": 0}
    for src, reader in ((pt, convert.read_pt), (st, convert.read_safetensors)):
        base = bytearray(src.read_bytes())
        for i in range(300):
            b = bytearray(base)
            for _ in range(int(rng.integers(1, 8))):
                j = int(rng.integers(0, len(b)))
                b[j] = int(rng.integers(0, 256))
            if i % 10 == 0:
                b = b[:int(rng.integers(0, len(b)))]
            f = tmp_path / ("x" + src.suffix)
            f.write_bytes(bytes(b))
            try:
                reader(f)
                outcomes["read"] += 1
            except convert.ConvertError:
                outcomes["refused"] += 1
    assert outcomes["refused"] > 50, outcomes
