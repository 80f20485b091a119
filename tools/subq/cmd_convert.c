/* subq convert: search projections between ann-sparseattention checkpoints
 * (.pt), safetensors and projection files (.gguf). The converter is the
 * Python package's (python/subq/convert.py: its pickle reader refuses
 * every name a projection checkpoint does not hold), run with Debian's
 * python3 and numpy; this command finds the package beside the binary
 * (the build tree's ../python, or an install's ../lib/python3/dist-packages)
 * and hands it the arguments. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char *help =
    "usage: subq convert IN OUT [-m MODEL.gguf] [--dtype float32|bfloat16] [--force]\n"
    "Convert search projections by the files' extensions:\n"
    "  .pt           ann-sparseattention's search_step_N.pt (search_module + config), read\n"
    "                without PyTorch and without running its pickle\n"
    "  .safetensors  the same tensors (projections.L.W_Qs.weight / W_Ks.weight), the config\n"
    "                in __metadata__\n"
    "  .gguf         subq's projection file (subq train-search's; --search takes it)\n"
    "A .gguf written from a seed checkpoint records that the seed ranks by cosine over\n"
    "every causal key: run it with --sink 0 --tail 0 --score cosine. Projections with\n"
    "rotated dims (--rope-dims > 0) or search heads cannot go back to the seed.\n\n"
    "  -m, --model FILE     the model the projections are for (needed with .gguf;\n"
    "                       checks the shapes otherwise)\n"
    "  --dtype T            element type of a .pt / .safetensors written: float32\n"
    "                       (default) or bfloat16 (the seed's)\n"
    "  --force              replace an existing output file (without it, one is refused)\n"
    "Runs python3 -m subq.convert (Debian's python3 and python3-numpy).\n";

/* The directory holding the package subq/ beside this binary, or NULL. */
static const char *package_dir(char *buf, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    static const char *const rel[] = {"../python", "../lib/python3/dist-packages"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/%s/subq/convert.py", exe, rel[i]);
        if (access(probe, R_OK) == 0) {
            snprintf(buf, cap, "%s/%s", exe, rel[i]);
            return buf;
        }
    }
    return NULL;
}

int cmd_convert(int argc, char **argv) {
    const char *cmd = "convert";
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) return cli_help(help);
    char dir[PATH_MAX + 64];
    if (!package_dir(dir, sizeof dir))
        return cli_error(cmd, "the Python package subq (convert.py) is not beside this binary (../python or "
                         "../lib/python3/dist-packages); run python3 -m subq.convert from the checkout's python/");
    const char *old = getenv("PYTHONPATH");
    char path[2 * PATH_MAX + 64];
    snprintf(path, sizeof path, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
    if (setenv("PYTHONPATH", path, 1)) return cli_error(cmd, "cannot set PYTHONPATH: %s", strerror(errno));
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return cli_error(cmd, "out of memory");
    args[0] = "python3";
    args[1] = "-m";
    args[2] = "subq.convert";
    for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
    fflush(stdout);
    execv("/usr/bin/python3", args);
    const int e = errno;
    free(args);
    return cli_error(cmd, "cannot run /usr/bin/python3 (install python3 and python3-numpy): %s", strerror(e));
}
