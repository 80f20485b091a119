/* subq dequant: raw blocks of a ggml type -> little-endian float32 (a test
 * hook: tests/ref/check_kquants.py compares it with a numpy implementation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "subq_lab.h"

static const char *help =
    "usage: subq dequant --type T -i IN -o OUT [--scalar] [--force]\n"
    "Dequantise raw blocks of a ggml type to float32, for testing.\n"
    "IN holds whole blocks back to back (no header); OUT gets one little-endian\n"
    "float32 per element.\n\n"
    "  --type T        f32, f16, bf16, q8_0, q4_0, q4_K, q5_K or q6_K\n"
    "  -i, --input F   raw blocks (its size must be a multiple of the block size)\n"
    "  -o, --output F  float32 output (written atomically)\n"
    "  --force         replace an existing output file (without it, one is refused)\n"
    "  --scalar        use the portable C kernels instead of the best for this CPU\n";

int cmd_dequant(int argc, char **argv) {
    const char *cmd = "dequant";
    const char *tname = NULL, *in = NULL, *out = NULL;
    int scalar = 0, force = 0;
    const cli_flag flags[] = {
        CLI_STRING(NULL, "--type", &tname),      CLI_STRING("-i", "--input", &in),
        CLI_STRING("-o", "--output", &out),      CLI_SET(NULL, "--scalar", &scalar),
        CLI_SET(NULL, "--force", &force),
    };
    int rc;
    if (!cli_parse_flags(cmd, help, argc, argv, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (!tname) return cli_error(cmd, "no type given; use --type T (see subq dequant --help)");
    if (!in || !out) return cli_error(cmd, "need both -i IN and -o OUT");
    if (!cli_output_ok(cmd, out, force)) return 1;
    subq_error err = {0};
    char *buf = NULL;
    size_t len = 0, n = 0;
    if (subq_read_file(in, 0, &buf, &len, &err)) return cli_error(cmd, "%s", err.msg);
    /* every supported type stores at least 4 bits per element */
    size_t cap = 2 * len + 1;
    float *y = malloc(cap * sizeof(float));
    if (!y) {
        free(buf);
        return cli_error(cmd, "out of memory for %zu floats", cap);
    }
    subq_status st = subq_dequantize(tname, buf, len, scalar, y, cap, &n, &err);
    free(buf);
    if (st) {
        free(y);
        return cli_error(cmd, "%s: %s", in, err.msg);
    }
    /* little-endian bytes whatever the host order */
    unsigned char *le = (unsigned char *)y;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        le[4 * i] = (unsigned char)u, le[4 * i + 1] = (unsigned char)(u >> 8);
        le[4 * i + 2] = (unsigned char)(u >> 16), le[4 * i + 3] = (unsigned char)(u >> 24);
    }
    st = subq_write_file(out, y, 4 * n, &err);
    free(y);
    return st ? cli_error(cmd, "%s", err.msg) : 0;
}
