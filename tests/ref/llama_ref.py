#!/usr/bin/python3
"""Independent numpy reference ("oracle") for subq: SPM tokenizer + Llama forward.

Architectures (general.architecture): llama, qwen2, qwen3, and gemma2, gemma3,
phi3, smollm3 computed as llama.cpp computes them (same GGUF keys, tensor
names and maths; see LlamaRef.__init__ for the keys each one reads).

Module use:
    from llama_ref import LlamaRef
    m = LlamaRef("model.gguf")              # LlamaRef(path, n_ctx=None): n_ctx only
                                            # picks phi3's long/short rope factors
    ids = m.tok.encode("Hello", add_bos=True)
    logits = m.forward(ids)                 # float64 [n_tokens, n_vocab]
    text = m.tok.decode_bytes(ids)          # bytes

CLI:
    llama_ref.py generate   MODEL [-p PROMPT] -n N
    llama_ref.py perplexity MODEL FILE -c N --chunks K          (prints JSON)
    llama_ref.py tokenize   MODEL FILE [--max-bytes B] [--no-bos]
    llama_ref.py logits     MODEL --tokens "1 2 3" -o OUT [--n-ctx N]  (float32 [n_tokens, n_vocab])
    llama_ref.py --selftest-families      (sanity checks of the gemma2/gemma3/phi3/
                                           smollm3/sliding-window paths, selftest_ref.py)

Everything is computed in float64 from the dequantised (float32) weights, so
it is a "ground truth" for a float32 implementation working from the same
stored weights.
"""

import argparse
import heapq
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_np import GGUFFile  # noqa: E402

SPM_SPACE = "\u2581"  # '▁', SentencePiece's visible space

# tokenizer.ggml.token_type values
TOKTYPE_NORMAL = 1
TOKTYPE_UNKNOWN = 2
TOKTYPE_CONTROL = 3
TOKTYPE_USER_DEFINED = 4
TOKTYPE_UNUSED = 5
TOKTYPE_BYTE = 6


# =========================================================================
# Tokenizer
# =========================================================================

