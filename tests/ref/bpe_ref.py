#!/usr/bin/python3
"""Independent reference for subq's byte-level BPE ("gpt2" GGUF vocabularies).

Written from the published algorithm, not from subq's C code:

  1. special tokens: CONTROL and USER_DEFINED tokens (non-empty; for a text
     that occurs twice, the last id) are cut out of the raw text first,
     scanning left to right and taking the longest special token that starts
     at each position (HF tokenizers' leftmost-longest added-token match);
  2. pre-split of each remaining span with a hand-written scanner that does
     what the pre-tokenizer regex of tokenizer.ggml.pre does under PCRE2
     (UTF + UCP), alternative by alternative (no regex engine used):
       gpt2   's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
       qwen2  (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|
              \\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
       llama3 qwen2 with \\p{N}{1,3}
       smollm every \\p{N} character alone, gpt2 on the spans between
       gpt4o  [^\\r\\n\\p{L}\\p{N}]?U*L+C?|[^\\r\\n\\p{L}\\p{N}]?U+L*C?|\\p{N}{1,3}|
              ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
              with llama.cpp's case classes: U = a letter other than a-z,
              L = a letter other than A-Z (so only ASCII letters have a case;
              marks are in neither), C = the ASCII contractions 's 't 're 've
              'm 'll 'd in either case
     Character classes: \\p{L} / \\p{N} = Unicode general category L* / N*;
     \\s = category Z* or U+0009..U+000D, U+0085, U+180E (what PCRE2 10.42's
     \\s matches with PCRE2_UCP: \\p{Z}, \\h and \\v);
  3. each word's UTF-8 bytes -> GPT-2 bytes_to_unicode characters;
  4. merges: repeatedly merge the adjacent pair with the lowest rank
     (rank = index in tokenizer.ggml.merges, first occurrence of a repeated
     pair), leftmost on ties, one merge at a time (brute force); with
     llama3's ignore_merges a word that is a token is taken whole;
  5. symbols -> ids; a byte without a token -> unknown token or error.

Decode: NORMAL tokens map back through the byte alphabet (other characters
as their UTF-8), CONTROL / USER_DEFINED tokens are their text, except BOS and
EOS (CONTROL); UNKNOWN and UNUSED tokens give nothing.

Also here: a small GGUF writer and a deterministic BPE trainer, which
check_bpe.py uses to make test vocabularies.

CLI:  bpe_ref.py tokenize MODEL FILE      (prints ids, no BOS)
"""

import heapq
import os
import struct
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_np import GGUFFile  # noqa: E402

TOKTYPE_NORMAL = 1
TOKTYPE_UNKNOWN = 2
TOKTYPE_CONTROL = 3
TOKTYPE_USER_DEFINED = 4
TOKTYPE_UNUSED = 5
TOKTYPE_BYTE = 6


# =========================================================================
# GPT-2 bytes_to_unicode
# =========================================================================

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_CHR = bytes_to_unicode()
CHR_TO_BYTE = {c: b for b, c in BYTE_TO_CHR.items()}
# The byte symbols in GPT-2's vocabulary order (printable bytes first).
BYTE_ORDER = sorted(range(256), key=lambda b: ord(BYTE_TO_CHR[b]))


def to_symbols(word):
    """str -> its UTF-8 bytes as byte-alphabet characters (list)."""
    return [BYTE_TO_CHR[b] for b in word.encode("utf-8")]


# =========================================================================
# character classes (PCRE2 10.42 + PCRE2_UCP, Unicode 14)
# =========================================================================

_SPACE_EXTRA = frozenset([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x180E])
_cls_cache = {}


def char_class(c):
    """'L', 'N', 'S' (\\s) or 'O' (anything else)."""
    k = _cls_cache.get(c)
    if k is None:
        cat = unicodedata.category(c)
        if cat[0] == "L":
            k = "L"
        elif cat[0] == "N":
            k = "N"
        elif cat[0] == "Z" or ord(c) in _SPACE_EXTRA:
            k = "S"
        else:
            k = "O"
        _cls_cache[c] = k
    return k


