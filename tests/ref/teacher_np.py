#!/usr/bin/python3
"""Brute-force numpy reference for search-projection training (subq train-search).

Everything in float64, written straight from the definitions:

  capture(ref, tokens, pos, seg)
      block-causal forward of a LlamaRef model with explicit positions and
      segment ids; returns per layer the normed hidden state h (T, d), the
      post-RoPE (post QK-norm) q (T, n_head*hd) and k (T, n_kv*hd).
  eligible(seg, n_sink=0, n_tail=0)
      E[t, j] = seg[j] == seg[t] and doc0(t) + n_sink <= j <= t - n_tail
      (doc0(t) = first index of t's segment; n_sink = n_tail = 0: block-causal.
      With n_sink / n_tail: the keys the sparse runtime retrieves among, since it
      always attends the first n_sink keys of a document and the n_tail most
      recent ones itself.)
  teacher(q, k, seg, n_head, n_kv, agg, n_sink=0, n_tail=0)
      p_h = softmax_j(q_h(t) . k_{h // (n_head/n_kv)}(j) / sqrt(hd)) over the
      block-causal keys (the model's own attention);
      mean: mean_h p_h;  max: max_h p_h renormalised;
      then restricted to eligible(seg, n_sink, n_tail) and renormalised over it.
      (T, T), zero off that set (rows without keys are all zero).
  search_vectors(h, wq, wk, pos, rope)
      qs = h wq^T, ks = h wk^T with their last n_rot dims rotated by position:
      pair i (dims o + 2i, o + 2i + 1, o = d_search - n_rot) turns by
      pos * scale * base^(-2i/n_rot); rope = (n_rot, base, scale) or None.
  losses(h, wq, wk, P, seg, tau, tau_kl, k_pos, n_sink=0, n_tail=0, pos=None, rope=None)
      sums over queries with >= 2 eligible keys of
        InfoNCE -log(sum_{P_t} e^z / sum_{E_t} e^z), z = cos(qs, ks)/tau,
                P_t = teacher top-k_pos (ties: earlier key)
        KL(p_t || softmax(qs.ks / sqrt(d_search) / tau_kl))
  metrics(h, wq, wk, q, k, P, seg, n_head, n_kv, ks, n_sink=0, n_tail=0, pos=None, rope=None)
      mass@K / recall@K of the learned scores cos(qs, ks) and of the raw-QK oracle
      mean_h q_h.k_g, and of the recency window (the K most recent eligible
      keys), over queries with more than K eligible keys (P: the teacher of
      teacher() with the same n_sink / n_tail).
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def capture(ref, tokens, pos, seg):
    tokens = np.asarray(tokens, dtype=np.int64)
    pos = np.asarray(pos, dtype=np.int64)
    seg = np.asarray(seg, dtype=np.int64)
    T = len(tokens)
    hd, nh, nkv = ref.head_dim, ref.n_head, ref.n_head_kv
    group = nh // nkv
    scale = 1.0 / math.sqrt(hd)
    allowed = eligible(seg)
    x = ref.tok_embd[tokens]
    out = []
    for L in ref.layers:
        h = ref.rmsnorm(x, L["attn_norm"])
        q = h @ L["wq"].T
        k = h @ L["wk"].T
        v = h @ L["wv"].T
        if "attn_q.bias" in L:
            q = q + L["attn_q.bias"]
            k = k + L["attn_k.bias"]
            v = v + L["attn_v.bias"]
        q = q.reshape(T, nh, hd)
        k = k.reshape(T, nkv, hd)
        v = v.reshape(T, nkv, hd)
        if "attn_q_norm.weight" in L:
            q = ref.rmsnorm(q, L["attn_q_norm.weight"])
            k = ref.rmsnorm(k, L["attn_k_norm.weight"])
        q = ref.rope(q, pos)
        k = ref.rope(k, pos)
        out.append((h.copy(), q.reshape(T, nh * hd).copy(), k.reshape(T, nkv * hd).copy()))
        heads = np.empty((T, nh, hd))
        for hq in range(nh):
            g = hq // group
            s = (q[:, hq, :] @ k[:, g, :].T) * scale
            s = np.where(allowed, s, -np.inf)
            s = s - s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p = p / p.sum(axis=1, keepdims=True)
            heads[:, hq, :] = p @ v[:, g, :]
        x = x + heads.reshape(T, nh * hd) @ L["wo"].T
        hf = ref.rmsnorm(x, L["ffn_norm"])
        gate = hf @ L["w_gate"].T
        up = hf @ L["w_up"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ L["w_down"].T
    return out


def eligible(seg, n_sink=0, n_tail=0):
    seg = np.asarray(seg)
    T = len(seg)
    same = seg[:, None] == seg[None, :]
    idx = np.arange(T)
    # doc0[t]: the smallest j of t's segment (segments are contiguous runs)
    doc0 = np.array([np.nonzero(same[t])[0].min() for t in range(T)])
    j = idx[None, :]
    return same & (j <= idx[:, None] - n_tail) & (j >= doc0[:, None] + n_sink)


def teacher(q, k, seg, n_head, n_kv, agg, n_sink=0, n_tail=0):
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    T = q.shape[0]
    hd = q.shape[1] // n_head
    group = n_head // n_kv
    E = eligible(seg)
    P = np.zeros((T, T))
    for h in range(n_head):
        g = h // group
        s = (q[:, h * hd:(h + 1) * hd] @ k[:, g * hd:(g + 1) * hd].T) / math.sqrt(hd)
        s = np.where(E, s, -np.inf)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=1, keepdims=True)
        if agg == "mean":
            P += p / n_head
        else:
            P = np.maximum(P, p)
    if agg == "max":
        P = P / P.sum(axis=1, keepdims=True)
    if n_sink or n_tail:
        # the model attends all of E; the retriever only sees R: condition on R
        R = eligible(seg, n_sink, n_tail)
        P = np.where(R, P, 0.0)
        tot = P.sum(axis=1, keepdims=True)
        P = np.divide(P, tot, out=np.zeros_like(P), where=tot > 0)
    return P


def _lse(x):
    m = x.max()
    return m + math.log(np.exp(x - m).sum())


def topk(v, k):
    """Indices of the k largest values, best first, ties: lower index."""
    return np.argsort(-np.asarray(v), kind="stable")[:k]


def search_vectors(h, wq, wk, pos=None, rope=None):
    h = np.asarray(h, dtype=np.float64)
    qs = h @ np.asarray(wq, dtype=np.float64).T
    ks = h @ np.asarray(wk, dtype=np.float64).T
    if rope and rope[0] > 0:
        n_rot, base, scale = rope
        o = qs.shape[1] - n_rot
        theta = np.outer(np.asarray(pos, dtype=np.float64) * scale,
                         base ** (-2.0 * np.arange(n_rot // 2) / n_rot))
        c, s = np.cos(theta), np.sin(theta)
        for v in (qs, ks):
            x0, x1 = v[:, o::2].copy(), v[:, o + 1::2].copy()
            v[:, o::2] = x0 * c - x1 * s
            v[:, o + 1::2] = x0 * s + x1 * c
    return qs, ks


def losses(h, wq, wk, P, seg, tau, tau_kl, k_pos, n_sink=0, n_tail=0, pos=None, rope=None, eps_p=0.0, wrong=False):
    """(nce, kl, n): the InfoNCE sum as a (least, most) pair over the sets of
    k_pos positives that teacher values tied within eps_p at the k_pos-th
    place allow (lse over the positives grows with each z: the extremes take
    the tied keys of smallest and largest z), the KL sum, the query count.
    wrong: the (k_pos+1)-th key in place of the k_pos-th where the two are
    not tied (a wrong answer, to show a check catches it)."""
    qs, ks = search_vectors(h, wq, wk, pos, rope)
    ds = qs.shape[1]
    nq = np.sqrt((qs * qs).sum(1) + 1e-12)
    nk = np.sqrt((ks * ks).sum(1) + 1e-12)
    E = eligible(seg, n_sink, n_tail)
    nce = [0.0, 0.0]
    kl = 0.0
    n = 0
    for t in range(len(seg)):
        idx = np.nonzero(E[t])[0]
        if len(idx) < 2:
            continue
        n += 1
        p = P[t, idx]
        dot = ks[idx] @ qs[t]
        z = dot / (nq[t] * nk[idx]) / tau
        kp = min(k_pos, len(idx))
        sure, maybe, need = tie_split(p, kp, eps_p)
        zm = np.sort(z[maybe])
        if wrong and kp < len(idx) and len(maybe) == need:
            order = topk(p, len(idx))
            pos = np.concatenate([order[:kp - 1], order[kp:kp + 1]])
            nce[0] += _lse(z) - _lse(z[pos])
            nce[1] += _lse(z) - _lse(z[pos])
        else:
            nce[0] += _lse(z) - _lse(np.concatenate([z[sure], zm[::-1][:need]]))
            nce[1] += _lse(z) - _lse(np.concatenate([z[sure], zm[:need]]))
        y = dot / math.sqrt(ds) / tau_kl
        logr = y - _lse(y)
        m = p > 0
        kl += float((p[m] * (np.log(p[m]) - logr[m])).sum())
    return tuple(nce), kl, n


def tie_split(s, K, eps):
    """A top-K by scores s, with ties: (sure, maybe, need). `sure` are the
    keys every top-K holds (above the K-th score by more than eps), `maybe`
    those within eps of the K-th score, of which any `need` may be taken.
    Two implementations that round differently can keep different keys of
    `maybe`; both are right."""
    s = np.asarray(s, dtype=np.float64)
    kth = np.sort(s)[::-1][K - 1]
    sure = np.nonzero(s > kth + eps)[0]
    maybe = np.nonzero(np.abs(s - kth) <= eps)[0]
    return sure, maybe, K - len(sure)


def pick_range(w, split):
    """(least, most) of sum(w) over the top-Ks that tie_split allows."""
    sure, maybe, need = split
    base = w[sure].sum()
    wm = np.sort(w[maybe])
    return base + wm[:need].sum(), base + wm[::-1][:need].sum()


def metrics(h, wq, wk, q, k, P, seg, n_head, n_kv, ks_list, n_sink=0, n_tail=0, pos=None, rope=None,
            eps_p=0.0, eps_l=0.0, eps_o=0.0, pick=None):
    """mass@K and recall@K of the learned, raw-QK oracle and window choices,
    each as a (least, most) pair over the top-Ks that keys tied within
    rounding at the K-th place allow (eps_p on the teacher's P, eps_l on the
    learned cosines, eps_o relative to each row's largest |oracle score|).
    With every eps 0 a tie still counts both ways. Recall's bounds are safe
    but may be loose when the teacher's own top-K has ties: the least counts
    only keys every teacher top-K holds, the most any key one may hold.
    pick(t, K, name, order) may replace a choice (a test of this check)."""
    qs, kss = search_vectors(h, wq, wk, pos, rope)
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    hd = q.shape[1] // n_head
    group = n_head // n_kv
    # head-mean native scores: (1/n_head) sum_h q_h . k_{h/group}
    oracle = np.zeros((len(seg), len(seg)))
    for hq in range(n_head):
        g = hq // group
        oracle += q[:, hq * hd:(hq + 1) * hd] @ k[:, g * hd:(g + 1) * hd].T / n_head
    # cosine: the runtime selectors compare L2-normalised vectors
    nq = np.sqrt((qs * qs).sum(1) + 1e-12)
    nk = np.sqrt((kss * kss).sum(1) + 1e-12)
    learned = (qs @ kss.T) / nq[:, None] / nk[None, :]
    E = eligible(seg, n_sink, n_tail)
    names = ("mass_learned", "mass_oracle", "mass_window", "recall_learned", "recall_oracle", "recall_window")
    res = {K: {nm: [0.0, 0.0] for nm in names} for K in ks_list}
    cnt = {K: 0 for K in ks_list}
    for t in range(len(seg)):
        idx = np.nonzero(E[t])[0]
        p = P[t, idx]
        lr, orc = learned[t, idx], oracle[t, idx]
        for K in ks_list:
            if len(idx) <= K:
                continue
            cnt[K] += 1
            ts, tm, _ = tie_split(p, K, eps_p)
            in_sure = np.zeros(len(idx))
            in_sure[ts] = 1.0
            may_in = in_sure.copy()
            may_in[tm] = 1.0
            splits = {"learned": tie_split(lr, K, eps_l),
                      "oracle": tie_split(orc, K, eps_o * max(np.abs(orc).max(), 1e-30)),
                      "window": (np.arange(len(idx) - K, len(idx)), np.zeros(0, dtype=int), 0)}
            if pick:
                for nm in ("learned", "oracle"):
                    order = pick(t, K, nm, np.argsort(-(lr if nm == "learned" else orc), kind="stable"))
                    if order is not None:
                        splits[nm] = (np.asarray(order[:K]), np.zeros(0, dtype=int), 0)
            for nm, sp in splits.items():
                lo, hi = pick_range(p, sp)
                r = res[K]["mass_" + nm]
                r[0] += lo
                r[1] += hi
                r = res[K]["recall_" + nm]
                r[0] += pick_range(in_sure, sp)[0] / K
                r[1] += min(pick_range(may_in, sp)[1], K) / K
    out = {}
    for K in ks_list:
        d = max(cnt[K], 1)
        out[K] = {nm: (v[0] / d, v[1] / d) for nm, v in res[K].items()}
        out[K]["n"] = cnt[K]
    return out
