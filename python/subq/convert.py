"""Search projections between ann-sparseattention's checkpoints and subq's
files, without PyTorch:

  .pt           the seed's search_step_N.pt: a zip holding data.pkl (a
                pickle) and raw storages, with search_module
                (projections.{L}.W_Qs.weight / .W_Ks.weight, [d_search,
                d_model], bf16) and config (d_search,
                full_attention_layer_indices, reserved_full_attention_indices,
                base_model_name)
  .safetensors  the same tensors, the config in __metadata__ (JSON values)
  .gguf         subq's projection file (what train-search writes)

The pickle is read without executing it: an unpickler whose find_class
knows a few names (OrderedDict, torch's tensor rebuild, its storage types
and dtypes) and refuses every other; storages are read from the zip and
checked against the sizes the pickle claims. .pt files are written with
the opcodes torch itself writes (protocol 2), so torch.load(...,
weights_only=False) and SearchProjectionModule.load_state_dict read them.

    subq convert IN OUT -m MODEL       (or: python3 -m subq.convert ...)

converts by the files' extensions; MODEL (the GGUF the projections are
for) checks their shape and gives a projection file its fingerprint.
"""

import argparse
import collections
import io
import json
import os
import pickle
import re
import struct
import sys
import zipfile

import numpy as np

from . import _lib as lib

KEY = re.compile(r"^projections\.(\d+)\.(W_Qs|W_Ks)\.weight$")
ORIGIN = ("ann-sparseattention %s: the seed ranks keys by cosine over every causal key, with no sinks and no tail "
          "(run with --sink 0 --tail 0 --score cosine)")


class ConvertError(ValueError):
    """A file that cannot be converted: the message says why, in one line."""


# ---- bf16 ------------------------------------------------------------------

def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even (as torch's .to(torch.bfloat16)); NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


# ---- reading .pt -------------------------------------------------------------

class _Storage:
    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype


_STORAGES = {"FloatStorage": np.float32, "BFloat16Storage": "bf16", "HalfStorage": np.float16,
             "DoubleStorage": np.float64}
_DTYPES = {"float32", "bfloat16", "float16", "float64"}


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    data, dtype = storage
    size, stride = tuple(size), tuple(stride)
    numel = int(np.prod(size)) if size else 1
    want = tuple(int(np.prod(size[i + 1:])) for i in range(len(size)))
    if stride != want and numel > 1:
        raise ConvertError("a tensor of shape %s has strides %s: only contiguous tensors are read" % (size, stride))
    if offset < 0 or offset + numel > len(data):
        raise ConvertError("a tensor of shape %s at offset %d runs past its storage of %d elements"
                           % (size, offset, len(data)))
    flat = data[offset:offset + numel]
    return (bf16_to_f32(flat) if dtype == "bf16" else flat.astype(np.float32)).reshape(size)


def _rebuild_parameter(tensor, requires_grad=False, hooks=None):
    return tensor


class _Unpickler(pickle.Unpickler):
    """data.pkl of a torch zip: the names below resolve to our own stand-ins; any other is refused."""

    def __init__(self, f, zf, prefix):
        super().__init__(f)
        self.zf, self.prefix = zf, prefix
        self.cache = {}

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return _rebuild_parameter
        if module == "torch" and name in _STORAGES:
            return _Storage(name, _STORAGES[name])
        if module == "torch" and name in _DTYPES:
            return "torch." + name
        raise ConvertError("the checkpoint's pickle calls %s.%s, which is outside what a projection checkpoint "
                           "holds (refused: a pickle can run code)" % (module, name))

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Storage)):
            raise ConvertError("the checkpoint's pickle refers to a storage as %r, not as torch writes it"
                               % (pid[:2] if isinstance(pid, tuple) else type(pid).__name__,))
        _, st, key, _location, numel = pid
        if key in self.cache:
            return self.cache[key]
        name = "%sdata/%s" % (self.prefix, key)
        try:
            raw = self.zf.read(name)
        except KeyError:
            raise ConvertError("storage %s is missing from the archive" % name) from None
        item = 2 if st.dtype == "bf16" else np.dtype(st.dtype).itemsize
        if not isinstance(numel, int) or numel < 0 or len(raw) != numel * item:
            raise ConvertError("storage %s holds %d bytes, not the %s elements of %d bytes its pickle claims "
                               "(truncated or damaged)" % (name, len(raw), numel, item))
        data = np.frombuffer(raw, dtype=np.uint16 if st.dtype == "bf16" else st.dtype)
        self.cache[key] = (data, st.dtype)
        return self.cache[key]