def _run(s, i, cls):
    n = len(s)
    while i < n and char_class(s[i]) == cls:
        i += 1
    return i


def _run_crlf(s, i):
    n = len(s)
    while i < n and s[i] in "\r\n":
        i += 1
    return i


def _space_tail(s, i):
    """\\s+(?!\\S)|\\s+ at i (s[i] is \\s): end of the match."""
    j = _run(s, i, "S")
    if j == len(s) or j - i == 1:
        return j      # lookahead sees the end / single space: the \\s+ fallback
    return j - 1      # leave the last space to go with the next word


_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def match_gpt2(s, i):
    c = s[i]
    n = len(s)
    if c == "'":
        for suf in _CONTRACTIONS:
            if s.startswith(suf, i + 1):
                return i + 1 + len(suf)
    for cls in ("L", "N", "O"):
        if c == " " and i + 1 < n and char_class(s[i + 1]) == cls:
            return _run(s, i + 1, cls)
        if char_class(c) == cls:
            return _run(s, i, cls)
    return _space_tail(s, i)


def match_qwen(s, i, max_digits):
    c = s[i]
    n = len(s)
    # (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
    if c == "'":
        for suf in _CONTRACTIONS:
            seg = s[i + 1:i + 1 + len(suf)]
            if len(seg) == len(suf) and all(a in (b, b.upper()) for a, b in zip(seg, suf)):
                return i + 1 + len(suf)
    k = char_class(c)
    # [^\r\n\p{L}\p{N}]?\p{L}+
    if c not in "\r\n" and k not in ("L", "N") and i + 1 < n and char_class(s[i + 1]) == "L":
        return _run(s, i + 1, "L")
    if k == "L":
        return _run(s, i, "L")
    # \p{N} or \p{N}{1,3}
    if k == "N":
        j = i
        while j < n and j - i < max_digits and char_class(s[j]) == "N":
            j += 1
        return j
    # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if c == " " and i + 1 < n and char_class(s[i + 1]) == "O":
        return _run_crlf(s, _run(s, i + 1, "O"))
    if k == "O":
        return _run_crlf(s, _run(s, i, "O"))
    # \s*[\r\n]+ : ends after the last newline of the whitespace run
    j = _run(s, i, "S")
    last = -1
    for t in range(i, j):
        if s[t] in "\r\n":
            last = t
    if last >= 0:
        return last + 1
    return _space_tail(s, i)


def _upper(c):
    """gpt4o's U: a letter that is not a-z (llama.cpp: ASCII case only)."""
    return char_class(c) == "L" and not ("a" <= c <= "z")


def _lower(c):
    """gpt4o's L: a letter that is not A-Z."""
    return char_class(c) == "L" and not ("A" <= c <= "Z")


def _contraction(s, i):
    """End of an ASCII contraction ('s 't 're 've 'm 'll 'd, either case) at i, or i."""
    if i < len(s) and s[i] == "'":
        for suf in _CONTRACTIONS:
            seg = s[i + 1:i + 1 + len(suf)]
            if len(seg) == len(suf) and all(a in (b, b.upper()) for a, b in zip(seg, suf)):
                return i + 1 + len(suf)
    return i


