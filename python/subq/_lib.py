"""The low-level layer: ctypes mirrors of include/subq.h and the parts of
include/subq_lab.h the package uses, over libsubq_lab.so (the engine and
the lab in one library).

Names and fields are the C ones. Every function returns the C status; the
high-level layer (subq/__init__.py) turns a non-zero one into SubqError.
python/tests/test_layout.py checks each mirrored struct's size and field
offsets against the C compiler's.

The library is found as llama-cpp-python finds its own: in the directory
SUBQ_LIB_PATH names, else next to this package, else in the checkout's
build/ (python/../build) for use from the repository.
"""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint64, c_void_p)

LIB_NAME = "libsubq_lab.so"

SUBQ_ERROR_MSG_MAX = 512

# subq_status
SUBQ_OK = 0
SUBQ_ERR_IO = 1
SUBQ_ERR_FORMAT = 2
SUBQ_ERR_UNSUPPORTED = 3
SUBQ_ERR_SHAPE = 4
SUBQ_ERR_NOMEM = 5
SUBQ_ERR_ARG = 6
SUBQ_ERR_TOKENIZE = 7
SUBQ_ERR_MISMATCH = 8
SUBQ_ERR_RANGE = 9
SUBQ_ERR_BUSY = 10
SUBQ_ERR_CANCELLED = 11

# subq_kv_type
SUBQ_KV_F32, SUBQ_KV_F16, SUBQ_KV_Q8_0, SUBQ_KV_Q4_0 = 0, 1, 2, 3

# subq_finish
SUBQ_FINISH_LENGTH, SUBQ_FINISH_END_TOKEN, SUBQ_FINISH_CALLER, SUBQ_FINISH_CONTEXT_FULL = 0, 1, 2, 3


class subq_error(Structure):
    _fields_ = [("code", c_int), ("msg", c_char * SUBQ_ERROR_MSG_MAX)]


class subq_model_info(Structure):
    _fields_ = [("arch", c_char * 32), ("n_layer", c_int), ("n_embd", c_int), ("n_head", c_int),
                ("n_head_kv", c_int), ("head_dim", c_int), ("n_ff", c_int), ("n_vocab", c_int),
                ("n_ctx_train", c_int), ("rope_base", c_float), ("norm_eps", c_float), ("bos_id", c_int),
                ("eos_id", c_int), ("add_bos", c_int), ("n_params", c_uint64), ("weight_bytes", c_uint64),
                ("decode_bytes", c_uint64), ("matmul_params", c_uint64), ("fingerprint", c_uint64)]


class subq_context_params(Structure):
    _fields_ = [("n_ctx", c_int), ("n_threads", c_int), ("kv_type", c_int), ("n_batch", c_int),
                ("kv_file", c_char_p), ("swa_full", c_int), ("kv_recover", c_int)]


class subq_sampler_params(Structure):
    _fields_ = [("temp", c_float), ("top_k", c_int), ("top_p", c_float), ("seed", c_uint64)]


on_prompt_fn = CFUNCTYPE(c_int, c_void_p, c_int)
on_batch_fn = CFUNCTYPE(c_int, c_void_p, c_int, c_int, c_int)
on_token_fn = CFUNCTYPE(c_int, c_void_p, c_int32, POINTER(c_char), c_size_t)


class subq_generate_params(Structure):
    _fields_ = [("n_predict", c_int), ("sampler", subq_sampler_params), ("end_tokens", c_int32 * 2),
                ("on_prompt", on_prompt_fn), ("on_batch", on_batch_fn), ("on_token", on_token_fn),
                ("user", c_void_p)]


class subq_generate_result(Structure):
    _fields_ = [("n_reused", c_int), ("n_generated", c_int), ("finish", c_int)]


class subq_attn_plan(Structure):
    _fields_ = [("layers", c_char_p), ("topk_layers", c_char_p), ("selector", c_int), ("top_k", c_int),
                ("n_sink", c_int), ("n_tail", c_int), ("sparse_prefill", c_int), ("hnsw_m", c_int),
                ("hnsw_ef_construction", c_int), ("hnsw_ef_search", c_int), ("quest_page", c_int),
                ("quest_headmean", c_int), ("oracle", c_int), ("search_f16", c_int), ("score", c_int),
                ("scan", c_int), ("block_keys", c_int), ("nprobe", c_int), ("probe_from", c_int),
                ("group_blocks", c_int), ("group_probe", c_int), ("group_from", c_int), ("block_reps", c_int),
                ("probe_check", c_int), ("seed", c_uint64), ("complete_min_entropy", c_float),
                ("far_pos", c_int), ("far_from", c_int),
                ("clusters", c_int), ("cluster_probe", c_int), ("cluster_from", c_int)]