def read_pt(path):
    """(tensors {name: float32 array}, config dict) of a seed checkpoint."""
    try:
        zf = zipfile.ZipFile(path)
    except OSError:
        raise
    except Exception as e:  # zipfile raises several kinds on a damaged archive
        raise ConvertError("%s is not a PyTorch zip checkpoint (%s: %s)" % (path, type(e).__name__, e)) from None
    with zf:
        pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise ConvertError("%s holds %d data.pkl records, not one (not a torch.save archive)" % (path, len(pkls)))
        prefix = pkls[0][:-len("data.pkl")]
        try:
            obj = _Unpickler(io.BytesIO(zf.read(pkls[0])), zf, prefix).load()
        except ConvertError as e:
            raise ConvertError("%s: %s" % (path, e)) from None
        except Exception as e:  # a damaged record or pickle: say so in one line
            raise ConvertError("%s: data.pkl or a storage is unreadable (%s: %s)" % (path, type(e).__name__, e)) \
                from None
    if not isinstance(obj, dict) or not isinstance(obj.get("search_module"), dict):
        raise ConvertError("%s holds no search_module state dict (an ann-sparseattention search checkpoint has one)"
                           % path)
    config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
    return dict(obj["search_module"]), config


# ---- writing .pt (the opcodes torch.save writes) -----------------------------

class _Pickle:
    """A protocol-2 pickle emitter for the few kinds a checkpoint holds."""

    def __init__(self):
        self.out = io.BytesIO()
        self.out.write(b"\x80\x02")

    def op(self, b):
        self.out.write(b)

    def glob(self, module, name):
        self.op(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def value(self, v):
        if v is None:
            self.op(b"N")
        elif v is True or v is False:
            self.op(b"\x88" if v else b"\x89")
        elif isinstance(v, int):
            if 0 <= v < 256:
                self.op(b"K" + bytes([v]))
            elif -2 ** 31 <= v < 2 ** 31:
                self.op(b"J" + struct.pack("<i", v))
            else:
                b = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                self.op(b"\x8a" + bytes([len(b)]) + b)
        elif isinstance(v, float):
            self.op(b"G" + struct.pack(">d", v))
        elif isinstance(v, str):
            b = v.encode("utf-8")
            self.op(b"X" + struct.pack("<I", len(b)) + b)
        elif isinstance(v, (list, tuple)):
            self.op(b"(")
            for x in v:
                self.value(x)
            self.op(b"t" if isinstance(v, tuple) else b"l")
        elif isinstance(v, dict):
            if isinstance(v, collections.OrderedDict):
                self.glob("collections", "OrderedDict")
                self.op(b")R")
            else:
                self.op(b"}")
            if v:
                self.op(b"(")
                for k, x in v.items():
                    self.value(k)
                    self.value(x)
                self.op(b"u")
        else:
            raise TypeError(type(v).__name__)

    def tensor(self, key, shape, storage, numel):
        """torch._utils._rebuild_tensor_v2(<storage key>, 0, shape, strides, False, OrderedDict())."""
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.op(b"(")
        self.op(b"(")  # the persistent id: ('storage', torch.<Storage>, key, 'cpu', numel)
        self.value("storage")
        self.glob("torch", storage)
        self.value(key)
        self.value("cpu")
        self.value(numel)
        self.op(b"tQ")
        self.value(0)
        self.value(tuple(shape))
        self.value(tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))))
        self.value(False)
        self.value(collections.OrderedDict())
        self.op(b"tR")