def match_gpt4o(s, i, upper=_upper, lower=_lower):
    """upper/lower: the two case classes (other definitions give variants of
    the pattern, e.g. HF's Unicode ones)."""
    c = s[i]
    n = len(s)
    k = char_class(c)
    # the two word alternatives share the optional leading [^\r\n\p{L}\p{N}]
    # (taken when it is there: without it, no letter starts at i)
    j = i + 1 if (c not in "\r\n" and k not in ("L", "N")) else i
    # U*L+: U* backs off from its longest run until an L follows
    r = j
    while r < n and upper(s[r]):
        r += 1
    start = -1
    for t in range(r, j - 1, -1):
        if t < n and lower(s[t]):
            start = t
            break
    if start >= 0:
        e = start
        while e < n and lower(s[e]):
            e += 1
        return _contraction(s, e)
    # U+L*: reached only when s[j:r] is all A-Z and no letter follows
    if r > j:
        e = r
        while e < n and lower(s[e]):
            e += 1
        return _contraction(s, e)
    # \p{N}{1,3}
    if k == "N":
        e = i
        while e < n and e - i < 3 and char_class(s[e]) == "N":
            e += 1
        return e
    # ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    if (c == " " and i + 1 < n and char_class(s[i + 1]) == "O") or k == "O":
        e = _run(s, i + 1 if c == " " else i, "O")
        while e < n and s[e] in "\r\n/":
            e += 1
        return e
    # \s*[\r\n]+ : ends after the last newline of the whitespace run
    e = _run(s, i, "S")
    last = -1
    for t in range(i, e):
        if s[t] in "\r\n":
            last = t
    if last >= 0:
        return last + 1
    return _space_tail(s, i)


def _scan(s, match):
    out = []
    i = 0
    while i < len(s):
        j = match(s, i)
        assert j > i
        out.append(s[i:j])
        i = j
    return out


PRE_KINDS = {
    "default": "gpt2", "gpt2": "gpt2", "gpt-2": "gpt2",
    "qwen2": "qwen2",
    "llama-bpe": "llama3", "llama3": "llama3", "llama-v3": "llama3",
    "smollm": "smollm",
    "gpt-4o": "gpt4o",
}


def pre_split(s, kind):
    if kind == "gpt2":
        return _scan(s, match_gpt2)
    if kind == "qwen2":
        return _scan(s, lambda t, i: match_qwen(t, i, 1))
    if kind == "llama3":
        return _scan(s, lambda t, i: match_qwen(t, i, 3))
    if kind == "gpt4o":
        return _scan(s, match_gpt4o)
    if kind == "smollm":
        out = []
        start = 0
        for i, c in enumerate(s):
            if char_class(c) == "N":
                if i > start:
                    out += _scan(s[start:i], match_gpt2)
                out.append(c)
                start = i + 1
        if start < len(s):
            out += _scan(s[start:], match_gpt2)
        return out
    raise ValueError("unknown pre kind %r" % kind)


# =========================================================================
# the tokenizer
# =========================================================================

