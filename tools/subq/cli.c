#include "cli.h"

#include <ctype.h>
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h> /* mallopt */
#endif
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>


int cli_error(const char *cmd, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* keep it one line whatever the message contains */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    fprintf(stderr, "subq %s: error: %s\n", cmd, msg);
    return 1;
}

int cli_output_ok(const char *cmd, const char *path, int force) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 1;
        return !cli_error(cmd, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return !cli_error(cmd, "%s is not a regular file (%s): outputs replace regular files only", path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
                          S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a socket or other special file");
    if (!force)
        return !cli_error(cmd, S_ISLNK(st.st_mode) ? "%s exists (a symbolic link): pass --force to replace the link "
                          "itself (its target is never written)" : "%s exists: pass --force to replace it", path);
    return 1;
}

int cli_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int cli_output_dir_ok(const char *cmd, const char *flag, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return !cli_error(cmd, "%s %s: %s", flag, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return !cli_error(cmd, "%s %s: not a directory", flag, dir);
    return 1;
}

int cli_is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* glibc gives freed memory at the top of the heap back to the system, and
 * maps blocks past its (moving) threshold afresh each time. A prompt's
 * selection allocates its score and index buffers, megabytes, for every
 * layer and batch of 512 tokens, so each batch faulted their pages in again
 * (perf, a sparse prefill of 8K: 8% in page faults and the memset after
 * them). Kept, the same prefill selected in about a quarter less time. */
void cli_malloc_policy(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int cli_finish_stdout(const char *cmd, int rc) {
    errno = 0;
    const int flushed = fflush(stdout) == 0;
    if (rc != 0 || (flushed && !ferror(stdout))) return rc;
    fprintf(stderr, "subq%s%s: error: cannot write the output to stdout%s%s\n", *cmd ? " " : "", cmd,
            errno ? ": " : "", errno ? strerror(errno) : "");
    return 1;
}

int cli_help(const char *help) {
    fputs(help, stdout);
    return 0;
}

int cli_flag_take(const char *cmd, const cli_flag *flags, int n_flags, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const cli_flag *f = NULL;
    for (int k = 0; k < n_flags && !f; k++)
        if ((flags[k].short_name && !strcmp(a, flags[k].short_name)) || !strcmp(a, flags[k].long_name)) f = &flags[k];
    if (!f) return 0;
    if (f->kind == CLI_FLAG_SET) {
        *(int *)f->dst = 1;
        return 1;
    }
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return -1;
    int x, ok = 1;
    switch (f->kind) {
    case CLI_FLAG_STRING: *(const char **)f->dst = v; break;
    case CLI_FLAG_INT: ok = cli_parse_int(cmd, a, v, f->lo, f->hi, f->dst); break;
    case CLI_FLAG_I64:
        if ((ok = cli_parse_int(cmd, a, v, f->lo, f->hi, &x))) *(int64_t *)f->dst = x;
        break;
    case CLI_FLAG_U64: ok = cli_parse_u64(cmd, a, v, f->dst); break;
    case CLI_FLAG_FLOAT: ok = cli_parse_float(cmd, a, v, f->dst); break;
    case CLI_FLAG_INT_LIST: ok = cli_parse_int_list(cmd, a, v, f->lo, 1 << 24, (int)f->hi, f->dst, f->n); break;
    case CLI_FLAG_SET: break;
    }
    return ok ? 1 : -1;
}

int cli_parse_flags(const char *cmd, const char *help, int argc, char **argv, const cli_flag *flags, int n_flags,
                    int *exit_code) {
    *exit_code = 1;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            *exit_code = cli_help(help);
            return 0;
        }
        const int r = cli_flag_take(cmd, flags, n_flags, argc, argv, &i);
        if (r < 0) return 0;
        if (r == 0) {
            cli_error(cmd, "unknown option '%s' (see subq %s --help)", argv[i], cmd);
            return 0;
        }
    }
    return 1;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "option %s needs a value (see subq %s --help)", argv[*i], cmd);
        return NULL;
    }
    return argv[++*i];
}

/* strtol and friends skip leading white space and stop at trailing junk;
 * a value is the number alone, so " 5" is refused like "5 ". */
static int starts_like_number(const char *s) { return s[0] && !isspace((unsigned char)s[0]); }