def write_pt(path, tensors, config, dtype="float32", step=0):
    """A checkpoint in the seed's layout: {'search_module': OrderedDict(name: tensor), 'config': config,
    'step': step}; tensors in float32 or bfloat16."""
    if dtype not in ("float32", "bfloat16"):
        raise ConvertError("dtype %r: float32 or bfloat16" % dtype)
    p = _Pickle()
    blobs = []
    p.op(b"}(")
    p.value("search_module")
    p.glob("collections", "OrderedDict")
    p.op(b")R")
    if tensors:
        p.op(b"(")
        for name, arr in tensors.items():
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            key = str(len(blobs))
            blobs.append(f32_to_bf16(arr).tobytes() if dtype == "bfloat16" else arr.tobytes())
            p.value(name)
            p.tensor(key, arr.shape, "BFloat16Storage" if dtype == "bfloat16" else "FloatStorage", arr.size)
        p.op(b"u")
    p.value("config")
    p.value(config)
    p.value("step")
    p.value(int(step))
    p.op(b"u.")
    archive = os.path.splitext(os.path.basename(path))[0] or "archive"
    _atomic(path, lambda f: _write_zip(f, archive, p.out.getvalue(), blobs))


def _write_zip(f, archive, pkl, blobs):
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr(archive + "/data.pkl", pkl)
        z.writestr(archive + "/byteorder", "little")
        for i, b in enumerate(blobs):
            z.writestr("%s/data/%d" % (archive, i), b)
        z.writestr(archive + "/version", "3\n")


def _atomic(path, write):
    """What write(f) puts in f, written as the library writes every output (subq_write_file: a temporary
    file beside path, synced, then renamed; leftovers of killed writers removed; never through a link)."""
    buf = io.BytesIO()
    write(buf)
    data = buf.getvalue()
    err = lib.subq_error()
    if lib.load_default().subq_write_file(str(path).encode(), data, len(data), lib.byref(err)):
        raise ConvertError(err.msg.decode("utf-8", "replace"))


# ---- safetensors -------------------------------------------------------------

_ST_DTYPES = {"F32": (np.float32, 4), "BF16": ("bf16", 2), "F16": (np.float16, 2)}