class BpeRef:
    def __init__(self, g):
        md = g.metadata if isinstance(g, GGUFFile) else g
        if md.get("tokenizer.ggml.model") != "gpt2":
            raise ValueError("not a gpt2 vocabulary: %r" % md.get("tokenizer.ggml.model"))
        self.tokens = list(md["tokenizer.ggml.tokens"])
        n = len(self.tokens)
        self.types = list(md.get("tokenizer.ggml.token_type", [TOKTYPE_NORMAL] * n))
        pre = md.get("tokenizer.ggml.pre", "default")
        if pre not in PRE_KINDS:
            raise ValueError("unsupported pre %r" % pre)
        self.kind = PRE_KINDS[pre]
        self.ignore_merges = self.kind == "llama3"

        def sid(key):
            v = md.get(key)
            return -1 if v is None or v < 0 or v == 0xFFFFFFFF else int(v)

        self.bos = sid("tokenizer.ggml.bos_token_id")
        self.eos = sid("tokenizer.ggml.eos_token_id")
        self.unk = sid("tokenizer.ggml.unknown_token_id")
        self.add_bos = bool(md.get("tokenizer.ggml.add_bos_token", self.kind == "llama3"))

        self.token_to_id = {}
        for i, t in enumerate(self.tokens):
            self.token_to_id[t] = i          # the last duplicate wins
        self.ranks = {}
        for r, m in enumerate(md["tokenizer.ggml.merges"]):
            sp = m.find(" ", 1)
            if sp < 0:
                raise ValueError("merge %d %r has no space" % (r, m))
            a, b = m[:sp], m[sp + 1:]
            for piece in (a, b, a + b):
                if piece not in self.token_to_id:
                    raise ValueError("merge %d %r: %r is not a token" % (r, m, piece))
            self.ranks.setdefault((a, b), r)

        # special tokens by first character, longest first
        self.special_by_char = {}
        for i, t in enumerate(self.tokens):
            if self.types[i] not in (TOKTYPE_CONTROL, TOKTYPE_USER_DEFINED) or not t:
                continue
            if self.token_to_id[t] != i or any(0xD800 <= ord(ch) <= 0xDFFF for ch in t):
                continue  # not canonical, or not valid UTF-8 (surrogate-escaped)
            self.special_by_char.setdefault(t[0], []).append((t, i))
        for lst in self.special_by_char.values():
            lst.sort(key=lambda x: (-len(x[0]), x[1]))
        self._memo = {}

    # ---- encode ---------------------------------------------------------
    def bpe(self, word):
        syms = to_symbols(word)
        if self.ignore_merges and "".join(syms) in self.token_to_id:
            return ["".join(syms)]
        while len(syms) > 1:
            best = None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return syms

    def word_ids(self, word):
        ids = self._memo.get(word)
        if ids is None:
            ids = []
            for s in self.bpe(word):
                t = self.token_to_id.get(s)
                if t is None:
                    if self.unk < 0:
                        raise ValueError("no token for %r and no unknown token" % s)
                    t = self.unk
                ids.append(t)
            self._memo[word] = ids
        return ids

    def split_special(self, text):
        """[(is_special, str_or_id)] pieces."""
        out = []
        start = 0
        i = 0
        n = len(text)
        while i < n:
            cands = self.special_by_char.get(text[i])
            hit = None
            if cands:
                for t, tid in cands:
                    if text.startswith(t, i):
                        hit = (t, tid)
                        break
            if hit is None:
                i += 1
                continue
            if i > start:
                out.append((False, text[start:i]))
            out.append((True, hit[1]))
            i += len(hit[0])
            start = i
        if start < n:
            out.append((False, text[start:]))
        return out

    def words(self, text):
        """The pre-split words of text (special tokens as ints)."""
        out = []
        for is_sp, x in self.split_special(text):
            if is_sp:
                out.append(x)
            else:
                out += pre_split(x, self.kind)
        return out

    def encode(self, text, add_bos=False):
        ids = [self.bos] if add_bos and self.bos >= 0 else []
        for w in self.words(text):
            if isinstance(w, int):
                ids.append(w)
            else:
                ids += self.word_ids(w)
        return ids

    # ---- decode ---------------------------------------------------------
    def piece_bytes(self, tid):
        t, ty = self.tokens[tid], self.types[tid]
        if ty in (TOKTYPE_UNKNOWN, TOKTYPE_UNUSED) or (ty == TOKTYPE_CONTROL and tid in (self.bos, self.eos)):
            return b""
        if ty in (TOKTYPE_CONTROL, TOKTYPE_USER_DEFINED):
            return t.encode("utf-8", "surrogateescape")
        out = bytearray()
        for ch in t:
            b = CHR_TO_BYTE.get(ch)
            if b is None:
                out += ch.encode("utf-8", "surrogateescape")
            else:
                out.append(b)
        return bytes(out)

    def decode_bytes(self, ids):
        return b"".join(self.piece_bytes(t) for t in ids)


# =========================================================================
# test vocabularies: a deterministic BPE trainer and a GGUF writer
# =========================================================================