int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = starts_like_number(s) ? strtol(s, &end, 10) : 0;
    if (!starts_like_number(s) || errno || end == s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = starts_like_number(s) ? strtoull(s, &end, 10) : 0;
    if (!starts_like_number(s) || errno || end == s || *end || s[0] == '-') {
        cli_error(cmd, "%s expects a non-negative integer, got '%s'", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *cmd, const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = starts_like_number(s) ? strtof(s, &end) : 0.0f;
    if (!starts_like_number(s) || errno || end == s || *end || !isfinite(v)) {
        cli_error(cmd, "%s expects a finite number, got '%s'", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_kv_type(const char *cmd, const char *s, subq_kv_type *out) {
    int t = subq_kv_type_parse(s);
    if (t < 0) {
        cli_error(cmd, "--kv expects f32, f16, q8_0 or q4_0, got '%s'", s);
        return 0;
    }
    *out = (subq_kv_type)t;
    return 1;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

subq_status cli_tokenize(const subq_model *m, const char *text, size_t len, int add_bos, int special, int32_t **toks,
                         size_t *n, subq_error *err) {
    /* most texts need fewer ids than bytes; otherwise the encoder says how many */
    size_t cap = len + 2;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!(*toks = malloc(cap * sizeof(int32_t)))) {
            snprintf(err->msg, sizeof err->msg, "out of memory tokenizing %zu bytes", len);
            return err->code = SUBQ_ERR_NOMEM;
        }
        subq_status s = special ? subq_tokenize_special(m, text, len, add_bos, *toks, cap, n, err)
                                : subq_tokenize(m, text, len, add_bos, *toks, cap, n, err);
        if (s == SUBQ_OK) return SUBQ_OK;
        free(*toks);
        *toks = NULL;
        if (s != SUBQ_ERR_RANGE || *n <= cap) return s;
        cap = *n;
    }
    snprintf(err->msg, sizeof err->msg, "the tokenizer's count changed between passes");
    return err->code = SUBQ_ERR_TOKENIZE;
}

const char *cli_piece(const subq_model *m, int32_t prev, int32_t tok, char *small, size_t cap, char **heap, size_t *n,
                      subq_error *err) {
    *heap = NULL;
    subq_status s = subq_token_to_piece(m, prev, tok, small, cap, n, err);
    if (s == SUBQ_OK) return small;
    if (s != SUBQ_ERR_RANGE) return NULL;
    /* longer than any real piece: hostile or odd vocabularies */
    if (!(*heap = malloc(*n))) {
        snprintf(err->msg, sizeof err->msg, "out of memory for a piece of %zu bytes", *n);
        err->code = SUBQ_ERR_NOMEM;
        return NULL;
    }
    if (subq_token_to_piece(m, prev, tok, *heap, *n, n, err) == SUBQ_OK) return *heap;
    free(*heap);
    *heap = NULL;
    return NULL;
}

subq_status cli_write_piece(FILE *f, const subq_model *m, int32_t prev, int32_t tok, subq_error *err) {
    char small[256], *heap;
    size_t n = 0;
    const char *p = cli_piece(m, prev, tok, small, sizeof small, &heap, &n, err);
    if (!p) return err->code;
    fwrite(p, 1, n, f);
    free(heap);
    return SUBQ_OK;
}

int cli_parse_model_opt(const char *cmd, int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i], *v;
    if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        o->model = v;
    } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_int(cmd, a, v, 1, 1024, &o->n_threads)) return -1;
    } else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_int(cmd, a, v, 1, 1 << 30, &o->n_ctx)) return -1;
    } else if (strcmp(a, "-b") == 0 || strcmp(a, "--batch-size") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_int(cmd, a, v, 1, 1 << 20, &o->n_batch)) return -1;
    } else if (strcmp(a, "--kv") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_kv_type(cmd, v, &o->kv_type)) return -1;
    } else if (strcmp(a, "--kv-file") == 0) {
        if (!(o->kv_file = cli_value(cmd, argc, argv, i))) return -1;
    } else if (strcmp(a, "--kv-reset") == 0) {
        o->kv_reset = 1;
    } else if (strcmp(a, "--kv-recover") == 0) {
        o->kv_recover = 1;
    } else if (strcmp(a, "--swa-full") == 0) {
        o->swa_full = 1;
    } else if (strcmp(a, "--mmap") == 0) {
        o->load_mode = SUBQ_LOAD_MMAP;
    } else if (strcmp(a, "--no-mmap") == 0) {
        o->load_mode = SUBQ_LOAD_READ;
    } else {
        return 0;
    }
    return 1;
}