class SpmTokenizer:
    """llama.cpp "spm" style BPE over a SentencePiece vocabulary.

    encode:
      1. if add_space_prefix: text = " " + text
      2. every ' ' -> '▁'
      3. initial symbols = the Unicode characters of the text
      4. repeat: among all adjacent symbol pairs (a, b) whose concatenation a+b
         is a vocabulary token, merge the pair with the highest token score
         (ties: the leftmost pair); stop when no pair is mergeable
      5. each final symbol -> its token id; a symbol not in the vocabulary
         (only possible for a single character) -> one <0xXX> byte token per
         UTF-8 byte (unk id when that byte token does not exist)
    Step 4 is run with a max-heap of candidate pairs over a doubly linked list
    of symbols (stale heap entries are discarded lazily), O(n log n).
    """

    def __init__(self, g):
        self.tokens = list(g.get("tokenizer.ggml.tokens"))
        n = len(self.tokens)
        self.scores = list(g.get("tokenizer.ggml.scores", [0.0] * n))
        self.types = list(g.get("tokenizer.ggml.token_type", [TOKTYPE_NORMAL] * n))
        if len(self.scores) != n or len(self.types) != n:
            raise ValueError("tokenizer arrays have different lengths")
        self.bos_id = g.get("tokenizer.ggml.bos_token_id", None)
        self.eos_id = g.get("tokenizer.ggml.eos_token_id", None)
        self.unk_id = g.get("tokenizer.ggml.unknown_token_id", None)
        self.add_space_prefix = bool(g.get("tokenizer.ggml.add_space_prefix", True))
        self.add_bos = bool(g.get("tokenizer.ggml.add_bos_token", True))
        # text -> id (on a duplicate string the later id wins)
        self.token_to_id = {}
        for i, t in enumerate(self.tokens):
            self.token_to_id[t] = i
        # byte value -> id of its <0xXX> token
        self.byte_to_id = {}
        for b in range(256):
            tid = self.token_to_id.get("<0x%02X>" % b)
            if tid is not None:
                self.byte_to_id[b] = tid

    @property
    def n_vocab(self):
        return len(self.tokens)

    # ---- encode ----------------------------------------------------------
    def encode(self, text, add_bos=False):
        """text: str or UTF-8 bytes. Returns a list of token ids."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")  # strict: invalid UTF-8 raises
        out = []
        if add_bos:
            if self.bos_id is None:
                raise ValueError("model has no BOS token")
            out.append(self.bos_id)
        if len(text) == 0:
            return out
        if self.add_space_prefix:
            text = " " + text
        text = text.replace(" ", SPM_SPACE)

        n = len(text)
        # symbol i initially holds character i; merged symbols live in the
        # leftmost slot. sym_text[i] is None once symbol i has been absorbed.
        sym_text = list(text)
        prev = list(range(-1, n - 1))   # prev[i] = index of the symbol to the left, -1 none
        nxt = list(range(1, n + 1))     # nxt[i]  = index of the symbol to the right, n none
        nxt[n - 1] = -1

        heap = []  # entries (-score, left index, right index, merged text)

        def push_pair(left, right):
            if left < 0 or right < 0:
                return
            merged = sym_text[left] + sym_text[right]
            tid = self.token_to_id.get(merged)
            if tid is None:
                return
            # heapq is a min-heap: highest score first, then smallest left index
            heapq.heappush(heap, (-self.scores[tid], left, right, merged))

        for i in range(n - 1):
            push_pair(i, i + 1)

        while heap:
            _neg_score, left, right, merged = heapq.heappop(heap)
            # stale entry? both symbols must still exist, be adjacent and
            # still spell the same text as when the pair was pushed
            if sym_text[left] is None or sym_text[right] is None:
                continue
            if nxt[left] != right:
                continue
            if sym_text[left] + sym_text[right] != merged:
                continue
            # merge right into left
            sym_text[left] = merged
            sym_text[right] = None
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
            # new candidate pairs around the merged symbol
            push_pair(prev[left], left)
            push_pair(left, after)

        i = 0
        while i >= 0:
            s = sym_text[i]
            tid = self.token_to_id.get(s)
            if tid is not None:
                out.append(tid)
            else:
                for b in s.encode("utf-8"):
                    bt = self.byte_to_id.get(b)
                    if bt is None:
                        if self.unk_id is None:
                            raise ValueError("no byte token for 0x%02X and no unk token" % b)
                        bt = self.unk_id
                    out.append(bt)
            i = nxt[i]
        return out

    # ---- decode ----------------------------------------------------------
    def piece_bytes(self, tid):
        """Raw bytes one token contributes to the text (before the leading
        space rule)."""
        if tid < 0 or tid >= len(self.tokens):
            raise ValueError("token id %d out of range [0, %d)" % (tid, len(self.tokens)))
        ttype = self.types[tid]
        text = self.tokens[tid]
        if ttype in (TOKTYPE_CONTROL, TOKTYPE_UNKNOWN, TOKTYPE_UNUSED):
            return b""
        if ttype == TOKTYPE_BYTE:
            # "<0xXX>" -> the single raw byte XX
            return bytes([int(text[3:5], 16)])
        return text.replace(SPM_SPACE, " ").encode("utf-8", errors="surrogateescape")

    def decode_bytes(self, ids):
        """Concatenate pieces; with add_space_prefix drop one leading space of
        the first token after an optional BOS."""
        ids = list(ids)
        start = 0
        if len(ids) > 0 and self.bos_id is not None and ids[0] == self.bos_id:
            start = 1
        parts = []
        for k in range(start, len(ids)):
            p = self.piece_bytes(ids[k])
            if k == start and self.add_space_prefix and p.startswith(b" "):
                p = p[1:]
            parts.append(p)
        return b"".join(parts)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


# =========================================================================
# RoPE frequencies
# =========================================================================

def rope_frequencies(n_rot, base, freq_factors, key, n_ctx_train):
    """Inverse frequencies (radians per position, float64 [n_rot/2]) and the
    cos/sin scale of a model's rotary embedding. key(name, default) reads
    {arch}.rope.<name>. Written from the published formulas:

      RoPE (Su et al. 2021)      inv_freq_i = base^(-2i/n_rot)
      Llama 3.1 factors          inv_freq_i / rope_freqs[i]  (GGUF stores the
                                 ratio old/new frequency, see llama3_rope_factors)
      linear (position interp.)  inv_freq / factor
      YaRN (Peng et al. 2023, "NTK-by-parts" + attention temperature):
        r(b)  = n_rot ln(L / (2 pi b)) / (2 ln base)  the pair index whose
                wavelength fits b times into the original context L
        low   = max(floor(r(beta_fast)), 0), high = min(ceil(r(beta_slow)), n_rot - 1)
        gamma = clip((i - low) / (high - low), 0, 1) per pair i: 0 = fast pairs
                kept as trained, 1 = slow pairs fully interpolated
        inv_freq = inv_freq/factor * gamma' + inv_freq * (1 - gamma'),
                   gamma' = 1 - ext (1 - gamma)
        scale = 0.1 ln(factor) + 1   (sqrt of the softmax temperature 1/t)
    and the GGUF's rope.scaling.attn_factor multiplies the scale. A missing
    type with a factor means linear (llama.cpp's default); unknown types
    raise ValueError."""
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        if freq_factors.shape != (half,) or not np.all(np.isfinite(freq_factors)) or np.any(freq_factors <= 0):
            raise ValueError("bad rope_freqs.weight (shape %r)" % (freq_factors.shape,))
        inv_freq = inv_freq / freq_factors
    kind = key("scaling.type", "linear")
    factor = float(key("scaling.factor", key("scale_linear", 0.0)))
    if factor == 0.0:
        factor = 1.0
    scale = float(key("scaling.attn_factor", 1.0))
    if kind == "none" or (kind == "linear" and factor == 1.0):
        return inv_freq, scale
    if kind == "linear":
        return inv_freq / factor, scale
    if kind != "yarn":
        raise ValueError("unknown rope scaling type %r" % kind)
    L = float(key("scaling.original_context_length", n_ctx_train))
    beta_fast = float(key("scaling.yarn_beta_fast", 32.0))
    beta_slow = float(key("scaling.yarn_beta_slow", 1.0))
    ext = float(key("scaling.yarn_ext_factor", -1.0))
    if ext < 0:
        ext = 1.0

    def r(b):
        return n_rot * math.log(L / (2 * math.pi * b)) / (2 * math.log(base))

    low = max(math.floor(r(beta_fast)), 0)
    high = min(math.ceil(r(beta_slow)), n_rot - 1)
    if high == low:
        high += 0.001
    gamma = np.clip((i - low) / (high - low), 0.0, 1.0)
    interp = 1.0 - ext * (1.0 - gamma)          # weight of the interpolated frequency
    inv_freq = inv_freq / factor * interp + inv_freq * (1.0 - interp)
    if ext != 0.0:
        scale *= 0.1 * math.log(factor) + 1.0
    return inv_freq, scale


def llama3_rope_factors(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    """Meta's Llama 3.1 rope scaling (apply_scaling in the reference code):
    each frequency f with wavelength w = 2 pi / f becomes
        f                                      if w < old_len / high_freq_factor
        f / factor                             if w > old_len / low_freq_factor
        (1 - s) f / factor + s f,  s = (old_len / w - low) / (high - low)   otherwise.
    Returns f / new_f, the divisor GGUF files store as rope_freqs.weight."""
    f = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    w = 2 * math.pi / f
    s = (old_context_len / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
    new = np.where(w < old_context_len / high_freq_factor, f,
                   np.where(w > old_context_len / low_freq_factor, f / factor, (1 - s) * f / factor + s * f))
    return f / new


# =========================================================================
# Building blocks shared by the architectures
# =========================================================================

def gelu(x):
    """GELU, tanh approximation (ggml_gelu, the Gemma feed-forward):
        gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def softcap(x, cap):
    # x -> cap tanh(x / cap): a smooth clamp of x to (-cap, cap) (Gemma 2
    # attention scores and final logits, Gemma 3 final logits)
    return cap * np.tanh(x / cap)


def attn_mask(T, n_swa=0):
    """Boolean (T, T), True where query position i may NOT see key position j
    (positions 0..T-1):
        causal                 j > i
        sliding window n_swa   i - j >= n_swa   (n_swa > 0 only)
    so with a window query p sees the keys p - n_swa < p' <= p (llama.cpp
    is_masked_swa, LLAMA_SWA_TYPE_STANDARD: masked if p1 - p0 >= n_swa)."""
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    masked = j > i
    if n_swa > 0:
        masked = masked | (i - j >= n_swa)
    return masked


# =========================================================================
# Llama forward
# =========================================================================

ARCHES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "smollm3")
# llama.cpp's llama_model_rope_type: these rotate split halves (x[i], x[i + n_rot/2])
# ("NEOX"); llama and smollm3 rotate adjacent pairs (x[2i], x[2i+1]) ("NORM")
NEOX_ROPE_ARCHES = ("qwen2", "qwen3", "gemma2", "gemma3", "phi3")