def train_bpe(texts, kind, n_merges, chunk_texts=(), chunk=24):
    """Classic BPE training over pre-split words (counts from `texts`).
    Fixed-size pieces (`chunk` characters) of `chunk_texts` are counted as
    words too, so that merges also cross pre-split boundaries: a tokenizer
    that cuts words in a different place then gives different ids. Returns
    (tokens, merges): the 256 byte symbols in GPT-2 order, then one token
    per merge unless its text already exists. Ties: the lexicographically
    smallest pair of the most frequent ones."""
    counts = {}
    words = [w for t in texts for w in pre_split(t, kind)]
    words += [t[i:i + chunk] for t in chunk_texts for i in range(0, len(t), chunk)]
    for w in words:
        key = tuple(to_symbols(w))
        counts[key] = counts.get(key, 0) + 1
    words = [list(k) for k in counts]
    freq = [counts[k] for k in counts]
    pair_n = {}
    where = {}
    for wi, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_n[p] = pair_n.get(p, 0) + freq[wi]
            where.setdefault(p, set()).add(wi)
    heap = [(-c, p) for p, c in pair_n.items()]
    heapq.heapify(heap)
    tokens = [BYTE_TO_CHR[b] for b in BYTE_ORDER]
    have = set(tokens)
    merges = []
    while len(merges) < n_merges and heap:
        negc, p = heapq.heappop(heap)
        if pair_n.get(p, 0) != -negc or negc == 0:
            continue  # stale entry
        a, b = p
        merges.append(a + " " + b)
        if a + b not in have:
            have.add(a + b)
            tokens.append(a + b)
        changed = set()
        for wi in list(where.get(p, ())):
            w = words[wi]
            if not any(w[k] == a and w[k + 1] == b for k in range(len(w) - 1)):
                continue
            f = freq[wi]
            for q in zip(w, w[1:]):
                pair_n[q] -= f
                changed.add(q)
            nw = []
            k = 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    nw.append(a + b)
                    k += 2
                else:
                    nw.append(w[k])
                    k += 1
            words[wi] = nw
            for q in zip(nw, nw[1:]):
                pair_n[q] = pair_n.get(q, 0) + f
                where.setdefault(q, set()).add(wi)
                changed.add(q)
        pair_n[p] = 0
        for q in changed:
            if pair_n.get(q, 0) > 0:
                heapq.heappush(heap, (-pair_n[q], q))
    return tokens, merges


GGUF_UINT32 = 4
GGUF_INT32 = 5
GGUF_FLOAT32 = 6
GGUF_BOOL = 7
GGUF_STRING = 8
GGUF_ARRAY = 9


def _gguf_str(s):
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: list of (key, type, value) with type 'u32', 'i32', 'f32', 'bool', 'str',
    'arr_str', 'arr_i32' or 'raw' (value: the encoded type and value, as
    GGUFFile.raw_value gives them); tensors: list of (name, ne list,
    ggml_type, raw bytes). Writes a GGUF v3 file."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, ty, v in kvs:
        out += _gguf_str(key)
        if ty == "u32":
            out += struct.pack("<II", GGUF_UINT32, v)
        elif ty == "i32":
            out += struct.pack("<Ii", GGUF_INT32, v)
        elif ty == "f32":
            out += struct.pack("<If", GGUF_FLOAT32, v)
        elif ty == "bool":
            out += struct.pack("<IB", GGUF_BOOL, 1 if v else 0)
        elif ty == "str":
            out += struct.pack("<I", GGUF_STRING) + _gguf_str(v)
        elif ty == "arr_str":
            out += struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, len(v))
            for s in v:
                out += _gguf_str(s)
        elif ty == "arr_i32":
            out += struct.pack("<IIQ", GGUF_ARRAY, GGUF_INT32, len(v))
            out += struct.pack("<%di" % len(v), *v)
        elif ty == "raw":
            out += v
        else:
            raise ValueError("unknown kv type %r" % ty)
    offsets = []
    off = 0
    for name, ne, gtype, data in tensors:
        offsets.append(off)
        off += (len(data) + alignment - 1) // alignment * alignment
    for (name, ne, gtype, data), o in zip(tensors, offsets):
        out += _gguf_str(name) + struct.pack("<I", len(ne))
        out += struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", gtype, o)
    out += b"\0" * ((-len(out)) % alignment)
    for name, ne, gtype, data in tensors:
        out += data
        out += b"\0" * ((-len(data)) % alignment)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] != "tokenize":
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    ref = BpeRef(GGUFFile(argv[1]))
    with open(argv[2], "rb") as f:
        text = f.read().decode("utf-8")
    print(" ".join(str(t) for t in ref.encode(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