void cli_kv_warn(const char *cmd, const char *path, const subq_context *c) {
    subq_kv_file_info k;
    subq_error err = {0};
    if (subq_context_kv_file_info(c, &k, &err) || !k.header_damaged) return;
    char lost[96] = "how many the newest counted cannot be read";
    if (k.n_committed_newest > k.n_committed)
        snprintf(lost, sizeof lost, "%d committed tokens lost", k.n_committed_newest - k.n_committed);
    else if (k.n_committed_newest >= 0)
        snprintf(lost, sizeof lost, "the newest counted %d", k.n_committed_newest);
    fprintf(stderr, "subq %s: warning: KV file %s: the newest header slot is damaged; continuing from the older "
            "slot's %d committed tokens (%s)\n", cmd, path, k.n_committed, lost);
}

/* A --kv-file that holds tokens, for a command that starts over: refused
 * without --kv-reset, emptied with it. 0 after a one-line error. */
static int kv_start_over(const char *cmd, const cli_model_opts *o, subq_context *c) {
    subq_kv_file_info k;
    subq_error err = {0};
    if (subq_context_kv_file_info(c, &k, &err)) return !cli_error(cmd, "%s", err.msg);
    if (k.n_committed == 0) return 1;
    if (!o->kv_reset)
        return !cli_error(cmd, "%s holds %d tokens (a session): %s would replace them; give --kv-reset to let it, or "
                          "another --kv-file", o->kv_file, k.n_committed, cmd);
    subq_context_reset(c);
    fprintf(stderr, "subq %s: --kv-reset: dropped the %d tokens %s held\n", cmd, k.n_committed, o->kv_file);
    return 1;
}

int cli_load(const char *cmd, const cli_model_opts *o, subq_model **m, subq_context **c) {
    subq_error err = {0};
    *m = NULL;
    *c = NULL;
    if (!o->model) {
        cli_error(cmd, "no model given; use -m FILE.gguf");
        return 0;
    }
    if ((o->kv_reset || o->kv_recover) && !o->kv_file) {
        cli_error(cmd, "%s applies to a --kv-file: give one", o->kv_reset ? "--kv-reset" : "--kv-recover");
        return 0;
    }
    if (subq_model_load_ex(o->model, o->load_mode, m, &err)) {
        cli_error(cmd, "%s", err.msg);
        return 0;
    }
    subq_context_params p = subq_context_default_params();
    p.n_ctx = o->n_ctx;
    p.n_threads = o->n_threads;
    p.kv_type = o->kv_type;
    p.kv_file = o->kv_file;
    p.kv_recover = o->kv_recover;
    p.swa_full = o->swa_full;
    if (o->n_batch > 0) p.n_batch = o->n_batch;
    if (subq_context_new(*m, &p, c, &err)) {
        cli_error(cmd, "%s", err.msg);
        subq_model_free(*m);
        *m = NULL;
        return 0;
    }
    if (o->kv_file) cli_kv_warn(cmd, o->kv_file, *c);
    if (o->kv_file && !o->kv_continues && !kv_start_over(cmd, o, *c)) {
        subq_context_free(*c);
        subq_model_free(*m);
        *c = NULL;
        *m = NULL;
        return 0;
    }
    /* as llama.cpp does: past the trained context the model is untested */
    subq_model_info info;
    subq_model_get_info(*m, &info);
    if (subq_context_n_ctx(*c) > info.n_ctx_train && !o->far_keys)
        fprintf(stderr, "subq %s: warning: a context of %d tokens exceeds the %d the model was trained on; what it "
                "computes past them may be poor\n", cmd, subq_context_n_ctx(*c), info.n_ctx_train);
    return 1;
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    const uint8_t *u = (const uint8_t *)s;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        uint8_t ch = u[i];
        if (ch >= 0x80) {
            /* JSON text is UTF-8: a byte that starts no valid character
             * becomes U+FFFD (one per byte, as Python's errors="replace"
             * does for lone bytes). */
            int l = subq_utf8_len(s + i, len - i);
            if (l > 0) fwrite(u + i, 1, (size_t)l, f);
            else fputs("\xEF\xBF\xBD", f);
            i += l > 0 ? (size_t)l : 1;
            continue;
        }
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
        i++;
    }
    fputc('"', f);
}

void cli_json_num(FILE *f, double v) {
    /* JSON has no NaN or infinity */
    if (isfinite(v)) fprintf(f, "%.10g", v);
    else fputs("null", f);
}

int cli_parse_int_list(const char *cmd, const char *flag, const char *s, long lo, long hi, int cap, int *out, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi || *n >= cap || (*end && *end != ',')) {
            cli_error(cmd, "%s expects up to %d comma-separated integers in [%ld, %ld], got '%s'", flag, cap, lo, hi, s);
            return 0;
        }
        out[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (*n == 0) cli_error(cmd, "%s expects a list of integers, got '%s'", flag, s);
    return *n > 0;
}