# Weight types subq multiplies on activations quantised to 8 bits, in every
# forward call (src/kernels/kernels.h: gemm_q8 for batches, gemv_q8 for one
# to three tokens): Q4_0, Q8_0.
Q8_ACT_TYPES = (2, 8)
# ... and where the kernels have them (`subq info` names the level): Q4_K,
# Q6_K, in batched products (gemm_q8, 4 or more tokens a call) at the AVX-512
# VNNI level and in calls of 1 to 3 tokens (gemv_q8) at the AVX2 and
# AVX-512 VNNI levels.
KQ_ACT_TYPES = (12, 14)
GEMM_MIN_ROWS = 4


def q8_roundtrip(x):
    """x (T, n) after subq's 8-bit activation quantisation, in float32 as
    subq computes it: per block of 32, d = max|x| / 127, q = rint(x * (1/d))
    (ties to even), value d q."""
    T, n = x.shape
    xf = x.astype(np.float32).reshape(T, n // 32, 32)
    d = (np.abs(xf).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint((xf * inv).astype(np.float32))
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(T, n)


class LlamaRef:
    """Float64 forward pass of a GGUF model, as llama.cpp computes it.

    LlamaRef(path, n_ctx=None): n_ctx is the context size llama.cpp would run
    with (its n_ctx_seq); it only matters for phi3 files with
    rope_factors_long/short (None: the length of the token sequence of each
    forward call).

    GGUF keys read ({arch}. prefix; defaults in brackets), all architectures:
        embedding_length, block_count, attention.head_count,
        attention.head_count_kv [head_count], attention.key_length
        [n_embd/n_head], rope.dimension_count [head_dim], rope.freq_base
        [10000], context_length [2048], attention.layer_norm_rms_epsilon,
        rope.scaling.* (see rope_frequencies)
    Tensors, all architectures: token_embd, output_norm, output [tied to
    token_embd], blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
    ffn_norm, ffn_up, ffn_down} (.weight), ffn_gate (not phi3), optional
    attn_{q,k,v}.bias and attn_{q,k}_norm.weight, rope_freqs.weight (not phi3).
    Per architecture:
      llama    attention.sliding_window [none]: a window on every layer. NOTE
               llama.cpp ignores this key for llama (full attention); it is
               applied here because Mistral was trained with it.
      gemma2   attention.sliding_window [4096] on even layers (set_swa_pattern(2)),
               attn_logit_softcapping [50], final_logit_softcapping [30];
               blk.N.post_attention_norm, blk.N.post_ffw_norm
      gemma3   attention.sliding_window [0 = no sliding layers],
               attention.sliding_window_pattern [6] (period P: layer il slides
               iff il % P < P - 1; or one bool per layer), rope.freq_base_swa
               [10000] (sliding layers, never rope-scaled),
               final_logit_softcapping [none]; blk.N.attn_q_norm,
               blk.N.attn_k_norm, blk.N.post_attention_norm, blk.N.post_ffw_norm
      phi3     rope.scaling.original_context_length [context_length],
               rope.scaling.attn_factor (via rope_frequencies);
               blk.N.attn_qkv.weight (fused) or attn_q/k/v, ffn_up holding
               gate and up (no ffn_gate), rope_factors_short.weight,
               rope_factors_long.weight (optional); attention.sliding_window
               is ignored (llama.cpp disables Phi SWA)
      smollm3  no key of its own: layers with (il + 1) % 4 == 0 have no RoPE
    """

    def __init__(self, path, n_ctx=None):
        g = GGUFFile(path)
        self.g = g
        arch = g.get("general.architecture")
        if arch is None:
            raise ValueError("%s: no general.architecture" % path)
        self.arch = arch

        def hp(key, default=None, required=True):
            full = arch + "." + key
            if full in g.metadata:
                return g.metadata[full]
            if required and default is None:
                raise KeyError("%s: missing metadata key %s" % (path, full))
            return default

        self.n_embd = int(hp("embedding_length"))
        self.n_layer = int(hp("block_count"))
        self.n_head = int(hp("attention.head_count"))
        self.n_head_kv = int(hp("attention.head_count_kv", self.n_head))
        self.head_dim = int(hp("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(hp("rope.dimension_count", self.head_dim))
        self.rope_base = float(hp("rope.freq_base", 10000.0))
        self.n_ctx_train = int(hp("context_length", 2048, required=False))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.n_ctx = n_ctx
        if self.n_head % self.n_head_kv != 0:
            raise ValueError("n_head %d not a multiple of n_head_kv %d" % (self.n_head, self.n_head_kv))
        if self.n_rot % 2 != 0 or self.n_rot > self.head_dim:
            raise ValueError("bad rope.dimension_count %d (head_dim %d)" % (self.n_rot, self.head_dim))

        if arch not in ARCHES:
            raise ValueError("unsupported architecture %r" % arch)
        # qwen2/qwen3/gemma2/gemma3/phi3 rotate split halves (x[i], x[i + n_rot/2]) ("NEOX" rope)
        self.rope_neox = arch in NEOX_ROPE_ARCHES

        def rope_key(k, d):
            return hp("rope." + k, d, required=False)

        if arch != "phi3":
            ff = g.tensor("rope_freqs.weight").astype(np.float64) if g.has_tensor("rope_freqs.weight") else None
        else:
            # phi3: frequency divisors rope_factors_short (this one, the default) or
            # rope_factors_long (see layer_rope); llama.cpp loads no rope_freqs for phi3
            ff = g.tensor("rope_factors_short.weight").astype(np.float64) \
                if g.has_tensor("rope_factors_short.weight") else None
        self.rope_inv_freq, self.rope_mscale = rope_frequencies(
            self.n_rot, self.rope_base, ff, rope_key, self.n_ctx_train)

        # ---- what differs between the architectures (defaults: llama/qwen) --
        self.embd_scale = None      # gemma: embeddings multiplied by sqrt(n_embd)
        self.attn_q_scale = None    # gemma: q multiplied by this, then kq scale 1
                                    # (others: scores multiplied by 1/sqrt(head_dim))
        self.attn_softcap = None    # gemma2: scores s -> c tanh(s / c) before the mask
        self.final_softcap = None   # gemma2, gemma3: logits -> c tanh(logits / c)
        self.ffn_gelu = False       # gemma: gelu(gate) * up instead of silu(gate) * up
        self.n_swa = 0              # sliding window (tokens) of the layers in swa_layers
        self.swa_layers = [False] * self.n_layer
        self.no_rope_layers = [False] * self.n_layer   # smollm3: layers without RoPE
        self.rope_inv_freq_swa = None   # gemma3: RoPE of the sliding layers
        self.rope_mscale_swa = None
        self.rope_inv_freq_long = None  # phi3: RoPE with rope_factors_long
        self.rope_mscale_long = None
        self.n_ctx_orig = self.n_ctx_train  # phi3: context length of the short factors

        if arch == "llama":
            # Mistral: one window for every layer. llama.cpp ignores this key
            # for llama (its llama graph has no sliding window), so on inputs
            # longer than the window llama.cpp and this reference differ.
            self.n_swa = int(hp("attention.sliding_window", 0, required=False))
            self.swa_layers = [self.n_swa > 0] * self.n_layer
        elif arch in ("gemma2", "gemma3"):
            self.embd_scale = math.sqrt(self.n_embd)
            self.ffn_gelu = True
            # f_attention_scale: 1/sqrt(head_dim), except the 27B models (gemma2
            # 46 layers, gemma3 62 layers): 1/sqrt(n_embd / n_head) (integer division)
            big = self.n_layer == (46 if arch == "gemma2" else 62)
            self.attn_q_scale = 1.0 / math.sqrt(self.n_embd // self.n_head if big else self.head_dim)
            if arch == "gemma2":
                # every even layer slides (set_swa_pattern(2): il % 2 < 1); one
                # RoPE (the file's) for all layers
                self.n_swa = int(hp("attention.sliding_window", 4096, required=False))
                if self.n_swa <= 0:
                    raise ValueError("gemma2 attention.sliding_window must be > 0 (llama.cpp would mask every key)")
                self.swa_layers = [il % 2 < 1 for il in range(self.n_layer)]
                self.attn_softcap = float(hp("attn_logit_softcapping", 50.0, required=False))
                self.final_softcap = float(hp("final_logit_softcapping", 30.0, required=False))
            else:
                # sliding layers only with a window > 0 in the file; then period
                # P (default 6): layer il slides iff il % P < P - 1 (P = 0: all),
                # or an explicit bool per layer
                self.n_swa = int(hp("attention.sliding_window", 0, required=False))
                if self.n_swa > 0:
                    pattern = hp("attention.sliding_window_pattern", 6, required=False)
                    if isinstance(pattern, list):
                        if len(pattern) < self.n_layer:
                            raise ValueError("attention.sliding_window_pattern has %d < %d entries"
                                             % (len(pattern), self.n_layer))
                        self.swa_layers = [bool(pattern[il]) for il in range(self.n_layer)]
                    else:
                        P = int(pattern)
                        self.swa_layers = [P == 0 or il % P < P - 1 for il in range(self.n_layer)]
                    # sliding layers: base rope.freq_base_swa (10000), no rope scaling
                    # (rope_freq_scale_train_swa = 1); global layers: the file's rope
                    base_swa = float(hp("rope.freq_base_swa", 10000.0, required=False))
                    self.rope_inv_freq_swa, self.rope_mscale_swa = rope_frequencies(
                        self.n_rot, base_swa, None,
                        lambda k, d: "none" if k == "scaling.type" else rope_key(k, d), self.n_ctx_train)
                # final soft-capping only with a non-zero key (llama.cpp: default 0 = off)
                cap = float(hp("final_logit_softcapping", 0.0, required=False))
                self.final_softcap = cap if cap != 0.0 else None
        elif arch == "phi3":
            # long factors when the context exceeds the original one (see layer_rope)
            self.n_ctx_orig = int(hp("rope.scaling.original_context_length", self.n_ctx_train, required=False))
            if g.has_tensor("rope_factors_long.weight"):
                self.rope_inv_freq_long, self.rope_mscale_long = rope_frequencies(
                    self.n_rot, self.rope_base, g.tensor("rope_factors_long.weight").astype(np.float64),
                    rope_key, self.n_ctx_train)
        elif arch == "smollm3":
            # n_no_rope_layer_step = 4 (hard-coded): layer il has RoPE iff (il + 1) % 4 != 0
            if self.n_rot != self.head_dim:
                raise ValueError("smollm3 needs rope.dimension_count == head_dim")
            self.no_rope_layers = [(il + 1) % 4 == 0 for il in range(self.n_layer)]

        # the tokenizer is only needed for text commands (logits work without it)
        self.tok = SpmTokenizer(g) if g.get("tokenizer.ggml.model") == "llama" else None

        def w(name):
            return g.tensor(name).astype(np.float64)

        self.wtype = {n: g.tensor_infos[n].type for n in g.tensor_names()}

        # token_embd: ne = [d, n_vocab] -> numpy (n_vocab, d): row t = embedding of t
        self.tok_embd = w("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")
        # output: (n_vocab, d); tied to the embedding when absent
        self.output = w("output.weight") if g.has_tensor("output.weight") else self.tok_embd
        self.output_type = self.wtype["output.weight" if g.has_tensor("output.weight") else "token_embd.weight"]

        nq = self.n_head * self.head_dim
        nkv = self.n_head_kv * self.head_dim
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            L = {
                "attn_norm": w(p + "attn_norm.weight"),    # (d,)
                "wo": w(p + "attn_output.weight"),         # (d, n_head*hd)
                "ffn_norm": w(p + "ffn_norm.weight"),      # (d,)
                "w_down": w(p + "ffn_down.weight"),        # (d, n_ff)
            }
            ty = {"wo": self.wtype[p + "attn_output.weight"], "w_down": self.wtype[p + "ffn_down.weight"]}
            if g.has_tensor(p + "attn_qkv.weight"):
                # phi3 fused projection (n_head*hd + 2 n_head_kv*hd, d): rows q, then k, then v
                qkv = w(p + "attn_qkv.weight")
                if qkv.shape[0] != nq + 2 * nkv:
                    raise ValueError("%sattn_qkv.weight has %d rows, want %d" % (p, qkv.shape[0], nq + 2 * nkv))
                L["wq"], L["wk"], L["wv"] = qkv[:nq], qkv[nq:nq + nkv], qkv[nq + nkv:]
                ty["wq"] = ty["wk"] = ty["wv"] = self.wtype[p + "attn_qkv.weight"]
                if g.has_tensor(p + "attn_qkv.bias"):
                    b = w(p + "attn_qkv.bias")
                    L["attn_q.bias"], L["attn_k.bias"], L["attn_v.bias"] = b[:nq], b[nq:nq + nkv], b[nq + nkv:]
            else:
                L["wq"] = w(p + "attn_q.weight")           # (n_head*hd, d)
                L["wk"] = w(p + "attn_k.weight")           # (n_head_kv*hd, d)
                L["wv"] = w(p + "attn_v.weight")           # (n_head_kv*hd, d)
                for k, n in (("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v")):
                    ty[k] = self.wtype[p + n + ".weight"]
            if arch == "phi3":
                # fused (2 n_ff, d): rows 0..n_ff-1 the gate, n_ff..2n_ff-1 the up
                # projection (ggml_swiglu: silu(first half) * second half)
                up = w(p + "ffn_up.weight")
                n_ff = up.shape[0] // 2
                L["w_gate"], L["w_up"] = up[:n_ff], up[n_ff:]
                ty["w_gate"] = ty["w_up"] = self.wtype[p + "ffn_up.weight"]
            else:
                L["w_gate"] = w(p + "ffn_gate.weight")     # (n_ff, d)
                L["w_up"] = w(p + "ffn_up.weight")         # (n_ff, d)
                ty["w_gate"] = self.wtype[p + "ffn_gate.weight"]
                ty["w_up"] = self.wtype[p + "ffn_up.weight"]
            L["type"] = ty
            for opt in ("attn_q.bias", "attn_k.bias", "attn_v.bias",     # qwen2
                        "attn_q_norm.weight", "attn_k_norm.weight",      # qwen3, gemma3, (hd,)
                        "post_attention_norm.weight", "post_ffw_norm.weight"):  # gemma, (d,)
                if g.has_tensor(p + opt):
                    L[opt] = w(p + opt)
            need = {"gemma2": ("post_attention_norm.weight", "post_ffw_norm.weight"),
                    "gemma3": ("post_attention_norm.weight", "post_ffw_norm.weight",
                               "attn_q_norm.weight", "attn_k_norm.weight")}.get(arch, ())
            for n in need:
                if n not in L:
                    raise KeyError("%s: missing tensor %s%s" % (path, p, n))
            self.layers.append(L)

    # ---- building blocks -------------------------------------------------
    def rmsnorm(self, x, weight):
        # y = x / sqrt(mean(x^2) + eps) * weight      (per row)
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * weight

    def rope(self, x, positions, inv_freq=None, mscale=None):
        """x: (T, n_heads, head_dim). Rotary embedding of pair i (i < n_rot/2)
        by angle = pos * inv_freq_i (see rope_frequencies), cos and sin
        multiplied by the YaRN attention scale m. Adjacent pairs ("NORM"):
            x'[2i]   = m (x[2i] cos(angle) - x[2i+1] sin(angle))
            x'[2i+1] = m (x[2i] sin(angle) + x[2i+1] cos(angle))
        ("NEOX": the same with the pair (x[i], x[i + n_rot/2])); dims >= n_rot
        are left untouched. inv_freq, mscale: default the model's
        rope_inv_freq, rope_mscale (layer_rope gives a layer's)."""
        if inv_freq is None:
            inv_freq = self.rope_inv_freq
        if mscale is None:
            mscale = self.rope_mscale
        pos = positions.astype(np.float64)
        angle = pos[:, None] * inv_freq[None, :]                            # (T, half)
        cos = mscale * np.cos(angle)[:, None, :]                            # (T, 1, half)
        sin = mscale * np.sin(angle)[:, None, :]
        half = self.n_rot // 2
        out = x.copy()
        if self.rope_neox:   # pairs (x[i], x[i + half])
            i0, i1 = slice(0, half), slice(half, self.n_rot)
        else:                # pairs (x[2i], x[2i+1])
            i0, i1 = slice(0, self.n_rot, 2), slice(1, self.n_rot, 2)
        x0 = x[:, :, i0]
        x1 = x[:, :, i1]
        out[:, :, i0] = x0 * cos - x1 * sin
        out[:, :, i1] = x0 * sin + x1 * cos
        return out

    def layer_rope(self, il, n_ctx):
        """(inv_freq, mscale) of layer il's RoPE for a context of n_ctx
        tokens, or None for a layer without RoPE:
          smollm3 layers with (il + 1) % 4 == 0     no RoPE
          gemma3 sliding layers                     rope_inv_freq_swa
          phi3 with n_ctx > original context        rope_factors_long
          otherwise                                 rope_inv_freq (phi3: short factors)
        phi3: llama.cpp (llama_model::get_rope_factors) takes the long
        factors when its context per sequence (cparams.n_ctx_seq) exceeds
        rope.scaling.original_context_length, whatever the positions; n_ctx
        here is that size as given (llama.cpp rounds a context up to a
        multiple of 256 first, which changes nothing when the original
        context is a multiple of 256, as the released models' 4096 is).
        The long and the short tables share rope.scaling.attn_factor."""
        if self.no_rope_layers[il]:
            return None
        if self.swa_layers[il] and self.rope_inv_freq_swa is not None:
            return self.rope_inv_freq_swa, self.rope_mscale_swa
        if self.rope_inv_freq_long is not None and n_ctx > self.n_ctx_orig:
            return self.rope_inv_freq_long, self.rope_mscale_long
        return self.rope_inv_freq, self.rope_mscale

    def mm(self, x, W, wtype, q8):
        """x W^T, with the rows flagged in q8 = (q8_rows, q8_rows_k) (None:
        none) quantised to 8 bits first when subq's integer products take
        weights of this type (q8_rows_k: the K-quant types')."""
        rows = q8[0] if wtype in Q8_ACT_TYPES else q8[1] if wtype in KQ_ACT_TYPES else None
        if rows is not None and rows.any():
            x = np.where(rows[:, None], q8_roundtrip(x), x)
        return x @ W.T

    # ---- forward -----------------------------------------------------------
    def forward(self, tokens, q8_rows=None, q8_rows_k=None):
        """Logits (float64, shape [T, n_vocab]) for tokens at positions 0..T-1
        with causal attention (and the sliding window on the layers that have
        one). q8_rows, q8_rows_k (bool [T], optional): the tokens whose
        activations are quantised to 8 bits (see mm)."""
        q8 = (q8_rows, q8_rows_k)
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        if T == 0:
            return np.zeros((0, self.n_vocab))
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range [0, %d)" % self.n_vocab)
        hd = self.head_dim
        nh = self.n_head
        nkv = self.n_head_kv
        group = nh // nkv
        # scores s = q.k * scale; gemma scales q by attn_q_scale instead (kq scale 1)
        scale = 1.0 / math.sqrt(hd) if self.attn_q_scale is None else 1.0
        positions = np.arange(T)
        n_ctx = self.n_ctx if self.n_ctx is not None else T
        # masks[w]: True where query i may not attend to key j (attn_mask);
        # w = 0 causal only, else causal + sliding window of w tokens
        masks = {}

        x = self.tok_embd[tokens]                                   # (T, d)
        if self.embd_scale is not None:                             # gemma: x * sqrt(n_embd)
            x = x * self.embd_scale
        for il, L in enumerate(self.layers):
            # ---- attention block
            h = self.rmsnorm(x, L["attn_norm"])
            ty = L["type"]
            q = self.mm(h, L["wq"], ty["wq"], q8)              # q = h Wq^T (+ bq)
            k = self.mm(h, L["wk"], ty["wk"], q8)
            v = self.mm(h, L["wv"], ty["wv"], q8)
            if "attn_q.bias" in L:
                q = q + L["attn_q.bias"]
                k = k + L["attn_k.bias"]
                v = v + L["attn_v.bias"]
            q = q.reshape(T, nh, hd)
            k = k.reshape(T, nkv, hd)
            v = v.reshape(T, nkv, hd)
            if "attn_q_norm.weight" in L:                           # qwen3, gemma3: per-head RMSNorm
                q = self.rmsnorm(q, L["attn_q_norm.weight"])
                k = self.rmsnorm(k, L["attn_k_norm.weight"])
            rp = self.layer_rope(il, n_ctx)                         # None: no RoPE (smollm3)
            if rp is not None:
                q = self.rope(q, positions, *rp)
                k = self.rope(k, positions, *rp)
            if self.attn_q_scale is not None:                       # gemma: q * f_attention_scale
                q = q * self.attn_q_scale
            w_l = self.n_swa if self.swa_layers[il] else 0          # this layer's window (0: none)
            if w_l not in masks:
                masks[w_l] = attn_mask(T, w_l)
            mask = masks[w_l]
            heads = np.empty((T, nh, hd))
            for hq in range(nh):
                kvh = hq // group                                   # GQA: shared kv head
                s = (q[:, hq, :] @ k[:, kvh, :].T) * scale          # (T, T) scores
                if self.attn_softcap is not None:                   # gemma2: s = c tanh(s / c)
                    s = softcap(s, self.attn_softcap)
                s = np.where(mask, -np.inf, s)
                s = s - s.max(axis=1, keepdims=True)                # softmax over keys
                p = np.exp(s)
                p = p / p.sum(axis=1, keepdims=True)
                heads[:, hq, :] = p @ v[:, kvh, :]
            attn = self.mm(heads.reshape(T, nh * hd), L["wo"], ty["wo"], q8)   # output projection
            if "post_attention_norm.weight" in L:                   # gemma: RMSNorm before the residual
                attn = self.rmsnorm(attn, L["post_attention_norm.weight"])
            x = x + attn                                            # residual
            # ---- feed-forward block: act(h Wgate^T) * (h Wup^T), then Wdown
            # (act = silu: SwiGLU; gemma: gelu, GeGLU)
            h = self.rmsnorm(x, L["ffn_norm"])
            gate = self.mm(h, L["w_gate"], ty["w_gate"], q8)
            up = self.mm(h, L["w_up"], ty["w_up"], q8)
            if self.ffn_gelu:
                act = gelu(gate)
            else:
                act = gate / (1.0 + np.exp(-gate))                  # silu(z) = z * sigmoid(z)
            ffn = self.mm(act * up, L["w_down"], ty["w_down"], q8)
            if "post_ffw_norm.weight" in L:                         # gemma: RMSNorm before the residual
                ffn = self.rmsnorm(ffn, L["post_ffw_norm.weight"])
            x = x + ffn                                             # residual
        x = self.rmsnorm(x, self.output_norm)
        logits = self.mm(x, self.output, self.output_type, q8)      # (T, n_vocab)
        if self.final_softcap is not None:                          # logits = c tanh(logits / c)
            logits = softcap(logits, self.final_softcap)
        return logits

    # ---- high level ----------------------------------------------------------
    def generate(self, prompt, n):
        """Greedy: BOS (+ tokenize(prompt)), then up to n argmax tokens, stop
        after EOS. Returns the token list (including BOS and any EOS)."""
        toks = [self.tok.bos_id] + self.tok.encode(prompt or "", add_bos=False)
        for _ in range(n):
            logits = self.forward(toks)[-1]
            nxt = int(np.argmax(logits))
            toks.append(nxt)
            if nxt == self.tok.eos_id:
                break
        return toks

    def perplexity(self, text, n_ctx, max_chunks, window=None):
        """llama.cpp perplexity: score the second half of each n_ctx chunk.
        With `window` (dividing n_ctx), each scored position j of a chunk
        is predicted from the window of `window` chunk tokens whose second
        half holds j: windows start at n_ctx/2 - window/2 + i window/2, their
        first token replaced by BOS."""
        tokens = [self.tok.bos_id] + self.tok.encode(text, add_bos=False)
        n_chunk = min(len(tokens) // n_ctx, max_chunks)
        if n_chunk < 1:
            raise ValueError("text has %d tokens, need at least %d" % (len(tokens), n_ctx))
        first = n_ctx // 2
        W = window or n_ctx
        nll_sum = 0.0
        nll2_sum = 0.0
        count = 0
        for c in range(n_chunk):
            chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
            for a in range(first - W // 2, n_ctx - 1 - W // 2, W // 2):
                win = chunk[a:a + W]
                win[0] = self.tok.bos_id
                logits = self.forward(win)
                for j in range(a + W // 2, min(a + W, n_ctx - 1)):
                    row = logits[j - a]
                    # log_softmax(row)[t] = row[t] - (max + log sum exp(row - max))
                    m = row.max()
                    lse = m + math.log(np.exp(row - m).sum())
                    nll = lse - row[chunk[j + 1]]
                    nll_sum += nll
                    nll2_sum += nll * nll
                    count += 1
        mean = nll_sum / count
        mean2 = nll2_sum / count
        ppl = math.exp(mean)
        var = mean2 - mean * mean
        stderr = ppl * math.sqrt(var / (count - 1)) if (var > 0 and count > 1) else 0.0
        return {"ppl": ppl, "ppl_stderr": stderr, "n_tokens_scored": count,
                "n_chunks": n_chunk, "mean_nll": mean}


# =========================================================================
# CLI
# =========================================================================

def utf8_prefix(data, max_bytes):
    """The longest prefix of `data` of at most max_bytes bytes that does not
    end inside a UTF-8 character."""
    if len(data) <= max_bytes:
        return data
    data = data[:max_bytes]
    # walk back over continuation bytes (10xxxxxx) to the last lead byte
    lead = len(data) - 1
    while lead > 0 and (data[lead] & 0xC0) == 0x80:
        lead -= 1
    b = data[lead]
    # length of the character that starts with this lead byte
    if b < 0x80:
        need = 1
    elif b >= 0xF0:
        need = 4
    elif b >= 0xE0:
        need = 3
    elif b >= 0xC0:
        need = 2
    else:
        need = 1  # stray continuation byte at the very start: leave it alone
    if len(data) - lead < need:
        data = data[:lead]  # last character incomplete: drop it
    return data


def read_text_file(path, max_bytes=None):
    """Read a file as UTF-8; with max_bytes cut back to a character boundary."""
    with open(path, "rb") as f:
        data = f.read()
    if max_bytes is not None:
        data = utf8_prefix(data, max_bytes)
    return data.decode("utf-8")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--selftest-families"]:
        # sanity checks of the non-llama paths on random tiny models (selftest_ref.py)
        import selftest_ref
        return selftest_ref.main(families_only=True)
    ap = argparse.ArgumentParser(description="numpy reference for subq (SPM tokenizer + Llama)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("generate")
    a.add_argument("model")
    a.add_argument("-p", "--prompt", default="")
    a.add_argument("-n", type=int, required=True)

    a = sub.add_parser("perplexity")
    a.add_argument("model")
    a.add_argument("file")
    a.add_argument("-c", type=int, default=512)
    a.add_argument("--chunks", type=int, default=1 << 30)

    a = sub.add_parser("tokenize")
    a.add_argument("model")
    a.add_argument("file")
    a.add_argument("--max-bytes", type=int, default=None)
    a.add_argument("--no-bos", action="store_true")

    a = sub.add_parser("logits")
    a.add_argument("model")
    a.add_argument("--tokens", required=True)
    a.add_argument("-o", "--output", required=True)
    a.add_argument("--n-ctx", type=int, default=None,
                   help="context size (phi3 rope factors; default: the number of tokens)")

    args = ap.parse_args(argv)
    m = LlamaRef(args.model, n_ctx=getattr(args, "n_ctx", None))

    if args.cmd == "generate":
        toks = m.generate(args.prompt, args.n)
        sys.stdout.buffer.write(m.tok.decode_bytes(toks) + b"\n")
        sys.stdout.flush()
    elif args.cmd == "perplexity":
        text = read_text_file(args.file)
        print(json.dumps(m.perplexity(text, args.c, args.chunks)))
    elif args.cmd == "tokenize":
        text = read_text_file(args.file, args.max_bytes)
        ids = m.tok.encode(text, add_bos=not args.no_bos)
        print(" ".join(str(t) for t in ids))
    elif args.cmd == "logits":
        toks = [int(t) for t in args.tokens.split()]
        logits = m.forward(toks).astype("<f4")
        with open(args.output, "wb") as f:
            f.write(logits.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
