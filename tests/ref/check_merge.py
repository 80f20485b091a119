#!/usr/bin/python3
"""ctest check: search projections merged into a model file, in the layout of
ann-sparseattention's llama.cpp runtime.

- A merged model made by an independent numpy re-implementation of the
  seed's merge script (ann_merge_np.py; f16 as the script writes, and bf16,
  f32 and q8_0 as llama-quantize could leave them) loads: subq info shows its
  projections, subq split writes exactly the matrices numpy put in (as numpy
  decodes them from the file), and the model runs sparse
  with no --search flag, with the file's top-K: the same perplexity as the base
  model with the split file, another than --no-search (which equals the base);
  --search FILE given explicitly takes the place of the merged projections.
- subq merge writes that layout (checked with the numpy GGUF reader): every
  base tensor's bytes, type and shape and every base key unchanged, the
  runtime's keys with their GGUF types, f16 matrices of shape
  {d_model, d_search}; the same tensor table and keys as the numpy merge.
- merge --type f32 then split gives the projections back bit for bit.
- Malformed merged files (transposed matrices, no key length) are refused
  with one line; --no-search still runs them.
- Projections that rotate by position (train-search --rope-dims) are not
  merged (the runtime knows no rotation): one line naming why, no output.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcommon as rc  # noqa: E402

rc.require_numpy()
import numpy as np  # noqa: E402

from ann_merge_np import merge_like_seed  # noqa: E402
from gguf_edit import GGUFEdit  # noqa: E402
from gguf_np import GGUFFile, GGUF_UINT32, GGUF_INT32, GGUF_STRING, GGUF_ARRAY  # noqa: E402

D_SEARCH = 8


def ppl(ck, name, args):
    out = ck.guarded(name, rc.run_subq, ["perplexity"] + args + ["-f", TEXT, "-c", "64", "--chunks", "3", "--json"])
    return json.loads(out)["ppl"] if out else None


def f16(w):
    return w.astype(np.float16).astype(np.float32)


def bf16(w):
    u = w.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def main():
    global TEXT
    ck = rc.Checks("check_merge")
    tmp = rc.tmp_dir()
    TEXT = rc.shared_file("data", "text", "tinyshakespeare.txt")
    base = os.path.join(tmp, "merge_base.gguf")
    rc.run_subq(["synth", "--shape", "tiny-qwen3", "--type", "q8_0", "--force", "-o", base])
    g = GGUFFile(base)
    arch = g.metadata["general.architecture"]
    d_model = g.metadata[arch + ".embedding_length"]
    n_layer = g.metadata[arch + ".block_count"]
    rng = np.random.default_rng(5)
    layers = list(range(n_layer))
    wq = {l: (rng.standard_normal((D_SEARCH, d_model)) * 0.2).astype(np.float32) for l in layers}
    wk = {l: (rng.standard_normal((D_SEARCH, d_model)) * 0.2).astype(np.float32) for l in layers}

    # ---- the seed's layout, written by numpy, read by subq
    for dtype, rnd, tname in ((np.float16, f16, "f16"), ("bf16", bf16, "bf16"), (np.float32, lambda w: w, "f32"),
                              ("q8_0", None, "q8_0")):
        merged = os.path.join(tmp, "merge_np_%s.gguf" % tname)
        merge_like_seed(base, wq, wk, merged, top_k=2, dtype=dtype)
        info = ck.guarded("info " + tname, rc.run_subq, ["info", "-m", merged, "--json"])
        s = json.loads(info).get("search", {}) if info else {}
        ck.check("subq info shows the merged %s projections" % tname,
                 s == {"merged": True, "layers": "0-%d" % (n_layer - 1), "n_layers": n_layer, "d_search": D_SEARCH,
                       "type": tname, "top_k": 2, "rope_dims": 0, "granularity": "layer", "query_heads": 1,
                       "key_heads": 1}, str(s))
        split = os.path.join(tmp, "merge_split_%s.gguf" % tname)
        if ck.guarded("split " + tname, rc.run_subq, ["split", "-m", merged, "--force", "-o", split]) is None:
            continue
        sp, mg = GGUFFile(split), GGUFFile(merged)
        names = ["blk.%d.indexer.%s.weight" % (l, w) for l in layers for w in ("proj", "attn_k")]
        same = all(np.array_equal(sp.tensor(t), mg.tensor(t)) for t in names)
        if rnd:  # and numpy's writer rounded as the type does
            same = same and all(np.array_equal(mg.tensor("blk.%d.indexer.proj.weight" % l), rnd(wq[l])) and
                                np.array_equal(mg.tensor("blk.%d.indexer.attn_k.weight" % l), rnd(wk[l]))
                                for l in layers)
        else:
            same = same and all(np.abs(mg.tensor(t) - w).max() < 0.01 for t, w in
                                zip(names, [x[l] for l in layers for x in (wq, wk)]))
        ck.check("split of the %s merge holds numpy's matrices" % tname, same)
        ck.check("split file is a projection file of the merged layers",
                 sp.metadata.get("general.architecture") == "subq-search" and
                 sp.metadata.get("subq.search.layers") == layers and sp.metadata.get("subq.search.d_search") == D_SEARCH)
        if tname != "f16":
            continue
        # runs sparse with no --search, on the file's top-K (2)
        p_merged = ppl(ck, "ppl merged", ["-m", merged])
        p_split = ppl(ck, "ppl split", ["-m", base, "--search", split, "--topk", "2"])
        p_k64 = ppl(ck, "ppl split k64", ["-m", base, "--search", split, "--topk", "64"])
        p_dense = ppl(ck, "ppl no-search", ["-m", merged, "--no-search"])
        p_base = ppl(ck, "ppl base", ["-m", base])
        ck.check("merged model runs sparse with its top-K and no --search", p_merged is not None and
                 p_merged == p_split and p_merged != p_k64 and p_merged != p_dense,
                 "merged %s, base+split@2 %s, @64 %s, --no-search %s" % (p_merged, p_split, p_k64, p_dense))
        ck.check("--no-search runs the merged model dense (as the base)", p_dense is not None and p_dense == p_base,
                 "%s vs %s" % (p_dense, p_base))
        split16 = split
        # --search FILE wins over the merged projections
        other = os.path.join(tmp, "merge_np_other.gguf")
        other_split = os.path.join(tmp, "merge_split_other.gguf")
        merge_like_seed(base, {l: w[::-1].copy() for l, w in wk.items()}, wq, other, top_k=2, dtype=np.float16)
        if ck.guarded("split other", rc.run_subq, ["split", "-m", other, "--force", "-o", other_split]) is not None:
            p_over = ppl(ck, "ppl merged --search other", ["-m", merged, "--search", other_split, "--topk", "2"])
            p_other = ppl(ck, "ppl base --search other", ["-m", base, "--search", other_split, "--topk", "2"])
            ck.check("--search FILE takes the place of the merged projections", p_over is not None and
                     p_over == p_other and p_over != p_merged, "%s vs %s (merged's own %s)" % (p_over, p_other, p_merged))

    # ---- subq merge writes the seed's layout
    merged_subq = os.path.join(tmp, "merge_subq.gguf")
    merged_np = os.path.join(tmp, "merge_np_f16.gguf")
    if ck.guarded("subq merge", rc.run_subq, ["merge", "-m", base, "--search", split16, "-o", merged_subq, "--topk",
                                              "2", "--force"]) is not None:
        m = GGUFFile(merged_subq)
        n = GGUFFile(merged_np)
        base_tensors_same = all(
            name in m.tensor_infos and m.raw_bytes(name) == g.raw_bytes(name) and
            m.tensor_infos[name].type == g.tensor_infos[name].type and m.tensor_infos[name].ne == g.tensor_infos[name].ne
            for name in g.tensor_names())
        ck.check("every base tensor unchanged (bytes, type, shape)", base_tensors_same)
        ck.check("every base key unchanged", all(m.raw_value(k) == g.raw_value(k) for k in g.metadata))
        want_types = {arch + ".attention.indexer.head_count": (GGUF_UINT32, 1),
                      arch + ".attention.indexer.key_length": (GGUF_UINT32, D_SEARCH),
                      arch + ".attention.indexer.top_k": (GGUF_UINT32, 2),
                      "ann_sparse.layers": (GGUF_ARRAY, layers)}
        ok = all(m.metadata_types.get(k) == t and m.metadata.get(k) == v for k, (t, v) in want_types.items())
        ok = ok and m.raw_value("ann_sparse.layers")[4:8] == GGUF_INT32.to_bytes(4, "little")
        ok = ok and m.metadata_types.get("ann_sparse.checkpoint") == GGUF_STRING
        ck.check("the runtime's keys with their GGUF types", ok,
                 str({k: (m.metadata_types.get(k), m.metadata.get(k)) for k in want_types}))
        proj = ["blk.%d.indexer.%s.weight" % (l, w) for l in layers for w in ("proj", "attn_k")]
        ok = all(m.tensor_infos[t].type == 1 and m.tensor_infos[t].ne == [d_model, D_SEARCH] for t in proj)
        ok = ok and all(np.array_equal(m.tensor("blk.%d.indexer.proj.weight" % l), f16(wq[l])) and
                        np.array_equal(m.tensor("blk.%d.indexer.attn_k.weight" % l), f16(wk[l])) for l in layers)
        ck.check("f16 matrices of shape {d_model, d_search} holding the projections", ok)
        table = lambda f: {t: (f.tensor_infos[t].type, f.tensor_infos[t].ne) for t in f.tensor_names()}  # noqa: E731
        ck.check("the same tensor table as the numpy merge", table(m) == table(n))
        ck.check("the numpy merge's keys, with the same values", all(
            k in m.metadata and (m.raw_value(k) == n.raw_value(k) or k.startswith("ann_sparse."))
            for k in n.metadata), str(sorted(set(n.metadata) - set(m.metadata))))

    # ---- f32 merge round trip is exact
    split32 = os.path.join(tmp, "merge_split_f32.gguf")
    merged32 = os.path.join(tmp, "merge_subq32.gguf")
    back = os.path.join(tmp, "merge_back32.gguf")
    if ck.guarded("f32 round trip", rc.run_subq, ["merge", "-m", base, "--search", split32, "-o", merged32, "--type",
                                                  "f32", "--force"]) is not None and \
            ck.guarded("f32 split", rc.run_subq, ["split", "-m", merged32, "--force", "-o", back]) is not None:
        b = GGUFFile(back)
        ck.check("merge --type f32 + split gives the projections bit for bit", all(
            np.array_equal(b.tensor("blk.%d.indexer.proj.weight" % l), wq[l]) and
            np.array_equal(b.tensor("blk.%d.indexer.attn_k.weight" % l), wk[l]) for l in layers))

    # ---- a rotated projection file is not merged
    rotated = os.path.join(tmp, "merge_rotated.gguf")
    out_rot = os.path.join(tmp, "merge_rotated_out.gguf")
    if os.path.exists(split32):
        e = GGUFEdit(open(split32, "rb").read())
        e.set("subq.search.rope_dims", "u32", 4)
        e.write(rotated)
        if os.path.exists(out_rot):
            os.remove(out_rot)
        try:
            rc.run_subq(["merge", "-m", base, "--search", rotated, "-o", out_rot])
            ck.check("rotated projections refused by merge", False, "it merged")
        except rc.SubqError as err:
            msg = str(err).split("--- stderr:\n")[-1].strip()
            ck.check("rotated projections refused by merge in one line, naming the rotation",
                     "rotate" in msg and "llama.cpp" in msg and msg.count("\n") == 0 and not os.path.exists(out_rot),
                     msg)

    # ---- malformed merged files
    for what, kw, needle in (("transposed", {"transpose": True}, "transposed"),
                             ("no key length", {"omit": (arch + ".attention.indexer.key_length",)}, "key_length")):
        bad = os.path.join(tmp, "merge_bad.gguf")
        merge_like_seed(base, wq, wk, bad, **kw)
        try:
            rc.run_subq(["perplexity", "-m", bad, "-f", TEXT, "-c", "64", "--chunks", "1"])
            ck.check("%s merge refused" % what, False, "it ran")
        except rc.SubqError as e:
            msg = str(e).split("--- stderr:\n")[-1].strip()
            ck.check("%s merge refused in one line" % what, needle in msg and msg.count("\n") == 0, msg)
        ck.guarded("%s merge runs with --no-search" % what, rc.run_subq,
                   ["perplexity", "-m", bad, "--no-search", "-f", TEXT, "-c", "64", "--chunks", "1"])
    ck.finish()


if __name__ == "__main__":
    main()