class subq_ppl_result(Structure):
    _fields_ = [("ppl", c_double), ("ppl_stderr", c_double), ("nll_mean", c_double), ("n_chunks", c_int),
                ("n_scored", c_int64)]


class subq_search_info(Structure):
    _fields_ = [("merged", c_int), ("d_search", c_int), ("n_layers", c_int), ("layers", c_char * 256),
                ("top_k", c_int), ("type", c_char * 8), ("arch", c_char * 32), ("rope_dims", c_int),
                ("rope_base", c_float), ("rope_scale", c_float), ("granularity", c_int), ("n_query_heads", c_int),
                ("n_key_heads", c_int)]


# ---- the lab: evaluation -------------------------------------------------------

class subq_eval_params(Structure):
    _fields_ = [("files", POINTER(c_char_p)), ("n_files", c_int), ("eval_files", POINTER(c_char_p)),
                ("n_eval_files", c_int), ("ctx", c_int), ("pack", c_int), ("max_windows", c_int),
                ("eval_frac", c_float), ("selectors", POINTER(c_int)), ("n_selectors", c_int), ("ks", POINTER(c_int)),
                ("n_k", c_int), ("budgets", POINTER(c_double)), ("n_budgets", c_int), ("plan", subq_attn_plan),
                ("search", c_void_p), ("complete", c_void_p), ("static_split", c_double), ("per_layer", c_int),
                ("n_resamples", c_int), ("seed", c_uint64)]


class subq_eval_method(Structure):
    _fields_ = [("select", c_int), ("k", c_int), ("completion", c_int), ("budget_pct", c_double),
                ("reads", c_double), ("ppl", c_double), ("gap", c_double), ("nll_diff", c_double),
                ("nll_diff_lo", c_double), ("nll_diff_hi", c_double), ("kl", c_double), ("kl_lo", c_double),
                ("kl_hi", c_double), ("top1", c_double), ("mass", c_double), ("recall", c_double),
                ("mass_seed", c_double), ("recall_seed", c_double), ("ann_recall", c_double), ("filler", c_double),
                ("share", c_double), ("layer_mass", POINTER(c_double)), ("layer_recall", POINTER(c_double)),
                ("layer_mass_seed", POINTER(c_double)), ("layer_recall_seed", POINTER(c_double)),
                ("layer_kl", POINTER(c_double)), ("layer_kl_lo", POINTER(c_double)), ("layer_kl_hi", POINTER(c_double)),
                ("layer_top1", POINTER(c_double)), ("win_nll", POINTER(c_double)), ("kv_rows", c_double)]


class subq_eval_skip(Structure):
    _fields_ = [("budget_pct", c_double), ("budget_reads", c_double), ("completion", c_int),
                ("fixed_reads", c_double)]


class subq_eval_static(Structure):
    _fields_ = [("method", c_int), ("split", c_double), ("ppl_full", c_double), ("ppl_dynamic", c_double),
                ("ppl_static", c_double), ("kl_dynamic", c_double), ("kl_static", c_double)]


class subq_eval_result(Structure):
    _fields_ = [("n_layer", c_int), ("n_windows", c_int), ("ctx", c_int), ("sparse_layers", POINTER(ctypes.c_ubyte)),
                ("n_scored", c_int64), ("win_n", POINTER(c_int64)), ("full_ppl", c_double),
                ("full_win_nll", POINTER(c_double)), ("n_methods", c_int), ("methods", POINTER(subq_eval_method)),
                ("n_skipped", c_int), ("skipped", POINTER(subq_eval_skip)), ("stat", subq_eval_static),
                ("seconds", c_double)]


eval_progress_fn = CFUNCTYPE(c_int, c_void_p, c_int64, c_int64)

# ---- the lab: training search projections ---------------------------------------

SUBQ_SEARCH_EVAL_MAX_K = 16


class subq_corpus_params(Structure):
    _fields_ = [("seq", c_int), ("pack", c_int), ("eval_frac", c_float), ("seed", c_uint64), ("eval_only", c_int)]


