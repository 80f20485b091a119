/* Scattered row reads from a file larger than a step needs: through a
 * memory mapping (a page fault per new page, as the KV file is read today)
 * against one pread() per row, with the page cache warm and after dropping
 * it, for the 136-byte rows of one KV head (q8_0, head_dim 128: today's
 * layout) and the 1,088-byte runs of all 8 KV heads of a slot (a slot-major
 * layout). A decode step of the Qwen3-0.6B shape at K = 128 (+ 4 sinks, 16
 * tail) reads 148 slots x 8 heads x K and V x 28 layers = 66,304 head rows
 * or 8,288 slot runs, at random places of a 7.9 GB file at 128K tokens.
 *
 *   bench_row_read FILE [GB] [STEPS]
 * writes FILE (GB gigabytes, default 8) once when it is shorter, then
 * prints ms per step for each way; "cold" drops the page cache first (root:
 * /proc/sys/vm/drop_caches), "warm" reads every row once before timing.
 *
 * Build by hand (not part of the CMake build):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE bench/bench_row_read.c -o /tmp/bench_row_read
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { HEAD_ROW = 136, SLOT_RUN = 8 * 136, STEP_SLOTS = 148, LAYERS_X_KV = 28 * 2, HEADS = 8 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static int drop_caches(void) {
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f) return 0;
    int ok = fputs("3\n", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Offsets of one step's reads: rows of `bytes` at random row-aligned places. */
static void step_offsets(uint64_t *off, int n, size_t bytes, uint64_t file_bytes, uint64_t *rng) {
    const uint64_t rows = file_bytes / bytes;
    for (int i = 0; i < n; i++) off[i] = next_rand(rng) % rows * bytes;
}

/* ms per step of `steps` steps; mode 0: mmap + memcpy, 1: pread per row.
 * warm: the same rows are read once before (through pread: the page cache
 * holds them, the timed mapping is fresh, so its page faults count, as for
 * rows a decode step has not touched before). */
static double run(int fd, uint64_t file_bytes, int mode, size_t bytes, int n, int steps, uint64_t seed, int warm,
                  double *checksum) {
    uint64_t *off = malloc((size_t)n * sizeof *off);
    char *buf = malloc(bytes);
    double sum = 0, t = 0;
    for (int pass = warm ? 0 : 1; pass < 2; pass++) {
        const char *map = NULL;
        if (pass == 1 && mode == 0) {
            map = mmap(NULL, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) return -1;
            madvise((void *)map, file_bytes, MADV_RANDOM);
        }
        uint64_t rng = seed;
        const double t0 = now_s();
        for (int s = 0; s < steps; s++) {
            step_offsets(off, n, bytes, file_bytes, &rng);
            for (int i = 0; i < n; i++) {
                if (map) memcpy(buf, map + off[i], bytes);
                else if (pread(fd, buf, bytes, (off_t)off[i]) != (ssize_t)bytes) return -1;
                sum += (unsigned char)buf[bytes / 2];
            }
        }
        t = now_s() - t0;
        if (map) munmap((void *)map, file_bytes);
    }
    free(off);
    free(buf);
    *checksum += sum;
    return 1e3 * t / steps;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_row_read FILE [GB] [STEPS]\n");
        return 1;
    }
    const double gb = argc > 2 ? atof(argv[2]) : 8.0;
    const int steps = argc > 3 ? atoi(argv[3]) : 10;
    const uint64_t file_bytes = (uint64_t)(gb * 1e9) / 4096 * 4096;
    int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    if ((uint64_t)st.st_size < file_bytes) { /* write it once: pseudo-random bytes, not holes */
        enum { CHUNK = 1 << 24 };
        uint64_t *chunk = malloc(CHUNK), rng = 0x9E3779B97F4A7C15ull;
        for (uint64_t at = 0; at < file_bytes; at += CHUNK) {
            for (size_t i = 0; i < CHUNK / 8; i++) chunk[i] = next_rand(&rng);
            size_t n = file_bytes - at < CHUNK ? (size_t)(file_bytes - at) : CHUNK;
            if (pwrite(fd, chunk, n, (off_t)at) != (ssize_t)n) {
                perror("write");
                return 1;
            }
        }
        fsync(fd);
        free(chunk);
    }
    printf("file %.1f GB, %d steps; ms per step (reads per step)\n", (double)file_bytes / 1e9, steps);
    const struct {
        const char *name;
        size_t bytes;
        int n;
    } layouts[2] = {{"head rows (136 B)", HEAD_ROW, STEP_SLOTS * HEADS * LAYERS_X_KV},
                    {"slot runs (1,088 B)", SLOT_RUN, STEP_SLOTS * LAYERS_X_KV}};
    double checksum = 0;
    for (int warm = 1; warm >= 0; warm--) {
        for (int l = 0; l < 2; l++) {
            for (int mode = 0; mode < 2; mode++) {
                if (!warm && !drop_caches()) {
                    fprintf(stderr, "cannot drop the page cache (needs root)\n");
                    return 1;
                }
                const double ms = run(fd, file_bytes, mode, layouts[l].bytes, layouts[l].n, steps,
                                      0x1234567u + (uint64_t)(l * 2 + mode) * 7919u, warm, &checksum);
                printf("%-5s %-20s %-6s %9.1f ms  (%d)\n", warm ? "warm" : "cold", layouts[l].name,
                       mode ? "pread" : "mmap", ms, layouts[l].n);
                fflush(stdout);
            }
        }
    }
    fprintf(stderr, "(checksum %.0f)\n", checksum);
    close(fd);
    return 0;
}
