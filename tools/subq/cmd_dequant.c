/* subq dequant: raw blocks of a ggml type -> little-endian float32 (a test
 * hook: tests/ref/check_kquants.py compares it with a numpy implementation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "kernels/kernels.h"

static const char *help =
    "usage: subq dequant --type T -i IN -o OUT [--scalar]\n"
    "Dequantise raw blocks of a ggml type to float32, for testing.\n"
    "IN holds whole blocks back to back (no header); OUT gets one little-endian\n"
    "float32 per element.\n\n"
    "  --type T        f32, f16, bf16, q8_0, q4_0, q4_K, q5_K or q6_K\n"
    "  -i, --input F   raw blocks (its size must be a multiple of the block size)\n"
    "  -o, --output F  float32 output\n"
    "  --scalar        use the portable C kernels instead of the best for this CPU\n";

int cmd_dequant(int argc, char **argv) {
    const char *cmd = "dequant";
    const char *tname = NULL, *in = NULL, *out = NULL;
    int scalar = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--type")) {
            if (!(tname = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-i") || !strcmp(a, "--input")) {
            if (!(in = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--scalar")) {
            scalar = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq dequant --help)", a);
        }
    }
    if (!tname) return cli_error(cmd, "no type given; use --type T (see subq dequant --help)");
    if (!in || !out) return cli_error(cmd, "need both -i IN and -o OUT");
    uint32_t type = GGML_TYPE_COUNT;
    for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++) {
        const ggml_type_traits *tr = ggml_type_get(t);
        if (tr && !strcasecmp(tr->name, tname)) type = t;
    }
    const ggml_type_traits *tr = ggml_type_get(type);
    if (!tr) return cli_error(cmd, "unknown type '%s' (see subq dequant --help)", tname);
    const kernels *k = scalar ? kernels_scalar() : kernels_get();
    if (!tr->can_dequant || !k->dequant[type]) return cli_error(cmd, "type %s cannot be dequantised yet", tr->name);

    subq_error err = {0};
    char *buf = NULL;
    size_t len = 0;
    if (cli_read_file(in, &buf, &len, &err)) return cli_error(cmd, "%s", err.msg);
    if (len % (size_t)tr->type_size) {
        free(buf);
        return cli_error(cmd, "%s is %zu bytes, not a whole number of %s blocks (%d bytes each)", in, len, tr->name,
                         tr->type_size);
    }
    const int64_t n = (int64_t)(len / (size_t)tr->type_size) * tr->block_size;
    float *y = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!y) {
        free(buf);
        return cli_error(cmd, "out of memory for %lld floats", (long long)n);
    }
    k->dequant[type](buf, y, n);
    free(buf);
    /* little-endian bytes whatever the host order */
    unsigned char *le = (unsigned char *)y;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        le[4 * i] = (unsigned char)u, le[4 * i + 1] = (unsigned char)(u >> 8);
        le[4 * i + 2] = (unsigned char)(u >> 16), le[4 * i + 3] = (unsigned char)(u >> 24);
    }
    FILE *f = fopen(out, "wb");
    if (!f) {
        free(y);
        return cli_error(cmd, "cannot create %s", out);
    }
    size_t wrote = fwrite(y, 4, (size_t)n, f);
    int bad = wrote != (size_t)n || fclose(f) != 0;
    free(y);
    if (bad) return cli_error(cmd, "error writing %s", out);
    return 0;
}