class subq_train_params(Structure):
    _fields_ = [("layers", POINTER(c_int)), ("n_layers", c_int), ("batch", c_int), ("grad_accum", c_int),
                ("lr", c_float), ("weight_decay", c_float), ("beta1", c_float), ("beta2", c_float), ("eps", c_float),
                ("grad_clip", c_float), ("warmup", c_int), ("steps", c_int64), ("stop_after", c_int64),
                ("seed", c_uint64), ("eval_every", c_int), ("eval_tokens", c_int64), ("save_every", c_int),
                ("out_path", c_char_p), ("resume", c_int), ("n_threads", c_int), ("n_ubatch", c_int),
                ("comm", c_void_p)]


class subq_search_loss_params(Structure):
    _fields_ = [("tau", c_float), ("tau_kl", c_float), ("alpha", c_float), ("beta", c_float), ("k_pos", c_int),
                ("agg", c_int), ("n_sink", c_int), ("n_tail", c_int)]


class subq_train_search_params(Structure):
    _fields_ = [("train", subq_train_params), ("d_search", c_int), ("rope_dims", c_int), ("rope_base", c_float),
                ("rope_scale", c_float), ("init_from", c_char_p), ("loss", subq_search_loss_params),
                ("init_std", c_float), ("eval_k", c_int * SUBQ_SEARCH_EVAL_MAX_K), ("n_eval_k", c_int),
                ("granularity", c_int)]


class subq_train_hooks(Structure):  # callbacks left NULL; stop: an int the caller sets
    _fields_ = [("user", c_void_p), ("on_start", c_void_p), ("on_step", c_void_p), ("on_eval", c_void_p),
                ("on_save", c_void_p), ("stop", POINTER(c_int))]


train_step_fn = CFUNCTYPE(None, c_void_p, c_void_p)  # on_step(user, const subq_train_step_stats *)


class subq_train_result(Structure):
    _fields_ = [("step", c_int64), ("interrupted", c_int), ("stopped_early", c_int), ("tok_per_s", c_double),
                ("gflop_per_s", c_double), ("train_s", c_double), ("comm_s", c_double), ("train_tokens", c_int64)]


ppl_callback_fn = CFUNCTYPE(c_int, c_void_p, c_int, c_int, POINTER(subq_ppl_result))

# handles
subq_model_p = c_void_p
subq_context_p = c_void_p
subq_search_p = c_void_p
subq_complete_p = c_void_p

_E = POINTER(subq_error)