def read_safetensors(path):
    """(tensors {name: float32 array}, config) of a safetensors file (config from __metadata__)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ConvertError("%s is shorter than a safetensors header" % path)
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, 100 << 20):
            raise ConvertError("%s: its header claims %d bytes, more than the file holds" % (path, n))
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConvertError("%s: its header is not JSON (%s)" % (path, e)) from None
        if not isinstance(header, dict):
            raise ConvertError("%s: its header is not a JSON object" % path)
        data = f.read()
    meta = header.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict):
        raise ConvertError("%s: __metadata__ is not a JSON object" % path)
    tensors = {}
    for name, t in header.items():
        try:
            dt, item = _ST_DTYPES[t["dtype"]]
            shape = [int(x) for x in t["shape"]]
            a, b = (int(x) for x in t["data_offsets"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ConvertError("%s: tensor %s has a dtype other than F32, BF16 or F16, or a malformed entry"
                               % (path, name)) from None
        if min(shape, default=1) < 0 or not 0 <= a <= b <= len(data) or b - a != int(np.prod(shape)) * item:
            raise ConvertError("%s: tensor %s's bytes [%d, %d) do not hold its shape %s" % (path, name, a, b, shape))
        raw = np.frombuffer(data[a:b], dtype=np.uint16 if dt == "bf16" else dt)
        tensors[name] = (bf16_to_f32(raw) if dt == "bf16" else raw.astype(np.float32)).reshape(shape)
    config = {}
    for k, v in meta.items():
        try:
            config[k] = json.loads(v)
        except (TypeError, json.JSONDecodeError):
            config[k] = v
    return tensors, config


def write_safetensors(path, tensors, config, dtype="float32"):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        b = f32_to_bf16(arr).tobytes() if dtype == "bfloat16" else arr.tobytes()
        header[name] = {"dtype": "BF16" if dtype == "bfloat16" else "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {k: json.dumps(v) for k, v in config.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    _atomic(path, lambda f: (f.write(struct.pack("<Q", len(h))), f.write(h), [f.write(b) for b in blobs]))


# ---- subq's projection files, through the library --------------------------

class _Model:
    def __init__(self, L, path):
        self.L, self.h = L, lib.c_void_p()
        err = lib.subq_error()
        if L.subq_model_load(str(path).encode(), lib.byref(self.h), lib.byref(err)):
            raise ConvertError(err.msg.decode("utf-8", "replace"))
        info = lib.subq_model_info()
        L.subq_model_get_info(self.h, lib.byref(info))
        self.n_layer, self.n_embd = info.n_layer, info.n_embd

    def close(self):
        if self.h:
            self.L.subq_model_free(self.h)
            self.h = lib.c_void_p()


def _projections(tensors, config, n_layer, n_embd, path):
    """{layer: (W_Qs, W_Ks)} of a seed state dict, checked against the model."""
    layers = {}
    for name, arr in tensors.items():
        m = KEY.match(name)
        if not m:
            if name.startswith("projections.") and (".W_Qs." in name or ".W_Ks." in name):
                raise ConvertError("%s: %s belongs to an MLP search projection; only linear ones (use_mlp=False) "
                                   "convert" % (path, name))
            raise ConvertError("%s: %s is not a search projection tensor (projections.L.W_Qs.weight / W_Ks.weight)"
                               % (path, name))
        layers.setdefault(int(m.group(1)), {})[m.group(2)] = arr
    if not layers:
        raise ConvertError("%s holds no search projections" % path)
    d_search = config.get("d_search")
    out = {}
    for layer in sorted(layers):
        w = layers[layer]
        if set(w) != {"W_Qs", "W_Ks"}:
            raise ConvertError("%s: layer %d has %s but not both W_Qs and W_Ks" % (path, layer, sorted(w)))
        if layer >= n_layer:
            raise ConvertError("%s: layer %d, but the model has %d layers (a checkpoint for another model)"
                               % (path, layer, n_layer))
        for k in ("W_Qs", "W_Ks"):
            shape = w[k].shape
            d = d_search if isinstance(d_search, int) else shape[0]
            if len(shape) != 2 or shape != (d, n_embd):
                raise ConvertError("%s: projections.%d.%s.weight has shape %s, not [d_search %s, d_model %d] of the "
                                   "model (a checkpoint for another model?)" % (path, layer, k, list(shape), d, n_embd))
        out[layer] = (w["W_Qs"], w["W_Ks"])
    dense = set(config.get("full_attention_layer_indices") or [])
    clash = sorted(dense & set(out))
    if clash:
        raise ConvertError("%s: layers %s have projections but the config lists them as full attention" % (path, clash))
    return out


def seed_to_gguf(tensors, config, model_path, out_path, origin):
    L = lib.load_default()
    m = _Model(L, model_path)
    try:
        proj = _projections(tensors, config, m.n_layer, m.n_embd, origin)
        layers = sorted(proj)
        d_search = proj[layers[0]][0].shape[0]
        keep = [np.ascontiguousarray(proj[i][j], dtype=np.float32) for i in layers for j in (0, 1)]
        FP = lib.POINTER(lib.c_float)
        wq = (FP * len(layers))(*[keep[2 * i].ctypes.data_as(FP) for i in range(len(layers))])
        wk = (FP * len(layers))(*[keep[2 * i + 1].ctypes.data_as(FP) for i in range(len(layers))])
        arr = (lib.c_int * len(layers))(*layers)
        s = lib.c_void_p()
        err = lib.subq_error()
        note = ORIGIN % os.path.basename(origin)
        if config.get("base_model_name"):
            note += "; trained on %s" % config["base_model_name"]
        note = note.encode()[:255].decode("utf-8", "ignore").encode()  # the file keeps 255 bytes, whole characters
        if L.subq_search_from_matrices(m.h, arr, len(layers), d_search, wq, wk, note, lib.byref(s),
                                       lib.byref(err)):
            raise ConvertError(err.msg.decode("utf-8", "replace"))
        try:
            if L.subq_search_save(s, str(out_path).encode(), lib.byref(err)):
                raise ConvertError(err.msg.decode("utf-8", "replace"))
        finally:
            L.subq_search_free(s)
        return layers, d_search
    finally:
        m.close()


def gguf_to_seed(gguf_path, model_path):
    """(tensors, config) of a subq projection file, for the seed's loaders; rotated or per-head ones refused."""
    L = lib.load_default()
    err = lib.subq_error()
    info = lib.subq_search_info()
    if L.subq_search_info_file(str(gguf_path).encode(), lib.byref(info), lib.byref(err)):
        raise ConvertError(err.msg.decode("utf-8", "replace"))
    if info.rope_dims:
        raise ConvertError("%s rotates its last %d search dims by position, which ann-sparseattention cannot run "
                           "(train with --rope-dims 0 for the seed)" % (gguf_path, info.rope_dims))
    if info.granularity != 0:
        raise ConvertError("%s has a search set per head, which ann-sparseattention cannot run (one set a layer "
                           "only)" % gguf_path)
    m = _Model(L, model_path)
    s = lib.c_void_p()
    try:
        if L.subq_search_load(str(gguf_path).encode(), m.h, lib.byref(s), lib.byref(err)):
            raise ConvertError(err.msg.decode("utf-8", "replace"))
        d = L.subq_search_d(s)
        tensors, layers = collections.OrderedDict(), []
        for layer in range(m.n_layer):
            if not L.subq_search_has_layer(s, layer):
                continue
            wq = np.empty((d, m.n_embd), dtype=np.float32)
            wk = np.empty((d, m.n_embd), dtype=np.float32)
            FP = lib.POINTER(lib.c_float)
            if L.subq_search_get_matrices(s, layer, wq.ctypes.data_as(FP), wk.ctypes.data_as(FP), lib.byref(err)):
                raise ConvertError(err.msg.decode("utf-8", "replace"))
            tensors["projections.%d.W_Qs.weight" % layer] = wq
            tensors["projections.%d.W_Ks.weight" % layer] = wk
            layers.append(layer)
        config = {"d_search": d, "full_attention_layer_indices": [i for i in range(m.n_layer) if i not in layers],
                  "reserved_full_attention_indices": [], "base_model_name": os.path.basename(str(model_path))}
        return tensors, config
    finally:
        if s:
            L.subq_search_free(s)
        m.close()


