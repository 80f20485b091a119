"""Independent numpy (float64) reference for the completion feature maps and
their distillation loss (src/phi/phi_maps.c, phi_net.c; src/train/complete/phi_loss.c), written
from the definitions:

  map:   g0 = Ws x + bs;  g1 = g0 + alpha (W2 GELU(W1 g0 + b1) + b2);
         log phi(x) = Wo g1 + bo;  GELU = tanh approximation
  query t (document start d0): mid keys M_t = [d0 + n_sink, t - n_tail]
  teacher s_j = q.k_j / sqrt(d);  student sh_j = logsumexp_f(lq[f] + lk_j[f])
  r = s - max s, rh = sh - max s
  L = l_kl tau^2 KL(softmax(r/tau) || softmax(rh/tau))
      + (1 - l_kl) (l_top mean_band Huber(rh - r)
                    + l_fp mean_far Huber(max(0, rh + band))
                    + l_z Huber(max(0, LSE(rh) - LSE(r))))
  band = {r >= -band}, far = the rest, Huber(x) = x^2/2 (|x| <= delta) else delta(|x| - delta/2)

File layout (phi.gguf): blk.{l}.phi_{q,k}.{ws,w1,w2,wo}.weight (numpy shape
(n_maps, rows, cols)), .{ws,w1,w2,wo}.bias (n_maps, width), .alpha (n_maps, 1).
"""

import numpy as np

TENSORS = ["ws.weight", "ws.bias", "w1.weight", "w1.bias", "w2.weight", "w2.bias", "alpha", "wo.weight", "wo.bias"]
GELU_C = np.sqrt(2.0 / np.pi)


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def load_group(g, layer, which):
    """dict tensor-suffix -> float64 array (n_maps, ...) of group 'q' or 'k'."""
    return {t: g.tensor("blk.%d.phi_%s.%s" % (layer, which, t)).astype(np.float64) for t in TENSORS}


def flat(qg, kg):
    """The parameter block of one layer in the library's layout (q group then
    k group, each tensor-major over heads)."""
    return np.concatenate([grp[t].ravel() for grp in (qg, kg) for t in TENSORS])


def unflat(vec, qg, kg):
    """Inverse of flat: groups with the shapes of qg, kg filled from vec."""
    out, i = [], 0
    for grp in (qg, kg):
        d = {}
        for t in TENSORS:
            n = grp[t].size
            d[t] = vec[i:i + n].reshape(grp[t].shape)
            i += n
        out.append(d)
    return out[0], out[1]


def log_features(grp, head, x):
    """log phi of rows x (n, d) for map `head` of a group."""
    g0 = x @ grp["ws.weight"][head].T + grp["ws.bias"][head]
    hid = gelu(g0 @ grp["w1.weight"][head].T + grp["w1.bias"][head])
    g1 = g0 + grp["alpha"][head][0] * (hid @ grp["w2.weight"][head].T + grp["w2.bias"][head])
    return g1 @ grp["wo.weight"][head].T + grp["wo.bias"][head]


def logsumexp(a, axis=-1):
    m = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.sum(np.exp(a - m), axis=axis))


def huber(x, delta):
    a = np.abs(x)
    return np.where(a <= delta, 0.5 * x * x, delta * (a - 0.5 * delta))


def mid_ranges(seg, n_sink, n_tail):
    lo, hi, d0 = [], [], 0
    for t in range(len(seg)):
        if t > 0 and seg[t] != seg[t - 1]:
            d0 = t
        lo.append(d0 + n_sink)
        hi.append(t - n_tail)
    return lo, hi


def query_loss(s, sh, p):
    """(L, [kl, top, fp, z, |dLSE|]) of one query."""
    tau = p["tau"]
    r = s - s.max()
    rh = sh - s.max()
    lp = r / tau - logsumexp(r / tau)
    lph = rh / tau - logsumexp(rh / tau)
    kl = tau * tau * np.sum(np.exp(lp) * (lp - lph))
    band = r >= -p["band"]
    top = np.mean(huber(rh[band] - r[band], p["huber"]))
    far = ~band
    fp = np.mean(huber(np.maximum(0.0, rh[far] + p["band"]), p["huber"])) if far.any() else 0.0
    x = logsumexp(rh) - logsumexp(r)
    z = huber(max(0.0, x), p["huber"])
    w = 1.0 - p["l_kl"]
    L = p["l_kl"] * kl + w * (p["l_top"] * top + p["l_fp"] * fp + p["l_z"] * z)
    return L, [kl, top, fp, z, abs(x)]


def layer_loss(qg, kg, q, k, seg, n_head, n_kv, head_dim, p):
    """Sums over (head, query) of L and its parts, and the pair count.
    q: (T, n_head*head_dim), k: (T, n_kv*head_dim) float arrays. The teacher
    scores at the model's attention scale, a float as llama.cpp computes it
    (1.0f / sqrtf(head_dim))."""
    T = q.shape[0]
    scale = float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))
    grp = n_head // n_kv
    lo, hi = mid_ranges(seg, p["n_sink"], p["n_tail"])
    total, parts, n = 0.0, np.zeros(5), 0
    kf = [log_features(kg, g, k[:, g * head_dim:(g + 1) * head_dim].astype(np.float64)) for g in range(n_kv)]
    for h in range(n_head):
        g = h // grp
        qh = q[:, h * head_dim:(h + 1) * head_dim].astype(np.float64)
        kh = k[:, g * head_dim:(g + 1) * head_dim].astype(np.float64)
        lq = log_features(qg, h, qh)
        S = qh @ kh.T * scale
        SH = logsumexp(lq[:, None, :] + kf[g][None, :, :])   # (T, T)
        for t in range(T):
            if hi[t] < lo[t]:
                continue
            L, pr = query_loss(S[t, lo[t]:hi[t] + 1], SH[t, lo[t]:hi[t] + 1], p)
            total += L
            parts += pr
            n += 1
    return total, parts, n