# (name, restype, argtypes)
_FUNCTIONS = [
    ("subq_version", c_char_p, []),
    ("subq_status_name", c_char_p, [c_int]),
    ("subq_isa_name", c_char_p, []),
    ("subq_model_load", c_int, [c_char_p, POINTER(subq_model_p), _E]),
    ("subq_model_free", None, [subq_model_p]),
    ("subq_model_get_info", None, [subq_model_p, POINTER(subq_model_info)]),
    ("subq_tokenize", c_int, [subq_model_p, c_char_p, c_size_t, c_int, POINTER(c_int32), c_size_t,
                              POINTER(c_size_t), _E]),
    ("subq_tokenize_special", c_int, [subq_model_p, c_char_p, c_size_t, c_int, POINTER(c_int32), c_size_t,
                                      POINTER(c_size_t), _E]),
    ("subq_token_to_piece", c_int, [subq_model_p, c_int32, c_int32, POINTER(c_char), c_size_t,
                                    POINTER(c_size_t), _E]),
    ("subq_kv_type_parse", c_int, [c_char_p]),
    ("subq_context_default_params", subq_context_params, []),
    ("subq_context_new", c_int, [subq_model_p, POINTER(subq_context_params), POINTER(subq_context_p), _E]),
    ("subq_context_free", None, [subq_context_p]),
    ("subq_context_reset", None, [subq_context_p]),
    ("subq_context_n_past", c_int, [subq_context_p]),
    ("subq_context_n_ctx", c_int, [subq_context_p]),
    ("subq_context_n_batch", c_int, [subq_context_p]),
    ("subq_context_resume", c_int, [subq_context_p, _E]),
    ("subq_context_sync", c_int, [subq_context_p, _E]),
    ("subq_context_tokens", POINTER(c_int32), [subq_context_p]),
    ("subq_context_truncate", c_int, [subq_context_p, c_int, _E]),
    ("subq_context_save", c_int, [subq_context_p, c_char_p, _E]),
    ("subq_context_load", c_int, [subq_context_p, c_char_p, _E]),
    ("subq_decode", c_int, [subq_context_p, POINTER(c_int32), c_int, POINTER(c_float), c_int, _E]),
    ("subq_generate_default_params", subq_generate_params, []),
    ("subq_generate", c_int, [subq_context_p, POINTER(c_int32), c_int, POINTER(subq_generate_params),
                              POINTER(subq_generate_result), _E]),
    ("subq_selector_parse", c_int, [c_char_p]),
    ("subq_score_parse", c_int, [c_char_p]),
    ("subq_scan_parse", c_int, [c_char_p]),
    ("subq_oracle_parse", c_int, [c_char_p]),
    ("subq_far_parse", c_int, [c_char_p]),
    ("subq_selector_needs_search", c_int, [c_int]),
    ("subq_attn_plan_default", subq_attn_plan, []),
    ("subq_search_load", c_int, [c_char_p, subq_model_p, POINTER(subq_search_p), _E]),
    ("subq_search_random", c_int, [subq_model_p, c_char_p, c_int, c_uint64, POINTER(subq_search_p), _E]),
    ("subq_search_free", None, [subq_search_p]),
    ("subq_search_d", c_int, [subq_search_p]),
    ("subq_search_has_layer", c_int, [subq_search_p, c_int]),
    ("subq_search_info_file", c_int, [c_char_p, POINTER(subq_search_info), _E]),
    ("subq_search_from_matrices", c_int, [subq_model_p, POINTER(c_int), c_int, c_int, POINTER(POINTER(c_float)),
                                          POINTER(POINTER(c_float)), c_char_p, POINTER(subq_search_p), _E]),
    ("subq_search_get_matrices", c_int, [subq_search_p, c_int, POINTER(c_float), POINTER(c_float), _E]),
    ("subq_search_save", c_int, [subq_search_p, c_char_p, _E]),
    ("subq_complete_load", c_int, [c_char_p, subq_model_p, POINTER(subq_complete_p), _E]),
    ("subq_complete_free", None, [subq_complete_p]),
    ("subq_context_set_plan", c_int, [subq_context_p, POINTER(subq_attn_plan), subq_search_p, subq_complete_p, _E]),
    ("subq_context_clear_plan", None, [subq_context_p]),
    ("subq_context_n_threads", c_int, [subq_context_p]),
    ("subq_parse_layers", c_int, [c_char_p, c_int, POINTER(ctypes.c_ubyte), _E]),
    ("subq_search_granularity_parse", c_int, [c_char_p]),
    # the lab
    ("subq_write_file", c_int, [c_char_p, c_char_p, c_size_t, _E]),
    ("subq_eval_default_params", subq_eval_params, []),
    ("subq_eval_run", c_int, [subq_context_p, POINTER(subq_eval_params), eval_progress_fn, c_void_p,
                              POINTER(POINTER(subq_eval_result)), _E]),
    ("subq_eval_result_free", None, [POINTER(subq_eval_result)]),
    ("subq_eval_method_name", c_char_p, [POINTER(subq_eval_method), c_char_p, c_size_t]),
    ("subq_corpus_load", c_int, [subq_model_p, POINTER(subq_corpus_params), POINTER(c_char_p), c_int,
                                 POINTER(c_char_p), c_int, POINTER(c_void_p), _E]),
    ("subq_corpus_free", None, [c_void_p]),
    ("subq_train_search_default_params", subq_train_search_params, []),
    ("subq_train_search", c_int, [subq_model_p, c_void_p, POINTER(subq_train_search_params),
                                  POINTER(subq_train_hooks), POINTER(subq_train_result), _E]),
    ("subq_perplexity", c_int, [subq_context_p, POINTER(c_int32), c_size_t, c_int, c_int, c_int, ppl_callback_fn,
                                c_void_p, POINTER(subq_ppl_result), POINTER(c_float), _E]),
]


def find_library():
    """The path of libsubq_lab.so: SUBQ_LIB_PATH's directory, next to the package, or the checkout's build/."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("SUBQ_LIB_PATH")
    places = [env] if env else [here, os.path.join(here, "..", "..", "build")]
    for d in places:
        path = os.path.join(d, LIB_NAME)
        if os.path.isfile(path):
            return os.path.abspath(path)
    raise FileNotFoundError("%s not found in %s (build it with `make`, or set SUBQ_LIB_PATH to its directory)"
                            % (LIB_NAME, " or ".join(os.path.abspath(p) for p in places)))


def load(path=None):
    """Open the library and declare every function above on it."""
    lib = ctypes.CDLL(path or find_library())
    for name, restype, argtypes in _FUNCTIONS:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_DEFAULT = []


def load_default(path=None):
    """The library this process uses (opened once; path: another libsubq_lab.so to use instead)."""
    if not _DEFAULT or path:
        _DEFAULT[:] = [load(path)]
    return _DEFAULT[0]