def read_any(path, model_path=None):
    ext = os.path.splitext(str(path))[1].lower()
    if ext == ".pt":
        return read_pt(path)
    if ext == ".safetensors":
        return read_safetensors(path)
    if ext == ".gguf":
        if not model_path:
            raise ConvertError("reading %s needs -m MODEL (the model the projections are for)" % path)
        return gguf_to_seed(path, model_path)
    raise ConvertError("%s: unknown extension (.pt, .safetensors, .gguf)" % path)


def convert(src, dst, model_path=None, dtype="float32", force=False):
    """Convert src to dst by their extensions (.pt, .safetensors, .gguf); model_path: the model's GGUF, needed
    when either side is .gguf; an existing dst is replaced only with force. Returns a one-line summary."""
    if not os.path.exists(str(src)):
        raise ConvertError("%s: no such file" % src)
    if os.path.lexists(str(dst)) and (not force or not os.path.isfile(str(dst))):
        raise ConvertError("%s exists (give --force to replace it)" % dst if os.path.isfile(str(dst)) else
                           "%s exists and is not a regular file" % dst)
    out_ext = os.path.splitext(str(dst))[1].lower()
    if out_ext not in (".pt", ".safetensors", ".gguf"):
        raise ConvertError("%s: unknown extension (.pt, .safetensors, .gguf)" % dst)
    tensors, config = read_any(src, model_path)
    if out_ext == ".gguf":
        if not model_path:
            raise ConvertError("writing %s needs -m MODEL (the model the projections are for)" % dst)
        layers, d = seed_to_gguf(tensors, config, model_path, dst, str(src))
        return "%s: %d layers (%s), d_search %d" % (dst, len(layers), ",".join(map(str, layers)), d)
    from_gguf = os.path.splitext(str(src))[1].lower() == ".gguf"  # read against the model already
    if model_path and not from_gguf:  # check the shape against the model before writing
        m = _Model(lib.load_default(), model_path)
        try:
            _projections(tensors, config, m.n_layer, m.n_embd, str(src))
        finally:
            m.close()
    if out_ext == ".pt":
        write_pt(dst, tensors, config, dtype)
    else:
        write_safetensors(dst, tensors, config, dtype)
    return "%s: %d tensors" % (dst, len(tensors))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="subq convert",
                                 description="Convert search projections between ann-sparseattention checkpoints "
                                             "(.pt), safetensors and subq's projection files (.gguf).")
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("-m", "--model", help="the model's GGUF (needed with .gguf; checks shapes otherwise)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="element type of .pt / .safetensors written (default float32; the seed trains in bf16)")
    ap.add_argument("--force", action="store_true", help="replace an existing output file")
    a = ap.parse_args(argv)
    try:
        print(convert(a.input, a.output, a.model, a.dtype, a.force))
    except (ConvertError, OSError) as e:
        print("subq convert: error: %s" % " ".join(str(e).split()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
